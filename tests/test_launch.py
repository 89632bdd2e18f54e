"""_compile.launch: the parameter block it hands cuLaunchKernel (GPU-less, the driver call captured, not made), and
a launch from a thread that has no CUDA context yet (GPU).

The GPU suite runs every kernel through the same launch; this pins down the byte layout the driver reads.
"""
import ctypes
import struct
import types

import numpy as np
import pytest

from cudakit import _compile


class FakeKernel:
    """Stands in for a RawKernel: launch reads .kernel.ptr once and may set the dynamic shared-memory cap."""

    def __init__(self, ptr):
        self.kernel = types.SimpleNamespace(ptr=ptr)
        self.max_dynamic_shared_size_bytes = 48 * 1024
        self.preferred_shared_memory_carveout = -1


@pytest.fixture
def captured(monkeypatch):
    pytest.importorskip("cupy")
    calls = []

    def launch_kernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        calls.append(dict(f=f, grid=(gx, gy, gz), block=(bx, by, bz), smem=smem, stream=stream, extra=extra,
                          slots=[ctypes.c_void_p.from_address(params + 8 * i).value for i in range(_compile.MAX_PARAMETERS)]))

    monkeypatch.setattr(_compile, "_launch_kernel", launch_kernel)
    monkeypatch.setattr(_compile, "_make_context_current", lambda: None)  # (the runtime, like the driver, stubbed)
    monkeypatch.setattr(_compile, "current_stream", lambda: types.SimpleNamespace(ptr=0x5150))
    return calls


def slot_bytes(address, size):
    return ctypes.string_at(address, size)


def test_every_argument_lands_in_its_slot_as_the_kernel_reads_it(captured):
    fn = FakeKernel(0xF00D)
    pointer = 0x7F12_3456_7800
    args = (np.uint64(pointer), np.int64(-3), np.int32(-7), np.uint32(2**32 - 1), 65536,
            np.float32(0.999), np.float64(-1.5))
    _compile.launch(fn, (5, 3), (256,), args)
    (call,) = captured
    assert call["f"] == 0xF00D and call["grid"] == (5, 3, 1) and call["block"] == (256, 1, 1)
    assert call["smem"] == 0 and call["stream"] == 0x5150 and call["extra"] == 0
    slots = call["slots"]
    # A pointer or 64-bit parameter reads 8 bytes of its slot, an int or float parameter the first 4.
    assert struct.unpack("<Q", slot_bytes(slots[0], 8))[0] == pointer
    assert struct.unpack("<q", slot_bytes(slots[1], 8))[0] == -3
    assert struct.unpack("<i", slot_bytes(slots[2], 4))[0] == -7
    assert struct.unpack("<I", slot_bytes(slots[3], 4))[0] == 2**32 - 1
    assert struct.unpack("<q", slot_bytes(slots[4], 8))[0] == 65536
    assert struct.unpack("<f", slot_bytes(slots[5], 4))[0] == np.float32(0.999)
    assert struct.unpack("<d", slot_bytes(slots[6], 8))[0] == -1.5
    assert len(set(slots)) == len(slots), "each argument has its own slot"


def test_the_next_launch_overwrites_the_slots(captured):
    fn = FakeKernel(1)
    _compile.launch(fn, (1,), (32,), (np.int64(11), np.int64(12)))
    _compile.launch(fn, (1,), (32,), (np.int64(21), np.int64(22)))
    slots = captured[-1]["slots"]
    assert [struct.unpack("<q", slot_bytes(s, 8))[0] for s in slots[:2]] == [21, 22]


def test_shared_memory_above_48_kib_raises_the_cap_once(captured):
    fn = FakeKernel(2)
    _compile.launch(fn, (1,), (32,), (), shared_mem=1024)
    assert fn.max_dynamic_shared_size_bytes == 48 * 1024 and fn.preferred_shared_memory_carveout == -1
    _compile.launch(fn, (1,), (32,), (), shared_mem=100 * 1024)
    assert fn.max_dynamic_shared_size_bytes == 100 * 1024 and captured[-1]["smem"] == 100 * 1024
    assert fn.preferred_shared_memory_carveout == 100  # the most shared memory, so that blocks fit side by side


