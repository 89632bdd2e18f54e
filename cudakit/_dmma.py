"""FP64 matrix products on the tensor cores through kernels/matmul_dmma.cu (matmul_dmma_async): a cp.async ring of
swizzled shared slices and mma.sync (m16n8k8 on sm_90, m8n8k4 on sm_80). The fast variant's planner
(_matmul_plan.py) weighs its PLANNED tiles alone, k whole, where `planned` holds (a batch: the 32 x 32 tile besides;
a batch's batch_tile alone where there is one; k split where `mid_splits`), and split_plan's tile for a small C with a
long k (alone for a C past _tune.NARROW_SIDE, beside the register tiles for a narrower one); run()
takes float64 operands of any layout (2-D, or a batch given as strides); tools/dmma_probe.py times every tile against
cuBLAS.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import cupy

from . import _tune
from ._compile import instantiation, kernel, launch, rebased, resident_blocks
from ._device import shared_per_block, sm_count, workspace

FAMILY = "matmul_dmma"
MAX_GRID_Z = 65535  # products per launch; the host loops beyond
MAX_DIM = 2**31 - 1  # m, n, k are int in the kernel (offsets are 64-bit)


@dataclass(frozen=True)
class DmmaTile:
    """A bm x bn block tile in bk-deep slices, warps of wm x wn, `stages` slots in the cp.async ring."""

    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int

    @property
    def threads(self) -> int:
        return self.bm // self.wm * (self.bn // self.wn) * 32

    @property
    def shared_bytes(self) -> int:
        return self.stages * (self.bm + self.bn) * self.bk * 8

    @property
    def name(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}_w{self.wm}x{self.wn}_s{self.stages}"

    def expression(self, a_kc: bool, b_kc: bool) -> str:
        return instantiation("matmul_dmma_async", self.bm, self.bn, self.bk, self.wm, self.wn, self.stages, a_kc, b_kc)

    def expressions(self) -> tuple[str, ...]:
        """Every layout's instantiation: one module per tile."""
        return tuple(self.expression(a, b) for a in (True, False) for b in (True, False))


