"""Probe: FP64 long-k products with a small C on the pipelined DMMA kernel, k split (_dmma.split_launcher), every
PLANNED and SPLIT_TILES tile and NARROW_SPLIT_TILE at 1, 2 and 4 rounds of its blocks (runs cut as the planner
cuts them), beside cupy.matmul and cudakit.matmul (the planner's pick).

    PYTHONPATH=. python3 tools/dmma_split_probe.py [--all-tiles] 28x587148x48:CF ...   (m x k x n, A's and B's orders)

--all-tiles: every tile of _dmma.TILES that fits.

Each entry is checked against cupy.matmul first; GPU time, cudakit.bench.timing.measure (CUDA events, median).
An operand the split cannot read in place (no unit stride: split_launcher gives None) is reported as such.
"""
import importlib
import sys

import cupy
import numpy as np

import cudakit
from cudakit import _check, _dmma, _tune
from cudakit.bench import timing
from cudakit.testing import product_operands

mm = importlib.import_module("cudakit.matmul")
BUDGET = timing.Budget(row_s=0.05, min_runs=3, max_runs=60)


def entries(A, B, out, ref, k, tiles):
    """(seconds, label) of every tile and round count that runs and is right."""
    m, n = out.shape
    found = []
    for tile in (t for t in tiles if _dmma.fits(t, 0)):
        grid = -(-m // tile.bm) * -(-n // tile.bn)
        for rounds in (1, 2, 4):
            wanted = max(1, min(k // 256, rounds * _dmma.resident(tile, 0) // grid))
            splits, depth = _tune.split_depth(k, wanted, tile.bk, odd=True)  # (as the planner cuts them)
            run = _dmma.split_launcher(A, B, out, tile, splits, depth)
            if run is None:
                return [(float("inf"), "not read in place: no split launcher")]
            out.fill(np.nan)
            run(A, B, out)
            err = _check.relative_error(out, ref)
            if not err <= _check.tolerance(np.float64, k):
                found.append((float("inf"), f"{tile.name} x{splits} WRONG {err:.1e}"))
                continue
            found.append((timing.measure(lambda i: run(A, B, out), BUDGET)[0].median, f"{tile.name} x{splits}"))
    return sorted(found)


def main():
    split_tiles = _dmma.PLANNED + _dmma.SPLIT_TILES + (_dmma.NARROW_SPLIT_TILE,)
    tiles = _dmma.TILES if "--all-tiles" in sys.argv else tuple(dict.fromkeys(split_tiles))
    for text in (a for a in sys.argv[1:] if a != "--all-tiles"):
        A, B, out, (m, k, n) = product_operands(text, np.float64)
        ref = cupy.matmul(A, B)
        t_cupy = timing.measure(lambda i: cupy.matmul(A, B), BUDGET)[0].median
        t_fast = timing.measure(lambda i: cudakit.matmul(A, B, out=out, check=False), BUDGET)[0].median
        tile, splits, _ = mm.plan(0, np.float64, m, n, k)
        found = entries(A, B, out, ref, k, tiles)
        print(f"{text:24} plan {tile.name} x{splits}: cupy {t_cupy * 1e6:.1f} µs, fast {t_fast * 1e6:.1f} "
              f"({t_cupy / t_fast:.2f}x) | " + "; ".join(f"{label} {t * 1e6:.0f}" for t, label in found), flush=True)


if __name__ == "__main__":
    main()
