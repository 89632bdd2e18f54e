"""Timing probe for cudakit.matvec: variants vs CuPy/cuBLAS `A @ x` and `A.T @ x`, against a read-bandwidth ceiling.

    PYTHONPATH=. python3 tools/matvec_probe.py [--out DIR] [--sweep] [--quick]
    compute-sanitizer --tool memcheck python3 tools/matvec_probe.py --sanitize

Timed with cudakit.bench.timing.measure (CUDA events): each timed call reads its own input set, enough sets
rotated call by call that together they exceed twice the L2 (no call finds its operands in L2), and the calls are
queued behind a GPU-side hold so the events time the GPU work alone. Median of 21 runs after warm-up (a slow lesson
kernel: fewer, about 3 s of runs). Bytes counted = A once + x once + out once. "N" is matvec(S, x) for a C-order S;
"T" is matvec(S.T, x), the F-contiguous transposed view read in place (cuBLAS gets the same operands).
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time

import cupy
import numpy as np

import cudakit
from cudakit import _check, _compile
from cudakit.bench import timing

mv = importlib.import_module("cudakit.matvec")
mvp = importlib.import_module("cudakit._matvec_plan")

# 21 timed runs a measurement; a call slower than ~0.14 s gets fewer, about 3 s of runs (1 s: 3 runs, 2 s: 1).
BUDGET = timing.Budget(row_s=1.5, min_runs=21, max_runs=21)
SHAPES = [(16384, 16384), (4096, 4096), (4194304, 64), (64, 4194304)]
# Goals: (fraction of the read ceiling) or ("x cuBLAS", factor).
GOALS = {(16384, 16384): ("ceiling", 0.92), (4096, 4096): ("cublas", 1.3), (4194304, 64): ("ceiling", 0.85),
         (64, 4194304): ("ceiling", 0.85)}
# Tuning knobs of cudakit.matvec.plan tried beside the defaults (tests/test_matvec.py checks each for correctness).
SWEEP = [{"persistent": False}, {"balanced": False}, {"block_rows": False}, {"row_unroll": 2},
         {"row_unroll": 8}, {"col_unroll": 2}, {"col_unroll": 4}, {"col_unroll": 8}, {"blocks_per_sm": 2},
         {"blocks_per_sm": 4}, {"blocks_per_sm": 8}, {"blocks_per_sm": 16}, {"row_unroll": 8, "blocks_per_sm": 8},
         {"row_unroll": 8, "blocks_per_sm": 16}, {"col_unroll": 2, "blocks_per_sm": 16},
         {"row_group": 4, "row_unroll": 2}, {"col_lanes": 128}, {"cached": True}, {"cached": False},
         {"cached": False, "persistent": False}, {"cached": True, "persistent": False},
         {"cached": True, "block_rows": False}, {"block_rows": True}]
ROW_GRID = [{"row_group": g, "row_unroll": u} for g in (1, 2, 4, 8, 16, 32) for u in (1, 2, 4)]


def input_sets(set_bytes, make):
    """[make(), ...]: enough input sets of `set_bytes` each that, rotated call by call, they exceed twice the L2."""
    return [make() for _ in range(timing.sets_past_l2(set_bytes, cupy.cuda.runtime.getDevice()))]


def bench(fn, sets, budget=BUDGET):
    """Median GPU milliseconds of fn(set), a single call each run, run k reading sets[k % len(sets)] (after warm-up,
    the GPU kept busy while the runs are queued)."""
    stats, _ = timing.measure(lambda k: fn(sets[k % len(sets)]), budget)
    return stats.median * 1e3


def read_ceiling(log):
    """GB/s of the best large streaming read: cupy.sum over 2 GiB (f32 and f64), and a 1 GiB copy for reference."""
    res = {}
    for dtype in (np.float32, np.float64):
        nbytes = 2 << 30
        sets = input_sets(nbytes, lambda: (cupy.random.uniform(size=nbytes // np.dtype(dtype).itemsize).astype(dtype),
                                           cupy.empty((), dtype)))
        ms = bench(lambda s: cupy.sum(s[0], out=s[1]), sets)
        res[f"sum_{np.dtype(dtype).name}"] = nbytes / ms / 1e6
        del sets
    nbytes = 1 << 30
    sets = input_sets(2 * nbytes, lambda: (cupy.random.uniform(size=nbytes // 4).astype(cupy.float32),
                                           cupy.empty(nbytes // 4, cupy.float32)))
    ms = bench(lambda s: cupy.copyto(s[1], s[0]), sets)
    res["copy_rw"] = 2 * nbytes / ms / 1e6
    del sets
    cupy.get_default_memory_pool().free_all_blocks()
    for k, v in res.items():
        log(f"ceiling {k:12s} {v:8.1f} GB/s")
    return max(res["sum_float32"], res["sum_float64"]), res


_ldg_cache: dict = {}


def ldg_kernels():
    src = _compile.source("matvec").replace("__ldcs(a +", "__ldg(a +")
    src = src.replace("else return __ldcs(p);", "else return __ldg(p);")
    assert src.count("__ldg(a +") == 2 and "__ldcs(p)" not in src

    def get(name, dtype):
        if name not in _ldg_cache:
            mod = cupy.RawModule(code=src, options=_compile.options(), name_expressions=(name,))
            _ldg_cache[name] = mod.get_function(name)
        return _ldg_cache[name]
    return get


def time_case(shape, dtype, trans, ceiling, sweep, quick, log):
    r, c = shape
    m, n = (c, r) if trans else (r, c)
    nbytes = (m * n + m + n) * np.dtype(dtype).itemsize

    def make():
        S = cupy.random.uniform(0.5, 1.5, size=shape).astype(dtype)  # C-order
        return {"A": S.T if trans else S, "x": cupy.random.uniform(0.5, 1.5, size=n).astype(dtype),
                "out": cupy.empty(m, dtype)}

    sets = input_sets(nbytes, make)  # each timed call reads its own A and x (together past twice the L2)
    A, x, out = sets[0]["A"], sets[0]["x"], sets[0]["out"]
    ref = A @ x  # cuBLAS
    rows = []

    def record(name, fn, check=True):  # fn(set)
        if check:
            out.fill(np.nan)
            fn(sets[0])
            err = _check.relative_error(out, ref)
        else:
            err = float("nan")
        ms = bench(fn, sets)
        gbs = nbytes / ms / 1e6
        rows.append({"name": name, "ms": ms, "GBps": gbs, "of_ceiling": gbs / ceiling, "err_vs_cublas": err})

    record("cublas", lambda s: s["A"] @ s["x"], check=False)  # CuPy routes a 2-D @ 1-D product to cuBLAS
    names = [v.name for v in cudakit.variants("matvec")]
    if quick or shape != (4096, 4096):
        names = [nm for nm in names if nm in ("fast", "fast_unsplit")]  # the others take seconds here
    for nm in names:
        record(nm, lambda s, nm=nm: cudakit.matvec(s["A"], s["x"], out=s["out"], variant=nm))
    p = mv.plan(A, x)
    if sweep:
        for knobs in sweep:
            q = mv.plan(A, x, **knobs)
            if q == p:
                continue
            label = ",".join(f"{k}={v}" for k, v in knobs.items())
            record(f"fast[{label}] {q.kernel.split('<')[1][:-1]} {q.grid}x{q.chunks}",
                   lambda s, q=q: mv._run_plan(s["A"], s["x"], s["out"], q))
        standard = mv._kernel
        mv._kernel = ldg_kernels()  # the same plan with A read through __ldg instead of __ldcs (evict-first)
        try:
            record("fast[A via __ldg]", lambda s: mv._run_plan(s["A"], s["x"], s["out"], p))
        finally:
            mv._kernel = standard
    cublas = rows[0]["GBps"]
    for row in rows:
        row["x_cublas"] = row["GBps"] / cublas
    tag = f"{r}x{c} {'T' if trans else 'N'} {np.dtype(dtype).name} (m={m}, n={n})"
    log(f"\n{tag}  plan: {p}")
    for row in rows:
        log(f"  {row['name']:40s} {row['ms'] * 1e3:10.1f} us {row['GBps']:8.1f} GB/s  {row['of_ceiling']:5.3f} of ceiling"
            f"  {row['x_cublas']:5.2f}x cuBLAS  err {row['err_vs_cublas']:.1e}")
    del sets, A, x, out, ref
    cupy.get_default_memory_pool().free_all_blocks()
    return tag, rows


def host_overhead(log):
    A = cupy.random.uniform(size=(64, 64)).astype(cupy.float32)
    x = cupy.random.uniform(size=64).astype(cupy.float32)
    out = cupy.empty(64, cupy.float32)
    for _ in range(10):
        cudakit.matvec(A, x, out=out)
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(1000):
        cudakit.matvec(A, x, out=out)
    t1 = time.perf_counter()
    cupy.cuda.Device().synchronize()
    log(f"host time per cudakit.matvec call (64x64, out=, queued): {(t1 - t0) * 1e3:.1f} us")


def sanitize():
    """Every variant on odd, misaligned and split shapes, CuPy's pool off (memcheck sees each array's end)."""
    cupy.cuda.set_allocator(None)
    count = 0
    for dtype in (np.float32, np.float64):
        for v in cudakit.variants("matvec"):
            for m, n in [(1, 1), (7, 13), (33, 4097), (4097, 33), (3, 100003), (8, 65536), (65536, 8), (40, 2000)]:
                for order in ("C", "F"):
                    A = cupy.asarray(cupy.random.uniform(0.5, 1.5, size=(m, n)).astype(dtype), order=order)
                    x = cupy.random.uniform(0.5, 1.5, size=n).astype(dtype)
                    cudakit.matvec(A, x, variant=v.name)
                    flat = cupy.random.uniform(0.5, 1.5, size=m * n + 1).astype(dtype)
                    cudakit.matvec(flat[1:].reshape((m, n), order=order), x, variant=v.name)
                    count += 2
    cupy.cuda.Device().synchronize()
    print(f"sanitize: {count} matvec calls checked")


# F-order A of few rows (A.T of a tall C-order matrix; a matmul's one row times a narrow B is the same product).
THIN_SHAPES = [(np.float32, m, n) for m, n in ((2, 16000000), (9, 2054138), (21, 590856), (26, 685218),
                                                (30, 745690), (33, 1924951), (43, 410080), (54, 494198), (82, 153525),
                                                (127, 400000), (200, 200000), (16, 8000000), (96, 1000000),
                                                (31, 26411))]
THIN_SHAPES += [(np.float64, m, n) for m, n in ((2, 5242706), (20, 441112), (22, 713630), (37, 1297260),
                                                 (65, 157142), (69, 3359533), (115, 814463), (24, 513884),
                                                 (26, 268230), (96, 1000000), (9, 3000000), (15, 2000000),
                                                 (33, 254200), (51, 164500), (33, 1017000), (51, 658000))]


# Where the thin kernel's rows end: each row count at about 64 MB and 256 MB of A.
CROSS_SHAPES = [(dtype, m, size // (m * np.dtype(dtype).itemsize)) for size in (1 << 26, 1 << 28)
                for dtype, rows in ((np.float32, (43, 61, 71, 85, 101, 24, 32, 48, 64)),
                                    (np.float64, (65, 129, 161, 201, 255, 32, 48, 64))) for m in rows]


# F-order A that the column-major kernel takes (the sweeps' slowest among them, and the thin kernel's neighbours).
COLMAJOR_SHAPES = [(np.float32, m, n) for m, n in ((2129, 16963), (2743, 16789), (18553, 16231), (1471, 42197),
                                                    (431, 535426), (82, 153525), (127, 400000), (200, 200000))]
COLMAJOR_SHAPES += [(np.float64, m, n) for m, n in ((2521, 65617), (1999, 29753), (51329, 2833), (2487, 11473),
                                                     (335, 383416), (65, 157142), (129, 260111), (96, 1000000))]


# C-order A of the sweeps' slowest rows (the row-major kernel).
ROWMAJOR_SHAPES = [(np.float64, m, n, "C") for m, n in ((449, 37747), (1129, 43313), (5, 23869802), (1873, 56963),
                                                        (7, 3770640), (287556, 361), (5867, 39779), (10369, 17419),
                                                        (1, 7265382), (16384, 16384), (4096, 4096), (8192, 8192),
                                                        (2000, 100000), (100, 1000000))]
ROWMAJOR_SHAPES += [(np.float32, m, n, "C") for m, n in ((1252, 345553), (15, 587826), (2, 3350123), (25, 1720719),
                                                         (11243, 15991), (18, 1058753), (16384, 16384), (4096, 4096),
                                                         (64, 4194304))]


def timed_cells(runs, sets, ref, nbytes) -> list[str]:
    """'label GB/s' for each of runs (label: run(set) writing set[2]), each output (poisoned first) checked against
    ref; GB/s of nbytes."""
    cells = []
    for label, run in runs.items():
        out = sets[0][2]
        out.fill(np.nan)
        run(sets[0])
        err = float(cupy.linalg.norm(out.astype(np.float64) - ref) / cupy.linalg.norm(ref))
        ms = bench(run, sets)
        tol = 1e-5 if out.itemsize >= 4 else 4e-3
        cells.append(f"{label} {nbytes / ms / 1e6:6.0f}{'' if err < tol else ' WRONG %.1e' % err}")
    return cells


def _fast_plan(A, plain: bool = False):
    """The fast kernels' plan for A (F order: never the thin kernel), with `plain`: without the fetch-ahead (the
    kernels' PIPELINED false), sized by that kernel's residency."""
    from dataclasses import replace
    knobs = (("col_unroll", mv.COL_UNROLL),) if not A.flags.c_contiguous else ()
    if not plain:
        return mvp._plan(A.shape, A.dtype, bool(knobs), True, A.data.device_id, True, knobs)
    def unpiped(name):
        if name.startswith("matvec_rowmajor"):
            return name.replace(", true>", ">") if name.count(",") == 5 else name
        return name[:-1] + ", false>" if name.startswith("matvec_colmajor") else name
    resident = mvp._resident_blocks
    mvp._resident_blocks = lambda name, dtype, dev: resident(unpiped(name), dtype, dev)
    mvp._plan.cache_clear()
    try:
        p = mvp._plan(A.shape, A.dtype, bool(knobs), True, A.data.device_id, True, knobs)
    finally:
        mvp._resident_blocks = resident
        mvp._plan.cache_clear()
    return replace(p, kernel=unpiped(p.kernel))


def pipelining(shapes, log) -> None:
    """The row- and column-major kernels with and without their fetch-ahead against CuPy, GB/s of A, each output
    checked. shapes: (dtype, m, n[, order]), F order where none is given."""
    for dtype, m, n, *order in shapes:
        nbytes = m * n * np.dtype(dtype).itemsize
        f_order = order != ["C"]

        def make():
            a = cupy.random.uniform(-1, 1, (n, m)).astype(dtype).T if f_order else \
                cupy.random.uniform(-1, 1, (m, n)).astype(dtype)
            return a, cupy.random.uniform(-1, 1, n).astype(dtype), cupy.empty(m, dtype)
        sets = input_sets(nbytes, make)
        A0, x0 = sets[0][0], sets[0][1]
        ref = A0.astype(np.float64) @ x0.astype(np.float64)
        pipe = _fast_plan(A0)
        launchers = {"pipelined": mv.launcher(A0, pipe), "plain": mv.launcher(A0, _fast_plan(A0, plain=True))}
        runs = {"cupy": lambda s: cupy.matmul(s[0], s[1], out=s[2]), "fast": lambda s: mv.run_fast(s[0], s[1], s[2])}
        for label, r in launchers.items():
            runs[label] = (lambda r: lambda s: r(s[0].data.ptr, s[1].data.ptr, s[2].data.ptr))(r)
        cells = timed_cells(runs, sets, ref, nbytes)
        log(f"{np.dtype(dtype).name} {m}x{n} {'F' if f_order else 'C'} ({mv.plan(A0, x0).kernel}, "
            f"grid {pipe.grid}x{pipe.chunks}): "
            + " | ".join(cells))
        del sets
        cupy.get_default_memory_pool().free_all_blocks()


# --element-columns: F-order A whose columns are not whole 16-byte vectors (element loads), under other tunings
ELEMENT_SHAPES = [(np.float32, m, n) for m, n in ((113575, 2502), (1471, 42197), (65535, 4096), (16383, 16383),
                                                   (255, 200003))]  # ((29822763, 4): matvec_few_columns', below)
ELEMENT_SHAPES += [(np.float64, m, n) for m, n in ((72073, 2131), (19333, 13697))]
ELEMENT_KNOBS = [{"col_unroll": 8}, {"col_lanes": 256}, {"col_lanes": 256, "col_unroll": 8}, {"col_lanes": 64},
                 {"blocks_per_sm": 16}, {"col_unroll": 8, "blocks_per_sm": 16}]


# --few-columns: F-order A of at most FEW_COLUMNS element columns (matvec_few_columns), and matvec_colmajor's plan
FEW_SHAPES = [(np.float32, m, n) for m, n in ((29822763, 4), (24414509, 2), (20000003, 3), (10000001, 7),
                                               (1000003, 4), (100003, 5))]
FEW_SHAPES += [(np.float64, m, n) for m, n in ((15000001, 2), (10000001, 3), (1000003, 2))]
FEW_SHAPES += [(np.float16, m, n) for m, n in ((30000001, 4), (20000001, 7))]
FEW_KNOBS = [{"few_columns": False}, {"few_rows": 8}, {"few_rows": 2}, {"few_rows": 1}]
# --few-limit 4:16,8:12,2:15: FEW_COLUMNS' last step raised to these limits, on shapes past the first step
PAST_FEW_SHAPES = [(np.float32, m, n) for m, n in ((46716015, 9), (20000003, 12), (16000001, 16), (1000003, 10))]
PAST_FEW_SHAPES += [(np.float64, m, n) for m, n in ((4943027, 12), (15000001, 4), (10000001, 6), (8000001, 8))]
PAST_FEW_SHAPES += [(np.float16, m, n) for m, n in ((30000001, 8), (20000001, 12), (16000001, 15))]
PAST_FEW_KNOBS = [{"few_columns": False}, {"few_rows": 4}, {"few_rows": 1}]


def element_columns(log, shapes=ELEMENT_SHAPES, knob_sets=ELEMENT_KNOBS) -> None:
    """The column-major kernel's element loads under ELEMENT_KNOBS against the library's plan and CuPy, GB/s of A,
    each output checked."""
    for dtype, m, n in shapes:
        nbytes = m * n * np.dtype(dtype).itemsize

        def make():
            return (cupy.random.uniform(-1, 1, (n, m)).astype(dtype).T, cupy.random.uniform(-1, 1, n).astype(dtype),
                    cupy.empty(m, dtype))
        sets = input_sets(nbytes, make)
        A0 = sets[0][0]
        ref = A0.astype(np.float64) @ sets[0][1].astype(np.float64)
        runs = {"cupy": lambda s: cupy.matmul(s[0], s[1], out=s[2]), "fast": lambda s: mv.run_fast(s[0], s[1], s[2])}
        for knobs in knob_sets:
            p = mvp._plan(A0.shape, A0.dtype, True, True, A0.data.device_id, True, tuple(sorted(knobs.items())))
            r = mv.launcher(A0, p)
            label = ",".join(f"{k}={v}" for k, v in knobs.items()) + f" ({p.grid}x{p.chunks})"
            runs[label] = (lambda r: lambda s: r(s[0].data.ptr, s[1].data.ptr, s[2].data.ptr))(r)
        cells = timed_cells(runs, sets, ref, nbytes)
        p = mv.plan(A0, sets[0][1])
        log(f"{np.dtype(dtype).name} {m}x{n} F ({p.kernel}, grid {p.grid}x{p.chunks}): " + " | ".join(cells))
        del sets
        cupy.get_default_memory_pool().free_all_blocks()


def thin(log, shapes=THIN_SHAPES, grids=((1, 2), (1, 4), (2, 2), (2, 4), (3, 2), (4, 2))) -> None:
    """The thin column-major kernel over its rows and grids ((blocks a SM, unroll) where they fit at once) against
    the column-major kernel and CuPy, GB/s of A, each output checked."""
    from cudakit._compile import instantiation
    from cudakit._matvec_plan import Plan, _plan, _resident_blocks
    dev = cupy.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    for dtype, m, n in shapes:
        width = 16 // np.dtype(dtype).itemsize
        nbytes = m * n * np.dtype(dtype).itemsize

        def make():
            a = cupy.random.uniform(-1, 1, (n, m)).astype(dtype).T
            return a, cupy.random.uniform(-1, 1, n).astype(dtype), cupy.empty(m, dtype)
        sets = input_sets(nbytes, make)
        A0, x0 = sets[0][0], sets[0][1]
        ref = A0.astype(np.float64) @ x0.astype(np.float64)
        unit = m // math.gcd(m, width * mv.FAST_THREADS)
        cols = _plan((m, n), np.dtype(dtype), True, True, dev.id, True, (("col_unroll", mv.COL_UNROLL),))
        runs = {"cupy": lambda s: cupy.matmul(s[0], s[1], out=s[2]),
                "fast": lambda s: mv.run_fast(s[0], s[1], s[2]),
                "colmajor": (lambda r: lambda s: r(s[0].data.ptr, s[1].data.ptr, s[2].data.ptr))(
                    mv.launcher(A0, cols))}
        wanted = -(-m * n // (width * mv.FAST_THREADS * 16))
        for bps, unroll in grids:
            grid = max(unit, min(bps * sms, wanted) // unit * unit)
            name = instantiation("matvec_thin_colmajor", dtype, *((unroll,) if unroll != 4 else ()))
            if bps * sms > _resident_blocks(name, np.dtype(dtype), dev.id):
                continue
            r = mv.launcher(A0, Plan(name, True, 1, grid, 1, 0))
            runs[f"thin{bps}x{unroll}({grid})"] = (lambda r: lambda s: r(s[0].data.ptr, s[1].data.ptr,
                                                                          s[2].data.ptr))(r)
        cells = timed_cells(runs, sets, ref, nbytes)
        p = mv.plan(A0, x0)
        log(f"{np.dtype(dtype).name} {m}x{n} F (fast: {p.kernel} grid {p.grid}): " + " | ".join(cells))
        del sets
        cupy.get_default_memory_pool().free_all_blocks()


def thin_one(spec: str) -> None:
    """One thin kernel launch (warmed up) inside cudaProfilerStart/Stop, for ncu: spec 'dtype,m,n,blocks a SM,unroll'."""
    from cudakit._compile import instantiation
    from cudakit._matvec_plan import Plan
    name, m, n, bps, unroll = spec.split(",")
    dtype, m, n, bps, unroll = np.dtype(name), int(m), int(n), int(bps), int(unroll)
    width = 16 // dtype.itemsize
    unit = m // math.gcd(m, width * mv.FAST_THREADS)
    grid = max(unit, bps * cupy.cuda.Device().attributes["MultiProcessorCount"] // unit * unit)
    A = cupy.random.uniform(-1, 1, (n, m)).astype(dtype).T
    x, out = cupy.random.uniform(-1, 1, n).astype(dtype), cupy.empty(m, dtype)
    kernel = instantiation("matvec_thin_colmajor", dtype, *((unroll,) if unroll != 4 else ()))
    run = mv.launcher(A, Plan(kernel, True, 1, grid, 1, 0))
    run(A.data.ptr, x.data.ptr, out.data.ptr)
    cupy.cuda.Device().synchronize()
    cupy.cuda.runtime.profilerStart()
    run(A.data.ptr, x.data.ptr, out.data.ptr)
    cupy.cuda.Device().synchronize()
    cupy.cuda.runtime.profilerStop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--thin-one", help="dtype,m,n,blocks a SM,unroll: one thin launch to profile")
    ap.add_argument("--thin", action="store_true", help="the thin column-major kernel's rows and grids")
    ap.add_argument("--cross", action="store_true", help="where the thin kernel's rows should end")
    ap.add_argument("--thin-vs-colmajor", action="store_true", help="--thin's shapes, the library's grid only")
    ap.add_argument("--colmajor", action="store_true", help="the column-major kernel with and without its fetch-ahead")
    ap.add_argument("--element-columns", action="store_true", help="F-order element columns under other tunings")
    ap.add_argument("--few-columns", action="store_true", help="F-order A of few element columns, other tunings")
    ap.add_argument("--few-limit", help="FEW_COLUMNS' last limit set to these (itemsize:limit,...), wider shapes")
    ap.add_argument("--rowmajor", action="store_true", help="the row-major kernel with and without its fetch-ahead")
    ap.add_argument("--out", default=".")
    ap.add_argument("--sweep", action="store_true", help="also time the fast kernels under other unrolls/occupancy")
    ap.add_argument("--quick", action="store_true", help="fast variants only")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--shape", action="append", help="only these shapes, e.g. --shape 4096x4096 (any shape: timed "
                    "alone, with --dtype)")
    ap.add_argument("--dtype", action="append", help="only this dtype (float32, float64)")
    ap.add_argument("--no-trans", action="store_true", help="only A @ x of the C-order matrix")
    ap.add_argument("--knobs", help="a JSON list of tunings to time instead of the sweep's, e.g. '[{\"cached\": true}]'")
    ap.add_argument("--row-grid", action="store_true", help="also time the row-major kernel under every lanes per row "
                    "(1 to 32) and unroll (1, 2, 4)")
    args = ap.parse_args()
    if args.sanitize:
        sanitize()
        return
    if args.thin_one:
        return thin_one(args.thin_one)
    if args.thin:
        return thin(print)
    if args.element_columns:
        return element_columns(print)
    if args.few_columns:
        return element_columns(print, FEW_SHAPES, FEW_KNOBS)
    if args.few_limit:
        for size, limit in (item.split(":") for item in args.few_limit.split(",")):
            *first, (_, rows) = mvp.FEW_COLUMNS[int(size)]
            mvp.FEW_COLUMNS[int(size)] = (*first, (int(limit), rows))
        mvp._plan.cache_clear()
        return element_columns(print, PAST_FEW_SHAPES, PAST_FEW_KNOBS)
    if args.colmajor:
        return pipelining(COLMAJOR_SHAPES + CROSS_SHAPES, print)
    if args.rowmajor:
        return pipelining(ROWMAJOR_SHAPES, print)
    if args.thin_vs_colmajor:
        return thin(print, THIN_SHAPES, ((2, 4),))
    if args.cross:
        return thin(print, CROSS_SHAPES, ((1, 4), (2, 4)))
    os.makedirs(args.out, exist_ok=True)
    lines = []

    def log(s):
        print(s, flush=True)
        lines.append(s)

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    log(f"device: {props['name'].decode()}  SMs {dev.attributes['MultiProcessorCount']}  L2 {props['l2CacheSize'] >> 20} MiB")
    ceiling, ceilings = read_ceiling(log)
    host_overhead(log)
    results = {}
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shape] if args.shape else SHAPES
    dtypes = [np.dtype(d) for d in args.dtype] if args.dtype else (np.float32, np.float64)
    sweep = (json.loads(args.knobs) if args.knobs else SWEEP + ROW_GRID if args.row_grid
             else SWEEP if args.sweep else None)
    for shape in shapes:
        for dtype in dtypes:
            for trans in (False,) if args.no_trans else (False, True):
                tag, rows = time_case(shape, dtype, trans, ceiling, sweep, args.quick, log)
                results[tag] = {"shape": shape, "dtype": np.dtype(dtype).name, "trans": trans, "rows": rows}
    log("\nSummary (fast): shape, op, dtype, GB/s, of ceiling, x cuBLAS, goal")
    for tag, res in results.items():
        fast = next(r for r in res["rows"] if r["name"] == "fast")
        kind, want = GOALS.get(tuple(res["shape"]), ("cublas", 1.0))
        got = fast["of_ceiling"] if kind == "ceiling" else fast["x_cublas"]
        log(f"  {tag:45s} {fast['GBps']:7.1f} {fast['of_ceiling']:6.3f} {fast['x_cublas']:6.2f}x"
            f"   goal {kind} >= {want}: {'PASS' if got >= want else 'MISS'} ({got:.3f})")
    with open(os.path.join(args.out, "matvec_probe.json"), "w") as f:
        json.dump({"ceiling_GBps": ceiling, "ceilings": ceilings, "results": results}, f, indent=1)
    with open(os.path.join(args.out, "matvec_probe.log"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