# Warp tiles hold 64 x 32 (or 32 x 64) FP64 sums: 64 doubles, 128 registers a thread; 64 x 64 would need all 255.
# (The 32 x 32 tile's warps hold 16 x 16.)
TILES = (
    DmmaTile(128, 128, 16, 64, 32, 4),  # 256 threads, 128 KiB
    DmmaTile(128, 128, 16, 32, 64, 4),
    DmmaTile(128, 128, 32, 64, 32, 3),  # half the barriers per flop, 192 KiB: the default
    DmmaTile(128, 64, 16, 64, 32, 4),  # 128 threads, 96 KiB: two blocks an SM
    DmmaTile(64, 128, 16, 32, 64, 4),
    DmmaTile(64, 64, 16, 32, 32, 4),  # 128 threads, 64 KiB: three blocks an SM, for grids of a few waves
    DmmaTile(64, 64, 32, 32, 32, 3),  # 96 KiB: 256 bytes of each line a slice (split_plan's alone)
    DmmaTile(128, 64, 16, 64, 32, 3),  # 128 threads, 72 KiB: two blocks an SM, each past the other's barriers
    DmmaTile(64, 128, 16, 32, 64, 3),
    DmmaTile(32, 32, 16, 16, 16, 5),  # 128 threads, 40 KiB: five blocks an SM, for a small C (batches, splits)
)
DEFAULT = TILES[2]  # the tile run() and launcher() take where none is given
# The tiles whole-k products are planned on (rates in _tune.TILE_TFLOPS): two blocks an SM of 64 x 128 or 128 x 64 in
# three stages, or three of 64 x 64, outran DEFAULT on every product timed, 4096^3 and 8192^3 too (docs/NOTES.md)
PLANNED = TILES[7:9] + TILES[5:6]
SMALLEST = TILES[5]
# Batches that `planned` leaves take the 32 x 32 tile where a round of its blocks holds the whole batch (a small C
# over a long k: the 64 x 64 tile left most SMs idle, the tiny kernel ran its chunks' latency exposed), or, at any
# count, where C is narrow (a side of at most _tune.NARROW_SIDE) and fills BATCH_TILE_MIN_FILL of its padded tiles
# (the register tiles ran such batches at half its speed); else SMALLEST where a round of its blocks holds the batch
# (batch_tile). Batches take these tiles, and `planned`'s, from BATCH_SHORT_DEPTH deep, ahead of the small-product
# kernel and the tiny kernel's 32-wide tiles, which ran them slower at every depth timed (docs/NOTES.md, session 49).
BATCH_TILES = (TILES[9], SMALLEST)
BATCH_TILE_MIN_FILL, BATCH_SHORT_DEPTH = 0.125, 17
# FP64 products at least MIN_DEPTH deep (a batch's products together) whose C gives MIN_ROUND of the SMs a SMALLEST
# tile: the PLANNED tiles, k whole. They outran the register tiles on every such product timed, batches and k from
# 48 to 255 included (docs/NOTES.md, session 37). A k of at most _matmul_batch.SHORT_K_F64 (a batch's: the small
# kernel's limits, or SHORT_K_F64_BATCH, or SHORT_K_F64 for an odd n) takes the small-product kernel before the
# planner, but a batch from BATCH_SHORT_DEPTH deep that these tiles take (_matmul_batch.pipelined_takes); one product
# from there to 47 deep was not timed and keeps the register tiles.
MIN_DEPTH, MIN_ROUND = 48, 0.8
# 2-D FP64 products SHORT_DEPTHS deep with both sides of C even are planned so too: PLANNED ran them at 0.88-1.65x
# cuBLAS, where the short-k writer ran 0.71-0.93x; an odd side (C's lines stored a double at a time, or its pairs off
# 16 bytes) ran the tiles at half the writer's speed (docs/NOTES.md, session 41). The rest keep the short-k writer
# (which ran k of 4 to 8 faster than the tiles too), batches included.
SHORT_DEPTHS = (9, 16)
# FP64 products at least SPLIT_DEPTH deep whose C leaves SMs without a SMALLEST tile: split_plan's tile and split of
# k (split_launcher: operands read in place, chunks off 16-byte alignment in 8-byte halves). For a C past
# _tune.NARROW_SIDE the planner takes it alone: the rates' model has no per-block cost and put such products on the
# register tiles, which ran them slower (docs/NOTES.md, sessions 45, 50 and 51: from SPLIT_DEPTH, only some short
# products ran slower split); a narrower C weighs it beside them. From LONG_DEPTH on, its tile is the one of
# SPLIT_TILES that pads C least (or NARROW_SPLIT_TILE, below), its blocks filling whole rounds of the SMs: one, up to
# SPLIT_ROUNDS where runs stay MIN_RUN deep, and more where runs of k would pass MAX_RUN (an odd number of slices:
# _tune.split_depth). A shallower k, or one where that tile's round would take runs shallower than MIN_RUN, is too
# little work to keep the larger tiles busy: SMALLEST takes it, in about two rounds of its resident blocks where runs
# stay SHALLOW_RUNS[0] deep and fill TWO_ROUNDS_FILL of the two, else one round where they stay SHALLOW_RUNS[1] deep
# (a round and a few blocks ran slower than the round).
SPLIT_DEPTH, LONG_DEPTH, MIN_RUN, MAX_RUN, SPLIT_ROUNDS, SHALLOW_RUNS = 1024, 16384, 1024, 2048, 2, (256, 128)
TWO_ROUNDS_FILL = 0.75
SPLIT_TILES = (TILES[4], TILES[3], TILES[6])  # 64 x 128, 128 x 64, and 64 x 64 in 32-deep slices
# split_plan takes the 32 x 32 tile instead where it pads C to less than half of what the SPLIT_TILES tile does: its
# split ran at about half their rate (docs/NOTES.md, session 50)
NARROW_SPLIT_TILE = TILES[9]
# FP64 products `planned` puts on the PLANNED tiles whose SMALLEST grid is short of MID_FILL rounds of its resident
# blocks: SMALLEST with k split (split_launcher, read in place, 8-byte halves too) so that its blocks fill MID_ROUNDS
# rounds, in at most MID_MAX_SPLITS runs at least MID_MIN_RUN deep. k whole, such grids left most SMs one block of
# four warps, or some SMs a block more than the rest; split, they ran 1.1-1.4x faster than the best tile whole. A grid
# that fills MID_FULL of a round and gives the busiest SM less than MID_UNEVEN times the mean of blocks has neither to
# gain and keeps k whole: split, one such ran slower (docs/NOTES.md, sessions 44 and 45).
MID_FILL, MID_ROUNDS, MID_MAX_SPLITS, MID_MIN_RUN, MID_FULL, MID_UNEVEN = 1.5, 2, 4, 512, 0.9, 1.1
# The kernel copies a chunk of two doubles that is not 16-byte aligned as two 8-byte halves, which slows it (an odd
# ld leaves every other line so, an offset view with an even ld every line). A product with at least
# PAD_MIN_FLOPS_PER_BYTE flops per byte of such operands (counted twice where every line is off) reads padded copies
# instead (matmul.aligned_operand); fewer flops a byte read them in place (docs/NOTES.md, "Odd leading dimensions").
# A batch is always read in place.
PAD_MIN_FLOPS_PER_BYTE = 400


