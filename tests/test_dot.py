import numpy as np
import pytest

import cudakit
from cudakit import _check
from conftest import assert_close, on_a_side_stream, poisoned, random_array

VARIANTS = [v.name for v in cudakit.variants("dot")]
SIZES = [1, 2, 3, 31, 512, 513, 4097, 100_003, 1 << 20, (1 << 20) + 7]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", SIZES)
def test_dot_matches_float64(variant, dtype, n):
    import cupy

    a, b = random_array(n, dtype), random_array(n, dtype)
    out = poisoned((), dtype)
    res = cudakit.dot(a, b, out=out, variant=variant)
    assert res is out and res.shape == () and res.dtype == dtype
    assert_close(res, a.astype(cupy.float64) @ b.astype(cupy.float64), dtype, n, f"{variant} n={n}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_dot_repeated_calls_reuse_the_block_counter(variant):
    import cupy

    a, b = random_array(300_001, np.float32), random_array(300_001, np.float32)
    ref = a.astype(cupy.float64) @ b.astype(cupy.float64)
    first = float(cudakit.dot(a, b, variant=variant))
    for _ in range(5):  # the one-pass kernel resets its counter; a stale counter would give a partial sum
        assert float(cudakit.dot(a, b, variant=variant)) == first
    assert_close(cupy.asarray(first), ref, np.float32, a.size, variant)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_dot_misaligned_and_strided_inputs(variant):
    import cupy

    base_a, base_b = random_array(10_007, np.float32), random_array(10_009, np.float32)
    for a, b in [(base_a[1:], base_b[3:10_009]), (base_a[::2], base_b[1::2][:5004])]:
        ref = a.astype(cupy.float64) @ b.astype(cupy.float64)
        assert_close(cudakit.dot(a, b, variant=variant), ref, np.float32, a.size, variant)


@pytest.mark.gpu
def test_dot_on_a_non_default_stream_and_zero_size():
    import cupy

    a, b = random_array(1 << 16, np.float64), random_array(1 << 16, np.float64)
    res = on_a_side_stream(lambda out: cudakit.dot(a, b, out=out), cupy.empty((), np.float64))
    assert_close(res, a @ b, np.float64, a.size)
    empty = cupy.empty(0, np.float32)
    assert float(cudakit.dot(empty, empty)) == 0.0


@pytest.mark.gpu
def test_dot_check_mode_catches_a_wrong_result(monkeypatch):
    from cudakit import _variants

    a, b = random_array(1000, np.float32), random_array(1000, np.float32)
    cudakit.dot(a, b, check=True)  # right result passes
    fast = _variants.lookup("dot", "fast")
    broken = _variants.Variant("dot", "fast", fast.lesson, lambda a, b, out: out.fill(1.0))
    monkeypatch.setitem(_variants._TABLE["dot"], "fast", broken)
    with pytest.raises(_check.CheckError, match="relative error"):
        cudakit.dot(a, b, check=True)
    monkeypatch.setattr(_check, "CHECK_BY_DEFAULT", True)  # CUDAKIT_CHECK=1 at import
    with pytest.raises(_check.CheckError):
        cudakit.dot(a, b)


@pytest.mark.gpu
def test_dot_bad_inputs():
    import cupy

    a = random_array(10, np.float32)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.dot(np.ones(10, np.float32), a)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.dot(a, [1.0] * 10)
    with pytest.raises(ValueError, match=r"\(10,\).*\(11,\)"):
        cudakit.dot(a, random_array(11, np.float32))
    with pytest.raises(ValueError, match="1-D"):
        cudakit.dot(a.reshape(2, 5), a.reshape(2, 5))
    with pytest.raises(TypeError, match="one dtype"):
        cudakit.dot(a, a.astype(np.float64))
    with pytest.raises(TypeError, match="unsupported dtype"):
        cudakit.dot(a.astype(np.int32), a.astype(np.int32))
    with pytest.raises(ValueError, match="valid variants: gpu_dot, fast"):
        cudakit.dot(a, a, variant="nope")
    with pytest.raises(ValueError, match="shape"):
        cudakit.dot(a, a, out=cupy.empty(1, np.float32))
    with pytest.raises(TypeError, match="dtype"):
        cudakit.dot(a, a, out=cupy.empty((), np.float64))
    b = random_array(10, np.float32)
    for out in (a[0], a[9], b[4]):  # a 0-d view into an input: the kernel would overwrite what it reads
        with pytest.raises(ValueError, match="overlaps"):
            cudakit.dot(a, b, out=out)
    wide = random_array(20, np.float32)
    out = wide[10]
    res = cudakit.dot(wide[:10], b, out=out)  # the same allocation, outside the input: fine
    assert res is out
    assert_close(res, wide[:10].astype(cupy.float64) @ b.astype(cupy.float64), np.float32, 10)
