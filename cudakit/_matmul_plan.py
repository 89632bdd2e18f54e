"""The fast matmul's planner for the tiled kernels: which tile, and how many runs of k, a product takes (plan).

Most products are weighed by the tiles' time model (_tune.product_seconds) over the candidate tiles of their class;
some FP64 ones are planned by a rule of _dmma's (mid_splits, split_plan) where the model's rates do not
hold. It reads the GPU through matmul's names (sm_count, resident_tiles, _compute_capability), which the tests stand in
for.
"""
from __future__ import annotations

import functools
import importlib

import numpy as np

from . import _dmma, _tune
from ._tune import Tile

mm = importlib.import_module(__package__ + ".matmul")  # (it imports this module first)

MIN_SPLIT_DEPTH = 256  # the least k a split-k share takes: shallower shares cost more in partial sums than they gain
# A grid under one round of resident blocks is all k loop: its shares may be as shallow as MIN_SMALL_GRID_SPLIT_DEPTH,
# but at least MIN_SPLIT_SLICES slices, so that the double-buffered pipeline still runs.
MIN_SMALL_GRID_SPLIT_DEPTH, MIN_SPLIT_SLICES = 64, 8
MAX_SPLIT_BYTES = 256 * 2**20  # partial products kept at most
# A grid of at least 1 / MAX_SPLIT_ROUNDS of the resident slots may be split into up to MAX_SPLIT_ROUNDS rounds of them
# (the model weighs the partial last round); a smaller one into one round at most (more shares ran slower).
MAX_SPLIT_ROUNDS = 4


def plan(device_id: int, dtype, m: int, n: int, k: int, count: int = 1, pipelined: bool = True,
         vectors: bool = False, x3: tuple | None = None) -> tuple[Tile, int, int]:
    """_plan for the tiles tuned now (a new tuning replans); pipelined=False leaves the pipelined DMMA tiles out;
    vectors: the tiles read A and B with 16-byte loads (reads_vectors, or a padded copy); x3: the seconds of the
    copies matmul_tc's X3 tiles may make (x3_copies: a pair), or None where they are not weighed."""
    dtype = np.dtype(dtype)
    return _plan(_tune.tiles(device_id, dtype), device_id, dtype, m, n, k, count, pipelined, vectors, x3)


