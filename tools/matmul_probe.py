"""Timing probe for cudakit.matmul: variants and tile candidates against cupy.matmul (cuBLAS) at the goal shapes.

    PYTHONPATH=. python3 tools/matmul_probe.py [--quick] [--json FILE]     time (CUDA events, warm-up, median)
    PYTHONPATH=. python3 tools/matmul_probe.py --experiments    the EXPERIMENTS tiles beside the active one
    compute-sanitizer --tool memcheck python3 tools/matmul_probe.py --sanitize   every kernel once on odd shapes

Every timed result is first checked against a float64 reference. Timed with cudakit.bench.timing.measure: single
launches between CUDA events, queued back to back behind a GPU-side hold (the host's launch overhead stays out),
each reading its own operands (A, B, out), enough sets rotated that together they exceed twice the L2; the median
of at least 7 runs (up to 350 for small products, about 0.1 s of timed work a measurement).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

import cupy
import numpy as np

import cudakit
from cudakit import _check, _dmma, _tune
from cudakit.bench import timing

mm = importlib.import_module("cudakit.matmul")
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)

GOALS = {  # (m, n, k): cuBLAS TFLOP/s seen by the bench on an H100, goal ratio
    F32: [((512, 512, 512), 1.0), ((2048, 2048, 2048), 0.85), ((4096, 4096, 4096), 0.90),
          ((8192, 8192, 8192), 0.90), ((4097, 4095, 4099), 0.85), ((65536, 1024, 1024), 0.85),
          ((1024, 1024, 1024), None), ((256, 256, 256), 1.0)],
    F64: [((4096, 4096, 4096), 0.5), ((2048, 2048, 2048), None), ((512, 512, 512), None)],
}


# Tiles outside the tune space, for `--experiments` (dynamic shared memory lets slices pass 48 KiB).
EXPERIMENTS = (
    _tune.simt(128, 128, 16, 32, 64, 8, 8, min_blocks=2),
    _tune.simt(128, 128, 16, 64, 32, 8, 8, min_blocks=2, stages=1),
    _tune.simt(128, 128, 32, 64, 32, 8, 8, min_blocks=2, stages=1),
    _tune.simt(128, 128, 32, 64, 32, 8, 8, min_blocks=2),
    _tune.simt(128, 128, 32, 64, 32, 8, 8, min_blocks=1),
    _tune.simt(128, 128, 16, 64, 32, 8, 8, min_blocks=1),
    _tune.simt(256, 128, 8, 64, 64, 16, 8, min_blocks=1),
    _tune.simt(256, 128, 16, 64, 64, 16, 8, min_blocks=1),
    _tune.simt(128, 256, 16, 64, 64, 8, 16, min_blocks=1),
    _tune.simt(256, 128, 16, 64, 64, 8, 16, min_blocks=1),
)


def rand(shape, dtype, order="C"):
    return cupy.asarray(cupy.random.uniform(-1.0, 1.0, size=shape, dtype=np.float64).astype(dtype), order=order)


# About 0.1 s of timed launches a measurement: 7 runs up to ~28 ms a launch (8192^3 float32), up to 350 for small
# products; a launch slower than ~28 ms gets fewer (about 0.2 s of them).
BUDGET = timing.Budget(row_s=0.1, min_runs=7, max_runs=350)


def operand_sets(m, n, k, dtype, f_order=False):
    """Enough {A, B, out} sets (C-order; with f_order also AF, BF) that, rotated launch by launch, they exceed twice
    the L2."""
    count = timing.sets_past_l2((m * k + k * n + m * n) * dtype.itemsize, cupy.cuda.runtime.getDevice())
    sets = []
    for _ in range(count):
        s = {"A": rand((m, k), dtype), "B": rand((k, n), dtype), "out": cupy.empty((m, n), dtype)}
        if f_order:
            s["AF"], s["BF"] = cupy.asfortranarray(s["A"]), cupy.asfortranarray(s["B"])
        sets.append(s)
    return sets


def gpu_ms(fn, sets) -> float:
    """Median milliseconds of one launch fn(set), launch k reading sets[k % len(sets)]."""
    stats, _ = timing.measure(lambda k: fn(sets[k % len(sets)]), BUDGET)
    return stats.median * 1e3


def check(out, A, B, what):
    err = _check.product_error(out, A, B)
    ok = err <= _check.tolerance(out.dtype, A.shape[1])
    if not ok:
        print(f"  WRONG: {what}: relative error {err:.2e}", flush=True)
    return ok


def probe(quick: bool, fast_only: bool = False, experiments: bool = False):
    device = cupy.cuda.runtime.getDevice()
    cc = _tune.compute_capability(device)
    props = cupy.cuda.runtime.getDeviceProperties(device)
    print(f"device: {_tune.device_key(device)}, {props['multiProcessorCount']} SMs, clock {props.get('clockRate', 0) / 1e6:.2f} GHz",
          flush=True)
    rows = []
    for dtype, goals in GOALS.items():
        config, source = _tune.active_config(device, dtype)
        print(f"\n{dtype.name}: active config ({source}) {config}", flush=True)
        tiles = _tune.candidates(dtype, cc)
        for (m, n, k), goal in goals:
            if quick and m * n * k > 4096 ** 3 or experiments and (dtype != F32 or m * n * k < 2048 ** 3):
                continue
            flops = 2.0 * m * n * k
            layouts = (m, n, k) == (4096, 4096, 4096) and not experiments  # the other layouts, read in place
            sets = operand_sets(m, n, k, dtype, f_order=layouts)  # every entry fn(set) takes one of these
            A, B, out = sets[0]["A"], sets[0]["B"], sets[0]["out"]
            ref_ms = gpu_ms(lambda s: cupy.matmul(s["A"], s["B"], out=s["out"]), sets)
            cublas = flops / ref_ms / 1e9
            entries = [("fast", lambda s: cudakit.matmul(s["A"], s["B"], out=s["out"]))]
            big = m * n * k >= 2048 ** 3
            if experiments:  # as the fast variant runs them (stream-K tail, padding), beside the active tile
                tiles = [mm.plan(device, dtype, m, n, k)[0], *EXPERIMENTS]
                entries += [(t.name, (lambda s, t=t: mm.run_fast_tile(t, s["A"], s["B"], s["out"]))) for t in tiles]
            elif fast_only:  # the fast variant and its tile launched directly (no padding of misaligned operands)
                tile = mm.plan(device, dtype, m, n, k)[0]
                direct = _dmma.run if isinstance(tile, _dmma.DmmaTile) else lambda A, B, out, t: mm.run_tile(t, A, B, out)
                entries.append((f"{tile.name} direct",
                                lambda s, tile=tile, direct=direct: direct(s["A"], s["B"], s["out"], tile)))
            elif m * n * k <= 4096 ** 3 and m * n * k >= 512 ** 3:
                entries += [(name, (lambda s, name=name: cudakit.matmul(s["A"], s["B"], out=s["out"], variant=name)))
                            for name in ("blocktile_2d", "warp_tiled", "double_buffered")]
            entries += [(t.name, (lambda s, t=t: mm.run_tile(t, s["A"], s["B"], s["out"]))) for t in tiles
                        if not (fast_only or experiments) and not (t.bm <= 64 and big and m * n * k > 4096 ** 3)]
            if layouts:
                entries += [("fast A F-order", lambda s: cudakit.matmul(s["AF"], s["B"], out=s["out"])),
                            ("fast B F-order", lambda s: cudakit.matmul(s["A"], s["BF"], out=s["out"])),
                            ("fast both F-order", lambda s: cudakit.matmul(s["AF"], s["BF"], out=s["out"])),
                            ("fast A.T @ B.T views",
                             lambda s: cudakit.matmul(s["BF"].T, s["AF"].T, out=s["out"][:n, :m]))]
            print(f"  {m}x{n}x{k}: cuBLAS {cublas:6.2f} TFLOP/s ({ref_ms:.4f} ms)", flush=True)
            for name, fn in entries:
                out.fill(np.nan)
                fn(sets[0])
                if name == "fast A.T @ B.T views":
                    ok = check(out, B.T, A.T, name) if m == n == k else True
                elif "F-order" in name:
                    ok = check(out, A, B, name)
                else:
                    ok = check(out, A, B, name)
                if not ok:
                    rows.append({"dtype": dtype.name, "shape": [m, n, k], "name": name, "wrong": True})
                    continue
                ms = gpu_ms(fn, sets)
                rate = flops / ms / 1e9
                rows.append({"dtype": dtype.name, "shape": [m, n, k], "name": name, "ms": ms, "tflops": rate,
                             "cublas_tflops": cublas, "ratio": rate / cublas, "goal": goal})
                flag = "" if goal is None or name != "fast" else ("  ok" if rate / cublas >= goal else "  MISS")
                print(f"    {name:44} {rate:6.2f} TFLOP/s  {rate / cublas:5.2f}x{flag}", flush=True)
            del sets, A, B, out
            cupy.get_default_memory_pool().free_all_blocks()
    return rows


def sanitize():
    """Every variant and every tile once on odd shapes and layouts, each checked (run under compute-sanitizer)."""
    cupy.cuda.set_allocator(None)  # each array its own allocation: memcheck sees one element past any of them
    cc = _tune.compute_capability(cupy.cuda.runtime.getDevice())
    runs = 0
    for dtype in (F32, F64):
        shapes = [(1, 1, 1), (7, 5, 13), (33, 35, 31), (129, 67, 131)]
        for v in (v for v in cudakit.variants("matmul") if not v.tensor_core):
            for m, k, n in shapes:
                for oa, ob in (("C", "C"), ("F", "F")):
                    cudakit.matmul(rand((m, k), dtype, oa), rand((k, n), dtype, ob), variant=v.name, check=True)
                    runs += 1
        for tile in _tune.candidates(dtype, cc):
            for m, k, n in [(1, 1, 1), (129, 17, 257), (67, 131, 5), (2 * tile.bm + 3, 24 * tile.bk, 2 * tile.bn + 5)]:
                for oa, ob in (("C", "C"), ("C", "F"), ("F", "C"), ("F", "F")):
                    A, B = rand((m, k), dtype, oa), rand((k, n), dtype, ob)
                    out = cupy.empty((m, n), dtype)
                    mm.run_tile(tile, A, B, out)
                    assert check(out, A, B, tile.name), tile.name
                    runs += 1
                A = rand((m + 1, k + 3), dtype)[1:, 1:k + 1]  # unaligned: the element-load path
                B = rand((k, n + 1), dtype)[:, 1:]
                out = cupy.empty((m, n), dtype)
                mm.run_tile(tile, A, B, out)
                assert check(out, A, B, tile.name + " unaligned"), tile.name
                runs += 1
    cupy.cuda.Device().synchronize()
    print(f"sanitize: {runs} matmul launches checked")


def one(name: str, dtype: str, m: int, n: int, k: int):
    """Three launches of one tile (for ncu: profile the last)."""
    tile = _tune._BY_NAME[name]
    A, B = rand((m, k), np.dtype(dtype)), rand((k, n), np.dtype(dtype))
    out = cupy.empty((m, n), dtype)
    for _ in range(3):
        mm.run_tile(tile, A, B, out)
    assert check(out, A, B, name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--one", nargs=5, metavar=("TILE", "DTYPE", "M", "N", "K"))
    ap.add_argument("--fast-only", action="store_true", help="only fast and its tile launched directly")
    ap.add_argument("--experiments", action="store_true", help="the EXPERIMENTS tiles on the large float32 shapes")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.sanitize:
        sanitize()
        return 0
    if args.one:
        one(args.one[0], args.one[1], *map(int, args.one[2:]))
        return 0
    rows = probe(args.quick, args.fast_only, args.experiments)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
