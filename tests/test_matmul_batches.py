"""Drop-in batches of products (issue 17): batches of small, tiny, short-k, tiny-C and one-row products, each checked
against float64 with the path its planner picks (split from test_shapes.py; the pipelined FP64 kernel's batches are in
test_dmma_batches.py)."""
import importlib
import math

import numpy as np
import pytest

import cudakit
from cudakit import _fewrows, _matmul_batch, _matmul_routes, _tune
from conftest import assert_close, assert_products_close, matmul_ref64 as ref64, poisoned, random_array

mm = importlib.import_module("cudakit.matmul")  # the module (cudakit.matmul is the function)
mv = importlib.import_module("cudakit.matvec")

DTYPES = [np.float32, np.float64]


SMALL_BATCHES = [(40, 32, 32, 32), (7, 1, 3, 149), (9, 8, 2, 264), (5, 29, 7, 246), (6, 43, 64, 4), (3, 300, 17, 1),
                 (4, 64, 30, 64), (3, 60, 20, 100), (2, 17, 33, 200), (5, 110, 16, 70), (3, 16, 20, 60),
                 (4, 120, 40, 7), (6, 64, 24, 32),
                 (4, 20, 16, 68), (5, 120, 16, 16)]  # (FP64's 32 x 32 and 64 x 16 tiles, under the DMMA tiles' k)
