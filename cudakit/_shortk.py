"""Products of a short k through kernels/matmul_shortk.cu: bound by writing C, whose lanes keep B's k rows of their
columns in registers and store whole lines of C. `plan` picks the lanes a row, the columns a lane, the instantiated
depth and the rows a block; `launches` builds a batch's launches (2-D: a batch of one), `launcher` a 2-D product's
(matmul's routes keep it per geometry).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._compile import instantiation, kernel, launch, rebased

FAMILY = "matmul_shortk"
THREADS = 256  # SHORTK_THREADS in matmul_shortk.cu
WARPS = THREADS // 32
DEPTHS = (4, 8, 16)  # the instantiated KMAX: a product takes the least one of at least its k
MAX_K = DEPTHS[-1]
# (lanes a row of C, columns a lane), by element size. A C of at most 16 (8) columns takes 16 (8) lanes a row; a wider
# one 32, whose stores write whole 128-byte lines (fewer lanes a row ran slower wherever 32 could take C: session 41),
# with the columns a lane that cost least: ALPHA + cols a column tile of a row, fitted to that probe (idle lanes of a
# partial tile cost little, a lane's B registers serve all its columns)
LAYOUTS = {4: ((32, 4), (32, 2), (32, 1), (16, 1), (8, 1)), 8: ((32, 2), (32, 1), (16, 1), (8, 1))}
ALPHA = 3
# A block's rows: at least MIN_ROWS[KMAX] (each of its warps loads B's KMAX x cols registers, the same ones where the
# warps stand one deep: more rows spread that), and else enough for C_BYTES of C (fewer and larger blocks ran both
# slower: tools/short_k_probe.py, session 41). A C of fewer rows stands the block's warps abreast, each then taking
# at least MIN_ROWS / WARPS of them. Rows, then a lane's columns, shrink while the blocks give each SM fewer than
# MIN_BLOCKS_PER_SM.
MIN_ROWS = {4: 32, 8: 128, 16: 512}
C_BYTES = 64 * 1024
MIN_BLOCKS_PER_SM = 2
SKINNY_KEEPS = 16  # a 2-D C this narrow that the skinny kernel takes keeps it (16 or 8 lanes a row: not timed there)
MAX_SHARED = 48 * 1024  # a block's rows of A (no opt-in to more)
MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65535
MAX_SIDE = 2**31 - 1  # m and n are ints in the kernel


@dataclass(frozen=True)
class ShortkPlan:
    lanes: int
    cols: int
    depth: int  # KMAX
    rows: int  # C's rows a block
    warps_n: int = 1  # the block's warps abreast

    @property
    def width(self) -> int:
        """C's columns a block."""
        return self.warps_n * self.lanes * self.cols

    def expression(self, dtype) -> str:
        return instantiation("matmul_shortk", np.dtype(dtype), self.lanes, self.cols, self.depth)


def expressions(dtype) -> tuple[str, ...]:
    dtype = np.dtype(dtype)
    return tuple(ShortkPlan(lanes, cols, depth, 0).expression(dtype)
                 for lanes, cols in LAYOUTS[dtype.itemsize] for depth in DEPTHS)


def instantiation_groups():
    """Every module this family builds (one a dtype), for the GPU-less compile check."""
    return [expressions(np.float32), expressions(np.float64)]


def layout(n: int, itemsize: int) -> tuple[int, int]:
    """(lanes a row, columns a lane) for a C n wide (see LAYOUTS)."""
    return layouts(n, itemsize)[0]


