"""Probe: products with a short k (the writes of C bound them) on the short-k writer (kernels/matmul_shortk.cu, its
planned layout and every other), beside cudakit.matmul's route as it stands, the small-product kernel's short-k tile
(2-D) and cupy.matmul.

    PYTHONPATH=. python3 tools/short_k_probe.py [--shapes float32:8192x4x8192:CC float32:1821x511x2x31:CC ...]

A shape of four sides is a batch (count x m x k x n). Each entry's result is checked against float64 before it is
timed (GPU time, cudakit.bench.timing.measure, operand sets rotated past the L2); GB/s counts C written.
"""
import argparse

import cupy
import numpy as np

import cudakit
from cudakit import _check, _compile, _matmul_batch, _matmul_routes, _shortk
from cudakit.bench import timing
from cudakit.testing import poisoned, random_array

BUDGET = timing.Budget(row_s=0.05, min_runs=3, max_runs=40)
SHAPES = ["float32:6832x13x58258:CC", "float32:6063673x2x44:CF", "float32:85x1x3745587:FC", "float32:38x15x601781:CC",
          "float32:8192x4x8192:CC", "float32:8192x16x8192:CC", "float32:3000x3x50000:CF", "float32:1613724x1x176:FF",
          "float32:105579x8x287:FC", "float32:100953x8x102:CC", "float32:1821x511x2x31:CC", "float32:2x23x499671:CC",
          "float32:4x8x2000000:CC", "float32:2000000x8x20:CC", "float32:500x2x300x300:CC",
          "float64:8192x4x8192:CC", "float64:3288x4x40049:FF", "float64:9424x6x8408:FF", "float64:500x2x300x300:CC",
          "float64:3000000x4x24:CC", "float64:456x12x100000:CF"]


def operands(dtype, dims, order):
    *batch, m, k, n = dims
    a_shape, b_shape = (*batch, m, k), (*batch, k, n)
    per_set = (m * k + k * n + m * n) * int(np.prod(batch or [1])) * np.dtype(dtype).itemsize
    sets = []
    for _ in range(timing.sets_past_l2(per_set, cupy.cuda.runtime.getDevice(), max_sets=8)):
        A, B = random_array(a_shape, dtype, order[0]), random_array(b_shape, dtype, order[1])
        sets.append((A, B, poisoned((*batch, m, n), dtype)))
    return sets


def shortk_run(plan):
    def run(A, B, out):
        a0, b0 = (A[0], B[0]) if A.ndim == 3 else (A, B)
        m = a0.shape[0]
        n = b0.shape[1]
        count = A.shape[0] if A.ndim == 3 else 1
        steps = (A.strides[0] // A.itemsize, B.strides[0] // B.itemsize, m * n) if A.ndim == 3 else (0, 0, 0)
        for args in _shortk.launches(plan, a0, b0, out.data.ptr, count, steps):
            _compile.launch(*args)
    return run


def old_route(A, B, out):
    """cudakit.matmul with the short-k writer off (its route caches cleared either side)."""
    keep = _shortk.TAKES
    _shortk.TAKES = {}
    _matmul_routes._routes.clear()
    _matmul_batch._BATCH_LAUNCHES.clear()
    try:
        cudakit.matmul(A, B, out=out)
    finally:
        _shortk.TAKES = keep
        _matmul_routes._routes.clear()
        _matmul_batch._BATCH_LAUNCHES.clear()


def small_run(A, B, out):
    m, k = A.shape
    tile = _matmul_batch.short_k_tile(A.itemsize, m, B.shape[1])
    _compile.launch(*_matmul_batch.small_launches(tile, A, B, out.data.ptr, 1, (0, 0, 0))[0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="*", default=SHAPES)
    args = p.parse_args()
    for text in args.shapes:
        dtype, dims, order = text.split(":")
        dims = tuple(map(int, dims.split("x")))
        sets = operands(dtype, dims, order)
        *batch, m, k, n = dims
        gb = m * n * int(np.prod(batch or [1])) * np.dtype(dtype).itemsize / 1e3
        item = np.dtype(dtype).itemsize
        entries = [("route", lambda A, B, out: cudakit.matmul(A, B, out=out)), ("old route", old_route),
                   ("cupy", lambda A, B, out: cupy.matmul(A, B, out=out))]
        if not batch and k <= _matmul_batch.SMALL_MAX_K:
            entries.append(("small", small_run))
        picked = None
        if k <= _shortk.MAX_K:
            count = batch[0] if batch else 1
            picked = _shortk.plan(m, n, k, item, count=count)
            entries.append((f"shortk {picked.lanes}x{picked.cols}*", shortk_run(picked)))
            entries.append(("1 abreast, 16 passes", shortk_run(_shortk.plan(
                m, n, k, item, (picked.lanes, picked.cols), min(16 * 256 // picked.lanes, -(-m // 8) * 8), 1))))
            entries += [(f"shortk {lanes}x{cols}", shortk_run(_shortk.plan(m, n, k, item, (lanes, cols), count=count)))
                        for lanes, cols in _shortk.LAYOUTS[item] if (lanes, cols) != (picked.lanes, picked.cols)]
        found = []
        for label, run in entries:
            A, B, out = sets[0]
            run(A, B, out)
            err = _check.relative_error(out, cupy.matmul(A.astype(cupy.float64), B.astype(cupy.float64)))
            if not err <= _check.tolerance(np.dtype(dtype), k):
                found.append(f"{label} WRONG {err:.1e}")
                continue
            us = timing.measure(lambda i: run(*sets[i % len(sets)]), BUDGET)[0].median * 1e6
            found.append(f"{label} {us:.1f} ({gb / us:.0f})")
        plan = f"rows {picked.rows}, {picked.warps_n} abreast" if picked else "k past the short-k writer"
        print(f"{text:28} {plan}: " + " | ".join(found) + "  µs (GB/s of C)", flush=True)


if __name__ == "__main__":
    main()
