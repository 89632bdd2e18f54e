"""Batches of matrix products for cudakit.matmul's fast variant: operands read in place as evenly spaced runs,
one launch per run (its launches cached per shapes and strides), the small-product kernel for batches of short-k
products and the dots kernel for batches of a tiny C over a deeper k."""
from __future__ import annotations

import math

import cupy
import numpy as np

from . import _dmma, _fewrows, _nd, _shortk, matmul as mm
from ._compile import instantiation, kept, kernel, launch, rebased

def _batch_operand(x, batch: tuple, row_axis: int):
    """(x broadcast over `batch`, its first matrix), readable by the kernels as a batch: every matrix in one layout
    the kernels read in place, whole elements between matrices (a broadcast axis: 0); else a C-contiguous copy."""
    full = x if x.shape[:-2] == batch else cupy.broadcast_to(x, batch + x.shape[-2:])
    first = full[(0,) * len(batch)]
    item = x.itemsize
    if mm._layout(first, row_axis)[0] is first and all(st >= 0 and st % item == 0 for st in full.strides[:-2]):
        return full, first
    full = cupy.ascontiguousarray(full)
    return full, full[(0,) * len(batch)]


_BATCH_LAUNCHES: dict = {}  # a batch read in place: its launches, rebased on each call's operands (_compile.rebased)


def run_fast_batched(a, b, c, batch: tuple, tensor_core: bool = False) -> None:
    """Every product of the batch on the fast variant's tile, a run of evenly spaced products per launch. A batch
    read in place repeats its launches for the next operands of the same shapes, strides and alignment.
    tensor_core: float16, bfloat16 or TF32 operands, on the tensor-core kernels."""
    device_id = c.data.device_id
    pa, pb, pc = a.data.ptr, b.data.ptr, c.data.ptr
    geometry = (batch, a.shape, a.strides, b.shape, b.strides, pa % 16, pb % 16, c.dtype, device_id)
    if b.shape[-1] == 1:  # matrix-vector products: the matvec kernels, one launch kept per geometry
        run = kept(_BATCH_LAUNCHES, ("matvec",) + geometry, mm.matvec_module.batched_launcher, a, b[..., 0], batch)
        if run is not None:
            run(a, b[..., 0], c)
            return
    if a.shape[-2] == 1:  # one-row products, B_i.T @ a_i: the column-major matvec kernel, one launch kept
        run = kept(_BATCH_LAUNCHES, ("rows",) + geometry, _row_products_launcher, a, b, batch)
        if run is not None:
            run(pb, pa, pc)
            return
    if tensor_core:
        _run_tensor_core_batched(a, b, c, batch)
        return
    pair = mm._tune.tiles(device_id, c.dtype)
    key = (batch, a.shape, a.strides, b.shape, b.strides, pa % 16, pb % 16, pc % 16, c.dtype, pair, device_id)
    cached = _BATCH_LAUNCHES.get(key)
    if cached is None:
        launches, copies, b_first = _batched_launches(a, b, c, batch)
        if copies is not None:  # the operands were copied first (alive until queued here): nothing to repeat
            for args in launches:
                launch(*args)
            return
        cached = kept(_BATCH_LAUNCHES, key, _rebased, launches, pa, pb, pc, b_first)
    cached(pa, pb, pc)


def _rebased(launches: list, pa: int, pb: int, pc: int, b_first: bool):
    """f(pa, pb, pc): the launches made again on each call's addresses (_compile.rebased); b_first: B's address
    leads each launch (the pipelined kernel's C^T = B^T @ A^T)."""
    if not b_first:
        return rebased(launches, pa, pb, pc)
    run = rebased(launches, pb, pa, pc)
    return lambda pa, pb, pc: run(pb, pa, pc)


