"""The Hopper wgmma kernels (kernels/matmul_wgmma.cu through cudakit._hopper).

GPU-less: every instantiation compiles for sm_90a through NVRTC with an empty log, no spills and no stack frame, and
(where a disassembler is installed) its SASS runs on HGMMA. On a compute capability 9.0 GPU: every kernel, dtype and
layout against a float64 reference of the same inputs by the relative error of _check.product_error, bounded by
  float16, bfloat16: _check.tolerance: u + (1 + u) 4 eps32 sqrt(max(k, 16)) (f32 accumulation, one rounding to T;
                    u = 2^-11 or 2^-8),
  float32 (TF32):   _check.tf32_tolerance: 4u + 4u^2 + (1 + 2u)^2 4 eps32 sqrt(max(k, 16)), u = 2^-11 (the kernels
                    hand float32 bits to the tensor cores, which truncate each input to TF32: relative error < 2u).
Outputs start poisoned (NaN), inputs are fresh random draws.
"""
import re
import shutil
import subprocess

import numpy as np
import pytest

from cudakit import _compile, _hopper
from conftest import assert_tensor_core_product, poisoned, random_array

KINDS = ("wgmma", "wgmma_fast")
LAYOUTS = [("C", "F"), ("C", "C"), ("F", "F"), ("F", "C")]  # (A, B) orders: K-major both first
SHAPES = [(1, 1, 1), (17, 33, 65), (64, 64, 64), (30, 128, 200), (200, 128, 30), (256, 100, 256),
          (129, 1000, 257), (2048, 192, 4096), (1000, 65, 999)]


# ---------------------------------------------------------------------------------------------------- GPU-less
def _nvrtc_or_skip():
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="the compile check needs the test extra (NVRTC)")
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    if 90 not in archs:
        pytest.skip("this NVRTC does not build sm_90a")
    return nvrtc


@pytest.mark.parametrize("expressions", _hopper.instantiation_groups(), ids=lambda g: g[0].split("<")[0] + "<" +
                         g[0].split("<")[1].split(",")[0] + ">")
def test_compiles_for_sm90a_without_warnings_or_spills(expressions):
    _nvrtc_or_skip()
    for arch in _hopper.ARCHS:
        ok, log, lowered = _compile.compile_offline(_hopper.FAMILY, expressions, arch)
        assert ok, log
        assert log == "", f"{arch} printed:\n{log}"
        assert set(lowered) == set(expressions)
        ok, log, _ = _compile.compile_offline(_hopper.FAMILY, expressions, arch, ("-Xptxas=-v",))
        assert ok, log
        entries = re.findall(r"Compiling entry function", log)
        frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
        assert len(entries) == len(expressions) == len(frames), log
        assert all(f == ("0", "0", "0") for f in frames), log  # registers only: no local memory at all
        assert "warning" not in log.lower() and "C7508" not in log, log  # C7508: setmaxnreg ignored


def _cubin(nvrtc, expressions, arch):
    prog = nvrtc.nvrtcCreateProgram(_compile.source(_hopper.FAMILY).encode(), b"matmul_wgmma.cu", 0, [], [])[1]
    try:
        for expr in expressions:
            nvrtc.nvrtcAddNameExpression(prog, expr.encode())
        opts = [o.encode() for o in _compile.options() + (f"--gpu-architecture={arch}",)]
        assert nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
        size = nvrtc.nvrtcGetCUBINSize(prog)[1]
        cubin = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, cubin)
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def test_sass_runs_on_hgmma(tmp_path):
    """Each kernel's SASS issues HGMMA (a wgmma the compiler could not keep would be missing or serialised) and
    touches no local memory. Needs nvdisasm (pip: nvidia-cuda-nvdisasm) or cuobjdump on PATH."""
    nvrtc = _nvrtc_or_skip()
    tool = shutil.which("nvdisasm") or shutil.which("cuobjdump")
    if tool is None:
        pytest.skip("no nvdisasm or cuobjdump on PATH")
    exprs = [g[0] for g in _hopper.instantiation_groups()]
    path = tmp_path / "k.cubin"
    path.write_bytes(_cubin(nvrtc, exprs, "sm_90a"))
    args = [tool, "-c", str(path)] if tool.endswith("nvdisasm") else [tool, "-sass", str(path)]
    sass = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    functions = re.split(r"\n\s*\.text\.|Function : ", sass)[1:]
    assert len(functions) >= len(exprs), sass[:2000]
    for body in functions[:len(exprs)]:
        assert "HGMMA" in body, body[:300]
        assert not re.search(r"\b(STL|LDL)\b", body), body[:300]


def test_variant_rows():
    import cudakit

    rows = {v.name: v for v in cudakit.variants("matmul")}
    for kind in KINDS:
        assert rows[kind].min_cc == 90 and set(rows[kind].dtypes) == {"float16", "bfloat16", "float32"}
    assert _hopper.ARCHS == ("sm_90a",)