@pytest.mark.parametrize("bad", [1.5, "x", None, [1]])
def test_an_argument_the_driver_cannot_take_is_refused_before_the_launch(captured, bad):
    with pytest.raises(TypeError, match="kernel argument"):
        _compile.launch(FakeKernel(3), (1,), (32,), (np.int64(1), bad))
    assert captured == []


def test_too_many_arguments_are_refused(captured):
    with pytest.raises(ValueError, match="at most"):
        _compile.launch(FakeKernel(4), (1,), (32,), (0,) * (_compile.MAX_PARAMETERS + 1))
    assert captured == []


def test_a_structure_by_value_gets_its_own_aligned_buffer(captured):
    """A bytes argument (a 128-byte tensor map) is handed over by address, 64-byte aligned, beside 8-byte slots."""
    blob = bytes(range(128))
    _compile.launch(FakeKernel(0xF00D), (3,), (128,), (7, blob, 9))
    (call,) = captured
    assert call["f"] == 0xF00D and call["grid"] == (3, 1, 1) and call["block"] == (128, 1, 1)
    first, second, third = call["slots"][:3]
    assert second % _compile.BY_VALUE_ALIGNMENT == 0
    assert slot_bytes(second, 128) == blob
    assert struct.unpack("<q", slot_bytes(first, 8))[0] == 7 and struct.unpack("<q", slot_bytes(third, 8))[0] == 9


def test_a_cluster_launch_goes_through_cuLaunchKernelEx(captured, monkeypatch):
    """cluster=(x, y, z) fills CUlaunchConfig and one cluster-dimension attribute as cuda.h lays them out."""
    seen = {}

    class FakeDriver:
        @staticmethod
        def cuLaunchKernelEx(config, f, params, extra):
            cfg = ctypes.cast(config, ctypes.POINTER(_compile._LaunchConfig)).contents
            attr = cfg.attrs.contents
            seen.update(grid=tuple(cfg.grid), block=tuple(cfg.block), smem=cfg.shared_mem, stream=cfg.stream,
                        n=cfg.num_attrs, id=attr.id, dims=tuple(attr.value[:3]), f=f.value,
                        first=struct.unpack("<q", ctypes.string_at(ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))[0], 8))[0])
            return 0

    monkeypatch.setattr(_compile, "_driver", lambda: FakeDriver)
    _compile.launch(FakeKernel(0xBEEF), (4, 2), (384,), (11,), shared_mem=1024, cluster=(2,))
    assert not captured  # not the plain cuLaunchKernel
    assert seen == dict(grid=(4, 2, 1), block=(384, 1, 1), smem=1024, stream=0x5150, n=1,
                        id=_compile.CLUSTER_DIMENSION, dims=(2, 1, 1), f=0xBEEF, first=11)
    assert ctypes.sizeof(_compile._LaunchAttribute) == 72 and _compile._LaunchAttribute.value.offset == 8
    assert (_compile._LaunchConfig.stream.offset, _compile._LaunchConfig.attrs.offset,
            ctypes.sizeof(_compile._LaunchConfig)) == (32, 40, 56)


