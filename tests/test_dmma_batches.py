"""FP64 batches on the pipelined tensor-core kernel (cudakit/_dmma.py through cudakit/_matmul_batch.py): which
batches it takes and on which tile, the orientation of its launches, and how it reads operands off 16 bytes (split
from test_matmul_batches.py)."""
import importlib

import numpy as np
import pytest

import cudakit
from cudakit import _matmul_batch, _tune
from conftest import assert_close, matmul_ref64 as ref64, poisoned, random_array

mm = importlib.import_module("cudakit.matmul")  # the module (cudakit.matmul is the function)


@pytest.mark.gpu
@pytest.mark.parametrize("bmkn", [(50, 5, 749, 22), (30, 25, 450, 15), (20, 10, 923, 12), (3, 27, 700, 51),
                                  (1500, 20, 300, 30), (1500, 16, 300, 16),  # (not the dots kernel)
                                  (2000, 32, 40, 32), (500, 24, 17, 20), (300, 17, 109, 200), (200, 8, 145, 333)],
                         ids=str)
def test_fp64_batches_of_a_small_c_take_the_32_tile(bmkn, monkeypatch):
    """FP64 products of a small C over a long k, as many as a round of the pipelined kernel's 32 x 32 blocks holds,
    or any number of them where each C fills an eighth of that tile (from _dmma.BATCH_SHORT_DEPTH deep where C is past
    16 x 16), or a narrow C filling an eighth of its 32 x 32 tiles: that tile (_dmma.BATCH_TILES[0]), not the tiny
    kernel, whose chunks of k ran with their latency exposed, nor the register tiles; on C-order operands, an A whose
    rows are off 16 bytes, and an F-order B; outputs poisoned first."""
    import cupy

    from cudakit import _dmma

    count, m, k, n = bmkn
    device_id = cupy.cuda.Device().id
    if _tune.compute_capability(device_id) < 80:
        pytest.skip("the pipelined FP64 kernel needs sm_80")
    assert _matmul_batch.tiny_yields(m, n, k, count, device_id, 8)
    assert not _matmul_batch.tiny_yields(m, n, k, count, device_id, 4)  # (FP32 keeps the tiny kernel)
    taken = []
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    monkeypatch.setattr(_dmma, "launches", lambda *a, make=_dmma.launches, **kw: taken.append(a[3]) or make(*a, **kw))
    monkeypatch.setattr(_matmul_batch, "tiny_launches", lambda *a: pytest.fail("the tiny kernel took it"))
    for a, b in ((random_array((count, m, k), np.float64), random_array((count, k, n), np.float64)),
                 (random_array((count, m, k + 1), np.float64)[:, :, 1:], random_array((count, k, n), np.float64)),
                 (random_array((count, m, k), np.float64), random_array((count, n, k), np.float64).transpose(0, 2, 1))):
        taken.clear()
        out = poisoned((count, m, n), np.float64)
        assert cudakit.matmul(a, b, out=out) is out
        assert_close(out, ref64(a, b), np.float64, k, f"{bmkn} {a.strides} {b.strides}")
        assert taken == [_dmma.BATCH_TILES[0]], taken



