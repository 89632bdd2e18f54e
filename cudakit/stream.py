"""stream_map: a device function over chunks that live on the host, with each chunk's copy in, its kernels and the
copy of its result out overlapped across CUDA streams (seed 002: several streams hide the copies and the kernels'
latency).

The one host-facing call in cudakit. Chunk i goes to stream i mod N: its copy in, fn and its copy out are queued
there, and events order the copies across streams (each copy waits for the previous chunk's copy in the same
direction) and mark each stream's last copy out. The host waits on a stream's event only when it needs that stream
again, which is when it hands the stream's result over, in chunk order; meanwhile the other N - 1 streams keep both
copy directions and the SMs busy. Buffers are made in the first round, one set per stream, and reused.

Copies between the host and the device run asynchronously only from and to pinned (page-locked) memory: a pinned
chunk (pinned_empty) is copied in place, a pageable one is first copied by the host into the stream's pinned
staging buffer; results reach a pinned C-contiguous out= directly, and anything else through a pinned buffer.
"""
from __future__ import annotations

import contextlib
import math
import operator

import numpy as np

# One chunk of a split array: its copy takes long against the few host calls that queue it, and the pipeline's
# fill and drain (about one chunk each, not overlapped) are small against a large transfer.
CHUNK_BYTES = 16 << 20

_streams_by_device: dict = {}  # device id -> the streams stream_map has made there, reused by later calls
_NO_SPAN = contextlib.nullcontext()


