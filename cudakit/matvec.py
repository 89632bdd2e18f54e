"""Matrix-vector product: cudakit.matvec(A, x) -> A @ x, reading C- and F-order A (and A.T views) in place."""
from __future__ import annotations

import functools
import importlib
import math
from dataclasses import dataclass

import cupy
import numpy as np

from . import _args, _check, _nd
from ._compile import ctype, instantiation, kept, kernel, launch, resident_blocks
from ._device import shared_per_block, sm_count, workspace
from ._variants import Variant, lookup, register

FAMILY = "matvec"
SEED_THREADS = 1024  # seed 000's block (and x tile) size
WARP_ROW_THREADS = 256  # 8 rows per block in warp_per_row
FAST_THREADS = 256  # FAST_THREADS in kernels/matvec.cu
MAX_GRID_Z = 65535  # products per launch of a batch on the grid's z
ROW_UNROLL = 4  # 16-byte loads in flight per lane (each with its x load), row-major kernel
# Rows of at least this many bytes take a whole block each, the grid one resident wave striding over rows. With a
# warp per row, the time followed how the row tiles fell into waves, which moved with the kernel's registers; a block
# per row is free of that, and measured faster or even on long rows. Shorter rows stay a warp each: a block per row
# was slower there (docs/NOTES.md, "matvec.py: a block per long row"). So do long rows too few to fill half the
# resident blocks, which split into chunks: a block's 8 rows then read each x chunk once from L1, where a block per
# row read it from L2 once per row (docs/NOTES.md, "matvec.py: few long rows").
BLOCK_ROW_BYTES = 64 * 1024
# Columns in flight per thread, column-major kernel: 8 was no faster, and slower on tall float64 matrices
# (docs/NOTES.md, "matvec.py: four columns in flight").
COL_UNROLL = 4
# Column-major plans split the columns into chunks for at most this many blocks per SM (the float kernels fit 5):
# the wide F-order shapes measured faster that way and the rest about even, for a reason not yet pinned down
# (docs/NOTES.md, "matvec.py: column-major splits for at most 4 blocks per SM").
COL_SPLIT_BLOCKS_PER_SM = 4
# A column-major A whose columns are not whole 16-byte vectors (m not a multiple of them), loaded an element per lane:
# at most 128 lanes down the column, and where its row tiles are at least one an SM, splits for up to 8 blocks per SM
# (fewer tiles keep 4: their chunks are many already, and each tile's last block adds them one by one)
# (docs/NOTES.md, "matvec.py: column-major element loads").
ELEMENT_COL_LANES = 128
ELEMENT_COL_SPLIT_BLOCKS_PER_SM = 8
# Column-major matrices of at most this many rows, not whole 16-byte vectors, take matvec_thin_colmajor (their run
# read as one, in vectors): the column-major kernel would load them an element per lane. Columns of whole vectors
# take it up to THIN_MAX_VECTOR_ROWS. Past these the thin kernel's sums over the blocks cost more than its reads save
# (docs/NOTES.md, "matvec.py: the thin kernel's rows"); neither may pass FAST_THREADS (the sums of a block).
THIN_MAX_ROWS = 40
THIN_MAX_VECTOR_ROWS = 16
THIN_MIN_VECTORS = 16  # 16-byte vectors each thread of matvec_thin_colmajor reads at least (4 rounds of its unroll)
PERSISTENT = True  # one resident wave of blocks, each striding over output tiles (no block-launch gaps)
# ... with as few blocks as give the same rounds of tiles, so that every block strides over as many tiles and none
# runs a last round alone; no shape measured slower (docs/NOTES.md, "matvec.py: balanced persistent grids").
BALANCED = True
MIN_STEPS = 2  # a chunk gives each lane at least this many unrolled steps
GROUPS = (1, 2, 4, 8, 16, 32)  # lanes per row, row-major kernel
# Row-major rows shorter than these bytes take (lanes per row, unroll) from _short_rows: the general rule (each lane
# at least ROW_UNROLL loads) left one or two lanes on such a row, its last loads issued one after another
# (docs/NOTES.md, "matvec.py: short rows"). They read A cached, not evict-first (the kernel's CACHED).
SHORT_VECTOR_ROW_BYTES = 256
SHORT_ELEMENT_ROW_BYTES = 48
# Row-major rows of elements (not whole 16-byte vectors) from SHORT_ELEMENT_ROW_BYTES to under STAGED_ROW_BYTES take
# matvec_rows_staged: a block's rows copied to shared memory as one run of 16-byte loads, where lanes along each row
# load single elements from lines that other lanes' loads share (docs/NOTES.md, "matvec: staged rows"). 16-bit rows
# take it up to STAGED_HALF_ROW_BYTES where a block's rows fit the device's shared memory a block; longer float32 and
# float64 rows were faster on the lanes.
STAGED_ROW_BYTES, STAGED_HALF_ROW_BYTES = 256, 384
ROW_LANES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # lanes down the column, column-major kernel
ALL_DTYPES = ("float32", "float64") + _args.HALVES  # the non-seed variants'; 16-bit: float sums, rounded once


