"""The standalone FP64 tensor-core kernel (kernels/matmul_dmma.cu through cudakit._dmma).

GPU-less: every tile's module compiles for every architecture the installed NVRTC builds, with an empty log, and on
sm_80+ keeps everything in registers (no spills, no stack frame). On a GPU (sm_80+): every tile and layout on odd
shapes (edge tiles, k not a multiple of the slice) and a batch with a broadcast operand, against float64
cupy.matmul by relative error within _check.tolerance(float64, k); outputs start poisoned, inputs are fresh draws.
"""

import importlib

import numpy as np
import pytest

from cudakit import _check, _compile, _dmma, _matmul_plan, _tune
from conftest import assert_close, assert_compiles_without_spills, needs_sm80, poisoned, random_array

ORDERS = ("C", "F")  # with A and B each: the four (A_KC, B_KC) instantiations
SHAPES = [(1, 1, 1), (17, 33, 65), (7, 1, 9), (130, 12, 15), (200, 129, 260), (257, 300, 131)]


def test_every_tile_compiles_warning_free_and_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs the test extra (NVRTC)")
    assert_compiles_without_spills(_dmma.FAMILY, _dmma.instantiation_groups(), _compile.nvrtc_archs())


def test_tiles_are_distinct_and_fit():
    assert len({t.name for t in _dmma.TILES}) == len(_dmma.TILES)
    for t in _dmma.TILES:
        assert t.threads <= 1024 and t.shared_bytes <= 227 * 1024, t


@pytest.mark.gpu
@pytest.mark.parametrize("tile", _dmma.TILES, ids=lambda t: t.name)
@pytest.mark.parametrize("a_order", ORDERS)
@pytest.mark.parametrize("b_order", ORDERS)
def test_shapes_and_layouts(tile, a_order, b_order):
    import cupy

    needs_sm80()
    for m, k, n in SHAPES:
        A, B = random_array((m, k), np.float64, a_order), random_array((k, n), np.float64, b_order)
        out = poisoned((m, n), np.float64)
        _dmma.run(A, B, out, tile)
        assert_close(out, cupy.matmul(A, B), np.float64, k, f"{tile.name} {a_order}{b_order} {m}x{k}x{n}")


@pytest.mark.gpu
@pytest.mark.parametrize("tile", _dmma.TILES, ids=lambda t: t.name)
@pytest.mark.parametrize("b_order", ORDERS)
def test_c_order_a_both_ways(tile, b_order):
    """Two C-order operands run as C^T = B^T @ A^T by default; both orders of B run either way when asked."""
    import cupy

    needs_sm80()
    for m, k, n in SHAPES:
        A, B = random_array((m, k), np.float64), random_array((k, n), np.float64, b_order)
        ref = cupy.matmul(A, B)
        for transposed in (False, True):
            out = poisoned((m, n), np.float64)
            _dmma.run(A, B, out, tile, transposed=transposed)
            assert_close(out, ref, np.float64, k, f"{tile.name} transposed={transposed} {m}x{k}x{n}")


@pytest.mark.gpu
@pytest.mark.parametrize("a_order", ORDERS)
@pytest.mark.parametrize("b_order", ORDERS)
def test_launcher_on_fresh_operands(a_order, b_order):
    """launcher() builds its launches from one set of operands and runs them on others of the same shapes and
    layouts: odd leading dimensions read in place (8-byte halves) or, with flops enough a byte of them, padded on
    every call; even ones in 16-byte chunks."""
    import cupy

    needs_sm80()
    for m, k, n in [(70, 1001, 50), (130, 514, 34), (4001, 41, 3999)]:
        made = [(random_array((m, k), np.float64, a_order), random_array((k, n), np.float64, b_order)) for _ in "ab"]
        a, b = _dmma._operands(*made[0])
        assert (a is not made[0][0] or b is not made[0][1]) == (m > 3000), (m, k, n)  # (500 flops a byte: padded)
        run = _dmma.launcher(*made[0], poisoned((m, n), np.float64), _dmma.PLANNED[-1])
        for A, B in made:
            out = poisoned((m, n), np.float64)
            run(A, B, out)
            assert_close(out, cupy.matmul(A, B), np.float64, k, f"{a_order}{b_order} {m}x{k}x{n}")


