"""cudakit.transpose: every variant, element size and shape kind, bit for bit against cupy.ascontiguousarray(a.T)."""
import importlib
import re

import numpy as np
import pytest

import cudakit
from cudakit import _check, _compile
from conftest import on_a_side_stream, poisoned

transpose_module = importlib.import_module("cudakit.transpose")  # cudakit.transpose is the function

VARIANTS = [v.name for v in cudakit.variants("transpose")]
DIAGNOSTICS = [v for v in cudakit.variants("transpose", diagnostics=True) if v.diagnostic]
DTYPES = [np.int8, np.float16, np.float32, np.float64, np.complex64]
# 48x80, 272x144: whole 16-byte rows for every element size (the aligned path), several tiles, partial ones;
# 241x37, 1013x97, 125x61: rows just past multiples of the overlapping tiles of the misaligned path.
SHAPES = [(1, 1), (1, 7), (7, 1), (31, 33), (32, 32), (97, 1013), (4097, 3), (3, 4097), (48, 80), (272, 144),
          (241, 37), (1013, 97), (125, 61), (0, 5), (5, 0)]


def random_bits(shape, dtype, order="C"):
    """Fresh random bytes viewed as dtype (NaNs and all): a transpose must move every bit pattern unchanged."""
    import cupy

    dtype = np.dtype(dtype)
    if 0 in shape:
        return cupy.empty(shape, dtype, order=order)
    raw = cupy.random.randint(0, 256, size=(shape[0], shape[1] * dtype.itemsize), dtype=np.uint8)
    return cupy.asarray(raw.view(dtype), order=order)


def assert_same_bits(res, ref, what=""):
    import cupy

    bits = np.dtype(f"u{ref.dtype.itemsize}")
    assert res.shape == ref.shape and res.dtype == ref.dtype, what
    wrong = int(cupy.count_nonzero(res.view(bits) != cupy.ascontiguousarray(ref).view(bits)))
    assert wrong == 0, f"{what}: {wrong} of {ref.size} elements differ"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_transpose_is_exact(variant, dtype, shape):
    a = random_bits(shape, dtype)
    out = poisoned(shape[::-1], dtype)
    res = cudakit.transpose(a, out=out, variant=variant)
    assert res is out and res.flags.c_contiguous
    assert_same_bits(res, a.T, f"{variant} {np.dtype(dtype)} {shape}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_transpose_4097_square(variant, dtype):
    a = random_bits((4097, 4097), dtype)
    res = cudakit.transpose(a, out=poisoned((4097, 4097), dtype), variant=variant)
    assert_same_bits(res, a.T, f"{variant} {np.dtype(dtype)}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(64, 128), (129, 257), (1000, 24)])
@pytest.mark.parametrize("offsets", [(1, 0), (0, 3), (5, 7)])
def test_transpose_arrays_that_start_mid_unit(variant, dtype, shape, offsets):
    """C-contiguous views at an element offset: rows no longer start on 16 bytes, on the input, the output or both."""
    import cupy

    n = shape[0] * shape[1]
    a = random_bits((1, n + offsets[0]), dtype)[0, offsets[0]:].reshape(shape)
    buf = poisoned((n + offsets[1],), dtype)
    out = buf[offsets[1]:].reshape(shape[::-1])
    assert a.flags.c_contiguous and out.flags.c_contiguous
    res = cudakit.transpose(a, out=out, variant=variant)
    assert_same_bits(res, a.T, f"{variant} {np.dtype(dtype)} {shape} offsets {offsets}")
    if offsets[1]:
        assert_same_bits(buf[:offsets[1]], poisoned((offsets[1],), dtype), "the bytes before out")
    assert cupy.shares_memory(res, buf)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.int8, np.float32, np.complex64])
def test_transpose_f_order_strided_and_sliced_inputs(variant, dtype):
    base = random_bits((203, 317), dtype)
    cases = {
        "F-order": random_bits((203, 317), dtype, order="F"),
        "transposed view": base.T,
        "stepped": base[::2, ::3],
        "sliced": base[3:150, 5:290],
        "negative strides": base[::-1, ::-2],
        "row": base[7:8, :],
        "column": base[:, 9:10],
    }
    for what, a in cases.items():
        res = cudakit.transpose(a, out=poisoned(a.shape[::-1], dtype), variant=variant)
        assert_same_bits(res, a.T, f"{variant} {what}")
        assert_same_bits(cudakit.transpose(a, variant=variant), a.T, f"{variant} {what}, allocated out")


@pytest.mark.gpu
def test_transpose_other_dtypes_and_zero_size():
    import cupy

    for dtype in (np.bool_, np.uint16, np.int32, np.uint64, np.float16):
        a = random_bits((37, 55), dtype)
        assert_same_bits(cudakit.transpose(a), a.T, str(np.dtype(dtype)))
    for shape in [(0, 5), (5, 0), (0, 0)]:
        res = cudakit.transpose(cupy.empty(shape, np.float32))
        assert res.shape == shape[::-1] and res.dtype == np.float32


