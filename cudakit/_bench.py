"""The benchmark behind `python bench.py`: every variant of every op against CuPy, read against measured ceilings.

Measure -> a plain results dict -> rich tables, --json and the --plot roofline. The tables and the plot read only
that dict, so `--load results.json` redraws them on a machine without a GPU.

Timing: CUDA events around each call, after a warm-up, median of many runs. Runs are queued behind a short
GPU-side hold so the host's launch overhead stays out of the GPU time, and every call reads a different set of
input buffers until the sets together exceed twice the L2 cache, so repeats time memory, not the cache. Small
dot products are the exception: their time is the per-call time of back-to-back calls (host overhead included),
because there the call overhead is the whole story.
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from rich.markup import escape

from . import _check

# dot first: its small sizes are host-bound per-call rows, read against the launch floor, so they are timed right after
# it, in the same host state (on an H100 host, cupy.dot per call took 60-72 us late in a full run and 40 us in a
# dot-only run).
OPS = ("dot", "transpose", "matvec", "matmul")
WIDE_SPREAD = 0.10  # (p90 - p10) / median above this gets a note
MATMUL_SAMPLE_ROWS = 256  # float64 reference rows for large matmuls
MATMUL_SAMPLE_ABOVE = 2**34  # m * k * n beyond which the reference is sampled
MAX_SETS = 32  # rotated input sets per case, at most


class BenchError(Exception):
    """A one-sentence reason the bench cannot run (printed without a traceback)."""


# ---------------------------------------------------------------------------------------------------- statistics
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


# ---------------------------------------------------------------------------------------------------- device
def no_gpu_reason() -> str | None:
    """None when CuPy sees a CUDA GPU, else why not, in a few words (for one sentence on stderr)."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no CuPy, no driver, driver too old, no device
        text = str(exc).strip().splitlines()[0].strip() if str(exc).strip() else type(exc).__name__
        return text.rstrip(".")
    return None if count > 0 else "no CUDA device is visible"


def _attribute(name: str, device_id: int):
    """cudaDeviceGetAttribute(cudaDevAttr<name>), or None where this CUDA does not know it."""
    from cupy.cuda import runtime

    enum = getattr(runtime, f"cudaDevAttr{name}", None)
    if enum is None:
        return None
    try:
        return runtime.deviceGetAttribute(enum, device_id)
    except Exception:
        return None


def device_facts(device_id: int = 0) -> dict:
    """The device listing of seed 002, from cudaGetDeviceProperties and cudaDeviceGetAttribute."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)

    def pick(prop: str, attr: str):
        # CUDA 13 dropped some fields (clock rates) from cudaDeviceProp; the attributes still carry them
        value = _attribute(attr, device_id)
        return props.get(prop) if value is None else value

    name = props.get("name", b"?")
    facts = {
        "name": name.decode(errors="replace") if isinstance(name, bytes) else str(name),
        "compute_capability": f"{props.get('major')}.{props.get('minor')}",
        "global_memory_bytes": props.get("totalGlobalMem"),
        "l2_cache_bytes": pick("l2CacheSize", "L2CacheSize"),
        "shared_memory_per_block_bytes": props.get("sharedMemPerBlock"),
        "shared_memory_per_block_optin_bytes": pick("sharedMemPerBlockOptin", "MaxSharedMemoryPerBlockOptin"),
        "shared_memory_per_sm_bytes": pick("sharedMemPerMultiprocessor", "MaxSharedMemoryPerMultiprocessor"),
        "sm_clock_khz": pick("clockRate", "ClockRate"),
        "memory_clock_khz": pick("memoryClockRate", "MemoryClockRate"),
        "memory_bus_width_bits": pick("memoryBusWidth", "GlobalMemoryBusWidth"),
        "sm_count": pick("multiProcessorCount", "MultiProcessorCount"),
        "warp_size": pick("warpSize", "WarpSize"),
        "max_blocks_per_sm": pick("maxBlocksPerMultiProcessor", "MaxBlocksPerMultiprocessor"),
        "max_threads_per_block": pick("maxThreadsPerBlock", "MaxThreadsPerBlock"),
        "max_block_dims": list(props.get("maxThreadsDim", ())),
        "max_grid_dims": list(props.get("maxGridSize", ())),
    }
    clock, bus = facts["memory_clock_khz"], facts["memory_bus_width_bits"]
    # double data rate: two transfers per memory clock over the whole bus
    facts["peak_memory_bandwidth_bytes_s"] = 2 * clock * 1e3 * bus / 8 if clock and bus else None
    return facts


def device_rows(facts: dict) -> list[tuple[str, str]]:
    """(label, value) pairs for a table, in the order of seed 002's listing."""

    def size(key, unit, scale):
        v = facts.get(key)
        return "n/a" if v is None else f"{v / scale:.2f} {unit}" if v / scale % 1 else f"{v // scale} {unit}"

    def clock(key):
        v = facts.get(key)
        return "n/a" if not v else f"{v / 1e6:.3f} GHz"

    def dims(key):
        v = facts.get(key)
        return " x ".join(str(d) for d in v) if v else "n/a"

    bw = facts.get("peak_memory_bandwidth_bytes_s")
    return [
        ("Device name", str(facts["name"])),
        ("Compute capability", str(facts["compute_capability"])),
        ("Global memory", size("global_memory_bytes", "GiB", 2**30)),
        ("L2 cache", size("l2_cache_bytes", "MiB", 2**20)),
        ("Shared memory per block", size("shared_memory_per_block_bytes", "KiB", 2**10)),
        ("Shared memory per block (opt-in max)", size("shared_memory_per_block_optin_bytes", "KiB", 2**10)),
        ("Shared memory per SM", size("shared_memory_per_sm_bytes", "KiB", 2**10)),
        ("SM clock", clock("sm_clock_khz")),
        ("Memory clock", clock("memory_clock_khz")),
        ("Memory bus width", "n/a" if not facts.get("memory_bus_width_bits") else f"{facts['memory_bus_width_bits']} bit"),
        ("Peak memory bandwidth (clock x bus)", "n/a" if not bw else f"{bw / 1e9:.0f} GB/s"),
        ("SM count", str(facts["sm_count"])),
        ("Warp size", str(facts["warp_size"])),
        ("Max blocks per SM", str(facts["max_blocks_per_sm"])),
        ("Max threads per block", str(facts["max_threads_per_block"])),
        ("Max block dimensions", dims("max_block_dims")),
        ("Max grid dimensions", dims("max_grid_dims")),
    ]


