"""Shared test helpers: GPU detection, fresh random inputs, poisoned outputs, float64 relative-error checks."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

# NVRTC keeps compiled programs in the CUDA compute cache: a program compiled before in any process on this machine
# comes back without running ptxas, so with an empty log, and the compile checks would read no register report.
os.environ["CUDA_CACHE_DISABLE"] = "1"


@functools.lru_cache(maxsize=None)
def gpu_unavailable_reason() -> str | None:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
        return "no CUDA GPU visible"
    except Exception as exc:  # no driver, no device, no CuPy
        return f"no usable CUDA GPU ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"


def pytest_collection_modifyitems(config, items):
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped, with the reason, where there is none)")
    config.addinivalue_line("markers", "large: arrays past 2^31 elements (tens of GB of device memory; run one at a time)")


def random_array(shape, dtype, order="C"):
    """Fresh random data every call, drawn as the bench draws it (floats uniform in [0.5, 1.5): never zeros, and
    positive, so ||ref|| carries no cancellation), in C or F order."""
    from cudakit.testing import random_array as draw

    return draw(shape, dtype, order)


def poisoned(shape, dtype):
    """An output buffer full of NaN (floats) or a fixed bit pattern: an element the kernel skips stays wrong."""
    from cudakit.testing import poisoned as draw

    return draw(shape, dtype)


def matmul_ref64(A, B):
    """cupy.matmul of A and B in float64: the reference products are checked against."""
    import cupy

    return cupy.matmul(A.astype(cupy.float64), B.astype(cupy.float64))


def assert_close(out, ref64, dtype, k, what=""):
    """||out - ref|| / ||ref|| within cudakit's tolerance for k-term sums in dtype (NaN fails)."""
    from cudakit import _check

    err = _check.relative_error(out, ref64)
    tol = _check.tolerance(dtype, k)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"


def assert_products_close(operands, dtype, k, what=""):
    """cudakit.matmul(a, b, out=out) of each (a, b) into a poisoned out, the same out returned and within
    assert_close of float64."""
    import cudakit

    for a, b in operands:
        want = matmul_ref64(a, b)
        out = poisoned(want.shape, dtype)
        assert cudakit.matmul(a, b, out=out) is out
        assert_close(out, want, dtype, k, f"{what} {a.shape} {a.strides} {b.shape} {b.strides}")


def on_a_side_stream(op, out):
    """Run op(out) as a pipeline on its own stream would, and return out.

    A fresh non-blocking stream first waits for the inputs (drawn on the current stream), runs op once (warm-up:
    the stream's workspace), then captures op in a CUDA graph and replays it into a freshly poisoned `out`. A
    kernel launched on any other stream is not in the graph, so `out` stays poisoned and the check fails.
    """
    import cupy

    from cudakit.testing import poison

    inputs_ready = cupy.cuda.get_current_stream().record()
    side = cupy.cuda.Stream(non_blocking=True)
    side.wait_event(inputs_ready)
    with side:
        op(out)
        side.begin_capture()
        try:
            op(out)
        finally:
            graph = side.end_capture()
    cupy.cuda.Device().synchronize()  # whatever escaped the capture has run
    with side:
        poison(out)
        graph.launch()
    side.synchronize()
    return out


ROOT = Path(__file__).resolve().parents[1]
HIDE_GPU = {"CUDA_VISIBLE_DEVICES": ""}


def run_cli(*args, env=None, timeout=120):
    """python3 *args in the repository root, the source tree first on the path (what a user types)."""
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    full_env.update(env or {})
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


def assert_compiles_without_spills(family: str, groups, archs) -> None:
    """Every module of `groups` compiles with NVRTC for every arch of `archs`: ptxas's own report lines only (no
    warning), and from sm_80 on (where the tensor-core bodies exist) no stack frame and no spills."""
    import re

    from cudakit import _compile

    for arch in archs:
        verbose = int(arch[3:5]) >= 80
        for expressions in groups:
            ok, log, lowered = _compile.compile_offline(family, expressions, arch, ("-Xptxas=-v",) if verbose else ())
            lines = [l for l in log.splitlines() if l.strip() and "Architectures prior to" not in l]
            assert ok and set(lowered) == set(expressions), f"{arch} {expressions[0]}:\n{log}"
            assert all(l.startswith("ptxas") for l in lines), f"{arch} {expressions[0]} printed:\n{log}"
            assert not any("warning" in l.lower() for l in lines), f"{arch} {expressions[0]} printed:\n{log}"
            if verbose:
                frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
                assert len(frames) == len(expressions), log
                assert all(f == ("0", "0", "0") for f in frames), f"{arch} {expressions[0]}:\n{log}"


def assert_tensor_core_product(out, A, B, what: str) -> None:
    """out = A @ B from the tensor cores within cudakit's bound for its dtype: float32 sums of 16-bit products
    rounded once, or (a float32 result) TF32 inputs."""
    from cudakit import _check

    k = A.shape[-1]
    err = _check.product_error(out, A, B)
    bound = _check.tf32_tolerance(k) if out.dtype.name == "float32" else _check.tolerance(out.dtype, k)
    assert err <= bound, f"{what}: relative error {err:.3e} > {bound:.2e}"


def needs_sm80():
    """Skip the calling test where the GPU has no FP64 tensor cores (before sm_80)."""
    import cupy

    if int(cupy.cuda.Device().compute_capability) < 80:
        pytest.skip("FP64 tensor cores need sm_80")
