"""Drop-in products (issue 17): every operand form cupy.matmul takes, checked against CuPy's own results and float64,
with the paths the planners pick for long-k, one-row, skinny and short-k problems (batches of products are in
test_matmul_batches.py, the transposes' drop-in shapes in test_transpose_shapes.py)."""
import importlib

import numpy as np
import pytest

import cudakit
from cudakit import _matmul_batch, _matmul_routes, _tune
from cudakit._device import sm_count
from conftest import assert_close, matmul_ref64 as ref64, poisoned, random_array

mm = importlib.import_module("cudakit.matmul")  # the module (cudakit.matmul is the function)

DTYPES = [np.float32, np.float64]


BATCHED = [((3, 5, 7), (3, 7, 4)), ((3, 5, 7), (7, 4)), ((5, 7), (2, 3, 7, 4)), ((2, 1, 5, 7), (1, 3, 7, 4)),
           ((4, 1, 33, 17), (3, 17, 9)), ((7,), (7,)), ((7,), (7, 5)), ((5, 7), (7,)), ((7,), (2, 7, 3)),
           ((2, 4, 7), (7,)), ((1, 1, 7), (7, 1)), ((0, 5, 7), (7, 4)), ((2, 5, 0), (2, 0, 4)),
           ((64, 32, 32), (64, 32, 32)), ((2, 3, 4, 5, 6), (6, 2)), ((1, 524, 97), (97, 1)),
           ((1, 1, 40, 30), (1, 30, 20))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", BATCHED, ids=str)
def test_nd_matmul_equals_cupy(dtype, shapes):
    import cupy

    a, b = (random_array(s, dtype) for s in shapes)
    want = cupy.matmul(a, b)
    got = cudakit.matmul(a, b)
    assert got.shape == want.shape and got.dtype == want.dtype and got.flags.c_contiguous
    k = shapes[0][-1]
    if got.size:
        assert_close(got, ref64(a, b), dtype, max(k, 1), str(shapes))
    out = poisoned(want.shape, dtype)
    assert cudakit.matmul(a, b, out=out) is out
    if out.size:
        assert_close(out, ref64(a, b), dtype, max(k, 1), str(shapes))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_operands_read_in_place_strided_and_broadcast(dtype):
    import cupy

    base = random_array((4, 9, 40, 24), dtype)
    views = [base[:, 2, :33, :17], base[:, 2, :17, :33].transpose(0, 2, 1), base[::2, 1, :33, :17],
             cupy.broadcast_to(base[0, 0, :33, :17], (4, 33, 17))]
    b = random_array((17, 9), dtype)
    for a in views:
        assert_close(cudakit.matmul(a, b), ref64(a, b), dtype, 17)
        assert_close(cudakit.matmul(b.T, a.transpose(0, 2, 1)), ref64(b.T, a.transpose(0, 2, 1)), dtype, 17)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", [(1, 5000, 300), (300, 5000, 1), (1, 1, 1), (1, 70_001, 1), (129, 66_000, 127),
                                 (64, 100_003, 64), (7, 4099, 5), (255, 8192, 129)], ids=str)
def test_one_row_and_long_k_products(dtype, mkn):
    m, k, n = mkn
    for oa, ob in (("C", "C"), ("F", "F"), ("C", "F")):
        a, b = random_array((m, k), dtype, oa), random_array((k, n), dtype, ob)
        out = poisoned((m, n), dtype)
        cudakit.matmul(a, b, out=out)
        assert_close(out, ref64(a, b), dtype, k, f"{mkn} {oa}{ob}")


