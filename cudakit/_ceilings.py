"""The device's measured limits (the bench's ceilings): streaming read, device-to-device copy, FMA throughput.

Not an op: these kernels compute nothing useful, they only show how close each op's variants come to the hardware.
"""
from __future__ import annotations

import functools

import numpy as np

from ._compile import instantiation, kernel, launch
from ._device import sm_count

FAMILY = "ceilings"
THREADS = 256
BLOCKS_PER_SM = 8  # 2048 resident threads per SM / 256: a full GPU whatever the buffer size
READ_UNROLL = 4  # 16-byte loads in flight per thread per step
FMA_CHAINS = 8  # independent FMA chains per thread (more than the FMA latency in issue slots)
_FMA_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


MMA_CHAINS = 8  # independent accumulator tiles per warp


def instantiations() -> tuple[str, ...]:
    return (instantiation("stream_read", READ_UNROLL),) + tuple(
        instantiation("fma_throughput", t, FMA_CHAINS) for t in _FMA_DTYPES) + tuple(
        instantiation("mma_throughput", tf32, MMA_CHAINS) for tf32 in (False, True)) + ("hold_stream", "launch_floor")


def instantiation_groups():
    """The one module this family builds, for the GPU-less compile check."""
    return [instantiations()]


def blocks(device_id: int) -> int:
    return sm_count(device_id) * BLOCKS_PER_SM


def stream_read(src, sink) -> int:
    """Read every byte of `src` (C-contiguous, 16-byte aligned, nbytes a multiple of 16); return the bytes read.

    `sink` is a uint32 array of blocks(device) elements that receives one word per block.
    """
    if src.nbytes % 16 or src.data.ptr % 16 or not src.flags.c_contiguous:
        raise ValueError("cudakit._ceilings.stream_read: src must be C-contiguous, 16-byte aligned, whole 16-byte words")
    fn = kernel(FAMILY, instantiation("stream_read", READ_UNROLL), instantiations())
    launch(fn, (sink.size,), (THREADS,), (src, np.int64(src.nbytes // 16), sink))
    return src.nbytes


def fma_throughput(dtype, iterations: int, sink) -> int:
    """Run FMA chains in `dtype` on one thread per element of `sink` (a multiple of THREADS); return the FLOPs."""
    dtype = np.dtype(dtype)
    fn = kernel(FAMILY, instantiation("fma_throughput", dtype, FMA_CHAINS), instantiations())
    # x -> 0.999 x + 0.001 settles at 1: no overflow, no denormals, never the sentinel -1.
    args = (dtype.type(0.999), dtype.type(0.001), np.int32(iterations), dtype.type(-1), sink)
    launch(fn, (sink.size // THREADS,), (THREADS,), args)
    return 2 * FMA_CHAINS * int(iterations) * int(sink.size)


def mma_throughput(tf32: bool, iterations: int, sink) -> int:
    """Run mma.sync chains (float16 m16n8k16, or TF32 m16n8k8) on one thread per element of `sink` (a float32
    array, a multiple of THREADS; sm_80 and later); return the FLOPs."""
    fn = kernel(FAMILY, instantiation("mma_throughput", bool(tf32), MMA_CHAINS), instantiations())
    launch(fn, (sink.size // THREADS,), (THREADS,), (np.int32(iterations), np.float32(-1), sink))
    flops_per_mma = 2 * 16 * 8 * (8 if tf32 else 16)
    return flops_per_mma * MMA_CHAINS * int(iterations) * (int(sink.size) // 32)


def device_copy(dst, src) -> int:
    """cudaMemcpyAsync device to device on the current stream; return the bytes moved (read + write)."""
    if dst.nbytes != src.nbytes or not (dst.flags.c_contiguous and src.flags.c_contiguous):
        raise ValueError("cudakit._ceilings.device_copy: dst and src must be C-contiguous and of equal size")
    dst.data.copy_from_device_async(src.data, src.nbytes)
    return 2 * src.nbytes


@functools.lru_cache(maxsize=None)
def _sm_clock_hz(device_id: int) -> float:
    from cupy.cuda import runtime

    try:
        return runtime.deviceGetAttribute(runtime.cudaDevAttrClockRate, device_id) * 1e3
    except Exception:  # the hold needs only a rough length
        return 2e9


def hold_stream(seconds: float, device_id: int) -> None:
    """Keep the current stream busy for about `seconds` (counted in cycles of the reported SM clock)."""
    fn = kernel(FAMILY, "hold_stream", instantiations())
    launch(fn, (1,), (1,), (np.int64(seconds * _sm_clock_hz(device_id)),))


def empty_launch() -> None:
    """One launch of a kernel that does nothing, through the same launch() every op uses."""
    launch(kernel(FAMILY, "launch_floor", instantiations()), (1,), (32,), ())