def test_fp64_batches_and_short_k_products_plan_the_pipelined_tiles(monkeypatch):
    """On a modelled H100 (no GPU: 132 SMs, its shared memory, the tiles' resident blocks as their registers and
    shared memory allow): FP64 products at least _dmma.MIN_DEPTH deep whose C, all of a batch's products together,
    gives most SMs a 64 x 64 tile plan on _dmma.PLANNED, k whole (session 37: 0.61-0.81x cuBLAS on the register tiles,
    0.88-1.04x on these), a batch with the 32 x 32 tile beside them; a batch of a narrow C on the 32 x 32 tile, of
    too few tiles within one round on it or on SMALLEST; a shallower k, and one product of a narrow C or too few
    tiles, keep the register tiles; no tile past the shared memory is planned."""
    from cudakit import _dmma

    f64 = np.dtype(np.float64)
    config = _tune.default_config(f64, 90)
    monkeypatch.setattr(_tune, "tiles", lambda device_id, dtype: (_tune._BY_NAME[config["large"]],
                                                                  _tune._BY_NAME[config["small"]]))
    for module in (mm, _dmma):
        monkeypatch.setattr(module, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(mm, "_compute_capability", lambda device_id: 90)
    monkeypatch.setattr(_tune, "compute_capability", lambda device_id: 90)
    monkeypatch.setattr(mm, "resident_tiles", lambda tile, dtype, device_id: 132 * tile.min_blocks)
    shared = [227 * 1024]
    monkeypatch.setattr(_dmma, "shared_per_block", lambda device_id: shared[0])
    monkeypatch.setattr(_dmma, "resident", lambda tile, device_id: 132 * min(  # (registers: 255 a thread at most)
        shared[0] // tile.shared_bytes, 65536 // (tile.threads * 255)))
    mm._plan.cache_clear()
    try:
        def pipelined(m, k, n, count=1):
            return isinstance(mm.plan(0, f64, m, n, k, count)[0], _dmma.DmmaTile)

        assert pipelined(512, 512, 512, 64) and pipelined(253, 110, 594, 233) and pipelined(1024, 1024, 1024, 10)
        assert pipelined(1433, 235, 1593) and pipelined(4096, 64, 4096) and pipelined(3852, 48, 35072)
        assert not pipelined(3852, 47, 35072) and not pipelined(4096, 16, 4096, 8)  # k under MIN_DEPTH (a batch's)
        assert pipelined(4096, 17, 4096, 8) and pipelined(100, 20, 100, 1000)  # (a batch: from BATCH_SHORT_DEPTH)
        # one product 9 to 16 deep too (session 41: 0.93-1.30x cuBLAS); not 8 (the short-k writer), not a batch
        assert pipelined(6000, 16, 6000) and pipelined(2000, 9, 2000) and not pipelined(2000, 17, 2000)
        assert not pipelined(2001, 12, 2000) and not pipelined(2000, 12, 1999)  # an odd side: the short-k writer
        assert not pipelined(6000, 8, 6000) and not pipelined(512, 12, 512, 64) and not pipelined(536, 12, 11)
        assert not pipelined(536, 929, 11) and not pipelined(256, 512, 256)  # a narrow C; 16 tiles
        # a batch of too few tiles: the 32 x 32 tile where a round of its blocks holds the batch (session 48; the
        # model's 255 registers a thread leave it 264 blocks), or where each C fits it and fills an eighth of it; a
        # narrow C that fills an eighth of its 32 x 32 tiles: that tile at any count (session 49); else SMALLEST
        # alone within one round of its blocks (session 38)
        for m, k, n, count in ((256, 512, 256, 6), (304, 796, 57, 17)):  # (340-384 of 32 x 32)
            assert mm.plan(0, f64, m, n, k, count)[0] == _dmma.SMALLEST, (m, k, n, count)
        for m, k, n, count in ((27, 700, 51, 2), (5, 749, 22, 200), (522, 954, 8, 15), (20, 300, 30, 5000),
                               (536, 929, 11, 22), (536, 929, 11, 1000), (17, 109, 786, 1860), (32, 17, 32, 100)):
            assert mm.plan(0, f64, m, n, k, count)[0] == _dmma.BATCH_TILES[0], (m, k, n, count)
        assert mm.plan(0, f64, 8, 8, 500, 3000)[0] != _dmma.BATCH_TILES[0]  # (a C under an eighth of it, past a round)
        assert mm.plan(0, f64, 32, 32, 16, 100)[0] != _dmma.BATCH_TILES[0]  # (under BATCH_SHORT_DEPTH)
        assert mm.plan(0, f64, 536, 11, 47, 22)[0] == _dmma.BATCH_TILES[0]  # (a narrow C from BATCH_SHORT_DEPTH)
        assert not pipelined(536, 16, 11, 22)  # (under it)
        # planned batches weigh the 32 x 32 tile beside PLANNED: it pads 200 x 200 and 96 x 96 less than 64 x 64
        for m, k, n, count in ((200, 500, 200, 10), (96, 256, 96, 200)):
            assert mm.plan(0, f64, m, n, k, count)[0] == _dmma.BATCH_TILES[0], (m, k, n, count)
        for m, k, n, count in ((512, 512, 512, 64), (256, 256, 256, 20), (100, 300, 100, 50), (64, 64, 64, 500)):
            assert mm.plan(0, f64, m, n, k, count)[0] in _dmma.PLANNED, (m, k, n, count)
        assert mm.plan(0, f64, 200, 200, 500, 1)[0] != _dmma.BATCH_TILES[0]  # (one product: PLANNED only)
        for limit, wanted in ((70 * 1024, _dmma.SMALLEST), (60 * 1024, None)):  # room for 64 x 64 only; for none
            shared[0] = limit
            mm._plan.cache_clear()
            for count in (1, 64):
                tile = mm.plan(0, f64, 4096, 4096, 4096, count)[0]
                assert tile == wanted if wanted else not isinstance(tile, _dmma.DmmaTile), (limit, count, tile)
    finally:
        mm._plan.cache_clear()



def test_kept_batch_launches_follow_each_calls_operands_whichever_address_leads(monkeypatch):
    """A batch's launches are kept and rebased on the next call's A, B and C: the pipelined FP64 kernel's C^T = B^T @
    A^T launches lead with B's address, and must move with B's."""
    from cudakit import _compile

    seen = []
    monkeypatch.setattr(_compile, "launch", lambda fn, grid, block, args, shared=0: seen.append(args[:4]))
    a, b, c = 1000, 2000, 3000
    b_first = [("fn", (1,), (32,), (b + 64, a + 8, c + 16, 7), 0)]
    _matmul_batch._rebased(b_first, a, b, c, True)(5000, 9000, 7000)
    a_first = [("fn", (1,), (32,), (a + 8, b + 64, c + 16, 7), 0)]
    _matmul_batch._rebased(a_first, a, b, c, False)(5000, 9000, 7000)
    assert seen == [(9064, 5008, 7016, 7), (5008, 9064, 7016, 7)]



def test_the_pipelined_kernel_reads_b_first_for_two_c_order_operands():
    """_dmma.launches runs C^T = B^T @ A^T (B's address first) where A's k and B's columns are contiguous, and the
    batch cache rebases on that answer: operands described by shape, strides and address alone."""
    from types import SimpleNamespace

    from cudakit import _dmma

    def operand(rows, cols, order):
        strides = (cols * 8, 8) if order == "C" else (8, rows * 8)
        return SimpleNamespace(shape=(rows, cols), strides=strides, itemsize=8, data=SimpleNamespace(ptr=4096))

    first = {(a, b): _dmma.reads_b_first(operand(64, 32, a), operand(32, 48, b)) for a in "CF" for b in "CF"}
    assert first == {("C", "C"): True, ("C", "F"): False, ("F", "C"): False, ("F", "F"): False}



@pytest.mark.gpu
@pytest.mark.parametrize("orders", ["CC", "FC"])
def test_a_batch_on_the_pipelined_kernel_turns_its_tile_with_the_launch(orders, monkeypatch):
    """A batch read B first (two C-order operands: C^T = B^T @ A^T) launches the planned tile with its sides exchanged
    (_dmma.oriented), so that the grid pads C^T as the plan padded C; a batch read A first keeps the planned tile.
    The products are right either way, the output poisoned first."""
    import cupy

    from cudakit import _dmma

    wide = _dmma.DmmaTile(64, 128, 16, 32, 64, 3)
    assert wide in _dmma.TILES and _dmma.oriented(wide, True) != wide
    monkeypatch.setattr(mm, "plan", lambda device_id, dtype, m, n, k, count=1, **kw: (wide, 1, k))
    monkeypatch.setattr(_matmul_batch, "_BATCH_LAUNCHES", {})
    launched = []
    original = _dmma.launches
    monkeypatch.setattr(_dmma, "launches", lambda a, b, out, tile, **kw: launched.append(tile) or
                        original(a, b, out, tile, **kw))
    count, m, k, n = 5, 309, 202, 324
    a = random_array((count, m, k), np.float64)
    if orders[0] == "F":
        a = cupy.ascontiguousarray(a.transpose(0, 2, 1)).transpose(0, 2, 1)
    b = random_array((count, k, n), np.float64)
    out = poisoned((count, m, n), np.float64)
    cudakit.matmul(a, b, out=out)
    assert_close(out, ref64(a, b), np.float64, k, f"{orders} {count} x {m}x{k}x{n}")
    assert launched == [_dmma.oriented(wide, True) if orders == "CC" else wide], launched



def _double_operand(rows, cols, ld, order, offset):
    """A float64 operand described by shape, strides and address: rows x cols, lines ld doubles apart, `offset`
    doubles past 4096."""
    from types import SimpleNamespace

    strides = (ld * 8, 8) if order == "C" else (8, ld * 8)
    return SimpleNamespace(shape=(rows, cols), strides=strides, itemsize=8, nbytes=rows * cols * 8,
                           data=SimpleNamespace(ptr=4096 + 8 * offset))



def test_the_pipelined_kernel_reads_16_byte_chunks_only_where_aligned():
    """_dmma.reads_pairs: an operand with a unit stride is read in 16-byte chunks where its base is 16-byte aligned
    and its ld even; otherwise its off lines go in 8-byte halves (an odd ld: every other line; an offset base with an
    even ld: every line)."""
    from cudakit import _dmma

    for rows, cols, ld, order, offset, pairs in [(64, 32, 32, "C", 0, True), (64, 31, 31, "C", 0, False),
                                                 (64, 32, 33, "C", 0, False), (64, 32, 32, "C", 1, False),
                                                 (63, 32, 63, "F", 0, False), (64, 32, 64, "F", 2, True),
                                                 (1, 7, 7, "C", 0, False), (1, 8, 8, "C", 0, True)]:
        x = _double_operand(rows, cols, ld, order, offset)
        assert _dmma.reads_pairs(x, 0) == pairs, (rows, cols, ld, order, offset)
        assert _dmma.reads_pairs(_double_operand(cols, rows, ld, "F" if order == "C" else "C", offset), 1) == pairs



def test_the_pipelined_kernel_pads_misaligned_operands_only_with_flops_enough_a_byte(monkeypatch):
    """_dmma._operands pads (matmul.aligned_operand) the operands of a product that does at least
    PAD_MIN_FLOPS_PER_BYTE flops per byte of its misaligned operands, an operand whose every line is off counted
    twice; below that, and for aligned operands, it reads them in place."""
    from cudakit import _dmma

    padded = []
    monkeypatch.setattr(mm, "aligned_operand", lambda x, row_axis: padded.append(row_axis) or x)
    threshold = _dmma.PAD_MIN_FLOPS_PER_BYTE
    k = 41
    odd_a = _double_operand(64, k, k, "C", 0)  # 2 * 64 * n * k flops against 64 * k * 8 bytes: pads from n = 4 t
    off_a = _double_operand(64, k, k + 1, "C", 1)  # every line off (counted twice): from n = 8 t
    even_a = lambda m: _double_operand(m, k, k + 1, "C", 0)
    even_b = lambda n: _double_operand(k, n, n, "C", 0)  # (n even)
    odd_b = _double_operand(k, 4 * threshold + 1, 4 * threshold + 1, "C", 0)  # B's odd ld: pads from m = 4 t
    for a, b, pads in [(odd_a, even_b(4 * threshold), True), (odd_a, even_b(4 * threshold - 2), False),
                       (off_a, even_b(8 * threshold), True), (off_a, even_b(8 * threshold - 2), False),
                       (even_a(4 * threshold), odd_b, True), (even_a(4 * threshold - 2), odd_b, False),
                       (even_a(64), even_b(10**6), False)]:
        padded.clear()
        assert _dmma._operands(a, b) == (a, b)
        assert (padded == [0, 1]) == pads and (padded == []) == (not pads), (a.shape, b.shape, padded)