@pytest.mark.gpu
@pytest.mark.parametrize("a_order", ORDERS)
@pytest.mark.parametrize("b_order", ORDERS)
def test_split_launcher_on_fresh_operands(a_order, b_order):
    """split_launcher() runs k in runs (the last one shorter, one deep too, or one run alone) on every PLANNED and
    SPLIT_TILES tile and NARROW_SPLIT_TILE that fits, its launches built once and run on fresh operands; an operand
    off 16-byte alignment or of an odd leading dimension runs in 8-byte halves, one without a unit stride gets None."""
    import cupy

    needs_sm80()
    m, k, n = 70, 4130, 50  # even sides: read in place in every layout
    split_tiles = _dmma.PLANNED + _dmma.SPLIT_TILES + (_dmma.NARROW_SPLIT_TILE,)
    for tile in (t for t in dict.fromkeys(split_tiles) if _dmma.fits(t, 0)):
        for splits, depth in [(5, 832), (3, 1392), (1, k)]:  # (4 runs of 832 and one of 802, ...)
            made = [(random_array((m, k), np.float64, a_order), random_array((k, n), np.float64, b_order))
                    for _ in "ab"]
            run = _dmma.split_launcher(*made[0], poisoned((m, n), np.float64), tile, splits, depth)
            for A, B in made:
                out = poisoned((m, n), np.float64)
                run(A, B, out)
                assert_close(out, cupy.matmul(A, B), np.float64, k, f"{tile.name} {a_order}{b_order} {splits}")
    B = random_array((k, n), np.float64, b_order)
    for odd in (random_array((m, k + 2), np.float64)[:, 1:-1],  # 8 bytes off alignment
                random_array((m, k + 1), np.float64)[:, :k],  # an odd leading dimension
                random_array((m, 2 * k), np.float64)[:, ::2]):  # no unit stride
        run = _dmma.split_launcher(odd, B, poisoned((m, n), np.float64), _dmma.SMALLEST, 5, 832)
        assert (run is None) == (odd.strides[1] != 8), odd.strides
        if run is not None:
            out = poisoned((m, n), np.float64)
            run(odd, B, out)
            assert_close(out, cupy.matmul(odd, B), np.float64, k, f"halves {odd.strides} {odd.data.ptr % 16}")
    # a last run three, two and one deep (alone, one deep reads as another layout), in this test's layouts; the
    # operands go on past k (even leading dimensions), so that a last run read too deep adds terms
    A, B = random_array((m, 4 * 832 + 4), np.float64, a_order), random_array((4 * 832 + 4, n), np.float64, b_order)
    for last in (3, 2, 1):
        a, b = A[:, :4 * 832 + last], B[:4 * 832 + last]
        run = _dmma.split_launcher(a, b, poisoned((m, n), np.float64), _dmma.SMALLEST, 5, 832)
        out = poisoned((m, n), np.float64)
        run(a, b, out)
        assert_close(out, cupy.matmul(a, b), np.float64, a.shape[1], f"a last run {last} deep")


@pytest.mark.gpu
def test_transposed_views_and_misaligned_operands():
    import cupy

    needs_sm80()
    m, k, n = 75, 133, 91
    A = random_array((k, m + 1), np.float64)[:, 1:].T  # an offset base: 8 bytes past 16-byte alignment
    B = random_array((n, k), np.float64).T
    out = poisoned((m, n), np.float64)
    _dmma.run(A, B, out)
    assert_close(out, cupy.matmul(A, B), np.float64, k, "views")
    out = poisoned((m, n), np.float64)
    _dmma.launcher(A, B, out)(A, B, out)  # (A read in 8-byte halves)
    assert_close(out, cupy.matmul(A, B), np.float64, k, "views, launcher")