def instantiation_groups():
    """Every module this family builds (a tile's four layouts each), for the GPU-less compile check."""
    return [tile.expressions() for tile in TILES]


def _readable(x, row_axis: int):
    """(operand, its k index is contiguous, leading dimension) as the kernel reads it: in place, an unreadable layout
    (no unit stride) copied first (matmul._layout). The kernel copies each 16-byte aligned chunk of two doubles
    whole, any other in two 8-byte halves (reads_pairs: whether every chunk is aligned)."""
    from .matmul import _layout

    return _layout(x, row_axis)


def run(A, B, out, tile: DmmaTile | None = None, batch=(1, 0, 0), transposed: bool | None = None) -> None:
    """out = A @ B in float64 on the tensor cores (sm_80+). A m x k, B k x n, out m x n C-contiguous (out's first
    product; all `count` products one after the other). batch = (count, A's stride, B's stride) in elements
    between products (0: broadcast). With count 1, an operand without a unit stride is copied, and misaligned ones
    are padded where that pays (_operands)."""
    if batch[0] == 1:  # copied here, where the copies outlive the launches that read them
        A, B = _operands(A, B)
    for args in launches(A, B, out, tile, batch, transposed=transposed):
        launch(*args)


def _operands(A, B, pads: bool | None = None):
    """(A, B) as one product's launches read them: readable layouts in place, misaligned ones padded where the
    product does at least PAD_MIN_FLOPS_PER_BYTE flops per byte of them (pads: that decision, taken already for
    operands of this geometry)."""
    from .matmul import aligned_operand

    a, b = _readable(A, 0)[0], _readable(B, 1)[0]
    if pads is None:
        pads = _pads(a, b)
    return (aligned_operand(a, 0), aligned_operand(b, 1)) if pads else (a, b)


def _pads(a, b) -> bool:
    """_operands' rule for readable operands a and b."""
    (m, k), n = a.shape, b.shape[1]
    halves = [(x, axis) for x, axis in ((a, 0), (b, 1)) if not reads_pairs(x, axis)]
    weight = sum(x.nbytes * (2 if _readable(x, axis)[2] % 2 == 0 else 1) for x, axis in halves)
    return bool(halves) and 2 * m * n * k >= PAD_MIN_FLOPS_PER_BYTE * weight


def reads_pairs(x, row_axis: int) -> bool:
    """Whether the kernel reads operand x in place in 16-byte chunks: a 16-byte aligned base and an even ld."""
    a, _, ld = _readable(x, row_axis)
    return a is x and a.data.ptr % 16 == 0 and ld % 2 == 0