def pinned_empty(shape, dtype=np.float64) -> np.ndarray:
    """An uninitialised NumPy array in pinned (page-locked) host memory, from CuPy's pinned memory pool.

    The memory goes back to the pool when the array (and every view of it) is gone;
    cupy.get_default_pinned_memory_pool().free_all_blocks() returns the pool's free blocks to the system.
    """
    import cupy

    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise TypeError("cudakit.pinned_empty: object arrays cannot live in pinned memory")
    try:
        shape = (operator.index(shape),)
    except TypeError:
        shape = tuple(operator.index(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"cudakit.pinned_empty: negative dimension in shape {shape}")
    mem = cupy.cuda.alloc_pinned_memory(max(math.prod(shape) * dtype.itemsize, 1))
    return np.ndarray(shape, dtype, buffer=mem)


def stream_map(fn, host_chunks, *, streams: int = 3, out=None, chunk_rows: int | None = None):
    """fn over every chunk of `host_chunks`, chunk by chunk on the device, with copies and kernels overlapped.

    fn(x) takes the chunk as a CuPy array on the current device and returns a CuPy array; it runs with its stream as
    CuPy's current stream, so CuPy and cudakit calls inside it launch there. x is a reused buffer: fn must not keep
    it. Work queued on the caller's current stream before the call is finished before fn runs.

    host_chunks: a NumPy array, split along its first axis into chunks of `chunk_rows` rows (default: about 16 MiB
    each), or an iterable of NumPy arrays. Every chunk has the first chunk's dtype and trailing shape and at most its
    rows (one buffer per stream serves them all).

    Returns, with out=None, an iterator of the results in chunk order, each a NumPy array the caller owns (a copy
    out of the stream's pinned buffer); with out (a NumPy array whose first axis holds the results one after the
    other), fills it and returns it once every result is there. Pinned chunks and a pinned C-contiguous out cost the
    host no copy: that is the path that hides the transfers.

    Errors (in fn, a bad chunk, a result that does not fit out) propagate after every stream has finished what was
    queued, and the buffers are released; an iterator closed early (or dropped) does the same.
    """
    return _start(fn, host_chunks, streams, out, chunk_rows, None)


def traced(trace, fn, host_chunks, *, streams: int = 3, out=None, chunk_rows: int | None = None):
    """stream_map with every copy and every fn call inside trace.span(label, stream) (the bench's timeline); runs to
    the end (a list of the results where out is None)."""
    res = _start(fn, host_chunks, streams, out, chunk_rows, trace)
    return res if out is not None else list(res)


def _start(fn, host_chunks, streams, out, chunk_rows, trace):
    if not callable(fn):
        raise TypeError(f"cudakit.stream_map: fn must be callable, got {type(fn).__name__}")
    n_streams = _stream_count(streams)
    chunks = _chunks(host_chunks, chunk_rows, out)
    flow = _flow(fn, chunks, n_streams, out, trace)
    if out is None:
        return flow
    for _ in flow:
        pass
    return out


# ---------------------------------------------------------------------------------------------------- checks
def _stream_count(streams) -> int:
    if isinstance(streams, bool) or not isinstance(streams, (int, np.integer)):
        raise TypeError(f"cudakit.stream_map: streams must be a positive int, got {streams!r}")
    if streams < 1:
        raise ValueError(f"cudakit.stream_map: streams must be a positive int, got {streams}")
    return int(streams)


def _is_device_array(x) -> bool:
    return type(x).__module__.split(".")[0] == "cupy"


def _check_chunk(i: int, chunk) -> None:
    if _is_device_array(chunk):
        raise TypeError(f"cudakit.stream_map: chunk {i} is already on the device (a cupy.ndarray); stream_map takes "
                        f"host chunks (numpy.ndarray): call fn on a device array directly")
    if not isinstance(chunk, np.ndarray):
        raise TypeError(f"cudakit.stream_map: chunk {i} must be a numpy.ndarray, got {type(chunk).__name__}")
    if chunk.ndim == 0:
        raise ValueError(f"cudakit.stream_map: chunk {i} is 0-D; chunks are at least 1-D (rows along the first axis)")
    if chunk.dtype.hasobject:
        raise TypeError(f"cudakit.stream_map: chunk {i} has dtype object, which cannot be copied to the device")


class _Layout:
    """What the first chunk fixes for all: the dtype, the trailing shape and the most rows a chunk may have."""

    def __init__(self, first: np.ndarray):
        self.dtype, self.tail, self.rows = first.dtype, first.shape[1:], first.shape[0]
        self.row_bytes = math.prod(self.tail) * self.dtype.itemsize

    def check(self, i: int, chunk: np.ndarray) -> None:
        if chunk.dtype != self.dtype or chunk.shape[1:] != self.tail or chunk.shape[0] > self.rows:
            raise ValueError(
                f"cudakit.stream_map: chunk {i} is {chunk.dtype} {chunk.shape}; every chunk must have the first "
                f"chunk's dtype ({self.dtype}) and trailing shape {self.tail} and at most its {self.rows} rows "
                f"(one staging buffer per stream serves them all)")


def _check_out(out) -> None:
    if _is_device_array(out):
        raise TypeError("cudakit.stream_map: out must be a numpy.ndarray on the host, got a cupy.ndarray")
    if not isinstance(out, np.ndarray):
        raise TypeError(f"cudakit.stream_map: out must be a numpy.ndarray, got {type(out).__name__}")
    if out.ndim == 0:
        raise ValueError("cudakit.stream_map: out must be at least 1-D (the results are stacked along its first axis)")
    if out.dtype.hasobject:
        raise TypeError("cudakit.stream_map: out has dtype object, which cannot receive device results")
    if not out.flags.writeable:
        raise ValueError("cudakit.stream_map: out is read-only")


def _no_overlap(what: str, chunk: np.ndarray, out) -> None:
    if out is not None and np.may_share_memory(chunk, out):
        raise ValueError(f"cudakit.stream_map: out overlaps {what}; pass a separate output array")


def _chunks(host_chunks, chunk_rows, out):
    """Check all that can be checked before the first launch; an iterator of (index, chunk, layout)."""
    if out is not None:
        _check_out(out)
    if isinstance(host_chunks, np.ndarray):
        _check_chunk(0, host_chunks)
        _no_overlap("the input", host_chunks, out)
        if chunk_rows is None:
            row_bytes = math.prod(host_chunks.shape[1:]) * host_chunks.dtype.itemsize
            chunk_rows = max(1, CHUNK_BYTES // max(row_bytes, 1))
        elif isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)):
            raise TypeError(f"cudakit.stream_map: chunk_rows must be a positive int, got {chunk_rows!r}")
        elif chunk_rows < 1:
            raise ValueError(f"cudakit.stream_map: chunk_rows must be a positive int, got {chunk_rows}")
        return _split(host_chunks, int(chunk_rows))
    if chunk_rows is not None:
        raise ValueError("cudakit.stream_map: chunk_rows splits one array; host_chunks is already a sequence of chunks")
    if _is_device_array(host_chunks):
        raise TypeError("cudakit.stream_map: host_chunks is already on the device (a cupy.ndarray); stream_map "
                        "takes host data (numpy.ndarray): call fn on the device array directly")
    if isinstance(host_chunks, (list, tuple)):  # all known now: every chunk checked before the first launch
        for _ in _checked(host_chunks, out):
            pass
    try:
        return _checked(iter(host_chunks), out)
    except TypeError:
        raise TypeError(f"cudakit.stream_map: host_chunks must be a numpy.ndarray or an iterable of them, "
                        f"got {type(host_chunks).__name__}") from None


