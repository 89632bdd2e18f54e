"""The answers `bench.py --dask` checks against float64: sampled blocks of the fully chunked product, and a matvec
whose matrix is larger than one GPU's memory, spread over the workers' GPUs."""
from __future__ import annotations

import functools
import time

import numpy as np

from .dask import _device_array, _rows, keys_of, placed, settle


# ---------------------------------------------------------------------------------------------------- answers
def sampled_error(compute, A, B, C, samples: int = 2) -> dict:
    """C = A @ B checked on `samples` of its blocks, spread over rows and columns: each against the float64 product
    of the same row of A's blocks and column of B's (dask.array's own matmul, on the workers). compute: a list of
    collections -> their values. Returns the largest relative error, its bound and the blocks checked."""
    from cudakit import _check

    rows, cols = C.numblocks
    picks = [(i * rows // samples, (i * cols // samples + cols // 2) % cols) for i in range(samples)]
    errors = []
    for i, j in picks:
        ref = A.blocks[i, :].astype(np.float64) @ B.blocks[:, j].astype(np.float64)
        got, ref = compute([C.blocks[i, j], ref])
        errors.append(_check.relative_error(got, ref))
    return {"error": max(errors), "bound": _check.tolerance(np.dtype(A.dtype), A.shape[1]), "blocks": picks}


# ---------------------------------------------------------------------------------------------------- larger than a GPU
REFERENCE_ROWS = 4096  # rows of a block widened to float64 at a time (a whole block would need twice its bytes)


def _reference_block(a, x):
    import cupy

    x64 = x.astype(np.float64)
    return cupy.concatenate([cupy.matmul(a[i:i + REFERENCE_ROWS].astype(np.float64), x64)
                             for i in range(0, a.shape[0], REFERENCE_ROWS)])


def matvec_past_one_gpu(client, gpu_bytes: int, workers: int) -> dict | None:
    """A matvec whose float32 matrix is 1.2x one GPU's memory, over the workers' GPUs: its time, and its relative
    error against a float64 product of the same blocks (made by CuPy on the workers)."""
    import cupy
    import dask.array as da
    from distributed import wait

    import cudakit
    from cudakit import _check

    n = 65536
    rows = _rows(int(1.2 * gpu_bytes / (4 * n)), 1.0, 8192)
    if 4 * rows * n > 0.6 * workers * gpu_bytes:
        return None
    chunk = _rows(rows // (32 * workers), 1.0, 1024)
    draw = functools.partial(_device_array, dtype=np.float32)
    A = client.persist(placed(client, (rows, n), (chunk, n), np.float32, draw))  # an equal share on each GPU
    x = client.persist(placed(client, (n,), (n,), np.float32, draw))
    wait([A, x])
    t0 = time.perf_counter()
    y = client.persist(cudakit.matvec(A, x))
    wait(y)
    seconds = time.perf_counter() - t0
    ref = da.blockwise(_reference_block, "i", A, "ij", x, "j", dtype=np.float64, concatenate=True,
                       meta=cupy.empty((0,), np.float64))
    y, ref = client.compute([y, ref], sync=True)
    error = _check.relative_error(y, ref)
    keys = keys_of(A, x)
    del A, x
    settle(client, keys)
    return {"rows": rows, "cols": n, "bytes": 4 * rows * n, "seconds": seconds, "error": error,
            "bound": _check.tolerance(np.dtype(np.float32), n)}


def answer_lines(results: dict) -> list[str]:
    """The answers the run checked: sampled blocks of the chunked product, and the matvec past one GPU's memory."""
    lines = []
    for r in results["rows"]:
        if r.get("answer"):
            a = r["answer"]
            lines.append(f"{r['op']} {r['case']} on {results['workers']} workers, blocks {a['blocks']} of C against "
                         f"float64: relative error {a['error']:.2e} (bound {a['bound']:.2e}): "
                         f"{'right' if a['error'] <= a['bound'] else 'WRONG'}")
    big = results.get("past_one_gpu")
    if not big:
        lines.append("matvec past one GPU's memory: not run (needs 2 workers with room, and a full run)")
        return lines
    if "failed" in big:
        lines.append(f"matvec past one GPU's memory: FAILED: {big['failed']}")
        return lines
    ok = "right" if big["error"] <= big["bound"] else "WRONG"
    lines.append(f"matvec past one GPU's memory: {big['rows']}x{big['cols']} float32 ({big['bytes'] / 1e9:.0f} GB, "
                 f"{big['bytes'] / results['gpu_bytes']:.2f}x one GPU) on {results['workers']} workers in "
                 f"{big['seconds'] * 1e3:.0f} ms; relative error {big['error']:.2e} (bound {big['bound']:.2e}): {ok}")
    return lines
