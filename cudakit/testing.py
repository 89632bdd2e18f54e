"""Inputs shared by the tests and the bench: fresh random data that is never zeros, and poisoned outputs."""
from __future__ import annotations

import numpy as np

from ._check import narrowed

BFLOAT16_NAN_BITS = 0x7FC0  # a quiet NaN: sign 0, exponent all ones, the top mantissa bit set


def random_array(shape, dtype, order="C"):
    """Fresh random data every call, in C or F order: floats uniform in [0.5, 1.5) (never zero, and positive, so a
    reference's norm carries no cancellation; a 16-bit float rounds to nearest, 1.5 included), integers over their
    full range. bfloat16 is ml_dtypes' (pass np.dtype(ml_dtypes.bfloat16)): drawn in float32 and rounded to nearest
    even on the bits, so it needs nothing of CuPy's bfloat16 casts."""
    import cupy

    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":
        x = narrowed(cupy.random.random_sample(shape, dtype=np.float32) + np.float32(0.5), dtype)  # (no NaN)
    elif dtype.kind == "f":
        base = np.float64 if dtype.itemsize == 8 else np.float32
        x = (cupy.random.random_sample(shape, dtype=base) + base(0.5)).astype(dtype, copy=False)
    else:
        info = np.iinfo(dtype)
        x = cupy.random.randint(int(info.min), int(info.max) + 1, size=shape, dtype=np.int64).astype(dtype)
    if order == "C":
        return x
    if dtype.name == "bfloat16":  # the copy as raw bits, like the draw
        return cupy.asarray(x.view(np.uint16), order=order).view(dtype)
    return cupy.asarray(x, order=order)


def poison(out) -> None:
    """Fill `out` with NaN (floats, bfloat16 included) or a fixed byte pattern, so an element a kernel leaves
    unwritten stays wrong."""
    if out.dtype.name == "bfloat16":
        out.view(np.uint16).fill(BFLOAT16_NAN_BITS)
    elif out.dtype.kind == "f":
        out.fill(np.nan)
    else:
        out.view(np.uint8).fill(0xA5)


def poisoned(shape, dtype):
    """A new poisoned array."""
    import cupy

    out = cupy.empty(shape, np.dtype(dtype))
    poison(out)
    return out


def product_operands(spec: str, dtype):
    """A probe's product "MxKxN:AB" (m x k x n, A's and B's orders, C or F): fresh A and B, a poisoned C, (m, k, n)."""
    dims, orders = spec.split(":")
    m, k, n = map(int, dims.split("x"))
    a, b = random_array((m, k), dtype, orders[0]), random_array((k, n), dtype, orders[1])
    return a, b, poisoned((m, n), dtype), (m, k, n)