@functools.lru_cache(maxsize=None)
def instantiations(dtype) -> tuple[str, ...]:
    """Every kernel the variants build for `dtype` (a NumPy dtype or its name), one module: the 16-bit types leave
    out the kernels of the variants that do not take them (the seeds)."""
    name, ct = _args.dtype_name(dtype), ctype(dtype)
    seeds = [k for k in ("mat_vec_mul", "mat_vec_mul_tiles", "warp_per_row") if name in VARIANTS[k].dtypes]
    names = [instantiation(k, ct, f) for k in seeds for f in (False, True)]
    names += [instantiation("matvec_rowmajor", ct, v, g, ROW_UNROLL, False) for v in (True, False)
              for g in GROUPS + (FAST_THREADS,)]
    itemsize = 8 if name == "float64" else 4 if name == "float32" else 2
    names += [instantiation("matvec_rowmajor", ct, *plan, True) for plan in _short_row_plans(itemsize)]
    names += [instantiation("matvec_colmajor", ct, v, r, COL_UNROLL) for v in (True, False) for r in ROW_LANES]
    names.append(instantiation("matvec_thin_colmajor", ct))
    names.append(instantiation("matvec_rows_staged", ct))
    return tuple(dict.fromkeys(names))


def _kernel(name: str, dtype):
    names = instantiations(dtype)
    # A name outside the standard set (another unroll, tried by tools/matvec_probe.py) gets a module of its own.
    return kernel(FAMILY, name, names if name in names else (name,))


def _col_major(A) -> bool:
    """The kernels' layout for A (C- or F-contiguous here): a 1-row or 1-column A is both, and taken as C."""
    return not _args.is_c_contiguous(A)


