"""check=True (or CUDAKIT_CHECK=1): recompute in float64 with CuPy and compare by relative error."""
from __future__ import annotations

import math
import os

import numpy as np


class CheckError(AssertionError):
    """A kernel's result disagreed with the float64 reference beyond the dtype's tolerance."""


# CUDAKIT_CHECK is read once, at import: os.environ is not read on every call (docs/NOTES.md, "Host time per call").
CHECK_BY_DEFAULT = os.environ.get("CUDAKIT_CHECK", "") not in ("", "0")


def enabled(check: bool | None) -> bool:
    return CHECK_BY_DEFAULT if check is None else bool(check)


# Unit roundoff u = eps / 2 (round to nearest) of the 16-bit floats, by dtype name (bfloat16 is ml_dtypes'): 11 and 8
# significant bits. TF32 keeps 11 (a 10-bit mantissa).
HALF_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
TF32_ROUNDOFF = 2.0 ** -11
EPS32 = float(np.finfo(np.float32).eps)


def _sum_bound(eps: float, k: int) -> float:
    """The bound for a sum of k products accumulated in a type of machine epsilon `eps`, relative to the sum of
    their absolute values (rounding errors add like a random walk, so it grows like sqrt(k))."""
    return 4.0 * eps * math.sqrt(max(int(k), 16))


def tolerance(dtype, k: int) -> float:
    """Bound on ||out - ref|| / ||scale|| (scale: the op on |inputs|, see product_error) for a sum of k products.

    float32, float64: accumulated and rounded in `dtype`: 4 eps sqrt(max(k, 16)).
    float16, bfloat16 (a dtype or its name): the products are exact in float32 (11- or 8-bit significands), summed
    in float32 (s, with ||s - ref|| <= t ||scale||, t the float32 bound above) and rounded once to the 16-bit type,
    each element to within u |s_i| (u = eps / 2 of the 16-bit type). As |ref_i| <= scale_i,
      |out_i - ref_i| <= u |s_i| + |s_i - ref_i| <= u scale_i + (1 + u) |s_i - ref_i|,
    so ||out - ref|| / ||scale|| <= u + (1 + u) t. (Assumes results in the normal range: a subnormal 16-bit result
    is rounded to an absolute, not a relative, step.)
    """
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    u = HALF_ROUNDOFF.get(name)
    if u is None:
        return _sum_bound(float(np.finfo(dtype).eps), k)
    return u + (1.0 + u) * _sum_bound(EPS32, k)


def tf32_tolerance(k: int) -> float:
    """Bound on ||out - ref|| / ||scale|| for a float32 product computed in TF32: each input reduced to 11
    significant bits, products of two such values exact in float32, summed in float32.

    An input reaches the tensor cores either rounded to nearest (cvt.rna.tf32.f32: relative error at most
    u = 2^-11) or as raw float32 bits whose low 13 bits the tensor cores drop (truncation toward zero: the error is
    under one unit in the 11th bit, so relative error below 2u). Both are within v = 2u. A product a b becomes
    a b (1 + d1)(1 + d2), |d1|, |d2| <= v: off by at most (2v + v^2) |a b|. Summing these inexact products in float32
    adds the float32 bound t of tolerance(float32, k), taken of their absolute values, which are at most
    (1 + v)^2 |a b|. Element by element, |out_i - ref_i| <= ((2v + v^2) + (1 + v)^2 t) scale_i, so
      ||out - ref|| / ||scale|| <= 2v + v^2 + (1 + v)^2 t = 4u + 4u^2 + (1 + 2u)^2 t.
    (Subnormal inputs lose absolute, not relative, precision: assumed absent, as in tolerance().)
    """
    v = 2.0 * TF32_ROUNDOFF
    return 2.0 * v + v * v + (1.0 + v) ** 2 * _sum_bound(EPS32, k)


def widened(x):
    """A float16 or bfloat16 array in float32, exactly (bfloat16 through its bits, the top half of a float32, so no
    bfloat16 cast is needed); an array of any other dtype as it is."""
    if x.dtype.name == "bfloat16":
        return (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32) if x.dtype.name == "float16" else x


def narrowed(x32, dtype):
    """A float32 array in `dtype`, rounded once to nearest even (bfloat16 on the bits, with no bfloat16 cast)."""
    dtype = np.dtype(dtype)
    if dtype.name == "bfloat16":
        bits = x32.view(np.uint32)
        return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16).view(dtype)
    return x32.astype(dtype)


def as_float64(x):
    """x in float64 (exact for every float dtype)."""
    return widened(x).astype(np.float64)


def relative_error(out, ref, scale=None) -> float:
    """||out - ref|| / ||scale|| in float64 (scale defaults to ref); NaN anywhere gives NaN, which never passes."""
    import cupy

    xp = cupy.get_array_module(out)  # (NumPy arrays too: the GPU-less tests)
    diff = float(xp.linalg.norm((as_float64(out) - ref).ravel()))
    denom = float(xp.linalg.norm((ref if scale is None else scale).ravel()))
    if denom == 0.0:
        return diff
    return diff / denom


def product_error(out, x, y) -> float:
    """relative_error of out against x @ y, scaled by |x| @ |y| (dot, matvec, matmul), all in float64."""
    import cupy

    x64, y64 = as_float64(x), as_float64(y)
    return relative_error(out, x64 @ y64, cupy.abs(x64) @ cupy.abs(y64))


def verify(op: str, variant: str, out, x, y, dtype, k: int, tf32: bool = False) -> None:
    """Raise CheckError when out = x @ y (a k-term sum per element) is off the float64 reference (by the TF32
    bound where the products ran in TF32)."""
    err = product_error(out, x, y)
    tol = tf32_tolerance(k) if tf32 else tolerance(dtype, k)
    if not err <= tol:  # NaN fails too
        raise CheckError(f"cudakit.{op} (variant {variant!r}, {np.dtype(dtype)}): relative error {err:.3e} exceeds {tol:.1e}")
