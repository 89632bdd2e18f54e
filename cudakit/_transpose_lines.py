"""Permutations that keep the last axis, for cudakit.transpose: whole lines move (permute_line_tiles: a block a tile
of lines in 16-byte pieces; permute_pieces: a thread a piece), and batches of 2-D transposes of short lines go through
shared tiles (permute_tiles). A permutation that moves the last axis comes here as lines of one element. The kernels
are kernels/transpose_lines.cuh's, in transpose.py's module of each element size.
"""
from __future__ import annotations

import functools
import math

import cupy
import numpy as np

from ._compile import instantiation, kernel, launch, pair, uint_ctype

FAMILY = "transpose"


def _module(itemsize: int) -> tuple[str, ...]:
    from .transpose import instantiations  # (transpose.py imports this module)

    return instantiations(itemsize)


LINE_PIECE = "uint4"  # the lines kernel moves 16-byte pieces
PIECE_SIZES = (1, 2, 4, 8, 16)  # permute_pieces' piece sizes (bytes)
NARROW_PIECES = 2**32 - 2**12  # up to this many pieces, permute_pieces indexes in 32 bits
_line_plans: dict = {}  # run_lines' launches: (shape, permutation, element size, addresses' alignment, device) -> plan


def pieces_expression(size: int, narrow: bool) -> str:
    return instantiation("permute_pieces", LINE_PIECE if size == 16 else uint_ctype(size),
                         "unsigned int" if narrow else "long long")


def moves_tiles(line_bytes: int, src_ptr: int, out_ptr: int) -> bool:
    """Whether lines move a tile of lines a block (permute_line_tiles) rather than a thread a piece (permute_pieces):
    lines of whole 16-byte pieces on both sides, up to LINE_TILE_MAX_BYTES (docs/NOTES.md, "transpose.py: tiles of
    lines")."""
    return line_bytes % 16 == 0 and line_bytes <= LINE_TILE_MAX_BYTES and src_ptr % 16 == 0 and out_ptr % 16 == 0


# permute_line_tiles' tile: TS x TS lines, TS the largest power of two up to LINE_TILE_MAX_SIDE whose tile holds at
# most LINE_TILE_BYTES; a side of fewer lines than TS gives the other side its share. Lines longer than
# LINE_TILE_MAX_BYTES are runs long enough on their own, and a tile of fewer pieces than a block has threads would
# leave most of them idle: those take permute_pieces, a thread a piece, measured as fast or faster on such long lines
# (docs/NOTES.md, "transpose.py: tiles of lines").
LINE_TILE_BYTES, LINE_TILE_MAX_SIDE, LINE_TILE_MAX_BYTES = 32 << 10, 32, 256
LINES_THREADS = 256  # kernels/transpose_lines.cuh's LINE_TILE_THREADS and PIECES_THREADS