def routed_on_every_layout(launcher: str, mkn, dtype, monkeypatch, views, record=lambda args: 1,
                           module=_matmul_routes) -> list:
    """cudakit.matmul on the four layouts of an m x k x n product, then on `views` (A, B) of it, each against
    float64 into a poisoned output, every route planned afresh; returns record(args) of each call of
    module.<launcher> (the route's maker) that the products made."""
    m, k, n = mkn
    taken, make = [], getattr(module, launcher)
    monkeypatch.setattr(_matmul_routes, "_routes", {})
    monkeypatch.setattr(module, launcher, lambda *args: taken.append(record(args)) or make(*args))
    for oa, ob in (("C", "C"), ("F", "F"), ("C", "F"), ("F", "C")):
        a, b = random_array((m, k), dtype, oa), random_array((k, n), dtype, ob)
        out = poisoned((m, n), dtype)
        _matmul_routes._routes.clear()  # (with k = 1 two layouts have the same strides: one route)
        cudakit.matmul(a, b, out=out)
        assert_close(out, ref64(a, b), dtype, k, f"{mkn} {oa}{ob}")
    a, b = views
    assert_close(cudakit.matmul(a, b), ref64(a, b), dtype, k, f"{mkn} views")
    return taken


SKINNY = [(5000, 3, 7), (33_000, 5, 2), (8191, 9, 9), (250_000, 9, 1), (1, 10, 160_001), (4099, 16, 16)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", SKINNY, ids=str)
def test_skinny_products_take_the_skinny_kernel(dtype, mkn, monkeypatch):
    """A side of C at most 32 long, the other long, k short: the skinny kernel, on every layout and on views with
    negative and non-unit strides, its output poisoned first."""
    import cupy

    m, k, n = mkn
    assert _matmul_routes.skinny_plan(m, k, n, np.dtype(dtype).itemsize) is not None, mkn
    a, b = random_array((m, 2 * k), dtype)[::-1, ::2], random_array((k, n + 3), dtype)[:, 3:]
    assert routed_on_every_layout("skinny_launcher", mkn, dtype, monkeypatch, (a, b)) == [1] * 5
    with cupy.cuda.Stream():  # the caller's stream
        assert_close(cudakit.matmul(a, b), ref64(a, b), dtype, k, f"{mkn} side stream")


# k at most 16 past the dots route, not one row or column, nor a C of at most 16 columns that the skinny kernel takes
SHORT_K_WRITER = [(3288, 4, 4001), (220, 2, 7333), (999, 1, 1001), (40, 9, 70), (161_372, 1, 176), (3000, 3, 5001),
                  (4099, 14, 18), (3, 11, 70_001), (17, 1, 9000), (4096, 16, 32), (31, 12, 4100), (1000, 4, 10)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", SHORT_K_WRITER, ids=str)
def test_a_short_k_takes_the_short_k_writer(dtype, mkn, monkeypatch):
    """On every layout and on views with negative and non-unit strides, its output poisoned first; in the caller's
    stream."""
    import cupy
    from cudakit import _shortk

    m, k, n = mkn
    a, b = random_array((m, 2 * k), dtype)[::-1, ::2], random_array((k, n + 3), dtype)[:, 3:]
    assert _shortk.takes(np.dtype(dtype).itemsize, k)
    plans = routed_on_every_layout("launcher", mkn, dtype, monkeypatch, (a, b), lambda args: args[3], _shortk)
    assert len(plans) == 5 and set(plans) == {_shortk.plan(m, n, k, np.dtype(dtype).itemsize, sms=sm_count(0))}
    with cupy.cuda.Stream():
        assert_close(cudakit.matmul(a, b), ref64(a, b), dtype, k, f"{mkn} side stream")


@pytest.mark.gpu
@pytest.mark.parametrize("mkn", [(2000, 12, 1500), (1500, 9, 2004), (2002, 16, 1998), (2001, 12, 2000)], ids=str)
def test_fp64_products_9_to_16_deep_of_even_sides_take_the_pipelined_dmma_tiles(mkn, monkeypatch):
    """(_dmma.SHORT_DEPTHS) On every layout and on views with negative and non-unit strides, output poisoned first;
    a C with an odd side: the short-k writer."""
    from cudakit import _dmma, _shortk

    m, k, n = mkn
    a, b = random_array((m, 2 * k), np.float64)[::-1, ::2], random_array((k, n + 3), np.float64)[:, 3:]
    if m % 2:
        plans = routed_on_every_layout("launcher", mkn, np.float64, monkeypatch, (a, b), lambda args: args[3], _shortk)
        assert len(plans) == 5, plans
        return
    if not _dmma.planned(m, n, k, 0):
        pytest.skip("the DMMA tiles are planned on sm_80 and later, for a C that gives most SMs a tile")
    tiles = routed_on_every_layout("launcher", mkn, np.float64, monkeypatch, (a, b), lambda args: args[3], _dmma)
    assert len(tiles) >= 5 and all(t in _dmma.PLANNED for t in tiles), tiles


def test_skinny_plan_leaves_deeper_products_to_other_paths():
    assert _matmul_routes.skinny_plan(100_000, 8, 16, 4) == (16, 128 * 17 * 4)
    assert _matmul_routes.skinny_plan(100_000, 16, 1, 8) == (8, max(16 * 8, 128 * 2) * 8)  # one column of C
    assert _matmul_routes.skinny_plan(100_000, 17, 16, 4) is None  # deeper: the narrow tiles
    assert _matmul_routes.skinny_plan(100_000, 8, 33, 4) is None  # both sides past 32
    assert _matmul_routes.skinny_plan(1000, 8, 16, 4) is None  # too short to fill the GPU with lines
    assert _matmul_routes.skinny_plan(40_000, 278, 9, 8) is None
    assert _matmul_routes.skinny_plan(32, 16, 100_000, 8) == (32, max(16 * 32, 128 * 33) * 8)


DOTS = [(8, 100_003, 13), (16, 70_001, 16), (2, 4096, 2), (3, 50_000, 9), (16, 4097, 5), (9, 300_000, 2),
        (37, 29_349, 5), (5, 12_128, 19), (64, 50_001, 8)]  # (past 16 x 16: parts that read A and B twice at most)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", DOTS, ids=str)
def test_tiny_c_with_long_k_takes_the_dots_kernel(dtype, mkn, monkeypatch):
    """FP32, and FP64 short of what the streaming FP64 kernel takes (_longk.takes: sm_80+, k from MIN_DEPTH), which
    then takes it on every layout."""
    from cudakit import _longk

    m, k, n = mkn
    views = random_array((2 * m, k), dtype)[::-2], random_array((k, 3 * n), dtype)[:, ::3]
    if dtype == np.float64 and _longk.takes(m, n, k, 0):  # (operands it cannot read in place: made again on copies)
        plans = routed_on_every_layout("launcher", mkn, dtype, monkeypatch, views, lambda args: args[3], _longk)
        assert len(plans) >= 5 and set(plans) == {_longk.plan(m, n, k, 0)}, plans
        return
    taken = routed_on_every_layout("dots_launcher", mkn, dtype, monkeypatch, views, record=lambda args: args[3])
    assert len(taken) == 5 and all(runs > 1 for runs in taken)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", [(1, 127_977, 9), (13, 86_469, 1), (1, 1_000_003, 3), (1, 200_003, 8),
                                 (37, 100_003, 1)], ids=str)
