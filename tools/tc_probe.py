"""Probe of the Ampere-style tensor-core kernels (kernels/matmul_tc.cu): correctness first, then speed against cuBLAS.

    PYTHONPATH=. python3 tools/tc_probe.py [--sizes 2048 4096 8192] [--quick] [--no-check] [--no-time]

1. Correctness: wmma and mma_sync (every tile that fits this GPU) and run_fast on odd shapes, the four layouts,
   misaligned views and a broadcast batch, against a float64 reference of the same inputs (_check.product_error
   against _check.tolerance, or _check.tf32_tolerance for float32 in TF32). One line per case: ok / WRONG / ERROR.
2. Speed: n^3 products, float16, bfloat16 and float32 in TF32, each kernel against cupy.matmul (cuBLAS; CUPY_TF32=1
   is set before CuPy is imported, so its float32 runs in TF32 too) and torch.matmul where torch imports (TF32
   allowed for float32). Timed with cudakit.bench.timing.measure (CUDA events, median). TFLOP/s = 2 n^3 / time;
   "x cuBLAS" = cuBLAS time / kernel time (above 1: faster than cuBLAS).
Every case catches its own exception and prints it, so one failure never hides the rest.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

os.environ.setdefault("CUPY_TF32", "1")  # before CuPy is imported: cupy.matmul's float32 in TF32, like ours

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cudakit import _check, matmul_tc  # noqa: E402
from cudakit.bench import timing  # noqa: E402
from cudakit.testing import poison  # noqa: E402

NAMES = ("float16", "bfloat16", "float32")
BUDGET = timing.Budget(row_s=0.3, min_runs=5, max_runs=100)


def dtype_of(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def draw(shape, dtype, order="C"):
    """Uniform [0.5, 1.5) in `dtype` (bfloat16 rounded to nearest even on the bits), C or F order."""
    from cudakit.testing import random_array

    return random_array(shape, dtype, order)


def operand(shape, dtype, layout):
    r, c = shape
    if layout == "C":
        return draw(shape, dtype)
    if layout == "T":  # transposed view of a C-order array
        return draw((c, r), dtype).T
    if layout == "offset":  # one element off 16 bytes, lines an odd number apart: padded copy for mma_sync
        return draw((r + 1, c + 3), dtype)[1:, 1:c + 1]
    if layout == "offsetF":  # the same, F-ordered
        return draw((c + 1, r + 3), dtype)[1:, 1:r + 1].T
    raise ValueError(layout)


def bound(name, k):
    return _check.tf32_tolerance(k) if name == "float32" else _check.tolerance(name, k)


def runners(name, cc):
    """(label, run(A, B, out, batch)) of every kernel this GPU runs for dtype `name`."""
    out = []
    if cc >= 80 or name == "float16":
        out.append(("wmma", lambda A, B, o, batch=(1, 0, 0): matmul_tc.run_tc("wmma", A, B, o, batch)))
    if cc >= 80:
        optin = cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]
        for t in matmul_tc.tiles(name):
            if t.shared_bytes(matmul_tc.ITEMSIZE[name]) <= optin:
                label = f"mma_sync {t.bm}x{t.bn}x{t.bk} w{t.wm}x{t.wn} s{t.stages}"
                out.append((label, lambda A, B, o, batch=(1, 0, 0), t=t: matmul_tc.run_tc("mma_sync", A, B, o,
                                                                                            batch, t)))
    if cc >= 80 or name == "float16":
        out.append(("run_fast", lambda A, B, o, batch=(1, 0, 0): matmul_tc.run_fast(A, B, o, batch)))
    return out


def check(cc):
    print("== correctness (relative error ||out - ref|| / || |A| @ |B| || against its bound)")
    bad = 0
    shapes = [(1, 1, 1), (17, 33, 65), (255, 257, 129), (1000, 999, 1001), (2048, 2048, 2048), (4097, 4099, 4095)]
    for name in NAMES:
        try:
            dtype = dtype_of(name)
        except Exception as exc:  # no ml_dtypes
            print(f"  {name}: skipped ({type(exc).__name__}: {exc})")
            continue
        for label, run in runners(name, cc):
            cases = [(s, la, lb) for s in shapes for la, lb in (("C", "C"), ("C", "T"), ("T", "C"), ("T", "T"))
                     if label != "wmma" or s[0] < 4097]
            cases += [((131, 77, 259), "offset", "offset"), ((131, 77, 259), "offset", "T"),
                      ((131, 77, 259), "offsetF", "offsetF")]
            for shape, la, lb in cases + [("batch", None, None)]:
                what = f"  {name:8s} {label:34s} "
                try:
                    if shape == "batch":  # 3 products of one broadcast B, A's lines k + 1 apart
                        what += "batch of 3, 70x131x90, broadcast B"
                        A3 = draw((3, 70, 132), dtype)[:, :, :131]
                        B = draw((131, 90), dtype)
                        out = cupy.empty((3, 70, 90), dtype)
                        poison(out)  # (fills in place, returns None)
                        run(A3[0], B, out[0], (3, A3.strides[0] // A3.itemsize, 0))
                        err = max(_check.product_error(out[z], A3[z], B) for z in range(3))
                        k = 131
                    else:
                        m, k, n = shape
                        what += f"{m}x{k}x{n} {la}/{lb}"
                        A, B = operand((m, k), dtype, la), operand((k, n), dtype, lb)
                        out = cupy.empty((m, n), dtype)
                        poison(out)
                        run(A, B, out)
                        err = _check.product_error(out, A, B)
                    ok = err <= bound(name, k)
                    bad += not ok
                    print(f"{what}: {'ok' if ok else 'WRONG'} (error {err:.2e}, bound {bound(name, k):.2e})",
                          flush=True)
                except Exception as exc:
                    bad += 1
                    print(f"{what}: ERROR {type(exc).__name__}: {exc}", flush=True)
    print(f"== correctness: {'all ok' if bad == 0 else f'{bad} case(s) WRONG or ERROR'}\n")


def torch_matmul(name):
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = True
        tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[name]
        return torch, tdt
    except Exception:
        return None, None


def time_call(call, sets):
    return timing.measure(lambda i: call(*sets[i % len(sets)]), BUDGET)[0].median


def speed(cc, sizes, quick):
    print("== speed (TFLOP/s = 2 n^3 / median time; x cuBLAS = cuBLAS time / kernel time)")
    device = cupy.cuda.runtime.getDevice()
    for name in NAMES:
        try:
            dtype = dtype_of(name)
        except Exception as exc:
            print(f"  {name}: skipped ({type(exc).__name__}: {exc})")
            continue
        torch, tdt = torch_matmul(name)
        for n in sizes:
            flops = 2.0 * n ** 3
            per_set = 3 * n * n * dtype.itemsize
            count = timing.sets_past_l2(per_set, device, max_sets=4)
            layouts = [("C", "C")] if quick else [("C", "C"), ("C", "T"), ("T", "C"), ("T", "T")]
            for la, lb in layouts:
                print(f"  {name} {n}^3 A {la} B {lb} ({'TF32' if name == 'float32' else 'float32 sums'}):",
                      flush=True)
                try:
                    sets = [(operand((n, n), dtype, la), operand((n, n), dtype, lb), cupy.empty((n, n), dtype))
                            for _ in range(count)]
                except Exception as exc:
                    print(f"    inputs: ERROR {type(exc).__name__}: {exc}")
                    continue
                ref = None
                try:
                    ref = time_call(lambda A, B, o: cupy.matmul(A, B, out=o), sets)
                    print(f"    {'cupy.matmul (cuBLAS)':36s} {flops / ref / 1e12:8.1f} TFLOP/s", flush=True)
                except Exception as exc:
                    print(f"    {'cupy.matmul (cuBLAS)':36s} ERROR {type(exc).__name__}: {str(exc)[:100]}")
                if torch is not None and (la, lb) == ("C", "C"):
                    try:
                        ta, tb = (torch.rand((n, n), device="cuda", dtype=tdt) for _ in range(2))
                        tt = time_call(lambda A, B, o: torch.matmul(ta, tb), sets[:1])
                        print(f"    {'torch.matmul':36s} {flops / tt / 1e12:8.1f} TFLOP/s", flush=True)
                        if ref is None:
                            ref = tt
                    except Exception as exc:
                        print(f"    {'torch.matmul':36s} ERROR {type(exc).__name__}: {str(exc)[:100]}")
                for label, run in runners(name, cc):
                    if quick and label.startswith("mma_sync") and label != runners(name, cc)[1][0]:
                        continue
                    try:
                        t = time_call(lambda A, B, o: run(A, B, o), sets)
                        ratio = f"x{ref / t:.2f} cuBLAS" if ref else ""
                        print(f"    {label:36s} {flops / t / 1e12:8.1f} TFLOP/s  {ratio}", flush=True)
                    except Exception as exc:
                        print(f"    {label:36s} ERROR {type(exc).__name__}: {str(exc)[:160]}")
                del sets
                cupy.get_default_memory_pool().free_all_blocks()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192])
    p.add_argument("--quick", action="store_true", help="time C-order operands only, the first mma_sync tile")
    p.add_argument("--no-check", action="store_true")
    p.add_argument("--no-time", action="store_true")
    args = p.parse_args()
    dev = cupy.cuda.Device()
    cc = matmul_tc.compute_capability(dev.id)
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    print(f"device {dev.id}: {props['name'].decode()}, sm_{cc}, {dev.attributes['MultiProcessorCount']} SMs, "
          f"{dev.attributes['MaxSharedMemoryPerBlockOptin'] // 1024} KiB shared per block; CuPy {cupy.__version__}, "
          f"CUPY_TF32={os.environ.get('CUPY_TF32')}")
    for name in NAMES:
        if cc >= 80:
            try:
                picks = {s: matmul_tc.plan_fast(dev.id, name, s, s, s) for s in (512, 2048, 8192)}
                print(f"  plan_fast {name}: " + ", ".join(f"{s}^3 -> {t.bm}x{t.bn}" for s, t in picks.items()))
            except Exception as exc:
                print(f"  plan_fast {name}: ERROR {type(exc).__name__}: {exc}")
    if not args.no_check:
        try:
            check(cc)
        except Exception:
            traceback.print_exc(file=sys.stdout)
    if not args.no_time:
        try:
            speed(cc, args.sizes, args.quick)
        except Exception:
            traceback.print_exc(file=sys.stdout)


if __name__ == "__main__":
    main()
