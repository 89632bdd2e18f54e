"""Per-device facts and per-stream scratch memory, cached."""
from __future__ import annotations

import functools

import cupy


@functools.lru_cache(maxsize=None)
def sm_count(device_id: int) -> int:
    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


@functools.lru_cache(maxsize=None)
def sm_threads(device_id: int) -> int:
    """The threads one SM of device_id holds at once (2048 on sm_70, sm_80 and sm_90; 1536 on sm_86 and sm_89)."""
    return cupy.cuda.Device(device_id).attributes["MaxThreadsPerMultiProcessor"]


@functools.lru_cache(maxsize=None)
def shared_per_block(device_id: int) -> int:
    """The most shared memory one block may take on device_id (the opt-in maximum), in bytes."""
    return cupy.cuda.Device(device_id).attributes["MaxSharedMemoryPerBlockOptin"]


class _Workspace:
    """The two buffers of one (device, stream), with their sizes and addresses as plain ints for the hot path."""

    __slots__ = ("scratch", "counters", "scratch_bytes", "counter_bytes", "scratch_ptr", "counters_ptr")

    def __init__(self, scratch_bytes: int, counter_bytes: int):
        self.scratch = cupy.zeros(max(scratch_bytes, 1 << 16), dtype=cupy.uint8)
        self.counters = cupy.zeros(max(counter_bytes, 1 << 12), dtype=cupy.uint8)
        self.scratch_bytes, self.counter_bytes = self.scratch.nbytes, self.counters.nbytes
        self.scratch_ptr, self.counters_ptr = self.scratch.data.ptr, self.counters.data.ptr


_workspaces: dict = {}
# CuPy's current device and stream, bound once: the hot paths (launch, workspace, dot) call them on every op.
current_device = cupy.cuda.runtime.getDevice
current_stream = cupy.cuda.get_current_stream


def workspace(scratch_bytes: int, counters: int = 0) -> tuple[int, int]:
    """Device addresses (scratch, counters) private to the current (device, stream), reused across calls.

    scratch: `scratch_bytes` of workspace (256-aligned) for partial results. counters: `counters` uint32 that are
    zero between launches; a kernel that finishes a reduction on the device counts finished blocks there, and the
    last block resets its counter, so calls queued on one stream never race. Two buffers, so no kernel's partials
    can land on another's counter. Kernels take the addresses as pointer parameters.

    Both grow (outside any graph capture) when a call needs more: warm an op up once before capturing it in a
    CUDA graph.
    """
    key = (current_device(), current_stream().ptr)
    ws = _workspaces.get(key)
    if ws is None or ws.scratch_bytes < scratch_bytes or ws.counter_bytes < 4 * counters:
        keep = (0, 0) if ws is None else (ws.scratch_bytes, ws.counter_bytes)
        ws = _workspaces[key] = _Workspace(max(scratch_bytes, keep[0]), max(4 * counters, keep[1]))
    return ws.scratch_ptr, ws.counters_ptr
