"""cudakit's ops on Dask arrays (cudakit/dask.py).

GPU-less (CI): the graphs, built over NumPy chunks with NumPy stand-ins for the kernels, against NumPy's result on
the whole arrays (how blocks are cut, paired, broadcast and summed); laziness; the errors; `import cudakit`
importing no Dask. On the GPU: the real kernels on every block, on a dask-cuda LocalCUDACluster where dask-cuda is
installed (one worker per GPU), else Dask's threads, against a float64 reference and the same op on one GPU.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

da = pytest.importorskip("dask.array", reason="Dask is not installed (pip install cudakit[dask])")
import dask  # noqa: E402

import cudakit  # noqa: E402
from cudakit import dask as ck_dask  # noqa: E402

from conftest import HIDE_GPU, ROOT, assert_close, random_array, run_cli  # noqa: E402

rng = np.random.default_rng()


# ---------------------------------------------------------------------------------------------------- GPU-less
@pytest.fixture
def numpy_ops(monkeypatch):
    """cudakit.dask over NumPy chunks, with NumPy stand-ins for the ops that count their calls."""
    class Calls(list):  # the ops' names in call order, and .shapes: each call's argument shapes
        shapes: list

    calls = Calls()
    calls.shapes = []

    def counted(fn):
        def op(*args, variant="fast", check=None, tf32=None, **kwargs):
            calls.append(fn.__name__)
            calls.shapes.append(tuple(a.shape for a in args))
            return fn(*args, **kwargs)
        op.__name__ = fn.__name__
        return op

    def in_float32(fn):  # a 16-bit product as the kernels make it: float32 sums, rounded once to the dtype
        def op(*args):
            if args[0].dtype.itemsize != 2:
                return fn(*args)
            return fn(*(a.astype(np.float32) for a in args)).astype(args[0].dtype)
        op.__name__ = fn.__name__
        return op

    @in_float32
    def matmul(a, b):
        return np.matmul(a, b)

    @in_float32
    def matvec(a, x):
        return np.matmul(a, x[..., None])[..., 0]

    @in_float32
    def dot(a, b):
        return np.asarray(np.dot(a, b))

    def transpose(a, axes=None):
        return np.ascontiguousarray(np.transpose(a, axes))

    monkeypatch.setattr(ck_dask, "xp", np)
    for fn in (matmul, matvec, dot, transpose):
        monkeypatch.setattr(cudakit, fn.__name__, counted(fn))
    with dask.config.set(scheduler="sync"):
        yield calls


def chunked(shape, chunks):
    return da.from_array(rng.random(shape), chunks=chunks)


@pytest.mark.parametrize("a_shape, a_chunks, b_shape, b_chunks", [
    ((60, 50), (16, 50), (50, 30), (50, 7)),          # k whole: one product per block of C
    ((50,), (20,), (50,), (25,)),                     # 1-D @ 1-D: a 0-d result
    ((60, 50), (16, 20), (50, 30), (20, 7)),          # k chunked alike
    ((60, 50), (16, 20), (50, 30), (13, 30)),         # k chunked differently: rechunked to common chunks
    ((50,), (20,), (50, 30), (20, 10)),               # 1-D A: a row, its axis left out
    ((60, 50), (16, 20), (50,), (25,)),               # 1-D B: a column
    ((4, 1, 20, 30), (2, 1, 8, 10), (3, 30, 10), (1, 10, 5)),  # batch axes broadcast
])
def test_matmul_graph_matches_numpy(numpy_ops, a_shape, a_chunks, b_shape, b_chunks):
    A, B = chunked(a_shape, a_chunks), chunked(b_shape, b_chunks)
    C = ck_dask.matmul(A, B)
    assert not numpy_ops, "building the graph ran an op"
    want = np.matmul(A.compute(), B.compute())
    assert C.shape == want.shape
    np.testing.assert_allclose(C.compute(), want, rtol=1e-12)
    blocks = max(A.numblocks[-1], B.numblocks[-2 if B.ndim > 1 else 0])  # pairs along k, at least one each
    assert numpy_ops.count("matmul") >= blocks
    if blocks == 1:
        assert "matmul_whole_k" in C.name or any("whole_k" in str(k) for k in C.dask.keys())


def test_matmul_sums_blocks_without_concatenating(numpy_ops):
    """One block product per (row block, column block, k block), and no product ever sees more than one k block."""
    A, B = chunked((40, 90), (10, 30)), chunked((90, 20), (30, 10))
    C = ck_dask.matmul(A, B)
    np.testing.assert_allclose(C.compute(), A.compute() @ B.compute(), rtol=1e-12)
    assert numpy_ops.count("matmul") == 4 * 2 * 3
    assert all(a == (10, 30) and b == (30, 10) for a, b in numpy_ops.shapes)


def half_dtype(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return np.dtype(getattr(ml_dtypes, name) if name == "bfloat16" else name)


def unit_roundoff(dtype) -> float:
    return 2.0**-11 if dtype.name == "float16" else 2.0**-8  # half the gap above 1: 11 and 8 significant bits


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_graphs_sum_many_blocks(numpy_ops, dtype):
    """16-bit products with the contracted axis in 8 blocks: the tree of sums widens each partial once, sums in
    float32 and rounds once at the end (so shape, dtype and error are those of a few roundings, not garbage)."""
    from cudakit import _check

    dt = half_dtype(dtype)
    a, b = (rng.random((6, 80)) + 0.5).astype(dt), (rng.random((80, 4)) + 0.5).astype(dt)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    bound = _check.tolerance(dt, 80) + unit_roundoff(dt)  # the one-block bound, plus each partial's rounding
    C = ck_dask.matmul(da.from_array(a, chunks=(3, 10)), da.from_array(b, chunks=(10, 4))).compute()
    assert C.dtype == dt and C.shape == (6, 4)
    assert _check.relative_error(C, a64 @ b64) <= bound
    y = ck_dask.matvec(da.from_array(a, chunks=(6, 10)), da.from_array(b[:, 0], chunks=10)).compute()
    assert y.dtype == dt and y.shape == (6,)
    assert _check.relative_error(y, a64 @ b64[:, 0]) <= bound
    d = ck_dask.dot(da.from_array(a[0], chunks=10), da.from_array(b[:, 1], chunks=10)).compute()
    assert d.dtype == dt and d.shape == ()
    assert _check.relative_error(d, np.asarray(a64[0] @ b64[:, 1])) <= bound


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_partial_sums_round_once(dtype):
    """The sum of 16-bit partials: each widened exactly, summed in float32, rounded once to nearest."""
    dt = half_dtype(dtype)
    blocks = [(rng.random((5, 1, 7)) + 0.5).astype(dt) for _ in range(3)]
    wide = [ck_dask._widened(b, dt) for b in blocks]
    assert all(w.dtype == np.float32 for w in wide)
    assert np.array_equal(wide[0], blocks[0].astype(np.float64).astype(np.float32))  # widening is exact
    assert ck_dask._widened(wide[0], dt) is wide[0]  # a widened block is not widened again
    got = ck_dask._add_blocks(blocks, dtype_=dt, last=True, axis=(1,))
    total = (wide[0] + wide[1] + wide[2]).astype(np.float64)
    assert got.dtype == dt and got.shape == (5, 7)
    err = np.abs(got.astype(np.float64) - total[:, 0]) / total[:, 0]  # one rounding to nearest
    assert float(err.max()) <= unit_roundoff(dt)


def test_mixed_operand_becomes_one_chunk(numpy_ops):
    A, b = chunked((40, 30), (10, 10)), rng.random((30, 5))
    C = ck_dask.matmul(A, b)
    assert isinstance(C, da.Array)
    np.testing.assert_allclose(C.compute(), A.compute() @ b, rtol=1e-12)


@pytest.mark.parametrize("a_shape, a_chunks, x_shape, x_chunks", [
    ((70, 40), (20, 15), (40,), (15,)),
    ((70, 40), (20, 40), (40,), (40,)),
    ((3, 70, 40), (1, 20, 15), (40,), (10,)),
    ((70, 40), (20, 15), (5, 40), (2, 15)),
])
def test_matvec_graph_matches_numpy(numpy_ops, a_shape, a_chunks, x_shape, x_chunks):
    A, x = chunked(a_shape, a_chunks), chunked(x_shape, x_chunks)
    y = ck_dask.matvec(A, x)
    want = np.matmul(A.compute(), x.compute()[..., None])[..., 0]
    assert y.shape == want.shape
    np.testing.assert_allclose(y.compute(), want, rtol=1e-12)


def test_dot_and_transpose_graphs(numpy_ops):
    a, b = chunked((1000,), (128,)), chunked((1000,), (300,))
    d = ck_dask.dot(a, b)
    assert d.shape == () and not numpy_ops
    np.testing.assert_allclose(d.compute(), np.dot(a.compute(), b.compute()), rtol=1e-12)
    t = chunked((6, 7, 8, 9), (2, 3, 8, 4))
    for axes in [None, (0, 3, 1, 2), (1, 0, 2, 3)]:
        got = ck_dask.transpose(t, axes)
        np.testing.assert_array_equal(got.compute(), np.transpose(t.compute(), axes))


def test_errors_name_the_problem(numpy_ops):
    A = chunked((40, 30), (10, 10))
    with pytest.raises(ValueError, match="must equal"):
        ck_dask.matmul(A, chunked((20, 5), (10, 5)))
    with pytest.raises(TypeError, match="share one dtype"):
        ck_dask.matmul(A, chunked((30, 5), (10, 5)).astype(np.float32))
    with pytest.raises(TypeError, match="unsupported dtype int64"):
        ck_dask.matmul(A.astype(np.int64), A.T.astype(np.int64))
    with pytest.raises(TypeError, match="out= is not supported"):
        ck_dask.matmul(A, A.T, out=np.empty((40, 40)))
    unknown = A[A[:, 0] > 0.5]
    with pytest.raises(ValueError, match=r"unknown chunk sizes .*compute_chunk_sizes"):
        ck_dask.matmul(unknown, A.T)
    frames = da.zeros((8, 64, 48, 3), chunks=(4, 32, 48, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match=r"chunked along axes \[1\].*rechunk\(\{1: -1\}\)"):
        ck_dask.letterbox(frames, (32, 32))
    with pytest.raises(ValueError, match=r"chunked along axes \[1\]"):
        ck_dask.resize(frames, (32, 32))
    with pytest.raises(TypeError, match="cupy.ndarray or a dask.array.Array"):
        ck_dask.matmul(A, [[1.0]])
    with pytest.raises(ValueError, match="unknown variant 'bogus'"):
        ck_dask.matmul(A, A.T, variant="bogus")
    with pytest.raises(TypeError, match="tf32=True applies to float32"):
        ck_dask.matmul(A, A.T, tf32=True)
    with pytest.raises(ValueError, match="at most 8 are supported"):
        ck_dask.transpose(da.ones((1,) * 9, chunks=1))
    with pytest.raises(ValueError, match="imgs must be 4-D"):
        ck_dask.letterbox(frames[0], (32, 32))
    with pytest.raises(ValueError, match="img must be 2-D or 3-D or 4-D"):
        ck_dask.resize(da.zeros((2, 8, 64, 48, 3), chunks=1, dtype=np.uint8), (32, 32))
    with pytest.raises(ValueError, match=r"boxes_map.array must be \(N, 3, 2\)"):
        ck_dask.unletterbox_boxes(da.ones((8, 5, 4)), ck_dask._resize.BoxesMap(da.ones((8, 3, 3))))


def test_numpy_chunks_refused_before_anything():
    """Without the stand-ins: a Dask array of NumPy chunks reaches cudakit's ops, which refuse it by name."""
    A = da.ones((40, 30), chunks=10)
    for call in (lambda: cudakit.matmul(A, A.T), lambda: cudakit.matvec(A, da.ones(30)),
                 lambda: cudakit.dot(A[0], A[1]), lambda: cudakit.transpose(A)):
        with pytest.raises(TypeError, match=r"Dask array of numpy.ndarray chunks.*map_blocks\(cupy.asarray\)"):
            call()