# ---------------------------------------------------------------------------------------------------- timing
@dataclass
class Budget:
    row_s: float = 0.25  # seconds of timed runs per row
    min_runs: int = 5
    max_runs: int = 300
    skip_s: float = 2.0  # a row whose single call is estimated above this is skipped
    batch: int = 64  # back-to-back calls per sample in per-call mode

    @classmethod
    def quick(cls) -> "Budget":
        return cls(row_s=0.06, min_runs=3, max_runs=100, skip_s=0.5, batch=32)


def measure(call, budget: Budget, *, per_call: bool = False, warm: bool = True, hold=None, estimate=None):
    """Time call(k) (k picks the input set) with CUDA events; returns (Stats, samples in seconds).

    per_call: each sample is `budget.batch` back-to-back calls, divided by the batch (host overhead included).
    hold(seconds): keeps the GPU busy while the timed runs are queued (left out in per-call mode).
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
    if hold is not None and not per_call:
        hold(min(0.25, 1.5 * runs * host_s + 1e-3))
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


# ---------------------------------------------------------------------------------------------------- cases
@dataclass
class Case:
    op: str
    dtype: str
    dims: tuple  # transpose, matvec: (m, n); dot: (n,); matmul: (m, k, n)
    order: str = "C"  # matvec: the layout of A; matmul: of A and B ("C" = "CC", "CF", "FC", "FF")
    headline: bool = False  # the case the roofline plots
    fast_only: bool = False  # time only the fast variant (and the CuPy reference): a layout row
    per_call: bool = False  # time back-to-back calls, host overhead included (what a Python loop of calls sees)

    def __post_init__(self):
        self.dims = tuple(int(d) for d in self.dims)

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def label(self) -> str:
        shape = "×".join(str(d) for d in self.dims)
        if self.op == "dot":
            n = self.dims[0]
            shape = f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)
        elif self.op == "matmul":
            shape = f"{shape} (m×k×n)"
            a_order, b_order = self.matmul_orders
            if (a_order, b_order) != ("C", "C"):
                shape += ", " + " and ".join(f"{x} F-order" for x, o in (("A", a_order), ("B", b_order)) if o == "F")
        elif self.op == "matvec":
            shape += ", A C-order" if self.order == "C" else ", A F-order (a .T view)"
        if self.per_call and self.op != "dot":
            shape += ", per call"
        return f"{self.dtype} {shape}"

    @property
    def matmul_orders(self) -> tuple[str, str]:
        return ("C", "C") if self.order == "C" else (self.order[0], self.order[1])

    @property
    def flops(self) -> int:
        d = self.dims
        if self.op == "transpose":
            return 0
        return 2 * math.prod(d)  # one multiply-add per element of A (matvec), of a (dot), per m, k, n (matmul)

    @property
    def bytes(self) -> int:
        """The fewest bytes the op must move: every input read once, every output written once."""
        d = self.dims
        if self.op == "transpose":
            elements = 2 * d[0] * d[1]
        elif self.op == "matvec":
            elements = d[0] * d[1] + d[1] + d[0]
        elif self.op == "dot":
            elements = 2 * d[0]
        else:
            elements = d[0] * d[1] + d[1] * d[2] + d[0] * d[2]
        return self.itemsize * elements


def default_cases(op: str, quick: bool) -> list[Case]:
    f32, f64 = "float32", "float64"
    if op == "transpose":
        if quick:
            return [Case(op, f32, (8192, 8192), headline=True), Case(op, "int8", (8191, 8193))]
        cases = [Case(op, t, (16384, 16384), headline=t == f32) for t in ("int8", "float16", f32, f64)]
        cases += [Case(op, f32, (8192, 8192))]
        cases += [Case(op, t, d) for d in ((1024, 262144), (262144, 1024)) for t in ("int8", "float16", f32, f64)]
        return cases + [Case(op, t, (8191, 8193)) for t in ("int8", "float16", f32, f64)]
    if op == "matvec":
        if quick:
            return [Case(op, f32, (4096, 4096), "C", True), Case(op, f32, (4096, 4096), "F"),
                    Case(op, f32, (4194304, 64), "C")]
        shapes = ((16384, 16384), (4096, 4096), (4194304, 64), (64, 4194304))
        # 4096² again per call: whether a loop of calls sees CuPy's host time for `A @ x` at a kernel this short,
        # which the GPU-time rows hide (their runs are queued behind a busy GPU). On an H100 it did not.
        per_call = [Case(op, t, (4096, 4096), o, fast_only=True, per_call=True) for t in (f32, f64) for o in "CF"]
        return [Case(op, t, s, o, t == f32 and s == shapes[0] and o == "C")
                for t in (f32, f64) for s in shapes for o in ("C", "F")] + per_call
    if op == "dot":
        if quick:
            return [Case(op, f32, (2**16,)), Case(op, f32, (2**24,), headline=True), Case(op, f64, (2**20,))]
        return ([Case(op, f32, (2**e,), headline=e == 28) for e in (16, 20, 24, 28)]
                + [Case(op, f64, (2**e,)) for e in (16, 20, 24, 27)])
    if op == "matmul":
        if quick:
            return [Case(op, f32, (1024, 1024, 1024), headline=True), Case(op, f32, (1025, 1023, 1027))]
        dims = ((512,) * 3, (2048,) * 3, (4096,) * 3, (8192,) * 3, (4097, 4095, 4099), (65536, 1024, 1024))
        layouts = [Case(op, f32, (4096,) * 3, order, fast_only=True) for order in ("FC", "CF", "FF")]
        return ([Case(op, f32, d, headline=d == (4096,) * 3) for d in dims] + layouts
                + [Case(op, f64, (4096,) * 3)])
    raise ValueError(op)


def random_array(shape, dtype):
    """Uniform in [0.5, 1.5) for floats (positive: the norms carry no cancellation), full range for integers."""
    import cupy

    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        base = np.float64 if dtype.itemsize == 8 else np.float32
        return (cupy.random.random_sample(shape, dtype=base) + base(0.5)).astype(dtype, copy=False)
    info = np.iinfo(dtype)
    return cupy.random.randint(int(info.min), int(info.max) + 1, size=shape, dtype=np.int64).astype(dtype)


def poison(out) -> None:
    if out.dtype.kind == "f":
        out.fill(np.nan)
    else:
        out.view(np.uint8).fill(0xA5)


class OpBench:
    """How one op is set up, called and checked; the Runner does the rest for every op alike."""

    op = ""
    reference_name = ""

    def make(self, case: Case) -> dict:
        raise NotImplementedError

    def call(self, variant, s):
        raise NotImplementedError

    def reference(self, s):
        raise NotImplementedError

    def check_context(self, case: Case, s0: dict):
        return None

    def error(self, case: Case, ctx, s0: dict, out) -> dict:
        raise NotImplementedError

    def diagnostic(self, variant, s):
        """Bench-only kernels take (first input, an output of as many elements, shaped like it)."""
        first = next(iter(s.values()))
        like = s.get("like")
        if like is None:
            import cupy

            like = s["out"].reshape(first.shape) if s["out"].size == first.size else cupy.empty_like(first)
            s["like"] = like
        variant.run(first, like)
        return like

    def diagnostic_error(self, variant, s0: dict, out) -> dict:
        return {"kind": None, "note": "diagnostic: output is not the op's result"}


class TransposeBench(OpBench):
    op = "transpose"
    reference_name = "cupy.ascontiguousarray(A.T)"

    def make(self, case):
        import cupy

        m, n = case.dims
        return {"A": random_array((m, n), case.dtype), "out": cupy.empty((n, m), case.dtype)}

    def call(self, variant, s):
        import cudakit

        return cudakit.transpose(s["A"], variant=variant.name, out=s["out"], check=False)

    def reference(self, s):
        import cupy

        return cupy.ascontiguousarray(s["A"].T)

    def error(self, case, ctx, s0, out):
        import cupy

        return {"kind": "exact", "value": bool(cupy.array_equal(out, s0["A"].T)), "against": "A.T"}

    def diagnostic_error(self, variant, s0, out):
        import cupy

        if "copy" in variant.name.lower():  # the copy kernels should reproduce A exactly
            return {"kind": "exact", "value": bool(cupy.array_equal(out, s0["A"])), "against": "copy of A"}
        return super().diagnostic_error(variant, s0, out)


class MatvecBench(OpBench):
    op = "matvec"
    reference_name = "A @ x (cuBLAS)"

    def make(self, case):
        import cupy

        m, n = case.dims
        a = random_array((m, n), case.dtype) if case.order == "C" else random_array((n, m), case.dtype).T
        return {"A": a, "x": random_array((n,), case.dtype), "out": cupy.empty((m,), case.dtype)}

    def call(self, variant, s):
        import cudakit

        return cudakit.matvec(s["A"], s["x"], variant=variant.name, out=s["out"], check=False)

    def reference(self, s):
        return s["A"] @ s["x"]

    def check_context(self, case, s0):
        import cupy

        return s0["A"].astype(cupy.float64) @ s0["x"].astype(cupy.float64)

    def error(self, case, ref, s0, out):
        return {"kind": "rel", "value": _check.relative_error(out, ref), "k": case.dims[1]}


class DotBench(OpBench):
    op = "dot"
    reference_name = "cupy.dot(a, b) (cuBLAS)"

    def make(self, case):
        import cupy

        n = case.dims[0]
        return {"a": random_array((n,), case.dtype), "b": random_array((n,), case.dtype),
                "out": cupy.empty((), case.dtype)}

    def call(self, variant, s):
        import cudakit

        return cudakit.dot(s["a"], s["b"], variant=variant.name, out=s["out"], check=False)

    def reference(self, s):
        import cupy

        return cupy.dot(s["a"], s["b"])

    def check_context(self, case, s0):
        import cupy

        return s0["a"].astype(cupy.float64) @ s0["b"].astype(cupy.float64)

    def error(self, case, ref, s0, out):
        return {"kind": "rel", "value": _check.relative_error(out, ref), "k": case.dims[0]}


class MatmulBench(OpBench):
    op = "matmul"
    reference_name = "cupy.matmul (cuBLAS)"

    def make(self, case):
        import cupy

        m, k, n = case.dims
        a_order, b_order = case.matmul_orders  # an F-order operand is the .T view of a C-order array
        a = random_array((m, k), case.dtype) if a_order == "C" else random_array((k, m), case.dtype).T
        b = random_array((k, n), case.dtype) if b_order == "C" else random_array((n, k), case.dtype).T
        return {"A": a, "B": b, "out": cupy.empty((m, n), case.dtype)}

    def call(self, variant, s):
        import cudakit

        return cudakit.matmul(s["A"], s["B"], variant=variant.name, out=s["out"], check=False)

    def reference(self, s):
        import cupy

        return cupy.matmul(s["A"], s["B"])

    def check_context(self, case, s0):
        import cupy

        m, k, n = case.dims
        if m * k * n > MATMUL_SAMPLE_ABOVE:  # float64 rows A[rows] @ B: cheap, and still every column and k
            rows = np.unique(np.random.default_rng(0).integers(0, m, MATMUL_SAMPLE_ROWS))
            rows = cupy.asarray(np.union1d(rows, [0, m - 1]))
        else:
            rows = None
        a = s0["A"] if rows is None else s0["A"][rows]
        return rows, a.astype(cupy.float64) @ s0["B"].astype(cupy.float64)

    def error(self, case, ctx, s0, out):
        rows, ref = ctx
        got = out if rows is None else out[rows]
        return {"kind": "rel", "value": _check.relative_error(got, ref), "k": case.dims[1],
                "sampled_rows": None if rows is None else int(rows.size)}


BENCHES = {b.op: b for b in (TransposeBench(), MatvecBench(), DotBench(), MatmulBench())}


# ---------------------------------------------------------------------------------------------------- runner
@dataclass
class Runner:
    budget: Budget
    quick: bool = False
    device_id: int = 0
    on_row: object = None  # callback(description) after each row, for the progress bar
    rates: dict = field(default_factory=dict)  # (op, dtype, name) -> work per second, to estimate slow rows

    def hold(self, seconds: float) -> None:
        from . import _ceilings

        _ceilings.hold_stream(seconds, self.device_id)

    def _step(self, text: str) -> None:
        if self.on_row is not None:
            self.on_row(text)

    # ---- ceilings
    def ceilings(self) -> dict:
        import cupy

        from . import _ceilings

        # GiBs, not MiBs: launch and tail effects then cost well under 1% (256 MiB read about 7% slower on an H200)
        nbytes = 2**30
        src = cupy.empty(2 * nbytes, cupy.uint8)
        dst = cupy.empty(nbytes, cupy.uint8)
        src.fill(1)
        sink32 = cupy.empty(_ceilings.blocks(self.device_id), cupy.uint32)
        out = {}

        def record(key, what, unit, stats, amount, samples):  # a rate of `amount` per second, or a time in µs
            value = stats.median * 1e6 if unit == "µs" else amount / stats.median / (1e9 if unit == "GB/s" else 1e12)
            out[key] = {"what": what, "unit": unit, "value": value,
                        "median_s": stats.median, "p10_s": stats.p10, "p90_s": stats.p90, "n": stats.n,
                        "spread": stats.spread, "samples_s": samples}
            self._step(f"ceiling: {what}")

        st, smp = measure(lambda k: _ceilings.stream_read(src, sink32), self.budget, hold=self.hold)
        record("read", f"streaming read of {src.nbytes >> 20} MiB (16-byte loads)", "GB/s", st, src.nbytes, smp)
        src = src[:nbytes]
        st, smp = measure(lambda k: _ceilings.device_copy(dst, src), self.budget, hold=self.hold)
        record("copy", f"cudaMemcpy device to device, {nbytes >> 20} MiB (read + write)", "GB/s", st, 2 * nbytes, smp)
        del src, dst
        for key, dtype, iters in (("fp32", np.float32, 1 << 15), ("fp64", np.float64, 1 << 14)):
            sink = cupy.empty(_ceilings.blocks(self.device_id) * _ceilings.THREADS, dtype)
            flops = 2 * _ceilings.FMA_CHAINS * iters * sink.size
            st, smp = measure(lambda k: _ceilings.fma_throughput(dtype, iters, sink), self.budget, hold=self.hold)
            record(key, f"{np.dtype(dtype).name} FMA chains ({_ceilings.FMA_CHAINS} per thread)", "TFLOP/s",
                   st, flops, smp)
        st, smp = measure(lambda k: _ceilings.empty_launch(), self.budget, per_call=True)
        record("launch", "an empty kernel per call, back to back (host-bound: the floor of a per-call time)", "µs",
               st, None, smp)
        return out

    # ---- one row
    def _row(self, case: Case, name: str, kind: str, lesson: str, fn, sets, error_of) -> dict:
        import cupy

        row = {"op": case.op, "case": case.label, "name": name, "kind": kind, "lesson": lesson}
        work = case.flops if case.op == "matmul" else case.bytes
        key = (case.op, case.dtype, name)
        rate = self.rates.get(key)
        estimate = work / rate if rate else None
        if estimate is not None and estimate > self.budget.skip_s:
            row["skipped"] = f"~{fmt_time(estimate)} per call (estimated from a smaller size)"
            return row
        try:
            poison(sets[0]["out"])
            first = fn(sets[0])  # also the warm-up (and the compile, the first time)
            cupy.cuda.get_current_stream().synchronize()
            row["error"] = error_of(first)
            stats, samples = measure(lambda k: fn(sets[k % len(sets)]), self.budget, warm=False, hold=self.hold,
                                     per_call=_per_call(case, self.device_id), estimate=estimate)
        except Exception as exc:  # a broken variant must not stop the others
            row["failed"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            return row
        row.update(median_s=stats.median, p10_s=stats.p10, p90_s=stats.p90, n=stats.n, spread=stats.spread,
                   samples_s=samples)
        self.rates[key] = work / stats.median
        return row

    # ---- one case: every variant, the CuPy reference, and (transpose) the copy of the same bytes
    def case(self, case: Case, variants) -> list[dict]:
        import cupy

        bench = BENCHES[case.op]
        w = case.bytes
        per_call = _per_call(case, self.device_id)
        l2 = _l2_bytes(self.device_id)
        nsets = 1 if per_call and w <= l2 else max(1, min(MAX_SETS, math.ceil(2 * l2 / max(w, 1))))
        try:
            sets = [bench.make(case) for _ in range(nsets)]
            ctx = bench.check_context(case, sets[0])
        except Exception as exc:  # out of memory, say: report it and go on with the next case
            sets = ctx = None
            cupy.get_default_memory_pool().free_all_blocks()
            self._step(f"{case.label}: setup failed")
            return [{"op": case.op, "case": case.label, "name": "(inputs)", "kind": "reference", "lesson": "",
                     "failed": f"setting up the inputs: {type(exc).__name__}: {str(exc)[:160]}", "dtype": case.dtype,
                     "dims": list(case.dims), "order": case.order, "headline": False, "per_call": per_call,
                     "flops": case.flops, "bytes": case.bytes, "sets": 0}]
        rows = []
        if case.op == "transpose":
            from . import _ceilings

            def memcpy(s):
                like = s["out"].reshape(s["A"].shape)
                _ceilings.device_copy(like, s["A"])
                return like

            rows.append(self._row(case, "cudaMemcpy (copy ceiling)", "ceiling", "the same bytes, copied by the driver",
                                  memcpy, sets, lambda out: {"kind": "exact", "against": "copy of A",
                                                             "value": bool(cupy.array_equal(out, sets[0]["A"]))}))
            self._step(f"{case.label}: cudaMemcpy")
        for v in variants:
            if v.diagnostic:
                rows.append(self._row(case, v.name, "diagnostic", v.lesson, lambda s, v=v: bench.diagnostic(v, s),
                                      sets, lambda out, v=v: bench.diagnostic_error(v, sets[0], out)))
            else:
                kind = "seed" if v.seed else "fast" if v.name == "fast" else "step"
                rows.append(self._row(case, v.name, kind, v.lesson, lambda s, v=v: bench.call(v, s), sets,
                                      lambda out: bench.error(case, ctx, sets[0], out)))
            self._step(f"{case.label}: {v.name}")
        rows.append(self._row(case, bench.reference_name, "reference", "what CuPy does", bench.reference, sets,
                              lambda out: bench.error(case, ctx, sets[0], out)))
        self._step(f"{case.label}: {bench.reference_name}")
        del sets, ctx
        cupy.get_default_memory_pool().free_all_blocks()
        for r in rows:
            r.update(dtype=case.dtype, dims=list(case.dims), order=case.order, headline=case.headline,
                     per_call=per_call, flops=case.flops, bytes=case.bytes, sets=nsets)
        return rows


def _per_call(case: Case, device_id: int) -> bool:
    """Cases asked for per call, and dot products small enough to sit in L2: their time is the back-to-back
    per-call time."""
    return case.per_call or (case.op == "dot" and case.bytes <= _l2_bytes(device_id))


@functools.lru_cache(maxsize=None)
def _l2_bytes(device_id: int) -> int:
    return int(_attribute("L2CacheSize", device_id) or 50 * 2**20)


def derive(results: dict) -> None:
    """Add throughput, fraction of the ceiling, speed-up over CuPy and the error verdict to every row."""
    from ._check import tolerance

    ceilings = results["ceilings"]
    by_case: dict = {}
    for r in results["rows"]:
        by_case.setdefault((r["op"], r["case"]), []).append(r)
    for (op, _), rows in by_case.items():
        ref = next((r for r in rows if r["kind"] == "reference" and "median_s" in r), None)
        copy = next((r for r in rows if r["kind"] == "ceiling" and "median_s" in r), None)
        for r in rows:
            if "median_s" not in r:
                continue
            t = r["median_s"]
            r["gbps"] = r["bytes"] / t / 1e9
            r["tflops"] = r["flops"] / t / 1e12
            if op == "transpose":
                if r["kind"] != "ceiling":
                    if copy is not None:
                        r["ceiling"], r["fraction"] = "cudaMemcpy, same bytes", copy["median_s"] / t
                    elif "copy" in ceilings:
                        r["ceiling"], r["fraction"] = "copy", r["gbps"] / ceilings["copy"]["value"]
            elif op in ("matvec", "dot") and "read" in ceilings:
                r["ceiling"], r["fraction"] = "read", r["gbps"] / ceilings["read"]["value"]
            elif op == "matmul":
                key = "fp64" if r["dtype"] == "float64" else "fp32"
                if key in ceilings:
                    r["ceiling"], r["fraction"] = key, r["tflops"] / ceilings[key]["value"]
            if ref is not None and r["kind"] not in ("ceiling",):
                r["speedup"] = ref["median_s"] / t
            err = r.get("error") or {}
            if err.get("kind") == "rel":
                err["tol"] = tolerance(np.dtype(r["dtype"]), err.get("k", 16))
                err["ok"] = err["value"] is not None and bool(err["value"] <= err["tol"])  # NaN (null) fails
            elif err.get("kind") == "exact":
                err["ok"] = bool(err["value"])


# ---------------------------------------------------------------------------------------------------- rendering
def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def _fmt_number(x: float) -> str:
    """Three significant digits, without exponents for the usual range."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 1 else f"{x:.3g}"


