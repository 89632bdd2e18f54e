"""The fast matvec variant's planner: which kernel of kernels/matvec.cu (and its matvec_columns.cuh), and its tiles,
blocks and chunks, for an m x n product of a given dtype, layout and alignment (matvec.py launches the plan)."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from . import _args
from ._compile import ctype, instantiation, resident_blocks
from ._device import shared_per_block, sm_count

FAST_THREADS = 256  # FAST_THREADS in kernels/matvec.cu
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
# Column-major plans split the columns into chunks for at most this many blocks per SM:
# the wide F-order shapes measured faster that way and the rest about even, for a reason not yet pinned down
# (docs/NOTES.md, "matvec.py: column-major splits for at most 4 blocks per SM").
COL_SPLIT_BLOCKS_PER_SM = 4
# A column-major A whose columns are not whole 16-byte vectors (m not a multiple of them), loaded an element per lane:
# at most 128 lanes down the column, and where its row tiles are at least one an SM, splits for up to 8 blocks per SM
# (fewer tiles keep 4: their chunks are many already, and each tile's last block adds them one by one)
# (docs/NOTES.md, "matvec.py: column-major element loads").
ELEMENT_COL_LANES = 128
ELEMENT_COL_SPLIT_BLOCKS_PER_SM = 8
# float32 element columns, at least ELEMENT_COL_UNROLL_MIN_COLUMNS of them, keep 8 columns in flight a thread (with
# the fetch-ahead, 16 loads) where that kernel's fewer resident blocks take its row tiles in no more rounds
# and its column lanes each get a batch (docs/NOTES.md, "matvec: float32 element columns"). Element columns too few
# for one batch a column lane take a whole block of lanes down each column (one column lane): a batch then covers
# them, where the row tiles still fill the GPU (narrower tiles come first).
ELEMENT_COL_UNROLL, ELEMENT_COL_UNROLL_MIN_COLUMNS = {4: 8}, 64
# Column-major matrices of few rows take matvec_thin_colmajor (their run read as one, in vectors), by element size:
# up to THIN_MAX_ROWS rows that are not whole 16-byte vectors (which the column-major kernel would load an element per
# lane), or THIN_LARGE_ROWS of them where A is at least THIN_LARGE_BYTES, and THIN_MAX_VECTOR_ROWS rows of whole
# vectors at any size. Past these the thin kernel's sums over its blocks cost more than reading the run whole saves
# (docs/NOTES.md, "matvec.py: the thin kernel's rows"). The 16-bit limits are the earlier kernel's, not measured again.
THIN_MAX_ROWS = {2: 40, 4: 56, 8: 40}
THIN_MAX_VECTOR_ROWS = {2: 16, 4: 16, 8: 24}
THIN_LARGE_ROWS, THIN_LARGE_BYTES = {2: 40, 4: 128, 8: 40}, 1 << 28
THIN_MIN_VECTORS = 16  # 16-byte vectors each thread of matvec_thin_colmajor reads at least
# Column-major A of few element columns (not whole 16-byte vectors) takes matvec_few_columns: matvec_colmajor's lane
# holds one row, so only its n element loads were in flight (docs/NOTES.md, "matvec: few element columns").
# FEW_COLUMNS[element size]: (column limit, rows a lane) steps, a kernel built for each limit (its FEW); the first step
# whose limit holds n serves. A lane holds rows x FEW elements in registers: the wider step takes fewer rows a lane.
FEW_COLUMNS = {2: ((7, 4), (15, 2)), 4: ((7, 4), (16, 2)), 8: ((3, 4), (12, 2))}
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
# Row-major rows of at least this many loads a lane over the whole row (split or not), a warp or a block to a row,
# take the row-major kernel that fetches each batch of loads before adding the one before (PIPELINED), except rows of
# 16-byte vectors whose tiles are more than its resident blocks: it holds twice the registers, fewer blocks fit an SM,
# and shorter rows, and FP64 vector rows that filled the GPU, were faster on more blocks (docs/NOTES.md, "matvec.cu:
# fetch ahead"). (Whether a row takes a block of its own is still weighed on the plain kernel's resident blocks.)
PIPELINED_ROW_LOADS = 16
PIPELINED_GROUPS = (32, FAST_THREADS)
ROW_LANES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # lanes down the column, column-major kernel


def few_columns_step(itemsize: int, n: int) -> tuple[int, int] | None:
    """(column limit, rows a lane) of the FEW_COLUMNS step that takes n element columns, or None past the last."""
    return next((step for step in FEW_COLUMNS[itemsize] if n <= step[0]), None)


def few_columns_expression(dtype, few: int, rows: int) -> str:
    """matvec_few_columns for `dtype` (a NumPy dtype or its name), `rows` a lane, built for `few` columns at most."""
    return instantiation("matvec_few_columns", ctype(_args.dtype_name(dtype)), rows, few)


def _col_major(A) -> bool:
    """The kernels' layout for A (C- or F-contiguous here): a 1-row or 1-column A is both, and taken as C."""
    return not _args.is_c_contiguous(A)


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
    from .matvec import _kernel

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
    persistent, balanced, blocks_per_sm, few_rows (matvec_few_columns' rows a lane); few_columns=False keeps few
    element columns on matvec_colmajor; staged=False (implied by row_group or row_unroll) keeps short element rows
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
        piped = instantiation("matvec_rowmajor", dtype, bool(vector), group, unroll, cached, True)
        if (not cached and unroll == ROW_UNROLL and group in PIPELINED_GROUPS and nv // group >= PIPELINED_ROW_LOADS
                and (not vector or tiles <= _resident_blocks(piped, dtype, device_id))):
            name = piped
        reduced = nv
        long_rows = group == 32
    elif aligned and split and count == 1 and not knobs and takes_thin(m, n, dtype.itemsize) \
            and thin_unit(m, width) <= _resident_blocks(instantiation("matvec_thin_colmajor", dtype), dtype, device_id):
        return _thin_plan(m, n, dtype, device_id)
    else:
        vector = aligned and m % width == 0
        step = few_columns_step(dtype.itemsize, n)
        if not vector and step and knobs.get("few_columns", True):
            few, rows = step[0], knobs.get("few_rows", step[1])
            tiles = -(-m // (FAST_THREADS * rows))
            return Plan(few_columns_expression(dtype, few, rows), False, tiles, tiles, 1, n)
        mv = m // width if vector else m
        unroll = knobs.get("col_unroll", COL_UNROLL)
        lanes = min(256 if vector else ELEMENT_COL_LANES, _pow2_ceil(mv))
        if not vector and n < FAST_THREADS // lanes * unroll:  # too few columns for a batch a column lane
            lanes = min(FAST_THREADS, _pow2_ceil(mv))
        name = instantiation("matvec_colmajor", dtype, bool(vector), lanes, unroll)
        target = _resident_blocks(name, dtype, device_id)
        while lanes > 32 and -(-mv // lanes) * count < target:  # narrower row tiles before splitting the columns
            lanes //= 2
        lanes = knobs.get("col_lanes", lanes)
        tiles = -(-mv // lanes)
        name = instantiation("matvec_colmajor", dtype, bool(vector), lanes, unroll)
        deep = ELEMENT_COL_UNROLL.get(dtype.itemsize)
        if (deep and not vector and "col_unroll" not in knobs
                and n >= max(ELEMENT_COL_UNROLL_MIN_COLUMNS, FAST_THREADS // lanes * deep)):
            deeper = instantiation("matvec_colmajor", dtype, False, lanes, deep)
            if _rounds(tiles * count, deeper, dtype, device_id) <= _rounds(tiles * count, name, dtype, device_id):
                name, unroll = deeper, deep
        step = (FAST_THREADS // lanes) * unroll
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


def _rounds(blocks: int, name: str, dtype, device_id: int) -> int:
    """How many rounds of kernel `name`'s resident blocks `blocks` take."""
    return -(-blocks // _resident_blocks(name, dtype, device_id))


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
    from .matvec import _kernel

    name = instantiation("matvec_rows_staged", dtype)
    fn = _kernel(name, dtype)
    resident = max(1, resident_blocks(fn, FAST_THREADS, staged_shared_bytes(n, dtype.itemsize))) * sm_count(device_id)
    tiles = -(-m // FAST_THREADS)
    grid = min(tiles, resident)
    return Plan(name, False, tiles, _balanced(tiles, grid), 1, n)


def _balanced(tiles: int, grid: int) -> int:
    """The fewest blocks that stride over `tiles` in as many rounds as `grid` blocks do (see BALANCED)."""
    return -(-tiles // -(-tiles // grid))


def takes_thin(m: int, n: int, itemsize: int) -> bool:
    """Whether an aligned column-major m x n matrix takes the thin kernel (by its rows and size; see THIN_MAX_ROWS)."""
    if m % (16 // itemsize) == 0:
        rows = THIN_MAX_VECTOR_ROWS[itemsize]
    else:
        rows = THIN_LARGE_ROWS[itemsize] if m * n * itemsize >= THIN_LARGE_BYTES else THIN_MAX_ROWS[itemsize]
    return 1 < m <= min(FAST_THREADS, rows)


def thin_unit(m: int, width: int) -> int:
    """The thin kernel's grid is a multiple of this many blocks (its stride over the run, FAST_THREADS * width
    elements a block, a multiple of m). The plan takes the kernel only where this many blocks are resident at once."""
    return m // math.gcd(m, width * FAST_THREADS)


def _thin_plan(m: int, n: int, dtype, device_id: int) -> Plan:
    """matvec_thin_colmajor's plan: one resident wave of blocks, fewer where the run gives a thread less than
    THIN_MIN_VECTORS, and a multiple of thin_unit: rounded down, since a block past the resident wave would run alone
    after it."""
    width = 16 // dtype.itemsize
    name = instantiation("matvec_thin_colmajor", dtype)
    unit = thin_unit(m, width)
    wanted = min(_resident_blocks(name, dtype, device_id), -(-m * n // (width * FAST_THREADS * THIN_MIN_VECTORS)))
    return Plan(name, True, 1, max(unit, wanted // unit * unit), 1, 0)
