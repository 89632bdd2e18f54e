"""Host cost per call of cudakit.dot and of each piece of its call path, against CuPy's dot and a bare launch;
with --ops, of every op on small shapes (N-D arguments included) against CuPy's call and a bare launch, with a
profile of where cudakit's host time goes.

    PYTHONPATH=. python3 tools/call_overhead.py [--n 65536]
    PYTHONPATH=. python3 tools/call_overhead.py --ops [--profile FILE]

Each line is the median over 7 rounds of the mean wall time of 2000 back-to-back calls (perf_counter), the GPU
work being tiny and asynchronous: this is what Python costs per call, the figure that bounds small dots.
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import time

import cupy
import numpy as np

import cudakit
from cudakit import _args, _check, _compile, _device, _variants

dot_module = importlib.import_module("cudakit.dot")  # the module (cudakit.dot is the function)


def per_call_us(fn, calls: int = 2000, rounds: int = 7) -> float:
    """Median over `rounds` of the mean host (perf_counter) µs of `calls` back-to-back fn() calls.

    Host time on purpose, not cudakit.bench.timing.measure(per_call=True): CUDA events would time when the GPU sees
    the calls, max(host, GPU) per call, so the bare launches of the dot kernel (whose GPU time can exceed their host
    cost, and does for every launching line at a large --n) would report GPU time; and most lines launch nothing, so
    events would only timestamp host submissions, adding their latency jitter to sub-µs figures.
    """
    for _ in range(200):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    means = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter() - t0) / calls * 1e6)
        cupy.cuda.get_current_stream().synchronize()
    return statistics.median(means)


def small_cases():
    """(label, cudakit call, CuPy call) per op on shapes whose GPU time is below the host's: what a pipeline's
    small steps cost."""
    def rand(shape, dtype="float32", order="C"):
        return cupy.asarray(cupy.random.random(shape).astype(dtype), order=order)

    cases = []
    for shape, axes, dtype in (((150, 150), None, "float32"), ((1000, 3), None, "float32"),
                               ((4, 64, 64, 3), (0, 3, 1, 2), "float32"), ((2, 3, 4, 5), (2, 0, 3, 1), "float32"),
                               ((4, 64, 64, 3), (0, 2, 1, 3), "float32"), ((4, 6, 8, 5), (2, 1, 0, 3), "float32"),
                               ((4, 6, 8, 64), (0, 2, 1, 3), "float32"), ((8, 3, 4, 4), (0, 2, 1, 3), "float16"),
                               ((28, 2, 1, 281), (0, 2, 3, 1), "float64")):
        a = rand(shape, dtype)
        out = cupy.empty(cupy.transpose(a, axes).shape, a.dtype)
        cases.append((f"transpose {dtype} {shape} axes {axes}",
                      lambda a=a, axes=axes, out=out: cudakit.transpose(a, axes, out=out),
                      lambda a=a, axes=axes: cupy.ascontiguousarray(cupy.transpose(a, axes))))
    for shape, xshape, order in (((18, 30), (30,), "C"), ((300, 200), (200,), "F"), ((8, 18, 30), (30,), "C")):
        A, x = rand(shape, order=order), rand(xshape)
        cases.append((f"matvec {shape} {order} @ {xshape}", lambda A=A, x=x: cudakit.matvec(A, x),
                      lambda A=A, x=x: cupy.matmul(A, x)))
    for sa, sb in (((64, 64), (64, 64)), ((1, 256), (256, 256)), ((4, 32, 32), (4, 32, 32)), ((100, 8, 8), (8, 8))):
        A, B = rand(sa), rand(sb)
        cases.append((f"matmul {sa} @ {sb}", lambda A=A, B=B: cudakit.matmul(A, B), lambda A=A, B=B: cupy.matmul(A, B)))
    a, b = rand(4096), rand(4096)
    cases.append(("dot 4096", lambda: cudakit.dot(a, b), lambda: cupy.dot(a, b)))
    return cases


def bare_launch_us() -> float:
    """cuLaunchKernel of a one-block kernel with its parameters already built: the floor of any launch."""
    a = cupy.empty(1, cupy.float32)
    kernel = cupy.RawKernel("extern \"C\" __global__ void touch(float* p) { if (p[0] < -1.0f) p[0] = 0.0f; }", "touch")
    kernel((1,), (32,), (a,))
    values, params, _ = _compile._parameter_block()
    values[0] = a.data.ptr
    stream = cupy.cuda.get_current_stream().ptr
    return per_call_us(lambda: cupy.cuda.driver.launchKernel(kernel.kernel.ptr, 1, 1, 1, 32, 1, 1, 0, stream,
                                                             params, 0))


def ops_overhead(profile_path: str | None) -> None:
    import cProfile
    import pstats

    bare = bare_launch_us()
    print(f"host µs per call, back to back (bare launch {bare:.2f} µs):")
    print(f"  {'case':44s} {'cudakit':>8s} {'CuPy':>8s} {'- bare':>8s} {'no driver':>9s}")
    profiler = cProfile.Profile()
    for label, ours, theirs in small_cases():
        t_ours, t_theirs = per_call_us(ours, calls=500), per_call_us(theirs, calls=500)
        driver_call, _compile._launch_kernel = _compile._launch_kernel, lambda *args: None
        try:
            t_python = per_call_us(ours, calls=500)
        finally:
            _compile._launch_kernel = driver_call
        print(f"  {label:44s} {t_ours:8.2f} {t_theirs:8.2f} {t_ours - bare:8.2f} {t_python:9.2f}")
        if profile_path:
            profiler.enable()
            for _ in range(300):
                ours()
            profiler.disable()
            cupy.cuda.get_current_stream().synchronize()
    if profile_path:
        with open(profile_path, "w") as f:
            pstats.Stats(profiler, stream=f).sort_stats("tottime").print_stats(40)
            pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 16)
    ap.add_argument("--ops", action="store_true", help="every op on small shapes instead of dot's pieces")
    ap.add_argument("--profile", default=None, help="with --ops: write a cProfile of cudakit's calls here")
    args = ap.parse_args()
    if args.ops:
        return ops_overhead(args.profile)
    n = args.n
    a = cupy.random.random(n, dtype=cupy.float32)
    b = cupy.random.random(n, dtype=cupy.float32)
    out = cupy.empty((), cupy.float32)
    chunk = cupy.empty(4096, cupy.float32)
    cudakit.dot(a, b)
    mod = dot_module
    fn = mod._kernel("dot_onepass<float, true, 4>", a.dtype)
    blocks = _device.sm_count(0) * mod.FAST_BLOCKS_PER_SM
    partial, counter = (np.uint64(p) for p in _device.workspace(blocks * 4, counters=1))
    n64 = np.int64(n)
    args = (a, b, n64, partial, counter, out)
    ptr_args = (np.uint64(a.data.ptr), np.uint64(b.data.ptr), n64, partial, counter, np.uint64(out.data.ptr))
    _compile.launch(fn, (blocks,), (256,), args)
    function, stream = _compile._launches[fn].function, cupy.cuda.get_current_stream().ptr
    _, params, _ = _compile._parameter_block()
    pieces = {
        "cupy.dot(a, b)": lambda: cupy.dot(a, b),
        "cudakit.dot(a, b)": lambda: cudakit.dot(a, b),
        "cudakit.dot(a, b, out=out)": lambda: cudakit.dot(a, b, out=out),
        "cudakit.dot(a, b, out=out, check=False)": lambda: cudakit.dot(a, b, out=out, check=False),
        "RawKernel call, array args": lambda: fn((blocks,), (256,), args),
        "RawKernel call, pointer args": lambda: fn((blocks,), (256,), ptr_args),
        "_compile.launch": lambda: _compile.launch(fn, (blocks,), (256,), args),
        "driver.launchKernel, parameters built": lambda: cupy.cuda.driver.launchKernel(
            function, blocks, 1, 1, 256, 1, 1, 0, stream, params, 0),
        "cupy elementwise a * b": lambda: a * b,
        "cupy.empty(())": lambda: cupy.empty((), cupy.float32),
        "0-d view of a preallocated vector": lambda: chunk[7],
        "cupy.ndarray((), memptr=...)": lambda: cupy.ndarray((), cupy.float32, memptr=chunk.data),
        "_args.device_array": lambda: _args.device_array("dot", "a", a, 1),
        "_args.common": lambda: _args.common("dot", {"a": a, "b": b}),
        "_args.output(None)": lambda: _args.output("dot", None, (), a.dtype, 0, {"a": a, "b": b}),
        "_args.output(out)": lambda: _args.output("dot", out, (), a.dtype, 0, {"a": a, "b": b}),
        "cupy.may_share_memory": lambda: cupy.may_share_memory(out, a),
        "_args.on_device": lambda: _args.on_device(0),
        "_variants.lookup": lambda: _variants.lookup("dot", "fast"),
        "_check.enabled(None)": lambda: _check.enabled(None),
        "_device.workspace": lambda: _device.workspace(4096, counters=1),
        "_device.sm_count": lambda: _device.sm_count(0),
        "_compile.kernel (cached)": lambda: mod._kernel("dot_onepass<float, true, 4>", a.dtype),
        "dot._fast_plan (cached)": lambda: mod._fast_plan(a.dtype, n, True, 0),
        "dot._run_fast": lambda: mod._run_fast(a, b, out),
        "_args.extent": lambda: _args.extent(a),
        "a.flags.c_contiguous": lambda: a.flags.c_contiguous,
        "a.strides[0] != a.itemsize": lambda: a.strides[0] != a.itemsize,
        "os.environ.get": lambda: os.environ.get("CUDAKIT_CHECK", ""),
        "a.data.ptr % 16": lambda: a.data.ptr % 16,
        "runtime.getDevice": lambda: cupy.cuda.runtime.getDevice(),
        "get_current_stream": lambda: cupy.cuda.get_current_stream(),
        "np.int64(n)": lambda: np.int64(n),
    }
    print(f"host cost per call, n = {n} float32 (µs):")
    for name, f in pieces.items():
        print(f"  {name:40s} {per_call_us(f):7.2f}")
    # Everything cudakit.dot does on the host but the driver's launch: the Python share of a call.
    driver_call, _compile._launch_kernel = _compile._launch_kernel, lambda *args: None
    try:
        for name, f in {"cudakit.dot(a, b, out=out, check=False)": lambda: cudakit.dot(a, b, out=out, check=False),
                        "cudakit.dot(a, b)": lambda: cudakit.dot(a, b)}.items():
            print(f"  {name + ', no driver call':40s} {per_call_us(f):7.2f}")
    finally:
        _compile._launch_kernel = driver_call


if __name__ == "__main__":
    main()