def _fmt_error(r: dict) -> str:
    err = r.get("error") or {}
    if err.get("kind") == "rel":
        v = err["value"]
        text = "nan" if v is None or v != v else f"{v:.1e}"
        text += "†" if err.get("sampled_rows") else ""
        return text if err.get("ok", True) else f"[red]{text} ✗ over {err['tol']:.0e}[/]"
    if err.get("kind") == "exact":
        return "exact ✓" if err["value"] else "[red]MISMATCH ✗[/]"
    return "—"


def _notes(r: dict, dram_bytes_s=None) -> str:
    notes = []
    if dram_bytes_s and r.get("gbps") and r["op"] != "matmul" and r["gbps"] * 1e9 > dram_bytes_s:
        notes.append("above the DRAM peak: not a memory bandwidth (cache hits, or less work done)")
    if r.get("skipped"):
        notes.append(f"skipped: {escape(r['skipped'])}")
    if r.get("failed"):
        notes.append(f"[red]failed: {escape(r['failed'])}[/]")
    if r["kind"] == "diagnostic":
        notes.append(escape((r.get("error") or {}).get("note") or "diagnostic"))
    if "median_s" in r:
        if r["n"] < 3:
            notes.append(f"{r['n']} run{'s' if r['n'] > 1 else ''} (slow)")
        elif r["spread"] > WIDE_SPREAD:
            notes.append(f"wide spread {r['spread']:.0%} (p10-p90)")
    return "; ".join(notes)


