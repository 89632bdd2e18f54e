"""The Ampere-style tensor-core kernels (kernels/matmul_tc.cu through cudakit.matmul_tc): wmma and mma_sync.

GPU-less: every module compiles for every architecture the installed NVRTC builds, with an empty log, and the
sm_80+ kernels keep everything in registers (no spills, no stack frame); the variant rows; the capability checks.
On a GPU: every kernel, dtype and layout against a float64 reference of the same (already rounded) inputs, by the
relative error of _check.product_error (||out - ref|| / || |A| @ |B| ||), bounded by
  float16, bfloat16: _check.tolerance: u + (1 + u) 4 eps32 sqrt(max(k, 16)): products exact in float32, a float32
                    sum of k of them (random-walk growth), one rounding to the 16-bit type (u = 2^-11, 2^-8);
  float32 (TF32):   _check.tf32_tolerance: 2v + v^2 + (1 + v)^2 4 eps32 sqrt(max(k, 16)), v = 2^-10: each input
                    taken to TF32 (11 significant bits, truncated or rounded to nearest) changes a product by at
                    most 2v + v^2 of it, then the same float32 sum.
Outputs start poisoned (NaN), inputs are fresh random draws, shapes are odd (edge tiles, k not a multiple of 8).
"""

import numpy as np
import pytest

from cudakit import _compile, matmul_tc
from conftest import assert_compiles_without_spills, assert_tensor_core_product, poisoned, random_array

KINDS = ("wmma", "mma_sync")
NAMES = ("float16", "bfloat16", "float32")
ORDERS = ("C", "F", "T", "FT")  # C-order, F-order, the transposed view of a C-order array, of an F-order array
SHAPES = [(1, 1, 1), (17, 33, 65), (7, 1, 9), (15, 100, 3), (64, 64, 64), (33, 77, 130), (130, 12, 15),
          (200, 129, 260), (257, 300, 129)]


# ---------------------------------------------------------------------------------------------------- GPU-less
def test_every_module_compiles_warning_free_and_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs the test extra (NVRTC)")
    assert_compiles_without_spills(matmul_tc.FAMILY, matmul_tc.instantiation_groups(), _compile.nvrtc_archs())


def test_variant_rows():
    import cudakit

    rows = {v.name: v for v in cudakit.variants("matmul")}
    assert rows["wmma"].min_cc == 70 and rows["mma_sync"].min_cc == 80
    for kind in KINDS:
        assert set(rows[kind].dtypes) == set(NAMES) and rows[kind].tensor_core


def test_capability_checks_name_the_problem():
    matmul_tc.check_supported("wmma", "float16", 70)
    for kind, name, cc in [("wmma", "bfloat16", 75), ("wmma", "float32", 70), ("mma_sync", "float16", 75),
                           ("mma_sync", "bfloat16", 75)]:
        with pytest.raises(TypeError, match="sm_80"):
            matmul_tc.check_supported(kind, name, cc)
    for kind in KINDS:
        for name in NAMES:
            matmul_tc.check_supported(kind, name, 80)


