"""Hopper wgmma probe: correctness first, then TFLOP/s of cudakit's sm_90a kernels against cuBLAS and torch.

    PYTHONPATH=. python3 tools/wgmma_probe.py [--quick] [--kinds wgmma,wgmma_fast]

Checks each kernel on a few shapes and layouts against a float64 reference (relative error against the bound of
cudakit._check: f32 accumulation plus one rounding to the output type; TF32 inputs truncated by the tensor cores),
and every (BN, cluster) configuration of the fast kernel forced; then times the tensor cores' ceiling
(_hopper.wgmma_throughput) and the goal shapes of issue 19 with cudakit.bench.timing (CUDA events, operand sets
rotated past the L2, median): cupy.matmul is cuBLAS (TF32 through CUPY_TF32=1, set here before CuPy is imported),
torch.matmul / torch.bmm where torch imports. wgmma_fast runs the planner's choice; "fast/c1" the same tile width
without clusters, for comparison; the simple kernel is timed at 8192^3 only. Ends with the goal verdicts. Every
case catches and prints its own exception. --quick: correctness, then 8192^3 float16 only.
"""
from __future__ import annotations

import argparse
import os
import time
import traceback

os.environ.setdefault("CUPY_TF32", "1")  # read when CuPy loads cuBLAS: cupy.matmul of float32 in TF32

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cudakit import _check, _compile, _hopper  # noqa: E402
from cudakit.bench import timing  # noqa: E402
from cudakit.testing import poisoned, random_array  # noqa: E402

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BF16 = None
try:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
except Exception:  # absent, or built for another CUDA
    torch = None

BUDGET = timing.Budget(row_s=0.3, min_runs=5, max_runs=100)
# (label, count, m, k, n, goal ratio against cuBLAS, or against torch.bmm for the batch)
GOALS = [("8192^3", 1, 8192, 8192, 8192, 1.0), ("4096^3", 1, 4096, 4096, 4096, 0.95),
         ("2048^3", 1, 2048, 2048, 2048, 0.85), ("4097x4095x4099", 1, 4097, 4095, 4099, 0.85),
         ("65536x1024x1024", 1, 65536, 1024, 1024, 0.9), ("64 x 1024^3", 64, 1024, 1024, 1024, 0.9)]
TF32_GOALS = [("8192^3", 1, 8192, 8192, 8192, 0.9), ("4096^3", 1, 4096, 4096, 4096, None)]
CHECKS = [(1, 1, 1), (17, 33, 65), (300, 200, 100), (1000, 777, 3000), (4097, 4095, 4099)]
LAYOUTS = [("C", "F"), ("C", "C"), ("F", "F"), ("F", "C")]
KIND_ARGS = {"fast/c1": ("wgmma_fast", {})}  # timed labels that are not kinds: (kind, run_wgmma arguments)
VERDICTS = []  # (case, ratio, reference, goal, met) for the closing summary


def dtypes():
    return [np.dtype(np.float16)] + ([BF16] if BF16 is not None else []) + [np.dtype(np.float32)]


def label(dtype) -> str:
    return {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}[dtype.name]


def operand(shape, dtype, order):
    r, c = shape
    return random_array(shape, dtype) if order == "C" else random_array((c, r), dtype).T


def bound(dtype, k):
    return _check.tf32_tolerance(k) if dtype.name == "float32" else _check.tolerance(dtype, k)


def kernel_report(kinds):
    """What the driver says of each kernel: registers at entry (setmaxnreg moves them per warpgroup later), local
    memory (spills), static shared memory, the dynamic shared memory the host asks for, clusters resident at once."""
    attrs = cupy.cuda.driver
    for kind in kinds:
        for dtype in dtypes():
            for bn, c in (((_hopper.SIMPLE_BN, 1),) if kind == "wgmma" else _hopper.FAST_CONFIGS):
                try:
                    fn = _hopper._kernel(kind, dtype.name, False, False, bn, c)
                    ptr = fn.kernel.ptr if hasattr(fn, "kernel") else fn.ptr
                    regs = attrs.funcGetAttribute(4, ptr)  # CU_FUNC_ATTRIBUTE_NUM_REGS
                    local = attrs.funcGetAttribute(3, ptr)  # CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
                    shared = _hopper.SIMPLE_SHARED if kind == "wgmma" else _hopper.fast_shared(bn)
                    threads = _hopper.SIMPLE_THREADS if kind == "wgmma" else _hopper.FAST_THREADS
                    blocks = _compile.resident_blocks(fn, threads, shared)
                    clusters = f", {_hopper.max_clusters(fn, threads, shared, c)} clusters at once" if c > 1 else ""
                    print(f"  {kind:10s} {label(dtype):4s} BN={bn} cluster {c}: {regs} registers/thread at entry, "
                          f"{local} B local, {shared} B dynamic shared, {threads} threads, {blocks} block(s)/SM"
                          f"{clusters}")
                except Exception as exc:
                    print(f"  {kind} {label(dtype)} BN={bn} cluster {c}: FAILED {type(exc).__name__}: {exc}")