def family_table(results: dict, op: str):
    from rich.table import Table

    rows = [r for r in results["rows"] if r["op"] == op]
    matmul = op == "matmul"
    per_call = any(r.get("per_call") for r in rows)
    ce = results["ceilings"]
    title = f"{op}" + {"transpose": "  (GB/s = 2 × matrix bytes / time)",
                       "matvec": "  (GB/s = bytes of A, x and y / time)",
                       "dot": "  (GB/s = bytes of a and b / time)",
                       "matmul": "  (TFLOP/s = 2·m·k·n / time)"}[op]
    table = Table(title=title, title_justify="left", show_lines=False, header_style="bold")
    table.add_column("case", no_wrap=True)
    table.add_column("variant", no_wrap=True)
    table.add_column("kind")
    table.add_column("time" + (" (per call*)" if per_call else ""), justify="right")
    table.add_column("TFLOP/s" if matmul else "GB/s", justify="right")
    table.add_column({"transpose": "% of memcpy", "matvec": "% of read", "dot": "% of read",
                      "matmul": "% of FMA peak"}[op], justify="right")
    table.add_column("× CuPy", justify="right")
    table.add_column("exact" if op == "transpose" else "rel. error" + ("†" if matmul else ""), justify="right")
    table.add_column("note")
    last = None
    for r in rows:
        if last is not None and r["case"] != last:
            table.add_section()
        timed = "median_s" in r
        time_text = fmt_time(r["median_s"]) + ("*" if r.get("per_call") else "") if timed else "—"
        rate = _fmt_number(r["tflops"] if matmul else r["gbps"]) if timed else "—"
        frac = "—" if not timed or "fraction" not in r else f"{r['fraction']:.1%}" if r["fraction"] < 0.1 else \
            f"{r['fraction']:.0%}"
        speed = f"{r['speedup']:.3g}×" if timed and "speedup" in r and r["kind"] != "reference" else "—"
        style = "bold" if r["kind"] == "fast" else "dim" if r["kind"] in ("diagnostic", "ceiling") else None
        case = escape(r["case"]) if r["case"] != last else ""
        table.add_row(case, escape(r["name"]), r["kind"], time_text, rate, frac, speed, _fmt_error(r),
                      _notes(r, results.get("device", {}).get("peak_memory_bandwidth_bytes_s")), style=style)
        last = r["case"]
    foot = []
    if per_call:
        floor = f"; an empty launch takes {ce['launch']['value']:.1f} µs" if "launch" in ce else ""
        foot.append(f"* per call: median over samples of {results['config']['batch']} back-to-back calls "
                    f"(host overhead included{floor}; inputs rotated past L2 when larger than it)")
    if op in ("matvec", "dot") and "read" in ce:
        foot.append(f"% of read: of the streaming-read ceiling, {ce['read']['value']:.0f} GB/s measured in this run")
    if op == "transpose":
        foot.append("% of memcpy: of cudaMemcpy of the same bytes (read + write) measured in this case; "
                    "exact: bitwise equal to A.T (the copy kernels: to A)")
    if matmul:
        peaks = ", ".join(f"{k.upper()} {ce[k]['value']:.1f} TFLOP/s" for k in ("fp32", "fp64") if k in ce)
        foot.append(f"% of FMA peak: of the FMA throughput measured in this run ({peaks}); "
                    "above 100% of the FP64 one means FP64 tensor cores (DMMA)")
        foot.append(f"† matmuls above 2^34 multiply-adds: error on {MATMUL_SAMPLE_ROWS} sampled rows "
                    "(A[rows] @ B in float64)")
    if op != "transpose":
        foot.append("rel. error = ‖out − ref‖ / ‖ref‖ against float64; inputs uniform in [0.5, 1.5)")
    table.caption = escape("\n".join(foot))
    table.caption_justify = "left"
    return table


