"""Per-device facts and per-stream scratch memory, cached."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def sm_count(device_id: int) -> int:
    import cupy

    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


_buffers: dict = {}


def _grown(key, nbytes: int):
    import cupy

    buf = _buffers.get(key)
    if buf is None or buf.nbytes < nbytes:
        buf = _buffers[key] = cupy.zeros(max(nbytes, 1 << 16), dtype=cupy.uint8)
    return buf.data.ptr


def workspace(scratch_bytes: int, counters: int = 0) -> tuple[int, int]:
    """Device addresses (scratch, counters) private to the current (device, stream), reused across calls.

    scratch: `scratch_bytes` of workspace (256-aligned) for partial results. counters: `counters` uint32 that are
    zero between launches; a kernel that finishes a reduction on the device counts finished blocks there, and the
    last block resets its counter, so calls queued on one stream never race. Two buffers, so no kernel's partials
    can land on another's counter. Kernels take the addresses as pointer parameters.

    Both grow (outside any graph capture) when a call needs more: warm an op up once before capturing it in a
    CUDA graph.
    """
    import cupy

    stream = (cupy.cuda.runtime.getDevice(), cupy.cuda.get_current_stream().ptr)
    return _grown(("scratch", stream), scratch_bytes), _grown(("counters", stream), 4 * counters)
