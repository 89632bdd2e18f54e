"""float16 and bfloat16 (ml_dtypes') in matvec and dot: 16-bit loads, float32 sums, one rounding to the input dtype.

Every result is compared with the float64 product of the same 16-bit inputs, by relative error scaled by the
product of the absolute values (_check.product_error), against _check.tolerance (u + (1 + u) 4 eps32 sqrt(k)).
float16 inputs are scaled by a power of two so that no sum leaves float16's range (65504); bfloat16 has float32's.
"""
import importlib
import math

import numpy as np
import pytest

import cudakit
from cudakit import _check
from conftest import on_a_side_stream, poisoned, random_array

mv = importlib.import_module("cudakit.matvec")
mvp = importlib.import_module("cudakit._matvec_plan")
dt = importlib.import_module("cudakit.dot")

HALVES = ["float16", "bfloat16"]
MATVEC_VARIANTS = [v.name for v in cudakit.variants("matvec") if "float16" in v.dtypes]
DOT_VARIANTS = [v.name for v in cudakit.variants("dot") if "float16" in v.dtypes]
SHAPES = [(1, 1), (1, 4097), (4097, 1), (7, 13), (97, 1013), (3, 100_003), (100_003, 3), (0, 5), (5, 0),
          (2999, 16_385)]
# n (C) or m (F) a multiple of 8: the 16-byte vector paths, split and unsplit; the last has rows of 64 KiB (a block
# per row).
FAST_PATH_SHAPES = [(24, 1 << 16), (1 << 16, 8), (40, 20_000), (20_000, 40), (512, 2048), (2048, 512), (3000, 32_768)]
DOT_SIZES = [1, 2, 3, 7, 8, 9, 31, 512, 513, 4097, 100_003, 1 << 20, (1 << 20) + 7, 1 << 24]


def half(name: str) -> np.dtype:
    if name == "bfloat16":
        return np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    return np.dtype(name)


def draw(shape, dtype, k: int, order="C"):
    """random_array, float16 scaled by a power of two (exact) so that sums of k products stay below 2^15."""
    x = random_array(shape, dtype, order)
    if dtype == np.float16 and k > 1 << 13:
        x *= np.float16(2.0 ** -math.ceil((math.log2(k) - 13) / 2))
    return x


def assert_product(out, x, y, dtype, k, what=""):
    """out = x @ y (k-term sums) in dtype, within tolerance of the float64 product of the same inputs."""
    assert out.dtype == dtype, f"{what}: result dtype {out.dtype}, inputs {dtype}"
    err, tol = _check.product_error(out, x, y), _check.tolerance(dtype, k)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"  # NaN (an unwritten element) fails too


# ---- GPU-less: the variant table, the compiled set, the tolerances

def test_variants_say_which_take_16_bit_types():
    assert {"fast", "fast_unsplit", "warp_per_row"} <= set(MATVEC_VARIANTS) and "fast" in DOT_VARIANTS
    for op in ("matvec", "dot"):
        for v in cudakit.variants(op):
            assert ("bfloat16" in v.dtypes) == ("float16" in v.dtypes) == (not v.seed), v


@pytest.mark.parametrize("name", HALVES)
def test_16_bit_modules_leave_out_the_seed_kernels(name):
    dtype, ct = half(name), {"float16": "half_t", "bfloat16": "bfloat16_t"}[name]
    names = mv.instantiations(dtype)
    assert f"matvec_rowmajor<{ct}, true, 32, {mvp.ROW_UNROLL}, false>" in names and f"warp_per_row<{ct}, true>" in names
    assert not any(n.startswith("mat_vec_mul") for n in names)
    assert dt.instantiations(dtype) == tuple(f"dot_onepass<{ct}, {v}, {dt.FAST_UNROLL}>" for v in ("true", "false"))
    assert names in mv.instantiation_groups() and dt.instantiations(dtype) in dt.instantiation_groups()