# ---------------------------------------------------------------------------------------------------- on an H100
@pytest.fixture
def hopper():
    import cupy

    if not _hopper.available(cupy.cuda.runtime.getDevice()):
        pytest.skip("needs a compute capability 9.0 GPU (sm_90a)")


def _dtype(name):
    if name == "bfloat16":
        return np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    return np.dtype(name)


def _operand(shape, dtype, order):
    r, c = shape
    if order == "C":
        return random_array(shape, dtype)
    if order == "F":
        return random_array((c, r), dtype).T
    if order == "offset":  # one element off 16 bytes, rows of an odd length apart: the host pads a copy
        return random_array((r + 1, c + 3), dtype)[1:, 1:c + 1]
    if order == "strided":  # no unit stride
        return random_array((r, 2 * c), dtype)[:, ::2]
    raise ValueError(order)


def _run(kind, A, B, dtype, **kw):
    out = poisoned((A.shape[0], B.shape[1]), dtype)
    _hopper.run_wgmma(kind, A, B, out, **kw)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
def test_shapes_and_layouts(hopper, kind, layout, name):
    dtype = _dtype(name)
    for m, k, n in SHAPES:
        A, B = _operand((m, k), dtype, layout[0]), _operand((k, n), dtype, layout[1])
        assert_tensor_core_product(_run(kind, A, B, dtype), A, B, f"{kind} {name} {layout} {m}x{k}x{n}")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("kind", KINDS)
def test_odd_large_shape(hopper, kind, name):
    dtype = _dtype(name)
    for layout in (("C", "F"), ("F", "C")):
        A, B = _operand((4097, 4095), dtype, layout[0]), _operand((4095, 4099), dtype, layout[1])
        assert_tensor_core_product(_run(kind, A, B, dtype), A, B, f"{kind} {name} {layout} 4097x4095x4099")


@pytest.mark.gpu
@pytest.mark.parametrize("bn", _hopper.FAST_BNS)
def test_both_fast_tiles(hopper, bn):
    for m, k, n in [(1000, 777, 3000), (64, 64, 300), (4096, 512, 4096)]:
        A, B = _operand((m, k), np.float16, "C"), _operand((k, n), np.float16, "C")
        assert_tensor_core_product(_run("wgmma_fast", A, B, np.float16, bn=bn), A, B, f"BN={bn} {m}x{k}x{n}")


# Tile rows (of 128) even and odd (a cluster's second CTA past m), one tile, several waves of persistent blocks;
# n a multiple of 8 (the 16-byte epilogue of 16-bit types) and not.
CONFIG_SHAPES = [(300, 200, 520), (256, 64, 256), (100, 129, 70), (1000, 777, 3000), (2200, 1000, 4100)]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("config", _hopper.FAST_CONFIGS, ids=lambda c: f"BN{c[0]}x{c[1]}")
def test_every_fast_config(hopper, config, name):
    """Each (BN, cluster) of the fast kernel forced, every layout, odd tile rows, and a batch with a broadcast B."""
    import cupy

    bn, cluster = config
    dtype = _dtype(name)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    plan = _hopper.fast_plan(name, False, False, 4096, 4096, 1, cupy.cuda.runtime.getDevice(), bn, cluster)
    assert plan[0] == bn and plan[2] <= sms
    for la, lb in LAYOUTS:
        for m, k, n in CONFIG_SHAPES[:3] if la != "C" or lb != "F" else CONFIG_SHAPES:
            A, B = _operand((m, k), dtype, la), _operand((k, n), dtype, lb)
            out = _run("wgmma_fast", A, B, dtype, bn=bn, cluster=cluster)
            assert_tensor_core_product(out, A, B, f"BN={bn} cluster {cluster} {name} {la}{lb} {m}x{k}x{n}")
    for n in (300, 304):  # 4 tile rows (a cluster row past m in every product); n % 8: element pairs or 16 bytes
        count, m, k = 5, 390, 100
        A3, B = random_array((count, m, k), dtype), random_array((k, n), dtype)
        out = poisoned((count, m, n), dtype)
        _hopper.run_wgmma("wgmma_fast", A3[0], B, out[0], batch=(count, m * k, 0), bn=bn, cluster=cluster)
        for z in range(count):
            assert_tensor_core_product(out[z], A3[z], B, f"BN={bn} cluster {cluster} {name} batch product {z} n {n}")


@pytest.mark.gpu
def test_planner_prefers_wide_tiles_and_the_allowed_clusters_on_large_squares(hopper):
    import cupy

    device = cupy.cuda.runtime.getDevice()
    bn, cluster, slots = _hopper.fast_plan("float16", False, False, 8192, 8192, 1, device)
    assert bn == 256 and slots >= cluster
    allowed = 2 if _hopper.FAST_CLUSTER >= 2 and _hopper._slots("float16", False, False, 256, 2, device) >= 2 else 1
    assert cluster == allowed


