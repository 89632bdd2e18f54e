"""Times cudakit.transpose's variants against a device-to-device copy of the same bytes and CuPy's own transpose.

    PYTHONPATH=. python3 tools/transpose_probe.py [--reps 25] [--seeds]   the goal table
    PYTHONPATH=. python3 tools/transpose_probe.py --sweep                  other tile shapes of the fast step
    compute-sanitizer python3 tools/transpose_probe.py --smoke             small odd cases, every kernel, checked

Bandwidth counts bytes read + bytes written (2 x the matrix). Timed with cudakit.bench.timing.measure: each timing
is the median of --reps single launches, each between its own pair of CUDA events, after warm-up, queued back to back
behind a GPU-side hold (host overhead stays out); where one case's bytes (read + written) are below twice the L2, the
launches rotate through enough input sets to exceed it (on an H100 every case here already does, one set).
--sweep times other vec16 tile shapes (units per tile row, per tile column, threads) of the fast step instead.
"""
from __future__ import annotations

import argparse
import importlib

import cupy
import numpy as np

import cudakit
from cudakit._compile import kernel
from cudakit.bench import timing

T = importlib.import_module("cudakit.transpose")

DTYPES = {1: np.int8, 2: np.float16, 4: np.float32, 8: np.float64}
GOAL_SHAPES = [(16384, 16384), (1024, 262144), (262144, 1024), (8191, 8193)]
GOAL, GOAL_F32_8192 = 0.90, 0.95
SWEEP = {
    1: [(8, 8, 128), (8, 8, 512), (8, 16, 256), (16, 8, 256)],
    2: [(8, 16, 512), (16, 16, 512), (8, 8, 256), (8, 16, 128)],
    4: [(16, 16, 256), (8, 16, 256), (16, 32, 512), (32, 16, 512)],
    8: [(16, 32, 256), (8, 32, 256), (16, 16, 256), (8, 32, 512)],
}

# Misaligned rows (--sweep --odd): larger tiles overlap less (one unit of rows per tile), up to 32 KB of shared memory.
SWEEP_ODD = {  # the shape in use first; sessions 3 and 5 measured others (docs/NOTES.md)
    1: [(8, 8, 512), (8, 16, 512), (8, 16, 1024), (16, 8, 512), (8, 8, 1024)],
    2: [(8, 16, 512), (8, 16, 256), (8, 8, 256), (8, 32, 512)],
    4: [(8, 32, 512), (8, 64, 512), (8, 64, 1024), (8, 32, 256)],
    8: [(16, 32, 512), (16, 64, 512), (16, 32, 256), (16, 64, 1024)],
}

# --sweep --odd --seams: (tile shape, seam bytes, blocks per SM the registers must allow; None: the library's choice)
# at 8191x8193. A wider seam costs SEAM / E overlapping rows per tile; more blocks per SM cost registers.
SEAMS = {
    1: [((8, 8, 512), 16, None), ((8, 8, 512), 16, 4), ((8, 16, 512), 16, 2), ((8, 16, 512), 16, 3),
        ((8, 8, 256), 16, 8)],
    2: [((8, 16, 512), 32, None), ((8, 16, 512), 32, 4), ((8, 16, 512), 32, 2), ((8, 16, 512), 16, None)],
    4: [((8, 32, 512), 32, None), ((8, 32, 512), 32, 3), ((16, 32, 512), 32, 2), ((8, 64, 512), 32, 2)],
    8: [((16, 32, 512), 32, None), ((16, 32, 512), 32, 3), ((16, 64, 512), 32, 2), ((32, 32, 512), 32, 2)],
}

GROUP_SHIFTS = (0, 3, 5)  # --groups


