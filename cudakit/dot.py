"""Dot product of two vectors: cudakit.dot(a, b) -> 0-d array, like cupy.dot."""
from __future__ import annotations

import functools

import cupy
import numpy as np

from . import _args, _check
from ._compile import ctype, instantiation, kernel, launch
from ._device import current_device, sm_count, workspace
from ._variants import Variant, lookup, register

FAMILY = "dot"
SEED_THREADS, SEED_MAX_BLOCKS = 512, 32  # seed 004's threadsPerBlock and its cap on blocks
FAST_THREADS, FAST_UNROLL = 256, 4
FAST_BLOCKS_PER_SM = 8  # 2048 resident threads per SM / 256
ALL_DTYPES = ("float32", "float64") + _args.HALVES  # the fast variant's; 16-bit: float sums, rounded once


@functools.lru_cache(maxsize=None)
def instantiations(dtype) -> tuple[str, ...]:
    """Every kernel the variants build for `dtype` (a NumPy dtype or its name), one module: the 16-bit types leave
    out the seed's."""
    ct = ctype(dtype)
    seed = (instantiation("gpu_dot", ct), instantiation("sum_partials", ct))
    return (seed if _args.dtype_name(dtype) in VARIANTS["gpu_dot"].dtypes else ()) + tuple(
        instantiation("dot_onepass", ct, vec, FAST_UNROLL) for vec in (True, False)
    )


def _kernel(name: str, dtype):
    return kernel(FAMILY, name, instantiations(dtype))


def _run_seed(a, b, out):
    n = a.size
    blocks = min(SEED_MAX_BLOCKS, -(-n // SEED_THREADS))
    partial, _ = workspace(blocks * a.itemsize)
    launch(_kernel(instantiation("gpu_dot", a.dtype), a.dtype), (blocks,), (SEED_THREADS,),
           (a, b, partial, np.int64(n)), shared_mem=SEED_THREADS * a.itemsize)
    launch(_kernel(instantiation("sum_partials", a.dtype), a.dtype), (1,), (256,), (partial, np.int32(blocks), out))


@functools.lru_cache(maxsize=None)
def _fast_kernel(dtype, vector: bool, device_id: int):
    return _kernel(instantiation("dot_onepass", dtype, bool(vector), FAST_UNROLL), dtype)


@functools.lru_cache(maxsize=4096)
def _fast_plan(dtype, n: int, vector: bool, device_id: int):
    """(kernel, blocks) of the one-pass dot of n elements: the host work that depends only on the call's shape."""
    per_block = FAST_THREADS * FAST_UNROLL * (16 // dtype.itemsize if vector else 1)
    blocks = max(1, min(sm_count(device_id) * FAST_BLOCKS_PER_SM, -(-n // per_block)))
    return _fast_kernel(dtype, vector, device_id), blocks


def _run_fast(a, b, out):
    a_ptr, b_ptr = a.data.ptr, b.data.ptr
    fn, blocks = _fast_plan(a.dtype, a.size, not (a_ptr % 16 or b_ptr % 16), a.data.device_id)
    partial, counter = workspace(blocks * max(4, a.itemsize), counters=1)  # float partials for 16-bit a
    launch(fn, (blocks,), (FAST_THREADS,), (a_ptr, b_ptr, a.size, partial, counter, out.data.ptr))


VARIANTS = register(FAMILY, [
    Variant(FAMILY, "gpu_dot", "shared-memory tree reduction, 32 blocks of 512 threads (seed 004), finished by a second one-block launch",
            _run_seed, seed=True),
    Variant(FAMILY, "fast", "one pass: 16-byte loads, warp shuffles, a full GPU of blocks, the last block finishes the sum",
            _run_fast, dtypes=ALL_DTYPES),
])


def dot(a, b, *, out=None, variant: str = "fast", check: bool | None = None):
    """a . b for 1-D float32/float64/float16/bfloat16 CuPy arrays of equal length, as a 0-d array of their dtype on
    the device (like cupy.dot). float16 and bfloat16 (ml_dtypes') are summed in float32 and rounded once; the seed
    variant takes float32/float64 only (a TypeError for others, before any launch).

    Runs on CuPy's current stream with no synchronisation. Non-contiguous inputs are copied first.
    """
    if variant == "fast" and _plain(a, b, out):  # a small dot costs its host time: the usual call takes a short cut
        if out is None:
            out = cupy.empty((), a.dtype)
        VARIANTS["fast"].run(a, b, out)  # (through the table, like every call)
        if _check.enabled(check):
            _check.verify("dot", variant, out, a, b, a.dtype, a.size)
        return out
    return _checked_dot(a, b, out, variant, check)


_ndarray = cupy.ndarray


def _plain(a, b, out) -> bool:
    """The usual call, accepted by a few cheap tests (anything else goes through every check of _checked_dot):
    non-empty contiguous float vectors of one dtype and length on the current device, aligned to their elements; out
    None or a 0-d array of that dtype there, aligned too, outside both."""
    if type(a) is not _ndarray or type(b) is not _ndarray or a.ndim != 1 or b.ndim != 1:
        return False
    dtype, size, item = a.dtype, a.size, a.itemsize
    if b.dtype != dtype or b.size != size or not size or (dtype not in _args.FLOATS and dtype.name not in _args.HALVES):
        return False
    if a.strides[0] != item or b.strides[0] != item:
        return False
    a_data, b_data, device_id = a.data, b.data, current_device()
    if a_data.device_id != device_id or b_data.device_id != device_id or (a_data.ptr | b_data.ptr) % item:
        return False
    if out is None:
        return True
    if (type(out) is not _ndarray or out.ndim or out.dtype != dtype or out.data.device_id != device_id
            or out.data.ptr % item):
        return False
    p, span = out.data.ptr, size * item
    return not (a_data.ptr - item < p < a_data.ptr + span or b_data.ptr - item < p < b_data.ptr + span)


def _checked_dot(a, b, out, variant, check):
    if (face := _args.dask_face(a, b)) is not None:
        return face.dot(a, b, out=out, variant=variant, check=check)
    a = _args.device_array("dot", "a", a, 1)
    b = _args.device_array("dot", "b", b, 1)
    if a.shape != b.shape:
        raise ValueError(f"cudakit.dot: a has shape {a.shape} and b has shape {b.shape}; they must match")
    dtype, device_id = _args.common("dot", {"a": a, "b": b}, _args.FLOATS_AND_HALVES)
    row = lookup("dot", variant)
    _args.check_variant("dot", row, dtype)
    run = row.run
    with _args.on_device(device_id):
        out = _args.output("dot", out, (), dtype, device_id, {"a": a, "b": b})
        if a.size == 0:
            _args.fill_zero(out)
            return out
        if a.strides[0] != a.itemsize:  # 1-D: contiguous exactly when the stride is one element
            a = _args.c_contiguous(a)
        if b.strides[0] != b.itemsize:
            b = _args.c_contiguous(b)
        run(a, b, out)
        if _check.enabled(check):
            _check.verify("dot", variant, out, a, b, dtype, a.size)
    return out


def instantiation_groups():
    """Every module this family builds (one per dtype), for the GPU-less compile check."""
    return [instantiations(name) for name in ALL_DTYPES]