def test_one_row_or_column_of_c_reads_a_column_major_operand_as_one_run(dtype, mkn):
    """One row of C times a C-order B (or one column from an F-order A) whose short side is not whole 16-byte
    vectors (up to THIN_MAX_ROWS of its element size) or is whole vectors (up to THIN_MAX_VECTOR_ROWS): the thin
    column-major matvec kernel, which reads the operand as one contiguous run."""
    m, k, n = mkn
    a, b = random_array((m, k), dtype, "C" if m == 1 else "F"), random_array((k, n), dtype)
    matrix, vector = (a, b[:, 0]) if n == 1 else (b.T, a[0])
    assert "thin" in mvp.plan(matrix, vector).kernel
    out = poisoned((m, n), dtype)
    cudakit.matmul(a, b, out=out)
    assert_close(out, ref64(a, b), dtype, k, f"{mkn}")


SHORT_K_F64 = [(17, 32, 3000), (2617, 23, 389), (5001, 25, 10), (6400, 20, 24)]  # (k to 16: the short-k writer)
SHORT_K_F32 = [(658, 17, 8192), (1500, 47, 1501), (3001, 31, 2999)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_mkn", [(np.float64, mkn) for mkn in SHORT_K_F64]
                         + [(np.float32, mkn) for mkn in SHORT_K_F32], ids=lambda d: f"{np.dtype(d[0]).name}-{d[1]}")