SHORT_K_BATCHES = [(3, 70, 9, 131), (2, 130, 5, 257), (5, 511, 2, 31), (4, 100, 16, 100), (3, 3000, 1, 7)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bmkn", SHORT_K_BATCHES, ids=str)
def test_batches_of_a_short_k_past_the_small_kernel_take_the_short_k_writer(dtype, bmkn, monkeypatch):
    """C-order, F-order and broadcast operands, a batch of two axes that is not one evenly spaced run; the output
    poisoned first."""
    import cupy
    from cudakit import _shortk

    count, m, k, n = bmkn
    assert _matmul_batch.past_small_limits(m, n, k) and _shortk.takes(np.dtype(dtype).itemsize, k)
    taken = []
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    monkeypatch.setattr(_shortk, "launches", lambda *args, run=_shortk.launches: taken.append(args[4]) or run(*args))
    operands = [(random_array((count, m, k), dtype), random_array((count, k, n), dtype)),
                (random_array((count, k, m), dtype).transpose(0, 2, 1), random_array((count, n, k), dtype).transpose(0, 2, 1)),
                (random_array((m, k), dtype), random_array((count, k, n), dtype)),
                (random_array((count, m, k), dtype), cupy.broadcast_to(random_array((k, n), dtype), (count, k, n))),
                (random_array((2, count, m, k), dtype), random_array((1, count, k, n), dtype)[:, ::-1])]
    assert_products_close(operands, dtype, k, str(bmkn))
    assert taken[:4] == [count] * 4 and len(taken) >= 5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bmkn", SMALL_BATCHES, ids=str)
def test_batches_of_small_products_take_the_small_kernel(dtype, bmkn, monkeypatch):
    """Batches of short-k or small-C products on the small-product kernel: C order, F-order and broadcast
    operands, k shorter than a slice, a partial last slice, every tile that the planner picks among these shapes
    (FP64 batches that the pipelined DMMA kernel takes first skip it: tiny_yields, pipelined_takes); the output
    poisoned first."""
    import cupy
    from cudakit import _dmma

    count, m, k, n = bmkn
    item, device_id = np.dtype(dtype).itemsize, cupy.cuda.Device().id
    tile = _matmul_batch.small_tile(m, n, k, item)
    assert tile is not None, bmkn
    to_pipelined = (_matmul_batch.tiny_yields(m, n, k, count, device_id, item) if _matmul_batch.tiny_tile(m, n, k)
                    else _matmul_batch.pipelined_takes(m, n, k, count, device_id, item))
    taken, pipelined = [], []
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    monkeypatch.setattr(_matmul_batch, "small_launches", lambda *args, run=_matmul_batch.small_launches: taken.append(args[0]) or run(*args))
    monkeypatch.setattr(_dmma, "launches",
                        lambda *a, make=_dmma.launches, **kw: pipelined.append(a[3]) or make(*a, **kw))
    operands = [(random_array((count, m, k), dtype), random_array((count, k, n), dtype)),
                (random_array((count, k, m), dtype).transpose(0, 2, 1), random_array((count, n, k), dtype).transpose(0, 2, 1)),
                (random_array((m, k), dtype), random_array((count, k, n), dtype)),
                (random_array((count, m, k), dtype), cupy.broadcast_to(random_array((k, n), dtype), (count, k, n)))]
    for a, b in operands:
        pipelined.clear()
        out = poisoned((count, m, n), dtype)
        assert cudakit.matmul(a, b, out=out) is out
        assert_close(out, ref64(a, b), dtype, k, f"{bmkn} {a.strides} {b.strides}")
        # (n = 1: the matvec kernels take a stack of C-contiguous matrices first)
        assert bool(pipelined) == to_pipelined or (n == 1 and not pipelined), (a.strides, b.strides, pipelined)
    assert not taken if to_pipelined else taken and set(taken) == {tile}, taken


TINY_BATCHES = [(50, 32, 32, 32), (7, 16, 16, 16), (5, 17, 1, 5), (6, 2, 63, 31), (3, 32, 64, 20), (4, 9, 12, 32),
                (3, 30, 5, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bmkn", TINY_BATCHES, ids=str)
def test_batches_of_tiny_products_take_the_tiny_kernel(dtype, bmkn, monkeypatch):
    """Batches of products at most 32 x 32 on the tiny-product kernel wherever the rows of A and B are contiguous:
    16-byte copies (aligned rows) and element copies (odd k or n, rows cut from wider arrays, a base off 16 bytes),
    a broadcast operand, both tile sides, partial tiles and a k past every vector; F-order operands on the small
    kernel (but with k = 1, whose rows of A are one element); FP64 batches the 32 x 32 DMMA tile takes skip it
    (tiny_yields). The output poisoned first."""
    import cupy
    from cudakit import _dmma

    count, m, k, n = bmkn
    tile = _matmul_batch.tiny_tile(m, n, k)
    assert tile == (16 if m <= 16 else 32, 16 if n <= 16 else 32)
    yields = _matmul_batch.tiny_yields(m, n, k, count, cupy.cuda.Device().id, np.dtype(dtype).itemsize)
    taken, pipelined = [], []
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})  # each geometry's launches made anew, here
    monkeypatch.setattr(_fewrows, "takes", lambda *args: False)  # (it takes some of these first)
    monkeypatch.setattr(_dmma, "launches",
                        lambda *a, make=_dmma.launches, **kw: pipelined.append(a[3]) or make(*a, **kw))
    monkeypatch.setattr(_matmul_batch, "tiny_launches",
                        lambda *args, run=_matmul_batch.tiny_launches: taken.append(run(*args)) or taken[-1])
    wide = random_array((count, m, k + 3), dtype)
    operands = [(random_array((count, m, k), dtype), random_array((count, k, n), dtype), True),
                (wide[:, :, 1:k + 1], random_array((count, k, n + 4), dtype)[:, :, :n], True),
                (random_array((m, k), dtype), random_array((count, k, n), dtype), True),
                (random_array((count, k, m), dtype).transpose(0, 2, 1), random_array((count, k, n), dtype), k == 1)]
    for a, b, tiny in operands:
        taken.clear()
        pipelined.clear()
        out = poisoned((count, m, n), dtype)
        assert cudakit.matmul(a, b, out=out) is out
        assert_close(out, ref64(a, b), dtype, k, f"{bmkn} {a.strides} {b.strides}")
        assert [launches is not None for launches in taken] == ([] if yields else [tiny]), (a.strides, b.strides)
        assert pipelined == ([_dmma.BATCH_TILES[0]] if yields else []), (a.strides, b.strides, pipelined)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", [(10, 923, 12), (32, 65, 32), (5, 131, 20), (16, 200, 4), (32, 132, 32), (6, 300, 8),
                                 (5, 131, 7), (8, 641, 8)], ids=str)
