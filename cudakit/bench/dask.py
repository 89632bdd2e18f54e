"""`python bench.py --dask [--workers N]`: cudakit's ops on Dask arrays, one dask-cuda worker per GPU.

Each case runs on a LocalCUDACluster of 1 worker and of N: its operands are made on the workers (fresh random
blocks) and persisted before timing; a run is the graph's persist until every result block is in place on the
workers (nothing comes back to this process), wall time, the median of a few after a warm-up that compiles the
kernels in every worker. Every run persists the same graph once the last run's results have left the workers, so
each computes it anew (a run that cannot settle stops the bench rather than time a reused result). Beside
them, the same total work as one cudakit call on one GPU without Dask, timed with CUDA events inside a worker.
The fully chunked product also reports the bytes the workers sent each other, and every run the transport and
what moving one block between two workers cost.
"""
from __future__ import annotations

import functools
import gc
import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

FRAME = (1080, 1920, 3)
REPEATS, QUICK_REPEATS = 3, 3


@dataclass
class Case:
    op: str
    name: str
    inputs: object  # () -> {name: (shape, chunks, dtype)}
    call: object  # (**inputs) -> result(s): the same cudakit calls take the CuPy arrays (one GPU) or the Dask ones
    work: object  # ({name: shape}) -> (flops, bytes) for the rate column
    replicate: tuple = ()  # inputs every worker holds a copy of (a B that each row block needs)
    rows: tuple = ()  # inputs persisted as their rows (X[i], one 1-D array each) before timing: call gets a list
    sampled_check: bool = False  # check C = A @ B on a few of its blocks against float64 on the N workers


# ---------------------------------------------------------------------------------------------------- operands
def random_bytes(shape):
    """Random uint8 frames, drawn a few frames at a time (the draw takes 4 bytes an element)."""
    import cupy

    out = cupy.empty(shape, np.uint8)
    for i in range(0, shape[0], 16):
        part = out[i:i + 16]
        part[...] = cupy.random.randint(0, 256, part.shape, dtype=np.int32).astype(np.uint8)
    return out