def test_resize_and_letterbox_chunks(numpy_ops):
    frames = da.zeros((10, 60, 80, 3), chunks=(4, 60, 80, 3), dtype=np.uint8)
    small = ck_dask.resize(frames, (30, 40))
    assert small.chunks == ((4, 4, 2), (30,), (40,), (3,)) and small.dtype == np.uint8
    batch, boxes_map = ck_dask.letterbox(frames, (64, 64), dtype=np.float16)
    assert batch.chunks == ((4, 4, 2), (3,), (64,), (64,)) and batch.dtype == np.float16
    g = ck_dask._resize.geometry(60, 80, 64, 64)
    want = np.broadcast_to(g.map_rows, (10, 3, 2))
    np.testing.assert_array_equal(boxes_map.array.compute(), want)
    nhwc, _ = ck_dask.letterbox(frames, (64, 48), layout="NHWC")
    assert nhwc.chunks == ((4, 4, 2), (64,), (48,), (3,))


def test_import_cudakit_imports_no_dask():
    code = "import sys, cudakit; print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_bench_sampled_check_tells_right_from_wrong():
    """The bench's answer check of a chunked product: a few blocks of C against float64, right and wrong."""
    from cudakit.bench.dask_answers import sampled_error

    def compute(xs):
        return list(dask.compute(*xs, scheduler="sync"))

    A = da.from_array(rng.random((60, 80)).astype(np.float32), chunks=(20, 20))
    B = da.from_array(rng.random((80, 40)).astype(np.float32), chunks=(20, 10))
    right = sampled_error(compute, A, B, A @ B, samples=3)
    assert right["error"] <= right["bound"] and len(set(right["blocks"])) == 3
    wrong = sampled_error(compute, A, B, (A @ B) * np.float32(1 + 1e-3), samples=3)
    assert wrong["error"] > wrong["bound"]


