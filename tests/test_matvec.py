import importlib
import math

import numpy as np
import pytest

import cudakit
from cudakit import _check
from conftest import assert_close, on_a_side_stream, poisoned, random_array

mv = importlib.import_module("cudakit.matvec")  # the module (cudakit.matvec is the function)
mvp = importlib.import_module("cudakit._matvec_plan")

VARIANTS = [v.name for v in cudakit.variants("matvec")]
DTYPES = [np.float32, np.float64]
SHAPES = [(1, 1), (1, 4097), (4097, 1), (7, 13), (97, 1013), (1024, 1024), (4097, 4097), (3, 100_003),
          (100_003, 3), (0, 5), (5, 0), (2999, 16_385)]
# Aligned shapes that reach the fast kernels' vector paths (F order: more rows than the thin kernel takes), split (few
# rows or columns) and unsplit; the first and the last have rows long enough for a block each (the last: more rows
# than resident blocks).
FAST_PATH_SHAPES = [(56, 1 << 16), (1 << 16, 8), (72, 20_000), (20_000, 40), (512, 2048), (2048, 512), (3000, 16_384)]

pytestmark = pytest.mark.gpu


def _reference(A, x):
    import cupy

    return A.astype(cupy.float64) @ x.astype(cupy.float64)


def _check_result(A, x, variant, what):
    out = poisoned((A.shape[0],), A.dtype)
    res = cudakit.matvec(A, x, out=out, variant=variant)
    assert res is out and res.shape == (A.shape[0],) and res.dtype == A.dtype
    assert_close(res, _reference(A, x), A.dtype, A.shape[1], f"{variant} {what}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", SHAPES + FAST_PATH_SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES + FAST_PATH_SHAPES])