def test_tiles_cover_their_slices():
    """Each tile's shapes satisfy the kernel's static requirements (whole warps, whole 16-byte chunks per thread)."""
    for name in NAMES:
        item = matmul_tc.ITEMSIZE[name]
        for t in matmul_tc.tiles(name):
            assert t.bm % t.wm == 0 and t.bn % t.wn == 0 and t.wm % 16 == 0 and t.wn % 16 == 0
            assert t.bk * item in (64, 128) and t.stages >= 2
            for rows in (t.bm, t.bn):
                assert rows * t.bk * item // 16 % t.threads == 0  # whole passes over a slice's chunks
                for line_bytes in (t.bk * item, rows * item):  # k-contiguous and rows-contiguous slices
                    assert line_bytes % 16 == 0 and t.threads % (line_bytes // 16) == 0


# ---------------------------------------------------------------------------------------------------- on a GPU
def _dtype(name):
    if name == "bfloat16":
        return np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    return np.dtype(name)


@pytest.fixture
def cc():
    import cupy

    return matmul_tc.compute_capability(cupy.cuda.runtime.getDevice())


def _skip_unsupported(kind, name, cc):
    try:
        matmul_tc.check_supported(kind, name, cc)
    except TypeError as exc:
        pytest.skip(str(exc))


def _operand(shape, dtype, order):
    r, c = shape
    if order == "C":
        return random_array(shape, dtype)
    if order == "F":
        return random_array(shape, dtype, "F")
    if order == "T":  # a transposed C-order array: F-contiguous view
        return random_array((c, r), dtype).T
    if order == "FT":  # a transposed F-order array: C-contiguous view
        return random_array((c, r), dtype, "F").T
    if order == "offset":  # one element past 16 bytes, lines an odd number of elements apart
        return random_array((r + 1, c + 3), dtype)[1:, 1:c + 1]
    if order == "offsetF":
        return random_array((c + 1, r + 3), dtype)[1:, 1:r + 1].T
    if order == "strided":  # no unit stride: copied
        return random_array((r, 2 * c), dtype)[:, ::2]
    raise ValueError(order)


def _run(kind, A, B, dtype, **kw):
    out = poisoned((A.shape[0], B.shape[1]), dtype)
    matmul_tc.run_tc(kind, A, B, out, **kw)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_shapes_and_layouts(cc, kind, name):
    _skip_unsupported(kind, name, cc)
    dtype = _dtype(name)
    for m, k, n in SHAPES:
        for oa in ORDERS:
            for ob in ORDERS:
                A, B = _operand((m, k), dtype, oa), _operand((k, n), dtype, ob)
                assert_tensor_core_product(_run(kind, A, B, dtype), A, B, f"{kind} {name} {oa}/{ob} {m}x{k}x{n}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_through_the_public_api(cc, kind, name):
    import cudakit

    _skip_unsupported(kind, name, cc)
    dtype = _dtype(name)
    extra = {"tf32": True} if name == "float32" else {}
    for m, k, n in [(33, 65, 17), (128, 256, 64)]:
        A, B = _operand((m, k), dtype, "C"), _operand((k, n), dtype, "T")
        out = poisoned((m, n), dtype)
        res = cudakit.matmul(A, B, out=out, variant=kind, **extra)
        assert res is out
        assert_tensor_core_product(out, A, B, f"cudakit.matmul variant={kind} {name} {m}x{k}x{n}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_every_mma_tile_on_edges_and_whole_tiles(cc, name):
    _skip_unsupported("mma_sync", name, cc)
    import cupy

    dtype = _dtype(name)
    optin = cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]
    for tile in matmul_tc.tiles(name):
        if tile.shared_bytes(dtype.itemsize) > optin:
            continue
        # whole tiles and slices (no edge: every copy unchecked but the ring's last), then one past every edge,
        # then interior blocks with unchecked copies and a ragged k beside edge blocks, then a k shorter than the ring
        for m, k, n in [(2 * tile.bm, 8 * tile.bk, 2 * tile.bn), (tile.bm + 1, 3 * tile.bk + 5, tile.bn + 3),
                        (2 * tile.bm + 7, (tile.stages + 3) * tile.bk + 9, 2 * tile.bn + 1),
                        (tile.bm - 1, tile.bk - 3, 9)]:
            for oa, ob in [("C", "T"), ("T", "C"), ("C", "C"), ("T", "T")]:
                A, B = _operand((m, k), dtype, oa), _operand((k, n), dtype, ob)
                out = _run("mma_sync", A, B, dtype, tile=tile)
                assert_tensor_core_product(out, A, B, f"{tile} {name} {oa}/{ob} {m}x{k}x{n}")


def _float32_bound(out, A, B, what: str) -> None:
    from cudakit import _check

    err, bound = _check.product_error(out, A, B), _check.tolerance(np.float32, A.shape[1])
    assert err <= bound, f"{what}: relative error {err:.3e} > the float32 bound {bound:.2e}"


@pytest.mark.gpu
def test_float32_as_three_tf32_products_keeps_to_the_float32_bound(cc):
    """The X3 tiles hold float32's bound (one TF32 product is off by about 2^-11, far past it): edge tiles and
    slices in every layout, a k of 65539 (a rounding bias that added up over k would show), and infinities, a NaN and
    a finite FLT_MAX in slices past the first, which must come out as float64 has them."""
    _skip_unsupported("mma_sync", "float32", cc)
    import cupy

    dtype = np.dtype(np.float32)
    for tile in matmul_tc.X3_TILES:
        for m, k, n in [(tile.bm + 1, 3 * tile.bk + 5, tile.bn + 3), (2 * tile.bm, 8 * tile.bk, 2 * tile.bn),
                        (2 * tile.bm + 7, (tile.stages + 3) * tile.bk + 9, 2 * tile.bn + 1), (tile.bm - 1, 5, 9)]:
            for oa, ob in [("C", "T"), ("T", "C"), ("C", "C"), ("T", "T")]:
                A, B = _operand((m, k), dtype, oa), _operand((k, n), dtype, ob)
                _float32_bound(_run("mma_sync", A, B, dtype, tile=tile), A, B, f"{tile} {oa}/{ob} {m}x{k}x{n}")
    for oa, ob in [("C", "T"), ("T", "C")]:  # signed, magnitudes 2^-40 to 2^40: every exponent and sign of the split
        A, B = _operand((257, 1000), dtype, oa), _operand((1000, 131), dtype, ob)
        for x in (A, B):
            x *= cupy.asarray(np.exp2(np.random.default_rng().integers(-40, 41, size=x.shape)) *
                              np.random.default_rng().choice([-1.0, 1.0], size=x.shape), dtype)
        _float32_bound(_run("mma_sync", A, B, dtype, tile=matmul_tc.X3_TILES[0]), A, B, f"signed, wide {oa}/{ob}")
    tile = matmul_tc.X3_TILES[0]
    m, k, n = 70, 65539, 66
    A, B = _operand((m, k), dtype, "C"), _operand((k, n), dtype, "C")
    r_inf, r_nan, r_max, c_inf = 3, 40, 65, 7
    A[r_inf, k - 3] = np.inf
    A[r_nan, 2 * tile.bk + 1] = np.nan
    A[r_max, 5 * tile.bk] = np.finfo(np.float32).max
    B[5 * tile.bk, :] = 0.5  # (FLT_MAX / 2 plus the rest: finite)
    B[3 * tile.bk + 2, c_inf] = np.inf
    out = _run("mma_sync", A, B, dtype, tile=tile)
    ref = cupy.asnumpy(A.astype(np.float64) @ B.astype(np.float64))
    got = cupy.asnumpy(out)
    assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(np.isinf(got), np.isinf(ref))
    assert np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])  # (the signs too)
    rows = [r for r in range(m) if r not in (r_inf, r_nan, r_max)]
    cols = [c for c in range(n) if c != c_inf]
    _float32_bound(out[rows][:, cols], A[rows], B[:, cols], f"{tile} {m}x{k}x{n}")
    big = got[r_max, cols].astype(np.float64)
    assert np.all(np.abs(big - ref[r_max, cols]) <= 8 * np.finfo(np.float32).eps * ref[r_max, cols])