# ---------------------------------------------------------------------------------------------------- the cases
def _rows(n, scale, multiple=1024):
    return max(multiple, int(n * scale) // multiple * multiple)


def cases(scale: float) -> list[Case]:
    """The issue's cases at `scale` of their sizes (1: as the issue gives them)."""
    import cudakit

    m_rows = _rows(65536, scale)
    side = _rows(32768, math.sqrt(scale))
    mv_rows = _rows(229376, scale)  # 229376 x 65536 float32: 60 GB
    frames = max(64, int(4096 * scale) // 64 * 64)
    found = [
        Case("matmul", f"rows {m_rows}x32768 @ 32768x8192 f32, B on every worker",
             lambda: {"A": ((m_rows, 32768), (m_rows // 8, 32768), np.float32),
                      "B": ((32768, 8192), (32768, 8192), np.float32)},
             lambda A, B: cudakit.matmul(A, B), lambda s: (2 * s["A"][0] * s["A"][1] * s["B"][1], 0),
             replicate=("B",)),
        Case("matmul", f"chunked {side}^2 @ {side}^2 f32, chunks {side // 4}^2",
             lambda: {"A": ((side, side), (side // 4, side // 4), np.float32),
                      "B": ((side, side), (side // 4, side // 4), np.float32)},
             lambda A, B: cudakit.matmul(A, B), lambda s: (2 * s["A"][0] * s["A"][1] * s["B"][1], 0),
             sampled_check=True),
        Case("matvec", f"20 vectors, {mv_rows}x65536 f32 ({mv_rows * 65536 * 4 / 1e9:.0f} GB) by rows",
             lambda: {"A": ((mv_rows, 65536), (mv_rows // 8, 65536), np.float32),
                      "X": ((20, 65536), (1, 65536), np.float32)},
             lambda A, X: [cudakit.matvec(A, x) for x in X],
             # (the 20 vectors persisted as 1-D arrays and copied to every worker before timing, as B is above: no
             # vector crosses between workers in a run, and every product is ready when the graph arrives, so the
             # scheduler places all 160 at once, each where its block of A is)
             lambda s: (2 * 20 * s["A"][0] * s["A"][1], 20 * s["A"][0] * s["A"][1] * 4),
             replicate=("X",), rows=("X",)),
        Case("letterbox", f"{frames} frames 1080p -> 640^2 f32 NCHW, {frames // 16} a chunk",
             lambda: {"frames": ((frames, *FRAME), (frames // 16, *FRAME), np.uint8)},
             lambda frames: cudakit.letterbox(frames, (640, 640))[0],
             lambda s: (0, math.prod(s["frames"]) + s["frames"][0] * 640 * 640 * 3 * 4)),  # (as bench/resize)
        Case("transpose", f"{side}^2 f32, chunks {side // 4}^2",
             lambda: {"a": ((side, side), (side // 4, side // 4), np.float32)},
             lambda a: cudakit.transpose(a), lambda s: (0, 2 * 4 * s["a"][0] * s["a"][1])),
        Case("dot", f"2^{int(math.log2(_rows(2**30, scale)))} f32, 8 chunks",
             lambda: {"a": ((_rows(2**30, scale),), (_rows(2**30, scale) // 8,), np.float32),
                      "b": ((_rows(2**30, scale),), (_rows(2**30, scale) // 8,), np.float32)},
             lambda a, b: cudakit.dot(a, b), lambda s: (0, 2 * 4 * s["a"][0])),
    ]
    return found


def _device_array(shape, dtype):
    from cudakit.testing import random_array

    return random_bytes(shape) if np.dtype(dtype) == np.uint8 else random_array(shape, dtype)


# ---------------------------------------------------------------------------------------------------- timing
def single_gpu_seconds(index: int, scale: float, row_s: float) -> float:
    """Run in a worker: case `index`'s whole work as cudakit calls on this GPU, without Dask (CUDA events)."""
    import cupy

    from .timing import Budget, measure

    case = cases(scale)[index]
    arrays = {name: _device_array(shape, dtype) for name, (shape, _, dtype) in case.inputs().items()}
    budget = Budget()
    budget.row_s, budget.min_runs = row_s, 3
    stats, _ = measure(lambda k: case.call(**arrays), budget, busy=False)
    arrays.clear()
    cupy.get_default_memory_pool().free_all_blocks()
    return stats.median


def placed(client, shape, chunks, dtype, make):
    """A Dask array whose blocks are made by make(block shape) on the workers in turn (block i, in C order, on worker
    i mod W), so that each worker holds an equal share (where each task then runs is the scheduler's choice)."""
    import cupy
    import dask.array as da
    from dask import delayed

    workers = sorted(client.scheduler_info()["workers"])
    chunks = da.core.normalize_chunks(chunks, shape)
    order = {idx: i for i, idx in enumerate(itertools.product(*(range(len(c)) for c in chunks)))}

    def nested(idx: tuple):
        if len(idx) == len(shape):
            block = tuple(c[j] for c, j in zip(chunks, idx))
            future = client.submit(make, block, pure=False, workers=[workers[order[idx] % len(workers)]])
            return da.from_delayed(delayed(future), block, dtype=dtype, meta=cupy.empty((0,) * len(shape), dtype))
        return [nested(idx + (j,)) for j in range(len(chunks[len(idx)]))]

    return da.block(nested(()))


def persisted_inputs(client, case: Case) -> dict:
    """The case's operands as Dask arrays of random blocks made on the workers in turn and kept there, replicated
    where asked."""
    from distributed import futures_of, wait

    arrays = {}
    for name, (shape, chunks, dtype) in case.inputs().items():
        arrays[name] = client.persist(placed(client, shape, chunks, dtype, functools.partial(_device_array,
                                                                                            dtype=dtype)))
        wait(arrays[name])
        if name in case.rows:  # (the getitem tasks of X[i] run here, not in the timed graph)
            arrays[name] = client.persist([arrays[name][i] for i in range(shape[0])])
            wait(arrays[name])
        if name in case.replicate:
            client.replicate(futures_of(arrays[name]))
    return arrays


def graph_floor(client, repeats: int) -> float:
    """Wall seconds of the smallest graph a run can be: one no-op task per worker, persisted and waited for as
    time_graph does (Dask's own latency, under every row)."""
    import dask.array as da

    count = len(client.scheduler_info()["workers"])
    empty = placed(client, (count,), (1,), np.float32, functools.partial(_device_array, dtype=np.float32))
    inputs = {"empty": client.persist(empty)}
    return float(np.median(time_graph(client, da.map_blocks(_same, inputs["empty"]), inputs, repeats)[0]))


def _same(x):
    return x


def time_graph(client, graph, inputs: dict, repeats: int) -> tuple[list[float], dict]:
    """Wall seconds from persisting `graph` until every result block is in place on the workers (and every worker's
    GPU idle: SynchronizeWhenIdle), `repeats` times after a warm-up (the kernels compile in every worker). Each run's
    results are released, and gone from the workers, before the next persists the same graph, so every run computes
    it anew. Also returns the last run's tasks per worker: their count and when the first began and the last ended
    (seconds from the persist), from the scheduler's task stream."""
    from distributed import futures_of, get_task_stream, wait

    graphs = graph if isinstance(graph, list) else [graph]
    seconds = []
    for rep in range(repeats + 1):
        with get_task_stream(client) as stream:
            start = time.time()
            t0 = time.perf_counter()
            done = client.persist(graphs)
            wait(done)
            if rep:
                seconds.append(time.perf_counter() - t0)
        keys = {f.key for f in futures_of(done)}
        del done
        settle(client, keys)
    return seconds, task_spans(stream.data, start)


def task_spans(tasks: list[dict], start: float) -> dict:
    """{worker: [tasks, first start, last stop]}, times in seconds from `start` (the scheduler's task stream)."""
    spans = {}
    for task in tasks:
        compute = [s for s in task["startstops"] if s["action"] == "compute"]
        if not compute:
            continue
        span = spans.setdefault(task["worker"], [0, math.inf, -math.inf])
        span[0] += 1
        span[1] = min(span[1], compute[0]["start"] - start)
        span[2] = max(span[2], compute[-1]["stop"] - start)
    return spans


def settle(client, keys: set, timeout: float = 30.0) -> None:
    """Wait until no worker holds any of `keys`: released blocks leave the GPUs before the next run needs room."""
    gc.collect()  # (a lazy array in a reference cycle would keep its futures)
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        held = client.run(lambda dask_worker: list(dask_worker.data.keys()))
        if not any(k in keys for names in held.values() for k in names):
            return
        time.sleep(0.05)
    raise RuntimeError(f"bench --dask: released results still on the workers after {timeout:.0f} s")


def keys_of(*collections) -> set:
    from distributed import futures_of

    return {f.key for x in collections for f in futures_of(x)}


def _synchronize() -> None:
    import cupy

    cupy.cuda.runtime.deviceSynchronize()


def sent_bytes(client) -> int:
    """Bytes the workers have sent each other so far."""
    return sum(client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total).values())


def _nbytes(x) -> int:
    return int(x.nbytes)


def block_move_seconds(client, nbytes: int = 1 << 28) -> float | None:
    """Seconds to move one block of nbytes between two workers: a task that reads the block on the other worker,
    less the same task on the worker that holds it (the median of 3 each)."""
    from distributed import futures_of, wait

    workers = sorted(client.scheduler_info()["workers"])
    if len(workers) < 2:
        return None
    draw = functools.partial(_device_array, dtype=np.float32)
    spans = {}
    for where in (workers[:1], workers[1:2]):
        runs = []
        for rep in range(4):
            block = client.persist(placed(client, (nbytes // 4,), (nbytes // 4,), np.float32, draw))  # on workers[0]
            wait(block)
            client.run(_synchronize)  # (the block's random draw done before either read)
            t0 = time.perf_counter()
            client.submit(_nbytes, futures_of(block)[0], workers=where, pure=False).result()
            if rep:
                runs.append(time.perf_counter() - t0)
            keys = keys_of(block)
            del block
            settle(client, keys)
        spans[where[0]] = float(np.median(runs))
    move = spans[workers[1]] - spans[workers[0]]
    return move if move > 0 else None  # (lost in the noise of the two reads)


def _free_pool() -> None:
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()


# ---------------------------------------------------------------------------------------------------- the run
def start_cluster(workers: int, protocol: str):
    from dask_cuda import LocalCUDACluster
    from distributed import Client

    from ._dask_plugin import SynchronizeWhenIdle

    kwargs = {"enable_nvlink": True} if protocol == "ucx" else {}
    cluster = LocalCUDACluster(n_workers=workers, protocol=protocol, **kwargs)
    client = Client(cluster)
    client.register_plugin(SynchronizeWhenIdle())  # (a module of its own: it needs distributed when imported)
    return cluster, client


def run_dask(workers: int | None, protocol: str, quick: bool, console, ops=None) -> dict:
    """The --dask run: every case (or those of `ops`, letterbox being resize's) on 1 worker, then on `workers`."""
    import dask
    from dask_cuda.utils import get_n_gpus

    from .dask_answers import matvec_past_one_gpu, sampled_error

    gpus = get_n_gpus()
    workers = workers or gpus
    if workers > gpus:
        raise ValueError(f"--workers {workers}: this machine has {gpus} GPU(s)")
    scale, repeats, row_s = (1 / 16, QUICK_REPEATS, 0.1) if quick else (1.0, REPEATS, 0.5)
    # no work stealing: the blocks are placed evenly, and a stolen task would move its block between workers
    dask.config.set({"distributed.comm.timeouts.connect": "60s", "distributed.scheduler.work-stealing": False})
    results = {"workers": workers, "gpus": gpus, "protocol": protocol, "scale": scale, "rows": []}
    rows = {i: {"op": c.op, "case": c.name, "work": c.work({k: v[0] for k, v in c.inputs().items()})}
            for i, c in enumerate(cases(scale))}
    for count in sorted({1, workers}):
        cluster, client = start_cluster(count, protocol)
        try:
            info = client.run(lambda dask_worker: __import__("cupy").cuda.Device().mem_info[1])
            gpu_bytes = min(info.values())
            results["gpu_bytes"] = gpu_bytes
            if count > 1:
                results["block_move_s"] = block_move_seconds(client)
            results[f"floor{count}_s"] = graph_floor(client, repeats)
            for i, case in enumerate(cases(scale)):
                if ops is not None and {"letterbox": "resize"}.get(case.op, case.op) not in ops:
                    continue
                if count == 1:  # the same work without Dask, on the only worker's GPU (before its operands exist)
                    rows[i]["single_s"] = client.submit(single_gpu_seconds, i, scale, row_s, pure=False).result()
                # client.replicate's copies last only while the Active Memory Manager is off (its ReduceReplicas
                # drops every copy no task waits for, every 2 s)
                if case.replicate:
                    client.amm.stop()
                inputs = persisted_inputs(client, case)
                before = sent_bytes(client)
                seconds, spans = time_graph(client, case.call(**inputs), inputs, repeats)
                rows[i][f"dask{count}_s"] = float(np.median(seconds))
                rows[i][f"dask{count}_tasks"] = spans
                rows[i][f"dask{count}_samples"] = seconds
                rows[i][f"dask{count}_sent_per_run"] = (sent_bytes(client) - before) / (repeats + 1)
                # the bandwidth the scheduler weighs a block's move by, against a busy worker's queue
                rows[i][f"dask{count}_scheduler_bandwidth"] = client.run_on_scheduler(
                    lambda dask_scheduler: dask_scheduler.bandwidth)
                if case.sampled_check and count == workers:
                    rows[i]["answer"] = sampled_error(lambda xs: client.compute(xs, sync=True), inputs["A"],
                                                      inputs["B"], case.call(**inputs))
                keys = keys_of(*inputs.values())
                del inputs
                settle(client, keys)
                if case.replicate:
                    client.amm.start()
                client.run(_free_pool)  # (the next case's blocks have other sizes: room for them, unfragmented)
                console.print(f"{case.op} {case.name}: {count} worker(s) {rows[i][f'dask{count}_s'] * 1e3:.1f} ms")
            if count > 1 and not quick and (ops is None or "matvec" in ops):
                try:
                    results["past_one_gpu"] = matvec_past_one_gpu(client, gpu_bytes, count)
                except Exception as error:  # (reported with the rest of the run rather than losing it)
                    results["past_one_gpu"] = {"failed": f"{type(error).__name__}: {str(error)[:300]}"}
        finally:
            client.close()
            cluster.close()
    results["rows"] = [r for r in rows.values() if "dask1_s" in r]  # (the cases run: --ops may pick some)
    return results


def dask_table(results: dict):
    from rich.table import Table

    n = results["workers"]
    move = results.get("block_move_s")
    caption = (f"transport {results['protocol']}; moving a 256 MiB block between two workers: "
               + (f"{move * 1e3:.1f} ms ({(1 << 28) / move / 1e9:.1f} GB/s)" if move
                  else "(one worker)" if n == 1 else "(below the noise of the two reads)")
               + f"; Dask's floor (a no-op task per worker, persisted and waited for): "
               f"{_ms(results.get('floor1_s'))} on 1 worker, {_ms(results.get(f'floor{n}_s'))} on {n}")
    table = Table(title=f"cudakit on Dask: 1 worker and {n} (one GPU each), against one GPU without Dask",
                  caption=caption)
    for col in ("op", "case", "1 worker", f"{n} workers", "speed-up", "1 GPU, no Dask", f"of {n}x one GPU",
                "rate", "sent between workers"):
        table.add_column(col, justify="left" if col in ("op", "case") else "right")
    for r in results["rows"]:
        one, many, single = r.get("dask1_s"), r.get(f"dask{n}_s"), r.get("single_s")
        flops, nbytes = r["work"]
        rate = (f"{flops / many / 1e12:.1f} TFLOP/s" if flops else f"{nbytes / many / 1e9:.0f} GB/s") if many else "-"
        sent = r.get(f"dask{n}_sent_per_run") if n > 1 else None
        table.add_row(r["op"], r["case"], _ms(one), _ms(many), f"{one / many:.2f}x" if one and many else "-",
                      _ms(single), f"{single / (n * many):.2f}" if single and many else "-", rate,
                      f"{sent / 1e9:.2f} GB" if sent is not None else "-")
    return table


def _ms(s) -> str:
    return f"{s * 1e3:.1f} ms" if s else "-"


def task_lines(results: dict) -> list[str]:
    """Where each row's last run on N workers spent its time: per worker, its tasks and the time from the first's
    start to the last's end (the scheduler's task stream; a run's wall time also holds Dask's latency and the last
    synchronisation)."""
    n = results["workers"]
    lines = []
    for r in results["rows"]:
        spans = r.get(f"dask{n}_tasks")
        if spans:
            parts = [f"{count} tasks over {(last - first) * 1e3:.1f} ms" for count, first, last in spans.values()]
            lines.append(f"{r['op']} {r['case']}, last run on {n} workers: " + "; ".join(parts))
    return lines
