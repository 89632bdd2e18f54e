"""Matrix product: cudakit.matmul(A, B) -> A @ B, C-contiguous, with cupy.matmul's N-D, broadcast and 1-D operands.

The seed kernels and the register-tiled steps are the lesson; the fast variant plans each product from its shape:
m = 1 or n = 1 on the matvec kernels, a side of C up to 32 with short k on the skinny kernel, a small C with long k on
the dots kernel, everything else on the tile and split of k that a time model of the tiles picks (_matmul_plan).
"""
from __future__ import annotations

import functools
import importlib
import math

import cupy
import numpy as np
from cupy._core import _routines_linalg as _cupy_linalg  # CuPy's compute type: its TF32 switch

from . import _args, _check, _matmul_batch, _matmul_plan, _matmul_routes, _nd, _tune
from ._compile import instantiation, kernel, launch, resident_blocks
from ._device import sm_count, workspace
from ._tune import Tile, simt, stream_k_tail
from ._variants import Variant, lookup, register

FAMILY = "matmul"
SEED_KERNELS = ("cu_matmul", "MatmulKernel", "cu_matmul_sm", "MatmulSharedStaticKernel", "MatmulSharedDynamicKernel",
                "MatmulSharedStaticConflictPadKernel", "MatmulSharedDynamicConflictPadKernel")
SEED_TPB = 32  # seed 001: tpb = warp size, blocks of tpb x tpb
SEED_BLOCKSIZE = 16  # seed 002: #define BLOCKSIZE 16 (MatmulKernel too: dimBlock(blockSize, blockSize))
SEED_DYNAMIC_BLOCKSIZE = 32  # seed 002's dynamic kernels take blockSize at launch; 32 shows a full warp's banks
MAX_GRID_Y = 65535  # the seed kernels' 2-D grids
# The fast variant copies an operand whose rows don't start on 16 bytes (an odd leading dimension, an offset view)
# into a padded one when m and n are at least this: the element loads it would otherwise need cost more than the
# copy, which moves (m + n) k elements against the product's 2 m n k flops.
PAD_MIN_DIM = 1024
matvec_module = importlib.import_module(__package__ + ".matvec")  # the module (the package's `matvec` is the function)
plan, _plan = _matmul_plan.plan, _matmul_plan._plan  # the tiles' planner, as matmul.plan

# The fixed tiles of the teaching steps, per dtype (the fast variant's come from _tune: tuned, or its defaults).
# FP64 accumulators take twice the registers: one block of 256 threads per SM (up to 255 registers a thread).
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
BLOCKTILE_2D = {F32: simt(128, 128, 8, 64, 32, 8, 8, min_blocks=2, stages=1, warp_tiled=False),
                F64: simt(128, 128, 8, 64, 32, 8, 8, stages=1, warp_tiled=False)}
WARP_TILED = {F32: simt(128, 128, 8, 64, 32, 8, 8, min_blocks=2, stages=1),
              F64: simt(128, 128, 8, 64, 32, 8, 8, stages=1)}
DOUBLE_BUFFERED = {F32: simt(128, 128, 8, 64, 32, 8, 8, min_blocks=2), F64: simt(128, 128, 8, 64, 32, 8, 8)}


@functools.lru_cache(maxsize=None)
def seed_instantiations(dtype) -> tuple[str, ...]:
    """The seed kernels, the split-k sum and the skinny kernels of one dtype (one module)."""
    dtype = np.dtype(dtype)
    return (tuple(instantiation(name, dtype) for name in SEED_KERNELS + ("splitk_sum",))
            + tuple(_matmul_routes.skinny_expression(dtype, width, rows)
                    for width in _matmul_routes.SKINNY_WIDTHS for rows in (True, False))
            + (instantiation("matmul_dots", dtype, *_matmul_routes.DOTS_PART),)
            + tuple(_matmul_batch.small_expression(dtype, tile) for tile in _matmul_batch.SMALL_TILES)
            + tuple(_matmul_batch.small_expression(dtype, tile)
                    for tile in _matmul_batch.SHORT_K_TILES_F32 if dtype.itemsize == 4)
            + tuple(_matmul_batch.tiny_expression(dtype, tile, vec, groups) for tile in _matmul_batch.TINY_TILES
                    for vec in (True, False) for groups in _matmul_batch.TINY_GROUPS))


