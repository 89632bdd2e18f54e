"""cudakit.stream_map and pinned_empty, and the bench's stream lesson.

Argument checks run before any CUDA call, so those tests (and the table, the plot and the command line) need no GPU.
Speed is measured by the bench, never asserted here; what is asserted is the result, the streams each step ran on
and the order of each chunk's steps, and that nothing is left running or held after an early stop or an error.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
from rich.console import Console

import cudakit
from cudakit import _check, stream
from cudakit.bench import streams as lesson
from conftest import HIDE_GPU, run_cli



def rows_of(shape, dtype=np.float32, pinned=False):
    """Fresh random host data, uniform in [0.5, 1.5), in pageable or pinned memory."""
    a = (np.random.default_rng().random(shape) + 0.5).astype(dtype)
    if not pinned:
        return a
    p = cudakit.pinned_empty(a.shape, a.dtype)
    p[...] = a
    return p


def assert_rel(out, ref64, dtype=np.float32, what="", k=16):
    """||out - ref|| / ||ref|| on the host, within cudakit's tolerance for k-term sums in dtype."""
    err = float(np.linalg.norm((np.asarray(out, np.float64) - ref64).ravel()) / np.linalg.norm(ref64.ravel()))
    tol = _check.tolerance(dtype, k)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"  # NaN (a poisoned element) fails


def sqrt_affine(x):
    import cupy

    return cupy.sqrt(x) * x.dtype.type(3) + x.dtype.type(1)


def sqrt_affine64(a):
    return np.sqrt(a.astype(np.float64)) * 3 + 1


def idle_streams() -> bool:
    return all(s.done for ss in stream._streams_by_device.values() for s in ss)


@pytest.fixture
def pinned_blocks():
    """A fresh pinned pool behind a counting allocator: yields (pool, the size of every allocation through it)."""
    import cupy

    pool = cupy.cuda.PinnedMemoryPool()
    taken = []

    def counted(size):
        taken.append(size)
        return pool.malloc(size)

    cupy.cuda.set_pinned_memory_allocator(counted)
    try:
        yield pool, taken
    finally:
        cupy.cuda.set_pinned_memory_allocator(cupy.get_default_pinned_memory_pool().malloc)


# ---------------------------------------------------------------------------------------------------- results
@pytest.mark.gpu
@pytest.mark.parametrize("streams", [1, 2, 3, 4])
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "pageable"])
@pytest.mark.parametrize("out_kind", [None, "pinned", "pageable"])
def test_results_match_each_chunk_computed_alone(streams, pinned, out_kind):
    a = rows_of((1000, 37), pinned=pinned)  # 96-row chunks: 10 full and a remainder of 40
    ref = sqrt_affine64(a)
    if out_kind is None:
        res = list(cudakit.stream_map(sqrt_affine, a, streams=streams, chunk_rows=96))
        assert [r.shape for r in res] == [(96, 37)] * 10 + [(40, 37)]
        assert all(isinstance(r, np.ndarray) and r.dtype == np.float32 for r in res)
        got = np.concatenate(res)
    else:
        out = cudakit.pinned_empty(a.shape, a.dtype) if out_kind == "pinned" else np.empty_like(a)
        out.fill(np.nan)
        got = cudakit.stream_map(sqrt_affine, a, streams=streams, chunk_rows=96, out=out)
        assert got is out
    assert_rel(got, ref, what=f"{streams} streams, pinned={pinned}, out={out_kind}")
    assert idle_streams()


@pytest.mark.gpu
def test_a_list_of_chunks_pinned_pageable_and_strided_with_a_smaller_last():
    wide = rows_of((64, 20), np.float64)
    chunks = [rows_of((64, 10), np.float64, pinned=True), rows_of((64, 10), np.float64), wide[:, ::2],
              rows_of((64, 10), np.float64), rows_of((5, 10), np.float64)]
    sums = [c.astype(np.float64).sum(axis=1) for c in chunks]
    res = list(cudakit.stream_map(lambda x: x.sum(axis=1), chunks, streams=2))
    assert [r.shape for r in res] == [(64,)] * 4 + [(5,)]
    for r, s in zip(res, sums):
        assert_rel(r, s, np.float64)
    out = np.full(4 * 64 + 5, np.nan)
    assert cudakit.stream_map(lambda x: x.sum(axis=1), iter(chunks), streams=3, out=out) is out
    assert_rel(out, np.concatenate(sums), np.float64)