@pytest.mark.gpu
def test_x3_launches_whole_and_split_in_place_and_copied(cc):
    """The fast variant's X3 launches: k whole and split (the last run shorter), operands read in place (aligned, or
    lines off 16 bytes in every layout: the 4-byte-copy build) and copied (no unit stride), the launcher built once
    and called again on fresh operands of the same geometry."""
    _skip_unsupported("mma_sync", "float32", cc)
    from cudakit import _tune

    dtype = np.dtype(np.float32)
    for tile in matmul_tc.X3_TILES:
        for (m, k, n), wanted in [((2 * tile.bm + 3, 1000, tile.bn + 5), 1), ((tile.bm + 1, 1001, 2 * tile.bn), 3),
                                  ((70, 5003, 66), 7), ((2 * tile.bm + 4, 1008, tile.bn + 4), 3)]:  # (last: aligned)
            splits, depth = _tune.split_depth(k, wanted, tile.bk)
            for oa, ob in [("C", "C"), ("T", "T"), ("offset", "C"), ("C", "offsetF"), ("offsetF", "offset"),
                           ("strided", "T")]:
                run = None
                for _ in range(2):
                    A, B = _operand((m, k), dtype, oa), _operand((k, n), dtype, ob)
                    out = poisoned((m, n), dtype)
                    run = run or matmul_tc.x3_launcher(A, B, out, tile, splits, depth)
                    run(A, B, out)
                    _float32_bound(out, A, B, f"{tile} {oa}/{ob} {m}x{k}x{n} in {splits} runs of {depth}")


