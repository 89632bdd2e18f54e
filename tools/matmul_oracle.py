"""What the fast matmul's planner could pick: every sweep shape of `bench.py --sweep` timed on every way cudakit can
run it (each tile of the tune space, split k at several depths, the planner's own choice), beside cupy.matmul.

    PYTHONPATH=. python3 tools/matmul_oracle.py --seed 3 [--seed 4] [--count 200] [--fast-only] [--json FILE]

Each entry's result is checked against float64 before it is timed (GPU time, cudakit.bench.timing.measure; the
sweep's per-call figure for fast and CuPy too where the operands fit in L2). Prints, per shape, the planner's path,
its ratio to CuPy and the best entry's; last, how many shapes each would leave under 0.9x.
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import sys

import cupy
import numpy as np

import cudakit
from cudakit import _matmul_batch, _tune
from cudakit._matmul_plan import MAX_SPLIT_BYTES
from cudakit._compile import launch
from cudakit.bench import timing
from cudakit.bench.base import Case
from cudakit.bench.registry import BENCHES
from cudakit.bench.sweep import draw_cases
from cudakit.testing import poison

mm = importlib.import_module("cudakit.matmul")
try:  # the fast variant's routes (in matmul.py itself in trees before session 15)
    routes = importlib.import_module("cudakit._matmul_routes")
except ImportError:
    routes = mm
split_k = getattr(routes, "run_split_k", None) or mm.run_split_k  # (in matmul.py before session 25)
BUDGET = timing.Budget(row_s=0.02, min_runs=3, max_runs=60, batch=16)
SPLITS = (2, 3, 4, 6, 8, 12, 16, 32)


def plan_name(A, B) -> str:
    """The fast variant's path for a 2-D product, as _matmul_routes.run_fast decides it."""
    m, k = A.shape
    n = B.shape[1]
    dev = cupy.cuda.runtime.getDevice()
    if (max(m, n) <= routes.DOTS_MAX_SIDE and min(m, n) > 1
            and routes.dots_plan(m, k, n, routes._dots_resident(A.dtype, dev))):
        return "dots"
    if routes.skinny_plan(m, k, n, A.itemsize):
        return "skinny"
    if m == 1 or n == 1:
        return "matvec"
    if hasattr(routes, "short_k_takes"):
        try:
            short = routes.short_k_takes(A.dtype, m, n, k, dev)
        except TypeError:  # (trees before session 38 take no device)
            short = routes.short_k_takes(A.dtype, m, n, k)
        if short:
            return "short_k"
    elif A.dtype == np.float64 and k <= getattr(_matmul_batch, "SHORT_K_F64", 0):  # (trees before session 27)
        return "short_k"
    if not hasattr(mm, "plan"):  # an older tree, timed for comparison
        return "?"
    try:  # (trees before session 25 plan without the operands' alignment)
        vectors = min(m, n) >= mm.PAD_MIN_DIM or mm.reads_vectors(A, B)
        x3 = mm.matmul_tc.x3_copies(A, B) if getattr(routes, "X3", False) and A.dtype == np.float32 else None
        tile, splits, _ = mm.plan(dev, A.dtype, m, n, k, vectors=vectors, x3=x3)
    except (AttributeError, TypeError):
        tile, splits, _ = mm.plan(dev, A.dtype, m, n, k)
    return f"{tile.name}" + (f" split{splits}" if splits > 1 else "")


