"""Matrix-vector product: cudakit.matvec(A, x) -> A @ x, reading C- and F-order A (and A.T views) in place. The fast
variant's plan (kernel, tiles, blocks, chunks) comes from _matvec_plan; the launches are built here."""
from __future__ import annotations

import functools
import importlib

import cupy
import numpy as np

from . import _args, _check, _nd
from ._compile import ctype, instantiation, kept, kernel, launch
from ._device import workspace
from ._matvec_plan import (COL_UNROLL, ELEMENT_COL_UNROLL, FAST_THREADS, FEW_COLUMNS, GROUPS, PIPELINED_GROUPS,
                           ROW_LANES, ROW_UNROLL, Plan, _col_major, _plan, _short_row_plans, few_columns_expression,
                           plan, staged_shared_bytes)
from ._variants import Variant, lookup, register

FAMILY = "matvec"
SEED_THREADS = 1024  # seed 000's block (and x tile) size
WARP_ROW_THREADS = 256  # 8 rows per block in warp_per_row
MAX_GRID_Z = 65535  # products per launch of a batch on the grid's z
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
    names += [instantiation("matvec_rowmajor", ct, v, g, ROW_UNROLL, False, True) for v in (True, False)
              for g in PIPELINED_GROUPS]
    itemsize = 8 if name == "float64" else 4 if name == "float32" else 2
    names += [instantiation("matvec_rowmajor", ct, *plan, True) for plan in _short_row_plans(itemsize)]
    names += [instantiation("matvec_colmajor", ct, v, r, COL_UNROLL) for v in (True, False) for r in ROW_LANES]
    if itemsize in ELEMENT_COL_UNROLL:
        names += [instantiation("matvec_colmajor", ct, False, r, ELEMENT_COL_UNROLL[itemsize]) for r in ROW_LANES]
    names += [few_columns_expression(name, *step) for step in FEW_COLUMNS[itemsize]]
    names.append(instantiation("matvec_thin_colmajor", ct))
    names.append(instantiation("matvec_rows_staged", ct))
    return tuple(dict.fromkeys(names))


def _kernel(name: str, dtype):
    names = instantiations(dtype)
    # A name outside the standard set (another unroll, tried by tools/matvec_probe.py) gets a module of its own.
    return kernel(FAMILY, name, names if name in names else (name,))


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