def line_tile(line_bytes: int, lines_out: int, lines_in: int) -> tuple[int, int]:
    """(lines along the output's fastest axis, lines along the input's) of permute_line_tiles' tile."""
    side = LINE_TILE_MAX_SIDE
    while side > 1 and side * side * line_bytes > LINE_TILE_BYTES:
        side //= 2
    tile_in = min(lines_in, side)
    tile_out = min(lines_out, side * side // tile_in)
    return tile_out, min(lines_in, side * side // tile_out)


def run_lines(src, out, shape: tuple, perm: tuple) -> None:
    """out = src (C-contiguous, of merged `shape`) permuted by `perm`, which keeps the last axis: its lines move
    whole, by permute_line_tiles where moves_tiles holds, else by permute_pieces in the widest pieces that divide the
    line and both addresses. A permutation that moves the last axis comes as lines of one element (a length-1 last
    axis that stays)."""
    alignment = math.gcd(16, src.data.ptr, out.data.ptr)
    key = (shape, perm, src.itemsize, alignment, src.data.device_id)
    plan = _line_plans.get(key)
    if plan is None:
        plan = _line_plans[key] = _line_plan(*key[:4])  # (the key's device: the plan's meta lives there)
    fn, blocks, args = plan
    launch(fn, (blocks,), (LINES_THREADS,), (out.data.ptr, src.data.ptr) + args)


def _line_plan(shape: tuple, perm: tuple, itemsize: int, alignment: int) -> tuple:
    """run_lines' kernel, grid and arguments after the two addresses (with the dimensions and strides on the device),
    for _line_plans."""
    if len(_line_plans) >= 4096:  # bounded: dropped once every queued launch that reads one is done
        cupy.cuda.Device().synchronize()
        _line_plans.clear()
    lines_shape, lines_perm, line_bytes = shape[:-1], perm[:-1], shape[-1] * itemsize
    plan = _tiles_plan(lines_shape, lines_perm, line_bytes) if moves_tiles(line_bytes, alignment, alignment) else None
    expression, blocks, head, host, tail = plan or _pieces_plan(lines_shape, lines_perm, line_bytes, alignment)
    meta = cupy.asarray(host)
    cupy.cuda.get_current_stream().synchronize()  # once per shape: later calls may come from other streams
    return kernel(FAMILY, expression, _module(itemsize)), blocks, head + (meta,) + tail


def _tiles_plan(lines_shape: tuple, lines_perm: tuple, line_bytes: int):
    """permute_line_tiles' (expression, blocks, arguments before meta, meta, after), or None where its tile would
    leave most of a block idle or its grid would not fit, and for axes that are not merged (transpose_plan merges
    them: the output's fastest axis of lines is then never the input's). Of the other axes, the innermost goes in
    the arguments (most permutations have one: the batch), the rest in meta, in output order."""
    ndim = len(lines_shape)
    if ndim < 2 or lines_perm[-1] == ndim - 1:
        return None
    in_strides = [math.prod(lines_shape[d + 1:]) for d in range(ndim)]
    out_shape = [lines_shape[p] for p in lines_perm]
    out_strides = [math.prod(out_shape[k + 1:]) for k in range(ndim)]
    fast_out, fast_in = lines_perm[-1], ndim - 1  # the input axes that are each side's fastest
    lines_out, lines_in = lines_shape[fast_out], lines_shape[fast_in]
    tile_out, tile_in = line_tile(line_bytes, lines_out, lines_in)
    if tile_out * tile_in * line_bytes < LINES_THREADS * 16:
        return None
    tiles_in = -(-lines_in // tile_in)
    tiles = -(-lines_out // tile_out) * tiles_in
    others = [k for k in range(ndim) if lines_perm[k] not in (fast_out, fast_in)]  # (output axes, in order)
    blocks = tiles * math.prod(out_shape[k] for k in others)
    if blocks >= 2**31:
        return None
    inner, rest = (others[-1:], others[:-1])
    inner_args = (out_shape[inner[0]], in_strides[lines_perm[inner[0]]], out_strides[inner[0]]) if inner else (1, 0, 0)
    host = np.array(([out_shape[k] for k in rest] + [in_strides[lines_perm[k]] for k in rest]
                     + [out_strides[k] for k in rest]) or [0], np.int64)
    head = (np.int32(line_bytes // 16), np.int64(lines_out), np.int64(in_strides[fast_out]), np.int64(lines_in),
            np.int64(out_strides[lines_perm.index(fast_in)]), pair(tile_out, tile_in), pair(tiles_in, tiles),
            np.uint32(inner_args[0]), np.int64(inner_args[1]), np.int64(inner_args[2]))
    return instantiation("permute_line_tiles", LINE_PIECE), blocks, head, host, (np.int32(len(rest)),)


def _pieces_plan(lines_shape: tuple, lines_perm: tuple, line_bytes: int, alignment: int):
    """permute_pieces' (expression, blocks, arguments before meta, meta, after): pieces of the widest size that
    divides the line and both addresses. meta holds the output's dimensions and the input's strides."""
    strides = [math.prod(lines_shape[i + 1:]) for i in range(len(lines_shape))]
    host = np.array([lines_shape[p] for p in lines_perm] + [strides[p] for p in lines_perm], np.int64)
    size = math.gcd(line_bytes, alignment)
    line_pieces = line_bytes // size
    pieces = math.prod(lines_shape) * line_pieces
    narrow = pieces <= NARROW_PIECES
    count = np.uint32 if narrow else np.int64
    blocks = -(-pieces // (LINES_THREADS * PIECES_IN_FLIGHT))
    return (pieces_expression(size, narrow), blocks, (count(pieces), count(line_pieces)), host,
            (np.int32(len(lines_shape)),))


PIECES_IN_FLIGHT = 4  # kernels/transpose_lines.cuh's: each thread of permute_pieces moves this many pieces
# Permutations that move the last axis gather element by element (lines of one element) up to this size, where the
# host time of CuPy's strided copy is most of the call's; past it, CuPy's copy (docs/NOTES.md, "transpose.py:
# element lines").
ELEMENT_LINES_MAX_BYTES = 2 << 20


TILE_LINES_MAX_BYTES = 64  # shorter lines of a batch of 2-D transposes go through permute_tiles' shared tiles
TILE_SIDES = (16, 32)  # permute_tiles' T: 32 lines a side for lines up to 16 bytes, 16 for longer ones
TILES_THREADS = 256  # kernels/transpose_lines.cuh's
# Lines of 1, 2, 4 or 8 bytes move as elements of that size (the fast 2-D kernels) from this size on; smaller ones
# take permute_tiles, whose launch costs less host time than the views the 2-D kernels take (docs/NOTES.md,
# "transpose.py: batches of short lines").
LINE_ELEMENTS_MIN_BYTES = 1 << 20


def tiles_expression(size: int, side: int) -> str:
    return instantiation("permute_tiles", LINE_PIECE if size == 16 else uint_ctype(size), side)


def line_transposes(shape: tuple, perm: tuple, itemsize: int) -> tuple | None:
    """(batch, rows, cols, line bytes) where a merged permutation is a batch of 2-D transposes of lines shorter than
    TILE_LINES_MAX_BYTES (the last axis stays, the two before it swap), else None."""
    if perm == (1, 0, 2):
        shape = (1,) + shape
    elif perm != (0, 2, 1, 3):
        return None
    batch, rows, cols, line = shape
    return (batch, rows, cols, line * itemsize) if line * itemsize < TILE_LINES_MAX_BYTES else None


def run_tiles(src, out, batch: int, rows: int, cols: int, line_bytes: int) -> None:
    """out = `batch` transposes of (rows, cols) matrices of lines of `line_bytes`, lines kept whole: permute_tiles
    in the widest units that divide the line and both addresses."""
    size = math.gcd(line_bytes, 16, src.data.ptr, out.data.ptr)
    fn, blocks, shared, args = _tiles_config(batch, rows, cols, line_bytes, size, src.itemsize, src.data.device_id)
    launch(fn, (blocks,), (TILES_THREADS,), (out.data.ptr, src.data.ptr) + args, shared_mem=shared)


@functools.lru_cache(maxsize=4096)
def _tiles_config(batch, rows, cols, line_bytes, size, itemsize, device_id):
    side = 32 if line_bytes <= 16 else 16
    tiles_r, tiles_c = -(-rows // side), -(-cols // side)
    blocks = batch * tiles_r * tiles_c
    if blocks >= 2**31:
        raise ValueError(f"cudakit.transpose: {batch} matrices of {(rows, cols)} lines need {blocks} tiles, more "
                         "than one grid holds")
    fn = kernel(FAMILY, tiles_expression(size, side), _module(itemsize))
    return fn, blocks, side * (side + 1) * line_bytes, (rows, cols, line_bytes // size, tiles_r, tiles_c)