def test_a_short_k_takes_the_small_product_kernel(dtype_mkn, monkeypatch):
    """Products no deeper than SHORT_K_F64 (FP64) or SHORT_K_F32 (FP32; SHORT_K_F32_MID for a mid-size C), beside
    the skinny and dots ones: the small-product kernel, on every layout and on views with negative and non-unit
    strides, its output poisoned first; batches of them too (FP64: the small kernel up to SHORT_K_F64_BATCH, for an
    odd n up to SHORT_K_F64)."""
    import cupy

    dtype, (m, k, n) = dtype_mkn
    monkeypatch.setattr(_matmul_routes, "X3", False)  # (where X3 runs, it takes FP32's k from X3_MIN_K: below)
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    assert _matmul_routes.short_k_takes(np.dtype(dtype), m, n, k, 0)
    views = random_array((m, 2 * k), dtype)[::-1, ::2], random_array((k, n + 3), dtype)[:, 3:]
    assert routed_on_every_layout("short_k_launcher", (m, k, n), dtype, monkeypatch, views) == [1] * 5
    a, b = random_array((3, m, k), dtype), random_array((k, n), dtype)  # a batch, B broadcast
    out = poisoned((3, m, n), dtype)
    cudakit.matmul(a, b, out=out)
    assert_close(out, cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64)), dtype, k, f"{m}x{k}x{n} batch")
    if dtype == np.float64:
        odd_n_depth = _matmul_batch.SHORT_K_F64 if n % 2 else _matmul_batch.SHORT_K_F64_BATCH
        assert (_matmul_batch.small_tile(m, n, k, 8) is not None) == (k <= odd_n_depth)
    elif (m, k, n) == SHORT_K_F32[-1]:  # one deeper, or a narrow C: the tiles
        deeper = (m, _matmul_batch.SHORT_K_F32_MID + 1, n)
        views = random_array((m, 2 * deeper[1]), dtype)[::-1, ::2], random_array((deeper[1], n), dtype)
        assert routed_on_every_layout("short_k_launcher", deeper, dtype, monkeypatch, views) == []
        narrow = (m, k, _tune.NARROW_SIDE)
        views = random_array((m, 2 * k), dtype)[::-1, ::2], random_array((k, _tune.NARROW_SIDE), dtype)
        assert routed_on_every_layout("short_k_launcher", narrow, dtype, monkeypatch, views) == []


def test_short_k_takes_fp64_to_its_depth_and_fp32_past_a_narrow_c(monkeypatch):
    """(No GPU: on a modelled sm_86, where X3 is not offered, then on sm_90, where X3 takes FP32's short k from
    matmul_tc.X3_MIN_K past a narrow C.)"""
    from cudakit import matmul_tc

    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    monkeypatch.setattr(mm, "_compute_capability", lambda device_id: 86)
    take = lambda dtype, m, n, k: _matmul_routes.short_k_takes(dtype, m, n, k, 0)  # noqa: E731
    assert take(f64, 40, 9, _matmul_batch.SHORT_K_F64) and not take(f64, 4000, 4000, _matmul_batch.SHORT_K_F64 + 1)
    assert take(f32, 33, 33, _matmul_batch.SHORT_K_F32) and not take(f32, 1000, 1000, _matmul_batch.SHORT_K_F32 + 1)
    assert take(f32, 1024, 1024, _matmul_batch.SHORT_K_F32_MID) and take(f32, 6000, 6000, _matmul_batch.SHORT_K_F32_MID)
    assert not take(f32, 8192, 8192, _matmul_batch.SHORT_K_F32 + 1)  # a C past SHORT_K_F32_MID_C
    assert not take(f32, 4000, 4000, _matmul_batch.SHORT_K_F32_MID + 1)
    assert not take(f32, 4000, _tune.NARROW_SIDE, 1) and not take(f32, _tune.NARROW_SIDE, 4000, 1)
    monkeypatch.setattr(mm, "_compute_capability", lambda device_id: 90)
    monkeypatch.setattr(_matmul_routes, "X3", True)
    short = matmul_tc.X3_MIN_K - 1
    assert take(f32, 1024, 1024, short) and not take(f32, 1024, 1024, short + 1) and take(f64, 40, 9, short + 1)
    assert not take(f32, 4000, _tune.NARROW_SIDE, short + 1) and not take(f32, 4000, 4000, _matmul_batch.SHORT_K_F32_MID)


