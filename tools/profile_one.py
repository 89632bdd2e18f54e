"""Calls of one op's fast variant on one shape, for a profiler: one to warm up, then two inside
cudaProfilerStart/Stop (`ncu --profile-from-start off` profiles those alone).

    PYTHONPATH=. python3 tools/profile_one.py transpose int8 8191 8193
    PYTHONPATH=. python3 tools/profile_one.py matvec float32 4096 4096 [--order F]
    PYTHONPATH=. python3 tools/profile_one.py dot float32 268435456
    PYTHONPATH=. python3 tools/profile_one.py matmul float16 8192 8192 8192 [--variant mma_sync] [--reference]

matmul's dims are m k n, or batch m k n; --order CF: A C-order, B F-order (one letter: both); --reference runs
cupy.matmul (cuBLAS) on the same operands instead of cudakit.
"""
from __future__ import annotations

import argparse
import importlib

import cupy
import numpy as np

import cudakit
from cudakit import _check
from cudakit.testing import random_array


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op", choices=("transpose", "matvec", "dot", "matmul"))
    ap.add_argument("dtype")
    ap.add_argument("dims", type=int, nargs="+")
    ap.add_argument("--order", default="C")
    ap.add_argument("--variant", default="fast")
    ap.add_argument("--reference", action="store_true", help="matmul: cupy.matmul instead")
    ap.add_argument("--seam", type=int, help="transpose: bytes on which misaligned tiles meet (16, 32, 64)")
    args = ap.parse_args()
    if args.dtype == "bfloat16":
        import ml_dtypes
        dtype = np.dtype(ml_dtypes.bfloat16)
    else:
        dtype = np.dtype(args.dtype)
    if args.seam:
        importlib.import_module("cudakit.transpose").VEC16_SEAM[dtype.itemsize] = args.seam
    if args.op == "transpose":
        a = cupy.asarray(cupy.random.randint(-100, 100, size=args.dims).astype(dtype), order=args.order)
        call = lambda: cudakit.transpose(a, variant=args.variant)
        ref = lambda out: bool(cupy.array_equal(out, a.T))
    elif args.op == "matvec":
        A = cupy.asarray(cupy.random.random(args.dims).astype(dtype), order=args.order)
        x = cupy.random.random(args.dims[1]).astype(dtype)
        call = lambda: cudakit.matvec(A, x, variant=args.variant)
        ref = lambda out: float(cupy.linalg.norm(out - A.astype(np.float64) @ x) / cupy.linalg.norm(out)) < 1e-4
    elif args.op == "matmul":
        *batch, m, k, n = args.dims
        a_order, b_order = (args.order * 2)[:2]  # (one letter: both operands; two: A's, then B's)
        A, B = random_array((*batch, m, k), dtype), random_array((*batch, k, n), dtype)
        A, B = cupy.asarray(A, order=a_order), cupy.asarray(B, order=b_order)
        call = (lambda: cupy.matmul(A, B)) if args.reference else lambda: cudakit.matmul(A, B, variant=args.variant)
        ref = lambda out: _check.product_error(out, A, B) < 1e-2
    else:
        a, b = (cupy.random.random(args.dims[0]).astype(dtype) for _ in range(2))
        call = lambda: cudakit.dot(a, b, variant=args.variant)
        ref = lambda out: abs(float(out) - float(a.astype(np.float64) @ b)) < 1e-4 * abs(float(out))
    out = call()  # (compiles, plans and warms up outside the profiled range)
    assert ref(out), "wrong result"
    cupy.cuda.Device().synchronize()
    cupy.cuda.runtime.profilerStart()  # ncu --profile-from-start off profiles these calls' kernels alone
    for _ in range(2):
        out = call()
    cupy.cuda.Device().synchronize()
    cupy.cuda.runtime.profilerStop()


if __name__ == "__main__":
    main()
