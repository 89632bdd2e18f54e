"""Batches of products whose C has few rows, through kernels/matmul_fewrows.cu: each element of B serves only m
multiply-adds, so the kernel streams B once, its lanes on B's columns and its k cut into slices, where the tiles would
pad C to their height. `plan` picks the columns a unit of lanes takes and its k slices; `launches` builds a batch's
launches, or None where B's columns are not one element apart.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._compile import instantiation, kernel

FAMILY = "matmul_fewrows"
THREADS = 256  # FEWROWS_THREADS in matmul_fewrows.cu
# The batches taken: C of 2 to TAKES_ROWS[element size] rows (one row is a matrix-vector product), where the tiny
# kernel does not take them. Taller FP32 C ran faster on the register tiles, taller FP64 C on the DMMA tiles; of the
# batches taken, only some short ones ran slower than on their earlier routes (docs/NOTES.md, session 51).
TAKES_ROWS = {4: 6, 8: 4}  # (and the instantiated M: 2 to these)
COLS = (1, 2, 4)  # the instantiated columns a lane
# A unit has at most MAX_WIDTH lanes (a warp's whole line of B's row), each taking the most COLS that leave it at
# least half that many lanes: more columns a lane serve more multiply-adds by each load of A. A wider C is cut into
# chunks of equal width. A unit's k is cut into as many slices as leave each lane about SLICE_DEPTH of k, within the
# block's threads: a short k leaves room for several units a block.
MAX_WIDTH = 32
SLICE_DEPTH = 8
MIN_BLOCKS_PER_SM, MIN_UNIT = 2, 4  # (plan: narrower units, down to MIN_UNIT lanes, to fill the GPU)
MAX_GRID_X = 2**31 - 1
MAX_SIDE = 2**31 - 1 - 2 * THREADS  # n and k are ints in the kernel, which steps past them by up to two rounds of lanes


@dataclass(frozen=True)
class FewRowsPlan:
    cols: int  # C's columns a lane
    width: int  # lanes a unit
    chunks: int  # units a product
    slices: int  # k slices a unit
    units: int  # units a block

    def blocks(self, count: int) -> int:
        return -(-count * self.chunks // self.units)


def expression(dtype, m: int, cols: int) -> str:
    return instantiation("matmul_fewrows", np.dtype(dtype), m, cols)


def expressions(dtype) -> tuple[str, ...]:
    return tuple(expression(dtype, m, cols) for m in range(2, TAKES_ROWS[np.dtype(dtype).itemsize] + 1)
                 for cols in COLS)


def instantiation_groups():
    """Every module this family builds (one a dtype), for the GPU-less compile check."""
    return [expressions(np.float32), expressions(np.float64)]


def plan(m: int, n: int, k: int, count: int = 1, sms: int = 132) -> FewRowsPlan:
    """The kernel's plan for `count` m x k x n products on `sms` SMs (see MAX_WIDTH, SLICE_DEPTH): no more units a
    block than leave MIN_BLOCKS_PER_SM blocks an SM; where the blocks would still not fill that and the lanes would
    take more than SLICE_DEPTH of k, narrower units, whose more slices each take less of k."""
    assert m >= 2 and n >= 1 and k >= 1, (m, n, k)
    width = MAX_WIDTH
    while True:
        p = _plan(n, k, width, count, MIN_BLOCKS_PER_SM * sms)
        if width <= MIN_UNIT or p.blocks(count) >= MIN_BLOCKS_PER_SM * sms or p.slices * SLICE_DEPTH >= k:
            return p
        width //= 2


def _plan(n: int, k: int, max_width: int, count: int, want_blocks: int) -> FewRowsPlan:
    cols = max(c for c in COLS if c == 1 or 2 * n >= c * max_width)
    chunks = -(-n // (max_width * cols))
    width = -(-n // (chunks * cols))
    slices = max(1, min(THREADS // width, -(-k // SLICE_DEPTH)))
    units = max(1, min(THREADS // (width * slices), count * chunks // want_blocks))
    return FewRowsPlan(cols, width, chunks, slices, units)


def takes(m: int, n: int, k: int, count: int, itemsize: int) -> bool:
    """Whether a batch of `count` m x k x n products comes here (see TAKES_ROWS; _matmul_batch asks where the tiny
    kernel does not take them, and `reads` whether B is read in place)."""
    return 2 <= m <= TAKES_ROWS.get(itemsize, 0) and count > 1 and max(n, k) <= MAX_SIDE


def reads(a0, b0) -> bool:
    """Whether the kernel reads a0 and b0 (a product's operands) in place: B's columns one element apart, every
    stride whole elements."""
    item = b0.itemsize
    n = b0.shape[1]
    return (n == 1 or b0.strides[1] == item) and all(st % item == 0 for st in a0.strides + b0.strides[:1])


def launches(p: FewRowsPlan, a0, b0, c_ptr: int, count: int, steps: tuple[int, int, int]) -> list | None:
    """The launch of `count` products: a0 and b0 the first product's operands (strides in whole elements), `steps`
    the elements between consecutive products' A, B and C (C-contiguous); None where B is not read in place."""
    m, k = a0.shape
    n = b0.shape[1]
    item = a0.itemsize
    if not reads(a0, b0):
        return None
    if not 2 <= m <= TAKES_ROWS[item] or max(n, k) > MAX_SIDE:
        raise ValueError(f"a product the kernel cannot take: {m} x {k} x {n}")
    if p.width * p.slices * p.units > THREADS or p.chunks * p.width * p.cols < n or p.cols not in COLS:
        raise ValueError(f"a plan the kernel cannot take: {p} for n = {n}")
    blocks = p.blocks(count)
    if blocks > MAX_GRID_X:
        raise ValueError(f"{blocks} blocks past the grid's {MAX_GRID_X}: {p}")
    a_row, a_col = (st // item for st in a0.strides)
    ldb = b0.strides[0] // item
    fn = kernel(FAMILY, expression(a0.dtype, m, p.cols), expressions(a0.dtype))
    return [(fn, (blocks,), (THREADS,), (a0.data.ptr, b0.data.ptr, c_ptr, n, k, a_row, a_col, ldb, *steps, count,
                                         p.chunks, p.width, p.slices, p.units), 0)]
