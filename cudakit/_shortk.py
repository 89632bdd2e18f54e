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
# (lanes a row of C, columns a lane), by element size: the widest layout whose padded width is within WIDTH_SLACK of
# n runs (the lanes' B registers then serve more columns); else the one padding n least
LAYOUTS = {4: ((32, 4), (32, 2), (32, 1), (16, 1), (8, 1)), 8: ((32, 2), (32, 1), (16, 1), (8, 1))}
WIDTH_SLACK = 1.125
MAX_PASSES = 16  # row passes of a block's warps: B's registers are loaded once a block
MAX_SHARED = 48 * 1024  # a block's rows of A (no opt-in to more)
MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65535


@dataclass(frozen=True)
class ShortkPlan:
    lanes: int
    cols: int
    depth: int  # KMAX
    rows: int  # C's rows a block

    @property
    def width(self) -> int:
        return self.lanes * self.cols

    def expression(self, dtype) -> str:
        return instantiation("matmul_shortk", np.dtype(dtype), self.lanes, self.cols, self.depth)


def expressions(dtype) -> tuple[str, ...]:
    dtype = np.dtype(dtype)
    return tuple(ShortkPlan(lanes, cols, depth, 0).expression(dtype)
                 for lanes, cols in LAYOUTS[dtype.itemsize] for depth in DEPTHS)


def instantiation_groups():
    """Every module this family builds (one a dtype), for the GPU-less compile check."""
    return [expressions(np.float32), expressions(np.float64)]


def plan(m: int, n: int, k: int, itemsize: int, lanes_cols: tuple[int, int] | None = None,
         rows: int | None = None) -> ShortkPlan:
    """The kernel's plan for m x k x n products (k at most MAX_K), or the given layout and rows a block."""
    assert 1 <= k <= MAX_K, k
    depth = next(d for d in DEPTHS if k <= d)

    def padded(layout):
        width = layout[0] * layout[1]
        return -(-n // width) * width

    if lanes_cols is None:
        layouts = LAYOUTS[itemsize]
        lanes_cols = next((l for l in layouts if padded(l) <= WIDTH_SLACK * n), None) or min(layouts, key=padded)
    if rows is None:
        pass_rows = WARPS * 32 // lanes_cols[0]
        rows = min(most_passes(lanes_cols[0], depth, itemsize), -(-m // pass_rows)) * pass_rows
    return ShortkPlan(*lanes_cols, depth, rows)


def most_passes(lanes: int, depth: int, itemsize: int) -> int:
    """The most row passes a block makes: MAX_PASSES, or fewer where its rows of A would pass MAX_SHARED."""
    return min(MAX_PASSES, MAX_SHARED // (WARPS * 32 // lanes * depth * itemsize))


def launches(p: ShortkPlan, a0, b0, c_ptr: int, count: int, steps: tuple[int, int, int]) -> list:
    """The launches of `count` products: a0 and b0 the first product's operands (strides in whole elements),
    `steps` the elements between consecutive products' A, B and C (C-contiguous)."""
    m, k = a0.shape
    n = b0.shape[1]
    item = a0.itemsize
    fn = kernel(FAMILY, p.expression(a0.dtype), expressions(a0.dtype))
    tiles_n = -(-n // p.width)
    tiles = -(-m // p.rows) * tiles_n
    assert tiles <= MAX_GRID_X, (m, n, p)
    strides = tuple(st // item for st in a0.strides + b0.strides)
    shared = p.rows * p.depth * item
    assert shared <= MAX_SHARED, p
    out = []
    for p0 in range(0, count, MAX_GRID_Y):
        here = min(MAX_GRID_Y, count - p0)
        out.append((fn, (tiles, here), (THREADS,),
                    (a0.data.ptr + p0 * steps[0] * item, b0.data.ptr + p0 * steps[1] * item,
                     c_ptr + p0 * steps[2] * item, m, n, k, *strides, *steps, p.rows, tiles_n), shared))
    return out


def launcher(A, B, out, p: ShortkPlan | None = None):
    """f(A, B, out): out = A @ B (2-D, C-order out, k at most MAX_K), its launch built once for operands of these
    shapes and strides (strides not whole elements: C-order copies first, on every call)."""
    if any(st % A.itemsize for st in A.strides + B.strides):
        import cupy

        def copying_first(A, B, out):
            a, b = cupy.ascontiguousarray(A), cupy.ascontiguousarray(B)
            launcher(a, b, out, p)(a, b, out)
        return copying_first
    m, k = A.shape
    n = B.shape[1]
    p = p or plan(m, n, k, A.itemsize)
    run = rebased(launches(p, A, B, out.data.ptr, 1, (0, 0, 0)), A.data.ptr, B.data.ptr, out.data.ptr)
    return lambda A, B, out: run(A.data.ptr, B.data.ptr, out.data.ptr)


def run(A, B, out, p: ShortkPlan | None = None) -> None:
    for args in launches(p or plan(A.shape[0], B.shape[1], A.shape[1], A.itemsize), A, B, out.data.ptr, 1, (0, 0, 0)):
        launch(*args)
