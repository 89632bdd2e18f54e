"""The short-k writer (kernels/matmul_shortk.cu through cudakit._shortk): products of a k of at most 16, bound by
writing C.

GPU-less: every instantiation compiles for every architecture the installed NVRTC builds, with an empty log and no
spills; the planner's layouts and rows. On a GPU: every layout and depth on odd shapes (partial column tiles and row
blocks, k short of its depth and equal to it), C- and F-order, offset, reversed and broadcast operands, batches of
several launches' worth, against float64 cupy.matmul by relative error within _check.tolerance(dtype, k); outputs
start poisoned, inputs are fresh draws.
"""
import numpy as np
import pytest

from cudakit import _compile, _shortk
from conftest import assert_close, assert_compiles_without_spills, poisoned, random_array

DTYPES = (np.float32, np.float64)


def ref64(A, B):
    import cupy

    return cupy.matmul(A.astype(cupy.float64), B.astype(cupy.float64))


def test_every_instantiation_compiles_warning_free_and_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs the test extra (NVRTC)")
    assert_compiles_without_spills(_shortk.FAMILY, _shortk.instantiation_groups(), _compile.nvrtc_archs())


@pytest.mark.parametrize("itemsize", (4, 8))
@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (6832, 58258, 13), (6063673, 44, 2), (85, 3745587, 1),
                                     (511, 31, 2), (100, 2, 16), (3, 100, 5), (40000, 300, 9), (8192, 8192, 16)])