def test_short_k_takes_the_tile_padding_c_least():
    tile = _matmul_batch.short_k_tile
    assert tile(8, 8192, 8192) == _matmul_batch.SHORT_K_TILE and tile(8, 3000, 33) == _matmul_batch.SHORT_K_TILE
    assert tile(8, 567234, 10) == (64, 16) and tile(8, 5001, 20) == (32, 32)  # a narrow C: less padding
    assert tile(8, 6400, 32) == (64, 32) and tile(8, 5001, 32) == (32, 32)  # a tie: the taller, then the wider
    assert {tile(8, m, n) for m, _, n in SHORT_K_F64} == {_matmul_batch.SHORT_K_TILE, (64, 16), (64, 32)}
    assert tile(4, 658, 8192) == (64, 128)  # (the GPU test runs it past k = 16, and 64 x 64 on (3001, 31, 2999))
    assert tile(4, 8192, 8192) == (64, 128) and tile(4, 40, 70) == (64, 128)  # a tie: the wider
    assert tile(4, 161372, 176) == (64, 64) and tile(4, 3001, 2999) == (64, 64)
    assert {tile(4, m, n) for m, _, n in SHORT_K_F32} == set(_matmul_batch.SHORT_K_TILES_F32)  # the GPU test runs both


def test_dots_plan_cuts_k_into_whole_strides():
    for m, k, n in ((8, 3_846_591, 13), (16, 4096, 16), (2, 100_003, 2)):
        runs, run = _matmul_routes.dots_plan(m, k, n, resident=264)
        assert run % _matmul_routes.DOTS_THREADS == 0 and (runs - 1) * run < k <= runs * run
        assert runs * -(-m // 8) * -(-n // 8) <= 2 * 264
    assert _matmul_routes.dots_plan(17, 100_000, 17, 264) is None  # parts that read A and B 3 times over: the tiles
    assert _matmul_routes.dots_plan(65, 100_000, 2, 264) is None  # a side past 64
    assert _matmul_routes.dots_plan(37, 100_000, 5, 264) is not None  # 1.5 times over
    assert _matmul_routes.dots_plan(8, 4095, 8, 264) is None  # k too short to share
    assert max(_matmul_routes.dots_reads(m, n) for m in range(1, 17) for n in range(1, 17)) == 2


def test_split_depth_covers_k_exactly():
    for k, wanted in ((4096, 3), (66_000, 17), (100_003, 264), (65536, 64), (873876, 528)):
        for odd in (False, True):
            splits, depth = _tune.split_depth(k, wanted, 32, odd)
            assert splits <= wanted and depth % 32 == 0 and (splits - 1) * depth < k <= splits * depth
            assert not odd or depth // 32 % 2 == 1 or splits == 1
    assert _tune.split_depth(65536, 64, 16) == (64, 1024)
    assert _tune.split_depth(65536, 64, 16, odd=True) == (64, 1040)  # 65 slices: runs not 8 KiB of doubles apart
    assert _tune.split_depth(65536, 66, 16, odd=True) == (66, 1008) and _tune.split_depth(64, 1, 16, odd=True) == (1, 64)


def test_model_splits_small_grids_only():
    tile = _tune.CANDIDATES[np.dtype(np.float32)][0]  # 128 x 128, 2 blocks per SM: 264 slots on 132 SMs

    def best(m, n, k):
        times = {s: _tune.product_seconds(tile, m, n, k, s, 264, 132, 4) for s in _tune.split_counts(264)}
        return min(times, key=times.get)

    assert best(4096, 4096, 4096) == 1  # 1024 tiles fill the GPU: k stays whole
    assert best(128, 128, 65536) > _tune.MIN_SPLITS  # one tile: k shared by many blocks
    assert _tune.split_counts(2) == [1] and _tune.split_counts(10)[-1] == 10


@pytest.mark.gpu
def test_nd_matmul_errors_match_cupy():
    import cupy

    a = random_array((2, 5, 7), np.float32)
    for b in (random_array((3, 7, 4), np.float32), random_array((2, 6, 4), np.float32)):
        with pytest.raises(ValueError):
            cupy.matmul(a, b)
        with pytest.raises(ValueError):
            cudakit.matmul(a, b)
    with pytest.raises(ValueError, match="0-d"):
        cudakit.matmul(cupy.float32(2.0) * cupy.ones(()), a)
    with pytest.raises(TypeError, match="dtype"):
        cudakit.matmul(a, random_array((7, 3), np.float64))
    with pytest.raises(ValueError, match="shape"):
        cudakit.matmul(a, random_array((7, 3), np.float32), out=poisoned((5, 3), np.float32))


# ---------------------------------------------------------------------------------------------------- matvec
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((3, 40, 33), (3, 33)), ((3, 40, 33), (33,)), ((40, 33), (5, 33)),
                                    ((2, 1, 40, 33), (3, 33)), ((40, 33), (33,)), ((0, 4, 3), (3,))], ids=str)