@pytest.mark.gpu
def test_x3_pads_lines_off_16_bytes_where_the_copy_costs_less(cc, monkeypatch):
    """Where x3_seconds has a padded copy cheaper than the misaligned build (forced: a rate of 0.01 makes that build
    100x slower in the model), the launcher pads the misaligned operands on every call and runs the aligned build:
    k whole and split, A, B or both off 16 bytes."""
    _skip_unsupported("mma_sync", "float32", cc)
    import importlib

    from cudakit import _tune

    mm = importlib.import_module("cudakit.matmul")  # (cudakit.matmul is the function)
    padded, pad = [], mm.aligned_operand
    monkeypatch.setattr(matmul_tc, "X3_MISALIGNED_RATE", 0.01)
    monkeypatch.setattr(mm, "aligned_operand", lambda x, axis: padded.append(axis) or pad(x, axis))
    dtype = np.dtype(np.float32)
    tile = matmul_tc.X3_TILES[0]
    for (m, k, n), wanted in [((2 * tile.bm + 3, 1000, tile.bn + 5), 1), ((tile.bm + 1, 1001, 2 * tile.bn), 3)]:
        splits, depth = _tune.split_depth(k, wanted, tile.bk)
        for oa, ob in [("offset", "C"), ("T", "offsetF"), ("offsetF", "offset")]:
            run = None
            for _ in range(2):
                A, B = _operand((m, k), dtype, oa), _operand((k, n), dtype, ob)
                out = poisoned((m, n), dtype)
                run = run or matmul_tc.x3_launcher(A, B, out, tile, splits, depth)
                padded[:] = []  # (building the launcher pads once too)
                run(A, B, out)
                assert padded, f"{oa}/{ob} {m}x{k}x{n}: a call padded nothing"
                _float32_bound(out, A, B, f"padded {oa}/{ob} {m}x{k}x{n} in {splits} runs of {depth}")


def _batch(count: int, shape, order: str):
    """(count x shape batch, its first matrix, elements between matrices): C- or F-ordered matrices ("C", "T"),
    lines off 16 bytes ("offset": one element in, an odd number apart), or one matrix for the whole batch ("one")."""
    import cupy

    r, c = shape
    if order == "one":
        x = random_array(shape, np.float32)
        return cupy.broadcast_to(x, (count,) + x.shape), x, 0
    x = {"C": lambda: random_array((count, r, c), np.float32),
         "T": lambda: random_array((count, c, r), np.float32).transpose(0, 2, 1),
         "offset": lambda: random_array((count, r, c + 1), np.float32)[:, :, 1:]}[order]()
    return x, x[0], x.strides[0] // 4


@pytest.mark.gpu
def test_x3_batches_read_in_place(cc, monkeypatch):
    """x3_batch_launches: batches of float32 products on each X3 tile, k whole, read in place: C- and F-ordered
    matrices on 16 bytes (the aligned build), lines off 16 bytes (the misaligned build), one B for the whole batch;
    more products than a launch takes (MAX_GRID_Z cut to 3). Then cudakit.matmul plans a batch onto an X3 tile."""
    _skip_unsupported("mma_sync", "float32", cc)
    import cudakit
    from cudakit import _matmul_batch, _matmul_routes

    monkeypatch.setattr(matmul_tc, "MAX_GRID_Z", 3)
    count = 7
    for tile in matmul_tc.X3_TILES:
        for (m, k, n), orders in [((2 * tile.bm + 4, 200, tile.bn + 4), [("C", "C"), ("T", "T"), ("C", "one")]),
                                  ((tile.bm + 1, 203, tile.bn + 3), [("offset", "C"), ("T", "offset"), ("C", "T")])]:
            for oa, ob in orders:
                (A, a0, step_a), (B, b0, step_b) = _batch(count, (m, k), oa), _batch(count, (k, n), ob)
                out = poisoned((count, m, n), np.float32)
                for args in matmul_tc.x3_batch_launches(tile, a0, b0, out.data.ptr, count, (step_a, step_b)):
                    _compile.launch(*args)
                for i in range(count):
                    _float32_bound(out[i], A[i], B[i], f"{tile} {oa}/{ob} product {i} of {count} x {m}x{k}x{n}")
    if cc not in matmul_tc.X3_ARCHS or not _matmul_routes.X3:  # (CUDAKIT_FP32_X3=0 keeps float32 off X3)
        return
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})  # (launches kept from an earlier test: none built)
    calls, real = [], matmul_tc.x3_batch_launches
    monkeypatch.setattr(matmul_tc, "x3_batch_launches", lambda *args: calls.append(args[0]) or real(*args))
    A, B = random_array((64, 512, 512), np.float32), random_array((64, 512, 512), np.float32)
    out = poisoned((64, 512, 512), np.float32)
    cudakit.matmul(A, B, out=out)
    assert calls and calls[0] in matmul_tc.X3_TILES, "64 x 512^3 float32 was not planned onto an X3 tile"
    for i in (0, 63):
        _float32_bound(out[i], A[i], B[i], f"64 x 512^3 product {i}")


