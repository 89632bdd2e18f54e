"""The fast matmul's route for a 2-D product: which kernel takes it, planned once per geometry and remembered.

FP64 with a long k and a C small enough that reading A and B bounds the product: the streaming DMMA kernel (_longk).
A small C (not one row or column) whose 8 x 8 parts read the operands at most twice over, with a long k: the dots
kernel (blocks summing runs of k). A k of at most 16 (not one row or column): the short-k writer (_shortk: B's k rows
in each lane's registers, whole lines of C per store), but for a C of at most 16 columns that the skinny kernel takes
(a side of C up to 32 with a short k: a thread per line of C). Otherwise one row or one column: the matvec kernels
(they read the matrix once, at memory speed). A short k past 16 (up to SHORT_K_F64; FP32 up to SHORT_K_F32, or
SHORT_K_F32_MID for a mid-size C, where both sides of C pass NARROW_SIDE and X3 does not take it from
matmul_tc.X3_MIN_K): the small-product kernel (whole rows of C per store). Everything else:
the tile and split of k that matmul's time model picks: the register tiles (narrow ones for a side of C up to 32), for
FP32 also three TF32 products (X3), and for FP64 the pipelined tensor-core DMMA kernel's tiles (k whole, or split for a
small C with a long k).
"""
from __future__ import annotations

import importlib
import os

import cupy
import numpy as np

from . import _args, _dmma, _longk, _shortk, _tune
from ._compile import instantiation, kept, kernel, launch, rebased, resident_blocks
from ._device import sm_count, sm_threads, workspace

mm = importlib.import_module(__package__ + ".matmul")  # (its tiles and planner; it imports this module first)
matvec_module = importlib.import_module(__package__ + ".matvec")


def skinny_expression(dtype, width: int, rows: bool) -> str:
    return instantiation("matmul_skinny", np.dtype(dtype), width, rows)


SKINNY_WIDTHS = (8, 16, 32)  # the short sides of C the skinny kernel is built for (each a multiple of 16 bytes)
SKINNY_THREADS = 128  # as in kernels/matmul_small.cuh
SKINNY_MIN_LINES = 4096  # C's long side: below this the tiles serve
SKINNY_MAX_K = 16  # deeper products ran faster on the narrow tiles (docs/NOTES.md, "matmul: narrow tiles")
SKINNY_MAX_SHARED = 48 * 1024


def skinny_plan(m: int, k: int, n: int, itemsize: int) -> tuple[int, int] | None:
    """(width, shared bytes) of the skinny kernel for an m x k x n product, or None where other paths serve: C has a
    side of at most 32 (one row or column included) and one of at least SKINNY_MIN_LINES, and k is at most
    SKINNY_MAX_K, so that writing C bounds the product."""
    short, long_side = min(m, n), max(m, n)
    if short > SKINNY_WIDTHS[-1] or long_side < SKINNY_MIN_LINES or k > SKINNY_MAX_K:
        return None
    width = next(w for w in SKINNY_WIDTHS if short <= w)
    shared = max(k * width, SKINNY_THREADS * (short + 1)) * itemsize
    return (width, shared) if shared <= SKINNY_MAX_SHARED else None


def _whole_element_strides(A, B) -> bool:
    """Whether the skinny, dots and short-k kernels read A and B in place (they take strides in whole elements)."""
    return not any(st % A.itemsize for st in A.strides + B.strides)


def _copying_first(run, *plan):
    """f(A, B, out): run(A, B, out, *plan) on C-order copies of A and B."""
    return lambda A, B, out: run(cupy.ascontiguousarray(A), cupy.ascontiguousarray(B), out, *plan)


def run_skinny(A, B, out, width: int, shared: int) -> None:
    """C = A @ B, one thread per line of C across its short side: n short, lines are C's rows (A's rows times B);
    m short, lines are C's columns (B's columns times A)."""
    skinny_launcher(A, B, out, width, shared)(A, B, out)


