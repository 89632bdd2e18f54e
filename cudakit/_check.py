"""check=True (or CUDAKIT_CHECK=1): recompute in float64 with CuPy and compare by relative error."""
from __future__ import annotations

import math
import os

import numpy as np


class CheckError(AssertionError):
    """A kernel's result disagreed with the float64 reference beyond the dtype's tolerance."""


def enabled(check: bool | None) -> bool:
    if check is not None:
        return bool(check)
    return os.environ.get("CUDAKIT_CHECK", "") not in ("", "0")


def tolerance(dtype, k: int) -> float:
    """Bound on ||out - ref|| / ||ref|| for a sum of k products rounded in `dtype` (error grows like sqrt(k))."""
    return 4.0 * float(np.finfo(dtype).eps) * math.sqrt(max(int(k), 16))


def relative_error(out, ref, scale=None) -> float:
    """||out - ref|| / ||scale|| in float64 (scale defaults to ref); NaN anywhere gives NaN, which never passes."""
    import cupy

    diff = float(cupy.linalg.norm((out.astype(cupy.float64) - ref).ravel()))
    denom = float(cupy.linalg.norm((ref if scale is None else scale).ravel()))
    if denom == 0.0:
        return diff
    return diff / denom


def product_error(out, x, y) -> float:
    """relative_error of out against x @ y, scaled by |x| @ |y| (dot, matvec, matmul), all in float64."""
    import cupy

    x64, y64 = x.astype(cupy.float64), y.astype(cupy.float64)
    return relative_error(out, x64 @ y64, cupy.abs(x64) @ cupy.abs(y64))


def verify(op: str, variant: str, out, x, y, dtype, k: int) -> None:
    """Raise CheckError when out = x @ y (a k-term sum per element) is off the float64 reference."""
    err = product_error(out, x, y)
    tol = tolerance(dtype, k)
    if not err <= tol:  # NaN fails too
        raise CheckError(f"cudakit.{op} (variant {variant!r}, {np.dtype(dtype)}): relative error {err:.3e} exceeds {tol:.1e}")
