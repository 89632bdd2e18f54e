"""Probe: FP64 products of a small C with a long k on kernels/matmul_longk.cu (_longk), every tile in both
orientations with the planner's runs, and the planner's pick at half and twice its runs, beside cupy.matmul and
cudakit.matmul (its route today).

    PYTHONPATH=. python3 tools/longk_probe.py [--pick-only] [--chunks] 34x2597332x19:FC ...  (m x k x n, the orders)

--chunks: also the pick's tile and the 8-byte tiles with the other copy width (16 <-> 8 bytes).

Each entry is checked against cupy.matmul first (relative error within _check's float64 tolerance); GPU time is
cudakit.bench.timing.measure (CUDA events, median); GB/s counts A and B read once.
"""
import importlib
import sys

import cupy
import numpy as np

import cudakit
from cudakit import _check, _longk
from cudakit.bench import timing
from cudakit.testing import product_operands

mm = importlib.import_module("cudakit.matmul")
BUDGET = timing.Budget(row_s=0.05, min_runs=3, max_runs=60)


def timed(plan, A, B, out, ref, k):
    """(seconds, label) of one plan, or (inf, the error) where its result is wrong."""
    run = _longk.launcher(A, B, out, plan)
    out.fill(np.nan)
    run(A, B, out)
    err = _check.relative_error(out, ref)
    label = f"{plan.tile.mt}x{plan.tile.nt}{'T' if plan.swap else ''}c{plan.tile.chunk} r{plan.runs}"
    if not err <= _check.tolerance(np.float64, k):
        return float("inf"), f"{label} WRONG {err:.1e}"
    return timing.measure(lambda i: run(A, B, out), BUDGET)[0].median, label


def main():
    pick_only = "--pick-only" in sys.argv
    for text in (a for a in sys.argv[1:] if not a.startswith("--")):
        A, B, out, (m, k, n) = product_operands(text, np.float64)
        ref = cupy.matmul(A, B)
        t_cupy = timing.measure(lambda i: cupy.matmul(A, B), BUDGET)[0].median
        t_fast = timing.measure(lambda i: cudakit.matmul(A, B, out=out, check=False), BUDGET)[0].median
        pick = _longk.plan(m, n, k, 0)
        plans = [pick] + [_longk.plan(m, n, k, 0, pick.tile, pick.swap, r) for r in (max(1, pick.runs // 2),
                                                                                     2 * pick.runs)]
        if not pick_only:
            plans += [_longk.plan(m, n, k, 0, t, s) for t in _longk.TILES for s in (False, True) if _longk.fits(t, 0)]
        if "--chunks" in sys.argv:  # the pick's and the 8-byte tiles' other copy width (modules built here)
            other = [_longk.LongkTile(t.mt, t.nt, t.stages, 3 - t.chunk) for t in (pick.tile,) + _longk.TILES
                     if t == pick.tile or t.chunk == 1]
            plans += [_longk.plan(m, n, k, 0, t, s) for t in dict.fromkeys(other) for s in (False, True)]
        found = [timed(p, A, B, out, ref, k) for p in dict.fromkeys(plans)]
        gbs = (m + n) * k * 8 / 1e9
        print(f"{text:24} cupy {t_cupy * 1e6:.1f} µs ({gbs / t_cupy:.0f} GB/s), fast {t_fast * 1e6:.1f} "
              f"({t_cupy / t_fast:.2f}x) | pick {found[0][1]} {found[0][0] * 1e6:.1f} ({t_cupy / found[0][0]:.2f}x, "
              f"{gbs / found[0][0]:.0f} GB/s) | " + "; ".join(f"{label} {t * 1e6:.0f}" for t, label in sorted(found)),
              flush=True)


if __name__ == "__main__":
    main()