def skinny_launcher(A, B, out, width: int, shared: int):
    """f(A, B, out): run_skinny's launch for operands of these shapes and strides, built once."""
    if not _whole_element_strides(A, B):
        return _copying_first(run_skinny, width, shared)
    m, k = A.shape
    n = B.shape[1]
    item = A.itemsize
    (a_m, a_k), (b_k, b_n) = (st // item for st in A.strides), (st // item for st in B.strides)
    rows = n <= m
    fn = kernel(mm.FAMILY, skinny_expression(A.dtype, width, rows), mm.seed_instantiations(A.dtype))
    grid, block = (-(-(m if rows else n) // SKINNY_THREADS),), (SKINNY_THREADS,)
    if rows:  # the long operand first, then the short one
        rest = (m, n, k, a_m, a_k, b_k, b_n, n)
        return lambda A, B, out: launch(fn, grid, block, (A.data.ptr, B.data.ptr, out.data.ptr) + rest, shared)
    rest = (n, m, k, b_n, b_k, a_k, a_m, n)
    return lambda A, B, out: launch(fn, grid, block, (B.data.ptr, A.data.ptr, out.data.ptr) + rest, shared)


DOTS_PART = (8, 8)  # the part of C one block of the dots kernel sums (as in its instantiation)
DOTS_MAX_SIDE = 64  # C at most this on both sides ...
DOTS_MAX_READS = 2  # ... whose parts read A and B at most this many times over in all: beyond, the tiles re-read less
DOTS_MIN_DEPTH = 4096  # k from which the dots kernel serves
DOTS_MIN_RUN = 2048  # the least k one block sums
DOTS_THREADS = 256  # as in kernels/matmul_small.cuh


def dots_reads(m: int, n: int) -> float:
    """How many times over the dots kernel's 8 x 8 parts of an m x n C read A and B together: A once per column of
    parts, B once per row of them (any C of at most 16 x 16: 2 at most)."""
    return (m * -(-n // DOTS_PART[1]) + n * -(-m // DOTS_PART[0])) / (m + n)


def dots_plan(m: int, k: int, n: int, resident: int) -> tuple[int, int] | None:
    """(runs, run) of the dots kernel for a tiny C with a long k, or None where the tiles serve: k cut into `runs`
    runs of `run` (a whole number of the block's strides) so that about two waves of `resident` blocks share it."""
    if max(m, n) > DOTS_MAX_SIDE or dots_reads(m, n) > DOTS_MAX_READS or k < DOTS_MIN_DEPTH:
        return None
    parts = -(-m // DOTS_PART[0]) * -(-n // DOTS_PART[1])
    runs = max(1, min(-(-k // DOTS_MIN_RUN), 2 * resident // parts))
    run = -(-k // runs)
    run = -(-run // DOTS_THREADS) * DOTS_THREADS
    return -(-k // run), run


def run_dots(A, B, out, runs: int, run: int) -> None:
    """C = A @ B for a tiny C: each block sums a run of k for an 8 x 8 part of C into its partial C, which are added
    in a fixed order (or, for one run, C itself)."""
    dots_launcher(A, B, out, runs, run)(A, B, out)


def dots_launcher(A, B, out, runs: int, run: int):
    """f(A, B, out): run_dots's launches for operands of these shapes and strides, built once."""
    if not _whole_element_strides(A, B):
        return _copying_first(run_dots, runs, run)
    fn, grid, block, rest = _dots_launch_parts(A, B, runs, run)
    if runs == 1:
        return lambda A, B, out: launch(fn, grid, block, (A.data.ptr, B.data.ptr, out.data.ptr) + rest)
    partial_bytes, add = runs * out.size * A.itemsize, partials_adder(out, runs)

    def launch_split(A, B, out):
        partials = workspace(partial_bytes)[0]
        launch(fn, grid, block, (A.data.ptr, B.data.ptr, partials) + rest)
        add(out.data.ptr, partials)
    return launch_split


def dots_launches(a0, b0, c_ptr: int, count: int, steps: tuple[int, int, int]) -> list:
    """The launch of `count` products on the dots kernel, each block summing all of k for an 8 x 8 part of one C:
    a0 and b0 the first product's operands, `steps` the elements between consecutive products' A, B and C (C's: one
    C after the other)."""
    assert count == 1 or steps[2] == a0.shape[0] * b0.shape[1], "the dots kernel writes a batch's Cs one after another"
    fn, grid, block, rest = _dots_launch_parts(a0, b0, 1, a0.shape[1], count, steps[:2])
    return [(fn, grid, block, (a0.data.ptr, b0.data.ptr, c_ptr) + rest, 0)]


def _dots_launch_parts(a0, b0, runs: int, run: int, count: int = 1, steps: tuple[int, int] = (0, 0)):
    """(kernel, grid, block, the arguments after the three addresses) of the dots kernel: `count` products (a0 and
    b0 the first one's operands, `steps` elements between products' A and B), k cut into `runs` runs of `run`; block
    x is run * count + product."""
    m, k = a0.shape
    n = b0.shape[1]
    item = a0.itemsize
    fn = kernel(mm.FAMILY, instantiation("matmul_dots", a0.dtype, *DOTS_PART), mm.seed_instantiations(a0.dtype))
    grid = (runs * count, -(-m // DOTS_PART[0]), -(-n // DOTS_PART[1]))
    return fn, grid, (DOTS_THREADS,), (m, n, k, run, *(st // item for st in a0.strides + b0.strides), count, *steps)


def _dots_resident(dtype, device_id: int) -> int:
    fn = kernel(mm.FAMILY, instantiation("matmul_dots", dtype, *DOTS_PART), mm.seed_instantiations(dtype))
    return resident_blocks(fn, DOTS_THREADS) * sm_count(device_id)


def run_short_k(A, B, out) -> None:
    """C = A @ B for a short k on the small-product kernel (its warps store whole rows of C)."""
    short_k_launcher(A, B, out)(A, B, out)


def short_k_takes(dtype, m: int, n: int, k: int, device_id: int) -> bool:
    """Whether a 2-D product (past the skinny, dots and matvec routes) takes the small-product kernel: FP64 up to
    SHORT_K_F64 deep, FP32 up to SHORT_K_F32 (SHORT_K_F32_MID for a C of SHORT_K_F32_MID_C elements) where both sides
    of C pass NARROW_SIDE (as measured: a narrow C keeps its tiles) and X3 does not take it (x3_short_k_takes)."""
    batch = mm._matmul_batch
    if dtype == mm.F64:  # (within _dmma.SHORT_DEPTHS the planner weighs the DMMA tiles first)
        return k <= batch.SHORT_K_F64 and not _dmma.planned(m, n, k, device_id)
    if min(m, n) <= _tune.NARROW_SIDE or x3_short_k_takes(dtype, m, n, k, device_id):
        return False
    return k <= batch.SHORT_K_F32 or (k <= batch.SHORT_K_F32_MID and
                                      batch.SHORT_K_F32_MID_C[0] <= m * n <= batch.SHORT_K_F32_MID_C[1])


def x3_short_k_takes(dtype, m: int, n: int, k: int, device_id: int) -> bool:
    """Whether X3 takes m x k x n products of a short k ahead of the short-k kernel (matmul_tc.x3_short_k)."""
    tc = mm.matmul_tc
    return X3 and tc.x3_short_k(m, n, k) and bool(tc.x3_offered(dtype, m, n, k, 1, mm._compute_capability(device_id)))


def short_k_launcher(A, B, out):
    """f(A, B, out): run_short_k's launch for operands of these shapes and strides, built once."""
    if not _whole_element_strides(A, B):
        return _copying_first(run_short_k)
    batch = mm._matmul_batch
    tile = batch.short_k_tile(A.itemsize, *out.shape)
    (fn, grid, block, args, shared), = batch.small_launches(tile, A, B, out.data.ptr, 1, (0, 0, 0))
    rest = args[3:]
    return lambda A, B, out: launch(fn, grid, block, (A.data.ptr, B.data.ptr, out.data.ptr) + rest, shared)


SPLITK_SUM_THREADS = 256  # a splitk_sum block's threads (as in matmul.cu) ...
SPLITK_SUM_ROWS = 8  # ... in at most this many rows, each adding every rows-th partial product


def run_split_k(tile: _tune.Tile, A, B, out, splits: int, depth: int) -> None:
    """C = A @ B as `splits` partial products over consecutive runs of k (one batched launch into scratch), then
    their sum in a fixed order (deterministic)."""
    split_k_launcher(tile, A, B, out, splits, depth)(A, B, out)


def split_k_launcher(tile: _tune.Tile, A, B, out, splits: int, depth: int):
    """f(A, B, out): run_split_k's launches for operands of these shapes and strides, built once (operands the
    kernels cannot read in place are copied on every call)."""
    a, a_kc, lda = mm._layout(A, 0)
    b, b_kc, ldb = mm._layout(B, 1)
    if a is not A or b is not B:
        return lambda A, B, out: run_split_k(tile, mm._layout(A, 0)[0], mm._layout(B, 1)[0], out, splits, depth)
    m, k = A.shape
    n = B.shape[1]
    item = A.itemsize
    partial_bytes = splits * m * n * item
    partials = workspace(partial_bytes)[0]
    batch = (splits, depth * (1 if a_kc else lda), depth * (1 if b_kc else ldb))
    products = rebased(mm.tile_launches(tile, A[:, :depth], B[:depth, :], out, batch=batch,
                                        k_last=k - (splits - 1) * depth, c_ptr=partials), A.data.ptr, B.data.ptr, partials)
    add = partials_adder(out, splits)

    def run(A, B, out):
        partials = workspace(partial_bytes)[0]
        products(A.data.ptr, B.data.ptr, partials)
        add(out.data.ptr, partials)
    return run


def partials_adder(out, splits: int):
    """f(out's address, partials' address): the launch that adds `splits` partial results laid one after the other
    (out's size each) into out, in a fixed order (deterministic)."""
    fn = kernel(mm.FAMILY, instantiation("splitk_sum", out.dtype), mm.seed_instantiations(out.dtype))
    device_id, size, rows = out.data.device_id, out.size, 1
    resident = sm_count(device_id) * sm_threads(device_id)
    while 2 * rows <= min(splits, SPLITK_SUM_ROWS) and 2 * rows * size <= resident:  # rows for threads left idle
        rows *= 2
    width = SPLITK_SUM_THREADS // rows
    grid = (min(-(-size // width), resident // SPLITK_SUM_THREADS),)  # at most one resident round
    return lambda out_ptr, partials: launch(fn, grid, (width, rows), (out_ptr, partials, size, splits))


_routes: dict = {}  # the fast variant's routes by geometry (_compile.kept)
# FP32 products may run as three TF32 products on the tensor cores (matmul.plan's x3); CUDAKIT_FP32_X3=0 (read once,
# at import) keeps them on the FP32 register tiles. (A change at run time needs _routes and
# _matmul_batch._BATCH_LAUNCHES cleared.)
X3 = os.environ.get("CUDAKIT_FP32_X3", "") != "0"


def run_fast(A, B, out):
    """The fast variant: the route for this geometry (shapes, strides, dtype, device, 16-byte alignment of each
    pointer, the tuned tiles) is planned once and remembered, so that a repeated small product costs little more
    host time than its launch."""
    dtype, device_id = out.dtype, out.data.device_id
    key = (A.shape, A.strides, B.shape, B.strides, dtype, device_id, A.data.ptr & 15, B.data.ptr & 15,
           out.data.ptr & 15, _tune.tiles(device_id, dtype) if dtype in mm.BLOCKTILE_2D else None)
    kept(_routes, key, _route, A, B, out)(A, B, out)


def _route(A, B, out):
    """The fast variant's launcher for A, B and out of this geometry: f(A, B, out)."""
    m, k = A.shape
    n = B.shape[1]
    device_id = out.data.device_id
    if out.dtype not in (mm.F32, mm.F64):  # (16-bit operands come here for one row or column only)
        return _matvec_route(A, B, out)
    if out.dtype == mm.F64 and _longk.takes(m, n, k, device_id):
        return _longk.launcher(A, B, out, _longk.plan(m, n, k, device_id))
    if min(m, n) > 1 and max(m, n) <= DOTS_MAX_SIDE and k >= DOTS_MIN_DEPTH:  # (before the occupancy query)
        dots = dots_plan(m, k, n, _dots_resident(out.dtype, device_id))
        if dots:
            return dots_launcher(A, B, out, *dots)
    skinny = skinny_plan(m, k, n, out.itemsize)
    if (min(m, n) > 1 and _shortk.takes(out.itemsize, k, m, n) and not (skinny and n <= _shortk.SKINNY_KEEPS)
            and not (out.dtype == mm.F64 and _dmma.planned(m, n, k, device_id))):
        return _shortk.launcher(A, B, out, _shortk.plan(m, n, k, out.itemsize, sms=sm_count(device_id)))
    if skinny:
        return skinny_launcher(A, B, out, *skinny)
    if n == 1 or m == 1:  # a matrix-vector product: the matvec kernels read the matrix once, at memory speed
        return _matvec_route(A, B, out)
    if short_k_takes(out.dtype, m, n, k, device_id):
        return short_k_launcher(A, B, out)
    in_place = mm._layout(A, 0)[0] is A and mm._layout(B, 1)[0] is B
    in_place_vectors = in_place and mm.reads_vectors(A, B)
    vectors = in_place_vectors or min(m, n) >= mm.PAD_MIN_DIM  # (run_fast_tile pads the big products)
    x3 = mm.matmul_tc.x3_copies(A, B) if X3 and out.dtype == mm.F32 else None
    tile, splits, depth = mm.plan(device_id, out.dtype, m, n, k, vectors=vectors, x3=x3)
    if isinstance(tile, mm.matmul_tc.TcTile):
        return mm.matmul_tc.x3_launcher(A, B, out, tile, splits, depth)
    if isinstance(tile, _dmma.DmmaTile) and splits > 1:  # a long k, or a grid short of the SMs (mid_splits)
        mid = _dmma.planned(m, n, k, device_id) and _dmma.mid_splits(m, n, k, device_id) > 1
        run = _dmma.split_launcher(A, B, out, tile, splits, depth)
        if run is not None:
            return run
        if mid:  # an operand without a unit stride: copied on each call, k whole
            return _dmma.launcher(A, B, out, tile)
        tile, splits, depth = mm.plan(device_id, out.dtype, m, n, k, pipelined=False)
    if isinstance(tile, _dmma.DmmaTile):  # every layout: a C-order A with an F-order B (fragments re-paired by
        return _dmma.launcher(A, B, out, tile)  # register moves) still outran the register tiles (docs/NOTES.md)
    if splits > 1:
        return split_k_launcher(tile, A, B, out, splits, depth)
    if in_place:  # run_fast_tile's one launch kept, its addresses (and the copies it pads) given per call
        pads = min(m, n) >= mm.PAD_MIN_DIM and not in_place_vectors
        a, b = (mm.aligned_operand(A, 0), mm.aligned_operand(B, 1)) if pads else (A, B)
        launches = mm.tile_launches(tile, a, b, out, split=True)
        fn, grid, block, args, shared = launches[0]
        # (a stream-K tail's workspace addresses follow the stream: such launches are made anew)
        stream_k_blocks = args[mm.STREAM_K_BLOCKS_ARG]
        if len(launches) == 1 and args[:3] == (a.data.ptr, b.data.ptr, out.data.ptr) and not stream_k_blocks:
            rest = args[3:]
            if not pads:
                return lambda A, B, out: launch(fn, grid, block, (A.data.ptr, B.data.ptr, out.data.ptr) + rest, shared)
            return _padding_first(fn, grid, block, rest, shared, a is not A, b is not B)
    return lambda A, B, out: mm.run_fast_tile(tile, A, B, out)


def _padding_first(fn, grid, block, rest: tuple, shared: int, pad_a: bool, pad_b: bool):
    """f(A, B, out): a kept tile launch on each call's padded copies of A (pad_a) and B (pad_b), which are laid out
    alike on every call (matmul.aligned_operand: new allocations, 16-byte aligned); the copies outlive the launch
    that reads them."""
    def run(A, B, out):
        a = mm.aligned_operand(A, 0) if pad_a else A
        b = mm.aligned_operand(B, 1) if pad_b else B
        launch(fn, grid, block, (a.data.ptr, b.data.ptr, out.data.ptr) + rest, shared)
    return run


def _matvec_route(A, B, out):
    """n = 1: A times B's column; m = 1: B.T times A's row. Where both are read in place, the matvec launch is kept
    but for the three addresses."""
    n = B.shape[1]
    matrix, vector = (A, B[:, 0]) if n == 1 else (B.T, A[0, :])
    if _args.contiguous_or_copy(matrix) is not matrix or _args.contiguous_or_copy(vector) is not vector:
        return _matvec_product
    run = matvec_module.launcher(matrix, matvec_module.plan(matrix, vector))
    if n == 1:
        return lambda A, B, out: run(A.data.ptr, B.data.ptr, out.data.ptr)
    return lambda A, B, out: run(B.data.ptr, A.data.ptr, out.data.ptr)


def _matvec_product(A, B, out):
    n = B.shape[1]
    vector = _args.contiguous_or_copy(B[:, 0] if n == 1 else A[0, :])
    matrix = _args.contiguous_or_copy(A if n == 1 else B.T)
    matvec_module.run_fast(matrix, vector, out.reshape(-1))