def _split(a: np.ndarray, step: int):
    layout = _Layout(a[:step])
    for i, lo in enumerate(range(0, a.shape[0], step)):
        yield i, a[lo:lo + step], layout


def _checked(chunks, out):
    layout = None
    for i, c in enumerate(chunks):
        _check_chunk(i, c)
        layout = layout or _Layout(c)
        layout.check(i, c)
        _no_overlap(f"chunk {i}", c, out)
        yield i, c, layout


def _pinned(a: np.ndarray) -> bool:
    """True when a's memory is page-locked (cudaHostAlloc, cudaHostRegister): the copy engines read it in place."""
    from cupy.cuda import pinned_memory

    if a.size == 0:
        return False
    try:
        return bool(pinned_memory.is_memory_pinned(a.__array_interface__["data"][0]))
    except Exception:  # unknown: staging is always correct
        return False


def _streams(n: int) -> list:
    """n streams of the current device, made once and reused: CuPy's memory pool keeps the blocks freed on a stream
    for that stream, and cudakit its per-stream workspaces, so fresh streams per call would strand both."""
    import cupy

    have = _streams_by_device.setdefault(cupy.cuda.runtime.getDevice(), [])
    while len(have) < n:
        have.append(cupy.cuda.Stream(non_blocking=True))
    return have[:n]


# ---------------------------------------------------------------------------------------------------- the pipeline
class _Slot:
    """One stream's share: its device input buffer, pinned staging in and out, the event after its last copy out,
    and what that copy still needs (the chunk it reads, the result it copies, the rows of out it fills)."""

    __slots__ = ("stream", "copied_in", "done", "dev", "stage_in", "stage_out", "held")

    def __init__(self, stream):
        import cupy

        self.stream = stream
        self.copied_in, self.done = cupy.cuda.Event(disable_timing=True), cupy.cuda.Event(disable_timing=True)
        self.dev = self.stage_in = self.stage_out = self.held = None

    def device_in(self, rows: int, layout: _Layout):
        if self.dev is None:  # first round: the largest chunk's size, allocated on this stream
            import cupy

            with self.stream:
                self.dev = cupy.empty((layout.rows,) + layout.tail, layout.dtype)
        return self.dev[:rows]

    def staged_in(self, chunk: np.ndarray, layout: _Layout) -> int:
        """Copy a pageable (or strided) chunk into this stream's pinned buffer; the buffer's address."""
        import cupy

        if self.stage_in is None:
            self.stage_in = cupy.cuda.alloc_pinned_memory(max(layout.rows * layout.row_bytes, 1))
        np.copyto(np.ndarray(chunk.shape, chunk.dtype, buffer=self.stage_in), chunk)
        return self.stage_in.ptr

    def staged_out(self, nbytes: int) -> int:
        """The address of this stream's pinned result buffer, grown to fit (never within a run of equal results)."""
        import cupy

        if self.stage_out is None or self.stage_out.size() < nbytes:  # PinnedMemoryPointer.size() is a method
            self.stage_out = None  # (back to the pool before the larger one is taken)
            self.stage_out = cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        return self.stage_out.ptr

    def staged_result(self, shape, dtype) -> np.ndarray:
        return np.ndarray(shape, dtype, buffer=self.stage_out)

    def release(self) -> None:
        self.dev = self.stage_in = self.stage_out = self.held = None


def _settle(streams, quiet: bool) -> None:
    """Wait for every stream, so nothing queued still reads or writes a buffer about to be dropped. quiet: an error
    is already on its way out, and a CUDA error met here must not replace it."""
    first = None
    for s in streams:
        try:
            s.synchronize()
        except Exception as exc:
            first = first or exc
    if first is not None and not quiet:
        raise first