def ceilings_table(results: dict):
    from rich.table import Table

    table = Table(title="ceilings measured in this run", title_justify="left", header_style="bold")
    for col, just in (("ceiling", "left"), ("measured", "right"), ("time", "right"), ("note", "left")):
        table.add_column(col, justify=just)
    for key, c in results["ceilings"].items():
        note = f"wide spread {c['spread']:.0%}" if c["n"] >= 3 and c["spread"] > WIDE_SPREAD else ""
        table.add_row(f"{key}: {escape(c['what'])}", f"{c['value']:.1f} {c['unit']}", fmt_time(c["median_s"]), note)
    bw = results.get("device", {}).get("peak_memory_bandwidth_bytes_s")
    if bw:
        table.caption = f"memory clock × bus width gives {bw / 1e9:.0f} GB/s on paper"
        table.caption_justify = "left"
    return table


# ---------------------------------------------------------------------------------------------------- roofline
def _headline_rows(results: dict, op: str) -> list[dict]:
    rows = [r for r in results["rows"] if r["op"] == op and "median_s" in r and r["kind"] != "ceiling"]
    if not rows:
        return []
    cases = {}
    for r in rows:
        cases.setdefault(r["case"], []).append(r)
    marked = [c for c, rs in cases.items() if rs[0].get("headline")]
    pick = marked[0] if marked else max(cases, key=lambda c: (len(cases[c]), cases[c][0]["bytes"]))
    return cases[pick]


