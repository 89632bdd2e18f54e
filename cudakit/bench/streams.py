"""The stream lesson of seed 002 (several streams hide the copies and the kernels' latency), measured and drawn.

Each workload runs cudakit.stream_map over host chunks with 1, 2, 3 and 4 streams, from pinned and from pageable
memory (out= of the same kind), and is read against the ideal overlap timed in the same run: the longer of
  copies alone   every chunk in and every result out, the two directions at once on two streams, no compute
  compute alone  fn over the chunks already on the device, back to back.
The stream_map rows are wall time around the whole call (it returns when every result is on the host); the ideal's
two parts are CUDA-event times from the one timer. Every row's result is compared exactly with fn's results on the
device, copied back once.

`--plot-streams` draws one run with 1 stream and one with 3 as lanes of copies and kernels, timed by events.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import numpy as np

from .timing import Budget, measure, summarize, Timeline

STREAM_COUNTS = (1, 2, 3, 4)
TOTAL_BYTES = 1 << 30
QUICK_TOTAL_BYTES = 1 << 28
FRAME = (1080, 1920, 3)  # a 1080p frame, HWC uint8
LETTERBOX_SIZE = (640, 640)
GOAL_STREAMS = 3  # the row a workload's goal is read on (pinned input)
PLOT_STREAMS = (1, 3)
PLOT_CHUNKS = 10


@dataclass
class Workload:
    name: str
    fn: object  # CuPy array -> CuPy array
    src: np.ndarray  # the input, in pinned memory
    chunk_rows: int
    goal: float | None = None  # fraction of the ideal the 3-stream pinned row aims at


@functools.lru_cache(maxsize=None)
def _elementwise(params: str, result: str, body: str, name: str):
    import cupy

    return cupy.ElementwiseKernel(params, result, body, name)


def multiply_add(x):
    """y = 2x + 1: one read and one write per element, the lightest work a chunk can carry."""
    return _elementwise("T x", "T y", "y = x * (T)2 + (T)1", "cudakit_bench_multiply_add")(x)


def multiply_add_chain(x, n: int):
    """n dependent multiply-adds per element: a kernel whose length is set by n (the timeline's kernel)."""
    import numpy

    body = "T v = x; for (int i = 0; i < n; ++i) v = v * (T)0.999 + (T)0.001; y = v;"
    return _elementwise("T x, int32 n", "T y", body, "cudakit_bench_multiply_add_chain")(x, numpy.int32(n))


def _fill_random(dst: np.ndarray) -> np.ndarray:
    """Fresh random data (cudakit.testing's draw) into a pinned array, made on the device a slab at a time."""
    from ..testing import random_array

    row_bytes = max(1, dst.nbytes // max(dst.shape[0], 1))
    step = max(1, (64 << 20) // row_bytes)
    for lo in range(0, dst.shape[0], step):
        part = dst[lo:lo + step]
        random_array(part.shape, dst.dtype).get(out=part)
    return dst


def workloads(total_bytes: int):
    """2x + 1 over float32, then letterbox over 1080p frames where cudakit has letterbox (one at a time: each holds
    its input in pinned memory)."""
    import cudakit
    from ..stream import CHUNK_BYTES, pinned_empty

    n = total_bytes // 4
    yield Workload(f"2x + 1 over float32, {total_bytes >> 20} MiB", multiply_add,
                   _fill_random(pinned_empty((n,), np.float32)), CHUNK_BYTES // 4, goal=0.95)
    if hasattr(cudakit, "letterbox"):
        frame_bytes = math.prod(FRAME)
        frames = max(1, total_bytes // frame_bytes)
        yield Workload(f"letterbox of {frames} 1080p frames to {LETTERBOX_SIZE[0]}×{LETTERBOX_SIZE[1]}",
                       lambda x: cudakit.letterbox(x, size=LETTERBOX_SIZE)[0],
                       _fill_random(pinned_empty((frames,) + FRAME, np.uint8)), max(1, CHUNK_BYTES // frame_bytes),
                       goal=0.9)


def _stats(stats, samples) -> dict:
    return {"median_s": stats.median, "p10_s": stats.p10, "p90_s": stats.p90, "n": stats.n, "spread": stats.spread,
            "samples_s": list(samples)}


def _bounds(rows: int, step: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + step, rows)) for lo in range(0, rows, step)]


def measure_ideal(w: Workload, budget: Budget) -> tuple[dict, np.ndarray]:
    """(the ideal's parts, the reference result): fn on every chunk on the device, and the copies alone."""
    import cupy

    from ..stream import pinned_empty

    bounds = _bounds(w.src.shape[0], w.chunk_rows)
    dev = cupy.asarray(w.src)
    chunks = [dev[lo:hi] for lo, hi in bounds]
    results = [w.fn(c) for c in chunks]
    out_rows = [r.shape[0] for r in results]
    reference = np.empty((sum(out_rows),) + results[0].shape[1:], results[0].dtype)
    row = 0
    for r in results:
        r.get(out=reference[row:row + r.shape[0]])
        row += r.shape[0]
    del results
    compute = measure(lambda k: [w.fn(c) for c in chunks], budget)
    del chunks, dev

    # The copies alone: every chunk in on one stream while every result goes out on another.
    dst = pinned_empty(reference.shape, reference.dtype)
    in_row, out_row = w.src.nbytes // w.src.shape[0], reference.nbytes // max(reference.shape[0], 1)
    dev_in = [cupy.empty((w.chunk_rows,) + w.src.shape[1:], w.src.dtype) for _ in range(2)]
    dev_out = cupy.empty(max(out_rows) * out_row, cupy.uint8)
    up, down = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    src_ptr, dst_ptr = w.src.ctypes.data, dst.ctypes.data

    def copies(k):
        current = cupy.cuda.get_current_stream()
        start = current.record()
        up.wait_event(start)
        down.wait_event(start)
        for j, (lo, hi) in enumerate(bounds):
            dev_in[j % 2].data.copy_from_host_async(src_ptr + lo * in_row, (hi - lo) * in_row, up)
        row = 0
        for rows in out_rows:
            dev_out.data.copy_to_host_async(dst_ptr + row * out_row, rows * out_row, down)
            row += rows
        current.wait_event(up.record())
        current.wait_event(down.record())

    copied = measure(copies, budget)
    ideal = {"chunks": len(bounds), "bytes_in": w.src.nbytes, "bytes_out": reference.nbytes,
             "compute": _stats(*compute), "copies": _stats(*copied)}
    ideal["ideal_s"] = max(ideal["compute"]["median_s"], ideal["copies"]["median_s"])
    ideal["bound"] = "copies" if ideal["copies"]["median_s"] >= ideal["compute"]["median_s"] else "compute"
    return ideal, reference


def time_stream_map(w: Workload, src: np.ndarray, out: np.ndarray, reference: np.ndarray, streams: int,
                    runs: int) -> dict:
    """One row: a checked warm-up call (first-round buffers), then `runs` calls timed on the host clock: the call
    returns when every result is in out, so its wall time is the time a caller waits."""
    from ..stream import stream_map
    from ..testing import poison

    poison(out)
    stream_map(w.fn, src, streams=streams, out=out, chunk_rows=w.chunk_rows)
    exact = bool(np.array_equal(out, reference))
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        stream_map(w.fn, src, streams=streams, out=out, chunk_rows=w.chunk_rows)
        samples.append(time.perf_counter() - t0)
    return {"streams": streams, "exact": exact, **_stats(summarize(samples), samples)}


def run_workload(w: Workload, budget: Budget, runs: int) -> dict:
    from ..stream import pinned_empty

    entry = {"name": w.name, "goal": w.goal, "goal_streams": GOAL_STREAMS, "chunk_bytes": w.src[:w.chunk_rows].nbytes}
    ideal, reference = measure_ideal(w, budget)
    entry.update(ideal)
    rows = []
    for kind in ("pinned", "pageable"):
        src = w.src if kind == "pinned" else np.array(w.src)
        out = pinned_empty(reference.shape, reference.dtype) if kind == "pinned" else np.empty_like(reference)
        for n in STREAM_COUNTS:
            row = time_stream_map(w, src, out, reference, n, runs)
            row.update(input=kind, of_ideal=entry["ideal_s"] / row["median_s"],
                       gbps=(entry["bytes_in"] + entry["bytes_out"]) / row["median_s"] / 1e9)
            rows.append(row)
        del src, out
    entry["rows"] = rows
    return entry


def measure_streams(console, quick: bool = False, total_bytes: int | None = None) -> dict:
    """Every workload's rows, each table printed as it completes; the results as a plain dict."""
    import cupy

    import cudakit

    from .device import device_facts

    budget = Budget.quick() if quick else Budget()
    runs = 3 if quick else 5
    total = total_bytes or (QUICK_TOTAL_BYTES if quick else TOTAL_BYTES)
    results = {"cudakit": cudakit.__version__, "cupy": cupy.__version__,
               "device": device_facts(cupy.cuda.Device().id), "streams": []}
    for w in workloads(total):
        try:
            entry = run_workload(w, budget, runs)
        except Exception as exc:  # a workload that cannot run (out of memory, a failing op) must not stop the rest
            text = str(exc).splitlines()[0][:160] if str(exc) else ""
            entry = {"name": w.name, "failed": f"{type(exc).__name__}: {text}"}
        del w
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()  # GiBs of locked pages, back to the system
        results["streams"].append(entry)
        console.print(streams_table(entry))
    return results


# ---------------------------------------------------------------------------------------------------- the table
def streams_table(entry: dict):
    from rich.markup import escape
    from rich.table import Table

    from .runner import fmt_time

    table = Table(title=f"stream_map: {escape(entry['name'])}", title_justify="left", header_style="bold")
    for col, just in (("input", "left"), ("streams", "right"), ("time", "right"), ("GB/s in + out", "right"),
                      ("of ideal", "right"), ("check", "left"), ("note", "left")):
        table.add_column(col, justify=just)
    if "failed" in entry:
        table.add_row("—", "—", "—", "—", "—", "—", f"[red]failed: {escape(entry['failed'])}[/]")
        return table
    moved = entry["bytes_in"] + entry["bytes_out"]
    copies, compute = entry["copies"]["median_s"], entry["compute"]["median_s"]
    table.add_row("copies alone", "2", fmt_time(copies), f"{moved / copies / 1e9:.1f}", "", "",
                  "in and out at once on two streams, no compute", style="dim")
    table.add_row("compute alone", "1", fmt_time(compute), "", "", "", "fn over the chunks already on the device",
                  style="dim")
    table.add_row("ideal", "", fmt_time(entry["ideal_s"]), f"{moved / entry['ideal_s'] / 1e9:.1f}", "1.00", "",
                  f"the longer of the two ({entry['bound']})", style="dim")
    last = None
    for r in entry["rows"]:
        if r["input"] != last:
            table.add_section()
        notes = []
        if entry.get("goal") and r["input"] == "pinned" and r["streams"] == entry["goal_streams"]:
            met = r["of_ideal"] >= entry["goal"]
            notes.append(f"goal ≥ {entry['goal']:.2f} of ideal: " + ("met" if met else "[red]missed[/]"))
        if r["n"] >= 3 and r["spread"] > 0.10:
            notes.append(f"wide spread {r['spread']:.0%} (p10-p90)")
        table.add_row(r["input"] if r["input"] != last else "", str(r["streams"]), fmt_time(r["median_s"]),
                      f"{r['gbps']:.1f}", f"{r['of_ideal']:.2f}", "exact ✓" if r["exact"] else "[red]MISMATCH ✗[/]",
                      "; ".join(notes), style="bold" if r["input"] == "pinned" and r["streams"] == 3 else None)
        last = r["input"]
    table.caption = (
        f"{entry['chunks']} chunks of {entry['chunk_bytes'] / 2**20:.1f} MiB; {entry['bytes_in'] / 2**20:.0f} MiB in, "
        f"{entry['bytes_out'] / 2**20:.0f} MiB out. Time: the whole stream_map call (median of runs, wall clock); "
        f"of ideal = ideal time / time.\nPageable rows go through the host's own copies (each chunk into a pinned "
        f"staging buffer, each result out of one) on the calling thread: host-memory bound.")
    table.caption_justify = "left"
    return table


# ---------------------------------------------------------------------------------------------------- the timeline
def _chain_length(chunk: np.ndarray) -> int:
    """The multiply-add chain length that makes one chunk's kernel take about as long as its copy in."""
    import cupy

    budget = Budget(row_s=0.05, min_runs=3, max_runs=50)
    dev = cupy.asarray(chunk)
    copy_in, _ = measure(lambda k: dev.data.copy_from_host_async(chunk.ctypes.data, chunk.nbytes), budget)
    trial = 64
    kernel, _ = measure(lambda k: multiply_add_chain(dev, trial), budget)
    return int(min(1 << 16, max(1, round(trial * copy_in.median / kernel.median))))


def capture_timelines(quick: bool = False) -> dict:
    """One traced stream_map per count of PLOT_STREAMS over the same pinned chunks: spans per stream lane."""
    import cupy

    from ..stream import CHUNK_BYTES, pinned_empty, stream_map, traced

    rows = (CHUNK_BYTES // (2 if quick else 1)) // 4
    src = _fill_random(pinned_empty((PLOT_CHUNKS * rows,), np.float32))
    out = pinned_empty(src.shape, src.dtype)
    chain = _chain_length(src[:rows])

    def fn(x):
        return multiply_add_chain(x, chain)

    panels = []
    for n in PLOT_STREAMS:
        stream_map(fn, src, streams=n, out=out, chunk_rows=rows)  # warm-up: first-round buffers
        cupy.cuda.Device().synchronize()
        tl = Timeline()
        traced(tl, fn, src, streams=n, out=out, chunk_rows=rows)
        lanes: dict = {}
        spans = [(label, lanes.setdefault(ptr, len(lanes)), start, end) for label, ptr, start, end in tl.spans()]
        panels.append({"streams": n, "spans": spans})
    note = (f"{PLOT_CHUNKS} pinned chunks of {rows * 4 / 2**20:.0f} MiB float32; the kernel: {chain} dependent "
            f"multiply-adds per element, about one chunk's copy in")
    return {"panels": panels, "note": note}


def draw_timelines(data: dict, path: str) -> None:
    """Each panel a run, each stream a lane, copies in, kernels and copies out as spans (ms from the first)."""
    from matplotlib.patches import Patch

    from .roofline import pyplot

    plt = pyplot()
    colors = {"h2d": "#4c72b0", "fn": "#55a868", "d2h": "#dd8452"}
    names = {"h2d": "copy in (host to device)", "fn": "kernel (fn)", "d2h": "copy out (device to host)"}
    panels = data["panels"]
    heights = [max(1 + lane for _, lane, _, _ in p["spans"]) if p["spans"] else 1 for p in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(14, 1.6 + 0.7 * sum(heights) + 0.6 * len(panels)),
                             sharex=True, gridspec_kw={"height_ratios": heights}, squeeze=False)
    origin = [min((s for _, _, s, _ in p["spans"]), default=0.0) for p in panels]
    for ax, p, t0, lanes in zip(axes[:, 0], panels, origin, heights):
        end = 0.0
        for label, lane, start, stop in p["spans"]:
            kind, _, index = label.partition(" ")
            x, w = (start - t0) * 1e3, (stop - start) * 1e3
            ax.broken_barh([(x, w)], (lane - 0.38, 0.76), color=colors.get(kind, "grey"))
            ax.text(x + w / 2, lane, index, ha="center", va="center", fontsize=6, color="white", clip_on=True)
            end = max(end, stop - t0)
        ax.set_yticks(range(lanes))
        ax.set_yticklabels([f"stream {k}" for k in range(lanes)])
        ax.set_ylim(lanes - 0.5, -0.5)
        ax.set_title(f"{p['streams']} stream{'s' if p['streams'] > 1 else ''}: {end * 1e3:.2f} ms", loc="left")
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ms from the first copy (CUDA events around each step)")
    axes[-1, 0].legend(handles=[Patch(color=colors[k], label=names[k]) for k in colors], loc="lower right",
                       fontsize=8)
    fig.suptitle(data.get("note", ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_streams(path: str, quick: bool = False) -> None:
    draw_timelines(capture_timelines(quick), path)
