"""Transpose: cudakit.transpose(a, axes=None) -> a new C-contiguous array equal to cupy.transpose(a, axes), for any
1-, 2-, 4- or 8-byte dtype and up to 8 axes.

The kernels move raw bits (they are instantiated per element size over unsigned integers), so int8, bool, float16,
float32, complex64, float64, ... all take the same code. Axes that stay adjacent merge first (transpose_plan), so:
  * nothing moves but length-1 axes (an F-contiguous matrix, too): a plain device-to-device copy;
  * (rows, cols) -> (cols, rows): the chosen kernel (the fast one takes a side below 32 to the thin kernel);
  * a batch of those (NHWC <-> NCHW): one launch of the fast kernel over the batch;
  * the last axis kept (NHWC -> NWHC): whole lines move; a batch of 2-D transposes of lines under
    TILE_LINES_MAX_BYTES goes through shared tiles (permute_tiles), or from LINE_ELEMENTS_MIN_BYTES on as elements
    of 1, 2, 4 or 8 bytes when its lines are that long; other lines move a block a tile of lines in 16-byte pieces
    where they can (permute_line_tiles), else a thread a piece in the widest pieces that divide the line
    (permute_pieces);
  * anything else: lines of one element up to ELEMENT_LINES_MAX_BYTES (a gather, as CuPy's strided copy, with less
    host time per call), CuPy's strided copy past it.
Inputs with other strides (slices with steps, non-contiguous views) are first copied to C order.
"""
from __future__ import annotations

import functools

import cupy
import numpy as np

from . import _args, _check, _nd
from ._compile import instantiation, kernel, launch, resident_blocks, uint_ctype
from ._device import sm_count
from ._transpose_lines import (ELEMENT_LINES_MAX_BYTES, LINE_ELEMENTS_MIN_BYTES, LINE_PIECE, PIECE_SIZES, TILE_SIDES,
                               line_transposes, pieces_expression, run_lines, run_tiles, tiles_expression)
from ._variants import Variant, lookup, register

FAMILY = "transpose"
ITEMSIZES = (1, 2, 4, 8)

TILE_DIM, BLOCK_ROWS = 32, 8  # seed 003: a 32 x 32 tile per block of 32 x 8 threads
MAX_GRID_Y = 65535  # the seed kernels' grids are launched in slices of at most this many tile rows
SEED_KERNELS = ("copy", "copySharedMem", "transposeNaive", "transposeCoalesced", "transposeNoBankConflicts",
                "transposeCoarseGrained", "transposeFineGrained", "transposeDiagonal")

# transpose_vec16 tile per element size: (16-byte units per tile row read, units per tile column written, threads).
# Each is a 16 KB tile of whole 128-byte lines on both sides; 2 or 4 units per thread in each phase (4- and 8-byte
# elements take 512 threads, which measured a little faster than 256: docs/NOTES.md, "transpose.py: aligned vec16
# tiles").
VEC16_SHAPE = {1: (8, 8, 256), 2: (8, 16, 256), 4: (16, 16, 512), 8: (16, 32, 512)}
# The same for misaligned rows (odd shapes, offset views), whose tiles overlap (see VEC16_SEAM): 512 threads, and
# taller tiles for 4-byte elements, measured faster for 1-, 2- and 4-byte elements (docs/NOTES.md, "transpose.py:
# misaligned vec16 tiles").
VEC16_SHAPE_MISALIGNED = {1: (8, 8, 512), 2: (8, 16, 512), 4: (8, 32, 512), 8: (16, 32, 512)}
# Misaligned tiles overlap so that they meet on output bytes aligned to this (see store_column in the kernel): at 32,
# no 32-byte sector is written half by one block and half by another. int8 keeps 16: its overlap would be 32 of a
# tile's 128 rows, and it measured slower (docs/NOTES.md, "transpose.py: seams on 32 bytes").
VEC16_SEAM = {1: 16, 2: 32, 4: 32, 8: 32}
# Misaligned tiles' block order (log2 of the tile rows consecutive blocks go down; see vec16_group_shift): each
# element size takes the order that measured faster, row by row or down 32 tile rows (docs/NOTES.md, "transpose.py:
# misaligned tiles' block order").
VEC16_MISALIGNED_GROUP_SHIFT = {1: 5, 2: 0, 4: 0, 8: 0}
# The threads per SM that misaligned tiles' registers must allow (2048 at 512 threads: 32 registers; 1536: 40).
# Given a free hand, ptxas takes more registers and fewer blocks fit. Each element size takes the cap that measured
# faster; int8's word gather spills at 32 (docs/NOTES.md, "transpose.py: misaligned tiles' registers").
VEC16_MISALIGNED_SM_THREADS = {1: 1536, 2: 2048, 4: 1536, 8: 2048}
# The vec16 steps: (XOR-swizzled tile, register transposes of 4-byte words for 1- and 2-byte elements).
VEC16_STEPS = {"vec16_unswizzled": (False, False), "vec16_swizzled": (True, False), "fast": (True, True)}


