"""Drop-in transposes (issue 17): every operand form cupy.transpose takes, checked bit for bit against CuPy's own
results, with the paths the planner picks for thin matrices, batches of 2-D transposes, whole lines and gathers."""
import importlib
import math

import numpy as np
import pytest

import cudakit
from conftest import poisoned, random_array

tr = importlib.import_module("cudakit.transpose")
lines_module = importlib.import_module("cudakit._transpose_lines")  # run_lines' and run_tiles' planning


def same_bits(x, y) -> bool:
    import cupy

    bits = np.dtype(f"u{x.dtype.itemsize}")
    return x.shape == y.shape and bool(cupy.array_equal(x.view(bits), y.copy(order="C").view(bits)))


# (long sides of whole 4-byte words: the word path for bytes and 16-bit elements; 65_538: of 2-byte pairs only)
THIN = [(3, 1_000_003), (1_000_003, 3), (31, 70_001), (70_001, 31), (1, 4097), (4097, 1), (2, 33), (17, 5),
        (12, 87_547), (3, 1_048_576), (1_048_576, 3), (31, 65_536), (65_536, 31), (2, 65_538), (65_538, 7), (5, 36),
        (63, 40_003), (39, 65_536), (65_536, 39), (48, 65_540), (35, 1_000), (15, 5_939), (27_725, 23),
        (8, 65_536), (16, 65_536), (4, 131_072), (3, 1_048_580), (131_072, 4), (65_536, 8)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", THIN, ids=lambda s: "x".join(map(str, s)))
def test_thin_transposes_are_exact(dtype, shape):
    a = random_array(shape, dtype)
    out = poisoned(shape[::-1], dtype)
    assert cudakit.transpose(a, out=out) is out
    assert same_bits(out, a.T)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float16])
@pytest.mark.parametrize("shape", [(3, 65_536), (65_536, 3), (4, 2, 64, 3)], ids=str)
@pytest.mark.parametrize("offsets", [(1, 0), (0, 1), (2, 2)])
def test_thin_transposes_of_arrays_off_a_word(dtype, shape, offsets):
    """The thin kernel's word path needs both arrays on 4-byte boundaries: input or output a few elements off one
    (a batch of thin transposes, NHWC to NCHW, included) moves element by element, and exactly."""
    import cupy

    axes = (1, 0) if len(shape) == 2 else (0, 3, 1, 2)
    size = int(np.prod(shape))
    a = random_array((size + 2,), dtype)[offsets[0]:offsets[0] + size].reshape(shape)
    out_shape = tuple(shape[i] for i in axes)
    out = poisoned((size + 2,), dtype)[offsets[1]:offsets[1] + size].reshape(out_shape)
    assert cudakit.transpose(a, axes, out=out) is out
    assert same_bits(out, cupy.ascontiguousarray(a.transpose(axes)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32])
@pytest.mark.parametrize("shape", [(4, 3, 64, 64), (2, 3, 4, 11), (3, 5, 8, 16), (2, 16, 32, 33)], ids=str)
def test_thin_nchw_to_nhwc_batches(dtype, shape):
    """A batch of (c, h * w) to (h * w, c) transposes: each image's packed output starts where the last ended (on
    a word, not always on 16 bytes), and short sides that go through the packed tile and through the column tile."""
    import cupy

    a = random_array(shape, dtype)
    out = poisoned((shape[0], shape[2], shape[3], shape[1]), dtype)
    assert cudakit.transpose(a, (0, 2, 3, 1), out=out) is out
    assert same_bits(out, cupy.ascontiguousarray(a.transpose(0, 2, 3, 1)))


@pytest.mark.gpu
def test_thin_transposes_take_the_thin_path():
    assert tr.thin_side((3, 1 << 20)) == 3 and tr.thin_side((1 << 20, 31)) == 31
    assert tr.thin_side((32, 1 << 20)) is None and tr.thin_side((40, 40)) is None
    # elements up to 4 bytes: a short side of rows below 64, of columns below 40
    assert tr.thin_side((63, 1 << 20), 1) == 63 and tr.thin_side((64, 1 << 20), 4) is None
    assert tr.thin_side((1 << 20, 39), 2) == 39 and tr.thin_side((1 << 20, 40), 2) is None
    assert tr.thin_side((63, 1 << 20), 8) is None