def _row_products_launcher(a, b, batch: tuple):
    """f(B's address, a's address, out's address) for a batch of one-row products a_i (1 x k) @ B_i (k x n), as
    B_i.T @ a_i on the column-major matvec kernel (B_i C-contiguous is B_i.T F-contiguous), in one launch; None
    where the batch is not one evenly spaced run of C-contiguous B_i and contiguous a_i."""
    k, n = b.shape[-2:]
    item = b.itemsize
    if k * n == 0 or (k > 1 and (b.strides[-2] != n * item or a.strides[-1] != item)) or (n > 1 and b.strides[-1] != item):
        return None
    full_a, full_b = cupy.broadcast_to(a, batch + a.shape[-2:]), cupy.broadcast_to(b, batch + (k, n))
    if any(st % item for x in (full_a, full_b) for st in x.strides[:len(batch)]):
        return None
    contiguous_c = tuple(math.prod(batch[i + 1:]) * n for i in range(len(batch)))
    outer, (count, step_a, step_b, step_c) = _nd.batch_runs(
        batch, *(tuple(st // item for st in x.strides[:len(batch)]) for x in (full_a, full_b)), contiguous_c)
    if outer:
        return None
    first_b, first_a = full_b[(0,) * len(batch)], full_a[(0,) * len(batch)][0]
    return mm.matvec_module.column_batch_launcher(first_b.T, first_a, count, step_b, step_a)


SMALL_TILES = ((8, 128), (16, 64), (32, 32), (64, 16), (128, 8), (32, 64), (64, 32))
SMALL_BK = 16  # as instantiated
SMALL_THREADS = 256  # as in kernels/matmul_small.cuh
# Batches of products at most SMALL_MAX_K deep, with at most SMALL_MAX_C elements of C and SMALL_MAX_MACS
# multiply-adds, take the small-product kernel. Its blocks step through k one slice at a time: a longer k or a larger
# product ran faster on the tiles (docs/NOTES.md, "matmul: the small-product kernel").
SMALL_MAX_K = 64
SMALL_MAX_C = 8192
SMALL_MAX_MACS = 2**17
# small_tile's weight of the padded work against the elements moved: fitted to ten batches' times on every tile, it
# ranks the fastest tile first on each (docs/NOTES.md, session 40: "the small kernel's tile")
SMALL_WORK_WEIGHT = 1.15
SMALL_WIDE = ((8, 128), (128, 8))  # the tiles whose slice loads spill registers in FP64: FP32 only
# Products at most _shortk.MAX_K deep take the short-k writer first (_shortk.takes). Past it, FP64 products at most
# SHORT_K_F64 deep (batches: SHORT_K_F64_BATCH, or SHORT_K_F64 where n is odd) are bound by writing C: the
# small-product kernel's 32 x 64 tile, whose warps store whole rows of C, writes it faster than the tensor-core tiles'
# fragments do, whatever C's size (a 2-D C at most 32 wide: the small tile padding it least, short_k_tile). A batch
# of even n past SHORT_K_F64_BATCH stored C faster on the tiles, whose rows of C are then whole 16-byte pairs. From
# _dmma.BATCH_SHORT_DEPTH deep, batches the pipelined tiles take go there first (pipelined_takes).
SHORT_K_F64 = 32
SHORT_K_F64_BATCH = 16
# FP32 products (2-D, both sides of C past _tune.NARROW_SIDE) at most SHORT_K_F32 deep likewise: the wide short-k
# tiles below stored C faster than the register tiles at every k timed up to it, slower on 8192 x 8192 from k = 32
# on (docs/NOTES.md, "FP32 short k past 16"); up to SHORT_K_F32_MID for a C of SHORT_K_F32_MID_C elements (smaller
# and larger C were faster on the tiles; docs/NOTES.md, "FP32 k of 32 to 47").
SHORT_K_F32 = 31
SHORT_K_F32_MID, SHORT_K_F32_MID_C = 47, (1 << 20, 48 << 20)
# Batches of FP32 products at most SHORT_K_F32_BATCH deep whose C is past the small kernel's limits and both its sides
# past _tune.NARROW_SIDE take the short-k tiles too (0: none), where X3 does not take them (_batched_launches)
SHORT_K_F32_BATCH = SHORT_K_F32
SHORT_K_TILE = (32, 64)
# FP32's short-k tiles: more of C per block stores it faster; of the two, the one that pads C least, the wider on a
# tie (docs/NOTES.md, "FP32 short k on wider tiles").
SHORT_K_TILES_F32 = ((64, 128), (64, 64))


def short_k_tile(itemsize: int, m: int, n: int) -> tuple[int, int]:
    """The small-product kernel's tile for a 2-D product with a short k (see SHORT_K_F64, SHORT_K_TILES_F32). An FP64
    C at most half SHORT_K_TILE wide takes the tile padding C least (on a tie the taller, then the wider): rows
    padded to SHORT_K_TILE's width would write mostly padding (docs/NOTES.md, "FP64 short k on a narrow C")."""
    def padded(t):
        return -(-m // t[0]) * t[0] * -(-n // t[1]) * t[1]

    if itemsize == 4:
        return min(SHORT_K_TILES_F32, key=padded)
    if 2 * n > SHORT_K_TILE[1]:
        return SHORT_K_TILE
    return min((t for t in SMALL_TILES if t not in SMALL_WIDE), key=lambda t: (padded(t), -t[0], -t[1]))


# Batches of products whose C is at most BATCH_DOTS_MAX_SIDE on both sides (not one row or column), too deep for the
# small-product kernel, take the dots kernel: a block per 8 x 8 part of each C, its threads striding over all of k,
# where the tiles would compute mostly padding. A C of several parts needs k of at least BATCH_DOTS_PART_DEPTH, one
# stride of the block (16 x 16 over k = 100 ran faster on the tiles: docs/NOTES.md, "matmul: batches of a tiny C").
# Only where the blocks fill a round of the GPU's resident ones: fewer products want k split, which the tiles do.
BATCH_DOTS_MAX_SIDE = 16
BATCH_DOTS_PART_DEPTH = 256


def batch_dots_takes(m: int, k: int, n: int, count: int, device_id: int, dtype) -> bool:
    routes = mm._matmul_routes
    if max(m, n) > BATCH_DOTS_MAX_SIDE or min(m, n) == 1 or k <= SMALL_MAX_K:
        return False
    parts = -(-m // routes.DOTS_PART[0]) * -(-n // routes.DOTS_PART[1])
    if parts > 1 and k < BATCH_DOTS_PART_DEPTH:
        return False
    return count * parts >= routes._dots_resident(dtype, device_id)


def small_expression(dtype, tile: tuple[int, int]) -> str:
    return instantiation("matmul_batched_small", np.dtype(dtype), *tile, SMALL_BK)


def past_small_limits(m: int, n: int, k: int) -> bool:
    """Whether m x k x n products are past the small-product kernel's limits (SMALL_MAX_K, _C, _MACS)."""
    return k > SMALL_MAX_K or m * n > SMALL_MAX_C or m * n * k > SMALL_MAX_MACS


def small_tile(m: int, n: int, k: int, itemsize: int = 4) -> tuple[int, int] | None:
    """The C tile of the small-product kernel for a batch of m x k x n products, or None where the register tiles
    serve. The tile of the least cost wins, then the larger tile: the elements each product's tiles move (A once per
    column of tiles, B once per row of them, and C), plus SMALL_WORK_WEIGHT times its padded C, each output weighed by
    its thread's shared-memory reads per multiply-add (a read of B for its OUT outputs besides theirs of A:
    1 + 1 / OUT). Past its limits, a short k still takes it, on the short-k tiles (SHORT_K_F64_BATCH and SHORT_K_F64,
    SHORT_K_F32_BATCH; _batched_launches gives FP32's to X3 where x3_short_k_takes, and FP64 batches to the pipelined
    tiles where pipelined_takes)."""
    if past_small_limits(m, n, k):
        if itemsize == 8:
            return SHORT_K_TILE if k <= SHORT_K_F64_BATCH or (k <= SHORT_K_F64 and n % 2) else None
        return short_k_tile(4, m, n) if k <= SHORT_K_F32_BATCH and min(m, n) > mm._tune.NARROW_SIDE else None

    def cost(tile):
        out = tile[0] * tile[1] // SMALL_THREADS
        tiles_m, tiles_n = -(-m // tile[0]), -(-n // tile[1])
        moved = m * k * tiles_n + k * n * tiles_m + m * n
        return moved + SMALL_WORK_WEIGHT * tiles_m * tile[0] * tiles_n * tile[1] * (1 + 1 / out), -out

    return min((t for t in SMALL_TILES if itemsize == 4 or t not in SMALL_WIDE), key=cost)


def small_launches(tile: tuple[int, int], a0, b0, c_ptr: int, count: int, steps: tuple[int, int, int]) -> list:
    """The launches of `count` products on the small-product kernel: a0 and b0 the first product's operands,
    `steps` the elements between consecutive products' A, B and C."""
    m, k = a0.shape
    n = b0.shape[1]
    item = a0.itemsize
    assert k <= SMALL_MAX_K, "the whole of k is staged in shared memory"
    fn = kernel(mm.FAMILY, small_expression(a0.dtype, tile), mm.seed_instantiations(a0.dtype))
    shared = k * (small_lda(tile[0], item) + tile[1] + 1) * item
    tiles_n = -(-n // tile[1])
    tiles = -(-m // tile[0]) * tiles_n
    strides = tuple(st // item for st in a0.strides + b0.strides)
    launches = []
    for p0 in range(0, count, mm.MAX_GRID_Y):
        here = min(mm.MAX_GRID_Y, count - p0)
        launches.append((fn, (tiles, here), (SMALL_THREADS,),
                         (a0.data.ptr + p0 * steps[0] * item, b0.data.ptr + p0 * steps[1] * item,
                          c_ptr + p0 * steps[2] * item, m, n, k, *strides, *steps, tiles_n), shared))
    return launches


def small_lda(bm: int, itemsize: int) -> int:
    """The pitch of the small-product kernel's k-major rows of A, as kernels/matmul_small.cuh sets it."""
    per_vector = 16 // itemsize
    return bm + per_vector if bm % per_vector == 0 else bm


# Batches of products at most TINY_MAX_SIDE on both sides of C and TINY_MAX_K deep, their rows of A and B
# contiguous, take the tiny-product kernel: a block per product, each thread 4 columns of C by BM / 8 rows, where the
# small-product kernel's threads keep one column each and issue two reads per OUT multiply-adds.
# A deeper k takes it too, TINY_CHUNK at a time, where the batch gives each SM at least TINY_LONG_K_PER_SM products
# and one for every TINY_LONG_K_CHUNKS[element size] chunks of k (a block a product: fewer run each chunk's latency
# exposed), where C is more than one of the dots kernel's parts or k at most TINY_ONE_PART_MAX_K (a C of one part over
# a deeper k ran faster on the dots kernel, whose blocks split k; a shallower one slower: docs/NOTES.md, session 40),
# and where it reads A's and B's rows in place. FP64 batches the pipelined kernel's 32 x 32 tile takes go there
# instead, at a deep k or a C at least TINY_YIELD_SIDE on each side and past the 16 x 16 tile (tiny_yields).
# With fewer than TINY_SPLIT_BELOW products an SM and a k past TINY_GROUPS[-1] split chunks, each product's k is cut
# among TINY_GROUPS[-1] groups of a block's threads, each staging its own TINY_SPLIT_CHUNK of k
# (kernels/matmul_small.cuh): the block keeps that many chunks in flight, and a product's rounds each take
# groups x TINY_SPLIT_CHUNK of k.
TINY_TILES = ((16, 16), (32, 16), (16, 32), (32, 32))
TINY_MAX_SIDE = 32
TINY_MAX_K = 64
TINY_LONG_K_PER_SM, TINY_LONG_K_CHUNKS = 2, {4: 4, 8: 8}
TINY_COLS = 4  # as in kernels/matmul_small.cuh
TINY_CHUNK, TINY_SPLIT_CHUNK = 64, 32  # as in kernels/matmul_small.cuh
TINY_GROUPS = (1, 4)  # as instantiated
TINY_SPLIT_BELOW = 16
TINY_ONE_PART_MAX_K = 640
# FP64 batches at least _dmma.BATCH_SHORT_DEPTH deep go to the pipelined kernel's tiles where the planner puts them
# there, ahead of the small-product and short-k kernels (pipelined_takes), and so do the tiny kernel's whose C is at
# least TINY_YIELD_SIDE on each side and past its 16 x 16 tile (tiny_yields): they ran 1.07-2.1x faster there on every
# such batch timed, k from 17 to 64 (docs/NOTES.md, session 49). A narrower tiny C was not timed there.
TINY_YIELD_SIDE = 16


def tiny_tile(m: int, n: int, k: int, products_per_sm: float = 0.0, itemsize: int = 4) -> tuple[int, int] | None:
    """The tiny-product kernel's tile (a whole C) for a batch of m x k x n products, products_per_sm of them an SM,
    or None where it does not take them (a deep k: the chunks a product's groups take in turn count)."""
    if max(m, n) > TINY_MAX_SIDE or min(m, n) == 1:
        return None
    one_part = m <= mm._matmul_routes.DOTS_PART[0] and n <= mm._matmul_routes.DOTS_PART[1]
    if one_part and k > TINY_ONE_PART_MAX_K:
        return None
    groups = tiny_groups(k, products_per_sm)
    chunks = -(-k // (TINY_CHUNK if groups == 1 else groups * TINY_SPLIT_CHUNK))  # rounds of chunks a product takes
    per_product = TINY_LONG_K_CHUNKS.get(itemsize, TINY_LONG_K_CHUNKS[4])
    if k > TINY_MAX_K and products_per_sm < max(TINY_LONG_K_PER_SM, chunks / per_product):
        return None
    return 16 if m <= 16 else 32, 16 if n <= 16 else 32


def tiny_yields(m: int, n: int, k: int, count: int, device_id: int, itemsize: int) -> bool:
    """Whether `count` FP64 m x k x n products run on the pipelined kernel's 32 x 32 tile instead of the tiny kernel,
    where _dmma.batch_tile gives it: a k past TINY_MAX_K, or a C at least TINY_YIELD_SIDE on each side and past the
    tiny kernel's 16 x 16 tile."""
    short_yields = min(m, n) >= TINY_YIELD_SIDE and max(m, n) > min(TINY_TILES[0])
    return (itemsize == 8 and (k > TINY_MAX_K or short_yields)
            and _dmma.batch_tile(m, n, k, device_id, count) == _dmma.BATCH_TILES[0])


def pipelined_takes(m: int, n: int, k: int, count: int, device_id: int, itemsize: int) -> bool:
    """Whether `count` FP64 m x k x n products go to the pipelined kernel's tiles ahead of the small-product and short-k
    kernels: from _dmma.BATCH_SHORT_DEPTH deep, where the planner puts them there (_dmma.planned or batch_tile)."""
    return (itemsize == 8 and k >= _dmma.BATCH_SHORT_DEPTH
            and (_dmma.planned(m, n, k, device_id, count) or _dmma.batch_tile(m, n, k, device_id, count) is not None))


def tiny_reads(a0, b0) -> bool:
    """Whether the tiny-product kernel reads a0 and b0 in place: their rows contiguous, whole elements apart."""
    item = a0.itemsize
    if (a0.shape[1] > 1 and a0.strides[1] != item) or (b0.shape[1] > 1 and b0.strides[1] != item):
        return False
    return all(x.shape[0] == 1 or (x.strides[0] >= 0 and x.strides[0] % item == 0) for x in (a0, b0))


def tiny_vectors(a0, b0, steps) -> bool:
    """Whether the tiny-product kernel copies A and B with 16-byte loads: read in place, their leading dimensions, the
    batch steps (`steps`, in elements) and their addresses on 16 bytes."""
    per_vector = 16 // a0.itemsize
    lds = (x.strides[0] // a0.itemsize if x.shape[0] > 1 else 0 for x in (a0, b0))
    return (tiny_reads(a0, b0) and all(v % per_vector == 0 for v in (*lds, *steps))
            and a0.data.ptr % 16 == b0.data.ptr % 16 == 0)


def tiny_groups(k: int, products_per_sm: float) -> int:
    """How many groups of the tiny kernel's threads share each product's k: all of them for fewer than
    TINY_SPLIT_BELOW products an SM and a k past one round of the groups' TINY_SPLIT_CHUNKs (so that at least the
    first group takes a second chunk)."""
    groups = TINY_GROUPS[-1]
    return groups if k > groups * TINY_SPLIT_CHUNK and products_per_sm < TINY_SPLIT_BELOW else 1


def tiny_expression(dtype, tile: tuple[int, int], vec: bool, groups: int = 1) -> str:
    return instantiation("matmul_batched_tiny", np.dtype(dtype), *tile, vec, groups)


def tiny_launches(tile: tuple[int, int], a0, b0, c_ptr: int, count: int, steps: tuple[int, int, int],
                  groups: int = 1) -> list | None:
    """The launch of `count` products on the tiny-product kernel (as small_launches), k shared among `groups` groups
    of each block's threads, or None where a0's or b0's rows are not contiguous (an F-order operand: the
    small-product kernel reads any strides)."""
    m, k = a0.shape
    n = b0.shape[1]
    item = a0.itemsize
    if not tiny_reads(a0, b0):
        return None
    lda, ldb = (x.strides[0] // item if x.shape[0] > 1 else 0 for x in (a0, b0))
    per_vector = 16 // item
    vec = tiny_vectors(a0, b0, steps[:2])
    vec_c = n % TINY_COLS == 0 and steps[2] % per_vector == 0 and c_ptr % 16 == 0
    fn = kernel(mm.FAMILY, tiny_expression(a0.dtype, tile, vec, groups), mm.seed_instantiations(a0.dtype))
    kw = -(-min(k, TINY_CHUNK if groups == 1 else TINY_SPLIT_CHUNK) // per_vector) * per_vector
    pitch = kw + per_vector if kw % (2 * per_vector) == 0 else kw
    staging = m * pitch + kw * tile[1]  # (only A's m rows are staged)
    region = staging if groups == 1 else max(staging, m * tile[1])  # (a group's sums, as the kernel lays them)
    threads = groups * 8 * tile[1] // TINY_COLS
    return [(fn, (count,), (threads,), (a0.data.ptr, b0.data.ptr, c_ptr, m, n, k, lda, ldb, *steps, int(vec_c)),
             groups * region * item)]


def _batched_launches(a, b, c, batch: tuple) -> tuple[list, tuple | None, bool]:
    """(the launches of the batch, None where they read a and b in place, else the copies they read: the launches
    hold only addresses, so the copies must live until the launches are queued; whether B's address leads each
    launch)."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    given = a.data.ptr, b.data.ptr
    (a, a0), (b, b0) = _batch_operand(a, batch, 0), _batch_operand(b, batch, 1)
    copies = None if (a.data.ptr, b.data.ptr) == given else (a, b)  # a copy is a new allocation
    item = a.itemsize
    strides = [tuple(st // item for st in x.strides[:len(batch)]) for x in (a, b, c)]
    outer, (count, step_a, step_b, step_c) = _nd.batch_runs(batch, *strides)
    device_id, products = c.data.device_id, count * math.prod(s for s, *_ in outer)
    steps = (step_a, step_b) + tuple(st for _, st_a, st_b, _ in outer for st in (st_a, st_b))  # every A and B offset
    per_sm = count / mm.sm_count(device_id)  # (a launch a run: its count products together)
    tiny = tiny_tile(m, n, k, per_sm, item)
    yielded = bool(tiny) and tiny_yields(m, n, k, products, device_id, item)
    if tiny and (yielded or (k > TINY_MAX_K and not tiny_reads(a0, b0))):
        tiny = None
    few = (not tiny and _fewrows.takes(m, n, k, products, item) and _fewrows.reads(a0, b0)
           and _fewrows.plan(m, n, k, count, mm.sm_count(device_id)))
    pipelined_first = not (tiny or few) and pipelined_takes(m, n, k, products, device_id, item)
    shortk = not (tiny or few) and past_small_limits(m, n, k) and _shortk.takes(item, k, m, n)  # (k < BATCH_SHORT_DEPTH)
    small = None if tiny or few or shortk or pipelined_first else small_tile(m, n, k, item)
    if small and past_small_limits(m, n, k) and mm._matmul_routes.x3_short_k_takes(c.dtype, m, n, k, device_id):
        small = None  # (a short k takes X3 before the short-k tiles)
    dots = not (tiny or few or shortk or small or yielded) and batch_dots_takes(m, k, n, products, device_id, c.dtype)
    shortk = shortk and _shortk.plan(m, n, k, item, count=count, sms=mm.sm_count(device_id))
    tile = None
    if not (tiny or few or shortk or small or dots):  # (FP64: the pipelined kernel reads chunks off 16 bytes in halves)
        x3 = mm.matmul_tc.x3_batch_copies(a0, b0, steps) if mm._matmul_routes.X3 and c.dtype == mm.F32 else None
        tile = mm.plan(device_id, c.dtype, m, n, k, products, vectors=mm.reads_vectors(a0, b0, steps), x3=x3)[0]
    pipelined = isinstance(tile, _dmma.DmmaTile)
    b_first = pipelined and _dmma.reads_b_first(a0, b0)
    c0 = c[(0,) * len(batch)]
    launches = []
    for idx in np.ndindex(*(size for size, *_ in outer)):
        off_a = sum(i * st for i, (_, st, _, _) in zip(idx, outer))
        off_b = sum(i * st for i, (_, _, st, _) in zip(idx, outer))
        off_c = sum(i * st for i, (_, _, _, st) in zip(idx, outer))
        a_i, b_i, c_ptr = _shifted(a0, off_a), _shifted(b0, off_b), c0.data.ptr + off_c * item
        if few:
            launches += _fewrows.launches(few, a_i, b_i, c_ptr, count, (step_a, step_b, step_c))
        elif tiny:
            launches += (tiny_launches(tiny, a_i, b_i, c_ptr, count, (step_a, step_b, step_c), tiny_groups(k, per_sm))
                         or small_launches(small_tile(m, n, k, item), a_i, b_i, c_ptr, count, (step_a, step_b, step_c)))
        elif shortk:
            launches += _shortk.launches(shortk, a_i, b_i, c_ptr, count, (step_a, step_b, step_c))
        elif small:
            launches += small_launches(small, a_i, b_i, c_ptr, count, (step_a, step_b, step_c))
        elif dots:
            launches += mm._matmul_routes.dots_launches(a_i, b_i, c_ptr, count, (step_a, step_b, step_c))
        elif pipelined:  # FP64 on the pipelined tensor-core kernel, in the orientation it picks for the layouts, the
            # tile turned with it: on C^T it pads as the plan padded C
            launches += _dmma.launches(a_i, b_i, c0, _dmma.oriented(tile, b_first), batch=(count, step_a, step_b),
                                       c_ptr=c_ptr)
        elif isinstance(tile, mm.matmul_tc.TcTile):  # float32 as three TF32 products
            launches += mm.matmul_tc.x3_batch_launches(tile, a_i, b_i, c_ptr, count, (step_a, step_b))
        else:
            launches += mm.tile_launches(tile, a_i, b_i, c0, batch=(count, step_a, step_b), c_ptr=c_ptr)
    return launches, copies, b_first


def _shifted(x, elements: int):
    """The view x, `elements` elements further on in its allocation."""
    if not elements:
        return x
    return cupy.ndarray(x.shape, x.dtype, x.data + elements * x.itemsize, x.strides)


def _run_tensor_core_batched(a, b, c, batch: tuple) -> None:
    """The batch on the tensor-core kernels: one call per evenly spaced run of products."""
    tc = mm.matmul_tc
    (a, a0), (b, b0) = _batch_operand(a, batch, 0), _batch_operand(b, batch, 1)
    item = a.itemsize
    strides = [tuple(st // item for st in x.strides[:len(batch)]) for x in (a, b, c)]
    outer, (count, step_a, step_b, step_c) = _nd.batch_runs(batch, *strides)
    c0 = c[(0,) * len(batch)]
    assert step_c == c0.size or count == 1, "the output is C-contiguous: its products lie one after the other"
    for idx in np.ndindex(*(size for size, *_ in outer)):
        offsets = [sum(i * steps[j] for i, (_, *steps) in zip(idx, outer)) for j in range(3)]
        tc.run_fast(_shifted(a0, offsets[0]), _shifted(b0, offsets[1]), _shifted(c0, offsets[2]),
                    batch=(count, step_a, step_b))
