"""The one place a kernels/*.cu file becomes a cupy.RawModule.

A family's module is compiled lazily, once per (family, set of template instantiations, device), and cached.
The same source text and options are what the GPU-less NVRTC test compiles for every supported architecture.
"""
from __future__ import annotations

import functools
from pathlib import Path

# Architectures every kernel must compile for, warning-free (checked in CI through NVRTC, no GPU needed).
SUPPORTED_ARCHS = ("sm_70", "sm_80", "sm_86", "sm_89", "sm_90")
NVRTC_OPTIONS = ("--std=c++17",)


def kernel_dir() -> Path:
    """kernels/ beside the package in a source tree, or the copy installed as cudakit/kernels."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "kernels", here.parent / "kernels"):
        if (candidate / "common.cuh").is_file():
            return candidate
    raise FileNotFoundError(f"cudakit: no kernels/ directory next to {here}")


@functools.lru_cache(maxsize=None)
def source(family: str) -> str:
    return (kernel_dir() / f"{family}.cu").read_text()


def options() -> tuple[str, ...]:
    return NVRTC_OPTIONS + (f"-I{kernel_dir()}",)


@functools.lru_cache(maxsize=None)
def _module(family: str, expressions: tuple[str, ...], device_id: int):
    import cupy

    with cupy.cuda.Device(device_id):
        mod = cupy.RawModule(code=source(family), options=options(), name_expressions=expressions)
        mod.compile()
    return mod


@functools.lru_cache(maxsize=None)
def _kernel(family: str, expression: str, expressions: tuple[str, ...], device_id: int):
    return _module(family, expressions, device_id).get_function(expression)


def kernel(family: str, expression: str, expressions: tuple[str, ...]):
    """The compiled kernel `expression` (a template instantiation such as 'gpu_dot<float>') of `family`.

    `expressions` is every instantiation built with it into one module (a family passes all of a dtype's),
    so one compile serves every variant of that dtype on the current device. Cached: a hot call costs a lookup.
    """
    import cupy

    return _kernel(family, expression, expressions, cupy.cuda.runtime.getDevice())


def launch(fn, grid, block, args, shared_mem: int = 0) -> None:
    """Launch on CuPy's current stream (RawKernel's default), raising the dynamic shared-memory cap when needed."""
    if shared_mem > 48 * 1024 and fn.max_dynamic_shared_size_bytes < shared_mem:
        fn.max_dynamic_shared_size_bytes = shared_mem
    fn(tuple(grid), tuple(block), args, shared_mem=shared_mem)