def test_batched_matvec_equals_cupy(dtype, shapes):
    import cupy

    A, x = random_array(shapes[0], dtype), random_array(shapes[1], dtype)
    want = cupy.matmul(A, x[..., None])[..., 0]
    got = cudakit.matvec(A, x)
    assert got.shape == want.shape and got.flags.c_contiguous
    if got.size:
        assert_close(got, ref64(A, x[..., None])[..., 0], dtype, shapes[0][-1], str(shapes))


mv = importlib.import_module("cudakit.matvec")
mvp = importlib.import_module("cudakit._matvec_plan")


def test_short_matvec_rows_take_lanes_by_their_loads():
    """GPU-less: _short_rows on the row lengths its probe measured (16-byte vectors, then element loads)."""
    rows = mvp._short_rows
    assert rows(8, 4, True) == (1, 2) and rows(16, 4, True) == (2, 2)  # 2 and 4 vectors
    assert rows(20, 4, True) == (4, 1) and rows(28, 4, True) == (4, 2) and rows(60, 4, True) == (4, 2)  # 5, 7, 15
    assert rows(64, 4, True) is None and rows(32, 8, True) is None  # 16 vectors: the general rule
    assert rows(3, 4, False) == (1, 1) and rows(7, 4, False) == (2, 1) and rows(11, 4, False) == (4, 1)
    assert rows(5, 8, False) == (4, 1) and rows(23, 2, False) == (4, 2)  # about 12 bytes a lane
    assert rows(12, 4, False) is None and rows(6, 8, False) is None  # 48 bytes of elements: matvec_rows_staged
    assert mvp.takes_staged(12, 4, False, 0) and not mvp.takes_staged(11, 4, False, 0)
    assert not mvp.takes_staged(12, 4, True, 0) and not mvp.takes_staged(64, 4, False, 0)  # vectors; 256 bytes


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bmn", [(3, 40, 33), (5, 7, 64), (4, 3, 100_000), (6, 2000, 3), (2, 1, 8)], ids=str)
def test_a_batch_of_matrices_is_one_launch_of_the_fast_kernels(dtype, bmn, monkeypatch):
    """A stack of C-order matrices, each with its own vector (contiguous, strided, broadcast, misaligned), in one
    launch over the stacked rows (split plans and 16-byte loads included), as matvec and as a matmul with n = 1;
    the output poisoned first."""
    import cupy

    count, m, n = bmn
    launches = []
    monkeypatch.setattr(mv, "launch", lambda *args, run=mv.launch, **kw: launches.append(1) or run(*args, **kw))
    A = random_array((count, m, n), dtype)
    vectors = [random_array((count, n), dtype), random_array((count, 2 * n), dtype)[:, ::2],
               cupy.broadcast_to(random_array((n,), dtype), (count, n)), random_array((count * n + 1,), dtype)[1:].reshape(count, n),
               random_array((count, n + 1), dtype)[:, 1:]]
    for x in vectors:
        launches.clear()
        out = poisoned((count, m), dtype)
        assert cudakit.matvec(A, x, out=out) is out
        assert_close(out, ref64(A, x[..., None])[..., 0], dtype, n, f"{bmn} {x.strides}")
        assert launches == [1]
        out = poisoned((count, m, 1), dtype)
        cudakit.matmul(A, x[..., None], out=out)
        assert_close(out, ref64(A, x[..., None]), dtype, n, f"matmul {bmn} {x.strides}")
    # one matrix for many vectors: a matrix product
    X = random_array((count, n), dtype)
    assert_close(cudakit.matvec(A[0], X), ref64(X, A[0].T), dtype, n, f"{bmn} one matrix")


