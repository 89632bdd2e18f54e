"""The one timer: every CUDA-event timing in cudakit (bench, tune, tools/) goes through here.

measure()   a callable timed with CUDA events after a warm-up: the median and spread of many samples, each call
            reading its own input set (the caller rotates sets past L2), the GPU kept busy while the host queues
            the timed calls so host overhead stays out; or, per call, back-to-back calls with host time included.
replay()    a callable captured once in a CUDA graph and replayed (host time out by construction): the tuner's mode.
keep_busy() the GPU-side hold both rely on.
Timeline    event timestamps on any streams, read back as spans (a stream timeline).
"""
from __future__ import annotations

import contextlib
import functools
import gc
import math
import time
from dataclasses import dataclass

WIDE_SPREAD = 0.10  # (p90 - p10) / median above this gets a note
MAX_SETS = 32  # rotated input sets per case, at most


@dataclass(frozen=True)
class Stats:
    median: float
    p10: float
    p90: float
    n: int

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how much the runs disagree, relative to the reported time."""
        return (self.p90 - self.p10) / self.median if self.median > 0 else float("inf")


def percentile(values, q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics (numpy's default)."""
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within [0, 100], got {q}")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(samples) -> Stats:
    samples = list(samples)
    if not samples:
        raise ValueError("summarize needs at least one sample")
    return Stats(percentile(samples, 50), percentile(samples, 10), percentile(samples, 90), len(samples))


def is_wide(stats: Stats, limit: float = WIDE_SPREAD) -> bool:
    """True when the runs spread by more than `limit` of the median (needs 3 runs to say anything)."""
    return stats.n >= 3 and stats.spread > limit


@dataclass
class Budget:
    row_s: float = 0.25  # seconds of timed runs per measurement
    min_runs: int = 5
    max_runs: int = 300
    skip_s: float = 2.0  # a row whose single call is estimated above this is skipped
    batch: int = 64  # back-to-back calls per sample in per-call mode

    @classmethod
    def quick(cls) -> "Budget":
        return cls(row_s=0.06, min_runs=3, max_runs=100, skip_s=0.5, batch=32)


# ---------------------------------------------------------------------------------------------------- the device
@functools.lru_cache(maxsize=None)
def l2_bytes(device_id: int) -> int:
    from .device import attribute

    return int(attribute("L2CacheSize", device_id) or 50 * 2**20)


def sets_past_l2(set_bytes: int, device_id: int, max_sets: int = MAX_SETS) -> int:
    """How many input sets of `set_bytes` to rotate through so that together they exceed twice the L2 cache."""
    return max(1, min(max_sets, math.ceil(2 * l2_bytes(device_id) / max(set_bytes, 1))))


def keep_busy(seconds: float) -> None:
    """Queue about `seconds` of GPU work on the current stream (one thread spinning on the SM clock), so the calls
    queued behind it are all in the queue before the GPU reaches them."""
    import cupy

    from .. import _ceilings

    _ceilings.hold_stream(seconds, cupy.cuda.runtime.getDevice())


# ---------------------------------------------------------------------------------------------------- the timers
def measure(call, budget: Budget, *, per_call: bool = False, warm: bool = True, busy: bool = True, estimate=None):
    """Time call(k) (k picks the input set) with CUDA events; returns (Stats, samples in seconds).

    per_call: each sample is `budget.batch` back-to-back calls, divided by the batch (host overhead included).
    busy: keep the GPU busy while the timed runs are queued (never in per-call mode, whose point is host time).
    estimate: seconds per call if known; a slow call then gets no probe run, only a few timed ones.
    """
    import cupy

    batch = budget.batch if per_call else 1
    if warm:
        call(0)
        cupy.cuda.get_current_stream().synchronize()
    host_s = 1e-4
    if estimate is not None and estimate * budget.min_runs > budget.row_s:
        sample_s = estimate * batch
    else:  # a probe run sets the count
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        t0 = time.perf_counter()
        start.record()
        for b in range(batch):
            call(b)
        end.record()
        host_s = time.perf_counter() - t0
        end.synchronize()
        sample_s = cupy.cuda.get_elapsed_time(start, end) / 1e3
    if sample_s * budget.min_runs <= budget.row_s:
        runs = min(budget.max_runs, int(budget.row_s / max(sample_s, 1e-9)))
    else:  # slow: a few runs, about two row budgets, at least one
        runs = max(1, min(budget.min_runs, int(2 * budget.row_s / sample_s)))
    if busy and not per_call:
        keep_busy(min(0.25, 1.5 * runs * host_s + 1e-3))
    events = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(runs)]
    k = batch
    collecting = gc.isenabled()
    gc.disable()  # a collection inside a back-to-back batch would be timed as the op's
    try:
        for s, e in events:
            s.record()
            for _ in range(batch):
                call(k)
                k += 1
            e.record()
    finally:
        if collecting:
            gc.enable()
    events[-1][1].synchronize()
    samples = [cupy.cuda.get_elapsed_time(s, e) / 1e3 / batch for s, e in events]
    return summarize(samples), samples


def alternate(calls, budget: Budget, rounds: int, *, per_call: bool = False, estimates=None) -> list[list[float]]:
    """Each of `calls` (call(k), as measure takes) timed `rounds` times, one after the other in turn, so that a drift
    of the GPU's clocks weighs on all of them alike; returns each call's medians, round by round."""
    estimates = estimates or [None] * len(calls)
    medians: list[list[float]] = [[] for _ in calls]
    for _ in range(rounds):
        for call, estimate, out in zip(calls, estimates, medians):
            out.append(measure(call, budget, per_call=per_call, estimate=estimate)[0].median)
    return medians


def replay(fn, reps: int = 10, rounds: int = 5) -> Stats:
    """Stats (seconds per call) over `rounds` replays of `reps` back-to-back calls of fn(), on a private stream.

    The calls are captured once in a CUDA graph where the stream allows it, so no host time is in the figure;
    elsewhere they are plain back-to-back launches.
    """
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        fn()  # warm-up: compile, load, first touch, workspaces
        try:
            stream.begin_capture()
            try:
                for _ in range(reps):
                    fn()
            finally:
                graph = stream.end_capture()
            run = graph.launch
        except Exception:  # no graph capture here

            def run():
                for _ in range(reps):
                    fn()

        run()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        samples = []
        for _ in range(rounds):
            start.record(stream)
            run()
            end.record(stream)
            end.synchronize()
            samples.append(cupy.cuda.get_elapsed_time(start, end) / 1e3 / reps)
    return summarize(samples)


class Timeline:
    """Event timestamps on any number of streams, read back as spans measured from the timeline's start.

        tl = Timeline()
        with tl.span("h2d 0", stream):
            ...queue work on stream...
        tl.spans()  # [(label, stream pointer, start s, end s)], in the order they were opened
    """

    def __init__(self):
        import cupy

        self._origin = cupy.cuda.Event()
        self._origin.record()
        self._marks = []

    @contextlib.contextmanager
    def span(self, label: str, stream=None):
        import cupy

        stream = stream if stream is not None else cupy.cuda.get_current_stream()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        try:
            yield
        finally:
            end.record(stream)
            self._marks.append((label, stream.ptr, start, end))

    def spans(self) -> list[tuple[str, int, float, float]]:
        import cupy

        self._origin.synchronize()
        out = []
        for label, stream_ptr, start, end in self._marks:
            end.synchronize()
            out.append((label, stream_ptr, cupy.cuda.get_elapsed_time(self._origin, start) / 1e3,
                        cupy.cuda.get_elapsed_time(self._origin, end) / 1e3))
        return out