def test_bench_dask_redraws_a_saved_run():
    res = run_cli("bench.py", "--dask", "--load", "docs/dask_h200x2_ucx.json", env={**HIDE_GPU, "COLUMNS": "250"})
    assert res.returncode == 0, res.stderr
    assert "1 worker and 2" in res.stdout and "speed-up" in res.stdout and "transport ucx" in res.stdout
    assert "matvec past one GPU's memory" in res.stdout


def test_bench_dask_exits_1_on_a_wrong_answer(tmp_path):
    """A saved run whose checked answer missed its bound (or whose check failed) redraws, and exits 1."""
    import json

    run = json.loads((ROOT / "docs/dask_h200x2_ucx.json").read_text())
    big = run["past_one_gpu"]
    big["error"] = 10 * big["bound"]
    (tmp_path / "wrong.json").write_text(json.dumps(run))
    res = run_cli("bench.py", "--dask", "--load", str(tmp_path / "wrong.json"), env={**HIDE_GPU, "COLUMNS": "250"})
    assert res.returncode == 1 and "WRONG" in res.stdout, res.stderr
    run["past_one_gpu"] = {"failed": "OutOfMemoryError: ..."}
    (tmp_path / "failed.json").write_text(json.dumps(run))
    res = run_cli("bench.py", "--dask", "--load", str(tmp_path / "failed.json"), env={**HIDE_GPU, "COLUMNS": "250"})
    assert res.returncode == 1 and "FAILED" in res.stdout, res.stderr


