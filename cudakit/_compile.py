"""The one place a kernels/*.cu file becomes a cupy.RawModule.

A family's module is compiled lazily, once per (family, set of template instantiations, device), and cached.
The same source text and options are what the GPU-less NVRTC test compiles for every supported architecture.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import operator
import os
import struct
import threading
from pathlib import Path

import cupy
import numpy as np

from ._device import current_stream

# Architectures every kernel must compile for, warning-free (checked in CI through NVRTC, no GPU needed): Volta,
# the oldest CUDA 12 builds; Turing, the oldest CUDA 13 builds; Ampere, Ada, Hopper.
SUPPORTED_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90")
NVRTC_OPTIONS = ("--std=c++17",)
MAX_PARAMETERS = 16  # the most arguments any kernel here takes, with room


def nvrtc_archs() -> tuple[str, ...]:
    """SUPPORTED_ARCHS less those the installed NVRTC no longer builds (CUDA 13's dropped sm_70), as NVRTC itself
    lists them: what the GPU-less compile check covers. Needs cuda-bindings (the test extra)."""
    from cuda.bindings import nvrtc

    err, numbers = nvrtc.nvrtcGetSupportedArchs()
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    return tuple(arch for arch in SUPPORTED_ARCHS if int(arch[3:]) in numbers)


def kernel_dir() -> Path:
    """kernels/ beside the package in a source tree, or the copy installed as cudakit/kernels."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "kernels", here.parent / "kernels"):
        if (candidate / "common.cuh").is_file():
            return candidate
    raise FileNotFoundError(f"cudakit: no kernels/ directory next to {here}")


@functools.lru_cache(maxsize=None)
def source(family: str) -> str:
    """kernels/<family>.cu, closed by a digest of the shared headers: CuPy keys its disk cache on the source text
    alone, so a changed header must change the text."""
    headers = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(kernel_dir().glob("*.cuh")))).hexdigest()
    return (kernel_dir() / f"{family}.cu").read_text() + f"\n// headers {headers}\n"


def options() -> tuple[str, ...]:
    return NVRTC_OPTIONS + (f"-I{kernel_dir()}",)


# ---- template instantiations: the one place their text is spelled (a kernel is looked up by this exact string)

_CTYPES = {"float32": "float", "float64": "double", "float16": "half_t", "bfloat16": "bfloat16_t"}  # half.cuh's
_UINT_CTYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}


def ctype(dtype) -> str:
    """The CUDA C type of a float dtype or its name (bfloat16, ml_dtypes' dtype, needs no ml_dtypes by name):
    float32 -> "float", float16 -> "half_t" (kernels/half.cuh)."""
    return _CTYPES[dtype if isinstance(dtype, str) else np.dtype(dtype).name]


def uint_ctype(itemsize: int) -> str:
    """The unsigned integer CUDA C type of `itemsize` (1, 2, 4 or 8) bytes: what the raw-bits transpose moves."""
    return _UINT_CTYPES[itemsize]


def cbool(x) -> str:
    """A C++ bool literal: "true" or "false"."""
    return "true" if x else "false"


def _template_arg(arg) -> str:
    if isinstance(arg, str):  # a C type or literal, taken as it is
        return arg
    if isinstance(arg, (bool, np.bool_)):
        return cbool(arg)
    if isinstance(arg, (int, np.integer)):
        return str(int(arg))
    return ctype(arg)  # a NumPy dtype or scalar type (a dtype name is a str: give its ctype())


@functools.lru_cache(maxsize=None, typed=True)  # launches name their kernel per call: spell each one once
def instantiation(name: str, *args) -> str:
    """The template instantiation `name<a, b, ...>`: a str argument as it is, a bool as true/false, an integer in
    decimal, a float dtype as its C type (uint_ctype(itemsize) spells an unsigned type)."""
    return f"{name}<{', '.join(_template_arg(arg) for arg in args)}>"


@functools.lru_cache(maxsize=None)
def _module(family: str, expressions: tuple[str, ...], device_id: int):
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
    return _kernel(family, expression, expressions, cupy.cuda.runtime.getDevice())


def cache_dir() -> Path:
    """Where cubins built outside RawModule are kept: $CUDAKIT_CACHE_DIR, else ~/.cache/cudakit."""
    return Path(os.environ.get("CUDAKIT_CACHE_DIR") or Path.home() / ".cache" / "cudakit")