@pytest.mark.gpu
def test_default_chunks_are_about_chunk_bytes_and_empty_input_gives_nothing():
    a = rows_of(10_000_000)  # 40 MB of float32
    sizes = [r.shape[0] for r in cudakit.stream_map(lambda x: x[:1] * 1, a)]
    assert len(sizes) == math.ceil(a.nbytes / stream.CHUNK_BYTES)
    assert list(cudakit.stream_map(sqrt_affine, a[:0])) == []
    empty_out = np.empty((0,), np.float32)
    assert cudakit.stream_map(sqrt_affine, a[:0], out=empty_out) is empty_out


@pytest.mark.gpu
def test_yielded_results_belong_to_the_caller():
    a = rows_of((50, 8))
    res = []
    for r in cudakit.stream_map(lambda x: x * x.dtype.type(2), a, streams=2, chunk_rows=5):
        r[...] = -1  # the caller may write its result; a reused buffer would spoil the next ones
        res.append(r)
    assert len(res) == 10 and all((r == -1).all() for r in res)
    assert not any(np.shares_memory(x, y) for i, x in enumerate(res) for y in res[i + 1:])
    again = np.concatenate(list(cudakit.stream_map(lambda x: x * x.dtype.type(2), a, streams=2, chunk_rows=5)))
    assert np.array_equal(again, a * 2)


# ---------------------------------------------------------------------------------------------------- streams
@pytest.mark.gpu
def test_fn_runs_on_the_pipeline_streams_and_cudakit_ops_follow_them():
    import cupy

    a = rows_of((900, 256), np.float64)
    v = cupy.asarray(rows_of(256, np.float64))
    caller = cupy.cuda.get_current_stream().ptr
    seen = []

    def fn(x):
        seen.append(cupy.cuda.get_current_stream().ptr)
        return cudakit.matvec(x, v)

    out = np.full(900, np.nan)
    cudakit.stream_map(fn, a, streams=3, chunk_rows=100, out=out)
    assert_rel(out, a @ cupy.asnumpy(v), np.float64, k=256)
    assert caller not in seen and len(set(seen)) == 3
    assert seen[:3] * 3 == seen  # chunk i on stream i mod 3
    assert cupy.cuda.get_current_stream().ptr == caller


@pytest.mark.gpu
def test_fn_sees_work_queued_on_the_callers_stream_before_the_call():
    import cupy

    from cudakit import _ceilings

    side = cupy.cuda.Stream(non_blocking=True)
    with side:
        w = cupy.zeros((), np.float32)
        side.synchronize()
        _ceilings.hold_stream(0.05, cupy.cuda.Device().id)  # the caller's stream is busy for a while ...
        w.fill(3)  # ... then sets what fn reads
        got = np.concatenate(list(cudakit.stream_map(lambda x: x * w, rows_of(4096), streams=3, chunk_rows=512)))
    assert (got >= 1.5).all()  # x in [0.5, 1.5), times 3; a stale w (0) would give zeros


@pytest.mark.gpu
def test_each_chunk_copies_in_computes_and_copies_out_on_its_stream_after_the_previous_copies():
    from cudakit.bench.timing import Timeline

    a = rows_of(7 * 1000, pinned=True)
    out = cudakit.pinned_empty(a.shape, a.dtype)
    tl = Timeline()
    stream.traced(tl, sqrt_affine, a, streams=3, out=out, chunk_rows=1000)
    spans = {label: (ptr, start, end) for label, ptr, start, end in tl.spans()}
    assert len(spans) == 3 * 7
    lanes = [spans[f"h2d {i}"][0] for i in range(7)]
    assert len(set(lanes[:3])) == 3 and lanes[3:] == lanes[:3] + lanes[:1]
    for i in range(7):
        h2d, fn, d2h = (spans[f"{step} {i}"] for step in ("h2d", "fn", "d2h"))
        assert h2d[0] == fn[0] == d2h[0]
        assert h2d[1] <= h2d[2] <= fn[1] <= fn[2] <= d2h[1] <= d2h[2], i
        if i:  # the copies of each direction one after another, in chunk order, across the streams
            assert spans[f"h2d {i - 1}"][2] <= h2d[1] and spans[f"d2h {i - 1}"][2] <= d2h[1], i
    assert_rel(out, sqrt_affine64(a))