def vec16_shape(itemsize: int, aligned: bool) -> tuple[int, int, int]:
    return (VEC16_SHAPE if aligned else VEC16_SHAPE_MISALIGNED)[itemsize]


def vec16_min_blocks(itemsize: int, aligned: bool, threads: int) -> int:
    """Blocks per SM the kernel's registers must allow (the kernel caps it at what the SM holds): see
    VEC16_MISALIGNED_SM_THREADS; aligned tiles leave ptxas a free hand."""
    return 1 if aligned else VEC16_MISALIGNED_SM_THREADS[itemsize] // threads


def vec16_orders(itemsize: int) -> tuple[tuple[bool, int], ...]:
    """The (aligned, group shift) pairs built: aligned tiles take either order, misaligned ones their own and row by
    row (few tile rows)."""
    return tuple(dict.fromkeys([(True, 0), (True, 5), (False, VEC16_MISALIGNED_GROUP_SHIFT[itemsize]), (False, 0)]))


GROUP_MIN_TILE_ROWS = 8  # fewer tile rows stay row by row: the grid rounds them up to 32, whose blocks mostly exit


def vec16_group_shift(aligned: bool, itemsize: int, tiles_c: int, tile_row_bytes: int, blocks_in_flight: int,
                      tiles_r: int) -> int:
    """log2 of the tile rows that consecutive blocks go down before moving one tile column right. Matrices of fewer
    than GROUP_MIN_TILE_ROWS tile rows go row by row: the grid rounds tile rows up to whole groups, whose extra
    blocks exit at once (docs/NOTES.md, "transpose: few tile rows"). Misaligned tiles otherwise take
    VEC16_MISALIGNED_GROUP_SHIFT. Aligned ones go row by row unless a wave of blocks would write each output row it
    touches in runs under 512 bytes (tile_row_bytes x the tile rows the wave spans: wide matrices), where going down
    32 tile rows measured faster; squares and tall matrices measured a little slower that way (docs/NOTES.md,
    "transpose.py: aligned tiles' block order")."""
    if tiles_r < GROUP_MIN_TILE_ROWS:
        return 0
    if not aligned:
        return VEC16_MISALIGNED_GROUP_SHIFT[itemsize]
    return 5 if blocks_in_flight / tiles_c * tile_row_bytes < 512 else 0


def vec16_expression(itemsize: int, aligned: bool, swizzle: bool, word_gather: bool, group_shift: int, shape=None,
                     seam=None, min_blocks=None, batched: bool = False) -> str:
    ic, oc, threads = shape or vec16_shape(itemsize, aligned)
    # 4- and 8-byte elements already gather whole words. On misaligned rows halfwords measured faster gathered one by
    # one than through store_words_shifted (docs/NOTES.md, "transpose.cu: misaligned bytes and halfwords").
    word_gather = word_gather and (itemsize == 1 or itemsize == 2 and aligned)
    seam = 16 if aligned else seam or VEC16_SEAM[itemsize]
    min_blocks = min_blocks or vec16_min_blocks(itemsize, aligned, threads)
    return instantiation("transpose_vec16", uint_ctype(itemsize), ic, oc, threads, bool(aligned), bool(swizzle),
                         bool(word_gather), seam, min_blocks, group_shift, bool(batched))