def ceilings():
    """TFLOP/s of wgmma_throughput (m64n256 wgmma back to back from shared memory): the tensor-core roof."""
    sink = cupy.zeros(_hopper.ceiling_sink_size(cupy.cuda.runtime.getDevice()), cupy.float32)
    for name in _hopper.THROUGHPUT_DTYPES:
        try:
            flops = _hopper.wgmma_throughput(name, 4000, sink)
            sec = timing.measure(lambda i: _hopper.wgmma_throughput(name, 4000, sink), BUDGET)[0].median
            print(f"  wgmma_throughput {'f16' if name == 'float16' else 'tf32'}: {flops / sec / 1e12:7.1f} TFLOP/s "
                  f"({sec * 1e3:.3f} ms)")
        except Exception as exc:
            print(f"  wgmma_throughput {name}: FAILED {type(exc).__name__}: {exc}")


def config_checks() -> int:
    """Every (BN, cluster) of the fast kernel forced, on odd tile rows, two layouts and a broadcast batch."""
    failures = 0
    for dtype in dtypes():
        for bn, c in _hopper.FAST_CONFIGS:
            cases = [((300, 200, 520), ("C", "F")), ((1000, 777, 3000), ("F", "C")), ((2200, 1000, 4100), ("C", "C"))]
            for (m, k, n), (la, lb) in cases:
                what = f"fast BN={bn} cluster {c} {label(dtype):4s} {m}x{k}x{n} A {la} B {lb}"
                try:
                    A, B = operand((m, k), dtype, la), operand((k, n), dtype, lb)
                    out = poisoned((m, n), dtype)
                    _hopper.run_wgmma("wgmma_fast", A, B, out, bn=bn, cluster=c)
                    err = _check.product_error(out, A, B)
                    ok = err <= bound(dtype, k)
                    failures += not ok
                    print(f"  {what}: error {err:.2e} {'ok' if ok else 'WRONG'}")
                except Exception as exc:
                    failures += 1
                    print(f"  {what}: FAILED {type(exc).__name__}: {exc}")
    return failures


def correctness(kinds) -> int:
    failures = 0
    for kind in kinds:
        for dtype in dtypes():
            layouts = LAYOUTS  # TF32 too: the host copies its operands K-major first
            for m, k, n in CHECKS:
                for la, lb in (layouts if m * n * k < 1e9 else layouts[:2]):
                    what = f"{kind:10s} {label(dtype):4s} {m}x{k}x{n} A {la} B {lb}"
                    try:
                        A, B = operand((m, k), dtype, la), operand((k, n), dtype, lb)
                        out = poisoned((m, n), dtype)
                        _hopper.run_wgmma(kind, A, B, out)
                        err = _check.product_error(out, A, B)
                        ok = err <= bound(dtype, k)
                        failures += not ok
                        print(f"  {what}: error {err:.2e} (bound {bound(dtype, k):.1e}) {'ok' if ok else 'WRONG'}")
                    except Exception as exc:
                        failures += 1
                        print(f"  {what}: FAILED {type(exc).__name__}: {exc}")
            # a batch with a broadcast B
            what = f"{kind:10s} {label(dtype):4s} batch 5 x 300x200x100, B broadcast"
            try:
                A3, B = random_array((5, 300, 200), dtype), random_array((200, 100), dtype)
                out = poisoned((5, 300, 100), dtype)
                _hopper.run_wgmma(kind, A3[0], B, out[0], batch=(5, 300 * 200, 0))
                err = max(_check.product_error(out[z], A3[z], B) for z in range(5))
                ok = err <= bound(dtype, 200)
                failures += not ok
                print(f"  {what}: error {err:.2e} {'ok' if ok else 'WRONG'}")
            except Exception as exc:
                failures += 1
                print(f"  {what}: FAILED {type(exc).__name__}: {exc}")
    return failures


