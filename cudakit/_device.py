"""Per-device facts and per-stream scratch memory, cached."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def sm_count(device_id: int) -> int:
    import cupy

    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


_buffers: dict = {}


def _buffer(kind: str, nbytes: int) -> int:
    import cupy

    key = (kind, cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr)
    buf = _buffers.get(key)
    if buf is None or buf.nbytes < nbytes:
        buf = cupy.zeros(max(nbytes, 1 << 16), dtype=cupy.uint8)
        _buffers[key] = buf
    return buf.data.ptr


def scratch(nbytes: int) -> int:
    """Device address of a workspace private to the current (device, stream), reused across calls (256-aligned).

    It grows (outside any graph capture) when a call needs more: warm an op up once before capturing it in a CUDA
    graph. Kernels take the address as a np.uint64 argument (a pointer parameter): cheaper per call than slicing
    views of a CuPy array.
    """
    return _buffer("scratch", nbytes)


def counters(count: int) -> int:
    """Device address of `count` uint32 counters private to the current (device, stream), all zero between launches.

    Kernels that finish a reduction on the device count finished blocks here and the last block resets its counter
    to zero, so calls queued on one stream never race. Grows like scratch().
    """
    return _buffer("counters", 4 * count)