def test_a_cubin_for_a_named_arch_is_built_once_and_kept_on_disk(tmp_path, monkeypatch):
    """kernel_for_arch's build (CuPy's NVRTC, no GPU needed): the cubin and its lowered names land in the cache
    directory, and a second build (a new process, say) reads them instead of compiling."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    monkeypatch.setenv("CUDAKIT_CACHE_DIR", str(tmp_path))
    expressions = ("gpu_dot<float>",)
    path, lowered = _compile._build_cubin("dot", expressions, "sm_90a")
    assert path.parent == tmp_path and path.stat().st_size > 0 and set(lowered) == set(expressions)
    from cupy_backends.cuda.libs import nvrtc

    monkeypatch.setattr(nvrtc, "createProgram", lambda *a: pytest.fail("compiled again"))
    assert _compile._build_cubin("dot", expressions, "sm_90a") == (path, lowered)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["matmul", "matmul_float16", "matvec", "transpose", "dot"])
def test_an_op_runs_in_a_fresh_thread(op):
    """A thread whose first CUDA call is cudakit's launch (a thread pool's, as Dask's threaded scheduler runs
    tasks) has no current context until CuPy makes one: the launch makes it, and the result is right. out= is
    given, so that no allocation makes the context current first."""
    import cudakit
    from conftest import assert_close, poisoned, random_array

    dtype = np.float16 if op.endswith("float16") else np.float32
    A, B, x = random_array((96, 80), dtype), random_array((80, 72), dtype), random_array((80,), dtype)
    call, ref, k = {
        "matmul": (lambda out: cudakit.matmul(A, B, out=out), A.astype(np.float64) @ B.astype(np.float64), 80),
        "matmul_float16": (lambda out: cudakit.matmul(A, B, out=out), A.astype(np.float64) @ B.astype(np.float64), 80),
        "matvec": (lambda out: cudakit.matvec(A, x, out=out), A.astype(np.float64) @ x.astype(np.float64), 80),
        "transpose": (lambda out: cudakit.transpose(A, out=out), A.T.astype(np.float64), 1),
        "dot": (lambda out: cudakit.dot(x, x, out=out), x.astype(np.float64) @ x.astype(np.float64), 80),
    }[op]
    cudakit.matmul(A, B), cudakit.matvec(A, x), cudakit.transpose(A), cudakit.dot(x, x)  # compiled in this thread
    out = poisoned(ref.shape, dtype)
    in_a_fresh_thread(lambda: call(out))
    assert_close(out, ref, np.dtype(dtype), k, f"{op} in a fresh thread")


@pytest.mark.gpu
def test_a_first_plan_in_a_fresh_thread(monkeypatch):
    """A fresh thread whose first CUDA call is a driver query of the planner (the occupancy of the dots kernel, for a
    geometry no route holds yet) rather than a launch: the query makes the context current too."""
    import cudakit
    from cudakit import _matmul_routes
    from conftest import assert_close, poisoned, random_array

    A, B = random_array((8, 5000), np.float32), random_array((5000, 13), np.float32)
    cudakit.matmul(A, B)  # compiled in this thread
    monkeypatch.setattr(_compile, "_resident", {})  # forgotten: the thread plans anew
    monkeypatch.setattr(_matmul_routes, "_routes", {})
    out = poisoned((8, 13), np.float32)
    in_a_fresh_thread(lambda: cudakit.matmul(A, B, out=out))
    assert_close(out, A.astype(np.float64) @ B.astype(np.float64), np.dtype(np.float32), 5000, "dots in a fresh thread")


def in_a_fresh_thread(call) -> None:
    """call() in a new thread (after the inputs made on this one are ready), its stream synchronised there; an error
    it raises is raised here."""
    import threading

    import cupy

    cupy.cuda.get_current_stream().synchronize()
    errors = []

    def worker():
        try:
            call()
            cupy.cuda.get_current_stream().synchronize()
        except Exception as error:  # (reported in the main thread)
            errors.append(error)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert not errors, errors


@pytest.mark.gpu
def test_the_contiguity_attributes_agree_with_cupys_flags():
    """_args reads CuPy's contiguity attributes instead of .flags (cheaper per call): the same answers on every
    kind of view."""
    import cupy

    from cudakit import _args

    a = cupy.arange(6 * 8 * 10, dtype=cupy.float32).reshape(6, 8, 10)
    views = [a, a.T, a[:, ::2], a[1:3], a[:, :, 3], a.transpose(1, 0, 2), a[0], a[0, 0], a[0, 0, 0], a.reshape(-1),
             cupy.asfortranarray(a), cupy.broadcast_to(a[0], (4, 8, 10)), a[:0], cupy.empty((1, 5, 1)),
             cupy.ndarray((8, 10), a.dtype, a.data)]
    for v in views:
        assert (_args.is_c_contiguous(v), _args.is_f_contiguous(v)) == (v.flags.c_contiguous, v.flags.f_contiguous), \
            (v.shape, v.strides)
