"""Probe for the standalone FP64 tensor-core kernel (kernels/matmul_dmma.cu through cudakit._dmma).

    PYTHONPATH=. python3 tools/dmma_probe.py [--sizes 2048 4096 8192] [--json FILE]
    PYTHONPATH=. python3 tools/dmma_probe.py --shapes 683x911x1237:FC ... [--orientations] [--tiles planned|NAME ...]
                                                                 (m x k x n, A and B orders)
    PYTHONPATH=. python3 tools/dmma_probe.py --shapes ... --variants other/matmul_dmma.cu ... [--rounds 5] [--tiles ...]

1. Correctness: every tile on odd shapes in all four layouts against float64 cupy.matmul (relative error within
   _check.tolerance(float64, k)).
2. TFLOP/s of every tile against cupy.matmul (cuBLAS) and cudakit.matmul (the current DMMA path) at each size, C
   order; then the best tile at 4096^3 in the other three layouts, and the best tile built with m16n8k16 on sm_90
   (-DCUDAKIT_DMMA_K=16; it may spill) to compare mma shapes.
With --shapes, only: the planner's pick and the GPU-time TFLOP/s of cupy.matmul, cudakit.matmul and every tile (each
checked first) on those shapes, the mid-size products the planner weighs the tiles for. With --variants, an A/B of
kernel sources in one process, the sources timed in turn (variants_table).
Timed with cudakit.bench.timing.measure (CUDA events, input sets rotated past the L2, median). Every case catches and
prints its own exception.
"""
from __future__ import annotations

import argparse
import importlib
import json
import time
import traceback
from pathlib import Path

import cupy
import numpy as np

import cudakit
from cudakit import _check, _compile, _dmma
from cudakit.bench import timing
from cudakit.testing import poisoned, random_array

BUDGET = timing.Budget(row_s=0.15, min_runs=3, max_runs=50)
SHAPES = [(1, 1, 1), (17, 33, 65), (130, 12, 15), (257, 300, 131), (1000, 999, 1001)]
LAYOUTS = (("C", "C"), ("F", "C"), ("C", "F"), ("F", "F"))