def launches(A, B, out, tile: DmmaTile | None = None, batch=(1, 0, 0), c_ptr: int | None = None,
             transposed: bool | None = None, k_last: int | None = None) -> list:
    """The launches (launch()'s arguments) that run() makes; c_ptr: the first product's output address, if not
    out's (out then gives the shape); k_last: the last product's depth, if not A's (at most A's). transposed: run
    C^T = B^T @ A^T, the default where A's k and B's columns are contiguous (two C-order operands): the kernel's mma
    A is then B^T, row-contiguous, whose fragments load without bank conflicts. The launches hold only addresses: A and
    B must be readable in place (run() and launcher() copy an operand without a unit stride first, and keep the
    copies while the launches are queued)."""
    tile = DEFAULT if tile is None else tile
    m, k = A.shape
    k2, n = B.shape
    assert k == k2 and out.shape[-2:] == (m, n) and (out.flags.c_contiguous or c_ptr), (A.shape, B.shape, out.shape)
    assert A.dtype == B.dtype == out.dtype == cupy.float64, (A.dtype, B.dtype, out.dtype)
    assert max(m, n, k) <= MAX_DIM and min(m, n, k) >= 1, (m, n, k)
    k_last = k if k_last is None else k_last
    assert 1 <= k_last <= k, (k_last, k)
    count, batch_a, batch_b = batch
    (a, a_kc, lda), (b, b_kc, ldb) = _readable(A, 0), _readable(B, 1)
    assert a is A and b is B, "the kernel reads A and B in place: copy an operand without a unit stride first"
    if transposed is None:
        transposed = _transposes(a_kc, b_kc)
    if transposed:  # B^T is the kernel's A, A^T its B: each keeps its layout flag (its k stride is the same)
        (a, a_kc, lda, batch_a), (b, b_kc, ldb, batch_b) = (b, b_kc, ldb, batch_b), (a, a_kc, lda, batch_a)
        m, n = n, m
    fn = kernel(FAMILY, tile.expression(a_kc, b_kc), tile.expressions())
    blocks = -(-m // tile.bm) * -(-n // tile.bn)
    c_ptr = out.data.ptr if c_ptr is None else c_ptr
    return [(fn, (blocks, 1, min(MAX_GRID_Z, count - z0)), (tile.threads,),
             (a.data.ptr + z0 * batch_a * 8, b.data.ptr + z0 * batch_b * 8, c_ptr + z0 * m * n * 8,
              m, n, k, lda, ldb, batch_a, batch_b, int(transposed), k_last if z0 + MAX_GRID_Z >= count else k),
             tile.shared_bytes)
            for z0 in range(0, count, MAX_GRID_Z)]


def oriented(tile: DmmaTile, swap: bool) -> DmmaTile:
    """The tile to launch where the kernel runs C^T = B^T @ A^T (swap) on a split product or a batch planned with
    `tile` over C: its sides (and its warps') exchanged, so that the grid pads C^T as the plan padded C. A square tile,
    or one whose exchange TILES lacks, stays. (One product's whole-k launches keep the planned tile: exchanged, they
    ran no faster.)"""
    if not swap or tile.bm == tile.bn:
        return tile
    flipped = DmmaTile(tile.bn, tile.bm, tile.bk, tile.wn, tile.wm, tile.stages)
    return flipped if flipped in TILES else tile


def _transposes(a_kc: bool, b_kc: bool) -> bool:
    """launches()'s default orientation: C^T = B^T @ A^T where A's k and B's columns are contiguous."""
    return a_kc and not b_kc


def reads_b_first(A, B) -> bool:
    """Whether launches() of these operands (read in place) runs C^T = B^T @ A^T: B's address leads each launch."""
    return _transposes(_readable(A, 0)[1], _readable(B, 1)[1])


def fits(tile: DmmaTile, device_id: int) -> bool:
    """Whether a block of `tile` fits device_id's shared memory (the 128 x 128 default does not before sm_90)."""
    return tile.shared_bytes <= shared_per_block(device_id)


def planned(m: int, n: int, k: int, device_id: int, count: int = 1) -> bool:
    """Whether matmul's planner weighs the PLANNED tiles alone (those that fit; a batch: with BATCH_TILES[0]) for
    `count` m x k x n FP64 products: sm_80 and later with room for one of them, k at least MIN_DEPTH (a batch:
    BATCH_SHORT_DEPTH; one product of even sides: or within SHORT_DEPTHS), both sides of C past _tune.NARROW_SIDE,
    and the products' C giving MIN_ROUND of the SMs a SMALLEST tile."""
    short = count == 1 and SHORT_DEPTHS[0] <= k <= SHORT_DEPTHS[1] and m % 2 == 0 and n % 2 == 0
    deep_enough = k >= (MIN_DEPTH if count == 1 else BATCH_SHORT_DEPTH) or short
    return (deep_enough and min(m, n) > _tune.NARROW_SIDE and _tune.compute_capability(device_id) >= 80
            and count * -(-m // SMALLEST.bm) * -(-n // SMALLEST.bn) >= MIN_ROUND * sm_count(device_id)
            and any(fits(t, device_id) for t in PLANNED))


def fills_batch_tile(m: int, n: int) -> bool:
    """Whether an m x n C is narrow (a side of at most _tune.NARROW_SIDE) and fills BATCH_TILE_MIN_FILL of its padded
    32 x 32 tiles."""
    tile = BATCH_TILES[0]
    padded = -(-m // tile.bm) * tile.bm * -(-n // tile.bn) * tile.bn
    return min(m, n) <= _tune.NARROW_SIDE and m * n >= BATCH_TILE_MIN_FILL * padded


def batch_tile(m: int, n: int, k: int, device_id: int, count: int) -> DmmaTile | None:
    """The tile matmul's planner puts `count` m x k x n FP64 products (a batch) that `planned` leaves (a narrow C, or
    too few tiles) on alone, k whole, or None: sm_80 and later, k at least BATCH_SHORT_DEPTH, and the 32 x 32 tile
    where C is narrow and fills BATCH_TILE_MIN_FILL of its padded tiles, else the first of BATCH_TILES whose grid is
    within one round of its resident blocks (there the register tiles leave SMs idle too; session 38: SMALLEST
    1.0-2.7x them)."""
    if count <= 1 or k < BATCH_SHORT_DEPTH or _tune.compute_capability(device_id) < 80:
        return None
    if fills_batch_tile(m, n) and fits(BATCH_TILES[0], device_id):
        return BATCH_TILES[0]
    for tile in BATCH_TILES:
        grid = count * -(-m // tile.bm) * -(-n // tile.bn)  # (the shared memory's bound first: no compile)
        if (fits(tile, device_id) and grid <= sm_count(device_id) * (shared_per_block(device_id) // tile.shared_bytes)
                and grid <= resident(tile, device_id)):
            return tile
    return None


def mid_splits(m: int, n: int, k: int, device_id: int) -> int:
    """The runs of k (1: whole) for one m x k x n FP64 product that `planned` holds for, on SMALLEST (MID_FILL)."""
    if not fits(SMALLEST, device_id):  # (the shared memory's bound first: no compile)
        return 1
    grid, slots, sms = -(-m // SMALLEST.bm) * -(-n // SMALLEST.bn), resident(SMALLEST, device_id), sm_count(device_id)
    uneven = -(-grid // sms) * sms / grid  # the busiest SM's blocks over the mean
    if grid >= MID_FILL * slots or (grid >= MID_FULL * slots and uneven < MID_UNEVEN):
        return 1
    return max(1, min(MID_MAX_SPLITS, -(-MID_ROUNDS * slots // grid), k // MID_MIN_RUN))


def split_planned(m: int, n: int, k: int, device_id: int) -> bool:
    """Whether matmul's planner takes split_plan's tile with k split for an m x k x n FP64 product (weighs it beside the
    register tiles, for a narrow C): sm_80 and later, k at least SPLIT_DEPTH, C short of one SMALLEST tile per SM, and
    a SPLIT_TILES tile that fits."""
    return (k >= SPLIT_DEPTH and _tune.compute_capability(device_id) >= 80
            and -(-m // SMALLEST.bm) * -(-n // SMALLEST.bn) < sm_count(device_id)
            and any(fits(t, device_id) for t in SPLIT_TILES))


def split_plan(m: int, n: int, k: int, device_id: int) -> tuple[DmmaTile, int]:
    """(tile, splits) of split_launcher for a small C with a long k: of the SPLIT_TILES that fit, the one that pads C
    least (the first of those that pad it alike; NARROW_SPLIT_TILE where it pads C to less than half of that and its
    round's runs stay MIN_RUN deep), k cut so that its blocks fill whole rounds of the SMs: one, up to SPLIT_ROUNDS
    where runs stay MIN_RUN deep, more where runs would pass MAX_RUN; for k short of LONG_DEPTH, or where that round's
    runs would be shallower than MIN_RUN, SMALLEST in about two rounds of its blocks or one (SHALLOW_RUNS)."""
    def padded(t: DmmaTile) -> int:
        return -(-m // t.bm) * t.bm * -(-n // t.bn) * t.bn

    def round_runs(t: DmmaTile) -> int:  # runs of k whose blocks fill one round of t's resident blocks
        return max(1, resident(t, device_id) // (-(-m // t.bm) * -(-n // t.bn)))

    tile = min((t for t in SPLIT_TILES if fits(t, device_id)), key=padded)
    narrow = NARROW_SPLIT_TILE
    if fits(narrow, device_id) and 2 * padded(narrow) < padded(tile) and round_runs(narrow) * MIN_RUN <= k:
        tile = narrow  # (where its round's runs would be shallower than MIN_RUN, the SPLIT_TILES tile's may not be)
    grid, one_round = -(-m // tile.bm) * -(-n // tile.bn), round_runs(tile)
    if (k < LONG_DEPTH or one_round * MIN_RUN > k) and fits(SMALLEST, device_id):
        grid, slots = -(-m // SMALLEST.bm) * -(-n // SMALLEST.bn), resident(SMALLEST, device_id)
        two_rounds, one_round = min(2 * slots // grid, k // SHALLOW_RUNS[0]), min(slots // grid, k // SHALLOW_RUNS[1])
        return SMALLEST, two_rounds if two_rounds * grid >= TWO_ROUNDS_FILL * 2 * slots else max(1, one_round)
    rounds = max(1, min(SPLIT_ROUNDS, k // MIN_RUN // one_round), -(-k // (MAX_RUN * one_round)))
    return tile, rounds * one_round  # (a round and a few blocks takes as long as two rounds)


@functools.lru_cache(maxsize=None)
def resident(tile: DmmaTile, device_id: int) -> int:
    """Blocks of `tile` the GPU holds at once (SMs x the driver's occupancy calculator) on device_id, the current one."""
    fn = kernel(FAMILY, tile.expression(True, False), tile.expressions())
    return sm_count(device_id) * resident_blocks(fn, tile.threads, tile.shared_bytes)


def launcher(A, B, out, tile: DmmaTile | None = None):
    """f(A, B, out): run(A, B, out, tile) with its launches built once for operands of these shapes, strides and
    16-byte alignments (the fast variant's route key holds all three); an operand without a unit stride, or padded
    by _operands, is copied on every call, laid out the same each time."""
    tile = DEFAULT if tile is None else tile
    (a, a_kc, _), (b, b_kc, _) = _readable(A, 0), _readable(B, 1)
    pads = _pads(a, b)
    a, b = _operands(a, b, pads)  # (a padded copy keeps its operand's layout)
    copy_a, copy_b = a is not A, b is not B
    swap = _transposes(a_kc, b_kc)  # (each launch then reads B first)
    first, second = (b, a) if swap else (a, b)
    product = rebased(launches(a, b, out, tile, transposed=swap), first.data.ptr, second.data.ptr, out.data.ptr)

    def run_launches(A, B, out):
        a, b = _operands(A, B, pads) if copy_a or copy_b else (A, B)
        first, second = (b, a) if swap else (a, b)
        product(first.data.ptr, second.data.ptr, out.data.ptr)
    return run_launches


def split_launcher(A, B, out, tile: DmmaTile, splits: int, depth: int):
    """f(A, B, out): A @ B as `splits` products over consecutive runs of `depth` of k (the last one shorter), one
    batch in one launch, into a workspace of partial results, then their sum in a fixed order (deterministic); the
    launches built once, the tile oriented to the launch (oriented). None where an operand is not read in place (no
    unit stride); chunks off 16-byte alignment (an odd leading dimension, an offset view) are read in 8-byte halves."""
    from ._matmul_routes import partials_adder

    if _readable(A, 0)[0] is not A or _readable(B, 1)[0] is not B:
        return None
    m, k = A.shape
    n = B.shape[1]
    assert 1 <= splits and (splits - 1) * depth < k <= splits * depth, (k, splits, depth)
    (_, a_kc, lda), (_, b_kc, ldb) = _readable(A, 0), _readable(B, 1)
    size = m * n * 8
    partials = workspace(splits * size)[0]
    swap = _transposes(a_kc, b_kc)  # (each launch then reads B first)
    runs = (splits, depth * (1 if a_kc else lda), depth * (1 if b_kc else ldb))
    parts = launches(A[:, :depth], B[:depth, :], out, oriented(tile, swap), runs, partials, transposed=swap,
                     k_last=k - (splits - 1) * depth)
    first, second = (B, A) if swap else (A, B)
    products, add = rebased(parts, first.data.ptr, second.data.ptr, partials), partials_adder(out, splits)

    def run_launches(A, B, out):
        partials = workspace(splits * size)[0]
        first, second = (B, A) if swap else (A, B)
        products(first.data.ptr, second.data.ptr, partials)
        add(out.data.ptr, partials)
    return run_launches


def matmul(A, B, tile: DmmaTile | None = None):
    """A @ B of 2-D float64 operands into a new C-order array."""
    out = cupy.empty((A.shape[0], B.shape[1]), cupy.float64)
    run(A, B, out, tile)
    return out