@pytest.mark.gpu
@pytest.mark.parametrize("name", _hopper.THROUGHPUT_DTYPES)
def test_wgmma_throughput_runs_and_leaves_the_sink(hopper, name):
    import cupy

    size = _hopper.ceiling_sink_size(cupy.cuda.runtime.getDevice())
    sink = cupy.full(size, 7.0, cupy.float32)
    flops = _hopper.wgmma_throughput(name, 1000, sink)
    cupy.cuda.runtime.deviceSynchronize()
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    assert flops == 2.0 * 64 * 256 * (64 if name == "float16" else 32) * 2 * 1000 * sms
    assert bool((sink == 7.0).all())  # positive inputs: the guarded store never runs
    with pytest.raises(ValueError):
        _hopper.wgmma_throughput(name, 10, cupy.zeros(size - 1, cupy.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("kind", KINDS)
def test_misaligned_views(hopper, kind, name):
    dtype = _dtype(name)
    for a, b in [("offset", "offset"), ("strided", "F"), ("C", "strided"), ("offset", "C")]:
        A, B = _operand((131, 77), dtype, a), _operand((77, 259), dtype, b)
        assert_tensor_core_product(_run(kind, A, B, dtype), A, B, f"{kind} {name} {a}/{b}")
    A, B = _operand((67, 80), dtype, "C"), _operand((80, 128), dtype, "C")
    C = poisoned((67 * 128 + 1,), dtype)[1:].reshape(67, 128)  # C-contiguous, one element off: element stores
    _hopper.run_wgmma(kind, A, B, C)
    assert_tensor_core_product(C, A, B, f"{kind} {name} offset output")


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("kind", KINDS)
def test_batched_and_broadcast(hopper, kind, name):
    dtype = _dtype(name)
    count, m, k, n = 7, 150, 130, 190
    item = dtype.itemsize
    A3 = random_array((count, m, k), dtype)
    B3F = random_array((count, n, k), dtype).transpose(0, 2, 1)  # F-order products (K-major B)
    Bc = random_array((k, n), dtype)  # one B for every product: batch stride 0
    A3odd = random_array((count, m, k + 1), dtype)[:, :, :k]  # ld = k + 1: not whole 16 bytes, copied with padding
    cases = [(A3, B3F, A3.strides[0] // item, B3F.strides[0] // item), (A3, Bc[None], A3.strides[0] // item, 0),
             (A3odd, B3F, A3odd.strides[0] // item, B3F.strides[0] // item)]
    for A, B, sa, sb in cases:
        out = poisoned((count, m, n), dtype)
        _hopper.run_wgmma(kind, A[0], B[0], out[0], batch=(count, sa, sb))
        for z in range(count):
            assert_tensor_core_product(out[z], A[z], B[z if sb else 0], f"{kind} {name} product {z} (strides {sa}, {sb})")


@pytest.mark.gpu
def test_run_fast_plans(hopper):
    A, B = random_array((32, 1024), np.float16), random_array((1024, 1024), np.float16)
    out = poisoned((32, 1024), np.float16)
    assert not _hopper.run_fast(A, B, out)  # m under FAST_MIN_SIDE: the Ampere path's
    assert bool(np.isnan(out.get()).all())  # nothing launched
    A = random_array((1024, 1024), np.float16)
    out = poisoned((1024, 1024), np.float16)
    assert _hopper.run_fast(A, B, out)
    assert_tensor_core_product(out, A, B, "run_fast 1024^3")
    A3, B3 = random_array((4, 256, 512), np.float16), random_array((4, 512, 384), np.float16)
    out3 = poisoned((4, 256, 384), np.float16)
    assert _hopper.run_fast(A3[0], B3[0], out3[0], batch=(4, 256 * 512, 512 * 384))
    for z in range(4):
        assert_tensor_core_product(out3[z], A3[z], B3[z], f"run_fast batched {z}")


@pytest.mark.gpu
@pytest.mark.large
@pytest.mark.parametrize("kind", KINDS)
def test_past_2_31_elements(hopper, kind):
    """A with more than 2^31 elements, then C with more: 64-bit offsets in the epilogue and TMA coordinates."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    if cupy.cuda.runtime.memGetInfo()[0] < 14 * 2**30:
        pytest.skip("needs 14 GiB of free device memory")
    rows = [0, 1, 40000, 65535, 65536]
    for m, k, n in [(65537, 32769, 64), (65537, 64, 32769)]:
        A, B = random_array((m, k), np.float16), random_array((k, n), np.float16)
        out = poisoned((m, n), np.float16)
        _hopper.run_wgmma(kind, A, B, out)
        assert_tensor_core_product(out[rows], A[rows], B, f"{kind} {m}x{k}x{n} rows {rows}")
        del A, B, out
        cupy.get_default_memory_pool().free_all_blocks()