def _build_cubin(family: str, expressions: tuple[str, ...], arch: str) -> tuple[Path, dict]:
    """kernels/<family>.cu compiled by CuPy's NVRTC for `arch` into a cubin on disk, with its lowered names beside
    it; built once per source, options, arch and NVRTC version (a new process loads the file)."""
    from cupy_backends.cuda.libs import nvrtc

    opts = options() + (f"--gpu-architecture={arch}",)
    key = hashlib.sha256("\0".join((source(family), *opts, str(nvrtc.getVersion()), *expressions)).encode())
    path = cache_dir() / f"{family}-{arch}-{key.hexdigest()[:32]}.cubin"
    names = path.with_suffix(".json")
    if path.is_file() and names.is_file():
        return path, json.loads(names.read_text())
    prog = nvrtc.createProgram(source(family), f"{family}.cu", [], [])
    try:
        for expr in expressions:
            nvrtc.addNameExpression(prog, expr)
        try:
            nvrtc.compileProgram(prog, list(opts))
        except nvrtc.NVRTCError as e:
            raise RuntimeError(f"cudakit: {family}.cu failed to compile for {arch}:\n{nvrtc.getProgramLog(prog)}") from e
        lowered = {expr: nvrtc.getLoweredName(prog, expr) for expr in expressions}
        cubin = nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)
    path.parent.mkdir(parents=True, exist_ok=True)
    for target, data in ((path, cubin), (names, json.dumps(lowered).encode())):
        partial = target.with_name(f"{target.name}.{os.getpid()}")  # another process may be writing it too
        partial.write_bytes(data)
        partial.replace(target)
    return path, lowered


@functools.lru_cache(maxsize=None)
def _arch_module(family: str, expressions: tuple[str, ...], arch: str, device_id: int):
    path, lowered = _build_cubin(family, expressions, arch)
    with cupy.cuda.Device(device_id):
        return cupy.RawModule(path=str(path)), lowered


@functools.lru_cache(maxsize=None)
def _arch_kernel(family: str, expression: str, expressions: tuple[str, ...], arch: str, device_id: int):
    module, lowered = _arch_module(family, expressions, arch, device_id)
    return module.get_function(lowered[expression])


def kernel_for_arch(family: str, expression: str, expressions: tuple[str, ...], arch: str):
    """kernel() for code that names its own target, such as sm_90a (wgmma, setmaxnreg): CuPy adds the current
    device's arch to every RawModule compile, and a second one fails, so such a family is compiled here to a
    cubin cached on disk (cache_dir()) and loaded from it."""
    return _arch_kernel(family, expression, expressions, arch, cupy.cuda.runtime.getDevice())