# ---------------------------------------------------------------------------------------------------- buffers
@pytest.mark.gpu
def test_pinned_chunks_are_copied_in_place_and_pageable_ones_take_one_buffer_per_stream(pinned_blocks):
    pool, taken = pinned_blocks
    src = rows_of((12 * 64, 16), pinned=True)
    out = cudakit.pinned_empty(src.shape, src.dtype)
    made = len(taken)
    cudakit.stream_map(sqrt_affine, src, streams=3, chunk_rows=64, out=out)
    assert len(taken) == made  # no staging at all
    assert_rel(out, sqrt_affine64(src))
    pageable, pageable_out = np.array(src), np.empty_like(out)
    for chunk_rows in (64, 16):  # 12, then 48 chunks: the buffers are per stream, not per chunk
        made = len(taken)
        cudakit.stream_map(sqrt_affine, pageable, streams=3, chunk_rows=chunk_rows, out=pageable_out)
        assert len(taken) - made == 2 * 3  # a staging buffer in and one out per stream
        assert_rel(pageable_out, sqrt_affine64(src))


@pytest.mark.gpu
def test_an_early_break_stops_the_streams_and_releases_the_buffers(pinned_blocks):
    pool, taken = pinned_blocks
    a = rows_of((200, 100))
    results = cudakit.stream_map(sqrt_affine, a, streams=4, chunk_rows=10)
    for k, r in enumerate(results):
        if k == 1:
            break
    results.close()
    assert idle_streams()
    assert taken and pool.n_free_blocks() == len(taken)  # every buffer it took is back in the pool
    assert_rel(r, sqrt_affine64(a[10:20]))


class Boom(Exception):
    pass


@pytest.mark.gpu
@pytest.mark.parametrize("out_kind", [None, "pinned", "pageable"])
def test_an_error_in_fn_propagates_with_nothing_left_running_or_held(pinned_blocks, out_kind):
    pool, taken = pinned_blocks
    a = rows_of((300, 50))
    out = None if out_kind is None else np.empty_like(a) if out_kind == "pageable" else cudakit.pinned_empty(a.shape,
                                                                                                            a.dtype)
    made = len(taken)
    calls = []

    def fn(x):
        calls.append(x.shape)
        if len(calls) == 5:
            raise Boom("chunk 4")
        return sqrt_affine(x)

    with pytest.raises(Boom, match="chunk 4"):
        res = cudakit.stream_map(fn, a, streams=3, chunk_rows=20, out=out)
        if out is None:
            list(res)
    assert idle_streams()
    assert pool.n_free_blocks() == len(taken) - made  # released while the exception is still held


@pytest.mark.gpu
def test_a_bad_chunk_from_an_iterator_stops_cleanly(pinned_blocks):
    pool, taken = pinned_blocks

    def chunks():
        for _ in range(5):
            yield rows_of((8, 3))
        yield rows_of((8, 3), np.float64)

    with pytest.raises(ValueError, match="chunk 5 is float64"):
        list(cudakit.stream_map(sqrt_affine, chunks(), streams=2))
    assert idle_streams() and taken and pool.n_free_blocks() == len(taken)
    del taken[:]
    with pytest.raises(ValueError, match=r"chunk 2 is float32 \(9, 3\).*at most its 8 rows"):
        list(cudakit.stream_map(sqrt_affine, iter([rows_of((8, 3)), rows_of((8, 3)), rows_of((9, 3))])))
    assert idle_streams() and taken and pool.n_free_blocks() == len(taken)  # (same sizes: the pool's blocks again)


@pytest.mark.gpu
def test_results_that_do_not_fit_out_and_results_that_are_not_device_arrays():
    import cupy

    a = rows_of((40, 4))
    with pytest.raises(ValueError, match=r"shape \(10,\), which does not fit out \(40, 4\)"):
        cudakit.stream_map(lambda x: x.sum(axis=1), a, chunk_rows=10, out=np.empty((40, 4), np.float32))
    with pytest.raises(TypeError, match="result is float64, out is float32"):
        cudakit.stream_map(lambda x: x.astype(cupy.float64), a, chunk_rows=10, out=np.empty((40, 4), np.float32))
    with pytest.raises(ValueError, match="out has 50 rows, the results filled 40"):
        cudakit.stream_map(lambda x: x, a, chunk_rows=10, out=np.empty((50, 4), np.float32))
    with pytest.raises(ValueError, match=r"does not fit out \(30, 4\) at row 30"):
        cudakit.stream_map(lambda x: x, a, chunk_rows=10, out=np.empty((30, 4), np.float32))
    with pytest.raises(TypeError, match="fn must return a cupy.ndarray, got tuple"):
        list(cudakit.stream_map(lambda x: (x, x), a, chunk_rows=10))
    assert idle_streams()