@pytest.mark.gpu
@pytest.mark.parametrize("broadcast", ["A", "B"])
def test_batch_with_a_broadcast_operand(broadcast):
    import cupy

    needs_sm80()
    count, m, k, n = 5, 71, 37, 50  # (A's lines and products an odd number of doubles apart: 8-byte halves)
    A = random_array((1 if broadcast == "A" else count, m, k), np.float64)
    B = random_array((1 if broadcast == "B" else count, k, n), np.float64)
    out = poisoned((count, m, n), np.float64)
    batch = (count, 0 if broadcast == "A" else m * k, 0 if broadcast == "B" else k * n)
    _dmma.run(A[0], B[0], out, _dmma.TILES[3], batch)
    ref = cupy.matmul(A, B)
    assert_close(out, ref, np.float64, k, f"batch, {broadcast} broadcast")
    assert _check.relative_error(out[-1], ref[-1]) <= _check.tolerance(np.float64, k)


@pytest.mark.gpu
def test_every_tile_on_a_deep_product():
    import cupy

    needs_sm80()
    m, k, n = 300, 1001, 260
    A, B = random_array((m, k), np.float64), random_array((k, n), np.float64)
    ref = cupy.matmul(A, B)
    for tile in _dmma.TILES:
        out = poisoned((m, n), np.float64)
        _dmma.run(A, B, out, tile)
        assert_close(out, ref, np.float64, k, tile.name)


@pytest.mark.gpu
@pytest.mark.parametrize("shapes", [((12, 600, 264), (12, 264, 700)), ((3, 4, 600, 264), (4, 264, 700)),
                                    ((3, 1, 300, 512), (1, 5, 512, 1000)), ((12, 600, 265), (12, 265, 700)),
                                    ((9, 300, 513), (9, 513, 701)), ((22, 536, 929), (22, 929, 11)),
                                    ((17, 304, 796), (17, 796, 57))], ids=str)
def test_a_batch_that_fills_the_gpu_takes_the_pipelined_kernel(shapes, monkeypatch):
    """cudakit.matmul's fast variant puts an FP64 batch whose products together give most SMs a 64 x 64 tile
    (_dmma.planned), or a narrow C or too few tiles within one round (_dmma.batch_tile), on this kernel, one launch
    per evenly spaced run of products (broadcast batch axes read in place), an odd k or n (lines and batch steps off
    16 bytes, read in 8-byte halves) too; the output poisoned first."""
    import cupy

    import cudakit
    from cudakit import _matmul_batch

    needs_sm80()
    taken = []
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})  # (planned afresh)
    monkeypatch.setattr(_dmma, "launches", lambda *a, make=_dmma.launches, **k: taken.append(a[3]) or make(*a, **k))
    (m, k), n = shapes[0][-2:], shapes[1][-1]
    count = int(np.prod(np.broadcast_shapes(shapes[0][:-2], shapes[1][:-2])))
    planned = _dmma.planned(m, n, k, cupy.cuda.Device().id, count)
    batch_tiles = (_dmma.BATCH_TILES[0],) if count > 1 else ()  # (weighed beside PLANNED for a batch)
    wanted = _dmma.PLANNED + batch_tiles if planned else (_dmma.batch_tile(m, n, k, cupy.cuda.Device().id, count),)
    for call in ("planned", "kept"):  # the second call, on fresh operands, runs the launches kept by the first
        A, B = random_array(shapes[0], np.float64), random_array(shapes[1], np.float64)
        want = cupy.matmul(A, B)
        del taken[:]
        out = cudakit.matmul(A, B, out=poisoned(want.shape, np.float64))
        if call == "planned":
            assert taken and set(taken) <= set(wanted), f"the batch went to {taken or 'the planner tiles'}"
        else:
            assert not taken, "the kept launches were built again"
        assert_close(out, want, np.float64, A.shape[-1], f"{shapes}, {call}")