@pytest.mark.gpu
def test_transpose_on_a_non_default_stream():
    import cupy

    a = random_bits((1031, 2053), np.float16)
    res = on_a_side_stream(lambda out: cudakit.transpose(a, out=out), cupy.empty((2053, 1031), np.float16))
    assert_same_bits(res, a.T)


@pytest.mark.gpu
@pytest.mark.parametrize("diag", DIAGNOSTICS, ids=lambda v: v.name)
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(97, 1013), (4097, 3), (3, 4097), (33, 64), (64, 64)])
def test_diagnostics_stay_in_bounds_and_copies_copy(diag, dtype, shape):
    """Bench-only kernels: out (a.size elements, shaped like a) sits between guard bands that must stay poisoned."""
    import cupy

    a = random_bits(shape, dtype)
    guard = 4096
    buf = poisoned((a.size + 2 * guard,), dtype)
    out = buf[guard:guard + a.size].reshape(shape)
    diag.run(a, out)
    cupy.cuda.get_current_stream().synchronize()
    untouched = poisoned((guard,), dtype)
    assert_same_bits(buf[:guard], untouched, f"{diag.name}: guard before out")
    assert_same_bits(buf[guard + a.size:], untouched, f"{diag.name}: guard after out")
    if diag.name in ("copy", "copySharedMem"):
        assert_same_bits(out, a, diag.name)
    elif shape == (64, 64):  # square multiples of TILE_DIM: the seed's own definitions of the two half-transposes
        tiles = a.reshape(2, 32, 2, 32)  # [tile row, row in tile, tile column, column in tile]
        want = tiles.transpose(2, 1, 0, 3) if diag.name == "transposeCoarseGrained" else tiles.transpose(0, 3, 2, 1)
        assert_same_bits(out, want.reshape(shape), diag.name)


@pytest.mark.gpu
def test_diagnostics_are_not_reachable_through_the_api():
    a = random_bits((8, 8), np.float32)
    for diag in DIAGNOSTICS:
        with pytest.raises(ValueError, match="unknown variant"):
            cudakit.transpose(a, variant=diag.name)


@pytest.mark.gpu
def test_transpose_check_mode_catches_a_wrong_result(monkeypatch):
    from cudakit import _variants

    a = random_bits((70, 90), np.float64)
    cudakit.transpose(a, check=True)  # a right result passes
    fast = _variants.lookup("transpose", "fast")
    broken = _variants.Variant("transpose", "fast", fast.lesson, lambda a, out: out.view(np.uint8).fill(0))
    monkeypatch.setitem(_variants._TABLE["transpose"], "fast", broken)
    with pytest.raises(_check.CheckError, match="differ"):
        cudakit.transpose(a, check=True)
    monkeypatch.setattr(_check, "CHECK_BY_DEFAULT", True)  # CUDAKIT_CHECK=1 at import
    with pytest.raises(_check.CheckError):
        cudakit.transpose(a)


