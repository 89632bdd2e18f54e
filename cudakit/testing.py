"""Inputs shared by the tests and the bench: fresh random data that is never zeros, and poisoned outputs."""
from __future__ import annotations

import numpy as np


def random_array(shape, dtype, order="C"):
    """Fresh random data every call, in C or F order: floats uniform in [0.5, 1.5) (never zero, and positive, so a
    reference's norm carries no cancellation), integers over their full range."""
    import cupy

    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        base = np.float64 if dtype.itemsize == 8 else np.float32
        x = (cupy.random.random_sample(shape, dtype=base) + base(0.5)).astype(dtype, copy=False)
    else:
        info = np.iinfo(dtype)
        x = cupy.random.randint(int(info.min), int(info.max) + 1, size=shape, dtype=np.int64).astype(dtype)
    return x if order == "C" else cupy.asarray(x, order=order)


def poison(out) -> None:
    """Fill `out` with NaN (floats) or a fixed byte pattern, so an element a kernel leaves unwritten stays wrong."""
    if out.dtype.kind == "f":
        out.fill(np.nan)
    else:
        out.view(np.uint8).fill(0xA5)


def poisoned(shape, dtype):
    """A new poisoned array."""
    import cupy

    out = cupy.empty(shape, np.dtype(dtype))
    poison(out)
    return out