@pytest.mark.gpu
def test_device_arrays_are_refused_as_input_and_out():
    import cupy

    d = cupy.ones((4, 4), np.float32)
    with pytest.raises(TypeError, match="already on the device"):
        cudakit.stream_map(sqrt_affine, d)
    with pytest.raises(TypeError, match="chunk 1 is already on the device"):
        cudakit.stream_map(sqrt_affine, [np.ones((4, 4), np.float32), d])
    with pytest.raises(TypeError, match="out must be a numpy.ndarray on the host"):
        cudakit.stream_map(sqrt_affine, np.ones((4, 4), np.float32), out=d)


@pytest.mark.gpu
def test_pinned_empty_is_pinned_numpy_memory():
    from cupy.cuda import pinned_memory

    for shape, dtype in (((3, 5), np.float32), (7, np.uint8), ((2, 0), np.float64)):
        p = cudakit.pinned_empty(shape, dtype)
        assert isinstance(p, np.ndarray) and p.dtype == dtype and p.flags.c_contiguous and p.flags.writeable
        assert p.shape == (shape if isinstance(shape, tuple) else (shape,))
        if p.size:
            p[...] = 1
            assert pinned_memory.is_memory_pinned(p.ctypes.data)
    assert not pinned_memory.is_memory_pinned(np.ones(4096).ctypes.data)


