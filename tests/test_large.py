"""Past 2^31 elements: every variant of every op on an operand or a result with more elements than a 32-bit index
counts, so index arithmetic that wraps shows up as a wrong answer (or, under compute-sanitizer, a stray access).

Marked `large` as well as `gpu`: each needs 9 to 30 GB of free device memory and skips, saying so, where there is
less. tools/gpu_check.sh runs them one at a time, after the parallel shards.
"""
import importlib

import numpy as np
import pytest

import cudakit
from cudakit import _check, _tune
from conftest import assert_close, poisoned, random_array

pytestmark = [pytest.mark.gpu, pytest.mark.large]

ROWS, COLS = 65537, 32769  # 2,147,581,953 elements: the last three rows lie past 2^31
WIDE = 3 * 2**24 + 1  # 64 x WIDE (a split matvec): rows 43 to 63 start past 2^31
DOT_N = 2**31 + 2**29 + 17  # a fifth of the products past 2^31
CHUNK_ROWS = 4096
BLOCK = 2**27  # elements of one float64 reference block (1 GiB)


def need_free(gib: float):
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    free = cupy.cuda.runtime.memGetInfo()[0]
    if free < gib * 2**30:
        pytest.skip(f"needs {gib:g} GiB of free device memory, {free / 2**30:.1f} GiB free")


def product64(A, B):
    """A @ B in float64, block by block (a float64 copy of A would not fit beside it)."""
    import cupy

    rows = min(A.shape[0], CHUNK_ROWS)
    cols = max(1, BLOCK // rows)
    return cupy.concatenate([
        sum(A[r:r + rows, c:c + cols].astype(cupy.float64) @ B[c:c + cols].astype(cupy.float64)
            for c in range(0, A.shape[1], cols))
        for r in range(0, A.shape[0], rows)])


def random_bytes(shape, dtype):
    """Fresh random bytes viewed as dtype, drawn a block at a time."""
    import cupy

    raw = cupy.empty(shape[0] * shape[1] * np.dtype(dtype).itemsize, np.uint8)
    for i in range(0, raw.size, BLOCK):
        raw[i:i + BLOCK] = cupy.random.randint(0, 256, size=min(BLOCK, raw.size - i), dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("variant", [v.name for v in cudakit.variants("transpose")])
@pytest.mark.parametrize("dtype", [np.int8, np.float32])
def test_transpose_past_2_31_elements(variant, dtype):
    import cupy

    need_free(4.5 * ROWS * COLS * np.dtype(dtype).itemsize / 2**30)
    a = random_bytes((ROWS, COLS), dtype)
    out = poisoned((COLS, ROWS), dtype)
    cudakit.transpose(a, out=out, variant=variant)
    bits = np.dtype(f"u{np.dtype(dtype).itemsize}")
    for r in range(0, COLS, CHUNK_ROWS):  # out[r:r+c] against a[:, r:r+c].T, bit for bit
        want = cupy.ascontiguousarray(a[:, r:r + CHUNK_ROWS].T)
        wrong = int(cupy.count_nonzero(out[r:r + CHUNK_ROWS].view(bits) != want.view(bits)))
        assert wrong == 0, f"{variant} {np.dtype(dtype)}: {wrong} elements differ in output rows {r}.."


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(ROWS, COLS), (64, WIDE)], ids=["long-rows", "wide"])
@pytest.mark.parametrize("variant", [v.name for v in cudakit.variants("matvec")])
def test_matvec_past_2_31_elements(variant, shape, order):
    if shape[0] == 64 and variant.startswith("mat_vec_mul"):
        pytest.skip("the seeds' thread per row would read 50M elements serially on 64 threads")
    need_free(2.5 * shape[0] * shape[1] * 4 / 2**30)
    stored = random_array(shape if order == "C" else shape[::-1], np.float32)
    A = stored if order == "C" else stored.T  # F-order: the transposed view, read in place
    x = random_array(shape[1], np.float32)
    res = cudakit.matvec(A, x, out=poisoned(shape[0], np.float32), variant=variant)
    assert_close(res, product64(A, x[:, None])[:, 0], np.float32, shape[1], f"{variant} {shape} {order}")


@pytest.mark.parametrize("variant", [v.name for v in cudakit.variants("dot")])
def test_dot_past_2_31_elements(variant):
    import cupy

    need_free(3.2 * DOT_N * 4 / 2**30)
    a, b = random_array(DOT_N, np.float32), random_array(DOT_N, np.float32)
    res = cudakit.dot(a, b, out=poisoned((), np.float32), variant=variant)
    ref = sum(float(a[i:i + BLOCK].astype(cupy.float64) @ b[i:i + BLOCK].astype(cupy.float64))
              for i in range(0, DOT_N, BLOCK))
    assert_close(res, cupy.asarray(ref), np.float32, DOT_N, variant)


@pytest.mark.parametrize("variant", [v.name for v in cudakit.variants("matmul") if not v.tensor_core])
def test_matmul_result_past_2_31_elements(variant):
    """k = 1: C = A @ B is an outer product with 2^31 + 98,305 elements, every one a single product."""
    import cupy

    need_free(3.5 * ROWS * COLS * 4 / 2**30)
    A, B = random_array((ROWS, 1), np.float32), random_array((1, COLS), np.float32)
    out = cudakit.matmul(A, B, out=poisoned((ROWS, COLS), np.float32), variant=variant)
    diff2 = ref2 = 0.0
    for r in range(0, ROWS, CHUNK_ROWS):
        ref = A[r:r + CHUNK_ROWS].astype(cupy.float64) @ B.astype(cupy.float64)
        diff2 += float(cupy.sum((out[r:r + CHUNK_ROWS].astype(cupy.float64) - ref) ** 2))
        ref2 += float(cupy.sum(ref ** 2))
    err = (diff2 / ref2) ** 0.5
    assert err <= _check.tolerance(np.float32, 1), f"{variant}: relative error {err:.3e}"


@pytest.mark.parametrize("variant", [v.name for v in cudakit.variants("matmul") if not v.tensor_core])
def test_matmul_operand_past_2_31_elements(variant):
    need_free(2.5 * ROWS * COLS * 4 / 2**30)
    A, B = random_array((ROWS, COLS), np.float32), random_array((COLS, 2), np.float32)
    out = cudakit.matmul(A, B, out=poisoned((ROWS, 2), np.float32), variant=variant)
    assert_close(out, product64(A, B), np.float32, COLS, variant)


@pytest.mark.parametrize("order", ["C", "F"])
def test_matmul_unchecked_k_loop_past_2_31_elements(order):
    """k a multiple of every slice depth and whole tiles: the k loop without edge checks (large and small tile,
    the latter with sliced k) reads A's elements past 2^31 (C order: its last 128 rows; F order: its last slices)."""
    import cupy

    large, small = _tune.tiles(cupy.cuda.runtime.getDevice(), np.dtype(np.float32))
    mm = importlib.import_module("cudakit.matmul")  # the module (cudakit.matmul is the function)
    m, k, n = 2**16 + 128, 2**15, 128
    need_free(2.5 * m * k * 4 / 2**30)
    A, B = random_array((m, k), np.float32, order), random_array((k, n), np.float32)
    ref = product64(A, B)
    for tile in (large, small):
        out = poisoned((m, n), np.float32)
        mm.run_tile(tile, A, B, out)
        assert_close(out, ref, np.float32, k, f"{tile.name} {order}")