@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("k", [256, 4096])
def test_tolerance_holds_for_float32_sums_and_fails_for_16_bit_ones(name, k):
    """On the host: float32 sums of 16-bit products, rounded once, are within tolerance; the same sums with every
    partial sum rounded to 16 bits (what a kernel must not do) are not (their error grows like u sqrt(k))."""
    dtype = half(name)
    rng = np.random.default_rng()
    rows = 64
    a = (rng.random((rows, k), np.float32) + 0.5).astype(dtype)
    b = (rng.random(k, np.float32) + 0.5).astype(dtype)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    ref, scale = a32.astype(np.float64) @ b32.astype(np.float64), np.abs(a32.astype(np.float64)) @ np.abs(b32)
    tol = _check.tolerance(dtype, k)
    good = (a32 @ b32).astype(dtype).astype(np.float64)
    assert np.linalg.norm(good - ref) / np.linalg.norm(scale) <= tol
    bad = np.zeros(rows, dtype)
    for j in range(k):  # a running sum kept in 16 bits
        bad = (bad.astype(np.float32) + a32[:, j] * b32[j]).astype(dtype)
    assert np.linalg.norm(bad.astype(np.float64) - ref) / np.linalg.norm(scale) > tol


def test_tolerance_formulas():
    eps32 = float(np.finfo(np.float32).eps)
    for name, u in (("float16", 2.0 ** -11), ("bfloat16", 2.0 ** -8)):
        for k in (1, 16, 4096, 1 << 24):
            t32 = _check.tolerance(np.float32, k)
            assert t32 == 4 * eps32 * math.sqrt(max(k, 16))
            assert _check.tolerance(name, k) == u + (1 + u) * t32
    assert _check.tolerance(np.float16, 100) == _check.tolerance("float16", 100)
    v = 2.0 ** -10  # a TF32 input's relative error, truncated or rounded to nearest
    assert _check.tf32_tolerance(4096) == 2 * v + v * v + (1 + v) ** 2 * _check.tolerance(np.float32, 4096)


def test_instantiations_by_dtype_or_name_agree():
    for name in ("float32", "float64", "float16"):
        assert mv.instantiations(name) == mv.instantiations(np.dtype(name)) == mv.instantiations(getattr(np, name))
        assert dt.instantiations(name) == dt.instantiations(np.dtype(name))
    assert mv.instantiations("bfloat16") == mv.instantiations(half("bfloat16"))
    assert "matvec_colmajor<float, true, 32, 4>" in mv.instantiations(np.float32)  # the float32 spelling as before


# ---- on the GPU

@pytest.mark.gpu
@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("order", ["C", "F"])
def test_random_and_poisoned_16_bit_arrays(name, order):
    import cupy

    dtype = half(name)
    x = random_array((37, 45), dtype, order)
    assert x.dtype == dtype and x.shape == (37, 45) and (x.flags.f_contiguous if order == "F" else x.flags.c_contiguous)
    v = _check.as_float64(x)
    assert float(v.min()) >= 0.5 and float(v.max()) <= 1.5 and int((v != v[0, 0]).sum()) > 0
    assert float(_check.as_float64(random_array(1 << 16, dtype)).std()) > 0.2  # spread over [0.5, 1.5)
    p = poisoned((5, 3), dtype)
    assert p.dtype == dtype and bool(cupy.isnan(_check.as_float64(p)).all())