def plot_roofline(results: dict, path: str) -> None:
    plt = _pyplot()
    ce = results["ceilings"]
    if "read" not in ce or "fp32" not in ce:
        raise BenchError("bench.py --plot needs the read and FP32 ceilings, which these results lack")
    bw, peak32 = ce["read"]["value"] * 1e9, ce["fp32"]["value"] * 1e12
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(16, 7.5), gridspec_kw={"width_ratios": [2.2, 1]})
    ai = np.logspace(-3, 12, 400, base=2)
    ax.loglog(ai, np.minimum(bw * ai, peak32) / 1e12, "k-", lw=2,
              label=f"read {bw / 1e9:.0f} GB/s, FP32 {peak32 / 1e12:.1f} TFLOP/s")
    if "fp64" in ce:
        peak64 = ce["fp64"]["value"] * 1e12
        ax.loglog(ai, np.minimum(bw * ai, peak64) / 1e12, "k--", lw=1, label=f"FP64 FMA {peak64 / 1e12:.1f} TFLOP/s")
    markers = {"matvec": "s", "dot": "o", "matmul": "^"}
    for op, marker in markers.items():
        rows = sorted(_headline_rows(results, op), key=lambda r: r["median_s"], reverse=True)  # slowest first
        label_at = -math.inf
        for r in rows:
            x, y = r["flops"] / r["bytes"], r["flops"] / r["median_s"] / 1e12
            color = "tab:gray" if r["kind"] == "reference" else "tab:red" if r["kind"] == "seed" else \
                "tab:green" if r["kind"] == "fast" else "tab:blue"
            ax.scatter([x], [y], marker=marker, color=color, s=40, zorder=3)
            label_at = max(math.log10(y), label_at + 0.07)  # labels of close points are pushed apart upwards
            ax.annotate(f"{op}: {r['name']}", (x, y), xytext=(x * 1.6, 10**label_at), fontsize=7, va="center",
                        arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5})
        if rows:
            ax.scatter([], [], marker=marker, color="k", label=f"{op}: {rows[0]['case']}")
    ax.set_xlabel("arithmetic intensity (FLOP / byte, fewest bytes the op must move)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"roofline, {results.get('device', {}).get('name', 'GPU')}  (red: seed, blue: step, green: fast, "
                 "grey: CuPy)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    rows = _headline_rows(results, "transpose")
    if rows:  # no arithmetic at all: placed against the copy bandwidth instead
        names = [r["name"] for r in rows]
        gbps = [r["gbps"] for r in rows]
        colors = ["tab:gray" if r["kind"] == "reference" else "tab:red" if r["kind"] == "seed" else "tab:green"
                  if r["kind"] == "fast" else "tab:olive" if r["kind"] == "diagnostic" else "tab:blue" for r in rows]
        bx.barh(range(len(rows)), gbps, color=colors)
        bx.set_yticks(range(len(rows)), names, fontsize=8)
        bx.invert_yaxis()
        copy = next((r for r in results["rows"] if r["op"] == "transpose" and r["case"] == rows[0]["case"]
                     and r["kind"] == "ceiling" and "median_s" in r), None)
        if copy is not None:
            bx.axvline(copy["gbps"], color="k", lw=2, label=f"cudaMemcpy {copy['gbps']:.0f} GB/s")
        if "read" in ce:
            bx.axvline(ce["read"]["value"], color="k", ls=":", label=f"read ceiling {ce['read']['value']:.0f} GB/s")
        bx.set_xlabel("GB/s (read + write)")
        bx.set_title(f"transpose (0 FLOP): {rows[0]['case']}\n(olive: diagnostics, not transposes)", fontsize=10)
        bx.legend(loc="lower right", fontsize=8)
        bx.grid(True, axis="x", alpha=0.3)
    else:
        bx.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BenchError("bench.py --plot needs matplotlib, which is not installed (pip install matplotlib)") from None
    return plt


# ---------------------------------------------------------------------------------------------------- main
def run(ops, quick: bool, console, budget: Budget | None = None) -> dict:
    import cupy
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import cudakit

    from . import __version__

    budget = budget or (Budget.quick() if quick else Budget())
    device_id = cupy.cuda.Device().id
    results = {"cudakit": __version__, "cupy": cupy.__version__, "device": device_facts(device_id),
               "config": {"quick": quick, "ops": list(ops), "row_s": budget.row_s, "min_runs": budget.min_runs,
                          "max_runs": budget.max_runs, "skip_s": budget.skip_s, "batch": budget.batch,
                          "wide_spread": WIDE_SPREAD},
               "ceilings": {}, "rows": []}
    plan = []
    for op in ops:
        vs = cudakit.variants(op, diagnostics=True)
        if not vs:
            console.print(f"[yellow]{op}: no cudakit variants are registered yet; skipped[/]")
            continue
        plan += [(c, [v for v in vs if v.name == "fast"] if c.fast_only else vs) for c in default_cases(op, quick)]
    total = 4 + sum(len(vs) + 1 + (c.op == "transpose") for c, vs in plan)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("ceilings", total=total)
        runner = Runner(budget, quick, device_id, on_row=lambda text: progress.update(task, advance=1,
                                                                                     description=text))
        results["ceilings"] = runner.ceilings()
        console.print(ceilings_table(results))
        for i, (case, vs) in enumerate(plan):
            progress.update(task, description=f"{case.op} {case.label}")
            results["rows"] += runner.case(case, vs)
            if i + 1 == len(plan) or plan[i + 1][0].op != case.op:
                derive(results)
                console.print(family_table(results, case.op))
    derive(results)
    return results


def _finite(x):
    """JSON without NaN/Infinity (strict parsers reject them): non-finite floats become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench.py",
        description="Time every cudakit variant against CuPy (CUDA events, median of many runs) and read each "
                    "against ceilings measured in the same run: streaming read and copy bandwidth, FMA peak.")
    p.add_argument("--quick", action="store_true", help="a small subset of the sizes (under a minute)")
    p.add_argument("--ops", default=",".join(OPS), metavar="OP[,OP...]",
                   help=f"families to run, comma-separated (default: {','.join(OPS)})")
    p.add_argument("--json", metavar="FILE", help="write every number (all samples included) to FILE")
    p.add_argument("--plot", metavar="FILE.png", help="draw a roofline of the results (needs matplotlib)")
    p.add_argument("--load", metavar="FILE.json",
                   help="measure nothing: redraw the tables (and --plot) from a saved --json file")
    p.add_argument("--row-seconds", type=float, metavar="S", help="timed seconds per row (default 0.25, quick 0.06)")
    args = p.parse_args(argv)
    ops = tuple(o.strip() for o in args.ops.split(",") if o.strip())
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        p.error(f"unknown op {', '.join(bad) or '(none)'}; valid ops: {', '.join(OPS)}")
    args.ops = tuple(o for o in OPS if o in ops)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # a log file gets the whole table on one line per row
    try:
        if args.plot:
            _pyplot()  # fail before a long run, not after it
        if args.load:
            with open(args.load) as f:
                try:
                    results = json.load(f)
                    derive(results)
                except (ValueError, KeyError, TypeError, AttributeError):
                    raise BenchError(f"bench.py --load: {args.load} is not a results file written by --json") from None
            console.print(ceilings_table(results))
            for op in OPS:
                if op in args.ops and any(r["op"] == op for r in results["rows"]):
                    console.print(family_table(results, op))
        else:
            reason = no_gpu_reason()
            if reason is not None:
                raise BenchError(f"bench.py needs a CUDA GPU, and none is usable here ({reason})")
            budget = Budget.quick() if args.quick else Budget()
            if args.row_seconds:
                budget.row_s = args.row_seconds
            results = run(args.ops, args.quick, console, budget)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(_finite(results), f, indent=1)
                console.print(f"wrote {args.json}")
        if args.plot:
            plot_roofline(results, args.plot)
            console.print(f"wrote {args.plot}")
    except BenchError as exc:
        print(f"{exc}.", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"bench.py: {exc.strerror or exc}: {exc.filename}.", file=sys.stderr)
        return 1
    return 0
