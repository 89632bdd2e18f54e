"""Timing probe for batches: cudakit.matmul and cudakit.matvec on batched operands against cupy.matmul.

    PYTHONPATH=. python3 tools/batched_probe.py [--seed S] [--count N] [--json FILE]
    PYTHONPATH=. python3 tools/batched_probe.py --shapes float64:456:25:450:15,float32:8951:17:29:107

--shapes times only the batches named (dtype:batch:m:k:n), each with the route its launches took.
--set "module.NAME=EXPR[; ...]" (repeatable, e.g. _matmul_batch.SHORT_K_F64_BATCH=32 or "_dmma.oriented=lambda t, s:
t") times each shape again under each setting alone (the planner's caches cleared), then the library once more.

The goal shapes of issue 17 (64 x 512^3, 10^4 x 32^3), batched matrix-vector products, then N batched shapes drawn
as the bench's sweep draws them (C order, batch counts 1 to 10^4). Every result is checked against float64 first;
timed with cudakit.bench.timing.measure (CUDA events, operand sets rotated past the L2, median).
"""
from __future__ import annotations

import argparse
import importlib
import json
import random

import cupy
import numpy as np

import cudakit
from cudakit import _check, _dmma, _fewrows, _matmul_batch, _matmul_plan, _matmul_routes, _shortk, matmul_tc
from cudakit.bench import timing

BUDGET = timing.Budget(row_s=0.05, min_runs=5, max_runs=200)
FIXED = [("float32", 64, 512, 512, 512), ("float32", 10_000, 32, 32, 32), ("float64", 10_000, 32, 32, 32),
         ("float32", 8366, 29, 7, 246), ("float32", 3319, 8, 2, 264), ("float32", 7578, 1, 3, 149),
         ("float32", 1968, 43, 264, 4), ("float64", 92, 722, 13, 1005), ("float32", 100, 4096, 1024, 1),
         ("float64", 1000, 256, 256, 1), ("float32", 10_000, 16, 16, 16), ("float32", 1000, 64, 64, 64)]
MAX_FLOPS = 2 * 2048 ** 3


def draw(rng: random.Random, count: int):
    def log_uniform(lo, hi):
        return int(round(np.exp(rng.uniform(np.log(lo), np.log(hi)))))

    shapes = []
    while len(shapes) < count:
        b, m, k, n = log_uniform(1, 10_000), log_uniform(1, 1024), log_uniform(1, 1024), log_uniform(1, 1024)
        if 2 * b * m * k * n <= MAX_FLOPS:
            shapes.append((rng.choice(("float32", "float64")), b, m, k, n))
    return shapes


matmul = importlib.import_module("cudakit.matmul")  # (the module: cudakit.matmul names the function)
ROUTES = ((_matmul_batch, "tiny_launches"), (_matmul_batch, "small_launches"), (_matmul_routes, "dots_launches"),
          (_dmma, "launches"), (matmul_tc, "x3_batch_launches"), (matmul, "tile_launches"), (_shortk, "launches"),
          (_fewrows, "launches"))
taken: list = []


def record_routes() -> None:
    """Each batch launch builder notes its name in `taken` when called."""
    def noted(module, name, fn):
        def wrapper(*args, **kwargs):
            taken.append(f"{module.__name__.split('.')[-1]}.{name}")
            return fn(*args, **kwargs)
        return wrapper
    for module, name in ROUTES:
        setattr(module, name, noted(module, name, getattr(module, name)))


def time_shape(dtype, b, m, k, n):
    taken.clear()
    per_set = (m * k + k * n + m * n) * b * np.dtype(dtype).itemsize
    sets = []
    for _ in range(timing.sets_past_l2(per_set, cupy.cuda.runtime.getDevice(), max_sets=8)):
        A = cupy.random.uniform(0.5, 1.5, (b, m, k)).astype(dtype)
        B = cupy.random.uniform(0.5, 1.5, (b, k, n)).astype(dtype)
        sets.append((A, B, cupy.full((b, m, n), cupy.nan, dtype)))
    A, B, out = sets[0]
    cudakit.matmul(A, B, out=out)
    err = _check.relative_error(out, cupy.matmul(A.astype(cupy.float64), B.astype(cupy.float64)))
    ok = err <= _check.tolerance(np.dtype(dtype), k)
    mine = timing.measure(lambda i: cudakit.matmul(sets[i % len(sets)][0], sets[i % len(sets)][1],
                                                   out=sets[i % len(sets)][2]), BUDGET)[0].median
    ref = timing.measure(lambda i: cupy.matmul(sets[i % len(sets)][0], sets[i % len(sets)][1],
                                               out=sets[i % len(sets)][2]), BUDGET)[0].median
    return {"shape": [dtype, b, m, k, n], "ok": bool(ok), "err": float(err), "fast_us": mine * 1e6,
            "cupy_us": ref * 1e6, "ratio": ref / mine, "route": "+".join(dict.fromkeys(taken)) or "kept"}


