"""Probe: products with a short k (the writes of C bound them) on the small-product kernel's tiles (the fast variant's
short-k route takes 32 x 64 for FP64, _matmul_batch.short_k_tile's 64 x 64 or 64 x 128 for FP32), beside
cudakit.matmul as planned with the short-k route off (the register tiles) and cupy.matmul.

    PYTHONPATH=. python3 tools/short_k_probe.py [--tiles 32x64 64x64 64x128] [--shapes float32:8192x4x8192:CC ...]

A tile outside the dtype's standard module is compiled in a module of its own. Each entry's result is checked against
float64 before it is timed (GPU time, cudakit.bench.timing.measure); the C column is GB/s of C written.
"""
import argparse

import cupy
import numpy as np

import cudakit
from cudakit import _check, _compile, _matmul_batch, _matmul_routes
from cudakit.bench import timing
from cudakit.testing import poisoned, random_array

BUDGET = timing.Budget(row_s=0.05, min_runs=3, max_runs=40)
SHAPES = ["float32:1613724x1x176:FF", "float32:8192x4x8192:CC", "float32:8192x8x8192:FF", "float32:8192x16x8192:CC",
          "float32:3000x3x50000:CF", "float32:4096x1x4096:CC", "float32:105579x8x287:FC", "float64:8192x4x8192:CC",
          "float64:3288x4x40049:FF"]


def own_module(real=_matmul_batch.kernel):
    """small_launches' kernel lookup, with a tile outside the standard module compiled on its own."""
    return lambda family, expression, expressions: real(family, expression,
                                                        expressions if expression in expressions else (expression,))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tiles", nargs="*", default=["32x64", "64x64", "64x128"])
    p.add_argument("--shapes", nargs="*", default=SHAPES)
    args = p.parse_args()
    tiles = [tuple(map(int, t.split("x"))) for t in args.tiles]
    _matmul_batch.kernel = own_module()
    for text in args.shapes:
        dtype, dims, order = text.split(":")
        m, k, n = map(int, dims.split("x"))
        A, B = random_array((m, k), dtype, order[0]), random_array((k, n), dtype, order[1])
        gb = m * n * np.dtype(dtype).itemsize / 1e3
        found = []
        keep = _matmul_batch.SHORT_K_F32, _matmul_batch.SHORT_K_F32_MID, _matmul_batch.SHORT_K_F64
        _matmul_batch.SHORT_K_F32 = _matmul_batch.SHORT_K_F32_MID = _matmul_batch.SHORT_K_F64 = 0
        _matmul_routes._routes.clear()
        entries = [("tiles", lambda out: cudakit.matmul(A, B, out=out, check=False))]
        entries += [(f"small {bm}x{bn}", lambda out, t=(bm, bn): _compile.launch(
            *_matmul_batch.small_launches(t, A, B, out.data.ptr, 1, (0, 0, 0))[0])) for bm, bn in tiles]
        entries += [("cupy", lambda out: out.__setitem__(Ellipsis, cupy.matmul(A, B)))]
        for label, run in entries:
            out = poisoned((m, n), dtype)
            run(out)
            err = _check.product_error(out, A, B)
            if not err <= _check.tolerance(np.dtype(dtype), k):
                found.append(f"{label} WRONG {err:.1e}")
                continue
            if label == "cupy":
                us = timing.measure(lambda i: cupy.matmul(A, B), BUDGET)[0].median * 1e6
            else:
                us = timing.measure(lambda i: run(out), BUDGET)[0].median * 1e6
            found.append(f"{label} {us:.1f} µs ({gb / us:.0f} GB/s)")
        _matmul_batch.SHORT_K_F32, _matmul_batch.SHORT_K_F32_MID, _matmul_batch.SHORT_K_F64 = keep
        _matmul_routes._routes.clear()
        print(f"{text:28} " + " | ".join(found), flush=True)


if __name__ == "__main__":
    main()