def time_case(dtype, count, m, k, n, kinds):
    """{name: seconds} for cudakit's kernels, cuBLAS (cupy.matmul) and torch, on the same shapes."""
    item = dtype.itemsize
    per_set = count * (m * k + k * n + m * n) * item
    n_sets = timing.sets_past_l2(per_set, cupy.cuda.runtime.getDevice(), max_sets=4)
    sets = [(random_array((count, m, k), dtype), random_array((count, k, n), dtype), poisoned((count, m, n), dtype))
            for _ in range(n_sets)]
    results = {}

    def mine(kind, **kw):
        def call(i):
            A, B, C = sets[i % n_sets]
            _hopper.run_wgmma(kind, A[0], B[0], C[0], batch=(count, m * k, k * n), **kw)
        return call

    for key in kinds:
        kind, kw = KIND_ARGS.get(key, (key, {}))
        if key == "fast/c1":  # the planner's tile width, without clusters
            a = sets[0][0]
            kw = {"bn": _hopper.fast_plan(dtype.name, False, False, m, n, count, a.device.id)[0], "cluster": 1}
        try:
            mine(kind, **kw)(0)
            A, B, C = sets[0]
            err = max(_check.product_error(C[z], A[z], B[z]) for z in {0, count - 1})
            if not err <= bound(dtype, k):
                print(f"    {key}: WRONG at this size (error {err:.2e}); timing it anyway")
            results[key] = timing.measure(mine(kind, **kw), BUDGET)[0].median
        except Exception as exc:
            print(f"    {key}: FAILED {type(exc).__name__}: {exc}")
    try:
        if dtype.name != "bfloat16":
            def cublas(i):
                A, B, C = sets[i % n_sets]
                cupy.matmul(A if count > 1 else A[0], B if count > 1 else B[0], out=C if count > 1 else C[0])
            results["cupy"] = timing.measure(cublas, BUDGET)[0].median
    except Exception as exc:
        print(f"    cupy.matmul: FAILED {type(exc).__name__}: {exc}")
    if torch is not None:
        try:
            tdtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dtype.name]
            tsets = [(torch.rand(count, m, k, device="cuda", dtype=tdtype), torch.rand(count, k, n, device="cuda",
                      dtype=tdtype)) for _ in range(n_sets)]

            def torch_call(i):
                A, B = tsets[i % n_sets]
                torch.bmm(A, B) if count > 1 else torch.matmul(A[0], B[0])
            results["torch"] = timing.measure(torch_call, BUDGET)[0].median
            del tsets
        except Exception as exc:
            print(f"    torch: FAILED {type(exc).__name__}: {exc}")
    del sets
    cupy.get_default_memory_pool().free_all_blocks()
    return results


def report(dtype, name, count, m, k, n, goal, kinds):
    flops = 2.0 * count * m * k * n
    print(f"{label(dtype):4s} {name}:", flush=True)
    try:
        res = time_case(dtype, count, m, k, n, kinds)
    except Exception:
        traceback.print_exc()
        return
    ref_name = "torch" if count > 1 and "torch" in res else ("cupy" if "cupy" in res else "torch")
    for key, sec in res.items():
        line = f"    {key:10s} {flops / sec / 1e12:7.1f} TFLOP/s  {sec * 1e3:8.3f} ms"
        if key in kinds:
            for ref in ("cupy", "torch"):
                if ref in res:
                    line += f"  x{res[ref] / sec:.3f} vs {ref}"
            if goal is not None and ref_name in res and key == "wgmma_fast":
                met = res[ref_name] / sec >= goal
                line += f"  [goal >= {goal} vs {ref_name}: {'met' if met else 'NOT met'}]"
                VERDICTS.append((f"{label(dtype)} {name}", res[ref_name] / sec, ref_name, goal, met))
        print(line, flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="correctness, then 8192^3 float16 only")
    p.add_argument("--kinds", default="wgmma,wgmma_fast")
    args = p.parse_args()
    kinds = args.kinds.split(",")
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    print(f"device: {props['name'].decode()} (cc {dev.compute_capability}, {props['multiProcessorCount']} SMs); "
          f"torch: {torch.__version__ if torch else 'absent'}; ml_dtypes (bfloat16): {'yes' if BF16 else 'absent'}; "
          f"CUPY_TF32={os.environ.get('CUPY_TF32')}")
    if not _hopper.available(dev.id):
        print("not a compute capability 9.0 device: the sm_90a kernels cannot run here")
        return
    t0 = time.perf_counter()
    print("kernels:")
    kernel_report(kinds)
    print("correctness (float64 reference, relative error against cudakit._check's bound):")
    failures = correctness(kinds)
    if "wgmma_fast" in kinds:
        failures += config_checks()
    print(f"correctness: {failures} failure(s) ({time.perf_counter() - t0:.0f} s so far)")
    print("ceiling (the tensor-core roof):")
    ceilings()
    print("timing (median; ratios > 1: cudakit faster):")
    timed = kinds + (["fast/c1"] if "wgmma_fast" in kinds else [])
    if args.quick:
        report(np.dtype(np.float16), "8192^3", 1, 8192, 8192, 8192, 1.0, timed)
        return
    for dtype in dtypes():
        for name, count, m, k, n, goal in (TF32_GOALS if dtype.name == "float32" else GOALS):
            here = [t for t in timed if t != "wgmma" or (name == "8192^3" and dtype.name == "float16")]
            report(dtype, name, count, m, k, n, goal, here)
    print(f"goal verdicts (wgmma_fast; {time.perf_counter() - t0:.0f} s in all):")
    for case, ratio, ref, goal, met in VERDICTS:
        print(f"  {case:22s} x{ratio:.3f} vs {ref:5s} goal >= {goal}: {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