def test_bench_dask_says_what_is_missing():
    try:
        import dask_cuda  # noqa: F401  (only whether it is there)
    except ImportError:
        res = run_cli("bench.py", "--dask", env=HIDE_GPU)
        assert res.returncode == 1 and "pip install cudakit[dask]" in res.stderr, res.stderr
    else:
        res = run_cli("bench.py", "--dask", env=HIDE_GPU)
        assert res.returncode == 1 and "needs a CUDA GPU" in res.stderr, res.stderr
    res = run_cli("bench.py", "--dask", "--sweep", env=HIDE_GPU)
    assert res.returncode == 2 and "--dask runs on its own" in res.stderr


# ---------------------------------------------------------------------------------------------------- GPU
@pytest.fixture(scope="module")
def cluster():
    """A dask-cuda LocalCUDACluster (one worker per GPU) where dask-cuda is installed, else Dask's threads."""
    try:
        from dask_cuda import LocalCUDACluster
        from distributed import Client
    except ImportError:
        with dask.config.set(scheduler="threads"):
            yield None
        return
    with LocalCUDACluster() as local, Client(local) as client:
        yield client


def on_workers(x, chunks):
    """A CuPy array as a Dask array of the given chunks (its blocks shipped to the workers at compute)."""
    return da.from_array(x, chunks=chunks, asarray=False)