class _Pipeline:
    """Chunk i on slot i mod N; results handed over in chunk order (the oldest chunk in flight is always the one on
    the slot the next chunk needs)."""

    def __init__(self, fn, out, streams, trace):
        import cupy

        self.fn, self.out = fn, out
        self.slots = [_Slot(s) for s in streams]
        self.direct_out = out is not None and out.flags.c_contiguous and _pinned(out)  # results copied in place
        self.out_ptr = out.__array_interface__["data"][0] if self.direct_out else 0
        self.out_row_bytes = 0 if out is None else math.prod(out.shape[1:]) * out.dtype.itemsize
        self.out_rows = 0  # rows of out queued so far
        self.span = trace.span if trace is not None else (lambda label, stream: _NO_SPAN)
        ready = cupy.cuda.get_current_stream().record()  # fn may read arrays the caller's stream still writes
        for s in streams:
            s.wait_event(ready)

    def launch(self, i: int, chunk: np.ndarray, layout: _Layout) -> None:
        """Queue chunk i on its slot's stream: copy in, fn, copy out, each copy after the previous chunk's copy in
        the same direction (the link is shared: copies in chunk order finish in chunk order, as they are handed
        over, rather than all at once), then the slot's event."""
        import cupy

        n = len(self.slots)
        slot, prev = self.slots[i % n], self.slots[(i - 1) % n] if i and n > 1 else None
        stream, span = slot.stream, self.span
        dev = slot.device_in(chunk.shape[0], layout)
        if prev is not None:
            stream.wait_event(prev.copied_in)
        with span(f"h2d {i}", stream):
            if chunk.flags.c_contiguous and _pinned(chunk):
                src = chunk.__array_interface__["data"][0]
            else:
                src = slot.staged_in(chunk, layout)
            if chunk.nbytes:
                dev.data.copy_from_host_async(src, chunk.nbytes, stream)
        slot.copied_in.record(stream)
        with stream, span(f"fn {i}", stream):
            r = self.fn(dev)
            if not isinstance(r, cupy.ndarray):
                raise TypeError(f"cudakit.stream_map: fn must return a cupy.ndarray, got {type(r).__name__} for "
                                f"chunk {i} (for a function returning several arrays, pick one: lambda x: f(x)[0])")
            if not r.flags.c_contiguous:
                r = cupy.ascontiguousarray(r)
        row = self.out_rows
        if self.out is not None:
            out = self.out
            if r.ndim == 0 or r.shape[1:] != out.shape[1:] or row + r.shape[0] > out.shape[0]:
                raise ValueError(f"cudakit.stream_map: chunk {i}'s result has shape {r.shape}, which does not fit "
                                 f"out {out.shape} at row {row} (results are stacked along out's first axis)")
            if r.dtype != out.dtype:
                raise TypeError(f"cudakit.stream_map: chunk {i}'s result is {r.dtype}, out is {out.dtype}")
            self.out_rows = row + r.shape[0]
        if self.direct_out:
            dst = self.out_ptr + row * self.out_row_bytes
        else:
            dst = slot.staged_out(r.nbytes)
        if prev is not None:
            stream.wait_event(prev.done)
        with span(f"d2h {i}", stream):
            if r.nbytes:
                r.data.copy_to_host_async(dst, r.nbytes, stream)
        slot.done.record(stream)
        # The chunk stays referenced until its copy in is done, the result's device memory until its copy out is.
        slot.held = (chunk, r, row)

    def busy(self, i: int) -> bool:
        return self.slots[i % len(self.slots)].held is not None

    def hand_over(self, i: int):
        """Wait for slot i's last copy out and deliver its result: a fresh array (out=None), or its rows of out."""
        slot = self.slots[i % len(self.slots)]
        slot.done.synchronize()
        _, r, row = slot.held
        slot.held = None
        if self.out is None:
            return np.array(slot.staged_result(r.shape, r.dtype))  # the caller's own: the buffer is reused
        if not self.direct_out:
            np.copyto(self.out[row:row + r.shape[0]], slot.staged_result(r.shape, r.dtype))
        return None

    def release(self) -> None:
        for slot in self.slots:
            slot.release()
        self.slots = []


def _flow(fn, chunks, n_streams: int, out, trace):
    """The pipeline as a generator: yields each result (out=None) or nothing (filling out), in chunk order."""
    streams = _streams(n_streams)
    pipe = _Pipeline(fn, out, streams, trace)
    launched = 0
    try:
        for i, chunk, layout in chunks:
            handed = pipe.hand_over(i) if pipe.busy(i) else None  # the oldest chunk in flight, on this slot
            pipe.launch(i, chunk, layout)
            launched = i + 1
            if handed is not None:  # after the launch: the GPU has N chunks queued while the caller works
                yield handed
        for i in range(max(0, launched - n_streams), launched):
            handed = pipe.hand_over(i)
            if handed is not None:
                yield handed
        if out is not None and pipe.out_rows != out.shape[0]:
            raise ValueError(f"cudakit.stream_map: out has {out.shape[0]} rows, the results filled {pipe.out_rows}")
    except BaseException:  # an error, or the consumer closed the iterator (GeneratorExit)
        _settle(streams, quiet=True)
        raise
    else:
        _settle(streams, quiet=False)
    finally:
        pipe.release()