@pytest.mark.gpu
@pytest.mark.parametrize("variant", MATVEC_VARIANTS)
@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", SHAPES + FAST_PATH_SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES + FAST_PATH_SHAPES])
def test_matvec_16_bit_matches_float64(variant, name, order, shape):
    dtype = half(name)
    A, x = draw(shape, dtype, shape[1], order), draw(shape[1], dtype, shape[1])
    out = poisoned((shape[0],), dtype)
    res = cudakit.matvec(A, x, out=out, variant=variant)
    assert res is out and res.shape == (shape[0],)
    assert_product(res, A, x, dtype, shape[1], f"{variant} {order} {shape}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("order", ["C", "F"])
def test_matvec_16_bit_plans_take_8_wide_vectors_split_and_unsplit(name, order):
    dtype = half(name)
    plans = []
    for shape in FAST_PATH_SHAPES:
        A, x = draw(shape, dtype, shape[1], order), draw(shape[1], dtype, shape[1])
        p = mvp.plan(A, x)
        assert p.vector and p.kernel.startswith("matvec_colmajor") == (order == "F" and shape[0] > 1), (shape, p)
        plans.append(p)
    assert any(p.chunks > 1 for p in plans) and any(p.chunks == 1 for p in plans)
    assert any(f", {mvp.FAST_THREADS}, " in p.kernel for p in plans if "rowmajor" in p.kernel) == (order == "C")


KNOBS = [{"persistent": False}, {"balanced": False}, {"block_rows": False}, {"row_unroll": 2}, {"row_unroll": 8},
         {"col_unroll": 2}, {"col_unroll": 8}, {"blocks_per_sm": 2}, {"blocks_per_sm": 16}]


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", KNOBS, ids=[",".join(f"{k}={v}" for k, v in kn.items()) for kn in KNOBS])
@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("order", ["C", "F"])
def test_matvec_16_bit_under_other_tuning(knobs, name, order):
    dtype = half(name)
    for shape in FAST_PATH_SHAPES + [(97, 1013), (3, 4096), (4096, 3)]:
        A, x = draw(shape, dtype, shape[1], order), draw(shape[1], dtype, shape[1])
        p = mvp.plan(A, x, **knobs)
        out = poisoned((shape[0],), dtype)
        mv._run_plan(A, x, out, p)
        assert_product(out, A, x, dtype, shape[1], f"{knobs} {order} {shape} {p}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", MATVEC_VARIANTS)
@pytest.mark.parametrize("name", HALVES)
def test_matvec_16_bit_transposed_strided_and_misaligned_views(variant, name):
    dtype = half(name)
    big = random_array((301, 403), dtype)
    flat = random_array(97 * 1013 + 8, dtype)
    xs = random_array(2 * 1013 + 8, dtype)
    cases = {
        "A.T (F-contiguous view)": (big.T, random_array(301, dtype)),
        "A[::2, ::3]": (big[::2, ::3], random_array(135, dtype)),
        "A[:, :400] (row stride > n)": (big[:, :400], random_array(400, dtype)),
        "C view at offset 1": (flat[1:97 * 1013 + 1].reshape(97, 1013), random_array(1013, dtype)),
        "C view at offset 1, n % 8 == 0": (flat[1:97 * 1008 + 1].reshape(97, 1008), random_array(1008, dtype)),
        "F view at offset 3, m % 8 == 0": (flat[3:96 * 1013 + 3].reshape((96, 1013), order="F"),
                                           random_array(1013, dtype)),
        "x at offset 1": (flat[:97 * 1008].reshape(97, 1008), xs[1:1009]),
        "x strided": (flat[:97 * 1013].reshape(97, 1013), xs[::2][:1013]),
        "negative strides": (big[::-1, ::-1], random_array(403, dtype)),
    }
    for what, (A, x) in cases.items():
        out = poisoned((A.shape[0],), dtype)
        assert cudakit.matvec(A, x, out=out, variant=variant) is out
        assert_product(out, A, x, dtype, A.shape[1], f"{variant} {what}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", MATVEC_VARIANTS)
@pytest.mark.parametrize("name", HALVES)
def test_matvec_16_bit_batched_and_broadcast(variant, name):
    dtype = half(name)
    cases = [((4, 97, 1013), (1013,), "C"), ((4, 97, 1013), (4, 1013), "C"), ((3, 1, 64, 128), (5, 128), "C"),
             ((97, 1024), (5, 1024), "C"), ((6, 96, 1024), (6, 1024), "C"), ((4, 97, 1013), (4, 1013), "F"),
             ((2, 3, 40, 24), (3, 24), "F")]
    for a_shape, x_shape, order in cases:
        A = random_array(a_shape, dtype)
        if order == "F":  # each matrix column-major: a transposed view of a C-order stack
            A = random_array(a_shape[:-2] + a_shape[-2:][::-1], dtype).swapaxes(-1, -2)
        x = random_array(x_shape, dtype)
        shape = np.broadcast_shapes(a_shape[:-2], x_shape[:-1]) + (a_shape[-2],)
        out = poisoned(shape, dtype)
        assert cudakit.matvec(A, x, out=out, variant=variant) is out
        assert_product(out[..., None], A, x[..., None], dtype, a_shape[-1], f"{variant} {a_shape} @ {x_shape} {order}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", HALVES)
def test_matvec_16_bit_zero_size_and_side_stream(name):
    import cupy

    dtype = half(name)
    out = poisoned((5,), dtype)
    assert cudakit.matvec(cupy.empty((5, 0), dtype), cupy.empty(0, dtype), out=out) is out
    assert bool((_check.as_float64(out) == 0).all())
    assert cudakit.matvec(cupy.empty((0, 5), dtype), random_array(5, dtype)).dtype == dtype
    A, x = draw((64, 1 << 16), dtype, 1 << 16), draw(1 << 16, dtype, 1 << 16)  # a split plan: float partials
    assert mvp.plan(A, x).chunks > 1
    res = on_a_side_stream(lambda o: cudakit.matvec(A, x, out=o), cupy.empty(64, dtype))
    assert_product(res, A, x, dtype, 1 << 16, "side stream")


def _cancelling(x, A_cols, length: int, count: int, dtype):
    """Make the chunks of `length` terms along the reduced axis sum to about +-2^17 in pairs that cancel: chunk
    2t + 1 repeats chunk 2t's A_cols values, x is +c over the even chunks and -c over the odd ones; terms past the
    pairs are scaled down to sum well inside float16's range (a last chunk shorter than `length` is never paired)."""
    pairs = min(count, x.size // length) // 2 * 2
    assert pairs >= 2, (count, length, x.size)
    end = pairs * length
    c = 2.0 ** math.ceil(math.log2(2.0 ** 18 / length))
    for t in range(0, pairs, 2):
        A_cols(slice((t + 1) * length, (t + 2) * length), slice(t * length, (t + 1) * length))
    signs = x[:end].reshape(pairs // 2, 2, length)
    signs[:, 0] = dtype.type(c)
    signs[:, 1] = dtype.type(-c)
    rest = x.size - end
    if rest:
        x[end:] *= dtype.type(2.0 ** -max(0, math.ceil(math.log2(rest * 2.25 / 2.0 ** 12))))
    return c


@pytest.mark.gpu
@pytest.mark.parametrize("order, shape", [("C", (8, 1 << 20)), ("C", (64, 1 << 18)), ("F", (64, 1 << 18)),
                                          ("F", (1024, 1 << 16))])
def test_matvec_float16_split_partials_are_never_rounded_to_16_bits(order, shape):
    """Chunk partial sums past float16's range that cancel in the total: a partial rounded to float16 would be inf,
    and the result inf or NaN."""
    dtype = np.dtype(np.float16)
    m, n = shape
    A, x = random_array(shape, dtype, order), random_array(n, dtype)
    p = mvp.plan(A, x)
    length = p.chunk * (8 if p.vector and "rowmajor" in p.kernel else 1)
    assert p.chunks >= 2 and length >= 64, p

    def mirror(dst, src):
        A[:, dst] = A[:, src]

    c = _cancelling(x, mirror, length, p.chunks, dtype)
    assert c * length >= 2 ** 18
    out = poisoned((m,), dtype)
    cudakit.matvec(A, x, out=out)
    assert_product(out, A, x, dtype, n, f"{order} {shape} {p}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", DOT_VARIANTS)
@pytest.mark.parametrize("name", HALVES)
@pytest.mark.parametrize("n", DOT_SIZES)
def test_dot_16_bit_matches_float64(variant, name, n):
    dtype = half(name)
    a, b = draw(n, dtype, n), draw(n, dtype, n)
    out = poisoned((), dtype)
    res = cudakit.dot(a, b, out=out, variant=variant)
    assert res is out and res.shape == ()
    assert_product(res, a, b, dtype, n, f"{variant} n={n}")
    res = cudakit.dot(a, b, variant=variant)  # allocated by the call: a 0-d array of the input dtype
    assert res.shape == () and res.dtype == dtype
    assert_product(res, a, b, dtype, n, f"{variant} n={n}, no out")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", DOT_VARIANTS)
@pytest.mark.parametrize("name", HALVES)
def test_dot_16_bit_misaligned_strided_and_empty(variant, name):
    import cupy

    dtype = half(name)
    base_a, base_b = random_array(10_007, dtype), random_array(10_019, dtype)
    for a, b in [(base_a[1:], base_b[3:10_009]), (base_a[::2], base_b[1::2][:5004]), (base_a[8:], base_b[:9999]),
                 (base_a[::-1], base_b[:10_007])]:
        assert_product(cudakit.dot(a, b, variant=variant), a, b, dtype, a.size, f"{variant} {a.strides}")
    empty = cupy.empty(0, dtype)
    out = poisoned((), dtype)
    assert cudakit.dot(empty, empty, out=out, variant=variant) is out and float(_check.as_float64(out)) == 0.0


@pytest.mark.gpu
def test_dot_float16_block_partials_are_never_rounded_to_16_bits():
    """Per-block partial sums past float16's range that cancel in the total (block 2t + 1 reads a copy of block
    2t's a against -b): a partial rounded to float16 would be inf, and the result inf or NaN."""
    import cupy

    dtype = np.dtype(np.float16)
    device = cupy.cuda.Device().id
    per_vector = 16 // dtype.itemsize
    blocks = dt._fast_plan(dtype, 1 << 30, True, device)[1]  # a full GPU of blocks
    if blocks % 2:
        pytest.skip(f"{blocks} blocks: the pairs need an even count")
    period = blocks * dt.FAST_THREADS * per_vector  # block i reads the vectors [256 i, 256 (i + 1)) of each period
    n = 8 * period
    assert dt._fast_plan(dtype, n, True, device)[1] == blocks
    a, b = random_array(n, dtype), random_array(n, dtype)
    segments = a.reshape(8, blocks // 2, 2, dt.FAST_THREADS * per_vector)
    segments[:, :, 1] = segments[:, :, 0]
    signs = b.reshape(segments.shape)
    c = 2.0 ** math.ceil(math.log2(2.0 ** 18 / (8 * dt.FAST_THREADS * per_vector)))
    signs[:, :, 0] = dtype.type(c)
    signs[:, :, 1] = dtype.type(-c)
    out = poisoned((), dtype)
    cudakit.dot(a, b, out=out)
    assert_product(out, a, b, dtype, n, f"{blocks} blocks")


@pytest.mark.gpu
@pytest.mark.parametrize("name", HALVES)
def test_seed_variants_refuse_16_bit_types_before_any_launch(name):
    import cupy

    dtype = half(name)
    A, x = random_array((64, 48), dtype), random_array(48, dtype)
    for v in cudakit.variants("matvec"):
        if name in v.dtypes:
            continue
        out = poisoned((64,), dtype)
        with pytest.raises(TypeError, match=f"variant '{v.name}' does not take {name}"):
            cudakit.matvec(A, x, out=out, variant=v.name)
        assert bool(cupy.isnan(_check.as_float64(out)).all()), v.name  # nothing ran
    a = random_array(100, dtype)
    for v in cudakit.variants("dot"):
        if name not in v.dtypes:
            out = poisoned((), dtype)
            with pytest.raises(TypeError, match=f"variant '{v.name}' does not take {name}"):
                cudakit.dot(a, a, out=out, variant=v.name)
            assert bool(cupy.isnan(_check.as_float64(out)))


@pytest.mark.gpu
@pytest.mark.parametrize("name", HALVES)
def test_16_bit_bad_inputs(name):
    import cupy

    dtype = half(name)
    A, x = random_array((4, 3), dtype), random_array(3, dtype)
    with pytest.raises(TypeError, match="one dtype"):
        cudakit.matvec(A, random_array(3, np.float16 if name == "bfloat16" else np.float32))
    with pytest.raises(TypeError, match=f"dtype {name}"):
        cudakit.matvec(A, x, out=cupy.empty(4, np.float32))
    with pytest.raises(TypeError, match="float16, bfloat16"):  # the message lists what is supported
        cudakit.matvec(A.view(np.int16), x.view(np.int16))
    with pytest.raises(TypeError, match="one dtype"):
        cudakit.dot(x, x.view(np.int16))
    with pytest.raises(TypeError, match=f"dtype {name}"):
        cudakit.dot(x, x, out=cupy.empty((), np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("name", HALVES)
def test_16_bit_check_mode(name, monkeypatch):
    from cudakit import _variants

    dtype = half(name)
    A, x = random_array((97, 1013), dtype), random_array(1013, dtype)
    a = random_array(5000, dtype)
    cudakit.matvec(A, x, check=True)  # the right results pass
    cudakit.dot(a, a, check=True)

    def corrupted(run):
        def wrong(p, q, out):
            run(p, q, out)
            bits = out.reshape(-1)[:1].view(np.uint16)
            bits ^= np.uint16(0x0400 if name == "float16" else 0x0080)  # the lowest exponent bit: off by 2x
        return wrong

    for op, call in (("matvec", lambda: cudakit.matvec(A, x, check=True)),
                     ("dot", lambda: cudakit.dot(a, a, check=True))):
        row = _variants.lookup(op, "fast")
        broken = _variants.Variant(op, "fast", row.lesson, corrupted(row.run), dtypes=row.dtypes)
        monkeypatch.setitem(_variants._TABLE[op], "fast", broken)  # (dot's short cut reads the same table)
        with pytest.raises(_check.CheckError, match="relative error"):
            call()