def bm_staged(tiny_launches):
    """tiny_launches giving each block the shared memory of BM rows of A (as before session 48), not m."""
    def launches(tile, a0, b0, c_ptr, count, steps, groups=1):
        made = tiny_launches(tile, a0, b0, c_ptr, count, steps, groups)
        if made is None:
            return None
        m, k = a0.shape
        per_vector = 16 // a0.itemsize
        kw = -(-min(k, _matmul_batch.TINY_CHUNK if groups == 1 else _matmul_batch.TINY_SPLIT_CHUNK) // per_vector)
        kw *= per_vector
        pitch = kw + per_vector if kw % (2 * per_vector) == 0 else kw
        staging = tile[0] * pitch + kw * tile[1]
        region = staging if groups == 1 else max(staging, tile[0] * tile[1])
        return [(*made[0][:-1], groups * region * a0.itemsize)]
    return launches


def setting(text: str) -> list:
    """[(module, name, value)] of a --set "module.NAME=EXPR[; module.NAME=EXPR...]" (EXPR may name bm_staged and the
    cudakit modules)."""
    changes = []
    for assignment in text.split(";"):
        target, expr = assignment.strip().split("=", 1)
        module, name = target.rsplit(".", 1)
        module = importlib.import_module(f"cudakit.{module}")
        scope = {"_dmma": _dmma, "_matmul_batch": _matmul_batch, "_matmul_routes": _matmul_routes, "_fewrows": _fewrows}
        changes.append((module, name, eval(expr, {**vars(module), **scope, "bm_staged": bm_staged})))
    return changes


def applied(changes) -> list:
    """Set each (module, name, value), forget the planned routes and launches; the previous values."""
    before = [(module, name, getattr(module, name)) for module, name, _ in changes]
    for module, name, value in changes:
        setattr(module, name, value)
    _matmul_batch._BATCH_LAUNCHES.clear()
    _matmul_routes._routes.clear()
    _matmul_plan._plan.cache_clear()
    return before


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--count", type=int, default=60)
    p.add_argument("--json")
    p.add_argument("--shapes", help="dtype:batch:m:k:n,... (only these)")
    p.add_argument("--set", action="append", default=[], help="module.NAME=EXPR: also time under this setting")
    args = p.parse_args()
    record_routes()
    rows = []
    shapes = FIXED + draw(random.Random(args.seed), args.count)
    if args.shapes:
        shapes = [(d, *map(int, rest)) for d, *rest in (s.split(":") for s in args.shapes.split(","))]
    settings = [setting(text) for text in args.set]
    for shape in shapes:
        dtype, b, m, k, n = shape
        for label, changes in [("library", [])] + list(zip(args.set, settings)) + [("library", [])] * bool(settings):
            before = applied(changes)
            row = time_shape(*shape)
            applied(before)
            row["setting"] = label
            rows.append(row)
            flag = "" if row["ok"] else f"  WRONG (error {row['err']:.1e})"
            print(f"{dtype} {b} x {m}x{k}x{n}: fast {row['fast_us']:9.1f} us  cupy {row['cupy_us']:9.1f} us  "
                  f"x{row['ratio']:.2f}  {row['route']}{flag}" + (f"  [{label}]" if settings else ""), flush=True)
    for label in dict.fromkeys(r["setting"] for r in rows):
        ratios = [r["ratio"] for r in rows if r["setting"] == label]
        print(f"{label}: geomean x{np.exp(np.mean(np.log(ratios))):.3f}  median x{np.median(ratios):.3f}  "
              f"min x{min(ratios):.2f}  under 0.9: {sum(r < 0.9 for r in ratios)} of {len(ratios)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
