"""GPU-less: every kernel of every family compiles through NVRTC, with no warnings, for every supported arch."""
import importlib

import pytest

from cudakit import _compile

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC check needs the test extra: pip install -e .[test]")

FAMILIES = ("matvec", "matmul", "transpose", "dot", "ceilings")
MODULES = {"ceilings": "cudakit._ceilings"}  # the bench's ceiling kernels are not an op: a private module


def _check(result):
    err = result[0]
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    return result[1:] if len(result) > 2 else (result[1] if len(result) == 2 else None)


def compile_for(family: str, expressions, arch: str) -> str:
    src = _compile.source(family).encode()
    prog = _check(nvrtc.nvrtcCreateProgram(src, f"{family}.cu".encode(), 0, [], []))
    try:
        for expr in expressions:
            _check(nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
        opts = [o.encode() for o in _compile.options()] + [f"--gpu-architecture={arch}".encode()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog))
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        log = log.rstrip(b"\x00 ").decode()
        # NVRTC 12 prints this notice for sm_70 whatever the source; it is about the target, not our code.
        log = "".join(l for l in log.splitlines(True) if "Architectures prior to" not in l).strip()
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, f"{family} for {arch} failed:\n{log}"
        for expr in expressions:
            _check(nvrtc.nvrtcGetLoweredName(prog, expr.encode()))
        assert _check(nvrtc.nvrtcGetCUBINSize(prog)) > 0
        return log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.mark.parametrize("arch", _compile.SUPPORTED_ARCHS)
@pytest.mark.parametrize("family", FAMILIES)
def test_family_compiles_without_warnings(family, arch):
    err, supported = nvrtc.nvrtcGetSupportedArchs()
    if int(arch[3:]) not in supported:
        pytest.skip(f"this NVRTC {nvrtc.nvrtcVersion()[1:]} no longer builds {arch}; CI's NVRTC 12 checks it")
    module = importlib.import_module(MODULES.get(family, f"cudakit.{family}"))
    groups = module.instantiation_groups()
    assert groups
    for expressions in groups:
        log = compile_for(family, expressions, arch)
        assert log == "", f"{family} for {arch} printed:\n{log}"


def test_a_broken_kernel_is_caught(monkeypatch):
    """The check above can fail: a source with an error and one with a warning are both reported."""
    monkeypatch.setattr(_compile, "source", lambda family: "__global__ void k(){ int unused; undefined_name(); }")
    with pytest.raises(AssertionError):
        compile_for("dot", [], "sm_90")
    monkeypatch.setattr(_compile, "source", lambda family: "__global__ void k(int* p){ int x = 3; (void)p; }")
    assert "warning" in compile_for("dot", [], "sm_90").lower()
