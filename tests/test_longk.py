"""The streaming FP64 kernel for a small C with a long k (kernels/matmul_longk.cu through cudakit._longk).

GPU-less: every tile's module compiles for every architecture the installed NVRTC builds, with an empty log and, on
sm_80+, no spills; the planner's runs cover k. On a GPU (sm_80+): every tile, both orientations and the four layouts on
odd shapes (edge tiles, k not a whole number of slices, one run and many), offset views and an operand without a unit
stride, and the fast variant's route on the long-k shapes it takes, against float64 cupy.matmul by relative error
within _check.tolerance(float64, k); outputs start poisoned, inputs are fresh draws.
"""
import importlib

import numpy as np
import pytest

from cudakit import _compile, _dmma, _longk
from conftest import assert_close, assert_compiles_without_spills, needs_sm80, poisoned, random_array

ORDERS = ("C", "F")
# (m, k, n): edge tiles on both sides, k short of a slice, a slice and one more, and many slices
SHAPES = [(1, 1, 1), (5, 3, 2), (17, 65, 9), (50, 1000, 23), (70, 4099, 41)]


def test_every_tile_compiles_warning_free_and_without_spills():
    pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs the test extra (NVRTC)")
    assert_compiles_without_spills(_longk.FAMILY, _longk.instantiation_groups(), _compile.nvrtc_archs())


def test_tiles_are_distinct_and_fit_an_sm():
    assert len({t.name for t in _longk.TILES}) == len(_longk.TILES)
    for t in _longk.TILES:
        assert t.mt % 16 == 0 and t.nt % 8 == 0 and t.mt <= 64 and t.nt <= 64, t
        assert t.largest_shared_bytes <= 227 * 1024, t


@pytest.mark.parametrize("m, n, k", [(34, 19, 2597332), (7, 144, 1202891), (48, 3, 938376), (185, 3, 680776),
                                     (3, 5, 16384), (2, 2, 10**7)])
def test_the_cost_model_prefers_little_padding_and_the_runs_cover_k(monkeypatch, m, n, k):
    monkeypatch.setattr(_longk, "fits", lambda tile, device_id: True)
    monkeypatch.setattr(_longk, "resident", lambda tile, device_id: 264)
    plan = _longk.plan(m, n, k, 0)
    rows, cols = (n, m) if plan.swap else (m, n)
    padded = -(-rows // plan.tile.mt) * plan.tile.mt * -(-cols // plan.tile.nt) * plan.tile.nt
    least = min(-(-r // t.mt) * t.mt * -(-c // t.nt) * t.nt for t in _longk.TILES for r, c in ((m, n), (n, m)))
    assert padded <= 2 * least, (plan, least)
    assert plan.run % _longk.SLICE == 0 and (plan.runs - 1) * plan.run < k <= plan.runs * plan.run, plan
    assert plan.runs <= 264 and plan.run >= min(k, _longk.MIN_RUN), plan


@pytest.mark.parametrize("m, n, k, takes", [(34, 19, 2597332, True), (7, 144, 1202891, True), (32, 32, 10**6, True),
                                            (64, 64, 10**6, False), (128, 128, 300000, False), (84, 26, 752820, False),
                                            (34, 19, _longk.MIN_DEPTH - 1, False), (1, 50, 10**6, False),
                                            (2, 16 * 65535 + 1, _longk.MIN_DEPTH, False)])
def test_the_route_takes_a_small_c_with_a_long_k(monkeypatch, m, n, k, takes):
    """A C whose padded tiles cost less than the DMMA split's (its 64 x 64 tiles, or the 32 x 32 ones where
    _dmma.split_plan takes them; a stand-in H200's resident blocks), k from MIN_DEPTH, never one row."""
    monkeypatch.setattr(_longk, "fits", lambda tile, device_id: True)
    monkeypatch.setattr(_longk._tune, "compute_capability", lambda device_id: 90)
    monkeypatch.setattr(_dmma, "fits", lambda tile, device_id: True)
    monkeypatch.setattr(_dmma, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(_dmma, "resident", lambda tile, device_id: 132 * (5 if tile.bm == 32 else 2))
    assert _longk.takes(m, n, k, 0) == takes


@pytest.mark.gpu
@pytest.mark.parametrize("tile", _longk.TILES, ids=lambda t: t.name)
@pytest.mark.parametrize("a_order", ORDERS)
@pytest.mark.parametrize("b_order", ORDERS)
def test_every_tile_orientation_and_layout(tile, a_order, b_order):
    import cupy

    needs_sm80()
    for m, k, n in SHAPES:
        A, B = random_array((m, k), np.float64, a_order), random_array((k, n), np.float64, b_order)
        ref = cupy.matmul(A, B)
        for swap in (False, True):
            for runs in (1, 3, None):  # one run (stored straight into C), three, the planner's
                plan = _longk.plan(m, n, k, 0, tile, swap, runs)
                out = poisoned((m, n), np.float64)
                _longk.launcher(A, B, out, plan)(A, B, out)
                assert_close(out, ref, np.float64, k, f"{plan} {a_order}{b_order} {m}x{k}x{n}")


@pytest.mark.gpu
def test_views_and_copies_on_fresh_operands():
    """Launches built once (one run stored straight into C, and the planner's runs) run on other operands and outputs
    of the same geometry: offset views with odd leading dimensions (every other line off 16 bytes), views 8 bytes off
    with an even one (every line), and an operand without a unit stride (copied on every call)."""
    import cupy

    needs_sm80()
    m, k, n = 21, 20001, 13
    for make_a, make_b in [
        (lambda: random_array((m + 1, k + 4), np.float64)[1:, 4:], lambda: random_array((k, n + 2), np.float64)[:, 2:]),
        (lambda: random_array((m, k + 1), np.float64)[:, 1:], lambda: random_array((k + 1, n), np.float64, "F")[1:]),
        (lambda: random_array((m, 2 * k), np.float64)[:, ::2], lambda: random_array((k, n), np.float64, "F")),
    ]:
        A, B = make_a(), make_b()
        for plan in (_longk.plan(m, n, k, 0), _longk.plan(m, n, k, 0, runs=1)):
            run = _longk.launcher(A, B, poisoned((m, n), np.float64), plan)
            for _ in range(2):
                A, B = make_a(), make_b()
                out = poisoned((m, n), np.float64)
                run(A, B, out)
                assert_close(out, cupy.matmul(A, B), np.float64, k, f"{plan} {A.strides} {B.strides}")


@pytest.mark.gpu
@pytest.mark.parametrize("a_order", ORDERS)
@pytest.mark.parametrize("b_order", ORDERS)
def test_the_fast_variant_routes_a_long_k_here(monkeypatch, a_order, b_order):
    import cupy

    import cudakit

    needs_sm80()
    routes = importlib.import_module("cudakit._matmul_routes")
    made = []
    make = routes._longk.launcher
    monkeypatch.setattr(routes._longk, "launcher", lambda *a: made.append(a[3]) or make(*a))
    monkeypatch.setattr(routes, "_routes", {})
    for m, k, n in [(34, 259733, 19), (7, 120289, 144), (48, 93837, 3), (2, 16384, 2)]:
        A, B = random_array((m, k), np.float64, a_order), random_array((k, n), np.float64, b_order)
        out = poisoned((m, n), np.float64)
        cudakit.matmul(A, B, out=out)
        assert_close(out, cupy.matmul(A, B), np.float64, k, f"{m}x{k}x{n} {a_order}{b_order}")
        assert made and made[-1] == _longk.plan(m, n, k, 0), (m, k, n, made)
        made.clear()