@pytest.mark.gpu
def test_tiles_too_big_for_the_shared_memory_are_not_planned(monkeypatch):
    """The planner leaves out the tiles a block's shared memory cannot hold, for one product and for a batch: with a
    70 KiB limit standing in for a smaller GPU, only the 64 x 64 tile (64 KiB) of PLANNED; with 60 KiB, none (the
    register tiles)."""
    import importlib

    needs_sm80()
    mm = importlib.import_module("cudakit.matmul")
    limit = [70 * 1024]
    monkeypatch.setattr(_dmma, "shared_per_block", lambda device_id: limit[0])
    mm._plan.cache_clear()
    try:
        for m, k, n in [(1024, 1024, 1024), (4096, 4096, 4096)]:
            for count in (1, 64):  # (a batch: its products planned together)
                limit[0] = 70 * 1024
                mm._plan.cache_clear()
                assert mm.plan(0, np.float64, m, n, k, count)[0] == _dmma.SMALLEST, (m, k, n, count)
                limit[0] = 60 * 1024
                mm._plan.cache_clear()
                assert not isinstance(mm.plan(0, np.float64, m, n, k, count)[0], _dmma.DmmaTile), (m, k, n, count)
    finally:
        mm._plan.cache_clear()


def test_oriented_exchanges_a_tiles_sides_where_the_kernel_runs_c_transposed():
    """The planner pads C with a tile; a launch running C^T = B^T @ A^T takes the tile with its sides exchanged
    (64 x 128 <-> 128 x 64, warps too), so that its grid pads C^T alike. Square tiles stay; every tile's exchange is
    one of TILES."""
    wide, tall = _dmma.TILES[4], _dmma.TILES[3]
    assert (wide.bm, wide.bn, tall.bm, tall.bn) == (64, 128, 128, 64)
    assert _dmma.oriented(wide, True) == tall and _dmma.oriented(tall, True) == wide
    assert _dmma.oriented(wide, False) == wide and _dmma.oriented(tall, False) == tall
    for tile in _dmma.TILES:
        flipped = _dmma.oriented(tile, True)
        assert flipped in _dmma.TILES and (flipped == tile) == (tile.bm == tile.bn), tile.name
        assert (flipped.bm, flipped.bn, flipped.shared_bytes, flipped.threads) == \
            (tile.bn, tile.bm, tile.shared_bytes, tile.threads)


