import importlib
import json
import os

import numpy as np
import pytest

import cudakit
from cudakit import _check, _tune
from cudakit.bench import timing
from conftest import assert_close, matmul_ref64 as ref64, on_a_side_stream, poisoned, random_array

mm = importlib.import_module("cudakit.matmul")  # the module (cudakit.matmul is the function)

VARIANTS = [v.name for v in cudakit.variants("matmul") if not v.tensor_core]  # (those: test_matmul_tc.py)
DTYPES = [np.float32, np.float64]
# (m, k, n): ones, primes, 4097, tall and wide, long and short inner dimensions
SHAPES = [(1, 1, 1), (1, 4097, 1), (7, 13, 5), (31, 33, 35), (64, 64, 64), (97, 101, 103), (128, 1, 128),
          (1, 128, 128), (4097, 3, 5), (3, 5, 4097), (257, 4097, 129)]
ORDERS = [("C", "C"), ("C", "F"), ("F", "C"), ("F", "F")]


def operand(shape, dtype, layout):
    """A fresh random operand of `shape` in one of the layouts the API must read (values never zero)."""
    r, c = shape
    if layout in ("C", "F"):
        return random_array(shape, dtype, layout)
    if layout == "T":  # the transposed view of a C-order array: F-contiguous, no copy made
        return random_array((c, r), dtype).T
    if layout == "strided":  # no unit stride at all: the kernels get a copy
        return random_array((r, 2 * c), dtype)[:, ::2]
    if layout == "padded":  # rows further apart than their length: read in place with ld > c
        return random_array((r, c + 5), dtype)[:, :c]
    if layout == "offset":  # padded and one element off 16-byte alignment: the element-load path
        return random_array((r + 1, c + 3), dtype)[1:, 1:c + 1]
    raise AssertionError(layout)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_matches_float64(variant, dtype, shape):
    m, k, n = shape
    for oa, ob in ORDERS:
        A, B = operand((m, k), dtype, oa), operand((k, n), dtype, ob)
        out = poisoned((m, n), dtype)
        res = cudakit.matmul(A, B, out=out, variant=variant)
        assert res is out
        assert_close(res, ref64(A, B), dtype, k, f"{variant} {shape} {oa}{ob}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_views_and_returned_array(variant, dtype):
    layouts = [("T", "T"), ("T", "C"), ("strided", "padded"), ("padded", "strided"), ("offset", "offset"),
               ("offset", "T"), ("C", "offset")]
    for m, k, n in [(33, 35, 31), (130, 67, 129), (5, 300, 7)]:
        for la, lb in layouts:
            A, B = operand((m, k), dtype, la), operand((k, n), dtype, lb)
            res = cudakit.matmul(A, B, variant=variant)
            assert res.shape == (m, n) and res.dtype == dtype and res.flags.c_contiguous
            assert_close(res, ref64(A, B), dtype, k, f"{variant} {m}x{k}x{n} {la}/{lb}")


def _device_tiles(dtype):
    import cupy

    cc = _tune.compute_capability(cupy.cuda.runtime.getDevice())
    return [*_tune.candidates(dtype, cc), *_tune.extra_tiles(dtype)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_tile_configuration_on_odd_shapes(dtype):
    """The fast variant runs whichever tile is tuned: every candidate must be right on every edge case."""
    for tile in _device_tiles(dtype):
        for m, k, n in [(1, 1, 1), (7, 13, 5), (129, 17, 257), (300, 129, 131), (2, 515, 3)]:
            for oa, ob in ORDERS + [("offset", "padded")]:
                A, B = operand((m, k), dtype, oa), operand((k, n), dtype, ob)
                out = poisoned((m, n), dtype)
                mm.run_tile(tile, A, B, out)
                assert_close(out, ref64(A, B), dtype, k, f"{tile.name} {m}x{k}x{n} {oa}{ob}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_tile_on_whole_slices(dtype):
    """k a multiple of the slice depth: interior tiles take the k loop without edge checks, the edge tiles around
    them the checked one, in one grid, with 16-byte and element loads."""
    for tile in _device_tiles(dtype):
        m, n, k = 2 * tile.bm + 3, 2 * tile.bn + 5, 24 * tile.bk
        for oa, ob in ORDERS + [("offset", "padded")]:
            A, B = operand((m, k), dtype, oa), operand((k, n), dtype, ob)
            out = poisoned((m, n), dtype)
            mm.run_tile(tile, A, B, out)
            assert_close(out, ref64(A, B), dtype, k, f"{tile.name} {m}x{k}x{n} {oa}{ob}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_on_big_matrices(dtype):
    import cupy

    device = cupy.cuda.runtime.getDevice()
    large, small = _tune.tiles(device, np.dtype(dtype))
    for m, k, n in [(1031, 1029, 1027), (2048 + 3, 1000, 2048 + 5)]:  # misaligned: padded (FP32), in place (FP64 DMMA)
        for oa, ob in [("C", "C"), ("F", "C"), ("C", "F"), ("offset", "T"), ("T", "offset")]:
            A, B = operand((m, k), dtype, oa), operand((k, n), dtype, ob)
            res = cudakit.matmul(A, B)
            assert_close(res, ref64(A, B), dtype, k, f"fast {m}x{k}x{n} {oa}{ob}")
    A, B = operand((1500, 700), dtype, "C"), operand((700, 1300), dtype, "C")
    for tile in (large, small):  # both tiles of the active configuration, whatever the grid picks
        out = poisoned((1500, 1300), dtype)
        mm.run_tile(tile, A, B, out)
        assert_close(out, ref64(A, B), dtype, 700, tile.name)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_stream_k_tail_is_right_deterministic_and_leaves_its_counters_at_zero(dtype):
    """Grids past whole waves: a few tiles past one (every block in the stream-K tail) and half a wave past two
    (whole-tile blocks, then the tail). Right in every layout, bit-identical when repeated, reusable back to back."""
    import cupy

    device = cupy.cuda.runtime.getDevice()
    for tile in [t for t in _device_tiles(dtype) if t.kind == "simt" and t.ksplit == 1 and t.stages == 2]:
        slots = mm.resident_tiles(tile, np.dtype(dtype), device)
        for rows, k in [(slots // 8 + 1, 37 * tile.bk + 5), ((5 * slots // 2) // 8 + 1, 40 * tile.bk)]:
            # 8 * rows tiles: a few past one wave, then half a wave past two (with whole slices only)
            m, n = rows * tile.bm - 3, 8 * tile.bn - 5
            tail_start, sk_blocks = mm.stream_k_tail(rows * 8, slots, k, tile.bk)
            assert sk_blocks == slots and tail_start == rows * 8 - slots - rows * 8 % slots, (tile.name, slots)
            for oa, ob in ORDERS + [("offset", "T")]:
                A, B = operand((m, k), dtype, oa), operand((k, n), dtype, ob)
                outs = [poisoned((m, n), dtype) for _ in range(3)]
                for out in outs:  # back to back on one stream: each launch finds its counters at zero
                    mm.run_tile(tile, A, B, out, split=True)
                assert_close(outs[0], ref64(A, B), dtype, k, f"{tile.name} stream-K {m}x{k}x{n} {oa}{ob}")
                for out in outs[1:]:
                    assert bool(cupy.all(out == outs[0])), f"{tile.name} {oa}{ob}: the stream-K sum changed"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_split_sum_adds_every_partial_product_in_a_fixed_order(dtype):
    """partials_adder: 1 to a few hundred partial results (fewer, as many and more than a block's rows), of sizes
    ending mid-run of a block and past one resident round of blocks (blocks of 8, 2 and 1 rows). Every output is its
    partials' sum (each element checked), bit-identical when repeated."""
    import cupy

    from cudakit import _matmul_routes

    for size in (1, 33, 7808, 100_003, 1_000_003):
        for splits in (1, 2, 7, 8, 9, 245):
            if size * splits > 2**26:
                continue
            partials = random_array((splits, size), dtype)
            outs = [poisoned((size,), dtype) for _ in range(2)]
            for out in outs:
                _matmul_routes.partials_adder(out, splits)(out.data.ptr, partials.data.ptr)
            ref = partials.astype(np.float64).sum(axis=0)
            worst = float(cupy.max(cupy.abs(outs[0] - ref) / ref))  # (NaN, an unwritten element, fails)
            assert worst <= _check.tolerance(dtype, splits), (size, splits, worst)
            assert bool(cupy.all(outs[1] == outs[0])), (size, splits)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["C", "F", "offset", "padded", "T"])
def test_aligned_operand_pads_misaligned_layouts_and_the_padding_is_never_read(dtype, layout):
    import cupy

    A, B = operand((67, 45), dtype, layout), operand((45, 71), dtype, "offset" if layout == "C" else "C")
    a, b = mm.aligned_operand(A, 0), mm.aligned_operand(B, 1)
    for x, padded in ((A, a), (B, b)):
        assert padded.shape == x.shape and bool((padded == x).all())
        _, _, ld = mm._layout(padded, 0 if x is A else 1)
        assert padded.data.ptr % 16 == 0 and ld % (16 // x.itemsize) == 0, (layout, ld)
        if padded is not x:  # fill the padding with NaN: a kernel that read it would return NaN
            base = padded.base
            copy = padded.copy()
            base.fill(np.nan)
            padded[...] = copy
    large, _ = _tune.tiles(cupy.cuda.runtime.getDevice(), np.dtype(dtype))
    out = poisoned((67, 71), dtype)
    mm.run_tile(large, a, b, out)
    assert_close(out, ref64(A, B), dtype, 45, f"padded {layout}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_aligned_operand_copies_broadcast_rows_off_16_bytes(dtype):
    """Rows that overlap (a broadcast row starting off 16 bytes) cannot take the pitched copy: the elementwise one."""
    import cupy

    row = random_array(46, dtype)[1:]
    A = cupy.broadcast_to(row, (67, 45))
    a = mm.aligned_operand(A, 0)
    assert a.data.ptr % 16 == 0 and bool((a == A).all())


@pytest.mark.gpu
def test_fast_plans_tiles_and_splits_by_shape():
    import cupy

    device = cupy.cuda.runtime.getDevice()
    f32 = np.dtype(np.float32)
    large, small = _tune.tiles(device, f32)
    assert mm.plan(device, f32, 8192, 8192, 8192) == (large, 1, 8192)  # a full grid: the large tile, k whole
    assert mm.plan(device, f32, 4096, 4096, 64)[0] == _tune.SMALL_K_TILE[f32]  # short k
    wide = _tune.WIDE_TILE[f32]  # short k read with 16-byte loads: the wide tile where its grid fills the SMs
    assert mm.plan(device, f32, 4096, 4096, 64, vectors=True)[0] == wide
    assert mm.plan(device, f32, 512, 512, 32, vectors=True)[0] == _tune.SMALL_K_TILE[f32]
    assert mm.plan(device, f32, 4096, 4096, 200, vectors=True)[0] != wide  # mid k, one product
    assert mm.plan(device, f32, 512, 512, 512, 64, vectors=True) == (wide, 1, 512)  # a batch: the wide tile
    assert mm.plan(device, f32, 512, 512, 512, 64)[0] != wide
    assert mm.plan(device, f32, 512, 512, 512, 2, vectors=True)[0] != wide  # a grid short of a round
    tile, splits, depth = mm.plan(device, f32, 128, 128, 65536)  # one tile's worth of C: k split
    assert splits >= _tune.MIN_SPLITS and (splits - 1) * depth < 65536 <= splits * depth
    for dtype in (f32, np.dtype(np.float64)):  # a side of C up to 16 with a long k: a narrow tile, k split
        narrow_rows, narrow_columns = _tune.NARROW_TILES[dtype][:2]
        tile, splits, _ = mm.plan(device, dtype, 327, 9, 486410)
        assert tile == narrow_rows and splits > 1, tile.name
        assert mm.plan(device, dtype, 9, 327, 486410)[0] == narrow_columns


def test_the_wide_tile_is_planned_by_its_rule(monkeypatch):
    """_tune.WIDE_TILE's rule on a modelled H100 (no GPU: 132 SMs, each tile's min_blocks resident an SM): float32
    read with 16-byte loads, one product with k of WIDE_MIN_K to WIDE_SHORT_MAX_K where the model prefers it, a
    batch with k up to WIDE_BATCH_MAX_K whose grid fills a round; never for element loads, mid or very short k, a
    small grid or a batch short of a round."""
    f32 = np.dtype(np.float32)
    config = _tune.default_config(f32, 90)
    pair = _tune._BY_NAME[config["large"]], _tune._BY_NAME[config["small"]]
    monkeypatch.setattr(_tune, "tiles", lambda device_id, dtype: pair)
    monkeypatch.setattr(mm, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(mm, "resident_tiles", lambda tile, dtype, device_id: 132 * tile.min_blocks)
    monkeypatch.setattr(mm, "_compute_capability", lambda device_id: 90)
    wide, short_k = _tune.WIDE_TILE[f32], _tune.SMALL_K_TILE[f32]
    mm._plan.cache_clear()
    try:
        assert mm.plan(0, f32, 4096, 4096, 64, vectors=True)[0] == wide
        assert mm.plan(0, f32, 2048, 2048, 32, vectors=True)[0] == wide
        assert mm.plan(0, f32, 4096, 4096, 64)[0] == short_k  # element loads
        assert mm.plan(0, f32, 4096, 4096, 16, vectors=True)[0] == short_k  # under WIDE_MIN_K
        assert mm.plan(0, f32, 512, 512, 32, vectors=True)[0] == short_k  # a grid of 16 wide tiles
        assert mm.plan(0, f32, 4096, 4096, 200, vectors=True)[0] != wide  # mid k, one product
        assert mm.plan(0, f32, 512, 512, 512, 64, vectors=True) == (wide, 1, 512)  # a batch
        assert mm.plan(0, f32, 17, 240, 212, 2281, vectors=True)[0] != wide  # a batch of a narrow C
        assert mm.plan(0, f32, 512, 512, 512, 64)[0] != wide
        assert mm.plan(0, f32, 512, 512, 512, 2, vectors=True)[0] != wide  # 32 tiles: short of a round
        assert mm.plan(0, f32, 512, 512, 2048, 64, vectors=True)[0] != wide  # past WIDE_BATCH_MAX_K
    finally:
        mm._plan.cache_clear()


def test_split_only_tiles_are_planned_with_k_split_alone(monkeypatch):
    """_tune.SPLIT_TILES on a modelled H100 (no GPU, as above): planned only for one product with k split in at
    least MIN_SPLITS runs, never whole, for a batch or a short k; taken where the session-34 A/B measured them
    faster (143 x 219950 x 106, 4457 x 4021 x 151) and left where they ran slower (2551 x 2053 x 653)."""
    f32 = np.dtype(np.float32)
    config = _tune.default_config(f32, 90)
    monkeypatch.setattr(_tune, "tiles", lambda device_id, dtype: (_tune._BY_NAME[config["large"]],
                                                                  _tune._BY_NAME[config["small"]]))
    monkeypatch.setattr(mm, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(mm, "resident_tiles", lambda tile, dtype, device_id: 132 * tile.min_blocks)
    monkeypatch.setattr(mm, "_compute_capability", lambda device_id: 90)
    split_only = _tune.SPLIT_TILES[f32]
    mm._plan.cache_clear()
    try:
        taken = 0
        for m in (64, 143, 500, 1009, 4457):
            for n in (36, 106, 151, 283, 2048):
                for k in (65, 300, 1213, 4021, 52000, 219950):
                    for count in (1, 8):
                        tile, splits, depth = mm.plan(0, f32, m, n, k, count, vectors=True)
                        if tile in split_only:
                            taken += 1
                            assert count == 1 and splits >= _tune.MIN_SPLITS and (splits - 1) * depth < k, \
                                (m, n, k, splits, depth)
        assert taken > 0
        assert mm.plan(0, f32, 143, 106, 219950, vectors=True)[0] in split_only
        assert mm.plan(0, f32, 4457, 151, 4021, vectors=True)[0] in split_only
        assert mm.plan(0, f32, 2551, 653, 2053, vectors=True)[0] not in split_only
    finally:
        mm._plan.cache_clear()


def test_cudakit_fp32_x3_0_keeps_float32_on_the_register_tiles():
    """CUDAKIT_FP32_X3=0, read at import, turns the X3 offer off (a fresh interpreter: the flag is read once)."""
    import subprocess
    import sys

    code = "from cudakit import _matmul_routes as r; print(r.X3)"
    for value, want in (("0", "False"), ("1", "True"), ("", "True")):
        env = dict(os.environ, CUDAKIT_FP32_X3=value)
        got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert got.stdout.strip() == want, (value, got.stdout, got.stderr)


def test_x3_tiles_are_planned_for_fp32_products_where_offered(monkeypatch):
    """matmul_tc.X3_TILES on a modelled H100 (no GPU, as above): weighed only where the route offers them (x3 not
    None) for FP32 products with k past SMALL_K or a short k (x3_short_k: X3 alone; a batch's k whole), their split
    runs at least X3_MIN_DEPTH deep;
    taken for the products the probes measured faster (4096^3 1.20x, 4787 x 911 x 2579 1.33x the register tiles),
    left for 512^3 (a split of 128-deep runs measured 0.59x), where their copies cost more than they gain, for FP64
    and on GPUs outside X3_ARCHS."""
    from cudakit import matmul_tc

    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    configs = {dt: _tune.default_config(dt, 90) for dt in (f32, f64)}
    monkeypatch.setattr(_tune, "tiles", lambda device_id, dtype: (_tune._BY_NAME[configs[dtype]["large"]],
                                                                  _tune._BY_NAME[configs[dtype]["small"]]))
    monkeypatch.setattr(mm, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(mm, "resident_tiles", lambda tile, dtype, device_id: 132 * tile.min_blocks)
    monkeypatch.setattr(mm, "_compute_capability", lambda device_id: 90)
    monkeypatch.setattr(matmul_tc, "resident", lambda tile, device_id: 132 * 2)
    mm._plan.cache_clear()
    try:
        taken = 0
        for m, n, k in [(4096, 4096, 4096), (4787, 2579, 911), (1009, 283, 1213), (143, 106, 219950), (512, 512, 512),
                        (2048, 2048, 65), (2048, 2048, 64), (512, 768, 1000), (768, 768, 700)]:
            for count in (1, 8):
                tile, splits, depth = mm.plan(0, f32, m, n, k, count, vectors=True, x3=(0.0, 0.0))
                if tile in matmul_tc.X3_TILES:
                    taken += 1
                    assert k > _tune.SMALL_K or matmul_tc.x3_short_k(m, n, k), (m, n, k)
                    assert count == 1 or splits == 1, (m, n, k, count, splits)
                    assert splits == 1 or depth >= matmul_tc.X3_MIN_DEPTH, (m, n, k, splits, depth)
                assert mm.plan(0, f32, m, n, k, count, vectors=True)[0] not in matmul_tc.X3_TILES
        assert taken > 0
        assert mm.plan(0, f32, 4096, 4096, 4096, vectors=True, x3=(0.0, 0.0))[0] in matmul_tc.X3_TILES
        assert mm.plan(0, f32, 4787, 2579, 911, vectors=True, x3=(0.0, 0.0))[0] in matmul_tc.X3_TILES
        assert mm.plan(0, f32, 512, 512, 512, vectors=True, x3=(0.0, 0.0))[0] not in matmul_tc.X3_TILES
        # a short k (session 38: 1.3-2.7x the short-k and wide tiles), not a shallower one nor a narrow C
        for count in (1, 8):
            assert mm.plan(0, f32, 4096, 4096, 32, count, vectors=True, x3=(0.0, 0.0))[0] in matmul_tc.X3_TILES
            for m, n, k in ((4096, 4096, matmul_tc.X3_MIN_K - 1), (4096, _tune.NARROW_SIDE, 32)):
                assert mm.plan(0, f32, m, n, k, count, vectors=True, x3=(0.0, 0.0))[0] not in matmul_tc.X3_TILES
        # a grid of one to two rounds has k cut to fill the second (3372 x 58625 x 935: 1.26x whole), one of more not
        assert mm.plan(0, f32, 3372, 935, 58625, vectors=True, x3=(0.0, 0.0))[1] > 1
        assert mm.plan(0, f32, 1297, 4931, 1019, vectors=True, x3=(0.0, 0.0))[1] == 1
        # a batch that fills the GPU, k whole, on 16 bytes or off them (the misaligned build's slowdown)
        for copies in ((0.0, 0.0), (0.0, np.inf)):
            assert mm.plan(0, f32, 512, 512, 512, 64, vectors=True, x3=copies)[0] in matmul_tc.X3_TILES
        # a small C with a long k, its runs in one launch (session 36: 1.13x the register tiles' split)
        assert mm.plan(0, f32, 81, 93, 1004304, vectors=True, x3=(0.0, 0.0))[0] in matmul_tc.X3_TILES
        assert mm.plan(0, f32, 4787, 2579, 911, vectors=True, x3=(1.0, 0.0))[0] not in matmul_tc.X3_TILES  # (copies)
        # lines off 16 bytes whose padded copies would cost 1 s: the misaligned build's slowdown instead
        assert mm.plan(0, f32, 4787, 2579, 911, vectors=True, x3=(0.0, 1.0))[0] in matmul_tc.X3_TILES
        assert mm.plan(0, f64, 4096, 4096, 4096, pipelined=False, vectors=True,
                       x3=(0.0, 0.0))[0] not in matmul_tc.X3_TILES
        for cc in (75, 86, 89):  # (no TF32, or TF32 at about the FP32 rate)
            monkeypatch.setattr(mm, "_compute_capability", lambda device_id, cc=cc: cc)
            mm._plan.cache_clear()
            assert mm.plan(0, f32, 4096, 4096, 4096, vectors=True, x3=(0.0, 0.0))[0] not in matmul_tc.X3_TILES, cc
    finally:
        mm._plan.cache_clear()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_zero_sizes(variant):
    import cupy

    A, B = random_array((5, 0), np.float32), random_array((0, 7), np.float32)
    out = poisoned((5, 7), np.float32)
    res = cudakit.matmul(A, B, out=out, variant=variant)  # k == 0: a sum of nothing
    assert res is out and bool((res == 0).all())
    res = cudakit.matmul(random_array((0, 4), np.float64), random_array((4, 3), np.float64), variant=variant)
    assert res.shape == (0, 3) and res.dtype == np.float64
    res = cudakit.matmul(random_array((3, 4), np.float32), random_array((4, 0), np.float32), variant=variant)
    assert res.shape == (3, 0)
    assert cudakit.matmul(cupy.empty((0, 0), np.float32), cupy.empty((0, 0), np.float32), variant=variant).shape == (0, 0)


@pytest.mark.gpu
def test_matmul_on_a_non_default_stream():
    import cupy

    A, B = random_array((300, 200), np.float32), random_array((200, 100), np.float32)
    res = on_a_side_stream(lambda out: cudakit.matmul(A, B, out=out), cupy.empty((300, 100), np.float32))
    assert_close(res, ref64(A, B), np.float32, 200)


@pytest.mark.gpu
def test_matmul_check_mode_catches_a_wrong_result(monkeypatch):
    from cudakit import _variants

    A, B = random_array((40, 30), np.float32), random_array((30, 20), np.float32)
    cudakit.matmul(A, B, check=True)  # a right result passes
    fast = _variants.lookup("matmul", "fast")
    broken = _variants.Variant("matmul", "fast", fast.lesson, lambda A, B, out: fast.run(A, B[:, ::-1], out))
    monkeypatch.setitem(_variants._TABLE["matmul"], "fast", broken)
    with pytest.raises(_check.CheckError, match="relative error"):
        cudakit.matmul(A, B, check=True)
    monkeypatch.setattr(_check, "CHECK_BY_DEFAULT", True)  # CUDAKIT_CHECK=1 at import
    with pytest.raises(_check.CheckError):
        cudakit.matmul(A, B)


@pytest.mark.gpu
def test_matmul_bad_inputs():
    import cupy

    A, B = random_array((4, 5), np.float32), random_array((5, 6), np.float32)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.matmul(np.ones((4, 5), np.float32), B)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.matmul(A, [[1.0] * 6] * 5)
    with pytest.raises(ValueError, match=r"\(4, 5\).*\(6, 5\)"):
        cudakit.matmul(A, random_array((6, 5), np.float32))
    with pytest.raises(ValueError, match="0-d"):
        cudakit.matmul(A[0, 0], B)
    with pytest.raises(ValueError, match=r"columns \(5\) must equal B's rows \(6\)"):
        cudakit.matmul(A, B.reshape(5, 6, 1))
    with pytest.raises(ValueError, match="do not broadcast"):
        cudakit.matmul(A.reshape(1, 2, 2, 5), random_array((3, 5, 6), np.float32))
    with pytest.raises(TypeError, match="one dtype"):
        cudakit.matmul(A, B.astype(np.float64))
    with pytest.raises(TypeError, match="unsupported dtype"):
        cudakit.matmul(A.astype(np.int32), B.astype(np.int32))
    with pytest.raises(TypeError, match="unsupported dtype"):
        cudakit.matmul(A.astype(np.complex64), B.astype(np.complex64))
    with pytest.raises(TypeError, match="'cu_matmul' takes float32, float64"):  # a seed has no 16-bit kernel
        cudakit.matmul(A.astype(np.float16), B.astype(np.float16), variant="cu_matmul")
    with pytest.raises(TypeError, match="computes float32 in TF32: pass tf32=True"):
        cudakit.matmul(A, B, variant="wmma")
    with pytest.raises(TypeError, match="tf32=True applies to float32"):
        cudakit.matmul(A.astype(np.float64), B.astype(np.float64), tf32=True)
    with pytest.raises(TypeError, match="'warp_tiled' takes .* with TF32"):
        cudakit.matmul(A, B, variant="warp_tiled", tf32=True)
    with pytest.raises(ValueError, match="valid variants: cu_matmul"):
        cudakit.matmul(A, B, variant="nope")
    with pytest.raises(ValueError, match="shape"):
        cudakit.matmul(A, B, out=cupy.empty((4, 5), np.float32))
    with pytest.raises(TypeError, match="dtype"):
        cudakit.matmul(A, B, out=cupy.empty((4, 6), np.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        cudakit.matmul(A, B, out=cupy.empty((6, 4), np.float32).T)
    square = random_array((5, 5), np.float32)
    with pytest.raises(ValueError, match="overlaps"):
        cudakit.matmul(square, square, out=square)


@pytest.mark.gpu
def test_tune_searches_checks_and_caches(monkeypatch, tmp_path):
    """A quick tune on tiny shapes: it stores a winner per dtype and never picks a tile whose result is wrong."""
    import cupy

    cache = tmp_path / "tune.json"
    monkeypatch.setenv(_tune.CACHE_ENV, str(cache))
    monkeypatch.setattr(_tune, "TUNE_SHAPES", {dt: [(256, 256, 128), (64, 64, 32)] for dt in (_tune.F32, _tune.F64)})
    monkeypatch.setattr(_tune, "replay", lambda fn, reps=10, rounds=5: (fn(), timing.Stats(1e-3, 1e-3, 1e-3, 5))[1])
    device = cupy.cuda.runtime.getDevice()
    bad = _tune.candidates(np.float32, _tune.compute_capability(device))[0]
    real_run = mm.run_tile

    def run_tile(tile, A, B, out, split=False):
        real_run(tile, A, B, out, split)
        if tile == bad:
            out[0, 0] += 1000.0  # a wrong element: the check must reject this candidate

    monkeypatch.setattr(mm, "run_tile", run_tile)
    lines = []

    class Console:
        def print(self, text):
            lines.append(text)

    result = _tune.tune(Console())
    assert set(result) == {"float32", "float64"}
    assert any("WRONG" in l and bad.name in l for l in lines)
    assert bad.name not in result["float32"].values()
    stored = json.loads(cache.read_text())["devices"][_tune.device_key(device)]
    assert stored["float32"] == result["float32"]
    for dtype in DTYPES:
        config, source = _tune.active_config(device, dtype)
        assert source == "tuned" and config == result[np.dtype(dtype).name]
        assert _tune.tiles(device, np.dtype(dtype))[0].name == config["large"]
    _tune.tiles.cache_clear()


# ---- GPU-less -------------------------------------------------------------------------------------------------


@pytest.fixture
def cache_file(monkeypatch, tmp_path):
    path = tmp_path / "sub" / "matmul_tune.json"
    monkeypatch.setenv(_tune.CACHE_ENV, str(path))
    yield path
    _tune.tiles.cache_clear()


def test_tune_cache_round_trip(cache_file):
    key = "Fake GPU (sm_90)"
    f32 = _tune.candidates(np.float32, 90)
    config = {"large": f32[2].name, "small": f32[1].name}
    assert _tune.lookup(key, np.float32, 90) == (_tune.default_config(np.float32, 90), "default")
    _tune.store(key, np.float32, config)
    assert cache_file.is_file()
    assert _tune.lookup(key, np.float32, 90) == (config, "tuned")
    assert _tune.lookup(key, np.float64, 90)[1] == "default"  # nothing stored for float64
    assert _tune.lookup("Other GPU (sm_80)", np.float32, 80)[1] == "default"
    f64 = {"large": _tune.candidates(np.float64, 90)[0].name, "small": _tune.candidates(np.float64, 90)[1].name}
    _tune.store(key, np.float64, f64)
    assert _tune.lookup(key, np.float32, 90) == (config, "tuned")  # the first entry survives the second store
    assert _tune.lookup(key, np.float64, 90) == (f64, "tuned")


def test_tune_cache_rejects_bad_entries(cache_file):
    key = "Fake GPU (sm_70)"
    dmma = next(t for t in _tune.CANDIDATES[_tune.F64] if t.kind == "dmma")
    _tune.store(key, np.float64, {"large": dmma.name, "small": dmma.name})
    assert _tune.lookup(key, np.float64, 70) == (_tune.default_config(np.float64, 70), "default")  # no DMMA on sm_70
    _tune.store(key, np.float32, {"large": "no_such_tile", "small": "no_such_tile"})
    assert _tune.lookup(key, np.float32, 70)[1] == "default"
    cache_file.write_text("{not json")
    assert _tune.lookup(key, np.float32, 70)[1] == "default"
    cache_file.write_text(json.dumps({"version": 999, "devices": {}}))
    assert _tune.lookup(key, np.float32, 70)[1] == "default"


def test_active_config_uses_the_device_key(cache_file, monkeypatch):
    monkeypatch.setattr(_tune, "device_key", lambda device_id: f"Fake GPU {device_id} (sm_90)")
    monkeypatch.setattr(_tune, "compute_capability", lambda device_id: 90)
    assert _tune.active_config(0, np.float32) == (_tune.default_config(np.float32, 90), "default")
    config = {"large": _tune.candidates(np.float32, 90)[1].name, "small": _tune.candidates(np.float32, 90)[0].name}
    _tune.store("Fake GPU 0 (sm_90)", np.float32, config)
    assert _tune.active_config(0, np.float32) == (config, "tuned")
    assert _tune.active_config(1, np.float32)[1] == "default"
    assert [t.name for t in _tune.tiles(0, np.dtype(np.float32))] == [config["large"], config["small"]]


def test_cache_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(_tune.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _tune.cache_path() == tmp_path / "xdg" / "cudakit" / "matmul_tune.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _tune.cache_path() == tmp_path / "home" / ".cache" / "cudakit" / "matmul_tune.json"
    monkeypatch.setenv(_tune.CACHE_ENV, str(tmp_path / "x.json"))
    assert _tune.cache_path() == tmp_path / "x.json"


def test_default_tiles_and_the_search_space():
    names = {t.name for tiles in _tune.CANDIDATES.values() for t in tiles}
    assert len(names) == sum(len(t) for t in _tune.CANDIDATES.values())  # names are unique
    for cc in (70, 80, 90):
        for dtype in DTYPES:
            config = _tune.default_config(dtype, cc)
            usable = {t.name for t in _tune.candidates(dtype, cc)}
            assert config["large"] in usable and config["small"] in usable
    assert all(t.kind == "simt" for t in _tune.candidates(np.float32, 90))  # FP32 never goes near the tensor cores
    assert _tune.default_config(np.float64, 90)["large"].startswith("dmma")
    assert _tune.default_config(np.float64, 70)["large"].startswith("simt")


def test_every_tile_is_compiled_by_the_compile_check():
    groups = {e for g in mm.instantiation_groups() for e in g}
    for dtype, tiles in _tune.CANDIDATES.items():
        for tile in tiles + _tune.extra_tiles(dtype):
            assert set(mm.tile_instantiations(tile, dtype)) <= groups
    for tiles in (mm.BLOCKTILE_2D, mm.WARP_TILED, mm.DOUBLE_BUFFERED):
        for dtype, tile in tiles.items():
            assert set(mm.tile_instantiations(tile, dtype)) <= groups


def test_rebased_launches_move_each_address_with_its_operand(monkeypatch):
    """_compile.rebased: launches built on one set of addresses run on another, each of the three leading addresses
    moved as far as its base moved, the other arguments and the shared memory kept (no GPU: launch() recorded)."""
    from cudakit import _compile

    made = []
    monkeypatch.setattr(_compile, "launch", lambda fn, grid, block, args, smem: made.append((fn, grid, block, args, smem)))
    launches = [("f", (2, 1, 1), (128,), (1000, 5000, 9000, 7, 8), 64), ("g", (1,), (32,), (1016, 5160, 9800, 3), 0)]
    run = _compile.rebased(launches, 1000, 5000, 9000)
    run(20_000, 3000, 96)
    assert made == [("f", (2, 1, 1), (128,), (20_000, 3000, 96, 7, 8), 64),
                    ("g", (1,), (32,), (20_016, 3160, 896, 3), 0)]


def test_stream_k_tail_takes_a_short_last_wave_and_a_wave_more():
    assert mm.stream_k_tail(1024, 264, 4096, 16) == (528, 264)  # 4096^3 on an H100: 232 tiles past 3 waves
    assert mm.stream_k_tail(1089, 264, 4099, 16) == (792, 264)  # 4097 x 4099: 33 tiles past 4 waves
    assert mm.stream_k_tail(256, 264, 4096, 16) == (256, 0)  # under one wave: the small tile's case
    assert mm.stream_k_tail(528, 264, 4096, 16) == (528, 0)  # whole waves
    assert mm.stream_k_tail(527, 264, 4096, 16) == (527, 0)  # a last wave 263 / 264 full: too little to gain
    assert mm.stream_k_tail(265, 264, 100, 16) == (265, 0)  # too little k to share
    for tiles in range(265, 3000, 7):
        tail_start, sk_blocks = mm.stream_k_tail(tiles, 264, 4096, 16)
        if sk_blocks:  # every stream-K block's run is at least a tile: a tile is cut at most once
            assert sk_blocks == 264 and tiles - tail_start >= sk_blocks and tail_start % 264 == 0, tiles


def test_a_batch_of_small_products_takes_the_small_tile():
    """A batch's grid covers the GPU many times over, but a 32 x 54 product in a 128 x 128 tile is mostly padding:
    the model gives it the small tile; products the large tile fits closely keep it, batched or not."""
    f32 = _tune.CANDIDATES[_tune.F32]
    large, small = f32[0], f32[6]

    def faster(m, n, k, count):
        seconds = {t: _tune.product_seconds(t, m, n, k, 1, 132 * t.min_blocks, 132, 4, count=count)
                   for t in (large, small)}
        return min(seconds, key=seconds.get)

    assert faster(32, 54, 128, 2965) is small
    assert faster(512, 512, 512, 64) is large
    assert faster(4097, 4099, 4096, 1) is large


def test_tune_scores_the_pair_as_choose_will_run_it():
    """Session 2's H100 tune picked 128x256 as the large tile on 4096^3 alone; at 2048^3 its 128 blocks leave SMs
    idle, so the small tile ran there at a third of the speed. Scored pair by pair, the 128x128 tile wins."""
    f32 = _tune.CANDIDATES[_tune.F32]
    t128, t256, small = f32[0], f32[2], f32[6]
    shapes = [(512, 512, 512), (2048, 2048, 2048), (4096, 4096, 4096)]
    rates = {t128: dict(zip(shapes, (14.0, 42.9, 44.2))),
             t256: dict(zip(shapes, (9.0, 44.0, 45.0))),
             small: dict(zip(shapes, (16.5, 28.0, 30.0)))}
    assert _tune.choose(t256, small, 2048, 2048, 132) is small  # 16 x 8 blocks < 132 SMs
    assert _tune.choose(t128, small, 2048, 2048, 132) is t128
    assert _tune.best_pair(rates, 132) == (t128, small)
    rates[t256][(2048, 2048, 2048)] = rates[small][(2048, 2048, 2048)] = 60.0  # now 2048^3 costs it nothing
    assert _tune.best_pair(rates, 132) == (t256, small)


@pytest.mark.gpu
def test_tf32_follows_cupys_compute_type_unless_told():
    """tf32=None does what cupy.matmul does: TF32 when CuPy's float32 compute type is TF32 (what CUPY_TF32=1
    selects), true FP32 otherwise; tf32=False keeps FP32 either way. Told apart by A's value 1 + 2^-20, which FP32
    keeps and TF32 (11 significant bits, truncated or rounded) takes to 1: with k = 8 every partial sum j (1 + 2^-20)
    is exact in float32, so FP32 gives k (1 + 2^-20) exactly and TF32 gives k."""
    import cupy
    from cupy._core import _routines_linalg as linalg

    if int(cupy.cuda.Device().compute_capability) < 80:
        pytest.skip("TF32 needs sm_80")
    k, eps = 8, 2.0 ** -20
    A = cupy.full((130, k), 1 + eps, np.float32)
    B = cupy.ones((k, 150), np.float32)
    before = linalg.get_compute_type(np.float32)
    try:
        for compute_type, tf32, expect_tf32 in ((linalg.COMPUTE_TYPE_TF32, None, True),
                                                (linalg.COMPUTE_TYPE_TF32, False, False),
                                                (linalg.COMPUTE_TYPE_DEFAULT, None, False),
                                                (linalg.COMPUTE_TYPE_DEFAULT, True, True)):
            linalg.set_compute_type(np.float32, compute_type)
            out = cudakit.matmul(A, B, out=poisoned((130, 150), np.float32), tf32=tf32)
            gap = float(cupy.abs(out.astype(np.float64) - k * (1 + eps)).max())
            if expect_tf32:
                assert abs(gap - k * eps) < k * eps / 4, (compute_type, tf32, gap)
            else:
                assert gap < k * eps / 4, (compute_type, tf32, gap)
    finally:
        linalg.set_compute_type(np.float32, before)


@pytest.mark.gpu
@pytest.mark.parametrize("orders", [("C", "C"), ("F", "C"), ("C", "F"), ("F", "F")])
@pytest.mark.parametrize("mkn", [(2305, 301, 2051), (1031, 1029, 1027), (200, 20014, 150), (201, 20011, 151)],
                         ids=str)
def test_float64_products_planned_on_the_pipelined_dmma_kernel(orders, mkn, monkeypatch):
    """The fast variant's FP64 path on sm_80+: products at least _dmma.MIN_DEPTH deep, both sides of C past
    NARROW_SIDE, whose C gives most SMs a tile of the pipelined kernel's smallest take its tiles, k whole, in every
    layout. A small C with a long k is planned on them too, k split: they take it where both operands are read in
    place in 16-byte chunks, else the register tiles do. A C whose smallest tiles leave the SMs short of
    _dmma.MID_FILL rounds takes them with k split (_dmma.mid_splits), operands read in 8-byte halves too."""
    import cupy

    from cudakit import _dmma, _matmul_routes

    if int(cupy.cuda.Device().compute_capability) < 80:
        pytest.skip("the FP64 tensor cores need sm_80")
    m, k, n = mkn  # partial tiles at every edge; odd sides too
    tile, splits, _ = mm.plan(0, np.float64, m, n, k)
    pipelined = isinstance(tile, _dmma.DmmaTile)
    long_k = k > 10000
    mid = not long_k and _dmma.mid_splits(m, n, k, 0) > 1
    assert pipelined and (splits > 1) == (long_k or mid), (tile, splits)
    assert not mid or tile == _dmma.SMALLEST, tile
    taken, split = [], []
    monkeypatch.setattr(_dmma, "launcher", lambda A, B, out, tile=_dmma.DEFAULT, make=_dmma.launcher:
                        taken.append(tile) or make(A, B, out, tile))
    monkeypatch.setattr(_dmma, "split_launcher", lambda *args, make=_dmma.split_launcher, **kw:
                        (lambda run: run and (split.append(args[3]) or run))(make(*args, **kw)))
    monkeypatch.setattr(_matmul_routes, "_routes", {})
    A = random_array((m, k), np.float64, orders[0])
    B = random_array((k, n), np.float64, orders[1])
    out = cudakit.matmul(A, B, out=poisoned((m, n), np.float64))
    if long_k:
        in_place = _dmma.reads_pairs(A, 0) and _dmma.reads_pairs(B, 1)
        assert (taken, split) == ([], [tile] if in_place else []), (tile, in_place)
    else:
        assert (taken, split) == (([], [tile]) if mid else ([tile], [])), (tile, mid)
    assert_close(out, A.astype(np.float64) @ B.astype(np.float64), np.float64, k)


@pytest.mark.gpu
def test_a_mid_split_product_with_a_strided_operand_keeps_the_dmma_tiles(monkeypatch):
    """A product _dmma.mid_splits cuts whose A has no unit stride (split_launcher reads in place only) runs SMALLEST
    with k whole on a copy of it (_dmma.launcher), not the register tiles; right on fresh operands twice."""
    import cupy

    from cudakit import _dmma, _matmul_routes

    if int(cupy.cuda.Device().compute_capability) < 80:
        pytest.skip("the FP64 tensor cores need sm_80")
    m, k, n = 1031, 1029, 1027
    if _dmma.mid_splits(m, n, k, 0) < 2:
        pytest.skip("this GPU's SMALLEST grid fills MID_FILL rounds at this size")
    taken = []
    monkeypatch.setattr(_dmma, "launcher", lambda A, B, out, tile=_dmma.DEFAULT, make=_dmma.launcher:
                        taken.append(tile) or make(A, B, out, tile))
    monkeypatch.setattr(_matmul_routes, "_routes", {})
    for _ in range(2):
        A = random_array((m, 2 * k), np.float64)[:, ::2]
        B = random_array((k, n), np.float64)
        out = cudakit.matmul(A, B, out=poisoned((m, n), np.float64))
        assert_close(out, A.astype(np.float64) @ B.astype(np.float64), np.float64, k)
    assert taken == [_dmma.SMALLEST], taken


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", [(96, 200, 72), (1056, 200, 1040)], ids=str)  # (the second: padded when misaligned)
def test_a_remembered_route_follows_each_calls_operands(dtype, mkn):
    """The fast variant remembers its route per geometry: repeated calls on fresh operands, the same shapes and
    strides at a misaligned address (another route), and on another stream, each give their own right answer."""
    import cupy

    m, k, n = mkn
    for offset in (0, 1, 0, 1, 0):  # (1: the same strides, the pointers 4 or 8 bytes past a 16-byte boundary)
        A = random_array((m, k + 8), dtype)[:, offset:offset + k]  # (rows 16-byte multiples: vector loads where
        B = random_array((k, n + 8), dtype)[:, offset:offset + n]  # the pointers are aligned)
        out = poisoned((m, n), dtype)
        with cupy.cuda.Stream() if offset else cupy.cuda.Stream.null:
            cudakit.matmul(A, B, out=out)
            cupy.cuda.get_current_stream().synchronize()
        assert_close(out, A.astype(np.float64) @ B.astype(np.float64), dtype, k, f"offset {offset}")
