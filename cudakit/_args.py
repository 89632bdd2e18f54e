"""Argument checks shared by every op. Everything here runs before any launch."""
from __future__ import annotations

import contextlib
import operator
import sys

import cupy
import numpy as np

from ._device import current_device

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# The 16-bit floats, by dtype name: float16, and ml_dtypes' bfloat16 (what CuPy 14 takes), recognised by its name so
# that cudakit never imports ml_dtypes. Summed in float32, their results rounded once to the input's dtype.
HALVES = ("float16", "bfloat16")
FLOATS_AND_HALVES = FLOATS + HALVES


# CuPy keeps an array's contiguity in two attributes; .flags builds a new object on every access, several times a
# call (docs/NOTES.md, "Host time per call"). The attributes are CuPy's own, not its API: without them, .flags.
if hasattr(cupy.ndarray, "_c_contiguous") and hasattr(cupy.ndarray, "_f_contiguous"):
    is_c_contiguous, is_f_contiguous = operator.attrgetter("_c_contiguous"), operator.attrgetter("_f_contiguous")
else:  # pragma: no cover (a CuPy without them)
    def is_c_contiguous(x) -> bool:
        return x.flags.c_contiguous

    def is_f_contiguous(x) -> bool:
        return x.flags.f_contiguous


_NAMES: dict = {}


def dtype_name(dtype) -> str:
    """The name of a dtype, or the name itself: "bfloat16" needs no ml_dtypes. (NumPy builds a dtype's name on
    every access: a call path that asks each time reads it from here.)"""
    name = _NAMES.get(dtype)
    if name is None:
        name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
        if not isinstance(dtype, str):
            _NAMES[dtype] = name
    return name


def supported_names(allowed) -> str:
    """`allowed` (dtypes, or dtype names such as HALVES') as an error message lists it."""
    return ", ".join(a if isinstance(a, str) else str(np.dtype(a)) for a in allowed)


def dask_face(*values):
    """cudakit.dask where a value is a Dask array, else None. Without dask.array imported no value can be one, so
    this imports nothing: `import cudakit` never imports Dask."""
    module = sys.modules.get("dask.array")
    if module is not None and any(isinstance(v, module.Array) for v in values):
        from . import dask

        return dask
    return None


def device_array(op: str, name: str, x, ndim: int | tuple[int, ...] | None = None, *, min_ndim: int = 0):
    if not isinstance(x, cupy.ndarray):
        hint = "; move it to the GPU with cupy.asarray() first" if isinstance(x, (np.ndarray, list, tuple)) else ""
        raise TypeError(f"cudakit.{op}: {name} must be a cupy.ndarray, got {type(x).__module__}.{type(x).__name__}{hint}")
    if x.ndim < min_ndim:
        raise ValueError(f"cudakit.{op}: {name} must be at least {min_ndim}-D, got {x.ndim}-D with shape {x.shape}")
    if ndim is None:
        return x
    ndims = (ndim,) if isinstance(ndim, int) else ndim
    if x.ndim not in ndims:
        want = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"cudakit.{op}: {name} must be {want}, got {x.ndim}-D with shape {x.shape}")
    return x


def common(op: str, arrays: dict, allowed=FLOATS) -> tuple[np.dtype, int]:
    """(dtype, device id) that every array of `arrays` ({name: array}) shares; the dtype must be in `allowed`
    (dtypes, or dtype names: FLOATS_AND_HALVES), and each array's first element aligned to its size."""
    values = tuple(arrays.values())
    dtype, device_id = values[0].dtype, values[0].data.device_id
    for a in values:
        if a.dtype != dtype:
            listed = ", ".join(f"{n}: {x.dtype}" for n, x in arrays.items())
            raise TypeError(f"cudakit.{op}: operands must share one dtype, got {listed} (cast explicitly with .astype())")
    if dtype not in allowed and dtype.name not in allowed:
        raise TypeError(f"cudakit.{op}: unsupported dtype {dtype}; supported: {supported_names(allowed)}")
    for name, a in arrays.items():
        if a.data.device_id != device_id:
            listed = ", ".join(f"{n} on device {x.data.device_id}" for n, x in arrays.items())
            raise ValueError(f"cudakit.{op}: arrays must be on one device, got {listed}")
        aligned(op, name, a)
    return dtype, device_id