def test_thin_tile_follows_the_power_of_two_in_c():
    columns, packed, swizzled = tr.THIN_COLUMNS, tr.THIN_PACKED, tr.THIN_SWIZZLED
    assert all(tr.thin_tile(c, e, wide) == packed for c in (2, 3, 5, 17, 31, 63) for e in (1, 2) for wide in (0, 1))
    # (c, rows) input: the packed tile swizzled from c % 8 == 0
    assert tr.thin_tile(4, 1, False) == packed and tr.thin_tile(4, 2, False) == packed
    assert all(tr.thin_tile(c, e, False) == swizzled for c in (8, 16, 24, 48) for e in (1, 2))
    # (rows, c) input: the column tile from c % (4 * elements a word) == 0
    assert tr.thin_tile(4, 1, True) == columns and tr.thin_tile(4, 2, True) == packed
    assert tr.thin_tile(8, 2, True) == columns and tr.thin_tile(12, 1, True) == columns


def test_line_transposes_are_batches_of_2d_transposes_of_short_lines():
    """GPU-less: which merged permutations run as a batch of 2-D transposes of lines, and of what."""
    assert tr.line_transposes((5, 7, 3), (1, 0, 2), 4) == (1, 5, 7, 12)
    assert tr.line_transposes((2, 5, 7, 3), (0, 2, 1, 3), 2) == (2, 5, 7, 6)
    assert tr.line_transposes((2, 5, 7, 8), (0, 2, 1, 3), 8) is None  # 64 bytes: whole lines
    assert tr.line_transposes((2, 5, 7, 63), (0, 2, 1, 3), 1) == (2, 5, 7, 63)
    assert tr.line_transposes((2, 5, 7, 3), (2, 1, 0, 3), 1) is None  # not a batch of 2-D transposes
    assert tr.line_transposes((5, 7, 3), (0, 2, 1), 1) is None  # the last axis moves


def test_line_tiles_hold_about_line_tile_bytes_and_span_the_right_axes():
    """GPU-less: permute_line_tiles' tile is TS x TS lines (TS a power of two, at most LINE_TILE_BYTES of lines),
    a short side giving the other its share; the plan's tiles span the output's and the input's fastest axes of
    lines, the innermost other axis goes in the arguments, the rest in meta; a tile of fewer pieces than a block's
    threads, axes that are not merged and grids past 2^31 blocks get no plan (permute_pieces takes them)."""
    budget = lines_module.LINE_TILE_BYTES
    assert lines_module.line_tile(64, 1000, 1000) == (16, 16)
    assert lines_module.line_tile(256, 1000, 1000) == (8, 8)
    assert lines_module.line_tile(16, 1000, 1000) == (32, 32)
    assert lines_module.line_tile(256, 1000, 3) == (21, 3) and lines_module.line_tile(256, 2, 1000) == (2, 32)
    assert lines_module.line_tile(16, 3, 1000) == (3, 341) and lines_module.line_tile(16, 1000, 5) == (204, 5)
    for line_bytes in range(16, lines_module.LINE_TILE_MAX_BYTES + 1, 16):
        for lines_out, lines_in in ((1000, 1000), (3, 1000), (1000, 5), (2, 2), (40, 33), (1, 7), (9, 1)):
            tile_out, tile_in = lines_module.line_tile(line_bytes, lines_out, lines_in)
            assert 1 <= tile_out <= lines_out and 1 <= tile_in <= lines_in
            assert tile_out * tile_in * line_bytes <= budget
    assert lines_module._tiles_plan((10**6, 3, 3), (0, 2, 1), 64) is None  # 36 pieces a tile: permute_pieces
    assert lines_module._tiles_plan((3, 4, 5), (1, 0, 2), 32) is None  # not merged
    assert lines_module._tiles_plan((6,), (0,), 32) is None
    # (B, R, C) lines to (B, C, R): tiles span R (the output's fastest) and C (the input's), B is the other axis
    _, blocks, head, host, tail = lines_module._tiles_plan((6, 50, 70), (0, 2, 1), 256)
    assert [int(x) for x in head] == [16, 50, 70, 70, 50, lines_module.pair(8, 8), lines_module.pair(9, 63), 6,
                                      3500, 3500] and blocks == 6 * 63
    assert list(host) == [0] and int(tail[0]) == 0
    # (A, B, C) lines to (C, B, A): tiles span A and C, B is the other axis (input stride C, output stride A)
    _, blocks, head, host, tail = lines_module._tiles_plan((5, 6, 7), (2, 1, 0), 256)
    assert [int(x) for x in head[1:5]] == [5, 42, 7, 30] and [int(x) for x in head[7:]] == [6, 7, 5] and blocks == 6
    # (A, B, C, D) to (D, B, A, C): tiles span C and D; A (innermost in the output) in the arguments, B in meta
    _, blocks, head, host, tail = lines_module._tiles_plan((2, 3, 4, 5), (3, 1, 0, 2), 256)
    assert [int(x) for x in head[1:5]] == [4, 5, 5, 24] and [int(x) for x in head[7:]] == [2, 60, 4]
    assert list(host) == [3, 20, 8] and int(tail[0]) == 1 and blocks == 6
    assert lines_module._tiles_plan((2**20, 2**13, 2**12), (0, 2, 1), 256) is None  # a grid past 2^31 blocks


