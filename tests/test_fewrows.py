"""Batches of products whose C has few rows (kernels/matmul_fewrows.cu through cudakit._fewrows).

GPU-less: every instantiation compiles for every architecture the installed NVRTC builds, with an empty log and no
spills; the plan's units cover C and fit the block; which batches the route takes. On a GPU: every columns-a-lane
width, several units a block, products cut into chunks, narrow units of many k slices, k short of a slice round, on
C-order, F-order A, padded and offset rows, broadcast operands and a batch of two axes, through cudakit.matmul
(the route taken is checked) against float64 by relative error within _check.tolerance(dtype, k); outputs start
poisoned, inputs are fresh draws.
"""
from types import SimpleNamespace

import numpy as np
import pytest

import cudakit
from cudakit import _compile, _fewrows, _matmul_batch
from conftest import (assert_close, assert_compiles_without_spills, assert_products_close, matmul_ref64 as ref64,
                      poisoned, random_array)

DTYPES = (np.float32, np.float64)
# (count, m, k, n): one, two and four columns a lane; several units a block, the last block's partly past the batch
# (many products of a short k); chunks of a wide C; narrow units (few products over a long k); a k not a whole round
# of slices; each m taken
BATCHES = [(174, 4, 707, 6), (31, 3, 912, 117), (50, 2, 11, 78), (7, 3, 117, 33), (3, 2, 4096, 64),
           (13, 4, 6, 72), (40, 2, 1, 270), (9, 3, 300, 1000), (2000, 2, 3, 5), (1500, 4, 40, 70), (5, 4, 67, 129)]
ROWS_F32 = [(60, 5, 130, 45), (9, 6, 1000, 200)]


def test_every_instantiation_compiles_warning_free_and_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs the test extra (NVRTC)")
    assert_compiles_without_spills(_fewrows.FAMILY, _fewrows.instantiation_groups(), _compile.nvrtc_archs())


@pytest.mark.parametrize("m, n, k, count", [(2, 1, 1, 2), (4, 6, 707, 174), (3, 117, 912, 31), (2, 78, 11, 5813),
                                            (6, 10**6, 3, 2), (3, 33, 117, 5093), (2, 5000, 10**6, 2),
                                            (4, 2, 2, 10**6), (5, 31, 64, 100), (6, 257, 9, 40)])
def test_the_plan_covers_c_with_units_that_fit_the_block(m, n, k, count):
    p = _fewrows.plan(m, n, k, count)
    assert p.cols in _fewrows.COLS and 1 <= p.width <= _fewrows.MAX_WIDTH
    assert p.width * p.slices * p.units <= _fewrows.THREADS and p.slices >= 1 and p.units >= 1
    assert p.chunks * p.width * p.cols >= n > (p.chunks - 1) * p.width * p.cols  # every chunk has columns
    assert p.slices == _fewrows.THREADS // p.width or p.slices == -(-k // _fewrows.SLICE_DEPTH)
    assert p.blocks(count) * p.units >= count * p.chunks


def test_the_test_batches_plan_every_layout_of_units():
    plans = [_fewrows.plan(m, n, k, count) for count, m, k, n in BATCHES]
    assert {p.cols for p in plans} == set(_fewrows.COLS)
    assert any(p.units > 1 and count * p.chunks % p.units for p, (count, *_) in zip(plans, BATCHES))
    assert any(p.chunks > 1 for p in plans) and any(p.width < 8 and p.slices > 32 for p in plans)


def test_the_route_takes_batches_of_a_few_rows():
    takes = _fewrows.takes
    assert takes(2, 78, 11, 5813, 4) and takes(6, 78, 11, 2, 4) and takes(4, 33, 117, 5093, 8)
    assert not takes(7, 78, 11, 5813, 4) and not takes(5, 33, 117, 5093, 8)  # taller C: the tiles
    assert not takes(1, 78, 11, 5813, 4) and not takes(3, 78, 11, 1, 4)  # one row; one product (2-D routes)
    assert not takes(3, _fewrows.MAX_SIDE + 1, 11, 2, 4) and not takes(3, 11, _fewrows.MAX_SIDE + 1, 2, 4)