@functools.lru_cache(maxsize=None)  # every launch names its module by this list: build it once, not per call
def instantiations(itemsize: int) -> tuple[str, ...]:
    """Every kernel of one element size (one module per size)."""
    seeds = [instantiation(name, uint_ctype(itemsize)) for name in SEED_KERNELS]
    vec16 = [vec16_expression(itemsize, aligned, *step, group_shift, batched=batched)
             for step, batched in [(step, False) for step in VEC16_STEPS.values()] + [(VEC16_STEPS["fast"], True)]
             for aligned, group_shift in vec16_orders(itemsize)]
    thin = [instantiation("transpose_thin", uint_ctype(itemsize), wide_in, per_word, tile)
            for wide_in in (True, False) for per_word in sorted({1, thin_per_word(itemsize)})
            for tile in thin_tiles(per_word, wide_in)]
    lines = [instantiation("permute_line_tiles", LINE_PIECE)]
    pieces = [pieces_expression(size, narrow) for size in PIECE_SIZES if size >= itemsize for narrow in (True, False)]
    tiles = [tiles_expression(size, side) for size in PIECE_SIZES if size >= itemsize for side in TILE_SIDES]
    return tuple(dict.fromkeys(seeds + vec16 + thin + lines + pieces + tiles))


def instantiation_groups():
    """Every module this family builds (one per element size), for the GPU-less compile check."""
    return [instantiations(e) for e in ITEMSIZES]