@functools.lru_cache(maxsize=4096)
def _plan(pair: tuple[Tile, Tile], device_id: int, dtype, m: int, n: int, k: int, count: int,
          pipelined: bool = True, vectors: bool = False, x3: tuple | None = None) -> tuple[Tile, int, int]:
    """(tile, splits, depth) of the fast variant's tiled product: the tile and split of k into `splits` runs of
    `depth` whose modelled time (_tune.product_seconds) is least, of: the tuned pair (FP32: and the 64 x 64 tile
    between them); for a short k, the tile with the most blocks per SM, and _tune.WIDE_TILE where _wide_takes (a
    batch: it alone, beside X3); for FP64 that _dmma.planned, its tiles alone, k whole (a batch: the 32 x 32 tile
    besides; _dmma.batch_tile: its tile alone; one product that _dmma.mid_splits: SMALLEST, k split so); that
    _dmma.split_planned, _dmma.split_plan's (on a C past NARROW_SIDE: alone, else besides). `count` products
    launched together (a batch) keep k whole; one with k past _tune.SMALL_K also weighs _tune.SPLIT_TILES, k split
    only. Where x3 is given, matmul_tc.x3_offered's tiles besides (alone: x3_short_k)."""
    large, small = pair
    kept_splits = MAX_SPLIT_BYTES // (m * n * dtype.itemsize)  # the most partial products MAX_SPLIT_BYTES holds
    wide = _wide_takes(dtype, m, n, k, count, vectors, device_id)
    x3_tiles = () if x3 is None else mm.matmul_tc.x3_offered(dtype, m, n, k, count, mm._compute_capability(device_id))
    if x3_tiles and mm.matmul_tc.x3_short_k(m, n, k):
        tiles = ()
    elif wide and count > 1:
        tiles = (wide,)
    elif k <= _tune.SMALL_K:
        tiles = (_tune.SMALL_K_TILE.get(dtype, small),) + ((wide,) if wide else ())
    else:
        tiles = (large, small) + ((_tune.MIDDLE_TILE[dtype],) if dtype in _tune.MIDDLE_TILE else ())
    if min(m, n) <= _tune.NARROW_SIDE:
        tiles += _tune.NARROW_TILES[dtype]
    pipelined = pipelined and dtype == mm.F64
    whole, long_split = pipelined and _dmma.planned(m, n, k, device_id, count), None
    if whole and count == 1 and (mid := _dmma.mid_splits(m, n, k, device_id)) > 1:
        return (_dmma.SMALLEST,) + _tune.split_depth(k, mid, _dmma.SMALLEST.bk, odd=True)
    if whole:
        batch_tiles = _dmma.BATCH_TILES[:1] if count > 1 else ()  # (the 32 x 32 tile: it pads C least)
        tiles = tuple(t for t in _dmma.PLANNED + batch_tiles if _dmma.fits(t, device_id))
    elif pipelined and (batch_tile := _dmma.batch_tile(m, n, k, device_id, count)):
        whole, tiles = True, (batch_tile,)
    elif pipelined and count == 1 and _dmma.split_planned(m, n, k, device_id):
        long_split = _dmma.split_plan(m, n, k, device_id)
        if min(m, n) > _tune.NARROW_SIDE:  # (the rates' model has no per-block cost: it picked the register tiles)
            splits = min(long_split[1], kept_splits)
            return long_split[:1] + _tune.split_depth(k, splits, long_split[0].bk, odd=True)
        tiles += long_split[:1]
    split_only = _tune.SPLIT_TILES.get(dtype, ()) if count == 1 and k > _tune.SMALL_K and not whole else ()
    sms, best = mm.sm_count(device_id), None
    for tile in tiles + split_only + x3_tiles:
        dmma, tc = isinstance(tile, _dmma.DmmaTile), tile in x3_tiles
        grid = -(-m // tile.bm) * -(-n // tile.bn)
        slots = _dmma.resident(tile, device_id) if dmma else \
            mm.matmul_tc.resident(tile, device_id) if tc else mm.resident_tiles(tile, dtype, device_id)
        rounds = MAX_SPLIT_ROUNDS if grid * MAX_SPLIT_ROUNDS >= slots else 1
        least = MIN_SPLIT_DEPTH if grid >= slots else max(MIN_SMALL_GRID_SPLIT_DEPTH, MIN_SPLIT_SLICES * tile.bk)
        most = min(k // least, kept_splits)
        wave = mm.matmul_tc.X3_WAVE_SPLITS if tc and slots <= grid < 2 * slots else 1  # (X3: no stream-K tail)
        counts = _tune.split_counts(min(most, max(rounds * slots // grid, wave)) if count == 1 and not whole else 1)
        counts = counts[1:] if tile in split_only else counts
        for wanted in [min(most, long_split[1])] if dmma and long_split else counts:
            splits, depth = _tune.split_depth(k, wanted, tile.bk, odd=dmma)
            streams = count == 1 and splits == 1 and not dmma and not tc and mm.uses_stream_k(tile)
            tail = grid - _tune.stream_k_tail(grid, slots, k, tile.bk)[0] if streams else 0
            seconds = _tune.product_seconds(tile, m, n, k, splits, slots, sms, dtype.itemsize, tail, count,
                                            last_round_alone=dmma, depth=depth)
            seconds = mm.matmul_tc.x3_seconds(seconds, x3, splits, depth) if tc else seconds
            if best is None or seconds < best[0]:
                best = (seconds, tile, splits, depth)
    return best[1:]


def _wide_takes(dtype, m: int, n: int, k: int, count: int, vectors: bool, device_id: int) -> Tile | None:
    """_tune.WIDE_TILE where the planner weighs it: FP32 read with 16-byte loads, k at least _tune.WIDE_MIN_K, and
    one product with k at most _tune.WIDE_SHORT_MAX_K, or a batch with k at most _tune.WIDE_BATCH_MAX_K whose grid
    fills a round of the resident blocks."""
    tile = _tune.WIDE_TILE.get(dtype)
    if tile is None or not vectors or not tile.supports(dtype, mm._compute_capability(device_id)):
        return None
    if count == 1:  # the model weighs it beside SMALL_K_TILE
        return tile if _tune.WIDE_MIN_K <= k <= _tune.WIDE_SHORT_MAX_K else None
    if min(m, n) <= _tune.NARROW_SIDE:  # its 128 x 128 tiles would be mostly padding: the narrow tiles weigh in
        return None
    grid = count * -(-m // tile.bm) * -(-n // tile.bn)
    fills = grid >= mm.resident_tiles(tile, dtype, device_id)
    return tile if _tune.WIDE_MIN_K <= k <= _tune.WIDE_BATCH_MAX_K and fills else None