def entries(case, s, fast_only=False):
    """(name, fn(s)) of every way to run the case (fast_only: the planner's alone)."""
    dtype = np.dtype(case.dtype)
    cc = _tune.compute_capability(cupy.cuda.runtime.getDevice())
    out = [("fast", lambda x: cudakit.matmul(x["A"], x["B"], out=x["out"], check=False))]
    if fast_only:
        return out
    tiles = _tune.candidates(dtype, cc)
    if len(case.dims) == 4 and min(case.dims[1], case.dims[3]) > 1 and max(case.dims[1], case.dims[3]) <= 64:
        def run_dots(x):  # the dots kernel on the batch (one launch; C at most 64 x 64 here, in 8 x 8 parts)
            A, B = x["A"], x["B"]
            item, count = A.itemsize, case.dims[0]
            steps = tuple(y.strides[0] // item if y.ndim == 3 else 0 for y in (A, B)) + (A.shape[-2] * B.shape[-1],)
            a0, b0 = (y[0] if y.ndim == 3 else y for y in (A, B))
            for args in routes.dots_launches(a0, b0, x["out"].data.ptr, count, steps):
                launch(*args)
        out.append(("dots", run_dots))
    if len(case.dims) == 4:  # a batch: each tile as the batched path would launch it (the dots kernel aside)
        for t in tiles:
            def run(x, t=t):
                saved = mm.plan, _matmul_batch.batch_dots_takes
                mm.plan = lambda device_id, dtype, m, n, k, *rest, **kw: (t, 1, k)
                _matmul_batch.batch_dots_takes = lambda *args: False
                try:
                    _matmul_batch._BATCH_LAUNCHES.clear()
                    cudakit.matmul(x["A"], x["B"], out=x["out"], check=False)
                finally:
                    mm.plan, _matmul_batch.batch_dots_takes = saved
                    _matmul_batch._BATCH_LAUNCHES.clear()
            out.append((t.name, run))
        return out
    m, k, n = case.dims
    if dtype == np.float64 and cc >= 80:  # the pipelined FP64 tensor-core kernel (_dmma)
        from cudakit import _dmma
        out.append(("dmma_pipelined", lambda x: _dmma.run(x["A"], x["B"], x["out"])))
        try:  # the streaming kernel for a long k (session 39 on)
            from cudakit import _longk
        except ImportError:
            _longk = None
        if _longk and min(m, n) > 1 and k >= _longk.SLICE:
            plan = _longk.plan(m, n, k, cupy.cuda.runtime.getDevice())
            out.append((f"longk_{plan.tile.mt}x{plan.tile.nt}{'T' if plan.swap else ''}",
                        lambda x: _longk.launcher(x["A"], x["B"], x["out"], plan)(x["A"], x["B"], x["out"])))
    if m == 1 or n == 1:
        out.append(("matvec", lambda x: routes._matvec_product(x["A"], x["B"], x["out"])))
    skinny = routes.skinny_plan(m, k, n, dtype.itemsize)
    if skinny:
        out.append(("skinny", lambda x: routes.run_skinny(x["A"], x["B"], x["out"], *skinny)))
    if max(m, n) <= routes.DOTS_MAX_SIDE:
        dots = routes.dots_plan(m, k, n, routes._dots_resident(dtype, cupy.cuda.runtime.getDevice()))
        if dots:
            out.append(("dots", lambda x: routes.run_dots(x["A"], x["B"], x["out"], *dots)))
    if k <= _matmul_batch.SMALL_MAX_K:  # the small-product kernel as one product
        wider = getattr(_matmul_batch, "SHORT_K_TILES_F32", ()) if dtype.itemsize == 4 else ()  # (built for FP32)
        for tile in _matmul_batch.SMALL_TILES + wider:
            if dtype.itemsize == 4 or tile not in _matmul_batch.SMALL_WIDE:
                out.append((f"small_{tile[0]}x{tile[1]}", lambda x, tile=tile: [launch(*args) for args in
                            _matmul_batch.small_launches(tile, x["A"], x["B"], x["out"].data.ptr, 1, (0, 0, 0))]))
    extra = _tune.extra_tiles(dtype) if hasattr(_tune, "extra_tiles") else getattr(_tune, "NARROW_TILES", {}).get(dtype, ())
    for t in tiles + extra:
        out.append((t.name, lambda x, t=t: mm.run_fast_tile(t, x["A"], x["B"], x["out"])))
        for sp in SPLITS:
            depth = -(-k // sp)
            depth = -(-depth // t.bk) * t.bk
            if depth >= 64 and -(-k // depth) == sp and sp * m * n * dtype.itemsize <= MAX_SPLIT_BYTES:
                out.append((f"{t.name} split{sp}",
                            lambda x, t=t, sp=sp, d=depth: split_k(t, x["A"], x["B"], x["out"], sp, d)))
    return out


def host_profile(fn, calls: int = 300, top: int = 8) -> str:
    """The cumulative-time head of a cProfile of `calls` back-to-back calls of fn (GPU-synchronised after)."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return "\n".join(line for line in text.getvalue().splitlines() if line.strip())


def one_case(case, per_call_l2: int, fast_only: bool = False, profile: bool = False, only=None) -> dict:
    bench = BENCHES["matmul"]
    s = bench.make(case)
    ctx = bench.check_context(case, s)
    row = {"case": case.label, "dtype": case.dtype, "dims": list(case.dims), "order": case.order,
           "flops": case.flops, "times": {}, "wrong": []}
    if len(case.dims) == 3:
        row["plan"] = plan_name(s["A"], s["B"])
    ref = lambda x: cupy.matmul(x["A"], x["B"])
    row["times"]["cupy"] = timing.measure(lambda i: ref(s), BUDGET)[0].median
    for name, fn in entries(case, s, fast_only):
        if only is not None and name != "fast" and not re.search(only, name):
            continue
        poison(s["out"])
        try:
            fn(s)
            err = bench.error(case, ctx, s, s["out"])["value"]
        except Exception as exc:  # an entry that cannot run this shape
            row["wrong"].append(f"{name}: {type(exc).__name__}")
            continue
        from cudakit import _check
        if not err <= _check.tolerance(np.dtype(case.dtype), case.dims[-2]):
            row["wrong"].append(f"{name}: error {err:.1e}")
            continue
        row["times"][name] = timing.measure(lambda i: fn(s), BUDGET)[0].median
    if case.bytes <= per_call_l2:
        row["per_call"] = {"cupy": timing.measure(lambda i: ref(s), BUDGET, per_call=True)[0].median,
                           "fast": timing.measure(lambda i: cudakit.matmul(s["A"], s["B"], out=s["out"], check=False),
                                                  BUDGET, per_call=True)[0].median}
        if profile:
            print(host_profile(lambda: cudakit.matmul(s["A"], s["B"], out=s["out"], check=False)), flush=True)
    del s
    cupy.get_default_memory_pool().free_all_blocks()
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, action="append", default=[])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--json")
    ap.add_argument("--fast-only", action="store_true", help="time only the planner's choice and CuPy")
    ap.add_argument("--shape", action="append", default=[], metavar="DTYPE:MxKxN:ORDER",
                    help="an extra case, e.g. float64:4096x4096x4096:CC (ORDER: A's and B's, C or F)")
    ap.add_argument("--labels", help="a file of case labels, one a line: only those cases of the seeds")
    ap.add_argument("--profile", action="store_true", help="a per-call case's host profile (cProfile, top lines)")
    ap.add_argument("--entries", help="a regular expression: only the entries it matches (and fast) are timed")
    args = ap.parse_args()
    l2 = timing.l2_bytes(cupy.cuda.runtime.getDevice())
    labels = None if args.labels is None else {line.strip() for line in open(args.labels) if line.strip()}
    rows = []
    extra = []
    for text in args.shape:
        dtype, dims, order = text.split(":")
        extra.append(Case("matmul", dtype, tuple(int(d) for d in dims.split("x")), order))
    for seed in args.seed + ([None] if extra else []):
        for case in (extra if seed is None else draw_cases("matmul", seed, args.count)):
            if seed is not None and labels is not None and case.label not in labels:
                continue
            row = one_case(case, l2, args.fast_only, args.profile, args.entries)
            row["seed"] = seed
            rows.append(row)
            t = row["times"]
            best = min((v, k) for k, v in t.items() if k != "cupy")
            pc = row.get("per_call")
            print(f"{row['case']:60} {row.get('plan', 'batched'):42} fast {t['cupy'] / t['fast']:5.2f}x "
                  f"best {t['cupy'] / best[0]:5.2f}x {best[1]}; GPU µs fast {t['fast'] * 1e6:.1f} best "
                  f"{best[0] * 1e6:.1f} cupy {t['cupy'] * 1e6:.1f}"
                  + (f"; per call µs fast {pc['fast'] * 1e6:.1f} cupy {pc['cupy'] * 1e6:.1f}" if pc else "")
                  + (f"  WRONG {row['wrong']}" if row["wrong"] else ""), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(rows, f)
    fast = [r["times"]["cupy"] / r["times"]["fast"] for r in rows]
    best = [r["times"]["cupy"] / min(v for k, v in r["times"].items() if k != "cupy") for r in rows]
    for name, xs in (("fast", fast), ("best entry", best)):
        print(f"{name}: median {np.median(xs):.2f}x, min {min(xs):.2f}x, {sum(x < 0.9 for x in xs)} below 0.9x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