@pytest.mark.gpu
@pytest.mark.parametrize("shapes", [((24, 512, 96), (24, 96, 520)), ((96, 256, 128), (128, 264)), ((2048, 48), (48, 2048)),
                                    ((2048, 48), (2, 48, 2048))], ids=str)
def test_float32_products_on_the_wide_tile(shapes, monkeypatch):
    """float32 batches and short-k products read with 16-byte loads take _tune.WIDE_TILE (the planner's rule; the
    X3 tiles, which batches weigh beside it, off) and equal the float64 product; a batch broadcast over one operand,
    the output poisoned first."""
    from cudakit import _tune

    planned = []
    monkeypatch.setattr(mm._matmul_routes, "X3", False)
    monkeypatch.setattr(mm, "plan", lambda *args, run=mm.plan, **kw: planned.append(run(*args, **kw)) or planned[-1])
    monkeypatch.setattr(mm._matmul_batch, "_BATCH_LAUNCHES", {})  # (planned afresh)
    monkeypatch.setattr(mm._matmul_routes, "_routes", {})
    A, B = (random_array(s, np.float32) for s in shapes)
    out_shape = np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) + (A.shape[-2], B.shape[-1])
    out = poisoned(out_shape, np.float32)
    assert cudakit.matmul(A, B, out=out) is out
    assert_close(out, ref64(A, B), np.float32, A.shape[-1], str(shapes))
    assert planned and planned[-1][0] == _tune.WIDE_TILE[np.dtype(np.float32)], [p[0].name for p in planned]


@pytest.mark.gpu
def test_an_array_off_its_element_alignment_is_refused_before_any_launch():
    """An operand or out= whose first element sits at a byte that is not a multiple of its size (a view made with
    memptr at an odd offset): a ValueError naming it, for each op, before any kernel could fault on it."""
    import cupy

    def off(shape, dtype, by=2):
        dtype = np.dtype(dtype)
        raw = cupy.empty(int(np.prod(shape)) * dtype.itemsize + 8, np.uint8)
        return cupy.ndarray(shape, dtype, memptr=raw.data + by)  # (never read: refused first)

    for dtype in (np.float32, np.float64):
        A, B, x = random_array((5, 7), dtype), random_array((7, 3), dtype), random_array((7,), dtype)
        with pytest.raises(ValueError, match="A is not aligned to its"):
            cudakit.matmul(off((5, 7), dtype), B)
        with pytest.raises(ValueError, match="B is not aligned to its"):
            cudakit.matmul(A, off((7, 3), dtype))
        with pytest.raises(ValueError, match="out is not aligned to its"):
            cudakit.matmul(A, B, out=off((5, 3), dtype))
        with pytest.raises(ValueError, match="x is not aligned to its"):
            cudakit.matvec(A, off((7,), dtype))
        with pytest.raises(ValueError, match="a is not aligned to its"):
            cudakit.dot(off((7,), dtype), x)
        with pytest.raises(ValueError, match="out is not aligned to its"):
            cudakit.dot(x, x, out=off((), dtype))
        with pytest.raises(ValueError, match="out is not aligned to its"):
            cudakit.transpose(A, out=off((7, 5), dtype))
        with pytest.raises(ValueError, match="a is not aligned to its"):
            cudakit.transpose(off((5, 7), dtype))
    assert bool(cupy.allclose(cudakit.matmul(A, B), A @ B))  # (the ops still run on aligned arrays afterwards)