def transposed_at_offset(shape, axes, dtype, offset: int):
    """cudakit.transpose of a random array `offset` elements into its buffer, into a poisoned output as far into
    its own: (a, out, CuPy's result)."""
    import cupy

    size = int(np.prod(shape))
    a = random_array(size + offset, dtype)[offset:].reshape(shape)
    want = cupy.transpose(a, axes).copy(order="C")
    out = poisoned(size + offset, dtype)[offset:].reshape(want.shape)
    cudakit.transpose(a, axes, out=out)
    return a, out, want


AXES = [((2, 3, 4), None), ((2, 3, 4), (0, 2, 1)), ((2, 3, 4), (1, 0, 2)), ((5, 7, 9, 3), (0, 3, 1, 2)),
        ((5, 3, 7, 9), (0, 2, 3, 1)), ((4, 33, 65, 3), (0, 3, 1, 2)), ((2, 3, 1, 4, 5), (4, 2, 0, 3, 1)),
        ((3, 2, 2, 2, 2, 2, 2, 3), (7, 6, 5, 4, 3, 2, 1, 0)), ((6,), None), ((6,), (0,)), ((64, 96), (1, 0)),
        ((2, 0, 3), (2, 1, 0)), ((), None),
        ((3, 5, 7, 160), (0, 2, 1, 3)), ((4, 6, 130), (1, 0, 2)), ((2, 3, 4, 5, 64), (3, 1, 0, 2, 4))]
LINES = [((3, 5, 7, 160), (0, 2, 1, 3)), ((4, 6, 130), (1, 0, 2)), ((4, 6, 128), (1, 0, 2)),
         ((5, 2, 3, 4, 96), (2, 0, 3, 1, 4)), ((3, 4, 5, 3), (2, 1, 0, 3)), ((3, 4, 5, 9), (2, 1, 0, 3)),
         ((3, 5, 7, 17), (2, 1, 0, 3)), ((2, 300, 3, 64), (0, 2, 1, 3)), ((2, 3, 300, 64), (0, 2, 1, 3)),
         ((3, 37, 45, 64), (0, 2, 1, 3)), ((3, 4, 512), (1, 0, 2)), ((3, 4, 2048), (1, 0, 2)),
         ((2, 3, 5, 7, 128), (3, 2, 0, 1, 4)), ((4, 5, 6, 16), (2, 1, 0, 3)), ((2, 3, 4, 5, 32), (3, 1, 0, 2, 4)),
         ((4, 5, 6, 12), (2, 1, 0, 3)), ((40, 3, 37, 20), (2, 1, 0, 3))]  # (3, 5, 6 and 10 pieces a line)