@functools.lru_cache(maxsize=None)
def tile_instantiations(tile: Tile, dtype) -> tuple[str, ...]:
    """One module per (tile, dtype): the 4 layouts x 16-byte or element loads."""
    return tuple(tile.expression(dtype, a_kc, b_kc, vec)
                 for a_kc in (True, False) for b_kc in (True, False) for vec in (True, False))


def _seed_run(name: str, block: int, dynamic: bool = False, pad: bool = False):
    """Launcher of a seed kernel: C-order operands, a 2-D grid of block x block threads."""
    rows_on_x = name.startswith("cu_")  # seed 001 puts rows on the grid's x

    def run(A, B, out):
        m, k = A.shape
        n = B.shape[1]
        gx, gy = (-(-m // block), -(-n // block)) if rows_on_x else (-(-n // block), -(-m // block))
        if gy > MAX_GRID_Y:
            raise ValueError(f"cudakit.matmul: variant {name!r} has a 2-D grid of at most {MAX_GRID_Y} blocks in y; "
                             f"A {A.shape} @ B {B.shape} needs {gy} (use variant='fast')")
        A, B = cupy.ascontiguousarray(A), cupy.ascontiguousarray(B)  # seeds read C order only (a no-op if so)
        fn = kernel(FAMILY, instantiation(name, A.dtype), seed_instantiations(A.dtype))
        args = (A, B, out, np.int64(m), np.int64(n), np.int64(k))
        smem = 0
        if dynamic:
            args += (np.int32(block),)
            smem = 2 * block * (block + (1 if pad else 0)) * A.itemsize
        launch(fn, (gx, gy), (block, block), args, shared_mem=smem)

    return run


def _layout(x, row_axis: int):
    """(array, k_contig, ld) of an operand read in place: rows along `row_axis` (A: 0, B: 1), k along the other.

    k_contig means the k index is the contiguous one (C-order A, F-order B). Layouts the kernels cannot read
    (no unit stride, negative or unaligned strides) are copied to C order first.
    """
    item = x.itemsize
    rows, depth = x.shape[row_axis], x.shape[1 - row_axis]
    rs, ks = x.strides[row_axis], x.strides[1 - row_axis]
    for _ in range(2):
        if (ks == item or depth == 1) and (rows == 1 or (rs >= 0 and rs % item == 0)):
            return x, True, (rs // item if rows > 1 else depth)
        if (rs == item or rows == 1) and (depth == 1 or (ks >= 0 and ks % item == 0)):
            return x, False, (ks // item if depth > 1 else rows)
        x = cupy.ascontiguousarray(x)
        rs, ks = x.strides[row_axis], x.strides[1 - row_axis]
    raise AssertionError("a C-contiguous array always has a readable layout")


@functools.lru_cache(maxsize=None)
def resident_tiles(tile: Tile, dtype, device_id: int) -> int:
    """Blocks of `tile` the GPU holds at once: SMs x blocks per SM (the driver's occupancy calculator, run on the
    C-order instantiation; the layouts' instantiations differ in little but their loads)."""
    fn = kernel(FAMILY, tile.expression(dtype, True, False, True), tile_instantiations(tile, dtype))
    return sm_count(device_id) * resident_blocks(fn, tile.threads, tile.shared_bytes(dtype))


@functools.lru_cache(maxsize=None)
def _tile_kernel(tile: Tile, dtype, a_kc: bool, b_kc: bool, vec: bool, device_id: int):
    """The compiled kernel of one tile and layout on device_id (the current device, which kernel() compiles for)."""
    return kernel(FAMILY, tile.expression(dtype, a_kc, b_kc, vec), tile_instantiations(tile, dtype))


STREAM_K_BLOCKS_ARG = 10  # the place of the stream-K blocks' count among a tile launch's arguments


def tile_launches(tile: Tile, A, B, out, split: bool = False, batch=(1, 0, 0), k_last=None, c_ptr=None) -> list:
    """C = A @ B with one register-tiled kernel configuration (any layout, any shape with k > 0). split: a last,
    partial wave is avoided by a stream-K tail (double-buffered SIMT tiles without sliced k).

    batch = (count, A's stride, B's stride) in elements: `count` products, A and B being the first one's operands,
    the outputs one after the other from out (or from the device address c_ptr, with out giving the shape);
    the last product may be k_last deep. Returns the launches, as launch()'s arguments, that run_tile makes.
    """
    m, k = A.shape
    n = B.shape[1]
    a, a_kc, lda = _layout(A, 0)
    b, b_kc, ldb = _layout(B, 1)
    width = 16 // a.itemsize
    vec = reads_vectors(a, b, batch[1:])  # (a and b as laid out: no second copy)
    c_ptr = out.data.ptr if c_ptr is None else c_ptr
    vec_c = c_ptr % 16 == 0 and n % width == 0
    fn = _tile_kernel(tile, a.dtype, a_kc, b_kc, vec, out.data.device_id)
    tiles = -(-m // tile.bm) * -(-n // tile.bn)
    tail_start, sk_blocks, partials, counters = tiles, 0, 0, 0
    count, batch_a, batch_b = batch
    if split and count == 1 and uses_stream_k(tile):
        tail_start, sk_blocks = stream_k_tail(tiles, resident_tiles(tile, a.dtype, out.data.device_id), k, tile.bk)
        if sk_blocks:  # two parts of a tile's sums per boundary between stream-K blocks
            partials, counters = workspace(2 * sk_blocks * tile.bm * tile.bn * a.itemsize, counters=sk_blocks)
    item, launches = a.itemsize, []
    for b0 in range(0, count, MAX_GRID_Y):
        here = min(MAX_GRID_Y, count - b0)
        last_k = k if k_last is None or b0 + here < count else k_last
        launches.append((fn, (tail_start + sk_blocks, here), (tile.threads,),
                         (a.data.ptr + b0 * batch_a * item, b.data.ptr + b0 * batch_b * item, c_ptr + b0 * m * n * item,
                          m, n, k, lda, ldb, int(vec_c), tail_start, sk_blocks, partials, counters, batch_a, batch_b,
                          last_k), tile.shared_bytes(a.dtype)))
    assert launches[0][3][STREAM_K_BLOCKS_ARG] == sk_blocks
    return launches


def reads_vectors(A, B, steps=(0, 0)) -> bool:
    """Whether the tiles read A and B (as _layout gives them) with 16-byte loads: bases, leading dimensions and the
    batch's steps between products (elements) all whole vectors."""
    (a, _, lda), (b, _, ldb) = _layout(A, 0), _layout(B, 1)
    width = 16 // a.itemsize
    return (a.data.ptr % 16 == 0 and b.data.ptr % 16 == 0
            and all(v % width == 0 for v in (lda, ldb, *steps)))


def run_tile(tile: Tile, A, B, out, split: bool = False, batch=(1, 0, 0), k_last=None, c_ptr=None) -> None:
    """C = A @ B with one register-tiled kernel configuration (tile_launches says how)."""
    for args in tile_launches(tile, A, B, out, split, batch, k_last, c_ptr):
        launch(*args)


def uses_stream_k(tile: Tile) -> bool:
    """The tiles whose last partial wave a stream-K tail replaces (double-buffered SIMT tiles without sliced k)."""
    return tile.kind == "simt" and tile.ksplit == 1 and tile.stages == 2


def _fixed(tiles: dict):
    return lambda A, B, out: run_tile(tiles[out.dtype], A, B, out)


def aligned_operand(x, row_axis: int):
    """x if the kernels can read it with 16-byte loads, else a copy in the same layout whose leading dimension is
    rounded up to whole 16-byte vectors (the kernels never read the padding)."""
    a, k_contig, ld = _layout(x, row_axis)
    width = 16 // x.itemsize
    if a.data.ptr % 16 == 0 and ld % width == 0:
        return a
    contiguous = 1 - row_axis if k_contig else row_axis
    extent = a.shape[contiguous]
    buf = cupy.empty((a.shape[1 - contiguous], -(-extent // width) * width), a.dtype)
    rows = a if contiguous == 1 else a.T  # its rows are contiguous, `extent` elements each
    item = a.itemsize
    if rows.shape[0] > 1 and rows.strides[0] < extent * item:  # rows that overlap (a broadcast): an elementwise copy
        buf[:, :extent] = rows
    else:  # one pitched copy: a single driver call, far less host time than CuPy's elementwise assignment
        cupy.cuda.runtime.memcpy2DAsync(buf.data.ptr, buf.strides[0], rows.data.ptr, max(rows.strides[0], extent * item),
                                        extent * item, rows.shape[0], cupy.cuda.runtime.memcpyDeviceToDevice,
                                        cupy.cuda.get_current_stream().ptr)
    return buf[:, :extent] if contiguous == 1 else buf[:, :extent].T


def run_fast_tile(tile: Tile, A, B, out) -> None:
    """The fast variant with a given tile (what `tune` times): misaligned operands of a big product padded first."""
    if min(A.shape[0], B.shape[1]) >= PAD_MIN_DIM:
        A, B = aligned_operand(A, 0), aligned_operand(B, 1)
    run_tile(tile, A, B, out, split=True)


VARIANTS = register(FAMILY, [
    Variant(FAMILY, "cu_matmul", "one thread per element with x over rows (seed 001): every warp access is strided",
            _seed_run("cu_matmul", SEED_TPB), seed=True),
    Variant(FAMILY, "MatmulKernel", "one thread per element with x over columns (seed 002): coalesced B and C, A broadcast",
            _seed_run("MatmulKernel", SEED_BLOCKSIZE), seed=True),
    Variant(FAMILY, "cu_matmul_sm", "32x32 shared-memory tiles with x over rows (seed 001): strided loads, 32-way bank conflicts",
            _seed_run("cu_matmul_sm", SEED_TPB), seed=True),
    Variant(FAMILY, "MatmulSharedStaticKernel", "16x16 tiles in static shared memory (seed 002): each element loaded once per tile",
            _seed_run("MatmulSharedStaticKernel", SEED_BLOCKSIZE), seed=True),
    Variant(FAMILY, "MatmulSharedDynamicKernel", "the tiles in dynamic shared memory, tile size chosen at launch (seed 002; 32x32 here)",
            _seed_run("MatmulSharedDynamicKernel", SEED_DYNAMIC_BLOCKSIZE, dynamic=True), seed=True),
    Variant(FAMILY, "MatmulSharedStaticConflictPadKernel", "a transposed tile read down its columns, padded to 17 words a row (seed 002)",
            _seed_run("MatmulSharedStaticConflictPadKernel", SEED_BLOCKSIZE), seed=True),
    Variant(FAMILY, "MatmulSharedDynamicConflictPadKernel", "the padded transposed tile in dynamic shared memory (seed 002; 32x33 here)",
            _seed_run("MatmulSharedDynamicConflictPadKernel", SEED_DYNAMIC_BLOCKSIZE, dynamic=True, pad=True), seed=True),
    Variant(FAMILY, "blocktile_2d", "128x128 block tiles, an 8x8 register tile per thread: 64 FMAs per 16 shared reads",
            _fixed(BLOCKTILE_2D)),
    Variant(FAMILY, "warp_tiled", "+ warp tiles with 16-byte sub-blocks strided over the lanes: conflict-free fragment reads",
            _fixed(WARP_TILED)),
    Variant(FAMILY, "double_buffered", "+ two shared stages: the next slice's loads fly during the math, one barrier per slice",
            _fixed(DOUBLE_BUFFERED)),
])
# The tensor-core steps (their own kernel files and modules) register next, so that fast closes the lesson.
from . import matmul_tc  # noqa: E402  (wmma, mma_sync)
from . import _hopper  # noqa: E402,F401  (wgmma, wgmma_fast)
register(FAMILY, [
    Variant(FAMILY, "fast", "tile and split of k chosen by a time model (the tiles tuned for this GPU among them), no "
            "edge checks in interior tiles' k loop, a stream-K tail instead of a partial last wave, misaligned operands "
            "padded, a thread per line of C for a side of C up to 32 with short k (skinny), blocks "
            "summing runs of a long k for a small C (dots; in batches, C up to 16 x 16 past k = 64); batches of a C "
            "of few rows streaming B once (fewrows); "
            "FP64 on the tensor cores (sm_80+; a long k split for a small C); float16, bfloat16 and TF32 on the "
            "tensor-core kernels",
            _matmul_routes.run_fast, dtypes=("float32", "float64", "float16", "bfloat16")),
])


HALVES = ("float16", "bfloat16")  # taken by the tensor-core variants (and the fast one), summed in float32


def tf32_in_effect(tf32: bool | None, dtype) -> bool:
    """Whether a float32 product runs in TF32: asked for with tf32=True, or (tf32=None) where cupy.matmul would:
    CuPy's float32 compute type, which CUPY_TF32=1 sets (read at CuPy's first product) and
    cupy._core._routines_linalg.set_compute_type changes. tf32=False keeps true FP32 whatever CuPy's setting."""
    if tf32 is None:
        return dtype == F32 and _cupy_linalg.get_compute_type(F32) == _cupy_linalg.COMPUTE_TYPE_TF32
    if tf32 and dtype != F32:
        raise TypeError(f"cudakit.matmul: tf32=True applies to float32 operands, got {dtype}")
    return bool(tf32)


_compute_capability = functools.lru_cache(maxsize=None)(_tune.compute_capability)


def check_takes(row: Variant, dtype, tf32: bool) -> None:
    """TypeError where variant `row` does not take `dtype` (with or without TF32); no GPU needed."""
    if _args.dtype_name(dtype) not in row.dtypes or (tf32 and not row.tensor_core and row.name != "fast"):
        takes = ", ".join(row.dtypes) + (" (float32 as TF32)" if row.tensor_core else "")
        raise TypeError(f"cudakit.matmul: variant {row.name!r} takes {takes}; got {dtype}"
                        f"{' with TF32' if tf32 else ''}")
    if row.tensor_core and dtype == F32 and not tf32:
        raise TypeError(f"cudakit.matmul: variant {row.name!r} computes float32 in TF32: pass tf32=True")


def _runner(row: Variant, dtype, tf32: bool, device_id: int):
    """The 2-D launcher of `row` for this dtype, or a clear error before any launch."""
    check_takes(row, dtype, tf32)
    name = _args.dtype_name(dtype)
    if not (row.min_cc or row.tensor_core or tf32 or name in HALVES):  # FP32/FP64 SIMT: any GPU, no lookups
        return row.run
    cc = _compute_capability(device_id)
    if cc < row.min_cc or ((tf32 or name == "bfloat16") and cc < 80):
        need = max(row.min_cc, 80 if tf32 or name == "bfloat16" else 0)
        raise ValueError(f"cudakit.matmul: variant {row.name!r} with {dtype}{' (TF32)' if tf32 else ''} needs "
                         f"compute capability {need // 10}.{need % 10}; this GPU has {cc // 10}.{cc % 10}")
    if row.name == "fast" and (tf32 or name in HALVES):
        return _run_fast_tensor_core
    return row.run


def _run_fast_tensor_core(A, B, out):
    if A.shape[0] == 1 or B.shape[1] == 1:  # memory-bound: the matvec kernels (true FP32 for TF32 operands)
        _matmul_routes.run_fast(A, B, out)
        return
    matmul_tc.run_fast(A, B, out)


def matmul(A, B, *, out=None, variant: str = "fast", check: bool | None = None, tf32: bool | None = None):
    """A @ B for float32/float64/float16/bfloat16 CuPy arrays, as cupy.matmul takes them: (..., m, k) @ (..., k, n)
    with the batch axes broadcast, a 1-D A promoted to a row and a 1-D B to a column (the added axis left out of
    the result). The result is C-contiguous, in the operands' dtype.

    float32 is true FP32 unless TF32 is asked for (tf32=True, or CUPY_TF32=1 as cupy.matmul honours it); float16
    and bfloat16 (ml_dtypes) run on the tensor cores with float32 sums. C- and F-ordered matrices and transposed
    views are read in place, batches and broadcast batches too (a broadcast operand is read, never copied); other
    strides are copied to C order first. Runs on CuPy's current stream with no synchronisation.
    """
    if (type(A) is not cupy.ndarray or type(B) is not cupy.ndarray) and (face := _args.dask_face(A, B)) is not None:
        return face.matmul(A, B, out=out, variant=variant, check=check, tf32=tf32)
    A = _args.device_array("matmul", "A", A)
    B = _args.device_array("matmul", "B", B)
    batch, m, k, n, shape = _nd.matmul_shapes("matmul", A.shape, B.shape)
    dtype, device_id = _args.common("matmul", {"A": A, "B": B}, allowed=_args.FLOATS + _args.HALVES)
    tf32 = tf32_in_effect(tf32, dtype)
    row = lookup(FAMILY, variant)
    with _args.on_device(device_id):
        run = _runner(row, dtype, tf32, device_id)
        out = _args.output("matmul", out, shape, dtype, device_id, {"A": A, "B": B})
        if out.size == 0:
            return out
        if k == 0:
            out.fill(0)
            return out
        if A.ndim == 2 and B.ndim == 2:  # (the usual call: no views to make)
            run(A, B, out)
            return _checked(out, A, B, variant, dtype, k, tf32, check)
        a = A[None, :] if A.ndim == 1 else A
        b = B[:, None] if B.ndim == 1 else B
        c = out if out.shape == batch + (m, n) else out.reshape(batch + (m, n))
        if math.prod(batch) == 1:  # no batch, or a batch of one product: the 2-D paths
            run(a[(0,) * (a.ndim - 2)], b[(0,) * (b.ndim - 2)], c[(0,) * len(batch)])
        elif variant == "fast":
            _matmul_batch.run_fast_batched(a, b, c, batch, tensor_core=run is _run_fast_tensor_core)
        else:  # the lessons: one launch per product
            a, b = cupy.broadcast_to(a, batch + (m, k)), cupy.broadcast_to(b, batch + (k, n))
            for idx in np.ndindex(*batch):
                run(a[idx], b[idx], c[idx])
        return _checked(out, A, B, variant, dtype, k, tf32, check)


def _checked(out, A, B, variant: str, dtype, k: int, tf32: bool, check):
    if _check.enabled(check):
        _check.verify("matmul", variant, out, A, B, dtype, k, tf32=tf32)
    return out


def instantiation_groups():
    """Every module this family can build (seeds per dtype, each tile per dtype), for the GPU-less compile check."""
    groups = [seed_instantiations(np.dtype(np.float32)), seed_instantiations(np.dtype(np.float64))]
    for dtype, cands in _tune.CANDIDATES.items():
        for tile in [BLOCKTILE_2D[dtype], WARP_TILED[dtype], DOUBLE_BUFFERED[dtype], *cands, *_tune.extra_tiles(dtype)]:
            group = tile_instantiations(tile, dtype)
            if tile.supports(dtype, 90) and group not in groups:
                groups.append(group)
    return groups
