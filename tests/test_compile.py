"""GPU-less: every kernel of every family compiles through NVRTC, with no warnings, for every supported arch that
the installed NVRTC builds."""
import importlib

import pytest

from cudakit import _compile

nvrtc = pytest.importorskip("cuda.bindings.nvrtc",
                            reason="NVRTC check needs the test extra: pip install -e .[test12] (or .[test13])")

FAMILIES = ("matvec", "matmul", "matmul_tc", "matmul_wgmma", "matmul_dmma", "matmul_longk", "matmul_shortk",
            "matmul_fewrows", "transpose", "dot", "resize", "ceilings")
# The family's Python module, where it is not cudakit.<family>: the bench's ceiling kernels are not an op; the
# Hopper kernels live beside the tensor-map code that launches them.
MODULES = {"ceilings": "cudakit._ceilings", "matmul_wgmma": "cudakit._hopper", "matmul_dmma": "cudakit._dmma",
           "matmul_longk": "cudakit._longk", "matmul_shortk": "cudakit._shortk",
           "matmul_fewrows": "cudakit._fewrows"}


def family_archs(family: str) -> tuple[str, ...]:
    """The archs `family` is compiled for: its module's ARCHS (the sm_90a family) or every supported one."""
    module = importlib.import_module(MODULES.get(family, f"cudakit.{family}"))
    return getattr(module, "ARCHS", None) or _compile.nvrtc_archs()


def compile_for(family: str, expressions, arch: str) -> str:
    succeeded, log, lowered = _compile.compile_offline(family, expressions, arch)
    # NVRTC 12 prints this notice for sm_70 whatever the source; it is about the target, not our code.
    log = "".join(l for l in log.splitlines(True) if "Architectures prior to" not in l).strip()
    assert succeeded, f"{family} for {arch} failed:\n{log}"
    assert set(lowered) == set(expressions)
    return log


def test_the_checked_architectures_follow_the_nvrtc_major():
    """CUDA 12's NVRTC checks sm_70 too; CUDA 13's, which dropped Volta, checks from sm_75. Nothing else is left out."""
    major = nvrtc.nvrtcVersion()[1]
    archs = _compile.nvrtc_archs()
    assert set(archs) >= set(_compile.SUPPORTED_ARCHS) - {"sm_70"}
    assert ("sm_70" in archs) == (major < 13), f"NVRTC {major}: {archs}"


@pytest.mark.parametrize("family, arch", [(f, a) for f in FAMILIES for a in family_archs(f)])
def test_family_compiles_without_warnings(family, arch):
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


def test_kept_makes_each_value_once_keeps_none_and_starts_over_past_its_bound(monkeypatch):
    monkeypatch.setattr(_compile, "KEPT", 3)
    cache, made = {}, []

    def make(*args):
        made.append(args)
        return None if args == ("none",) else sum(args)

    assert _compile.kept(cache, "a", make, 1, 2) == 3 and _compile.kept(cache, "a", make, 5, 5) == 3
    assert _compile.kept(cache, "n", make, "none") is None and _compile.kept(cache, "n", make, "none") is None
    assert made == [(1, 2), ("none",)]
    _compile.kept(cache, "b", make, 4)
    assert len(cache) == 3
    assert _compile.kept(cache, "c", make, 7) == 7 and cache == {"c": 7}  # past the bound: started over