def _seed_runner(name: str):
    def run(a, out):
        height, width = a.shape
        fn = kernel(FAMILY, instantiation(name, uint_ctype(a.itemsize)), instantiations(a.itemsize))
        tiles_x, tiles_y = -(-width // TILE_DIM), -(-height // TILE_DIM)
        for y0 in range(0, tiles_y, MAX_GRID_Y):
            launch(fn, (tiles_x, min(MAX_GRID_Y, tiles_y - y0)), (TILE_DIM, BLOCK_ROWS),
                   (out, a, np.int64(width), np.int64(height), np.int64(y0)))
    return run


def is_aligned(a, out) -> bool:
    """Both arrays start on 16 bytes and both row lengths are whole 16-byte units: no realignment needed."""
    rows, cols = a.shape
    return (a.data.ptr % 16 == 0 and out.data.ptr % 16 == 0
            and rows * a.itemsize % 16 == 0 and cols * a.itemsize % 16 == 0)


def vec16_runner(swizzle: bool, word_gather: bool, shape=None, seam=None, min_blocks=None, group_shift=None):
    """The launcher of one vec16 step; `shape` (units per tile row, per tile column, threads), `seam` (bytes),
    `min_blocks` and `group_shift` are for tuning probes."""
    probe = (shape, seam, min_blocks, group_shift) != (None,) * 4

    batches = (swizzle, word_gather) == VEC16_STEPS["fast"]  # the fast step has a batched instantiation

    def run(a, out, batch: int = 1):
        rows, cols = a.shape  # of each of `batch` matrices, one after the other in a and in out
        e = a.itemsize
        aligned = is_aligned(a, out)
        batched = batch > 1 and batches
        config = (_vec16_config_uncached if probe else _vec16_config)(
            e, aligned, rows, cols, swizzle, word_gather, a.data.device_id, shape, seam, min_blocks, group_shift,
            batched)
        fn, blocks, threads, tiles_r, tiles_c = config
        matrix_bytes = rows * cols * e
        per_launch = MAX_GRID_Y if batched else 1  # the lesson steps: a launch per matrix
        for b0 in range(0, batch, per_launch):
            first = b0 * matrix_bytes
            launch(fn, (blocks, min(per_launch, batch - b0)), (threads,),
                   (out.data.ptr + first, a.data.ptr + first, rows, cols, tiles_r, tiles_c, rows * cols))
    return run


def _vec16_config_uncached(e, aligned, rows, cols, swizzle, word_gather, device_id, shape, seam, min_blocks,
                           group_shift, batched=False):
    """(kernel, blocks, threads, tile rows, tile columns) of a vec16 launch on one (rows, cols) matrix."""
    ic, oc, threads = shape or vec16_shape(e, aligned)
    v = 16 // e
    seam_bytes = seam or VEC16_SEAM[e]
    row_step = oc * v if aligned else oc * v - seam_bytes // e  # misaligned tiles overlap by a seam
    tiles_r, tiles_c = -(-rows // row_step), -(-cols // (ic * v))

    def compiled(shift):
        expr = vec16_expression(e, aligned, swizzle, word_gather, shift, shape, seam_bytes, min_blocks, batched)
        built = shape is None and seam is None and min_blocks is None and (aligned, shift) in vec16_orders(e)
        return kernel(FAMILY, expr, instantiations(e) if built else (expr,))  # probes' kernels: a module each

    shift = group_shift
    if shift is None:
        in_flight = resident_blocks(compiled(0), threads) * sm_count(device_id) if aligned else 0
        shift = vec16_group_shift(aligned, e, tiles_c, row_step * e, in_flight, tiles_r)
    group = 1 << shift
    blocks = -(-tiles_r // group) * group * tiles_c  # whole groups of tile rows
    if blocks >= 2**31:
        raise ValueError(f"cudakit.transpose: shape {(rows, cols)} needs {blocks} tiles, more than one grid holds")
    return compiled(shift), blocks, threads, tiles_r, tiles_c


# a hot call looks its launch up (kernel() compiles for the current device, which device_id names)
_vec16_config = functools.lru_cache(maxsize=4096)(_vec16_config_uncached)


THIN_SIDE = 32  # a side shorter than a warp takes the thin kernel in the fast variant
# Elements up to 4 bytes take it further: a short side below THIN_SIDE_ROWS where it is the input's rows (c long
# rows to interleave), below THIN_SIDE_COLUMNS where it is the input's columns; past these the 32 x 32 tiles match
# it (docs/NOTES.md, "transpose.py: the thin kernel in words").
THIN_SIDE_ROWS, THIN_SIDE_COLUMNS = 64, 40
THIN_TILE_BYTES = 32768  # what one block of the thin kernel stages (docs/NOTES.md, "transpose.py: the thin kernel's tile")
# ... at most: a transpose of fewer such tiles than this many blocks per SM stages shorter runs, so that a small one
# spreads over the SMs instead of running on a few (docs/NOTES.md, "transpose.py: small thin transposes").
THIN_MIN_BLOCKS_PER_SM = 2


def thin_side(shape, itemsize: int = 8) -> int | None:
    """The short side of a 2-D transpose of `shape` that the thin kernel serves, or None."""
    short = min(shape)
    limit = THIN_SIDE if itemsize > 4 else THIN_SIDE_ROWS if shape[0] < shape[1] else THIN_SIDE_COLUMNS
    return short if 1 < short < limit and max(shape) >= THIN_SIDE else None


THIN_COLUMNS, THIN_PACKED, THIN_SWIZZLED = 0, 1, 2  # transpose_thin's TILE


def thin_tile(c: int, itemsize: int, wide_in: bool) -> int:
    """How the thin kernel's word path stages the packed side. In its own order, the c runs' words go to or come
    from shared memory c words apart, which conflicts on many banks where c has a large power-of-two factor: there
    (c, rows) input (stores) swizzles the packed tile, from c % 8 == 0, and (rows, c) input (loads) keeps the c
    columns, from c % (4 * itemsize) == 0. Measured in docs/NOTES.md, "transpose.cu: the thin kernel's
    packed tile"."""
    if wide_in:
        return THIN_PACKED if c % (4 * itemsize) != 0 else THIN_COLUMNS
    return THIN_PACKED if c % 8 != 0 else THIN_SWIZZLED


def thin_tiles(per_word: int, wide_in: bool) -> tuple[int, ...]:
    """The stagings the thin kernel is built with (the element path has only the columns; the swizzled tile only
    takes (c, rows) input)."""
    if per_word == 1:
        return (THIN_COLUMNS,)
    return (THIN_COLUMNS, THIN_PACKED) if wide_in else (THIN_COLUMNS, THIN_PACKED, THIN_SWIZZLED)


def thin_per_word(itemsize: int) -> int:
    """Elements of this size the thin kernel moves per 32-bit word on both global sides (1: one per access)."""
    return max(1, 4 // itemsize)


def run_thin(a, out, batch: int = 1) -> None:
    """`batch` transposes of (rows, c) to (c, rows), or of (c, rows) to (rows, c), for c below a warp: each block
    stages a run of whole short-side lines in shared memory, so reads and writes both stay coalesced; bytes and
    16-bit elements move as whole words where the long side and both addresses allow."""
    words = (a.data.ptr | out.data.ptr) % 4 == 0
    fn, grid, rest, shared = _thin_config(a.shape, a.itemsize, batch, words, a.data.device_id)
    launch(fn, grid, (256,), (out.data.ptr, a.data.ptr) + rest, shared_mem=shared)


@functools.lru_cache(maxsize=4096)
def _thin_config(shape: tuple, e: int, batch: int, words: bool, device_id: int):
    """(kernel, grid, the arguments after the two addresses, shared bytes) of run_thin (words: both arrays start
    on 4 bytes; device_id: the current device, which kernel() compiles for)."""
    wide_in = shape[1] < shape[0]
    rows, c = (shape[0], shape[1]) if wide_in else (shape[1], shape[0])
    run = max(32, THIN_TILE_BYTES // (c * e) // 32 * 32)
    wanted = -(-THIN_MIN_BLOCKS_PER_SM * sm_count(device_id) // batch)  # blocks a matrix
    run = min(run, -(-rows // 32) * 32, max(32, -(-rows // wanted // 32) * 32))
    per_matrix = -(-rows // run)
    per_word = thin_per_word(e) if words and rows % thin_per_word(e) == 0 else 1
    tile = thin_tile(c, e, wide_in) if per_word > 1 else THIN_COLUMNS
    fn = kernel(FAMILY, instantiation("transpose_thin", uint_ctype(e), wide_in, per_word, tile), instantiations(e))
    shared = c * (run + per_word) * e + (128 if tile == THIN_SWIZZLED else 0)  # a last swizzled row of 32 words
    return fn, (per_matrix * batch,), (rows, c, run, per_matrix), shared


def _fast_runner():
    vec16 = vec16_runner(*VEC16_STEPS["fast"])

    def run(a, out, batch: int = 1):
        if thin_side(a.shape, a.itemsize):
            run_thin(a, out, batch)
        elif min(a.shape) == 1:  # a row or a column: its transpose is the same bytes
            out.data.copy_from_device_async(a.data, a.nbytes * batch)
        else:
            vec16(a, out, batch)
    return run


_SEED_LESSONS = {
    "copy": "the yardstick: a tiled copy with the transposes' indexing (not a transpose)",
    "copySharedMem": "the copy through a shared tile and a barrier: the tile costs little (not a transpose)",
    "transposeNaive": "coalesced reads, but each warp store touches 32 rows: writes waste most of every sector",
    "transposeCoalesced": "a shared 32x32 tile makes reads and writes coalesced; the column read hits one bank",
    "transposeNoBankConflicts": "one padding column spreads the tile's column over all 32 banks",
    "transposeCoarseGrained": "tiles moved to their transposed place, untransposed: the cost of where writes go (not a transpose)",
    "transposeFineGrained": "tiles transposed in place: the cost of the in-tile transpose (not a transpose)",
    "transposeDiagonal": "diagonal block order against partition camping, a cure modern address hashing makes moot",
}
BATCHED_VARIANTS = ("vec16_unswizzled", "vec16_swizzled", "fast")  # their runners take a batch of matrices
_DIAGNOSTIC = {"copy", "copySharedMem", "transposeCoarseGrained", "transposeFineGrained"}

VARIANTS = register(FAMILY, [
    Variant(FAMILY, name, _SEED_LESSONS[name], _seed_runner(name), seed=True, diagnostic=name in _DIAGNOSTIC)
    for name in SEED_KERNELS
] + [
    Variant(FAMILY, "vec16_unswizzled",
            "16-byte loads and stores of whole lines, 16 KB tiles; unswizzled, the 8 lanes gathering a column share a bank (int8: 0.43x copy)",
            vec16_runner(*VEC16_STEPS["vec16_unswizzled"])),
    Variant(FAMILY, "vec16_swizzled",
            "XOR-swizzled tile: the column gathers hit 32 banks, int8 0.43x -> 0.87x copy (one element per shared load)",
            vec16_runner(*VEC16_STEPS["vec16_swizzled"])),
    Variant(FAMILY, "fast",
            "swizzled vec16; bytes/halves read shared words, transposed by __byte_perm: 4x fewer loads; a side below "
            "32 staged as whole short lines (thin kernel); batches of matrices on the grid's y",
            _fast_runner()),
])


def check_array(a) -> None:
    """An error, before any launch, for an array (CuPy or Dask) that transpose cannot take: more axes than it
    merges, or an element size it has no kernel for."""
    if a.ndim > _nd.MAX_NDIM:
        raise ValueError(f"cudakit.transpose: a has {a.ndim} dimensions; at most {_nd.MAX_NDIM} are supported")
    if a.dtype.itemsize not in ITEMSIZES:
        raise TypeError(f"cudakit.transpose: unsupported dtype {a.dtype} ({a.dtype.itemsize} bytes); "
                        "supported: any dtype of 1, 2, 4 or 8 bytes")


def transpose(a, axes=None, *, out=None, variant: str = "fast", check: bool | None = None):
    """cupy.ascontiguousarray(cupy.transpose(a, axes)) as a new array (or in out=): a.T for a 2-D array; any
    permutation `axes` of up to 8 dimensions (default: reversed, as CuPy); any 1-, 2-, 4- or 8-byte dtype.

    Runs on CuPy's current stream with no synchronisation. A transpose whose result is the input's own memory
    order (F-contiguous 2-D input, axes that move only length-1 axes) is a plain device copy; input with other
    strides is copied to C order first. Axes that stay adjacent merge, so NHWC <-> NCHW is a batch of 2-D
    transposes; a permutation that keeps the last axis moves whole lines (see run_lines); any other
    permutation that merges to more than a batch of 2-D transposes is an element-wise gather (past
    ELEMENT_LINES_MAX_BYTES, CuPy's strided copy).
    check=True (or CUDAKIT_CHECK=1) compares bit for bit with CuPy's result.
    """
    if type(a) is not cupy.ndarray and (face := _args.dask_face(a)) is not None:
        return face.transpose(a, axes, out=out, variant=variant, check=check)
    a = _args.device_array("transpose", "a", a)
    check_array(a)
    _args.aligned("transpose", "a", a)
    axes = _nd.normalize_axes("transpose", a.ndim, axes)
    run = lookup("transpose", variant).run
    device_id = a.data.device_id
    with _args.on_device(device_id):
        out_shape, shape, perm = _nd.transpose_plan(a.shape, axes)
        out = _args.output("transpose", out, out_shape, a.dtype, device_id, {"a": a})
        if a.size == 0:
            return out
        src = a
        if not (_args.is_c_contiguous(a) and a.data.ptr % a.itemsize == 0):
            if _args.is_c_contiguous(a.transpose(axes)):  # the result is a's bytes in a's order (an F-order matrix)
                perm = ()
            else:
                src = a.copy(order="C")
        lines = line_transposes(shape, perm, a.itemsize)
        if len(perm) <= 1:  # nothing moves but length-1 axes: the same bytes in the same order
            out.data.copy_from_device_async(src.data, a.nbytes)
        elif perm == (1, 0):
            run(src if src.shape == shape else src.reshape(shape),
                out if out.shape == shape[::-1] else out.reshape(shape[::-1]))
        elif perm == (0, 2, 1) or lines and lines[3] in ITEMSIZES and (src.data.ptr | out.data.ptr) % lines[3] == 0 \
                and a.nbytes >= LINE_ELEMENTS_MIN_BYTES:
            # a batch of 2-D transposes, one after the other in both arrays; lines of 1, 2, 4 or 8 bytes move as
            # elements of that size
            batch, rows, cols, size = shape + (a.itemsize,) if perm == (0, 2, 1) else lines
            bits = np.dtype(f"u{size}")
            if variant in BATCHED_VARIANTS:  # the first matrix of each, and the count
                run(cupy.ndarray((rows, cols), bits, src.data), cupy.ndarray((cols, rows), bits, out.data), batch)
            else:
                src3 = cupy.ndarray((batch, rows, cols), bits, src.data)
                out3 = cupy.ndarray((batch, cols, rows), bits, out.data)
                for b in range(batch):
                    run(src3[b], out3[b])
        elif lines:  # ... of lines of other lengths below TILE_LINES_MAX_BYTES
            run_tiles(src, out, *lines)
        elif perm[-1] == len(perm) - 1:  # the last axis stays: whole lines move
            run_lines(src, out, shape, perm)
        elif a.nbytes <= ELEMENT_LINES_MAX_BYTES:  # each element a line of its own
            run_lines(src, out, shape + (1,), perm + (len(perm),))
        else:
            out[...] = a.transpose(axes)  # documented: CuPy's strided copy
        if _check.enabled(check):
            bits = np.dtype(f"u{a.itemsize}")
            want = cupy.ascontiguousarray(a.transpose(axes))
            wrong = int(cupy.count_nonzero(out.view(bits) != want.view(bits)))
            if wrong:
                raise _check.CheckError(f"cudakit.transpose (variant {variant!r}, {a.dtype}): {wrong} of {out.size} "
                                        "elements differ from cupy.ascontiguousarray(cupy.transpose(a, axes))")
    return out