def test_the_plan_covers_k_and_c_with_warps_that_have_rows_to_take(itemsize, m, n, k):
    p = _shortk.plan(m, n, k, itemsize)
    assert (p.lanes, p.cols) in _shortk.layouts(n, itemsize)
    assert k <= p.depth and (p.depth == _shortk.DEPTHS[0] or k > _shortk.DEPTHS[_shortk.DEPTHS.index(p.depth) - 1])
    deep = _shortk.WARPS // p.warps_n
    pass_rows = deep * 32 // p.lanes
    assert _shortk.WARPS % p.warps_n == 0 and p.rows % pass_rows == 0
    assert p.rows * p.depth * itemsize <= _shortk.MAX_SHARED
    assert p.rows < m + pass_rows  # (no pass of rows past C's)
    assert p.warps_n == 1 or -(-n // (p.lanes * p.cols)) >= p.warps_n  # no warp abreast without columns
    assert p.warps_n == 1 or m * p.lanes // 32 < 2 * p.rows  # warps abreast: C has few rows
    blocks = lambda rows: -(-m // rows) * -(-n // p.width)
    most = _shortk.most_rows(deep, p.lanes, p.depth, itemsize)
    want = max(_shortk.MIN_ROWS[p.depth], _shortk.C_BYTES // (min(n, p.width) * itemsize))
    if p.rows < min(want, m, most) - pass_rows:  # fewer rows only to give 132 SMs two blocks each, two passes at least
        assert blocks(2 * p.rows) < 264 and p.rows >= min(2 * pass_rows, m), p
    if (p.lanes, p.cols) != _shortk.layout(n, itemsize):  # fewer columns a lane: a C too small for them
        assert blocks(p.rows) >= 264 or (p.lanes, p.cols) == _shortk.layouts(n, itemsize)[-1], p


@pytest.mark.parametrize("n, itemsize, want", [(8, 4, (8, 1)), (9, 4, (16, 1)), (16, 8, (16, 1)), (17, 4, (32, 1)),
                                               (31, 4, (32, 1)), (44, 4, (32, 2)), (102, 4, (32, 4)),
                                               (176, 4, (32, 4)), (58258, 4, (32, 4)), (58258, 8, (32, 2))])
def test_the_layout_takes_32_lanes_where_c_is_wider_than_16(n, itemsize, want):
    """As measured in session 41 (tools/short_k_probe.py): 16 lanes ran n = 44 1.5x slower than 32 lanes of 2
    columns; four columns a lane beat two on n = 102 and 176 (a partial tile's idle lanes cost little)."""
    assert _shortk.layout(n, itemsize) == want


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("depth", _shortk.DEPTHS)
def test_every_layout_and_depth_on_odd_shapes(dtype, depth):
    """Each (lanes, cols) at each instantiated depth: k from 1 to the depth (a partial group of four, a whole one),
    C's rows past one block and not a whole number of them, its columns past one tile and not a whole number of
    them, C- and F-order operands."""
    shallower = ([0] + list(_shortk.DEPTHS))[_shortk.DEPTHS.index(depth)]
    for lanes, cols in _shortk.LAYOUTS[np.dtype(dtype).itemsize]:
        width = lanes * cols
        for m, k, n in ((3, shallower + 1, 5), (301, depth, 2 * width + 3), (1000, max(1, depth - 3), width)):
            for orders in ("CC", "FF", "CF", "FC"):
                A, B = random_array((m, k), dtype, orders[0]), random_array((k, n), dtype, orders[1])
                out = poisoned((m, n), dtype)
                p = _shortk.plan(m, n, k, np.dtype(dtype).itemsize, (lanes, cols))
                assert p.depth == depth
                _shortk.run(A, B, out, p)
                assert_close(out, ref64(A, B), dtype, k, f"{lanes}x{cols} {m}x{k}x{n} {orders}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_a_block_and_warps_abreast_as_planned_or_given(dtype):
    """A block of one pass of rows, of many passes, of a count of rows past C's; 1 to 8 warps abreast."""
    m, k, n = 300, 7, 129
    A, B = random_array((m, k), dtype), random_array((k, n), dtype)
    item = np.dtype(dtype).itemsize
    plans = [_shortk.plan(m, n, k, item)]
    plans += [_shortk.plan(m, n, k, item, (8, 1), rows, 1) for rows in (32, 288, 512)]  # (lanes 8: 32 rows a pass)
    plans += [_shortk.plan(m, n, k, item, (32, 1), None, warps_n) for warps_n in (1, 2, 4, 8)]
    for p in plans:
        out = poisoned((m, n), dtype)
        _shortk.run(A, B, out, p)
        assert_close(out, ref64(A, B), dtype, k, f"{p}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_views_reversed_and_odd_strides_read_in_place(dtype):
    """Offset views (odd addresses), reversed rows (negative strides), an operand with no unit stride, through the
    launcher built once and run again on fresh operands of the same geometry (new allocations, the same strides)."""
    m, k, n = 203, 11, 97
    makers = [lambda: (random_array((m + 1, k + 2), dtype)[1:, 2:], random_array((k, n + 1), dtype)[:, 1:]),
              lambda: (random_array((m, k), dtype)[::-1], random_array((k, n), dtype, "F")[:, ::-1]),
              lambda: (random_array((m, 2 * k), dtype)[:, ::2], random_array((2 * k, n), dtype)[::2])]
    for make in makers:
        A, B = make()
        out = poisoned((m, n), dtype)
        run = _shortk.launcher(A, B, out)
        run(A, B, out)
        assert_close(out, ref64(A, B), dtype, k, f"{A.strides} {B.strides}")
        A2, B2 = make()
        assert (A2.strides, B2.strides) == (A.strides, B.strides) and A2.data.ptr != A.data.ptr
        out2 = poisoned((m, n), dtype)
        run(A2, B2, out2)
        assert_close(out2, ref64(A2, B2), dtype, k, f"{A.strides} {B.strides}: fresh operands, the kept launch")


def test_sides_past_32_bits_are_not_taken_and_plans_it_cannot_run_are_refused():
    assert _shortk.takes(4, 16, 2, 2**31 - 1) and not _shortk.takes(4, 16, 2, 2**31)
    assert not _shortk.takes(8, 16, 2**31, 3) and not _shortk.takes(4, 17)

    class Fake:  # (launches reads shapes, strides and the dtype before any address or compile)
        def __init__(self, shape):
            self.shape, self.itemsize, self.strides, self.dtype = shape, 4, (4 * shape[1], 4), np.dtype(np.float32)

    p = _shortk.plan(100, 100, 5, 4)
    for bad in (_shortk.ShortkPlan(p.lanes, p.cols, p.depth, p.rows + 1, 1),
                _shortk.ShortkPlan(p.lanes, p.cols, p.depth, p.rows, 3),
                _shortk.ShortkPlan(p.lanes, p.cols, 4, p.rows, 1)):
        with pytest.raises(ValueError):
            _shortk.launches(bad, Fake((100, 5)), Fake((5, 100)), 0, 1, (0, 0, 0))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_batches_with_broadcast_operands_and_several_launches(dtype):
    """count products in one run of launches: each product its own A and C, B broadcast (a step of 0) or its own;
    a count past the grid's 65535 products a launch (two launches)."""
    from cudakit._compile import launch

    for count, m, k, n, shared_b in ((5, 511, 2, 31, False), (7, 33, 16, 40, True), (65536 + 3, 3, 3, 5, False)):
        A = random_array((count, m, k), dtype)
        B = random_array((k, n), dtype) if shared_b else random_array((count, k, n), dtype)
        out = poisoned((count, m, n), dtype)
        steps = (m * k, 0 if shared_b else k * n, m * n)
        b0 = B if shared_b else B[0]
        p = _shortk.plan(m, n, k, np.dtype(dtype).itemsize)
        made = _shortk.launches(p, A[0], b0, out.data.ptr, count, steps)
        assert len(made) == -(-count // _shortk.MAX_GRID_Y)
        for args in made:
            launch(*args)
        want = ref64(A, B if not shared_b else B[None])
        assert_close(out, want, dtype, k, f"{count} x {m}x{k}x{n}")
