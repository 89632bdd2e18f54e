"""The one place a kernels/*.cu file becomes a cupy.RawModule.

A family's module is compiled lazily, once per (family, set of template instantiations, device), and cached.
The same source text and options are what the GPU-less NVRTC test compiles for every supported architecture.
"""
from __future__ import annotations

import ctypes
import functools
import operator
import threading
from pathlib import Path

import numpy as np

# Architectures every kernel must compile for, warning-free (checked in CI through NVRTC, no GPU needed).
SUPPORTED_ARCHS = ("sm_70", "sm_80", "sm_86", "sm_89", "sm_90")
NVRTC_OPTIONS = ("--std=c++17",)
MAX_PARAMETERS = 16  # the most arguments any kernel here takes, with room


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


class _Launch:
    """What one launch needs of a compiled kernel, fetched once: its CUfunction and its dynamic shared-memory cap."""

    __slots__ = ("function", "shared_cap")

    def __init__(self, fn):
        self.function = fn.kernel.ptr  # fn came from kernel(), which compiled it for the current device
        self.shared_cap = 48 * 1024


_launches: dict = {}
_per_thread = threading.local()


def _parameter_slots():
    """This thread's kernel-parameter block: one 8-byte slot per argument and the array of the slots' addresses.

    cuLaunchKernel reads each parameter's size (4 or 8 bytes) from its slot, so on a little-endian host an int64
    slot serves int and pointer parameters alike. The driver copies the values during the call: reusing the block
    on the next launch is safe.
    """
    slots = getattr(_per_thread, "slots", None)
    if slots is None:
        values = (ctypes.c_int64 * MAX_PARAMETERS)()
        base = ctypes.addressof(values)
        addresses = (ctypes.c_void_p * MAX_PARAMETERS)(*(base + 8 * i for i in range(MAX_PARAMETERS)))
        slots = _per_thread.slots = (values, ctypes.addressof(addresses), addresses)
    return slots


def parameter_value(arg, ndarray) -> int:
    """A kernel argument as the bits of its 8-byte slot: a CuPy array (`ndarray`) is its device pointer, an integer
    (also a raw device address) itself, a NumPy float its IEEE bits (np.float32 for a float parameter). A Python
    float is refused: it does not say whether the parameter is a float or a double."""
    if isinstance(arg, ndarray):
        return arg.data.ptr
    try:
        return operator.index(arg)
    except TypeError:
        if isinstance(arg, np.floating):
            return int.from_bytes(arg.tobytes(), "little")
        raise TypeError(f"cudakit: a kernel argument must be a cupy.ndarray, an integer or a NumPy float, "
                        f"got {type(arg).__name__}") from None


def launch(fn, grid, block, args, shared_mem: int = 0) -> None:
    """Launch `fn` (from kernel()) on CuPy's current stream through cuLaunchKernel, raising its dynamic
    shared-memory cap first when `shared_mem` needs it.

    The same launch as RawKernel.__call__ without its per-argument wrapper objects, which cost more host time than
    a small op's GPU work.
    """
    import cupy

    state = _launches.get(fn)
    if state is None:
        state = _launches[fn] = _Launch(fn)
    if shared_mem > state.shared_cap:
        fn.max_dynamic_shared_size_bytes = shared_mem
        state.shared_cap = shared_mem
    if len(args) > MAX_PARAMETERS:
        raise ValueError(f"cudakit: a launch takes at most {MAX_PARAMETERS} arguments, got {len(args)}")
    values, addresses, _ = _parameter_slots()
    ndarray = cupy.ndarray
    values[:len(args)] = [parameter_value(a, ndarray) for a in args]
    gx, gy, gz = (*grid, 1, 1)[:3]
    bx, by, bz = (*block, 1, 1)[:3]
    cupy.cuda.driver.launchKernel(state.function, gx, gy, gz, bx, by, bz, shared_mem,
                                  cupy.cuda.get_current_stream().ptr, addresses, 0)