def case(label: str, fn):
    """fn() under a label; its exception is printed, never raised. Returns fn's result or None."""
    try:
        return fn()
    except Exception as exc:  # one failing case must not hide the others
        print(f"  {label}: FAILED {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc(limit=3)
        return None


def check(tile, a_order, b_order, m, k, n, transposed=None, run=None):
    """tile's product (run's, where given: f(A, B, out)) on fresh operands against float64 cupy.matmul."""
    A, B = random_array((m, k), np.float64, a_order), random_array((k, n), np.float64, b_order)
    out = poisoned((m, n), np.float64)
    if run is None:
        _dmma.run(A, B, out, tile, transposed=transposed)
    else:
        run(A, B, out)
    err = _check.relative_error(out, cupy.matmul(A, B))
    tol = _check.tolerance(np.float64, k)
    if not err <= tol:
        raise AssertionError(f"{m}x{k}x{n} {a_order}{b_order}: relative error {err:.2e} > {tol:.1e}")


def operand_sets(size: int, a_order="C", b_order="C"):
    per_set = 3 * size * size * 8
    count = min(timing.sets_past_l2(per_set, cupy.cuda.runtime.getDevice(), max_sets=4), 2 if size >= 8192 else 4)
    return [(random_array((size, size), np.float64, a_order), random_array((size, size), np.float64, b_order),
             cupy.empty((size, size), np.float64)) for _ in range(count)]


def tflops(call, sets, size: int) -> float:
    seconds = timing.measure(lambda i: call(*sets[i % len(sets)]), BUDGET)[0].median
    return 2 * size ** 3 / seconds / 1e12


class K16:
    """The tile built with -DCUDAKIT_DMMA_K=16 (m16n8k16 on sm_90) in a module of its own."""

    def __init__(self, tile):
        self.tile = tile
        mod = cupy.RawModule(code=_compile.source(_dmma.FAMILY), options=_compile.options() + ("-DCUDAKIT_DMMA_K=16",),
                             name_expressions=tile.expressions())
        self.fns = {e: mod.get_function(e) for e in tile.expressions()}

    def __call__(self, A, B, out):
        t = self.tile
        m, k = A.shape
        n = B.shape[1]
        fn = self.fns[t.expression(True, False)]
        assert A.flags.c_contiguous and B.flags.c_contiguous and k % 2 == 0 and n % 2 == 0
        _compile.launch(fn, (-(-m // t.bm) * -(-n // t.bn), 1, 1), (t.threads,),
                        (A, B, out, m, n, k, k, n, 0, 0, 0, k), t.shared_bytes)


def split_checked(tile, runs, depth, a_order, b_order, m, k, n):
    """_dmma.split_launcher's run of `runs` products over runs of k `depth` deep, checked on fresh operands."""
    A, B = random_array((m, k), np.float64, a_order), random_array((k, n), np.float64, b_order)
    out = poisoned((m, n), np.float64)
    fn = _dmma.split_launcher(A, B, out, tile, runs, depth)  # (operands read in 8-byte halves too)
    fn(A, B, out)
    err = _check.relative_error(out, cupy.matmul(A, B))
    if not err <= _check.tolerance(np.float64, k):
        raise AssertionError(f"split {runs}: relative error {err:.2e}")
    return fn


def shape_operands(text: str):
    """((m, k, n, A's order, B's order), operand sets rotated past the L2, rate(f(A, B, out)) -> GPU-time TFLOP/s) of
    an 'MxKxN[:AB]' shape."""
    dims, _, orders = text.partition(":")
    m, k, n = map(int, dims.split("x"))
    a_order, b_order = (orders or "CC")
    count = timing.sets_past_l2((m * k + k * n + m * n) * 8, cupy.cuda.runtime.getDevice(), max_sets=8)
    sets = [(random_array((m, k), np.float64, a_order), random_array((k, n), np.float64, b_order),
             cupy.empty((m, n), np.float64)) for _ in range(count)]
    rate = lambda call: 2 * m * n * k / timing.measure(lambda i: call(*sets[i % count]), BUDGET)[0].median / 1e12
    return (m, k, n, a_order, b_order), sets, rate


def shapes_table(shapes: list[str], rows: list, orientations: bool = False, tiles=_dmma.TILES,
                 split_counts=()) -> None:
    """GPU-time TFLOP/s of cupy.matmul, cudakit.matmul and every tile on each 'MxKxN[:AB]' shape; orientations: each
    tile also run as C = A @ B (/N, its C stored in 16-byte pairs) and as C^T = B^T @ A^T (/T, 8-byte stores down C's
    columns, no register moves for two C-order operands)."""
    for text in shapes:
        (m, k, n, a_order, b_order), sets, rate = shape_operands(text)
        ref = rate(lambda A, B, o: cupy.matmul(A, B, out=o))
        tile, splits, _ = importlib.import_module("cudakit.matmul").plan(cupy.cuda.runtime.getDevice(), np.float64, m, n, k)
        line = {"shape": text, "plan": f"{tile.name}/{splits}", "cublas": ref,
                "current": rate(lambda A, B, o: cudakit.matmul(A, B, out=o))}
        for tile in tiles:
            case(tile.name, lambda: check(tile, a_order, b_order, m, k, n))
            line[tile.name] = rate(lambda A, B, o: _dmma.run(A, B, o, tile))
            for splits in split_counts:
                depth = -(-(-(-k // splits)) // tile.bk) * tile.bk  # ceil(k / splits), rounded up to slices
                runs = -(-k // depth)
                label = f"{tile.name}/k{runs}"
                fn = case(label, lambda: split_checked(tile, runs, depth, a_order, b_order, m, k, n))
                if fn is not None:
                    line[label] = rate(fn)
            for suffix, transposed in (("/N", False), ("/T", True)) if orientations else ():
                case(tile.name + suffix, lambda: check(tile, a_order, b_order, m, k, n, transposed))
                line[tile.name + suffix] = rate(lambda A, B, o: _dmma.run(A, B, o, tile, transposed=transposed))
        rows.append(line)
        print(f"  {text:22s} " + "  ".join(f"{key} {v}" if key == "plan" else f"{key} {v:6.2f}" if key == "cublas"
                                            else f"{key} x{v / ref:.2f}" for key, v in line.items() if key != "shape"),
              flush=True)
        sets.clear()
        cupy.get_default_memory_pool().free_all_blocks()


def variant_runner(path: str, tile):
    """f(A, B, out): `tile`'s launches as _dmma.launches plans them (A and B readable in place), each kernel taken
    from a module built from the matmul_dmma.cu at `path` (its includes from kernels/) instead of kernels/'s own."""
    mod = cupy.RawModule(code=Path(path).read_text(), options=_compile.options(), name_expressions=tile.expressions())
    names = {_compile.kernel(_dmma.FAMILY, e, tile.expressions()): e for e in tile.expressions()}

    def run(A, B, out):
        for fn, grid, block, args, shared in _dmma.launches(A, B, out, tile):
            _compile.launch(mod.get_function(names[fn]), grid, block, args, shared)
    return run


def variants_table(shapes: list[str], paths: list[str], tiles, rounds: int, rows: list) -> None:
    """An A/B of kernel sources in one process: on each 'MxKxN[:AB]' shape, each tile (the planner's k-whole tile
    where tiles is empty) from kernels/matmul_dmma.cu and from each of `paths`, checked against float64 first, then
    timed in `rounds` rounds that take the sources (and cupy.matmul) in turn; the median of the rounds' medians each.
    Run-to-run drift (clocks, power) then falls on every source alike."""
    for text in shapes:
        (m, k, n, a_order, b_order), sets, rate = shape_operands(text)
        plan = importlib.import_module("cudakit.matmul").plan(cupy.cuda.runtime.getDevice(), np.float64, m, n, k)[0]
        for tile in tiles or [plan if isinstance(plan, _dmma.DmmaTile) else _dmma.DEFAULT]:
            runners = {"cublas": lambda A, B, o: cupy.matmul(A, B, out=o)}
            for path in [str(_compile.kernel_dir() / f"{_dmma.FAMILY}.cu")] + paths:
                fn = case(path, lambda: variant_runner(path, tile))
                if fn is not None and case(path + " check", lambda: check(tile, a_order, b_order, m, k, n, run=fn)
                                           or True):
                    runners[path] = fn
            samples = {name: [] for name in runners}
            for _ in range(rounds):
                for name, fn in runners.items():
                    samples[name].append(rate(fn))
            line = {"shape": text, "tile": tile.name, **{name: float(np.median(v)) for name, v in samples.items()},
                    "spread": {name: (min(v), max(v)) for name, v in samples.items()}}
            rows.append(line)
            ref = line["cublas"]
            print(f"  {text:22s} {tile.name}  " + "  ".join(
                f"{name} {line[name]:6.2f} ({min(v):.1f}-{max(v):.1f}) x{line[name] / ref:.3f}"
                for name, v in samples.items()), flush=True)
        sets.clear()
        cupy.get_default_memory_pool().free_all_blocks()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="*", default=[2048, 4096, 8192])
    p.add_argument("--shapes", nargs="*")
    p.add_argument("--orientations", action="store_true", help="with --shapes: each tile in both orientations too")
    p.add_argument("--tiles", nargs="*", help="with --shapes: only these tiles (names, or 'planned')")
    p.add_argument("--splits", type=int, nargs="*", default=[], help="with --shapes: each tile with k split so too")
    p.add_argument("--variants", nargs="*", default=[],
                   help="with --shapes: matmul_dmma.cu files timed against kernels/'s in turn (tiles: --tiles)")
    p.add_argument("--rounds", type=int, default=5, help="with --variants: rounds of the sources in turn")
    p.add_argument("--json")
    args = p.parse_args()
    start = time.perf_counter()
    dev = cupy.cuda.Device()
    print(f"device {cupy.cuda.runtime.getDeviceProperties(dev.id)['name'].decode()} sm_{dev.compute_capability}")
    rows = []
    if args.shapes:
        named = {t.name: t for t in _dmma.TILES}
        tiles = [t for name in args.tiles for t in (_dmma.PLANNED if name == "planned" else [named[name]])] \
            if args.tiles else _dmma.TILES
        if args.variants:
            variants_table(args.shapes, args.variants, tiles if args.tiles else [], args.rounds, rows)
        else:
            shapes_table(args.shapes, rows, args.orientations, tiles, args.splits)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, default=str)
        return

    print("correctness (odd shapes, layouts AB: C/F each):", flush=True)
    for tile in _dmma.TILES:
        bad = 0
        for a_order, b_order in LAYOUTS:
            for m, k, n in SHAPES:
                ok = case(f"{tile.name} {a_order}{b_order} {m}x{k}x{n}",
                          lambda: check(tile, a_order, b_order, m, k, n) or True)
                bad += not ok
        print(f"  {tile.name}: {'ok' if not bad else f'{bad} FAILED'}", flush=True)

    best = {}
    for size in args.sizes:
        print(f"{size}^3 C order, TFLOP/s:", flush=True)
        sets = case(f"{size} operands", lambda: operand_sets(size))
        if sets is None:
            continue
        ref = case("cupy.matmul", lambda: tflops(lambda A, B, o: cupy.matmul(A, B, out=o), sets, size))
        cur = case("cudakit.matmul", lambda: tflops(lambda A, B, o: cudakit.matmul(A, B, out=o), sets, size))
        print(f"  cupy.matmul {ref or 0:6.2f}   cudakit.matmul (current) {cur or 0:6.2f}", flush=True)
        for tile in _dmma.TILES:
            rate = case(tile.name, lambda: tflops(lambda A, B, o: _dmma.run(A, B, o, tile), sets, size))
            if rate is None:
                continue
            rows.append({"size": size, "tile": tile.name, "tflops": rate, "cublas": ref, "current": cur})
            best[size] = max(best.get(size, (0, None)), (rate, tile), key=lambda x: x[0])
            print(f"  {tile.name:26s} {rate:6.2f}  x{rate / ref if ref else 0:.2f} cuBLAS  "
                  f"x{rate / cur if cur else 0:.2f} current", flush=True)
        # C order is run as C^T = B^T @ A^T; the default tile as written (A's fragments re-paired in registers):
        plain = case("not transposed", lambda: tflops(lambda A, B, o: _dmma.run(A, B, o, transposed=False), sets, size))
        if plain:
            rows.append({"size": size, "tile": _dmma.DEFAULT.name + " not transposed", "tflops": plain, "cublas": ref})
            print(f"  {_dmma.DEFAULT.name + ' not transposed':26s} {plain:6.2f}  x{plain / ref if ref else 0:.2f} cuBLAS",
                  flush=True)
        del sets
        cupy.get_default_memory_pool().free_all_blocks()

    tile = (best.get(4096) or (best[max(best)] if best else (0, _dmma.DEFAULT)))[1]
    print(f"4096^3 other layouts, best tile {tile.name}:", flush=True)
    for a_order, b_order in LAYOUTS[1:]:
        def layout_case():
            sets = operand_sets(4096, a_order, b_order)
            mine = tflops(lambda A, B, o: _dmma.run(A, B, o, tile), sets, 4096)
            ref = tflops(lambda A, B, o: cupy.matmul(A, B, out=o), sets, 4096)
            cur = tflops(lambda A, B, o: cudakit.matmul(A, B, out=o), sets, 4096)
            rows.append({"size": 4096, "layout": a_order + b_order, "tile": tile.name, "tflops": mine,
                         "cublas": ref, "current": cur})
            print(f"  {a_order}{b_order}: {mine:6.2f}  cupy {ref:6.2f}  current {cur:6.2f}  x{mine / ref:.2f} cuBLAS",
                  flush=True)
        case(f"layout {a_order}{b_order}", layout_case)

    if int(dev.compute_capability) >= 90:
        print("m16n8k16 (-DCUDAKIT_DMMA_K=16), C order:", flush=True)
        for t in {tile, _dmma.DEFAULT}:
            def k16_case():
                fn = K16(t)
                A, B = random_array((1000, 1002), np.float64), random_array((1002, 998), np.float64)
                out = poisoned((1000, 998), np.float64)
                fn(A, B, out)
                err = _check.relative_error(out, cupy.matmul(A, B))
                sets = operand_sets(4096)
                rate = tflops(fn, sets, 4096)
                rows.append({"size": 4096, "tile": t.name + "_k16", "tflops": rate, "error": err})
                print(f"  {t.name}_k16 4096^3 {rate:6.2f}  (error {err:.1e}, "
                      f"{'ok' if err <= _check.tolerance(np.float64, 1002) else 'WRONG'})", flush=True)
            case(f"{t.name} k16", k16_case)

    print(f"total {time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, default=str)


if __name__ == "__main__":
    main()