# ---------------------------------------------------------------------------------------------------- no GPU needed
def test_bad_arguments_are_refused_before_any_cuda_call():
    a = np.ones((8, 3), np.float32)
    with pytest.raises(TypeError, match="fn must be callable"):
        cudakit.stream_map(None, a)
    for bad in (0, -2):
        with pytest.raises(ValueError, match="streams must be a positive int"):
            cudakit.stream_map(abs, a, streams=bad)
    for bad in (True, 2.0, "3"):
        with pytest.raises(TypeError, match="streams must be a positive int"):
            cudakit.stream_map(abs, a, streams=bad)
    with pytest.raises(TypeError, match="chunk 1 must be a numpy.ndarray, got list"):
        cudakit.stream_map(abs, [a, [1.0, 2.0]])
    with pytest.raises(ValueError, match="chunk 1 is float64 \\(8, 3\\).*dtype \\(float32\\)"):
        cudakit.stream_map(abs, [a, a.astype(np.float64)])
    with pytest.raises(ValueError, match=r"chunk 2 is float32 \(8, 4\).*trailing shape \(3,\)"):
        cudakit.stream_map(abs, (a, a, np.ones((8, 4), np.float32)))
    with pytest.raises(ValueError, match="chunk 1 .*at most its 8 rows"):
        cudakit.stream_map(abs, [a, np.ones((9, 3), np.float32)])
    with pytest.raises(ValueError, match="0-D"):
        cudakit.stream_map(abs, np.ones(()))
    with pytest.raises(TypeError, match="dtype object"):
        cudakit.stream_map(abs, np.array([None, 1]))
    with pytest.raises(TypeError, match="numpy.ndarray or an iterable"):
        cudakit.stream_map(abs, 42)
    with pytest.raises(ValueError, match="chunk_rows splits one array"):
        cudakit.stream_map(abs, [a], chunk_rows=2)
    for bad, error in ((0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="chunk_rows must be a positive int"):
            cudakit.stream_map(abs, a, chunk_rows=bad)
    with pytest.raises(TypeError, match="out must be a numpy.ndarray, got list"):
        cudakit.stream_map(abs, a, out=[0.0] * 8)
    with pytest.raises(ValueError, match="out must be at least 1-D"):
        cudakit.stream_map(abs, a, out=np.empty(()))
    frozen = np.empty_like(a)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        cudakit.stream_map(abs, a, out=frozen)
    with pytest.raises(ValueError, match="out overlaps the input"):
        cudakit.stream_map(abs, a, out=a)
    with pytest.raises(ValueError, match="out overlaps chunk 1"):
        cudakit.stream_map(abs, [np.ones((8, 3), np.float32), a[:4]], out=a)
    with pytest.raises(TypeError, match="object"):
        cudakit.pinned_empty(3, object)
    with pytest.raises(ValueError, match="negative"):
        cudakit.pinned_empty((2, -1), np.float32)


def synthetic_entry() -> dict:
    def stats(t):
        return {"median_s": t, "p10_s": t, "p90_s": t, "n": 5, "spread": 0.0, "samples_s": [t] * 5}

    entry = {"name": "2x + 1 over float32, 1024 MiB", "goal": 0.95, "goal_streams": 3, "chunk_bytes": 16 << 20,
             "chunks": 64, "bytes_in": 1 << 30, "bytes_out": 1 << 30, "copies": stats(0.040), "compute": stats(0.001),
             "ideal_s": 0.040, "bound": "copies", "rows": []}
    for kind, times in (("pinned", (0.08, 0.05, 0.041, 0.0405)), ("pageable", (0.5, 0.4, 0.4, 0.4))):
        for n, t in zip(lesson.STREAM_COUNTS, times):
            entry["rows"].append({"streams": n, "input": kind, "exact": not (kind == "pageable" and n == 4),
                                  "of_ideal": 0.040 / t, "gbps": 2**31 / t / 1e9, **stats(t)})
    return entry


def test_the_streams_table_shows_each_row_against_the_ideal():
    console = Console(record=True, width=220, file=open(os.devnull, "w"))
    console.print(lesson.streams_table(synthetic_entry()))
    text = console.export_text()
    for phrase in ("copies alone", "compute alone", "ideal", "pinned", "pageable", "0.98", "0.10", "MISMATCH",
                   "goal ≥ 0.95 of ideal: met", "40 ms", "64 chunks of 16.0 MiB", "host-memory bound"):
        assert phrase in text, phrase
    failed = {"name": "letterbox", "failed": "RuntimeError: no"}
    console.print(lesson.streams_table(failed))
    assert "failed: RuntimeError: no" in console.export_text()


def test_the_timeline_picture_draws_from_spans(tmp_path):
    pytest.importorskip("matplotlib")
    spans1 = [(f"{k} {i}", 0, 3e-4 * (3 * i + j), 3e-4 * (3 * i + j + 1))
              for i in range(4) for j, k in enumerate(("h2d", "fn", "d2h"))]
    spans3 = [(f"{k} {i}", i % 3, 3e-4 * (i + j), 3e-4 * (i + j + 1))
              for i in range(4) for j, k in enumerate(("h2d", "fn", "d2h"))]
    path = tmp_path / "streams.png"
    lesson.draw_timelines({"panels": [{"streams": 1, "spans": spans1}, {"streams": 3, "spans": spans3}],
                           "note": "synthetic"}, str(path))
    assert path.stat().st_size > 10_000


def test_the_stream_options_without_a_gpu_or_with_the_wrong_company(tmp_path):
    res = run_cli("bench.py", "--streams", env=HIDE_GPU)
    err = res.stderr.strip()
    assert res.returncode == 1 and "Traceback" not in res.stderr and "\n" not in err, res.stderr
    assert "--streams needs a CUDA GPU" in err and err.endswith(".")
    res = run_cli("bench.py", "--plot-streams", str(tmp_path / "s.png"), "--load", "x.json", env=HIDE_GPU)
    assert res.returncode == 2 and "run on their own" in res.stderr
    out = run_cli("bench.py", "--help", env=HIDE_GPU).stdout
    assert "--streams" in out and "--plot-streams" in out


# ---------------------------------------------------------------------------------------------------- the bench
@pytest.mark.gpu
def test_the_stream_lesson_measures_checked_rows_and_draws_its_timeline(tmp_path):
    console = Console(record=True, width=220, file=open(os.devnull, "w"))
    results = lesson.measure_streams(console, quick=True, total_bytes=48 << 20)
    for entry in results["streams"]:
        assert "failed" not in entry, entry
        assert entry["ideal_s"] == max(entry["copies"]["median_s"], entry["compute"]["median_s"]) > 0
        assert [(r["input"], r["streams"]) for r in entry["rows"]] == [
            (kind, n) for kind in ("pinned", "pageable") for n in lesson.STREAM_COUNTS]
        assert all(r["exact"] and r["of_ideal"] > 0 for r in entry["rows"]), entry["rows"]
    assert "ideal" in console.export_text()
    pytest.importorskip("matplotlib")
    path = tmp_path / "streams.png"
    lesson.plot_streams(str(path), quick=True)
    assert path.stat().st_size > 10_000