def _seed_launcher(name: str, shared: bool):
    def run(A, x, out):
        m, n = A.shape
        fn = _kernel(instantiation(name, A.dtype, _col_major(A)), A.dtype)
        launch(fn, (-(-m // SEED_THREADS),), (SEED_THREADS,), (out, A, x, np.int64(m), np.int64(n)),
               shared_mem=SEED_THREADS * A.itemsize if shared else 0)
    return run


def _run_warp_per_row(A, x, out):
    m, n = A.shape
    fn = _kernel(instantiation("warp_per_row", A.dtype, _col_major(A)), A.dtype)
    launch(fn, (-(-m // (WARP_ROW_THREADS // 32)),), (WARP_ROW_THREADS,), (out, A, x, np.int64(m), np.int64(n)))


def _short_rows(n: int, itemsize: int, vector: bool) -> tuple[int, int] | None:
    """(lanes per row, unroll) for a row-major row of n elements, if it is short: by the loads it takes, 16-byte
    vectors or elements, as measured best over rows of 2 to 16 vectors and of 3 to 30 elements."""
    row_bytes = n * itemsize
    if vector and row_bytes < SHORT_VECTOR_ROW_BYTES:
        loads = row_bytes // 16
        if loads <= 4:
            return (1 if loads <= 2 else 2), 2
        return 4, (1 if loads <= 6 else 2)
    if not vector and row_bytes < SHORT_ELEMENT_ROW_BYTES:
        lanes = 1 << max(0, round(math.log2(row_bytes / 12)))  # about 12 bytes a lane
        return lanes, (2 if n > 3.5 * lanes else 1)
    return None


def _short_row_plans(itemsize: int) -> list[tuple[bool, int, int]]:
    """Every (vector, lanes, unroll) that _short_rows gives rows of this element size."""
    return sorted({(vector, *plan) for vector in (True, False) for n in range(1, SHORT_VECTOR_ROW_BYTES // itemsize)
                   if (plan := _short_rows(n, itemsize, vector))})


def _pow2_floor(v: int) -> int:
    return 1 << (max(int(v), 1).bit_length() - 1)


def _pow2_ceil(v: int) -> int:
    return 1 << (max(int(v), 1) - 1).bit_length()


@functools.lru_cache(maxsize=None)
def _resident_blocks(name: str, dtype, device_id: int) -> int:
    """How many FAST_THREADS-thread blocks of kernel `name` fit on the device at once."""
    return max(1, resident_blocks(_kernel(name, dtype), FAST_THREADS)) * sm_count(device_id)


@dataclass(frozen=True)
class Plan:
    """How the fast kernels cover an m x n product: which kernel, tiles, blocks and chunks."""
    kernel: str
    vector: bool
    tiles: int  # output tiles: 256 / (lanes per row) rows (row-major), (lanes down a column) * W rows (column-major)
    grid: int  # blocks along the output (grid x), each striding over the tiles
    chunks: int  # blocks along the reduced dimension (grid y); > 1: partial sums, added by each tile's last
    chunk: int  # vectors (row-major) or columns (column-major) per chunk


def plan(A, x, *, split: bool = True, **tuning) -> Plan:
    """The fast variant's launch plan for A @ x (A C- or F-contiguous, x contiguous), cached per shape and layout.

    tuning (for tools/matvec_probe.py): row_unroll, row_group, block_rows, cached, col_unroll, col_lanes,
    persistent, balanced, blocks_per_sm; staged=False (implied by row_group or row_unroll) keeps short element rows
    off matvec_rows_staged.
    """
    col_major = _col_major(A)
    aligned = A.data.ptr % 16 == 0 and (col_major or x.data.ptr % 16 == 0)
    return _plan(A.shape, A.dtype, col_major, aligned, A.data.device_id, split,
                 tuple(sorted(tuning.items())) if tuning else ())


@functools.lru_cache(maxsize=4096)
def _plan(shape, dtype, col_major: bool, aligned: bool, device_id: int, split: bool, tuning: tuple,
          count: int = 1) -> Plan:
    """count: products of this shape launched together (a batch on the grid's z), which fill the GPU together."""
    knobs = dict(tuning)
    m, n = shape
    width = 16 // dtype.itemsize
    staged = knobs.get("staged", not {"row_group", "row_unroll"} & knobs.keys())
    if not col_major and staged and takes_staged(n, dtype.itemsize, aligned, device_id):
        return _staged_plan(m, n, dtype, device_id)
    if not col_major:
        vector = aligned and n % width == 0
        nv = n // width if vector else n
        unroll = knobs.get("row_unroll", ROW_UNROLL)
        group = min(32, _pow2_floor(nv // unroll))  # lanes per row: each gets >= unroll loads when it can
        short = _short_rows(n, dtype.itemsize, bool(vector))
        if short and "row_group" not in knobs and "row_unroll" not in knobs:
            group, unroll = short
        group = knobs.get("row_group", group)
        if n * dtype.itemsize >= BLOCK_ROW_BYTES:
            block = instantiation("matvec_rowmajor", dtype, bool(vector), FAST_THREADS, unroll, False)
            if knobs.get("block_rows", not split or 2 * m > _resident_blocks(block, dtype, device_id)):
                group = FAST_THREADS
        tiles = -(-m // (FAST_THREADS // group))
        step = group * unroll
        cached = knobs.get("cached", short is not None)
        name = instantiation("matvec_rowmajor", dtype, bool(vector), group, unroll, cached)
        reduced = nv
        long_rows = group == 32
    elif aligned and takes_thin(m, width) and split and count == 1 and not knobs:
        return _thin_plan(m, n, dtype, device_id)
    else:
        vector = aligned and m % width == 0
        mv = m // width if vector else m
        unroll = knobs.get("col_unroll", COL_UNROLL)
        lanes = min(256 if vector else ELEMENT_COL_LANES, _pow2_ceil(mv))
        name = instantiation("matvec_colmajor", dtype, bool(vector), lanes, unroll)
        target = _resident_blocks(name, dtype, device_id)
        while lanes > 32 and -(-mv // lanes) * count < target:  # narrower row tiles before splitting the columns
            lanes //= 2
        lanes = knobs.get("col_lanes", lanes)
        tiles = -(-mv // lanes)
        step = (FAST_THREADS // lanes) * unroll
        name = instantiation("matvec_colmajor", dtype, bool(vector), lanes, unroll)
        reduced = n
        long_rows = False
    target = _resident_blocks(name, dtype, device_id)
    per_sm = ELEMENT_COL_SPLIT_BLOCKS_PER_SM if col_major and not vector and tiles >= sm_count(device_id) else \
        COL_SPLIT_BLOCKS_PER_SM
    split_target = min(target, per_sm * sm_count(device_id)) if col_major else target
    if "blocks_per_sm" in knobs:
        target = split_target = knobs["blocks_per_sm"] * sm_count(device_id)
    chunks = 1
    if split:
        chunks = max(1, min(split_target // tiles, reduced // (step * MIN_STEPS), 65535))
    chunk = -(-reduced // chunks)
    chunk = -(-chunk // step) * step  # whole unrolled steps in every chunk but the last
    chunks = -(-reduced // chunk)
    # A warp per long row (rows of 2 to 64 KB), unsplit, is the exception: a block per row tile. The balanced
    # persistent grid won on some of these shapes and lost on others, a trade by row length with no rule found, so
    # they keep the plain grid (docs/NOTES.md, "matvec.py: the warp-per-row exception").
    persistent = PERSISTENT and not (long_rows and chunks == 1)
    grid = min(tiles, max(1, target // chunks)) if knobs.get("persistent", persistent) else tiles
    if knobs.get("balanced", BALANCED):
        grid = _balanced(tiles, grid)
    return Plan(name, vector, tiles, grid, chunks, chunk)


def takes_staged(n: int, itemsize: int, aligned: bool, device_id: int) -> bool:
    """Whether row-major rows of n elements take matvec_rows_staged on device_id (see STAGED_ROW_BYTES)."""
    vector = aligned and (n * itemsize) % 16 == 0
    return not vector and SHORT_ELEMENT_ROW_BYTES <= n * itemsize < staged_max_row_bytes(itemsize, device_id)


def staged_max_row_bytes(itemsize: int, device_id: int) -> int:
    """Rows of this many bytes and more are not staged."""
    longest = (STAGED_HALF_ROW_BYTES - 1) // itemsize
    if itemsize == 2 and staged_shared_bytes(longest, itemsize) <= shared_per_block(device_id):
        return STAGED_HALF_ROW_BYTES
    return STAGED_ROW_BYTES


def staged_shared_bytes(n: int, itemsize: int) -> int:
    return (FAST_THREADS * n + 16 // itemsize) * itemsize


def _staged_plan(m: int, n: int, dtype, device_id: int) -> Plan:
    """matvec_rows_staged's plan: a tile of FAST_THREADS rows a block, one resident wave striding over the tiles,
    balanced (as few blocks as give the same rounds)."""
    name = instantiation("matvec_rows_staged", dtype)
    fn = _kernel(name, dtype)
    resident = max(1, resident_blocks(fn, FAST_THREADS, staged_shared_bytes(n, dtype.itemsize))) * sm_count(device_id)
    tiles = -(-m // FAST_THREADS)
    grid = min(tiles, resident)
    return Plan(name, False, tiles, _balanced(tiles, grid), 1, n)


def _balanced(tiles: int, grid: int) -> int:
    """The fewest blocks that stride over `tiles` in as many rounds as `grid` blocks do (see BALANCED)."""
    return -(-tiles // -(-tiles // grid))


def takes_thin(m: int, width: int) -> bool:
    """Whether an aligned column-major matrix of m rows (width elements a 16-byte vector) takes the thin kernel."""
    return 1 < m <= min(FAST_THREADS, THIN_MAX_ROWS if m % width else THIN_MAX_VECTOR_ROWS)


def _thin_plan(m: int, n: int, dtype, device_id: int) -> Plan:
    """matvec_thin_colmajor's plan: one resident wave of blocks, fewer where the run gives a thread less than
    THIN_MIN_VECTORS, and as many as make the grid's stride over the run (FAST_THREADS * W elements a block) a
    multiple of m: rounded down, since a block past the resident wave would run alone after it."""
    width = 16 // dtype.itemsize
    name = instantiation("matvec_thin_colmajor", dtype)
    unit = m // math.gcd(m, width * FAST_THREADS)  # blocks: a multiple of this
    wanted = min(_resident_blocks(name, dtype, device_id), -(-m * n // (width * FAST_THREADS * THIN_MIN_VECTORS)))
    return Plan(name, True, 1, max(unit, wanted // unit * unit), 1, 0)


def _run_plan(A, x, out, p: Plan, x_rows: int = 1, x_step: int = 0):
    """x_rows, x_step (row-major A only): row r of A takes the x that starts (r // x_rows) * x_step elements on."""
    launcher(A, p, x_rows, x_step)(A.data.ptr, x.data.ptr, out.data.ptr)


def launcher(A, p: Plan, x_rows: int = 1, x_step: int = 0):
    """f(A's address, x's address, out's address): plan p's launch for a matrix of A's shape, layout and dtype
    (what matmul's one-row and one-column routes keep)."""
    m, n = A.shape
    fn = _kernel(p.kernel, A.dtype)
    if p.kernel.startswith("matvec_thin_colmajor"):
        sums_bytes = p.grid * m * max(4, A.itemsize)

        def run_thin(a_ptr: int, x_ptr: int, out_ptr: int) -> None:
            sums, counter = workspace(sums_bytes, counters=1)
            launch(fn, (p.grid,), (FAST_THREADS,), (a_ptr, x_ptr, m, n, sums, out_ptr, counter))
        return run_thin
    if p.kernel.startswith("matvec_rows_staged"):
        shared = staged_shared_bytes(n, A.itemsize)

        def run_staged(a_ptr: int, x_ptr: int, out_ptr: int) -> None:
            launch(fn, (p.grid,), (FAST_THREADS,), (a_ptr, x_ptr, m, n, out_ptr, x_rows, x_step), shared)
        return run_staged
    grid, chunk, tiles = (p.grid, p.chunks), p.chunk, p.tiles
    tail = (0, 0) if _col_major(A) else (x_rows, x_step)
    sums_bytes = p.chunks * m * max(4, A.itemsize)  # partial sums in the accumulator type (float for 16-bit types)

    def run(a_ptr: int, x_ptr: int, out_ptr: int) -> None:  # (Python ints: launch()'s quickest path)
        sums, counters = workspace(sums_bytes, counters=tiles) if grid[1] > 1 else (out_ptr, 0)
        launch(fn, grid, (FAST_THREADS,), (a_ptr, x_ptr, m, n, chunk, sums, out_ptr, counters) + tail)
    return run


def run_batched(A, x, out, batch: tuple) -> bool:
    """out = A @ x for a batch of C-contiguous matrices A (batch + (m, n)) and vectors x (broadcast to batch + (n,))
    in one launch of the fast kernels, the matrices stacked into one tall A, each row reading its matrix's x.
    False, having launched nothing, where A is not such a stack."""
    run = batched_launcher(A, x, batch)
    if run is None:
        return False
    run(A, x, out)
    return True


def batched_launcher(A, x, batch: tuple):
    """f(A, x, out): run_batched's launch for operands of these shapes, strides and alignments, built once; None
    where A is not a stack of C-contiguous matrices."""
    m, n = A.shape[-2:]
    if A.shape[:-2] != batch or not _args.is_c_contiguous(A) or m * n == 0:
        return None
    item = x.itemsize
    xb = cupy.broadcast_to(x, batch + (n,))
    outer, (_, x_step) = _nd.batch_runs(batch, tuple(st // item for st in xb.strides[:-1]))
    width = 16 // item
    copied = outer or xb.strides[-1] != item or any(st % item for st in xb.strides) or (n % width == 0 and x_step % width)
    if copied:  # one step between the vectors, whole 16-byte vectors apart
        xb, x_step = _args.c_contiguous(xb), n
    first = xb[(0,) * len(batch)]
    tall = A.reshape(-1, n)
    run = launcher(tall, plan(tall, first), m, x_step)
    if copied:
        def run_copied(A, x, out):
            xs = _args.c_contiguous(cupy.broadcast_to(x, batch + (n,)))  # (held until the launch is queued)
            run(A.data.ptr, xs.data.ptr, out.data.ptr)
        return run_copied
    return lambda A, x, out: run(A.data.ptr, x.data.ptr, out.data.ptr)


def column_batch_launcher(A0, x0, count: int, a_step: int, x_step: int):
    """f(A's address, x's address, out's address): `count` products A_i @ x_i in one launch of the column-major
    kernel (unsplit), A_i of A0's shape, F-contiguous, `a_step` elements apart, x_i contiguous, `x_step` elements
    apart, the outputs one after the other (what a batch of one-row matrix products, B_i.T @ a_i, comes to)."""
    m, n = A0.shape
    width = 16 // A0.itemsize
    aligned = A0.data.ptr % 16 == 0 and a_step % width == 0
    p = _plan(A0.shape, A0.dtype, True, aligned, A0.data.device_id, False, (), count)
    fn = _kernel(p.kernel, A0.dtype)
    item, rest = A0.itemsize, (m, n, p.chunk)

    def run(a_ptr: int, x_ptr: int, out_ptr: int) -> None:
        for z0 in range(0, count, MAX_GRID_Z):
            launch(fn, (p.grid, 1, min(MAX_GRID_Z, count - z0)), (FAST_THREADS,),
                   (a_ptr + z0 * a_step * item, x_ptr + z0 * x_step * item) + rest
                   + (out_ptr + z0 * m * item, out_ptr + z0 * m * item, 0, a_step, x_step))
    return run


_launchers: dict = {}  # the fast variant's launchers by geometry (_compile.kept)


def run_fast(A, x, out):
    """The fast variant: A C- or F-contiguous, x contiguous, out a contiguous (m,) array (what matmul's m = 1 and
    n = 1 products call). Its launcher is built once per geometry (shape, strides, dtype, device, each operand's
    16-byte alignment: all that plan() reads) and kept, so that a repeated small product costs little more host
    time than its launch."""
    key = (A.shape, A.strides, A.dtype, A.data.device_id, A.data.ptr & 15, x.data.ptr & 15)
    kept(_launchers, key, _planned_launcher, A, x)(A.data.ptr, x.data.ptr, out.data.ptr)


def _planned_launcher(A, x):
    return launcher(A, plan(A, x))


def _run_unsplit(A, x, out):
    _run_plan(A, x, out, plan(A, x, split=False))


VARIANTS = register(FAMILY, [
    Variant(FAMILY, "mat_vec_mul",
            "one thread per row (seed 000): its lanes walk 32 separate rows of a C-order A, "
            "but read 32 neighbours of an F-order one (coalesced: 2.7-4.8x faster at 4096^2)",
            _seed_launcher("mat_vec_mul", shared=False), seed=True),
    Variant(FAMILY, "mat_vec_mul_tiles",
            "x staged in shared memory one 1024-element tile per phase (seed 000): x reloads were not the "
            "cost; no faster on C order, and its barriers make it 1.8-3.3x slower on F order",
            _seed_launcher("mat_vec_mul_tiles", shared=True), seed=True),
    Variant(FAMILY, "warp_per_row",
            "a warp per row, shuffle reduction: coalesced on a C-order A (56-99x mat_vec_mul at 4096^2), "
            "strided on an F-order one",
            _run_warp_per_row, dtypes=ALL_DTYPES),
    Variant(FAMILY, "fast_unsplit",
            "lanes along the contiguous dimension, 16-byte loads, several in flight; but a few-row (C) "
            "or few-column (F) A leaves all but a few blocks idle",
            _run_unsplit, dtypes=ALL_DTYPES),
    Variant(FAMILY, "fast",
            "fast_unsplit, plus the reduced dimension split across blocks when the output alone "
            "cannot fill the GPU, the partial sums added in a fixed order",
            run_fast, dtypes=ALL_DTYPES),
])


def matvec(A, x, *, out=None, variant: str = "fast", check: bool | None = None):
    """A @ x for float32/float64/float16/bfloat16 CuPy arrays: A (..., m, n) and x (..., n) of one dtype, batch axes
    broadcast as NumPy does, giving (..., m): the same as cupy.matmul(A, x[..., None])[..., 0]. float16 and bfloat16
    (ml_dtypes') are summed in float32 and rounded once to the input dtype, as cupy.matmul does; the seed variants
    take float32/float64 only (a TypeError for others, before any launch).

    C- and F-contiguous matrices (so also A.T of either) are read in place; any other strides, and a
    non-contiguous x, are first copied with cupy.ascontiguousarray. Runs on CuPy's current stream with no
    synchronisation; deterministic (fixed summation order for a given shape, layout and alignment).
    """
    if (type(A) is not cupy.ndarray or type(x) is not cupy.ndarray) and (face := _args.dask_face(A, x)) is not None:
        return face.matvec(A, x, out=out, variant=variant, check=check)
    A = _args.device_array("matvec", "A", A, min_ndim=2)
    x = _args.device_array("matvec", "x", x, min_ndim=1)
    if A.shape[-1] != x.shape[-1]:
        raise ValueError(f"cudakit.matvec: A has shape {A.shape} and x has shape {x.shape}; "
                         f"A.shape[-1] must equal x.shape[-1]")
    dtype, device_id = _args.common("matvec", {"A": A, "x": x}, _args.FLOATS_AND_HALVES)
    row = lookup("matvec", variant)
    if dtype not in _args.FLOATS:
        _args.check_variant("matvec", row, dtype)
    run = row.run
    if A.ndim == 2 and x.ndim == 1:  # the common case, without the batch axes' broadcasting
        batch, (m, n), shape = (), A.shape, A.shape[:1]
    else:
        batch, m, n, _, shape = _nd.matmul_shapes("matvec", A.shape, x.shape[:-1] + (x.shape[-1], 1))
        shape = shape[:-1]
    A_in, x_in = A, x
    with _args.on_device(device_id):
        out = _args.output("matvec", out, shape, dtype, device_id, {"A": A, "x": x})
        if out.size == 0:
            return out
        if n == 0:
            _args.fill_zero(out)
            return out
        if x.ndim == 1 and A.ndim > 2 and _args.is_c_contiguous(A):  # one x for every matrix: one tall product
            A = A.reshape(-1, n)
        if A.ndim == 2 and x.ndim == 1:
            A = _args.contiguous_or_copy(A)
            run(A, x if _args.is_c_contiguous(x) else _args.c_contiguous(x), out if out.ndim == 1 else out.reshape(-1))
        elif variant == "fast" and run_batched(A, x, out, batch):
            pass
        elif variant == "fast" and A.ndim == 2:  # one matrix, many vectors: X @ A.T (16-bit: on the tensor cores)
            xs = _args.c_contiguous(cupy.broadcast_to(x, batch + (n,))).reshape(-1, n)
            mm = importlib.import_module(__package__ + ".matmul")
            (mm._matmul_routes.run_fast if dtype in _args.FLOATS else mm._run_fast_tensor_core)(
                xs, A.T, out.reshape(-1, m))
        else:
            A, x = cupy.broadcast_to(A, batch + (m, n)), cupy.broadcast_to(x, batch + (n,))
            c = out.reshape(batch + (m,))
            for idx in np.ndindex(*batch):
                a_i, x_i = _args.contiguous_or_copy(A[idx]), x[idx]
                run(a_i, x_i if _args.is_c_contiguous(x_i) else _args.c_contiguous(x_i), c[idx])
        if _check.enabled(check):
            _check.verify("matvec", variant, out[..., None], A_in, x_in[..., None], dtype, n)
    return out


def instantiation_groups():
    """Every module this family builds (one per dtype), for the GPU-less compile check."""
    return [instantiations(name) for name in ALL_DTYPES]
