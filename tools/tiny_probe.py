"""Timing probe for the tiny-product kernel over a deep k: each batch on the tiny kernel with its k in one group of
threads and cut among TINY_GROUPS[-1] groups (and on the dots kernel where C is at most 16 x 16), beside the fast
variant's route and cupy.matmul.

    PYTHONPATH=. python3 tools/tiny_probe.py [--shapes dtype:batch:m:k:n,...] [--small]

--small: each batch on every tile of the small-product kernel instead (k at most SMALL_MAX_K).

Every result is checked against float64 first; GPU time with cudakit.bench.timing.measure (operand sets rotated past
the L2, median).
"""
from __future__ import annotations

import argparse

import cupy
import numpy as np

import cudakit
from cudakit import _check, _matmul_batch, _matmul_routes
from cudakit._compile import launch
from cudakit.bench import timing

BUDGET = timing.Budget(row_s=0.05, min_runs=5, max_runs=200)
SHAPES = ("float64:456:25:450:15,float64:1187:26:80:21,float64:3746:6:85:4,float64:200:32:1000:32,"
          "float64:60:16:2000:16,float64:1000:20:200:20,float64:132:32:4096:32,float64:2000:32:256:32,"
          "float64:4000:16:256:16,float64:8000:16:128:16,"
          "float32:456:25:450:15,float32:1187:26:80:21,float32:300:32:1000:32,float32:2000:16:300:16,"
          "float32:5000:32:128:32,float32:4000:32:256:32,float32:16000:16:128:16")


def operand_sets(dtype, b, m, k, n):
    per_set = (m * k + k * n + m * n) * b * np.dtype(dtype).itemsize
    sets = []
    for _ in range(timing.sets_past_l2(per_set, cupy.cuda.runtime.getDevice(), max_sets=8)):
        A = cupy.random.uniform(0.5, 1.5, (b, m, k)).astype(dtype)
        B = cupy.random.uniform(-1.0, 1.5, (b, k, n)).astype(dtype)
        sets.append((A, B, cupy.full((b, m, n), cupy.nan, dtype)))
    return sets


def timed(run, sets, k) -> str:
    A, B, out = sets[0]
    out.fill(cupy.nan)
    run(A, B, out)
    err = _check.relative_error(out, cupy.matmul(A.astype(cupy.float64), B.astype(cupy.float64)))
    if not err <= _check.tolerance(out.dtype, k):
        return f"WRONG {err:.1e}"
    return timing.measure(lambda i: run(*sets[i % len(sets)]), BUDGET)[0].median * 1e6


def tiny_run(groups):
    def run(A, B, out):
        b, m, k = A.shape
        n = B.shape[2]
        steps = (m * k, k * n, m * n)
        for args in _matmul_batch.tiny_launches(_matmul_batch.tiny_tile(m, n, 64), A[0], B[0], out.data.ptr, b,
                                                steps, groups):
            launch(*args)
    return run


def small_run(tile):
    def run(A, B, out):
        b, m, k = A.shape
        n = B.shape[2]
        for args in _matmul_batch.small_launches(tile, A[0], B[0], out.data.ptr, b, (m * k, k * n, m * n)):
            launch(*args)
    return run


def dots_run(A, B, out):
    b, m, k = A.shape
    n = B.shape[2]
    for args in _matmul_routes.dots_launches(A[0], B[0], out.data.ptr, b, (m * k, k * n, m * n)):
        launch(*args)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default=SHAPES, help="dtype:batch:m:k:n,...")
    p.add_argument("--small", action="store_true", help="every small-product tile instead")
    args = p.parse_args()
    sm = cupy.cuda.Device().attributes["MultiProcessorCount"]
    for spec in args.shapes.split(","):
        dtype, *dims = spec.split(":")
        b, m, k, n = map(int, dims)
        if args.small and k > _matmul_batch.SMALL_MAX_K:
            print(f"{spec}: k past the small kernel's SMALL_MAX_K, skipped")
            continue
        sets = operand_sets(dtype, b, m, k, n)
        row = {"route": timed(lambda A, B, out: cudakit.matmul(A, B, out=out), sets, k),
               "cupy": timed(lambda A, B, out: cupy.matmul(A, B, out=out), sets, k)}
        if args.small:
            picked = _matmul_batch.small_tile(m, n, k, np.dtype(dtype).itemsize)
            for tile in _matmul_batch.SMALL_TILES:
                if np.dtype(dtype).itemsize == 4 or tile not in _matmul_batch.SMALL_WIDE:
                    mark = "*" if tile == picked else ""
                    row[f"{tile[0]}x{tile[1]}{mark}"] = timed(small_run(tile), sets, k)
        else:
            for groups in _matmul_batch.TINY_GROUPS:
                row[f"tiny{groups}"] = timed(tiny_run(groups), sets, k)
        if not args.small and max(m, n) <= _matmul_batch.BATCH_DOTS_MAX_SIDE:
            row["dots"] = timed(dots_run, sets, k)
        cells = "  ".join(f"{name} {v:8.1f}" if isinstance(v, float) else f"{name} {v}" for name, v in row.items())
        print(f"{dtype} {b} x {m}x{k}x{n} ({b / sm:.1f}/SM): {cells}  us", flush=True)


if __name__ == "__main__":
    main()