def aligned(op: str, name: str, x) -> None:
    """A ValueError where x's first element is not aligned to its size (a view made with memptr at an odd byte):
    every kernel's element loads would fault on it."""
    if x.data.ptr % x.itemsize:
        raise ValueError(f"cudakit.{op}: {name} is not aligned to its {x.itemsize}-byte elements")


def output(op: str, out, shape: tuple, dtype: np.dtype, device_id: int, inputs: dict):
    """Validate `out=` like cupy.matmul does (exact shape and dtype, C-contiguous) or allocate it on the current
    device (callers run this inside on_device(device_id))."""
    if out is None:
        return cupy.empty(shape, dtype)
    if not isinstance(out, cupy.ndarray):
        raise TypeError(f"cudakit.{op}: out must be a cupy.ndarray, got {type(out).__name__}")
    if out.shape != tuple(shape):
        raise ValueError(f"cudakit.{op}: out has shape {out.shape}, the result has shape {tuple(shape)}")
    if out.dtype != dtype:
        raise TypeError(f"cudakit.{op}: out has dtype {out.dtype}, the result has dtype {dtype}")
    if shape and not is_c_contiguous(out):  # (a 0-d out always is)
        raise ValueError(f"cudakit.{op}: out must be C-contiguous")
    if out.data.device_id != device_id:
        raise ValueError(f"cudakit.{op}: out is on device {out.data.device_id}, the inputs on device {device_id}")
    aligned(op, "out", out)
    if out.size:
        lo, hi = out.data.ptr, out.data.ptr + out.nbytes  # C-contiguous: exactly its bytes
        for name, a in inputs.items():
            mem = a.data.mem  # the allocation a lies in: a quick answer for separate allocations
            if a.size and (not mem.size or (mem.ptr < hi and lo < mem.ptr + mem.size)):
                a_lo, a_hi = extent(a)
                if a_lo < hi and lo < a_hi:
                    raise ValueError(f"cudakit.{op}: out overlaps {name}; pass a separate output array")
    return out


def extent(x) -> tuple[int, int]:
    """The device addresses [first, past the last) that x's elements span, for any strides (what
    cupy.may_share_memory compares, without its per-call cost)."""
    lo = hi = x.data.ptr
    strides = x.strides
    for i, n in enumerate(x.shape):
        span = (n - 1) * strides[i]
        if span > 0:
            hi += span
        else:
            lo += span
    return lo, hi + x.itemsize


def contiguous_or_copy(x):
    """x if it is C- or F-contiguous (the kernels read both), else a C-contiguous copy (documented)."""
    if is_c_contiguous(x) or is_f_contiguous(x):
        return x
    return c_contiguous(x)


def c_contiguous(x):
    """cupy.ascontiguousarray(x); a 16-bit float array is copied as its raw bits (exact, and free of any question
    of which dtypes CuPy's copy kernels know)."""
    if x.itemsize == 2 and x.dtype.name in HALVES and not is_c_contiguous(x):
        return cupy.ascontiguousarray(x.view(np.uint16)).view(x.dtype)
    return cupy.ascontiguousarray(x)


def fill_zero(out) -> None:
    """out[...] = 0 for any float dtype (a 16-bit zero is the all-zero bits)."""
    (out.view(np.uint16) if out.dtype.name in HALVES else out).fill(0)


def check_variant(op: str, variant, dtype) -> None:
    """TypeError, before any launch, when the variant (a Variant row) does not take `dtype`."""
    if dtype.name not in variant.dtypes:
        raise TypeError(f"cudakit.{op}: variant {variant.name!r} does not take {dtype.name}; it takes "
                        f"{', '.join(variant.dtypes)}")


_ALREADY_THERE = contextlib.nullcontext()


def on_device(device_id: int):
    """Run on the inputs' device; free when it already is the current one (the usual case)."""
    if current_device() == device_id:
        return _ALREADY_THERE
    return cupy.cuda.Device(device_id)
