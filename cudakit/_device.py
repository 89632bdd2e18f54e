"""Per-device facts and per-stream scratch memory, cached."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def sm_count(device_id: int) -> int:
    import cupy

    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


_scratch: dict = {}

COUNTER_BYTES = 256  # the block counter, padded so what follows keeps 256-byte alignment


def scratch(nbytes: int) -> int:
    """Device address of a zero-initialised buffer private to the current (device, stream), reused across calls.

    Kernels that finish a reduction on the device keep their block counter in its first COUNTER_BYTES and reset
    it themselves, so calls queued on one stream never race; it grows (outside any graph capture) when a call
    needs more. Warm an op up once before capturing it in a CUDA graph. Kernels take the address as a
    np.uint64 argument (a pointer parameter): cheaper per call than slicing views of a CuPy array.
    """
    import cupy

    key = (cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr)
    buf = _scratch.get(key)
    if buf is None or buf.nbytes < nbytes:
        buf = cupy.zeros(max(nbytes, 1 << 16), dtype=cupy.uint8)
        _scratch[key] = buf
    return buf.data.ptr
