import importlib

import numpy as np
import pytest

import cudakit
from cudakit import _check, _tune
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


# ---- GPU-less -------------------------------------------------------------------------------------------------


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
    layout. A small C with a long k is planned on them too, k split. A C whose smallest tiles leave the SMs short of
    _dmma.MID_FILL rounds takes them with k split (_dmma.mid_splits). Both read operands in 8-byte halves too."""
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
        assert (taken, split) == ([], [tile]), tile
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