def layouts(n: int, itemsize: int) -> list[tuple[int, int]]:
    """The layouts for a C n wide, best first (see LAYOUTS): then those of fewer columns a lane, which make more
    blocks of a small C."""
    options = LAYOUTS[itemsize]
    narrow = [l for l in options if l[0] < 32 and n <= l[0]]
    if narrow:
        return [min(narrow)]
    best = min((l for l in options if l[0] == 32), key=lambda l: -(-n // (32 * l[1])) * (ALPHA + l[1]))
    return [best] + [l for l in options if l[0] == 32 and l[1] < best[1]]


def takes(itemsize: int, k: int, m: int = 1, n: int = 1) -> bool:
    """Whether matmul's routes put m x k x n products of this element size here: 2-D past the dots route, not one
    row or column, not a C of at most SKINNY_KEEPS columns that the skinny kernel takes, nor FP64 that _dmma plans
    (_dmma.SHORT_DEPTHS); batches past the tiny kernel and the small-product kernel's limits. The kernel takes m and n
    as 32-bit ints: a side past MAX_SIDE goes elsewhere."""
    return k <= TAKES.get(itemsize, 0) and max(m, n) <= MAX_SIDE


TAKES = {4: MAX_K, 8: MAX_K}  # the deepest k routed here, by element size (FP64: see _dmma.SHORT_DEPTHS too)


def most_rows(deep: int, lanes: int, depth: int, itemsize: int) -> int:
    """The most rows of A a block stages within MAX_SHARED, a whole number of its passes (`deep` warps taking rows in
    turn, 32 / lanes rows each)."""
    pass_rows = deep * 32 // lanes
    return MAX_SHARED // (pass_rows * depth * itemsize) * pass_rows


def plan(m: int, n: int, k: int, itemsize: int, lanes_cols: tuple[int, int] | None = None,
         rows: int | None = None, warps_n: int | None = None, count: int = 1, sms: int = 132) -> ShortkPlan:
    """The kernel's plan for `count` m x k x n products (k at most MAX_K) on `sms` SMs, or the layout, rows a block and
    warps abreast given."""
    assert 1 <= k <= MAX_K, k
    depth = next(d for d in DEPTHS if k <= d)
    for lanes, cols in (lanes_cols,) if lanes_cols else layouts(n, itemsize):
        p = _plan(m, n, depth, itemsize, lanes, cols, rows, warps_n, MIN_BLOCKS_PER_SM * sms // count)
        if lanes_cols or -(-m // p.rows) * -(-n // p.width) * count >= MIN_BLOCKS_PER_SM * sms:
            break
    return p


def _plan(m, n, depth, itemsize, lanes, cols, rows, warps_n, want_blocks) -> ShortkPlan:
    group = 32 // lanes
    if warps_n is None:
        abreast = 1 << (-(-n // (lanes * cols))).bit_length() - 1  # (no more warps abreast than C has tiles of a warp)
        deep = max(1, min(WARPS, m * WARPS // (group * MIN_ROWS[depth])))
        warps_n = max(1, min(WARPS, abreast, WARPS // (1 << deep.bit_length() - 1)))
    if rows is None:
        deep = WARPS // warps_n
        pass_rows = deep * group
        want = max(MIN_ROWS[depth], C_BYTES // (min(n, warps_n * lanes * cols) * itemsize))
        rows = min(-(-want // pass_rows), -(-m // pass_rows)) * pass_rows
        rows = min(rows, most_rows(deep, lanes, depth, itemsize))
        tiles_n = -(-n // (warps_n * lanes * cols))
        while rows > 2 * pass_rows and -(-m // rows) * tiles_n < want_blocks:  # (two passes at least)
            rows = -(-rows // (2 * pass_rows)) * pass_rows
    return ShortkPlan(lanes, cols, depth, rows, warps_n)


def launches(p: ShortkPlan, a0, b0, c_ptr: int, count: int, steps: tuple[int, int, int]) -> list:
    """The launches of `count` products: a0 and b0 the first product's operands (strides in whole elements),
    `steps` the elements between consecutive products' A, B and C (C-contiguous)."""
    m, k = a0.shape
    n = b0.shape[1]
    item = a0.itemsize
    tiles_n = -(-n // p.width)
    if WARPS % p.warps_n or p.rows % (WARPS // p.warps_n * 32 // p.lanes) or not 1 <= k <= p.depth:
        raise ValueError(f"a plan the kernel cannot take: {p} for k = {k}")
    if max(m, n) > MAX_SIDE:
        raise ValueError(f"C's sides ({m}, {n}) past the kernel's 32-bit ints")
    tiles = -(-m // p.rows) * tiles_n
    if tiles > MAX_GRID_X:
        raise ValueError(f"{tiles} blocks past the grid's {MAX_GRID_X}: {p}")
    strides = tuple(st // item for st in a0.strides + b0.strides)
    shared = p.rows * p.depth * item
    if shared > MAX_SHARED:
        raise ValueError(f"{shared} bytes of shared memory past {MAX_SHARED}: {p}")
    fn = kernel(FAMILY, p.expression(a0.dtype), expressions(a0.dtype))
    out = []
    for p0 in range(0, count, MAX_GRID_Y):
        here = min(MAX_GRID_Y, count - p0)
        out.append((fn, (tiles, here), (THREADS,),
                    (a0.data.ptr + p0 * steps[0] * item, b0.data.ptr + p0 * steps[1] * item,
                     c_ptr + p0 * steps[2] * item, m, n, k, *strides, *steps, p.rows, tiles_n, p.warps_n), shared))
    return out


def launcher(A, B, out, p: ShortkPlan | None = None):
    """f(A, B, out): out = A @ B (2-D, C-order out, k at most MAX_K), its launch built once for operands of these
    shapes and strides (strides not whole elements: C-order copies first, on every call)."""
    from ._matmul_routes import _copying_first, _whole_element_strides  # (it imports this module first)

    if not _whole_element_strides(A, B):
        return _copying_first(run, p)
    m, k = A.shape
    n = B.shape[1]
    p = p or plan(m, n, k, A.itemsize)
    kept_launch = rebased(launches(p, A, B, out.data.ptr, 1, (0, 0, 0)), A.data.ptr, B.data.ptr, out.data.ptr)
    return lambda A, B, out: kept_launch(A.data.ptr, B.data.ptr, out.data.ptr)


def run(A, B, out, p: ShortkPlan | None = None) -> None:
    for args in launches(p or plan(A.shape[0], B.shape[1], A.shape[1], A.itemsize), A, B, out.data.ptr, 1, (0, 0, 0)):
        launch(*args)