def compile_offline(family: str, expressions, arch: str, extra_options=()) -> tuple[bool, str, dict]:
    """Compile `family` to a cubin for `arch` with NVRTC and no GPU (needs cuda-bindings: the test extra).

    Returns (succeeded, compiler log, {expression: mangled name}): what CI checks for warnings and what
    tools/resources.py reads ptxas's register report from.
    """
    from cuda.bindings import nvrtc

    def ok(result):
        assert result[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS, result[0]
        return result[1] if len(result) == 2 else None

    prog = ok(nvrtc.nvrtcCreateProgram(source(family).encode(), f"{family}.cu".encode(), 0, [], []))
    try:
        for expr in expressions:
            ok(nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
        opts = [o.encode() for o in options() + tuple(extra_options) + (f"--gpu-architecture={arch}",)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = b" " * ok(nvrtc.nvrtcGetProgramLogSize(prog))
        nvrtc.nvrtcGetProgramLog(prog, log)
        log = log.rstrip(b"\x00 ").decode()
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, log, {}
        lowered = {expr: ok(nvrtc.nvrtcGetLoweredName(prog, expr.encode())).decode() for expr in expressions}
        assert ok(nvrtc.nvrtcGetCUBINSize(prog)) > 0
        return True, log, lowered
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


class _Launch:
    """What launches of one compiled kernel need, fetched once: its CUfunction and its dynamic shared-memory cap."""

    __slots__ = ("function", "shared_cap")

    def __init__(self, fn):
        self.function = fn.kernel.ptr  # fn came from kernel(), which compiled it for the current device
        self.shared_cap = 48 * 1024


_launches: dict = {}
_resident: dict = {}
_per_thread = threading.local()
# Bound once: a small op's host time is mostly launch(), and each attribute lookup is a share of it.
_ndarray = cupy.ndarray
_launch_kernel = cupy.cuda.driver.launchKernel
INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT


def _launch_in_context(*args) -> None:
    """cuLaunchKernel(*args) in the current device's primary context. A thread whose first CUDA call is this launch
    (a thread pool's, say) has no current context yet, where CuPy's own calls would have made one current: it is
    made current then, and the launch repeated."""
    try:
        _launch_kernel(*args)
    except cupy.cuda.driver.CUDADriverError as error:
        if error.status != INVALID_CONTEXT:
            raise
        _make_context_current()
        _launch_kernel(*args)


def _make_context_current() -> None:
    cupy.cuda.runtime.setDevice(cupy.cuda.runtime.getDevice())


def resident_blocks(fn, threads: int, shared_mem: int = 0) -> int:
    """How many blocks of `threads` threads of `fn` (from kernel()) an SM holds at once, by the driver's occupancy
    calculator (registers, shared memory, threads)."""
    key = (fn, threads, shared_mem)
    if key not in _resident:
        _make_context_current()  # (a driver call, maybe this thread's first: see _launch_in_context)
        state = _launch_state(fn, shared_mem)  # the calculator counts only dynamic shared memory the kernel may take
        _resident[key] = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(state.function, threads,
                                                                                     shared_mem)
    return _resident[key]


def _launch_state(fn, shared_mem: int) -> _Launch:
    """fn's launch state, its dynamic shared-memory cap raised to `shared_mem` where that is more. Past the default
    48 KiB the kernel also asks for the largest shared-memory carveout, so that blocks fit side by side."""
    state = _launches.get(fn)
    if state is None:
        state = _launches[fn] = _Launch(fn)
    if shared_mem > state.shared_cap:
        _make_context_current()  # (as in resident_blocks)
        fn.max_dynamic_shared_size_bytes = shared_mem
        fn.preferred_shared_memory_carveout = 100
        state.shared_cap = shared_mem
    return state


def _parameter_block():
    """This thread's kernel-parameter block: (one 8-byte slot per argument, the address of the array of the
    slots' addresses, that array).

    cuLaunchKernel reads each parameter's size from its slot, so on a little-endian host an int64 slot serves
    int, pointer and float parameters alike. The driver copies the values during the call, so the next launch may
    reuse the block.
    """
    try:
        return _per_thread.block
    except AttributeError:
        values = (ctypes.c_int64 * MAX_PARAMETERS)()
        base = ctypes.addressof(values)
        addresses = (ctypes.c_void_p * MAX_PARAMETERS)(*(base + 8 * i for i in range(MAX_PARAMETERS)))
        _per_thread.block = (values, ctypes.addressof(addresses), addresses)
        return _per_thread.block


def parameter_value(arg) -> int:
    """A kernel argument as the bits of its 8-byte slot: a CuPy array is its device pointer, an integer (also a raw
    device address) itself, a NumPy float its IEEE bits (np.float32 for a float parameter). A Python float is
    refused: it does not say whether the parameter is a float or a double."""
    if isinstance(arg, cupy.ndarray):
        return arg.data.ptr
    try:
        return operator.index(arg)
    except TypeError:
        if isinstance(arg, np.floating):
            return int.from_bytes(arg.tobytes(), "little")
        raise TypeError(f"cudakit: a kernel argument must be a cupy.ndarray, an integer or a NumPy float, "
                        f"got {type(arg).__name__}") from None


def f64_bits(x: float) -> int:
    """A double kernel argument as the bits of its slot (launch() then takes its all-integer path)."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


def pair(a: int, b: int) -> int:
    """An int2 argument (a, b): two 4-byte values in one 8-byte slot."""
    return (a & 0xFFFFFFFF) | (b & 0xFFFFFFFF) << 32


def pair_f32(a: float, b: float) -> int:
    """A float2 argument (a, b), rounded to float32."""
    return struct.unpack("<q", struct.pack("<ff", a, b))[0]


def launch(fn, grid, block, args, shared_mem: int = 0, cluster=None) -> None:
    """Launch `fn` (from kernel()) on CuPy's current stream through cuLaunchKernel, raising its dynamic
    shared-memory cap first when `shared_mem` needs it. `args`: CuPy arrays, integers, NumPy floats, and bytes
    (a structure passed by value, such as a 128-byte tensor map). cluster=(x, y, z): thread-block clusters.

    The same launch as RawKernel.__call__ without its per-argument wrapper objects: a small op costs more host
    time than GPU time, and this is most of it.
    """
    state = _launches.get(fn)
    if state is None or shared_mem > state.shared_cap:
        state = _launch_state(fn, shared_mem)
    if cluster is not None:
        _launch_ex(state.function, grid, block, args, shared_mem, cluster)
        return
    values, addresses, _ = _parameter_block()
    n = len(args)
    try:  # the common cases: integers only (device addresses included), then arrays and integers
        values[:n] = args
    except TypeError:
        try:
            values[:n] = [a.data.ptr if type(a) is _ndarray else a for a in args]
        except (TypeError, ValueError):
            if n > MAX_PARAMETERS:
                raise ValueError(f"cudakit: a launch takes at most {MAX_PARAMETERS} arguments, got {n}") from None
            if any(type(a) is bytes for a in args):
                _launch_ex(state.function, grid, block, args, shared_mem, None)
                return
            values[:n] = [parameter_value(a) for a in args]
    except ValueError:
        raise ValueError(f"cudakit: a launch takes at most {MAX_PARAMETERS} arguments, got {n}") from None
    g, b = len(grid), len(block)
    _launch_in_context(state.function, grid[0], grid[1] if g > 1 else 1, grid[2] if g > 2 else 1,
                       block[0], block[1] if b > 1 else 1, block[2] if b > 2 else 1,
                       shared_mem, current_stream().ptr, addresses, 0)


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id, then a 64-byte union at offset 8
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
BY_VALUE_ALIGNMENT = 64  # a CUtensorMap's alignment, the strictest a by-value parameter here has


KEPT = 4096  # the launchers a geometry cache (kept) remembers; past this it starts over
_MISSING = object()


def kept(cache: dict, key, make, *args):
    """cache[key], made by make(*args) the first time (None too is kept). A geometry cache: past KEPT entries it
    starts over, so that a pipeline meeting ever new shapes does not pile them up."""
    value = cache.get(key, _MISSING)
    if value is _MISSING:
        if len(cache) >= KEPT:
            cache.clear()
        value = cache[key] = make(*args)
    return value


def rebased(launches: list, a: int, b: int, c: int):
    """f(a, b, c): `launches` (launch()'s arguments, each led by three device addresses) made again with those
    addresses moved as far as a, b and c move from the ones given here: launches built once for one set of operands,
    run on others of the same geometry."""
    offsets = [(fn, grid, block, (x - a, y - b, z - c, *rest), smem)
               for fn, grid, block, (x, y, z, *rest), smem in launches]

    def run(a: int, b: int, c: int) -> None:
        for fn, grid, block, (dx, dy, dz, *rest), smem in offsets:
            launch(fn, grid, block, (a + dx, b + dy, c + dz, *rest), smem)
    return run


@functools.lru_cache(maxsize=None)
def _driver():
    return ctypes.CDLL("libcuda.so.1")  # loaded already: CuPy runs on it


def _launch_ex(function: int, grid, block, args, shared_mem: int, cluster) -> None:
    """The launch of a kernel taking structures by value (bytes) or running in clusters: each parameter in its
    own buffer, through cuLaunchKernelEx (cuLaunchKernel where no cluster is asked for)."""
    keep, addresses = [], (ctypes.c_void_p * len(args))()
    for i, arg in enumerate(args):
        if type(arg) is bytes:
            raw = ctypes.create_string_buffer(len(arg) + BY_VALUE_ALIGNMENT)
            address = -(-ctypes.addressof(raw) // BY_VALUE_ALIGNMENT) * BY_VALUE_ALIGNMENT
            ctypes.memmove(address, arg, len(arg))
        else:
            raw = ctypes.c_int64(parameter_value(arg))
            address = ctypes.addressof(raw)
        keep.append(raw)
        addresses[i] = address
    dims = [tuple(d) + (1,) * (3 - len(d)) for d in (grid, block)]
    stream = current_stream().ptr
    if cluster is None:
        _launch_in_context(function, *dims[0], *dims[1], shared_mem, stream, ctypes.addressof(addresses), 0)
        return
    attribute = _LaunchAttribute(id=CLUSTER_DIMENSION)
    attribute.value[:3] = tuple(cluster) + (1,) * (3 - len(cluster))
    config = _LaunchConfig((ctypes.c_uint * 3)(*dims[0]), (ctypes.c_uint * 3)(*dims[1]), shared_mem, stream,
                           ctypes.pointer(attribute), 1)
    result = _driver().cuLaunchKernelEx(ctypes.byref(config), ctypes.c_void_p(function), addresses, None)
    if result == INVALID_CONTEXT:  # (as in _launch_in_context)
        _make_context_current()
        result = _driver().cuLaunchKernelEx(ctypes.byref(config), ctypes.c_void_p(function), addresses, None)
    if result != 0:
        raise RuntimeError(f"cudakit: cuLaunchKernelEx failed with CUresult {result}")