@pytest.mark.gpu
def test_transpose_bad_inputs():
    import cupy

    a = random_bits((4, 6), np.float32)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.transpose(np.ones((4, 6), np.float32))
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.transpose([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(ValueError, match="at most 8"):
        cudakit.transpose(a.reshape((1,) * 7 + (4, 6)))
    with pytest.raises(ValueError, match="axes"):
        cudakit.transpose(a, axes=(0, 0))
    with pytest.raises(TypeError, match="unsupported dtype complex128"):
        cudakit.transpose(a.astype(np.complex128))
    with pytest.raises(ValueError, match=r"\(4, 6\).*\(6, 4\)"):
        cudakit.transpose(a, out=cupy.empty((4, 6), np.float32))
    with pytest.raises(TypeError, match="dtype"):
        cudakit.transpose(a, out=cupy.empty((6, 4), np.int32))
    with pytest.raises(ValueError, match="C-contiguous"):
        cudakit.transpose(a, out=cupy.empty((6, 4), np.float32, order="F"))
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.transpose(a, out=np.empty((6, 4), np.float32))
    with pytest.raises(ValueError, match="overlaps"):
        square = random_bits((5, 5), np.float32)
        cudakit.transpose(square, out=square)
    valid = ", ".join(VARIANTS)
    with pytest.raises(ValueError, match=f"valid variants: {re.escape(valid)}$"):
        cudakit.transpose(a, variant="nope")


def test_instantiation_groups_cover_every_kernel():
    """GPU-less: every __global__ template in transpose.cu and its headers is built, for every element size and both
    alignments."""
    text = _compile.source("transpose") + "".join(p.read_text() for p in _compile.kernel_dir().glob("transpose_*.cuh"))
    kernels = set(re.findall(r"__global__ void(?: __launch_bounds__\(.*\))?\s+(\w+)\(", text))
    assert set(transpose_module.SEED_KERNELS) | {"transpose_vec16", "transpose_thin", "permute_line_tiles",
                                                 "permute_pieces", "permute_tiles"} == kernels
    groups = transpose_module.instantiation_groups()
    assert len(groups) == len(transpose_module.ITEMSIZES)
    for itemsize, group in zip(transpose_module.ITEMSIZES, groups):
        assert len(set(group)) == len(group)
        for name in kernels - {"permute_line_tiles", "permute_pieces", "permute_tiles"}:  # per element size; the lines
            # kernels per piece size
            assert any(expr.startswith(f"{name}<{_compile.uint_ctype(itemsize)}") for expr in group), (name, itemsize)
        assert _compile.instantiation("permute_line_tiles", transpose_module.LINE_PIECE) in group
        for size in (1, 2, 4, 8, 16):  # every piece a line of this element size can take, both index widths
            for narrow in (True, False):
                assert (transpose_module.pieces_expression(size, narrow) in group) == (size >= itemsize)
            for side in transpose_module.TILE_SIDES:
                assert (transpose_module.tiles_expression(size, side) in group) == (size >= itemsize)
        for aligned, group_shift in transpose_module.vec16_orders(itemsize):
            for swizzle, word_gather in transpose_module.VEC16_STEPS.values():
                assert transpose_module.vec16_expression(itemsize, aligned, swizzle, word_gather, group_shift) in group
            fast = transpose_module.VEC16_STEPS["fast"]
            assert transpose_module.vec16_expression(itemsize, aligned, *fast, group_shift, batched=True) in group


def test_variant_table_shape():
    """GPU-less: seed names kept, the four non-transposes are diagnostics, fast is last."""
    every = cudakit.variants("transpose", diagnostics=True)
    assert [v.name for v in every if v.seed] == list(transpose_module.SEED_KERNELS)
    assert {v.name for v in every if v.diagnostic} == {"copy", "copySharedMem", "transposeCoarseGrained",
                                                        "transposeFineGrained"}
    assert VARIANTS[-1] == "fast"


@pytest.mark.gpu
@pytest.mark.parametrize("seam", [16, 32, 64])
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
def test_every_seam_is_exact_on_misaligned_rows(dtype, seam):
    """The tuning probes' seams (tiles meeting on 16-, 32- or 64-byte output boundaries): exact at the matrix's edges,
    with an offset output and rows that start at every shift within a unit."""
    run = transpose_module.vec16_runner(*transpose_module.VEC16_STEPS["fast"], seam=seam)
    for shape in [(1000, 131), (131, 1000), (37, 29)]:
        a = random_bits(shape, dtype)
        buf = poisoned((a.size + 1,), dtype)
        out = buf[1:].reshape(shape[::-1])
        assert not transpose_module.is_aligned(a, out)
        run(a, out)
        assert_same_bits(out, a.T, f"{np.dtype(dtype)} {shape} seam {seam}")
        assert_same_bits(buf[:1], poisoned((1,), dtype), "the element before out")


@pytest.mark.gpu
@pytest.mark.parametrize("group_shift", [None, 0, 3, 5])
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
def test_every_block_order_is_exact(dtype, group_shift):
    """Blocks going down 1, 8 or 32 tile rows at a time (None: the library's choice), on aligned and misaligned
    rows, with tile rows that do not fill the last group."""
    run = transpose_module.vec16_runner(*transpose_module.VEC16_STEPS["fast"], group_shift=group_shift)
    for shape, offset in [((96, 40000), 0), ((1000, 512), 0), ((300, 2049), 1), ((65, 20001), 1)]:
        a = random_bits(shape, dtype)
        buf = poisoned((a.size + offset,), dtype)
        out = buf[offset:].reshape(shape[::-1])
        run(a, out)
        assert_same_bits(out, a.T, f"{np.dtype(dtype)} {shape} group_shift {group_shift}")


def test_wide_matrices_go_down_32_tile_rows():
    """GPU-less: the block-order rule on an H100's numbers (132 SMs x 4 blocks of the float32 tile in flight)."""
    in_flight = 132 * 4
    shift = transpose_module.vec16_group_shift
    assert shift(True, 4, 16384 // 64, 64 * 4, in_flight, 16384 // 64) == 0  # square: row by row
    assert shift(True, 4, 262144 // 64, 64 * 4, in_flight, 1024 // 64) == 5  # 1024 x 262144
    assert shift(True, 4, 1024 // 64, 64 * 4, in_flight, 262144 // 64) == 0  # 262144 x 1024
    few = transpose_module.GROUP_MIN_TILE_ROWS  # 64 x 341628: one tile row, row by row (the grid would be 32x)
    assert shift(True, 4, 341628 // 64, 64 * 4, in_flight, 1) == 0
    assert shift(True, 4, 341628 // 64, 64 * 4, in_flight, few - 1) == 0
    assert shift(True, 4, 341628 // 64, 64 * 4, in_flight, few) == 5
    misaligned = transpose_module.VEC16_MISALIGNED_GROUP_SHIFT[1]  # int8 goes down 32 tile rows, but not few
    assert misaligned == 5 and (False, 0) in transpose_module.vec16_orders(1)
    assert shift(False, 1, 10**4, 112, 0, few) == misaligned
    assert shift(False, 1, 10**4, 112, 0, few - 1) == 0
