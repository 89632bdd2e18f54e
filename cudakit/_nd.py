"""N-D operands as cupy.matmul and cupy.transpose take them, reduced to what the kernels launch on: batches of
2-D products with one stride per operand, and permutations with their mergeable axes merged."""
from __future__ import annotations

import functools
import math

MAX_NDIM = 8  # the most axes cudakit.transpose takes


# ---------------------------------------------------------------------------------------------------- matmul
@functools.lru_cache(maxsize=4096)
def matmul_shapes(op: str, a_shape: tuple, b_shape: tuple):
    """(batch shape, m, k, n, result shape) of cupy.matmul(a, b): 1-D operands promoted (a to a row, b to a
    column) and their added axis left out of the result; batch axes broadcast as NumPy does."""
    import numpy as np

    if not a_shape or not b_shape:
        raise ValueError(f"cudakit.{op}: operands must be at least 1-D, got 0-d (use * for scalars)")
    a2 = (1,) + a_shape if len(a_shape) == 1 else a_shape
    b2 = b_shape + (1,) if len(b_shape) == 1 else b_shape
    (m, k), (k2, n) = a2[-2:], b2[-2:]
    if k != k2:
        raise ValueError(f"cudakit.{op}: A has shape {a_shape} and B has shape {b_shape}; "
                         f"A's columns ({k}) must equal B's rows ({k2})")
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2])) if len(a2) > 2 or len(b2) > 2 else ()
    except ValueError:
        raise ValueError(f"cudakit.{op}: the batch axes of A {a_shape} and B {b_shape} do not broadcast") from None
    result = batch + ((m,) if len(a_shape) > 1 else ()) + ((n,) if len(b_shape) > 1 else ())
    return batch, m, k, n, result


def batch_runs(batch: tuple, *strides) -> tuple[tuple, tuple]:
    """The batch axes as (outer axes, inner run): `strides` gives each operand's byte strides over the batch axes
    (C-contiguous output included); adjacent axes merge where every operand steps through them evenly. Returns
    (outer: [(size, strides...)], inner: (size, strides...)) with the longest run innermost."""
    axes = [(size,) + tuple(s[i] for s in strides) for i, size in enumerate(batch) if size != 1]
    merged: list = []
    for ax in axes:
        if merged and all(prev == cur * ax[0] for prev, cur in zip(merged[-1][1:], ax[1:])):
            merged[-1] = (merged[-1][0] * ax[0],) + ax[1:]
        else:
            merged.append(ax)
    if not merged:
        return (), (1,) + (0,) * len(strides)
    return tuple(merged[:-1]), merged[-1]


# ---------------------------------------------------------------------------------------------------- transpose
def normalize_axes(op: str, ndim: int, axes) -> tuple[int, ...]:
    """axes as cupy.transpose takes them (None: reversed), validated: a permutation of range(ndim)."""
    if axes is None or (type(axes) is tuple and _hashable(axes)):  # the answer is remembered
        return _normalized_axes(op, ndim, axes)
    return _normalize_axes(op, ndim, axes)


def _hashable(x) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


@functools.lru_cache(maxsize=1024)
def _normalized_axes(op: str, ndim: int, axes) -> tuple[int, ...]:
    return _normalize_axes(op, ndim, axes)


def _normalize_axes(op: str, ndim: int, axes) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))[::-1]
    try:
        axes = tuple(int(a) for a in axes)
    except (TypeError, ValueError):
        raise TypeError(f"cudakit.{op}: axes must be a sequence of integers, got {axes!r}") from None
    if len(axes) != ndim:
        raise ValueError(f"cudakit.{op}: axes {axes} don't match an array of {ndim} dimensions")
    if any(not -ndim <= a < ndim for a in axes):
        raise ValueError(f"cudakit.{op}: axes {axes} out of range for an array of {ndim} dimensions")
    axes = tuple(a % ndim for a in axes)
    if len(set(axes)) != ndim:
        raise ValueError(f"cudakit.{op}: repeated axes in {axes}")
    return axes


@functools.lru_cache(maxsize=4096)
def transpose_plan(shape: tuple, axes: tuple) -> tuple[tuple, tuple, tuple]:
    """(result shape, merged shape, merged permutation) of transposing C-contiguous data of `shape` by `axes`."""
    return (tuple(shape[a] for a in axes),) + merged_permutation(shape, axes)


def merged_permutation(shape: tuple, axes: tuple) -> tuple[tuple, tuple]:
    """(shape, perm) of the same transpose of C-contiguous data with axes of length 1 dropped and every pair of
    input axes that stays adjacent, in order, in the output merged into one: perm[j] is the merged input axis that
    output axis j takes."""
    kept = [a for a in axes if shape[a] != 1]  # output order, length-1 axes gone
    runs: list[list[int]] = []
    for a in kept:
        if runs and _next_kept(shape, runs[-1][-1]) == a:
            runs[-1].append(a)
        else:
            runs.append([a])
    order = sorted(range(len(runs)), key=lambda j: runs[j][0])  # merged axes in input order
    sizes = [math.prod(shape[a] for a in runs[j]) for j in order]
    rank = {j: i for i, j in enumerate(order)}
    return tuple(sizes), tuple(rank[j] for j in range(len(runs)))


def _next_kept(shape, axis):
    for a in range(axis + 1, len(shape)):
        if shape[a] != 1:
            return a
    return None