# batches of 2-D transposes of short lines: partial tiles on both sides, 16 and 32 lines a tile side, lines of 1 to
# 63 bytes, a matrix of one tile row or column
LINE_TRANSPOSES = [((7, 5, 3), (1, 0, 2)), ((3, 37, 45, 9), (0, 2, 1, 3)), ((13, 4, 2), (1, 0, 2)),
                   ((2, 70, 33, 5), (0, 2, 1, 3)), ((65, 3, 4), (1, 0, 2)), ((5, 2, 40, 7), (0, 2, 1, 3)),
                   ((3, 33, 64, 6), (0, 2, 1, 3)), ((40, 31, 15), (1, 0, 2)), ((2, 17, 19, 31), (0, 2, 1, 3))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", LINES, ids=str)
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_permutations_keeping_the_last_axis_move_whole_lines(dtype, shape, axes, offset, monkeypatch):
    """The last axis stays: whole lines move, a block a tile of lines in 16-byte pieces where they fit the lines and
    the alignment of input and output (offset by `offset` elements), the lines are at most LINE_TILE_MAX_BYTES and a
    tile fills a block (_tiles_plan), a thread a piece elsewhere; equal to CuPy's result either way."""
    taken, kernels = [], []
    monkeypatch.setattr(tr, "run_lines", lambda *args, run=tr.run_lines: taken.append(args[2:]) or run(*args))
    monkeypatch.setattr(lines_module, "_line_plans", {})  # the plan made afresh: its kernel is looked up by kernel()
    monkeypatch.setattr(lines_module, "kernel", lambda *args, find=lines_module.kernel: kernels.append(args[1])
                        or find(*args))
    a, out, want = transposed_at_offset(shape, axes, dtype, offset)
    assert same_bits(out, want)
    itemsize = np.dtype(dtype).itemsize
    line_bytes = shape[-1] * itemsize
    assert len(taken) == 1 and taken[0][0][-1] == shape[-1]
    merged, perm = taken[0]
    whole_pieces = line_bytes % 16 == 0 and offset * itemsize % 16 == 0
    assert lines_module.moves_tiles(line_bytes, a.data.ptr, out.data.ptr) == (
        whole_pieces and line_bytes <= lines_module.LINE_TILE_MAX_BYTES)
    tiles = lines_module.moves_tiles(line_bytes, a.data.ptr, out.data.ptr) \
        and lines_module._tiles_plan(merged[:-1], perm[:-1], line_bytes) is not None
    piece = math.gcd(line_bytes, 16, a.data.ptr, out.data.ptr)
    assert kernels == [tr.instantiation("permute_line_tiles", tr.LINE_PIECE) if tiles
                       else tr.pieces_expression(piece, True)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", LINE_TRANSPOSES, ids=str)
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_batches_of_short_line_transposes_take_tiles_or_whole_elements(dtype, shape, axes, offset, monkeypatch):
    """(B, R, C, L) -> (B, C, R, L) with lines below TILE_LINES_MAX_BYTES: lines of 1, 2, 4 or 8 bytes on addresses
    aligned to that are transposed as elements of that size; others go through permute_tiles' shared tiles in the
    widest units that divide the line and both addresses; longer lines move whole (run_lines). Equal to CuPy's
    result, bit for bit, every way."""
    tiled = []
    monkeypatch.setattr(tr, "run_tiles", lambda *args, run=tr.run_tiles: tiled.append(args[2:]) or run(*args))
    a, out, want = transposed_at_offset(shape, axes, dtype, offset)
    assert same_bits(out, want)
    _, merged, perm = tr._nd.transpose_plan(shape, axes)
    lines = tr.line_transposes(merged, perm, a.itemsize)
    line_bytes = shape[-1] * a.itemsize
    assert (lines is not None and lines[3] == line_bytes) == (line_bytes < lines_module.TILE_LINES_MAX_BYTES)
    as_elements = line_bytes in (1, 2, 4, 8) and offset * a.itemsize % line_bytes == 0 \
        and a.nbytes >= tr.LINE_ELEMENTS_MIN_BYTES
    assert tiled == ([] if as_elements or lines is None else [lines])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("offset", [0, 1])
def test_large_batches_of_2_4_and_8_byte_lines_move_as_elements(dtype, offset, monkeypatch):
    """Past LINE_ELEMENTS_MIN_BYTES, lines of 1, 2, 4 or 8 bytes on addresses aligned to that are transposed as
    elements of that size (no tiles); misaligned ones still take the tiles. Bit for bit CuPy's result."""
    tiled = []
    monkeypatch.setattr(tr, "run_tiles", lambda *args, run=tr.run_tiles: tiled.append(args[2:]) or run(*args))
    itemsize = np.dtype(dtype).itemsize
    line = max(1, 8 // itemsize)  # (float64: one element, a plain batch of 2-D transposes)
    shape, axes = (3, 300, 4000 // line + 7, line), (0, 2, 1, 3)
    a, out, want = transposed_at_offset(shape, axes, dtype, offset)
    assert same_bits(out, want) and a.nbytes >= tr.LINE_ELEMENTS_MIN_BYTES
    assert (tiled == []) == (offset * itemsize % (line * itemsize) == 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", [((3, 4, 5, 6), (2, 0, 3, 1)), ((2, 3, 4, 5, 6), (4, 2, 0, 3, 1)),
                                        ((33, 4, 37, 53), (0, 3, 2, 1)), ((701, 3, 5, 2), (3, 1, 0, 2))], ids=str)
def test_permutations_moving_the_last_axis_gather_elements(dtype, shape, axes, monkeypatch):
    """A permutation that is neither a batch of 2-D transposes nor keeps the last axis runs the lines kernel over
    lines of one element (a trailing length-1 axis that stays), equal to CuPy's result."""
    import cupy

    taken = []
    monkeypatch.setattr(tr, "run_lines", lambda *args, run=tr.run_lines: taken.append(args[2:]) or run(*args))
    a = random_array(shape, dtype)
    want = cupy.transpose(a, axes).copy(order="C")
    out = poisoned(want.shape, dtype)
    cudakit.transpose(a, axes, out=out)
    assert same_bits(out, want)
    assert len(taken) == 1 and taken[0][0][-1] == 1 and taken[0][1][-1] == len(taken[0][1]) - 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float64])
@pytest.mark.parametrize("shape,axes", [((3, 4, 5, 6), (2, 0, 3, 1)), ((3, 5, 7, 3), (2, 1, 0, 3))], ids=str)
def test_element_gathers_past_their_size_take_cupys_copy(dtype, shape, axes, monkeypatch):
    """Past ELEMENT_LINES_MAX_BYTES, a permutation that moves the last axis is CuPy's strided copy; one that keeps it
    still moves lines, of any length."""
    import cupy

    taken = []
    monkeypatch.setattr(tr, "run_lines", lambda *args, run=tr.run_lines: taken.append(args) or run(*args))
    monkeypatch.setattr(tr, "ELEMENT_LINES_MAX_BYTES", int(np.prod(shape)) * np.dtype(dtype).itemsize - 1)
    a = random_array(shape, dtype)
    out = poisoned(cupy.transpose(a, axes).shape, dtype)
    cudakit.transpose(a, axes, out=out)
    assert len(taken) == (axes[-1] == len(axes) - 1) and same_bits(out, cupy.transpose(a, axes).copy(order="C"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("offset", [0, 1])
def test_pieces_index_in_64_bits_past_the_narrow_count(dtype, offset, monkeypatch):
    """permute_pieces with 64-bit indices (forced here by a small NARROW_PIECES; reached past 2^32 pieces) gives the
    same bits as CuPy, the tail of a block's pieces included."""
    tr.instantiations(np.dtype(dtype).itemsize)  # cached before pieces_expression is watched
    widths = []
    monkeypatch.setattr(lines_module, "pieces_expression", lambda size, narrow, named=lines_module.pieces_expression:
                        widths.append(narrow) or named(size, narrow))
    monkeypatch.setattr(lines_module, "NARROW_PIECES", 100)
    monkeypatch.setattr(lines_module, "_line_plans", {})
    shape, axes = (37, 23, 3, 5), (2, 1, 0, 3)  # not a batch of 2-D transposes: lines move piece by piece
    a, out, want = transposed_at_offset(shape, axes, dtype, offset)
    assert same_bits(out, want) and widths == [False]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape,axes", AXES, ids=str)
def test_nd_transpose_equals_cupy(dtype, shape, axes):
    import cupy

    a = random_array(shape, dtype)
    want = cupy.transpose(a, axes).copy(order="C")  # (cupy.ascontiguousarray makes a 0-d array 1-D)
    got = cudakit.transpose(a, axes=axes)
    assert got.flags.c_contiguous and same_bits(got, want)
    out = poisoned(want.shape, dtype)
    assert cudakit.transpose(a, axes, out=out) is out and same_bits(out, want)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["F", "sliced", "negative"])
def test_nd_transpose_of_views(layout):
    import cupy

    base = random_array((6, 10, 12), np.float32)
    a = {"F": cupy.asfortranarray(base), "sliced": base[:, ::2, 1:], "negative": base[::-1, :, ::-1]}[layout]
    for axes in (None, (0, 2, 1), (2, 0, 1)):
        assert same_bits(cudakit.transpose(a, axes), cupy.transpose(a, axes))


@pytest.mark.gpu
def test_nd_transpose_bad_axes_raise_like_numpy():
    a = random_array((2, 3, 4), np.float32)
    for axes in ((0, 1), (0, 1, 1), (0, 1, 3), (0, 1, -4)):
        with pytest.raises(ValueError, match="axes"):
            cudakit.transpose(a, axes)
    assert same_bits(cudakit.transpose(a, (-1, 0, 1)), a.transpose(2, 0, 1))
    with pytest.raises(ValueError, match="at most 8"):
        cudakit.transpose(random_array((1,) * 9, np.float32))