def test_the_kernel_reads_b_with_unit_column_stride_only():
    def operand(shape, strides):
        return SimpleNamespace(shape=shape, strides=tuple(4 * s for s in strides), itemsize=4)

    a, a_f = operand((3, 5), (5, 1)), operand((3, 5), (1, 3))
    assert _fewrows.reads(a, operand((5, 7), (7, 1))) and _fewrows.reads(a_f, operand((5, 7), (9, 1)))
    assert not _fewrows.reads(a, operand((5, 7), (1, 5)))  # F-order B
    assert not _fewrows.reads(a, operand((5, 7), (14, 2)))  # every other column
    assert _fewrows.reads(a, operand((5, 1), (1, 1)))  # one column


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bmkn", BATCHES + ROWS_F32, ids=str)
def test_batches_of_a_few_rows(dtype, bmkn, monkeypatch):
    import cupy

    count, m, k, n = bmkn
    if not _fewrows.takes(m, n, k, count, np.dtype(dtype).itemsize):
        pytest.skip(f"{np.dtype(dtype)} batches of {m} rows take another route")
    taken = []
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    monkeypatch.setattr(_matmul_batch, "tiny_tile", lambda *args: None)  # (it takes some of these first)
    monkeypatch.setattr(_fewrows, "launches",
                        lambda *args, run=_fewrows.launches: taken.append(args[4]) or run(*args))
    half = -(-count // 2)
    operands = [(random_array((count, m, k), dtype), random_array((count, k, n), dtype)),
                (random_array((count, k, m), dtype).transpose(0, 2, 1), random_array((count, k, n + 3), dtype)[:, :, 1:n + 1]),
                (random_array((count, m, k + 1), dtype)[:, :, 1:], random_array((count, k, n), dtype)),
                (random_array((m, k), dtype), random_array((count, k, n), dtype)),
                (random_array((count, m, k), dtype), cupy.broadcast_to(random_array((k, n), dtype), (count, k, n))),
                (random_array((2, half, m, k), dtype), random_array((1, half, k, n), dtype))]
    assert_products_close(operands, dtype, k, str(bmkn))
    assert taken == [count] * 5 + [half] * 2, taken


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_tiny_kernel_keeps_the_batches_it_takes(dtype, monkeypatch):
    count, m, k, n = 2000, 4, 8, 8
    assert _matmul_batch.tiny_tile(m, n, k, count / 132) and _fewrows.takes(m, n, k, count, np.dtype(dtype).itemsize)
    taken = []
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    monkeypatch.setattr(_fewrows, "launches", lambda *args: pytest.fail("the few-rows kernel took a tiny batch"))
    monkeypatch.setattr(_matmul_batch, "tiny_launches",
                        lambda *args, run=_matmul_batch.tiny_launches: taken.append(args[4]) or run(*args))
    a, b = random_array((count, m, k), dtype), random_array((count, k, n), dtype)
    out = poisoned((count, m, n), dtype)
    cudakit.matmul(a, b, out=out)
    assert_close(out, ref64(a, b), dtype, k, "tiny batch")
    assert taken == [count]


@pytest.mark.gpu
def test_an_f_order_b_takes_another_route(monkeypatch):
    count, m, k, n = 40, 3, 50, 20
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    monkeypatch.setattr(_fewrows, "launches", lambda *args: pytest.fail("the few-rows kernel took an F-order B"))
    a, b = random_array((count, m, k), np.float32), random_array((count, n, k), np.float32).transpose(0, 2, 1)
    out = poisoned((count, m, n), np.float32)
    cudakit.matmul(a, b, out=out)
    assert_close(out, ref64(a, b), np.float32, k, "F-order B")