def test_matvec_matches_float64(variant, dtype, order, shape):
    A, x = random_array(shape, dtype, order), random_array(shape[1], dtype)
    _check_result(A, x, variant, f"{order} {shape}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["C", "F"])
def test_fast_path_shapes_cover_vector_split_and_unsplit_plans(dtype, order):
    """FAST_PATH_SHAPES really reach the 16-byte kernels, both with and without the chunk split."""
    plans = []
    for shape in FAST_PATH_SHAPES:
        A, x = random_array(shape, dtype, order), random_array(shape[1], dtype)
        p = mvp.plan(A, x)
        assert p.vector and p.kernel.startswith("matvec_colmajor") == (order == "F" and shape[0] > 1), (shape, p)
        plans.append(p)
    assert any(p.chunks > 1 for p in plans) and any(p.chunks == 1 for p in plans)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rows_of_many_loads_a_lane_take_the_fetch_ahead_row_kernel(dtype):
    """C-order rows of at least PIPELINED_ROW_LOADS loads a lane (a warp or a block to a row): the row-major kernel
    that fetches each batch before adding the one before, unless they are 16-byte vectors in more tiles than it has
    resident blocks; shorter rows keep the plain one. Both right."""
    width = 16 // np.dtype(dtype).itemsize
    cases = {(2, 1 << 20): True, (56, 1 << 16): True, (3000, 32 * mvp.PIPELINED_ROW_LOADS + 1): True,
             (16_000, 32 * width * mvp.PIPELINED_ROW_LOADS): False,
             (4099, 32 * mvp.PIPELINED_ROW_LOADS - 1): False, (20_000, 40): False}
    for (m, n), piped in cases.items():
        A, x = random_array((m, n), dtype), random_array(n, dtype)
        p = mvp.plan(A, x)
        assert p.kernel.startswith("matvec_rowmajor") and p.kernel.endswith(", false, true>") == piped, (m, n, p)
        _check_result(A, x, "fast", f"{m}x{n}")


@pytest.mark.parametrize("dtype", DTYPES + [np.float16])
def test_element_columns_take_their_unroll_and_lanes(dtype):
    """F-order A whose columns are not whole 16-byte vectors: float32 keeps ELEMENT_COL_UNROLL columns in flight from
    ELEMENT_COL_UNROLL_MIN_COLUMNS columns on where that kernel takes the row tiles in no more rounds of its resident
    blocks and each column lane gets a batch, the rest COL_UNROLL; columns too few for a batch a column lane take a
    block of lanes down each (one column lane). Right every way."""
    itemsize = np.dtype(dtype).itemsize
    # (the tall ones: row tiles enough that no narrower tiles are needed to fill the GPU)
    for m, n in [(100_003, 63), (100_003, 64), (4099, 3000), (18553, 2000), (2_000_003, 4), (2_000_003, 2),
                 (2_000_003, 9)]:
        if mvp.few_columns_step(itemsize, n):  # (matvec_few_columns: the test below)
            continue
        A, x = random_array((m, n), dtype, "F"), random_array(n, dtype)
        p = mvp.plan(A, x)
        _, vector, lanes, got = p.kernel[:-1].split(", ")[:4]
        deep = False
        if itemsize == 4 and n >= max(mvp.ELEMENT_COL_UNROLL_MIN_COLUMNS, mvp.FAST_THREADS // int(lanes) * 8):
            rounds = [-(-p.tiles // mvp._resident_blocks(f"matvec_colmajor<float, false, {lanes}, {unroll}>",
                                                          A.dtype, A.data.device_id)) for unroll in (8, 4)]
            deep = rounds[0] <= rounds[1]
        assert p.kernel.startswith("matvec_colmajor") and vector == "false" and int(got) == (8 if deep else 4), \
            (m, n, p)
        unroll = int(got)
        if m > 1_000_000:
            few = n < mvp.FAST_THREADS // mvp.ELEMENT_COL_LANES * unroll
            assert int(lanes) == (mvp.FAST_THREADS if few else mvp.ELEMENT_COL_LANES), (m, n, p)
        _check_result(A, x, "fast", f"{m}x{n} F")


@pytest.mark.parametrize("dtype", DTYPES + [np.float16])
def test_few_element_columns_take_their_kernel(dtype):
    """F-order A of few element columns: matvec_few_columns, built for the first FEW_COLUMNS step whose limit holds
    n, with that step's rows a lane, right on a partial last block and a partial last lane's rows, and under other
    rows a lane; a column past the last step, or whole 16-byte vector columns, keep matvec_colmajor."""
    itemsize = np.dtype(dtype).itemsize
    steps, width = mvp.FEW_COLUMNS[itemsize], 16 // itemsize
    lane_rows = sorted({mvp.FAST_THREADS * rows + d for _, rows in steps for d in (-1, 3)})
    for m in (2, 7, mvp.FAST_THREADS + 1, *lane_rows, 100_003, 4096):  # (4096: vector columns)
        for n in sorted({2, *(few + d for few, _ in steps for d in (0, 1))}):
            A, x = random_array((m, n), dtype, "F"), random_array(n, dtype)
            p = mvp.plan(A, x)
            step = None if m % width == 0 else mvp.few_columns_step(itemsize, n)
            thin = p.kernel.startswith("matvec_thin_colmajor")  # (a few rows: the thin kernel first)
            assert not thin or mvp.takes_thin(m, n, itemsize), (m, n, p)
            wanted = mvp.few_columns_expression(A.dtype, *step) if step else None
            assert thin or (p.kernel == wanted if step else p.kernel.startswith("matvec_colmajor")), (m, n, p)
            _check_result(A, x, "fast", f"{m}x{n} F")
    for few, _ in steps:
        A, x = random_array((100_003, few), dtype, "F"), random_array(few, dtype)
        p = mvp.plan(A, x, few_columns=False)  # the kernel they took before
        assert p.kernel.startswith("matvec_colmajor"), p
        out = poisoned((A.shape[0],), A.dtype)
        mv._run_plan(A, x, out, p)
        assert_close(out, _reference(A, x), A.dtype, few, "few_columns=False")
        for rows in (1, 2, 8):
            p = mvp.plan(A, x, few_rows=rows)
            assert p.kernel == f"matvec_few_columns<{mv.ctype(A.dtype)}, {rows}, {few}>", p
            assert p.tiles == p.grid == -(-100_003 // (mvp.FAST_THREADS * rows)) and p.chunks == 1, p
            out = poisoned((A.shape[0],), A.dtype)
            mv._run_plan(A, x, out, p)
            assert_close(out, _reference(A, x), A.dtype, few, f"few_rows={rows}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_batch_of_one_row_products_on_few_columns(dtype):
    """A batch of one-row products a_i (1 x k) @ B_i (k x n) with k few: B_i.T @ a_i on matvec_few_columns, the batch
    on the grid's z (cudakit.matmul's route), against float64."""
    import cupy

    for k in (2, *(few for few, _ in mvp.FEW_COLUMNS[np.dtype(dtype).itemsize])):
        planned = mvp._plan((30_001, k), np.dtype(dtype), True, False, 0, False, (), 5)  # (column_batch_launcher's)
        assert planned.kernel.startswith("matvec_few_columns"), planned
        a, b = random_array((5, 1, k), dtype), random_array((5, k, 30_001), dtype)
        out = poisoned((5, 1, 30_001), dtype)
        res = cudakit.matmul(a, b, out=out)
        assert res is out
        assert_close(res, cupy.matmul(a.astype(np.float64), b.astype(np.float64)), dtype, k, f"5 x 1x{k}x30001")


KNOBS = [{"persistent": False}, {"balanced": False}, {"block_rows": False}, {"row_unroll": 2},
         {"row_unroll": 8}, {"col_unroll": 2}, {"col_unroll": 4}, {"col_unroll": 8}, {"blocks_per_sm": 2},
         {"blocks_per_sm": 4}, {"blocks_per_sm": 8}, {"blocks_per_sm": 16}, {"row_unroll": 8, "blocks_per_sm": 8},
         {"row_unroll": 8, "blocks_per_sm": 16}, {"col_unroll": 2, "blocks_per_sm": 16},
         {"row_group": 4, "row_unroll": 2}, {"col_lanes": 128}, {"cached": True}, {"cached": False},
         {"cached": False, "persistent": False}, {"cached": True, "persistent": False},
         {"cached": True, "block_rows": False}, {"block_rows": True}, {"few_columns": False},
         {"few_rows": 2}]  # tools/matvec_probe.py's


@pytest.mark.parametrize("knobs", KNOBS, ids=[",".join(f"{k}={v}" for k, v in kn.items()) for kn in KNOBS])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["C", "F"])
def test_fast_plans_under_other_tuning(knobs, dtype, order):
    """Every tuning the probe times computes the same function (so a default can move to any of them)."""
    for shape in FAST_PATH_SHAPES + [(97, 1013), (3, 4096), (4096, 3), (100_003, 3)]:  # (the last: few columns, F)
        A, x = random_array(shape, dtype, order), random_array(shape[1], dtype)
        p = mvp.plan(A, x, **knobs)
        out = poisoned((shape[0],), dtype)
        mv._run_plan(A, x, out, p)
        assert_close(out, _reference(A, x), dtype, shape[1], f"{knobs} {order} {shape} {p}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_rows_take_a_block_each(dtype):
    """Rows of BLOCK_ROW_BYTES or more: a block per row, one resident wave of blocks striding over the rows; rows too
    few to fill half the resident blocks stay a warp each, split into chunks."""
    long_row = mvp.BLOCK_ROW_BYTES // np.dtype(dtype).itemsize
    for m, n, block in ((3000, long_row, True), (3000, long_row - 16, False), (23, 4 * long_row + 8, False)):
        A, x = random_array((m, n), dtype), random_array(n, dtype)
        p = mvp.plan(A, x)
        assert (f", {mvp.FAST_THREADS}, " in p.kernel) == block, p
        if block:
            assert p.chunks == 1 and p.tiles == m and p.grid < m, p
        elif m < 100:
            assert ", 32, " in p.kernel and p.chunks > 1, p
        out = poisoned((m,), dtype)
        mv._run_plan(A, x, out, p)
        assert_close(out, _reference(A, x), dtype, n, f"{p}")


def test_fast_reads_transposed_views_in_place(monkeypatch):
    import cupy

    B = random_array((300, 200), np.float32)
    copies = []
    real = cupy.ascontiguousarray

    def spy(a, *args, **kwargs):
        res = real(a, *args, **kwargs)
        if res.data.ptr != a.data.ptr:
            copies.append(a.shape)
        return res

    monkeypatch.setattr(cupy, "ascontiguousarray", spy)
    for A in (B, B.T, cupy.asfortranarray(B), cupy.asfortranarray(B).T):
        x = random_array(A.shape[1], np.float32)
        assert_close(cudakit.matvec(A, x), _reference(A, x), np.float32, A.shape[1], f"{A.strides}")
    assert copies == [], copies
    cudakit.matvec(B[:, ::2], random_array(100, np.float32))
    assert copies == [(300, 100)]  # the spy does see the documented copy of other strides


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_matvec_transposed_strided_and_misaligned_views(variant, dtype):
    big = random_array((301, 403), dtype)
    flat = random_array(97 * 1013 + 1, dtype)
    xs = random_array(2 * 1013 + 1, dtype)
    cases = {
        "A.T (F-contiguous view)": (big.T, random_array(301, dtype)),
        "A[::2, ::3]": (big[::2, ::3], random_array(135, dtype)),
        "A[:, :400] (row stride > n)": (big[:, :400], random_array(400, dtype)),
        "A.T[:, 1:] (column view)": (big.T[:, 1:], random_array(300, dtype)),
        "C view at offset 1": (flat[1:].reshape(97, 1013), random_array(1013, dtype)),
        "F view at offset 1": (flat[1:].reshape((97, 1013), order="F"), random_array(1013, dtype)),
        "C view at offset 1, even n": (flat[1:97 * 1012 + 1].reshape(97, 1012), random_array(1012, dtype)),
        "x at offset 1": (flat[:97 * 1012].reshape(97, 1012), xs[1:1013]),
        "x strided": (flat[:-1].reshape(97, 1013), xs[::2][:1013]),
        "negative strides": (big[::-1, ::-1], random_array(403, dtype)),
    }
    for what, (A, x) in cases.items():
        _check_result(A, x, variant, what)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(18, 30), (40, 20_000), (3, 100_003)], ids=str)
def test_a_kept_launcher_follows_each_calls_operands(dtype, order, shape):
    """The fast variant keeps its launcher per geometry: repeated calls on fresh operands, the same shapes and
    strides with A and x 4 or 8 bytes past a 16-byte boundary (another launcher), and on another
    stream, each give their own right answer."""
    import cupy

    m, n = shape
    for offset in (0, 1, 0, 1, 0):
        flat = random_array(m * n + 1, dtype)[offset:offset + m * n]
        A = flat.reshape((m, n), order=order)
        x = random_array(n + 1, dtype)[offset:offset + n]
        out = poisoned((m,), dtype)
        with cupy.cuda.Stream() if offset else cupy.cuda.Stream.null:
            cudakit.matvec(A, x, out=out)
            cupy.cuda.get_current_stream().synchronize()
        assert_close(out, _reference(A, x), dtype, n, f"offset {offset}")


THIN = [(3, 100_003), (9, 127_977), (31, 4099), (13, 1), (5, 7), (10, 1 << 20), (17, 65_537), (30, 333), (8, 5003),
        (16, 7001), (24, 7001), (26, 3001), (37, 50_001), (39, 3001), (41, 3001), (55, 3001), (57, 3001),
        (64, 30_000), (127, 10_007), (255, 4099), (256, 333), (101, 664_445)]
# (the limits' edges: 16, 24 and 26 rows of whole vectors, 39, 41, 55 and 57 of elements, and 101 rows of 256 MiB)


@pytest.mark.parametrize("limits", ["library", "widest"])
@pytest.mark.parametrize("dtype", DTYPES + [np.float16])
def test_few_row_column_major_matrices_are_read_as_one_run(dtype, limits, monkeypatch):
    """An F-order A of few rows (THIN_MAX_ROWS, or THIN_LARGE_ROWS from THIN_LARGE_BYTES on, where they are not
    whole 16-byte vectors, THIN_MAX_VECTOR_ROWS where they are; at "widest", all FAST_THREADS), whose thin_unit of
    blocks are resident at
    once: the thin kernel, which reads A as one contiguous run, right on every row and column (a partial last vector
    included) and the same bits on a second call."""
    if limits == "widest":
        for name in ("THIN_MAX_ROWS", "THIN_MAX_VECTOR_ROWS", "THIN_LARGE_ROWS"):
            monkeypatch.setattr(mvp, name, dict.fromkeys((2, 4, 8), mvp.FAST_THREADS))
        monkeypatch.setattr(mv, "_launchers", {})
        mvp._plan.cache_clear()
    item = np.dtype(dtype).itemsize
    width = 16 // item
    try:
        for m, n in THIN:
            n = min(n, 20_011) if dtype == np.float16 else n  # (sums past 65504 overflow float16)
            A, x = random_array((m, n), dtype, "F"), random_array(n, dtype)
            p = mvp.plan(A, x)
            rows = (mvp.THIN_MAX_VECTOR_ROWS if m % width == 0 else mvp.THIN_LARGE_ROWS
                    if m * n * item >= mvp.THIN_LARGE_BYTES else mvp.THIN_MAX_ROWS)[item]
            name = mv.instantiation("matvec_thin_colmajor", dtype)
            resident = mvp._resident_blocks(name, A.dtype, A.data.device_id)
            wanted = 1 < m <= rows and m // math.gcd(m, width * mvp.FAST_THREADS) <= resident
            assert ("thin" in p.kernel) == (wanted and n > 1), (m, n)  # (n = 1: C order too)
            if "thin" in p.kernel:  # one wave at most, its stride over the run a multiple of m
                assert p.grid * width * mvp.FAST_THREADS % m == 0, (m, n, p)
                assert p.grid <= resident, (m, n, p)
            _check_result(A, x, "fast", f"thin {m}x{n}")
            first = cudakit.matvec(A, x).copy()
            assert bool((cudakit.matvec(A, x) == first).all()), (m, n)
    finally:
        mvp._plan.cache_clear()  # (plans made under the widest limits)


@pytest.mark.parametrize("dtype", DTYPES + [np.float16])
def test_short_rows_take_their_lanes_and_unroll(dtype):
    """C-order rows shorter than SHORT_*_ROW_BYTES run on _short_rows' lanes and unroll, element rows from
    SHORT_ELEMENT_ROW_BYTES on matvec_rows_staged: every row length from one element to past the limits, 16-byte
    vectors and element loads (a view one element on), right on every row."""
    import cupy

    item = np.dtype(dtype).itemsize
    taken = set()
    for n in range(1, mvp.SHORT_VECTOR_ROW_BYTES // item + 5):
        m = 4099 if n < 40 else 1031
        flat = random_array(m * n + 1, dtype)
        for A in (flat[:-1].reshape(m, n), flat[1:].reshape(m, n)):
            x = random_array(n, dtype)
            p = mvp.plan(A, x)
            vector = A.data.ptr % 16 == 0 and x.data.ptr % 16 == 0 and n * item % 16 == 0
            short = mvp._short_rows(n, item, vector)
            staged = mvp.takes_staged(n, item, A.data.ptr % 16 == 0 and x.data.ptr % 16 == 0, A.data.device_id)
            assert p.vector == vector and staged == p.kernel.startswith("matvec_rows_staged"), (n, p)
            if short:
                assert f"matvec_rowmajor<{p.kernel.split('<')[1].split(',')[0]}, {str(vector).lower()}, " \
                       f"{short[0]}, {short[1]}, true>" == p.kernel, (n, short, p)
                taken.add((vector, short))
            _check_result(A, x, "fast", f"short rows {m}x{n} at {A.data.ptr % 16}")
        del flat
        cupy.get_default_memory_pool().free_all_blocks()
    assert {s for v, s in taken if v} >= {(1, 2), (2, 2), (4, 1), (4, 2)}, taken
    assert len({s for v, s in taken if not v}) >= 3, taken


@pytest.mark.parametrize("dtype", DTYPES + [np.float16])
def test_short_element_rows_are_staged_in_shared_memory(dtype):
    """Row-major rows of elements from SHORT_ELEMENT_ROW_BYTES to under staged_max_row_bytes take matvec_rows_staged:
    odd and even lengths (an even one starts each row at a rotated column), runs starting anywhere in a 16-byte
    vector, a last tile short of FAST_THREADS rows, more tiles than resident blocks, and a stacked batch with an x
    per matrix; outputs poisoned."""
    import cupy

    item = np.dtype(dtype).itemsize
    width = 16 // item
    longest = (mvp.staged_max_row_bytes(item, cupy.cuda.Device().id) - 1) // item
    shortest = -(-mvp.SHORT_ELEMENT_ROW_BYTES // item)
    for n, m in ((shortest + 1, 300_001), (longest, 4099), (shortest, 257), (longest - 1, 1031), (shortest + 3, 1)):
        flat = random_array(m * n + width, dtype)
        for lead in range(width) if m < 300_000 else (1,):  # the run's start 0 to width - 1 elements into a vector
            A, x = flat[lead:lead + m * n].reshape(m, n), random_array(n, dtype)
            staged = mvp.plan(A, x).kernel.startswith("matvec_rows_staged")
            assert staged == bool(lead or n % width), (n, lead, mvp.plan(A, x))  # (aligned vector rows: not staged)
            _check_result(A, x, "fast", f"staged {m}x{n} at {lead}")
    A = random_array(1031 * (longest + 1) + 1, dtype)[1:].reshape(1031, longest + 1)  # the bound: not staged
    assert not mvp.plan(A, random_array(longest + 1, dtype)).kernel.startswith("matvec_rows_staged")
    A, x = random_array((3, 1000, shortest + 3), dtype), random_array((3, shortest + 3), dtype)
    assert mvp.plan(A[0], x[0]).kernel.startswith("matvec_rows_staged")
    out = poisoned((3, 1000), dtype)
    cudakit.matvec(A, x, out=out)
    ref = cupy.einsum("bij,bj->bi", A.astype(cupy.float64), x.astype(cupy.float64))
    assert_close(out, ref, dtype, shortest + 3, "staged batch")


@pytest.mark.parametrize("variant", VARIANTS)
def test_matvec_is_deterministic(variant):
    for shape, order in [((16, 1 << 16), "C"), ((1 << 16, 16), "F"), ((4097, 4097), "C")]:
        A, x = random_array(shape, np.float32, order), random_array(shape[1], np.float32)
        first = cudakit.matvec(A, x, variant=variant).copy()
        for _ in range(3):
            assert bool((cudakit.matvec(A, x, variant=variant) == first).all()), (variant, shape, order)


def test_split_plans_and_dots_interleaved_on_one_stream():
    """Split matvecs (one counter per tile) and dots (one counter) share the stream's counters and scratch."""
    cases = [((4096, 4096), "F"), ((64, 1 << 16), "C"), ((1 << 16, 40), "F"), ((4097, 4097), "C")]
    split = 0
    for _ in range(2):
        for shape, order in cases:
            A, x = random_array(shape, np.float32, order), random_array(shape[1], np.float32)
            split += mvp.plan(A, x).chunks > 1
            a, b = random_array(1 << 20, np.float32), random_array(1 << 20, np.float32)
            _check_result(A, x, "fast", f"{shape} {order} after dots")
            d = cudakit.dot(a, b)
            assert_close(d, a.astype(np.float64) @ b.astype(np.float64), np.float32, a.size, "dot between matvecs")
    assert split >= 4, "the cases no longer reach split plans"


def test_matvec_zero_size_results():
    import cupy

    out = poisoned((5,), np.float32)
    assert cudakit.matvec(cupy.empty((5, 0), np.float32), cupy.empty(0, np.float32), out=out) is out
    assert bool((out == 0).all())
    res = cudakit.matvec(cupy.empty((0, 5), np.float64), random_array(5, np.float64))
    assert res.shape == (0,) and res.dtype == np.float64


def test_matvec_on_a_non_default_stream():
    import cupy

    A, x = random_array((64, 1 << 16), np.float64), random_array(1 << 16, np.float64)
    # the split plan: its partials in the side stream's own scratch
    res = on_a_side_stream(lambda out: cudakit.matvec(A, x, out=out), cupy.empty(64, np.float64))
    assert_close(res, _reference(A, x), np.float64, A.shape[1])


@pytest.mark.parametrize("variant", VARIANTS)
def test_matvec_check_mode(variant, monkeypatch):
    from cudakit import _variants

    A, x = random_array((97, 1013), np.float32), random_array(1013, np.float32)
    cudakit.matvec(A, x, variant=variant, check=True)  # the right result passes
    row = _variants.lookup("matvec", variant)

    def corrupted(A, x, out):
        row.run(A, x, out)
        out[3] += 1.0  # one element off by about 0.1 %: beyond the float32 tolerance

    broken = _variants.Variant("matvec", variant, row.lesson, corrupted, seed=row.seed)
    monkeypatch.setitem(_variants._TABLE["matvec"], variant, broken)
    with pytest.raises(_check.CheckError, match="relative error"):
        cudakit.matvec(A, x, variant=variant, check=True)
    monkeypatch.setattr(_check, "CHECK_BY_DEFAULT", True)  # CUDAKIT_CHECK=1 at import
    with pytest.raises(_check.CheckError):
        cudakit.matvec(A, x, variant=variant)
    cudakit.matvec(A, x, variant=variant, check=False)  # explicitly off wins over the environment


def test_matvec_bad_inputs():
    import cupy

    A, x = random_array((4, 3), np.float32), random_array(3, np.float32)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.matvec(np.ones((4, 3), np.float32), x)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.matvec(A, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="2-D"):
        cudakit.matvec(x, x)
    with pytest.raises(ValueError, match="1-D"):
        cudakit.matvec(A, x[0])
    with pytest.raises(ValueError, match=r"\(4, 3\).*\(4,\)"):
        cudakit.matvec(A, random_array(4, np.float32))
    with pytest.raises(TypeError, match="one dtype"):
        cudakit.matvec(A, x.astype(np.float64))
    for dtype in (np.int32, np.int16, np.complex64):  # (float16 and bfloat16: tests/test_half.py)
        with pytest.raises(TypeError, match="unsupported dtype"):
            cudakit.matvec(A.astype(dtype), x.astype(dtype))
    with pytest.raises(ValueError, match="valid variants: mat_vec_mul, mat_vec_mul_tiles"):
        cudakit.matvec(A, x, variant="nope")
    with pytest.raises(ValueError, match="shape"):
        cudakit.matvec(A, x, out=cupy.empty(3, np.float32))
    with pytest.raises(TypeError, match="dtype"):
        cudakit.matvec(A, x, out=cupy.empty(4, np.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        cudakit.matvec(A, x, out=cupy.empty(8, np.float32)[::2])
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.matvec(A, x, out=np.empty(4, np.float32))
    buf = random_array(7, np.float32)
    with pytest.raises(ValueError, match="overlaps x"):
        cudakit.matvec(A, buf[:3], out=buf[2:6])