@pytest.mark.gpu
@pytest.mark.parametrize("mkn", [(4096, 32, 4096), (3001, 20, 77), (700, 64, 33), (20000, 47, 300)], ids=str)
def test_a_short_k_takes_x3_past_a_narrow_c(cc, mkn, monkeypatch):
    """cudakit.matmul on a float32 k from X3_MIN_K to SMALL_K whose C is past NARROW_SIDE on both sides: X3 alone, on
    every layout and as a batch (B broadcast), each into a poisoned output within float32's bound; one shallower k
    and a narrow C keep the short-k kernel and the narrow tiles."""
    _skip_unsupported("mma_sync", "float32", cc)
    import cudakit
    from cudakit import _matmul_batch, _matmul_routes, _tune

    if cc not in matmul_tc.X3_ARCHS or not _matmul_routes.X3:
        pytest.skip(f"X3 runs on sm_{matmul_tc.X3_ARCHS} with CUDAKIT_FP32_X3 on")
    calls = []
    for name in ("x3_launcher", "x3_batch_launches"):
        real = getattr(matmul_tc, name)
        monkeypatch.setattr(matmul_tc, name, lambda *args, real=real: calls.append(args) or real(*args))
    monkeypatch.setattr(_matmul_routes, "_routes", {})
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    m, k, n = mkn
    for oa, ob in [("C", "C"), ("T", "T"), ("C", "T"), ("T", "C")]:
        A, B = _operand((m, k), np.float32, oa), _operand((k, n), np.float32, ob)
        out = poisoned((m, n), np.float32)
        del calls[:]
        cudakit.matmul(A, B, out=out)
        assert calls, f"{mkn} {oa}/{ob} did not take X3"
        _float32_bound(out, A, B, f"{mkn} {oa}/{ob}")
    A, B = random_array((3, m, k), np.float32), random_array((k, n), np.float32)
    out = poisoned((3, m, n), np.float32)
    del calls[:]
    cudakit.matmul(A, B, out=out)
    assert calls, f"3 x {mkn} did not take X3"
    for i in range(3):
        _float32_bound(out[i], A[i], B, f"3 x {mkn}, product {i}")
    for shallow in ((m, matmul_tc.X3_MIN_K - 1, n), (m, k, _tune.NARROW_SIDE)):
        A, B = random_array(shallow[:2], np.float32), random_array(shallow[1:], np.float32)
        del calls[:]
        _float32_bound(cudakit.matmul(A, B), A, B, f"{shallow}")
        assert not calls, f"{shallow} took X3"


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_odd_large_shape(cc, name):
    _skip_unsupported("mma_sync", name, cc)
    dtype = _dtype(name)
    for oa, ob in [("C", "T"), ("T", "C"), ("C", "C"), ("T", "T")]:
        A, B = _operand((4097, 4099), dtype, oa), _operand((4099, 4095), dtype, ob)
        assert_tensor_core_product(_run("mma_sync", A, B, dtype), A, B, f"mma_sync {name} {oa}/{ob} 4097x4099x4095")


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_misaligned_and_strided_views(cc, kind, name):
    _skip_unsupported(kind, name, cc)
    dtype = _dtype(name)
    for oa, ob in [("offset", "offset"), ("offsetF", "offsetF"), ("strided", "F"), ("C", "strided"),
                   ("offset", "T"), ("offsetF", "C")]:
        for m, k, n in [(131, 77, 259), (5, 3, 70)]:
            A, B = _operand((m, k), dtype, oa), _operand((k, n), dtype, ob)
            assert_tensor_core_product(_run(kind, A, B, dtype), A, B, f"{kind} {name} {oa}/{ob} {m}x{k}x{n}")
    A, B = _operand((67, 80), dtype, "C"), _operand((80, 130), dtype, "C")
    C = poisoned((67 * 130 + 1,), dtype)[1:].reshape(67, 130)  # C one element off its alignment: element stores
    matmul_tc.run_tc(kind, A, B, C)
    assert_tensor_core_product(C, A, B, f"{kind} {name} offset output")


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", KINDS)
def test_batched_and_broadcast(cc, kind, name):
    _skip_unsupported(kind, name, cc)
    dtype = _dtype(name)
    count, m, k, n = 5, 70, 131, 90
    item = dtype.itemsize
    A3 = random_array((count, m, k + 1), dtype)[:, :, :k]  # lines k + 1 apart: padded copies for mma_sync
    A3F = random_array((count, k, m), dtype).transpose(0, 2, 1)
    B3 = random_array((count, k, n), dtype)
    B1 = random_array((k, n), dtype)
    cases = [(A3, B3, A3.strides[0] // item, B3.strides[0] // item), (A3F, B1[None], A3F.strides[0] // item, 0),
             (B1.T[None], A3F.transpose(0, 2, 1), 0, A3F.strides[0] // item)]
    for A, B, sa, sb in cases:
        mm, nn = A.shape[1], B.shape[2]
        out = poisoned((count, mm, nn), dtype)
        matmul_tc.run_tc(kind, A[0], B[0], out[0], batch=(count, sa, sb))
        for z in range(count):
            assert_tensor_core_product(out[z], A[z if sa else 0], B[z if sb else 0], f"{kind} {name} product {z} ({sa}, {sb})")


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_run_fast_plans_and_runs(cc, name):
    _skip_unsupported("wmma", name, cc)
    import cupy

    dtype = _dtype(name)
    device = cupy.cuda.runtime.getDevice()
    for m, k, n in [(64, 512, 64), (1000, 300, 1500), (2048, 256, 2048)]:
        A, B = _operand((m, k), dtype, "C"), _operand((k, n), dtype, "C")
        out = poisoned((m, n), dtype)
        matmul_tc.run_fast(A, B, out)
        assert_tensor_core_product(out, A, B, f"run_fast {name} {m}x{k}x{n}")
        if cc >= 80:
            tile = matmul_tc.plan_fast(device, name, m, n, k)
            assert tile in matmul_tc.tiles(name)
    if cc >= 80:  # a grid that fills the GPU takes the large tile; a tiny one a smaller tile
        assert matmul_tc.plan_fast(device, name, 8192, 8192, 8192) == matmul_tc.tiles(name)[0]
        assert matmul_tc.plan_fast(device, name, 128, 128, 4096) != matmul_tc.tiles(name)[0]


@pytest.mark.gpu
def test_unsupported_dtype_raises_before_any_launch(monkeypatch):
    """bfloat16 and TF32 before sm_80, mma_sync before sm_80: a TypeError, the output untouched."""
    dtype = np.dtype(np.float32)
    monkeypatch.setattr(matmul_tc, "compute_capability", lambda device_id: 75)
    A, B = random_array((32, 32), dtype), random_array((32, 32), dtype)
    out = poisoned((32, 32), dtype)
    for kind in KINDS:
        with pytest.raises(TypeError, match="sm_80"):
            matmul_tc.run_tc(kind, A, B, out)
    with pytest.raises(TypeError, match="sm_80"):
        matmul_tc.run_tc("mma_sync", A.astype(np.float16), B.astype(np.float16), out.astype(np.float16))
    assert bool(np.isnan(out.get()).all())


@pytest.mark.gpu
@pytest.mark.large
def test_past_2_31_elements(cc):
    """A with more than 2^31 elements, then C with more: 64-bit offsets in the loads and the epilogue."""
    import cupy

    _skip_unsupported("mma_sync", "float16", cc)
    cupy.get_default_memory_pool().free_all_blocks()
    if cupy.cuda.runtime.memGetInfo()[0] < 14 * 2**30:
        pytest.skip("needs 14 GiB of free device memory")
    rows = [0, 1, 40000, 65535, 65536]
    for m, k, n in [(65537, 32769, 64), (65537, 64, 32769)]:
        A, B = random_array((m, k), np.float16), random_array((k, n), np.float16)
        for kind in KINDS:
            out = poisoned((m, n), np.float16)
            matmul_tc.run_tc(kind, A, B, out)
            assert_tensor_core_product(out[rows], A[rows], B, f"{kind} {m}x{k}x{n} rows {rows}")
            del out
        del A, B
        cupy.get_default_memory_pool().free_all_blocks()
