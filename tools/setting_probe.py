"""Probe: 2-D products through cudakit.matmul under the library's settings and under another (--set), in turn in one
process (library, setting, library: the better library time is kept), beside cupy.matmul: what a planner constant
changes, on the shapes it changes.

    PYTHONPATH=. python3 tools/setting_probe.py --set "_dmma.SPLIT_DEPTH=1024" [--dtype float64] 1303x1303x167:CC ...
    PYTHONPATH=. python3 tools/setting_probe.py --set "..." --shapes-file FILE    (the shapes, blank-separated)

Each result is checked against cupy.matmul first (a wrong one is printed as such); GPU time,
cudakit.bench.timing.measure (CUDA events, median). The last line: geometric means and counts against CuPy and
between the two.
"""
from __future__ import annotations

import argparse

import cupy
import numpy as np

import cudakit
from batched_probe import applied, setting  # (tools/: --set's parsing, and forgetting the planned routes)
from cudakit import _check
from cudakit.bench import timing
from cudakit.testing import product_operands

BUDGET = timing.Budget(row_s=0.03, min_runs=3, max_runs=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", required=True, help="module.NAME=EXPR[; ...]: the other setting")
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--shapes-file")
    ap.add_argument("shapes", nargs="*", help="MxKxN:AB (A's and B's orders, C or F)")
    args = ap.parse_args()
    dtype = np.dtype(args.dtype)
    shapes = args.shapes + (open(args.shapes_file).read().split() if args.shapes_file else [])
    other, ratios = setting(args.set), []
    for text in shapes:
        A, B, out, (m, k, n) = product_operands(text, dtype)
        ref = cupy.matmul(A, B)
        t_cupy = timing.measure(lambda i: cupy.matmul(A, B), BUDGET)[0].median
        times = {}
        for label, changes in (("library", []), ("set", other), ("library", [])):
            before = applied(changes)
            out.fill(np.nan)
            cudakit.matmul(A, B, out=out)
            if not _check.relative_error(out, ref) <= _check.tolerance(dtype, k):
                print(f"{text}: WRONG under {label}", flush=True)
            times.setdefault(label, []).append(
                timing.measure(lambda i: cudakit.matmul(A, B, out=out, check=False), BUDGET)[0].median)
            applied(before)
        lib, new = min(times["library"]), times["set"][0]
        ratios.append((t_cupy / lib, t_cupy / new))
        print(f"{text:22} cupy {t_cupy * 1e6:8.1f} library {lib * 1e6:8.1f} ({t_cupy / lib:.2f}) set {new * 1e6:8.1f} "
              f"({t_cupy / new:.2f}) set/library {lib / new:.2f}", flush=True)
        A = B = out = ref = None  # (freed before the next shape draws its operands)
        cupy.get_default_memory_pool().free_all_blocks()
    lib, new = (np.array([r[i] for r in ratios]) for i in (0, 1))
    geo = lambda x: float(np.exp(np.log(x).mean()))
    print(f"library: geomean {geo(lib):.3f} min {lib.min():.2f} under 0.9 {(lib < 0.9).sum()} | set: geomean "
          f"{geo(new):.3f} min {new.min():.2f} under 0.9 {(new < 0.9).sum()} | set/library geomean "
          f"{geo(new / lib):.3f}, {(new / lib > 1.05).sum()} over 5% faster, {(new / lib < 0.95).sum()} over 5% slower")


if __name__ == "__main__":
    main()