def filled(shape, dtype):
    """Non-constant data without a large temporary: a hashed counter viewed as dtype."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    words = cupy.arange(-(-n // 4), dtype=cupy.uint32) * cupy.uint32(2654435761)
    words ^= words >> 15
    return words.view(cupy.uint8)[:n].view(dtype).reshape(shape)


def median_ms(fn, sets, reps: int) -> float:
    """Median milliseconds of `reps` single launches fn(set), launch k reading sets[k % len(sets)], after warm-up, the
    GPU kept busy while they are queued. A launch slower than 20 s / reps gets fewer runs (about 20 s of them)."""
    budget = timing.Budget(row_s=10.0, min_runs=reps, max_runs=reps)
    stats, _ = timing.measure(lambda k: fn(sets[k % len(sets)]), budget)
    return stats.median * 1e3


def same_bits(x, y) -> bool:
    bits = np.dtype(f"u{x.dtype.itemsize}")
    return bool(cupy.array_equal(x.view(bits), cupy.ascontiguousarray(y).view(bits)))


def probe_case(shape, dtype, reps, variants, extra=()):
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    # A launch reads the matrix and writes as many bytes: enough (a, out, dst) sets to rotate past twice the L2.
    count = timing.sets_past_l2(2 * nbytes, cupy.cuda.runtime.getDevice())
    sets = []
    for _ in range(count):
        a = filled(shape, dtype)
        sets.append((a, cupy.empty(shape[::-1], dtype), cupy.empty_like(a)))
    a, out, dst = sets[0]
    rows = []
    copy_ms = median_ms(lambda s: s[2].data.copy_from_device_async(s[0].data, nbytes), sets, reps)
    rows.append(("memcpy D2D", copy_ms, True))
    rows.append(("cupy.ascontiguousarray(a.T)", median_ms(lambda s: cupy.ascontiguousarray(s[0].T), sets, reps), True))
    for v in variants:
        if v.diagnostic:
            run = (lambda s, v=v: v.run(s[0], s[2]))
            ok = True
        else:
            run = (lambda s, v=v: cudakit.transpose(s[0], out=s[1], variant=v.name))
            out.fill(0)
            run(sets[0])
            ok = same_bits(out, a.T)
        rows.append((v.name + (" (diagnostic)" if v.diagnostic else ""), median_ms(run, sets, reps), ok))
    for name, knobs in extra:
        run_cfg = T.vec16_runner(*T.VEC16_STEPS["fast"], **knobs)
        out.fill(0)
        run_cfg(a, out)
        ok = same_bits(out, a.T)
        rows.append((name, median_ms(lambda s: run_cfg(s[0], s[1]), sets, reps), ok))
    del a, out, dst, sets
    cupy.get_default_memory_pool().free_all_blocks()
    return nbytes, copy_ms, rows


def report(shape, dtype, nbytes, copy_ms, rows, summary):
    print(f"\n{np.dtype(dtype).name} {shape[0]}x{shape[1]} ({nbytes / 1e6:.0f} MB each way)")
    for name, ms, ok in rows:
        gbs = 2 * nbytes / (ms * 1e-3) / 1e9
        print(f"  {name:34s} {ms:8.3f} ms {gbs:8.0f} GB/s  {copy_ms / ms:5.3f} x copy{'' if ok else '  WRONG RESULT'}")
        if name == "fast":
            summary.append((np.dtype(dtype).name, shape, gbs, copy_ms / ms, ok))


def register_report():
    print("\nfast-path kernels (registers, local bytes):")
    for e in T.ITEMSIZES:
        for step, (sw, wg) in T.VEC16_STEPS.items():
            for aligned, shift in T.vec16_orders(e):
                k = kernel(T.FAMILY, T.vec16_expression(e, aligned, sw, wg, shift), T.instantiations(e))
                print(f"  {step:17s} E={e} aligned={aligned!s:5s} group_shift={shift} regs={k.num_regs} "
                      f"local={k.local_size_bytes}")


def smoke():
    """Every kernel on small odd shapes and offset views, results checked: a quick run under compute-sanitizer."""
    wrong = 0
    for e, dtype in DTYPES.items():
        for shape in [(97, 1013), (4097, 3), (3, 4097), (129, 257), (61, 33)]:
            n = shape[0] * shape[1]
            for off_in, off_out in [(0, 0), (1, 3)]:
                a = filled((n + off_in,), dtype)[off_in:].reshape(shape)
                out = cupy.zeros(n + off_out, dtype)[off_out:].reshape(shape[::-1])
                for v in cudakit.variants("transpose"):
                    cudakit.transpose(a, out=out, variant=v.name)
                    wrong += not same_bits(out, a.T)
            for v in cudakit.variants("transpose", diagnostics=True):
                if v.diagnostic:
                    v.run(a, cupy.empty_like(a))
    cupy.cuda.get_current_stream().synchronize()
    print(f"smoke: {wrong} wrong results")


def sweep(reps, odd: bool, seams: bool = False, itemsizes=DTYPES):
    for e, dtype in DTYPES.items():
        if e not in itemsizes:
            continue
        for shape in [GOAL_SHAPES[3]] if odd else [GOAL_SHAPES[0], GOAL_SHAPES[1], GOAL_SHAPES[3]]:
            fast = [v for v in cudakit.variants("transpose") if v.name in ("fast", "vec16_swizzled" if odd else "")]
            extra = [(f"fast {cfg}", dict(shape=cfg)) for cfg in (SWEEP_ODD if odd else SWEEP)[e]]
            if odd and seams:
                extra = [(f"fast {cfg} seam {seam} min {mb or 'lib'}", dict(shape=cfg, seam=seam, min_blocks=mb))
                         for cfg, seam, mb in SEAMS[e]]
            nbytes, copy_ms, rows = probe_case(shape, dtype, reps, fast, extra)
            report(shape, dtype, nbytes, copy_ms, rows, [])
            print(f"  (fast = {T.vec16_shape(e, shape[1] * e % 16 == 0 and shape[0] * e % 16 == 0)})")


def sweep_groups(reps, itemsizes=DTYPES):
    """Block orders: consecutive blocks go down 2^group_shift tile rows before moving a tile column right (fast: the
    library's choice, vec16_group_shift)."""
    fast = [v for v in cudakit.variants("transpose") if v.name == "fast"]
    cases = [((8192, 8192), np.float32)] + [(shape, d) for shape in GOAL_SHAPES for e, d in DTYPES.items()
                                            if e in itemsizes]
    for shape, dtype in cases:
        extra = [(f"fast group_shift {g}", dict(group_shift=g)) for g in GROUP_SHIFTS]
        nbytes, copy_ms, rows = probe_case(shape, dtype, reps, fast, extra)
        report(shape, dtype, nbytes, copy_ms, rows, [])


# --lines: N-D permutations through the lines kernels. (dims, axes, dtype): the sweeps' slowest rows of sessions
# 38's seeds 23 and 24, the bench's 64 MB image layouts, and gathers (the last axis moves) past 2 MiB.
LINE_CASES = [((1, 1325, 155, 16), (0, 2, 1, 3), np.float64), ((5, 62, 2411, 4), (0, 2, 1, 3), np.float16),
              ((8, 1850, 2, 9), (0, 2, 1, 3), np.float64), ((3, 27, 1032, 30), (0, 2, 1, 3), np.float32),
              ((60, 59, 9, 33), (0, 2, 1, 3), np.float64), ((32, 128, 128, 64), (0, 2, 1, 3), np.float64),
              ((64, 512, 512, 3), (0, 2, 1, 3), np.uint8), ((64, 512, 512, 3), (0, 2, 1, 3), np.float32),
              ((16, 512, 512, 5), (0, 2, 1, 3), np.float16), ((16, 512, 512, 9), (0, 2, 1, 3), np.float64),
              ((16, 512, 512, 6), (0, 2, 1, 3), np.float32), ((512, 512, 64), (1, 0, 2), np.float64),
              ((4, 64, 96, 80), (2, 0, 3, 1), np.float32), ((64, 64, 64, 64), (3, 1, 0, 2), np.float32),
              ((64, 64, 64, 64), (3, 1, 0, 2), np.float64), ((64, 64, 64, 64), (3, 1, 0, 2), np.uint8),
              ((16, 512, 512, 4), (0, 2, 1, 3), np.float32), ((32, 512, 512, 4), (0, 2, 1, 3), np.float16),
              ((8, 1024, 1024, 7), (0, 2, 1, 3), np.uint8), ((8, 1024, 1024, 3), (0, 2, 1, 3), np.float16)]


def lines(reps: int):
    """GPU time of each LINE_CASES permutation: cudakit.transpose, the lines kernel over one-element lines where the
    last axis moves, CuPy's copy; then both per call (host time in), each against a D2D copy of the same bytes."""
    print("dims axes dtype MB | copy | cudakit (path) | lines of one element | cupy | per call: cudakit, cupy (us)")
    for dims, axes, dtype in LINE_CASES:
        nbytes = int(np.prod(dims)) * np.dtype(dtype).itemsize
        count = timing.sets_past_l2(2 * nbytes, cupy.cuda.runtime.getDevice())
        shape = tuple(dims[i] for i in axes)
        sets = [(filled(dims, dtype), cupy.empty(shape, dtype)) for _ in range(count)]
        a, out = sets[0]
        merged_out, merged, perm = T._nd.transpose_plan(a.shape, axes)
        runs = {"copy": lambda s: s[1].data.copy_from_device_async(s[0].data, nbytes),
                "cudakit": lambda s: cudakit.transpose(s[0], axes, out=s[1]),
                "cupy": lambda s: cupy.ascontiguousarray(cupy.transpose(s[0], axes))}
        if perm[-1] != len(perm) - 1:
            runs["one-element lines"] = lambda s: T.run_lines(s[0], s[1], merged + (1,), perm + (len(perm),))
        elif T.line_transposes(merged, perm, a.itemsize):  # what the lines kernels make of it
            runs["lines kernels"] = lambda s: T.run_lines(s[0], s[1], merged, perm)
        cells = []
        for name, run in runs.items():
            if name != "copy":
                out.fill(0)
                result = run(sets[0])
                if name == "cupy":
                    out[...] = result
                if not same_bits(out, cupy.transpose(a, axes)):
                    cells.append(f"{name} WRONG")
                    continue
            ms = median_ms(run, sets, reps)
            cells.append(f"{name} {ms * 1e3:8.1f} us")
        per_call = []
        for name in ("cudakit", "cupy"):
            stats, _ = timing.measure(lambda k, run=runs[name]: run(sets[k % len(sets)]),
                                      timing.Budget(row_s=2.0, min_runs=reps, max_runs=reps), per_call=True)
            per_call.append(f"{stats.median * 1e6:.1f}")
        print(f"{'x'.join(map(str, dims))} {''.join(map(str, axes))} {np.dtype(dtype).name} {nbytes / 1e6:.1f} MB | "
              + " | ".join(cells) + " | per call " + " / ".join(per_call), flush=True)
        del a, out, sets
        cupy.get_default_memory_pool().free_all_blocks()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--sweep", action="store_true", help="time other vec16 tile shapes of the fast step instead")
    ap.add_argument("--odd", action="store_true", help="with --sweep: only the odd shape, larger tiles")
    ap.add_argument("--seams", action="store_true", help="with --sweep --odd: tiles meeting on 16/32/64-byte seams")
    ap.add_argument("--groups", action="store_true", help="other block orders of the fast step instead")
    ap.add_argument("--smoke", action="store_true", help="small checked cases of every kernel, no timing")
    ap.add_argument("--seeds", action="store_true", help="also time the seed transposes on every goal shape")
    ap.add_argument("--lines", action="store_true", help="N-D permutations through the lines kernels instead")
    ap.add_argument("--itemsizes", default="1,2,4,8", help="with --sweep or --groups: element sizes, comma-separated")
    args = ap.parse_args()
    if args.lines:
        return lines(args.reps)
    if args.smoke:
        return smoke()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(f"device: {name}, {props['multiProcessorCount']} SMs, L2 {props['l2CacheSize'] >> 20} MB")
    itemsizes = {int(e) for e in args.itemsizes.split(",")}
    if args.groups:
        return sweep_groups(args.reps, itemsizes)
    if args.sweep:
        return sweep(args.reps, args.odd, args.seams, itemsizes)
    every = cudakit.variants("transpose", diagnostics=True)
    mine = [v for v in every if not v.seed]
    summary = []
    nbytes, copy_ms, rows = probe_case((8192, 8192), np.float32, args.reps, every)
    report((8192, 8192), np.float32, nbytes, copy_ms, rows, summary)
    for e, dtype in DTYPES.items():
        for shape in GOAL_SHAPES:
            variants = [v for v in every if not v.diagnostic] if args.seeds else mine
            nbytes, copy_ms, rows = probe_case(shape, dtype, args.reps, variants)
            report(shape, dtype, nbytes, copy_ms, rows, summary)
    register_report()
    print("\nfast vs goals (ratio to the copy of the same bytes):")
    for name, shape, gbs, ratio, ok in summary:
        goal = GOAL_F32_8192 if shape == (8192, 8192) else GOAL
        verdict = "ok" if ratio >= goal and ok else "MISS"
        print(f"  {name:8s} {shape[0]:>6d}x{shape[1]:<6d} {gbs:6.0f} GB/s {ratio:5.3f} (goal {goal:.2f}) {verdict}")


if __name__ == "__main__":
    main()
