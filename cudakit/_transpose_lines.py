"""Permutations that keep the last axis, for cudakit.transpose: whole lines move (permute_lines: a group of lanes a
line in 16-byte pieces; permute_pieces: a thread a piece), and batches of 2-D transposes of short lines go through
shared tiles (permute_tiles). A permutation that moves the last axis comes here as lines of one element. The kernels
are kernels/transpose.cu's, in transpose.py's module of each element size.
"""
from __future__ import annotations

import functools
import math

import cupy
import numpy as np

from ._compile import instantiation, kernel, launch, uint_ctype
from ._device import sm_count

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


def moves_lines(itemsize: int, line_bytes: int, src_ptr: int, out_ptr: int) -> bool:
    """Whether lines move a group of lanes a line (permute_lines) rather than a thread a piece (permute_pieces):
    lines of whole 16-byte pieces on both sides, of elements below 8 bytes (docs/NOTES.md, "transpose.py: whole
    lines")."""
    return itemsize < 8 and line_bytes % 16 == 0 and src_ptr % 16 == 0 and out_ptr % 16 == 0


def run_lines(src, out, shape: tuple, perm: tuple) -> None:
    """out = src (C-contiguous, of merged `shape`) permuted by `perm`, which keeps the last axis: its lines move
    whole, by permute_lines where moves_lines holds, else by permute_pieces in the widest pieces that divide the
    line and both addresses. A permutation that moves the last axis comes as lines of one element (a length-1 last
    axis that stays)."""
    alignment = math.gcd(16, src.data.ptr, out.data.ptr)
    key = (shape, perm, src.itemsize, alignment, src.data.device_id)
    plan = _line_plans.get(key)
    if plan is None:
        plan = _line_plans[key] = _line_plan(*key)
    fn, blocks, args = plan
    launch(fn, (blocks,), (256,), (out.data.ptr, src.data.ptr) + args)


def _line_plan(shape: tuple, perm: tuple, itemsize: int, alignment: int, device_id: int) -> tuple:
    """run_lines' kernel, grid and arguments after the two addresses (the dimensions and strides on the device), for
    _line_plans."""
    lines_shape, lines_perm = shape[:-1], perm[:-1]
    strides = [math.prod(lines_shape[i + 1:]) for i in range(len(lines_shape))]
    host = np.array([lines_shape[p] for p in lines_perm] + [strides[p] for p in lines_perm], np.int64)
    if len(_line_plans) >= 4096:  # bounded: dropped once every queued launch that reads one is done
        cupy.cuda.Device().synchronize()
        _line_plans.clear()
    meta = cupy.asarray(host)
    cupy.cuda.get_current_stream().synchronize()  # once per shape: later calls may come from other streams
    lines, line_bytes, ndim = math.prod(lines_shape), shape[-1] * itemsize, len(lines_shape)
    if moves_lines(itemsize, line_bytes, alignment, alignment):
        fn = kernel(FAMILY, instantiation("permute_lines", LINE_PIECE), _module(itemsize))
        pieces = line_bytes // 16
        group = min(32, 1 << (pieces - 1).bit_length())  # lanes per line: a warp moves 32 // group lines at once
        blocks = min(-(-lines // (256 // group)), sm_count(device_id) * 16)
        return fn, blocks, (lines, line_bytes, meta, ndim, group)
    size = math.gcd(line_bytes, alignment)
    line_pieces = line_bytes // size
    pieces = lines * line_pieces
    narrow = pieces <= NARROW_PIECES
    fn = kernel(FAMILY, pieces_expression(size, narrow), _module(itemsize))
    count = np.uint32 if narrow else np.int64
    blocks = -(-pieces // (256 * PIECES_IN_FLIGHT))
    return fn, blocks, (count(pieces), count(line_pieces), meta, ndim)


PIECES_IN_FLIGHT = 4  # kernels/transpose.cu's: each thread of permute_pieces moves this many pieces
# Permutations that move the last axis gather element by element (lines of one element) up to this size, where the
# host time of CuPy's strided copy is most of the call's; past it, CuPy's copy (docs/NOTES.md, "transpose.py:
# element lines").
ELEMENT_LINES_MAX_BYTES = 2 << 20


TILE_LINES_MAX_BYTES = 64  # shorter lines of a batch of 2-D transposes go through permute_tiles' shared tiles
TILE_SIDES = (16, 32)  # permute_tiles' T: 32 lines a side for lines up to 16 bytes, 16 for longer ones
TILES_THREADS = 256  # kernels/transpose.cu's
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