def as_float64(x):
    return x.astype(np.float32).astype(np.float64) if x.dtype.name == "bfloat16" else x.astype(np.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n, chunks", [(1000, 700, 900, (256, 300, 256)), (333, 4097, 65, (100, 1000, 65)),
                                             (1, 2000, 500, (1, 512, 128))])
def test_gpu_matmul(cluster, dtype, m, k, n, chunks):
    import cupy

    A, B = random_array((m, k), dtype), random_array((k, n), dtype)
    C = cudakit.matmul(on_workers(A, chunks[:2]), on_workers(B, chunks[1:]))
    assert isinstance(C, da.Array) and type(C._meta) is cupy.ndarray and C.dtype == dtype
    got = C.compute()
    ref = A.astype(np.float64) @ B.astype(np.float64)
    assert_close(got, ref, dtype, k, "dask matmul")
    assert_close(cudakit.matmul(A, B), ref, dtype, k, "one GPU")


@pytest.mark.gpu
def test_gpu_matmul_batched_broadcast_and_1d(cluster):
    A, B, v = random_array((3, 1, 64, 96), np.float32), random_array((5, 96, 40), np.float32), \
        random_array((96,), np.float32)
    dA, dB, dv = on_workers(A, (1, 1, 32, 48)), on_workers(B, (2, 48, 40)), on_workers(v, (48,))
    ref = as_float64(A) @ as_float64(B)
    assert_close(cudakit.matmul(dA, dB).compute(), ref, np.float32, 96, "batched")
    assert_close(cudakit.matmul(dA, dv).compute(), as_float64(A) @ as_float64(v), np.float32, 96, "1-D B")
    assert_close(cudakit.matmul(dv, dB).compute(), as_float64(v) @ as_float64(B), np.float32, 96, "1-D A")
    assert_close(cudakit.matmul(dA, B).compute(), ref, np.float32, 96, "CuPy B")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_matmul_half(cluster, monkeypatch, dtype):
    """16-bit blocks on the cluster; bfloat16 is refused there by name (distributed would send its blocks as
    2-byte voids) and runs on Dask's threads."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    dt = np.dtype(getattr(ml_dtypes, dtype) if dtype == "bfloat16" else dtype)
    A, B = random_array((512, 384), dt), random_array((384, 640), dt)
    dA, dB = on_workers(A, (128, 192)), on_workers(B, (192, 256))
    if dtype == "bfloat16" and cluster is not None:
        with pytest.raises(TypeError, match="bfloat16 Dask arrays cannot run on a distributed cluster"):
            cudakit.matmul(dA, dB)
        monkeypatch.setattr(ck_dask, "_distributed_client", lambda: None)
    with dask.config.set(scheduler="threads" if dtype == "bfloat16" else None):
        got = cudakit.matmul(dA, dB).compute()
    assert got.dtype == dt
    # k in two blocks: each block's product is rounded to the dtype (within u of it), then the partials are summed
    # in float32 and rounded once. With positive inputs the partials' roundings add up to at most u ||ref||, on top
    # of the bound of a one-block 16-bit product (float32 sums, one rounding).
    from cudakit import _check

    ref = as_float64(A) @ as_float64(B)
    unit_roundoff = 2.0**-11 if dtype == "float16" else 2.0**-8
    assert _check.relative_error(got, ref) <= _check.tolerance(dt, 384) + unit_roundoff


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_matvec_and_dot(cluster, dtype):
    A, x = random_array((3000, 2500), dtype), random_array((2500,), dtype)
    y = cudakit.matvec(on_workers(A, (700, 1000)), on_workers(x, (1000,))).compute()
    assert_close(y, as_float64(A) @ as_float64(x), dtype, 2500, "dask matvec")
    X = random_array((4, 2500), dtype)  # a batch of vectors for one matrix: (4, 3000)
    Y = cudakit.matvec(on_workers(A, (1000, 2500)), on_workers(X, (2, 1250))).compute()
    assert_close(Y, as_float64(X) @ as_float64(A).T, dtype, 2500, "batched x")
    a, b = random_array((1 << 20,), dtype), random_array((1 << 20,), dtype)
    d = cudakit.dot(on_workers(a, 1 << 17), on_workers(b, 1 << 18)).compute()
    assert d.shape == () and d.dtype == dtype
    assert_close(d, as_float64(a) @ as_float64(b), dtype, 1 << 20, "dask dot")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64])
def test_gpu_transpose(cluster, dtype):
    import cupy

    a = random_array((6, 70, 90, 3), dtype)
    for axes in [None, (0, 3, 1, 2), (0, 2, 1, 3)]:
        got = cudakit.transpose(on_workers(a, (4, 32, 50, 3)), axes).compute()
        assert bool(cupy.array_equal(got, cupy.ascontiguousarray(cupy.transpose(a, axes))))


@pytest.mark.gpu
def test_gpu_resize_letterbox_unletterbox(cluster):
    import cupy

    frames = random_array((10, 72, 128, 3), np.uint8)
    dframes = on_workers(frames, (4, 72, 128, 3))
    small = cudakit.resize(dframes, (36, 50)).compute()
    assert bool(cupy.array_equal(small, cudakit.resize(frames, (36, 50))))
    batch, boxes_map = cudakit.letterbox(dframes, (64, 64), mean=(0.4, 0.5, 0.6), std=0.25)
    want, want_map = cudakit.letterbox(frames, (64, 64), mean=(0.4, 0.5, 0.6), std=0.25)
    assert bool(cupy.array_equal(batch.compute(), want))
    assert bool(cupy.array_equal(boxes_map.array.compute(), want_map.array))
    boxes = random_array((10, 7, 4), np.float32) * 64
    back = cudakit.unletterbox_boxes(on_workers(boxes, (3, 7, 4)), boxes_map).compute()
    assert bool(cupy.array_equal(back, cudakit.unletterbox_boxes(boxes, want_map)))


def test_bench_synchronises_a_worker_only_when_it_has_nothing_left():
    """The bench's end of a run: a worker waits for its GPU only once no task is ready, running, waiting for data
    or fetching it (waiting earlier would hold the event loop that receives the data)."""
    pytest.importorskip("distributed")
    from types import SimpleNamespace

    from cudakit.bench._dask_plugin import SynchronizeWhenIdle

    empty = dict(ready=[], constrained=[], executing=set(), long_running=set(), waiting=set(), fetch_count=0,
                 in_flight_tasks=set())
    assert SynchronizeWhenIdle.idle(SimpleNamespace(**empty))
    for busy in ({"ready": [1]}, {"executing": {1}}, {"waiting": {1}}, {"fetch_count": 1}, {"in_flight_tasks": {1}}):
        assert not SynchronizeWhenIdle.idle(SimpleNamespace(**{**empty, **busy})), busy