def test_many_tiny_products_over_a_long_k_take_the_tiny_kernel_chunk_by_chunk(dtype, mkn, monkeypatch):
    """Batches of enough products an SM, k past TINY_MAX_K: the tiny kernel, a chunk of k at a time (a last chunk
    partial; k past TINY_GROUPS[-1] split chunks shared among groups), where C is more than one part of the dots
    kernel or k at most TINY_ONE_PART_MAX_K: 16-byte copies (contiguous rows whose length is whole vectors; rows
    padded to them, a last vector partial) and element copies (rows one element off 16 bytes); an F-order A
    elsewhere. Outputs poisoned first."""
    import cupy

    m, k, n = mkn
    chunks = -(-k // _matmul_batch.TINY_CHUNK) / _matmul_batch.TINY_LONG_K_CHUNKS[np.dtype(dtype).itemsize]
    per_sm = max(_matmul_batch.TINY_LONG_K_PER_SM, chunks)
    count = math.ceil(per_sm * cupy.cuda.Device().attributes["MultiProcessorCount"]) + 1
    if dtype == np.float64:  # (past one round of the pipelined kernel's 32 x 32 blocks, which takes fewer: below)
        from cudakit import _dmma

        count = max(count, _dmma.resident(_dmma.BATCH_TILES[0], cupy.cuda.Device().id) + 1)
    taken = []
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    monkeypatch.setattr(_fewrows, "takes", lambda *args: False)  # (it takes some of these first)
    monkeypatch.setattr(_matmul_batch, "tiny_launches",
                        lambda *args, run=_matmul_batch.tiny_launches: taken.append(run(*args)) or taken[-1])
    width = 16 // np.dtype(dtype).itemsize
    padded = -(-k // width) * width + width
    parts = m > _matmul_routes.DOTS_PART[0] or n > _matmul_routes.DOTS_PART[1]
    tiny = (parts or k <= _matmul_batch.TINY_ONE_PART_MAX_K) and not _matmul_batch.tiny_yields(
        m, n, k, count, cupy.cuda.Device().id, np.dtype(dtype).itemsize)
    operands = [(random_array((count, m, k), dtype), random_array((count, k, n), dtype), tiny),
                (random_array((count, m, padded), dtype)[:, :, :k], random_array((count, k, n), dtype), tiny),
                (random_array((count, m, padded + 1), dtype)[:, :, 1:k + 1], random_array((k, n), dtype), tiny),
                (random_array((count, k, m), dtype).transpose(0, 2, 1), random_array((count, k, n), dtype), False)]
    for a, b, tiny in operands:
        taken.clear()
        out = poisoned((count, m, n), dtype)
        assert cudakit.matmul(a, b, out=out) is out
        assert_close(out, ref64(a, b), dtype, k, f"{count} x {mkn} {a.strides} {b.strides}")
        assert [launches is not None for launches in taken] == ([True] if tiny else []), (a.strides, b.strides)


def test_the_tiny_kernel_takes_small_c_and_a_long_k_only_in_many_products():
    assert _matmul_batch.tiny_tile(32, 32, 64) == (32, 32) and _matmul_batch.tiny_tile(3, 20, 1) == (16, 32)
    assert _matmul_batch.tiny_tile(33, 8, 8) is None and _matmul_batch.tiny_tile(8, 8, 65) is None
    few = _matmul_batch.TINY_LONG_K_PER_SM  # products an SM from which a longer k takes it too ...
    assert _matmul_batch.tiny_tile(8, 8, 65, few) == (16, 16) and _matmul_batch.tiny_tile(8, 8, 65, few - 0.1) is None
    groups = _matmul_batch.TINY_GROUPS[-1]
    for item, chunks in _matmul_batch.TINY_LONG_K_CHUNKS.items():  # ... and one for every few rounds of k that each
        deep = few * chunks * groups * _matmul_batch.TINY_SPLIT_CHUNK  # round of the groups' chunks takes
        assert _matmul_batch.tiny_groups(deep, few) == groups
        assert _matmul_batch.tiny_tile(9, 8, deep, few, item) == (16, 16)
        assert _matmul_batch.tiny_tile(9, 8, deep + 1, few, item) is None
    one_part = _matmul_batch.TINY_ONE_PART_MAX_K  # a C of one 8 x 8 part deeper than this: the dots kernel
    assert _matmul_batch.tiny_tile(8, 8, one_part, 100) == (16, 16) and _matmul_batch.tiny_tile(8, 8, one_part + 1, 100) is None
    assert _matmul_batch.tiny_tile(9, 8, one_part + 1, 100) == (16, 16)
    assert _matmul_batch.tiny_tile(1, 8, 8) is None and _matmul_batch.tiny_tile(8, 1, 8) is None  # matvec's


def test_the_tiny_kernel_splits_a_deep_k_among_groups_where_products_are_few():
    split, below, groups = _matmul_batch.TINY_SPLIT_CHUNK, _matmul_batch.TINY_SPLIT_BELOW, _matmul_batch.TINY_GROUPS
    assert _matmul_batch.tiny_groups(groups[-1] * split, 1) == 1  # each group would take one chunk at most
    assert _matmul_batch.tiny_groups(groups[-1] * split + 1, below - 0.1) == groups[-1]
    assert _matmul_batch.tiny_groups(10_000, below) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", [(32, 129, 32), (5, 200, 7), (17, 5, 30), (16, 97, 16), (32, 1000, 3)], ids=str)
def test_the_tiny_kernel_with_groups_sharing_k(dtype, mkn):
    """The tiny kernel's launch with k cut among TINY_GROUPS[-1] groups, whatever k: a last pass where some groups
    have no chunk or a partial one, a k shorter than one group's chunk (the groups' sums then take more shared memory
    than their staging), 16-byte and element copies, partial tiles; the batch's output poisoned first."""
    from cudakit._compile import launch

    m, k, n = mkn
    width = 16 // np.dtype(dtype).itemsize
    padded = -(-k // width) * width
    for a, b in ((random_array((3, m, padded), dtype)[:, :, :k], random_array((3, k, -(-n // width) * width), dtype)[:, :, :n]),
                 (random_array((3, m, k + 1), dtype)[:, :, 1:], random_array((3, k, n + 1), dtype)[:, :, :n])):
        out = poisoned((3, m, n), dtype)
        steps = tuple(x.strides[0] // x.itemsize for x in (a, b, out))
        for args in _matmul_batch.tiny_launches(_matmul_batch.tiny_tile(m, n, 1), a[0], b[0], out.data.ptr, 3, steps,
                                                _matmul_batch.TINY_GROUPS[-1]):
            launch(*args)
        assert_close(out, ref64(a, b), dtype, k, f"{mkn} {a.strides} {b.strides}")


DOTS_BATCHES = [(6, 753, 4), (2, 128, 2), (16, 1000, 2), (2, 500, 16), (3, 300, 5), (3, 2049, 5), (4, 4100, 8),
                (8, 65, 8), (16, 256, 13)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mkn", DOTS_BATCHES, ids=str)
def test_batches_of_tiny_c_with_a_deeper_k_take_the_dots_kernel(dtype, mkn, monkeypatch):
    """A batch of products whose C is at most 16 x 16 with k past the small-product kernel's (one block's stride
    where C has several parts), enough of them to fill the GPU, the tiny kernel kept out: the dots kernel, a block per
    part of each C; C-order, F-order and broadcast operands, a batch of two axes whose products are not one evenly
    spaced run (two launches); the output poisoned first."""
    import cupy

    m, k, n = mkn
    parts = -(-m // _matmul_routes.DOTS_PART[0]) * -(-n // _matmul_routes.DOTS_PART[1])
    count = 2 * -(-_matmul_routes._dots_resident(np.dtype(dtype), 0) // (2 * parts))
    assert _matmul_batch.batch_dots_takes(m, k, n, count, 0, np.dtype(dtype))
    assert not _matmul_batch.batch_dots_takes(m, k, n, count - 2, 0, np.dtype(dtype))
    taken = []
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    monkeypatch.setattr(_matmul_batch, "tiny_tile", lambda *args: None)  # (off for every shape: it takes some first)
    monkeypatch.setattr(_fewrows, "takes", lambda *args: False)  # (it takes a C of few rows first)
    monkeypatch.setattr(_matmul_routes, "dots_launches",
                        lambda *args, make=_matmul_routes.dots_launches: taken.append(args[3]) or make(*args))
    half = count // 2
    operands = [(random_array((count, m, k), dtype), random_array((count, k, n), dtype)),
                (random_array((count, k, m), dtype).transpose(0, 2, 1), random_array((count, n, k), dtype).transpose(0, 2, 1)),
                (random_array((m, k), dtype), random_array((count, k, n), dtype)),
                (random_array((count, m, k), dtype), cupy.broadcast_to(random_array((k, n), dtype), (count, k, n))),
                (random_array((2, half, m, k), dtype), random_array((1, half, k, n), dtype))]
    assert_products_close(operands, dtype, k, str(mkn))
    assert taken == [count] * 4 + [half] * 2


def test_the_dots_kernel_takes_batches_of_tiny_c_past_the_small_kernel(monkeypatch):
    monkeypatch.setattr(_matmul_routes, "_dots_resident", lambda dtype, device_id: 1000)
    dots = lambda m, k, n, count: _matmul_batch.batch_dots_takes(m, k, n, count, 0, np.dtype(np.float32))
    assert dots(6, 753, 4, 1000) and not dots(6, 753, 4, 999)  # a round of resident blocks at least
    assert dots(9, 753, 16, 250) and not dots(9, 753, 16, 249)  # four 8 x 8 parts a product
    assert dots(8, 65, 8, 5000) and not dots(8, 64, 8, 5000)  # k = 64: the small-product kernel's
    assert dots(9, 256, 9, 5000) and not dots(9, 255, 9, 5000)  # several parts: one block's stride of k at least
    assert not dots(17, 753, 4, 5000) and not dots(4, 753, 17, 5000)  # a side past 16: the tiles
    assert not dots(1, 753, 4, 5000) and not dots(6, 753, 1, 5000)  # one row or column: the matvec kernels


def test_a_kept_launch_reads_each_calls_padded_copies(monkeypatch):
    """A big misaligned product's route keeps its tile launch and pads each call's operands first: the launch reads
    the copies made in that call (A's here; B is read in place), never the first call's."""
    from types import SimpleNamespace

    array = lambda ptr: SimpleNamespace(data=SimpleNamespace(ptr=ptr))
    copies, seen = iter([array(7000), array(8000)]), []
    monkeypatch.setattr(_matmul_routes.mm, "aligned_operand", lambda x, row_axis: next(copies))
    monkeypatch.setattr(_matmul_routes, "launch", lambda fn, grid, block, args, shared: seen.append(args))
    run = _matmul_routes._padding_first("fn", (1,), (32,), (5, 6), 0, True, False)
    run(array(1004), array(2000), array(3000))
    run(array(1104), array(2100), array(3100))
    assert seen == [(7000, 2000, 3000, 5, 6), (8000, 2100, 3100, 5, 6)]


def test_the_small_kernel_takes_short_k_and_small_c_and_pads_c_least():
    assert _matmul_batch.small_tile(32, 32, 32) == (32, 32)
    assert _matmul_batch.small_tile(1, 149, 3) == (8, 128)
    assert _matmul_batch.small_tile(300, 1, 17) == (128, 8)
    assert _matmul_batch.small_tile(64, 32, 24) == (64, 32)
    assert _matmul_batch.small_tile(1, 149, 3, 8) == (16, 64)  # FP64 takes no 8 x 128 tile
    assert _matmul_batch.small_tile(64, 64, 33) is None  # more multiply-adds than SMALL_MAX_MACS
    assert _matmul_batch.small_tile(17, 200, 33) == (32, 64)  # one row of tiles: B read once (8 x 128: three times)
    assert _matmul_batch.small_tile(8, 128, 64) == (8, 128)  # ... where it is one row already, the least padding
    assert _matmul_batch.small_tile(64, 64, 65) is None
    assert _matmul_batch.small_tile(64, 129, 8) == (64, 64)  # past SMALL_MAX_C, a short k: the short-k tile ...
    assert _matmul_batch.small_tile(64, 129, _matmul_batch.SHORT_K_F32_BATCH + 1) is None  # ... up to its depth
    assert _matmul_batch.small_tile(_tune.NARROW_SIDE, 9000, 8) is None  # ... for a C past NARROW_SIDE on both sides
    assert _matmul_batch.small_tile(512, 512, 512) is None


# (a's shape, B's shape, whether the batch is one evenly spaced run the column-major matvec kernel takes)
ROW_BATCHES = [((7578, 1, 3), (7578, 3, 149), True), ((9, 1, 370), (9, 370, 589), True), ((5, 1, 64), (64, 40), True),
               ((1, 40), (6, 40, 33), True), ((4, 3, 1, 17), (4, 3, 17, 1000), True), ((3, 1, 8), (3, 8, 2), True),
               ((2, 1, 1, 8), (2, 5, 8, 12), False)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", ROW_BATCHES, ids=str)
def test_batches_of_one_row_products_take_the_column_major_matvec_kernel(dtype, shapes, monkeypatch):
    """A batch of 1 x k @ k x n products is B_i.T @ a_i: one launch of the column-major matvec kernel where the
    batch is one evenly spaced run (broadcast operands included); otherwise the tiles. Output poisoned first."""
    a_shape, b_shape, one_run = shapes
    taken = []
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})  # (planned afresh)
    monkeypatch.setattr(mv, "column_batch_launcher",
                        lambda *args, make=mv.column_batch_launcher: taken.append(args[2]) or make(*args))
    a, b = random_array(a_shape, dtype), random_array(b_shape, dtype)
    want = ref64(a, b)
    out = poisoned(want.shape, dtype)
    assert cudakit.matmul(a, b, out=out) is out
    assert_close(out, want, dtype, a_shape[-1], str(shapes))
    assert bool(taken) == one_run, taken