@pytest.fixture
def h200_planner(monkeypatch):
    """matmul's planner on a stand-in H200 (GPU-less): 132 SMs, 396 resident blocks of each DMMA tile, each fitting, the
    register tiles' min_blocks an SM, the FP64 default tile pair; the planner's cache cleared before and after."""
    mm = importlib.import_module("cudakit.matmul")
    f64 = np.dtype(np.float64)
    config = _tune.default_config(f64, 90)
    pair = _tune._BY_NAME[config["large"]], _tune._BY_NAME[config["small"]]
    monkeypatch.setattr(_tune, "tiles", lambda device_id, dtype: pair)
    monkeypatch.setattr(_tune, "compute_capability", lambda device_id: 90)
    monkeypatch.setattr(mm, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(mm, "resident_tiles", lambda tile, dtype, device_id: 132 * tile.min_blocks)
    monkeypatch.setattr(mm, "_compute_capability", lambda device_id: 90)
    monkeypatch.setattr(_dmma, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(_dmma, "resident", lambda tile, device_id: 396)
    monkeypatch.setattr(_dmma, "fits", lambda tile, device_id: True)
    mm._plan.cache_clear()
    yield mm
    mm._plan.cache_clear()


def test_mid_splits_fill_two_rounds_of_the_smallest_tile(h200_planner, monkeypatch):
    """mid_splits: k whole where the SMALLEST grid fills MID_FILL rounds, or MID_FULL of one spread evenly over the
    SMs, else runs enough for MID_ROUNDS rounds, at most MID_MAX_SPLITS of them and each at least MID_MIN_RUN deep; the
    planner then takes SMALLEST with k so split."""
    mm = h200_planner
    assert _dmma.mid_splits(1061, 569, 2221, 0) == 4  # 153 tiles: six rounds' worth, cut to MID_MAX_SPLITS
    assert _dmma.mid_splits(353, 3323, 4211, 0) == 3  # 312 tiles
    assert _dmma.mid_splits(827, 2791, 3203, 0) == 2  # 572 tiles
    assert _dmma.mid_splits(733, 2423, 953, 0) == 1  # 456 tiles, but runs of 476 would be under MID_MIN_RUN
    assert _dmma.mid_splits(1033, 3271, 1709, 0) == 1  # 884 tiles: past MID_FILL rounds
    assert _dmma.mid_splits(2447, 617, 1609, 0) == 1  # 390 tiles: a round, 2 or 3 blocks on every SM
    assert _dmma.mid_splits(977, 1747, 4549, 0) == 2  # 448 tiles: 4 blocks on 52 SMs, 3 on the rest
    assert _dmma.mid_splits(2089, 1039, 4243, 0) == 2  # 561 tiles
    monkeypatch.setattr(_dmma, "planned", lambda m, n, k, device_id, count=1: True)
    tile, splits, depth = mm.plan(0, np.float64, 1061, 569, 2221)
    assert (tile, splits) == (_dmma.SMALLEST, 4) and 3 * depth < 2221 <= 4 * depth and depth % tile.bk == 0
    assert mm.plan(0, np.float64, 1061, 569, 2221, 8)[1] == 1  # a batch keeps k whole


def test_a_small_c_from_split_depth_takes_smallest_in_whole_rounds(h200_planner):
    """The planner takes split_plan's SMALLEST alone for a C past NARROW_SIDE, k split in an odd number of slices, its
    blocks within one round of the 396 resident ones or past one and a half."""
    mm = h200_planner
    assert mm.plan(0, np.float64, 128, 128, 4096) == (_dmma.SMALLEST, 29, 144)  # 32 runs asked, 9 slices each
    for m, n, k in ((256, 250, 6592), (77, 333, 9000), (300, 300, 12000), (121, 144, 9413), (128, 128, 16384)):
        tile, splits, depth = mm.plan(0, np.float64, m, n, k)
        blocks = splits * -(-m // tile.bm) * -(-n // tile.bn)
        assert tile == _dmma.SMALLEST and (splits - 1) * depth < k <= splits * depth, (m, n, k)
        assert blocks <= 396 or 594 <= blocks <= 792, (m, n, k, splits)
    depth = _dmma.SPLIT_DEPTH
    assert mm.plan(0, np.float64, 128, 128, depth)[0] == _dmma.SMALLEST  # from SPLIT_DEPTH (session 51: 1024)
    assert mm.plan(0, np.float64, 128, 128, depth - 1)[0] != _dmma.SMALLEST  # k short of it: the register tiles


def test_a_small_c_with_a_long_k_takes_split_plans_tile_alone(h200_planner):
    """From LONG_DEPTH, a C past NARROW_SIDE takes split_plan's tile and runs alone (session 50: the register tiles
    the model picked ran 1.1-1.6x slower), the partial products within MAX_SPLIT_BYTES; a narrow C weighs the
    register tiles beside it."""
    mm = h200_planner
    for m, n, k in ((173, 92, 97336), (146, 190, 73896), (238, 194, 51301), (150, 214, 265217), (500, 600, 40000),
                    (555, 274, 2094389)):  # (the last one's runs cut to MAX_SPLIT_BYTES)
        tile, splits, depth = mm.plan(0, np.float64, m, n, k)
        wanted, runs = _dmma.split_plan(m, n, k, 0)
        assert tile == wanted and splits <= runs and (splits - 1) * depth < k <= splits * depth, (m, n, k)
        assert splits * m * n * 8 <= _matmul_plan.MAX_SPLIT_BYTES
    # a narrow C: split_plan's 32 x 32 tile weighed beside the register tiles, and taken (as on the GPU)
    narrow = _dmma.NARROW_SPLIT_TILE
    assert mm.plan(0, np.float64, 84, 26, 752820)[0] == _dmma.split_plan(84, 26, 752820, 0)[0] == narrow


def test_split_plan_pads_c_least_and_fills_whole_rounds(monkeypatch):
    """split_plan (GPU-less: 264 resident blocks of each tile stand in for the driver's count): the SPLIT_TILES tile
    that pads C least, the first on a tie (NARROW_SPLIT_TILE where it pads C to less than half of that); whole rounds
    of blocks (never a round and a few blocks): one, two where runs stay MIN_RUN deep, more where runs would pass
    MAX_RUN; SMALLEST for a k short of LONG_DEPTH or where that tile's round would take runs shallower than
    MIN_RUN."""
    monkeypatch.setattr(_dmma, "resident", lambda tile, device_id: 264)
    monkeypatch.setattr(_dmma, "fits", lambda tile, device_id: True)
    wide, tall, deep = _dmma.SPLIT_TILES
    assert _dmma.split_plan(28, 57, 873876, 0) == (deep, 528)  # one tile: two rounds (32 x 32 tiles pad it to half)
    # the 32 x 32 tile where it pads C to less than half of that tile: 96 x 32 against 128 x 64 (five rounds of its
    # three tiles keep runs within MAX_RUN), 32 x 96 against 64 x 128; not 224 x 96 against 256 x 128
    narrow = _dmma.NARROW_SPLIT_TILE
    assert _dmma.split_plan(84, 26, 752820, 0) == (narrow, 440) and _dmma.split_plan(30, 84, 504841, 0)[0] == narrow
    assert _dmma.split_plan(207, 76, 873876, 0)[0] == wide  # (a tie of the three: the first)
    # not where its round's runs would be shallower than MIN_RUN (five blocks an SM of it, two of the others)
    monkeypatch.setattr(_dmma, "resident", lambda tile, device_id: 660 if tile == narrow else 264)
    assert _dmma.split_plan(659, 25, 28179, 0) == (deep, 24) and _dmma.split_plan(84, 26, 752820, 0)[0] == narrow
    assert _dmma.split_plan(101, 122, 264852, 0) == (wide, 132)  # a tie: the first; two rounds' runs under MIN_RUN
    # runs MIN_RUN deep would not fill a round: SMALLEST, two rounds of runs SHALLOW_RUNS[0] deep
    assert _dmma.split_plan(200, 150, 20014, 0) == (_dmma.SMALLEST, 44)
    assert _dmma.split_plan(256, 250, 6000, 0) == (_dmma.SMALLEST, 16)  # (23 runs 256 deep: 1.4 rounds) one round
    assert _dmma.split_plan(128, 128, 4096, 0) == (_dmma.SMALLEST, 32)  # one round's runs, SHALLOW_RUNS[1] deep
    assert _dmma.split_plan(300, 300, 12000, 0) == (_dmma.SMALLEST, 21)  # k short of LONG_DEPTH
    assert _dmma.split_plan(688, 126, 243866, 0) == (wide, 120)  # runs at most MAX_RUN deep: five rounds of 24
    assert _dmma.split_plan(173, 92, 97336, 0) == (wide, 88)  # (95 runs MIN_RUN deep: a round and 21 blocks) one
    assert _dmma.split_plan(146, 190, 73896, 0) == (deep, 58)  # 9 tiles: two rounds of 29 runs, 261 blocks each
    for m, n, k in ((256, 256, 65536), (75, 174, 582715), (150, 214, 265217), (64, 134, 231452)):
        tile, splits = _dmma.split_plan(m, n, k, 0)
        grid = -(-m // tile.bm) * -(-n // tile.bn)
        assert splits % (264 // grid) == 0 and k <= splits * _dmma.MAX_RUN, (m, n, k, splits)
