"""Hopper (sm_90a) tensor-core matrix products: TMA tensor maps, the wgmma kernels' launches, the planner's entry.

kernels/matmul_wgmma.cu holds two matrix kernels of one contract: C = A @ B with f32 accumulators, C written C-contiguous
in the operands' dtype (float16, bfloat16; float32 operands are multiplied as TF32 and give float32). Operands are
read by TMA through tensor maps, which need a 16-byte aligned base and leading/batch strides of whole 16-byte
units: an operand that breaks this is first copied into a padded buffer (whole batch at once). TF32 reads K-major
operands only (A C-order, B F-order); another layout is copied into that one first.

- matmul_wgmma: BM x 128 tiles (BM = 128, two consumer warpgroups of 64 rows), a 4-stage ring; one block per tile.
- matmul_wgmma_fast: a producer warpgroup and two consumers, BM x BN tiles (BN = 256 or 128), persistent blocks,
  alone or in clusters of 2 CTAs (tile rows 2r, 2r + 1 of one column) that load B once, by TMA multicast.
- wgmma_throughput: the tensor cores' ceiling (wgmma_throughput() below), for the bench's roofline.

TF32 hands the float32 bits to the tensor cores as they are (they truncate to TF32); _check.tf32_tolerance bounds it.

run_fast() is the planner's entry: it takes a product only on a compute capability 9.0 device, with m and n at
least FAST_MIN_SIDE and at least FAST_MIN_FLOPS in all (below that the tiles are mostly padding or the call is
bound by host time, and the Ampere path serves as well), and returns False otherwise.
"""
from __future__ import annotations

import ctypes
import functools
import math

import cupy
import numpy as np

from . import _compile
from ._device import sm_count
from ._variants import Variant, register

FAMILY = "matmul_wgmma"
ARCH = "sm_90a"
ARCHS = (ARCH,)  # wgmma and setmaxnreg exist on this target only; its cubin runs on compute capability 9.0 only
DTYPES = ("float16", "bfloat16", "float32")
BM = 128  # rows of A per block tile: two consumer warpgroups of 64 rows
LINE = 128  # bytes of k per stage: one 128-byte swizzle line (BK = LINE / itemsize)
SIMPLE_BN, SIMPLE_STAGES, SIMPLE_THREADS = 128, 4, 256
FAST_BNS, FAST_THREADS = (256, 128), 384
FAST_STAGES = {256: 4, 128: 6}  # as the kernel's STAGES: the deepest ring that fits in shared memory
# (BN, CLUSTER) instantiations of the fast kernel. FAST_CLUSTER: the planner's largest cluster (1 turns clusters off).
FAST_CONFIGS = ((256, 1), (256, 2), (128, 1), (128, 2))
FAST_CLUSTER = 1  # off: the 2-CTA clusters measured slower than single CTAs (docs/NOTES.md)
FAST_MIN_SIDE = 64  # one wgmma's rows: a thinner C is mostly padding in a 128-row tile
FAST_MIN_FLOPS = 2 * 512 ** 3  # below this a call is bound by host time whichever kernel runs it
# Relative time of one BN = 256 tile and one BN = 128 tile (twice the area; the narrower tile reads more shared
# memory per product): the planner's choice between them, by waves of persistent blocks.
TILE_COST = {256: 2.0, 128: 1.1}
# Relative time of a tile run in a cluster of that size: a pair reads its shared B tile from L2 once.
CLUSTER_COST = {1: 1.0, 2: 0.95}
THROUGHPUT_THREADS = 256  # wgmma_throughput: two warpgroups
THROUGHPUT_SHARED = (64 + 256) * LINE + 1024  # one stage of a 64-row A tile and a 256-row B tile, aligned
MAX_GRID_Z = 65535  # the simple kernel's grid: y (m tiles) and z (products) at most this

_ctype = _compile.ctype


def shared_bytes(bn: int, stages: int, barriers: int) -> int:
    """Dynamic shared memory of a kernel: its stages, 1024 bytes to align them to the swizzle, its mbarriers."""
    return stages * (BM + bn) * LINE + 1024 + 8 * barriers


SIMPLE_SHARED = shared_bytes(SIMPLE_BN, SIMPLE_STAGES, SIMPLE_STAGES)


def fast_shared(bn: int) -> int:
    return shared_bytes(bn, FAST_STAGES[bn], 2 * FAST_STAGES[bn])  # full, empty


def _layouts(name: str):
    """(A_MN, B_MN) pairs a dtype's kernels are built for: all four for 16-bit types, K-major only for TF32."""
    return ((False, False),) if name == "float32" else ((False, False), (False, True), (True, False), (True, True))


def expression(kind: str, name: str, a_mn: bool = False, b_mn: bool = False, bn: int = SIMPLE_BN,
               cluster: int = 1) -> str:
    if kind == "wgmma":
        return _compile.instantiation("matmul_wgmma", _ctype(name), a_mn, b_mn)
    if kind == "throughput":
        return _compile.instantiation("wgmma_throughput", _ctype(name))
    return _compile.instantiation("matmul_wgmma_fast", _ctype(name), bn, cluster, a_mn, b_mn)


THROUGHPUT_DTYPES = ("float16", "float32")  # f16 and TF32 wgmma: the ceiling of each precision's tensor cores


@functools.lru_cache(maxsize=None)
def group(kind: str, name: str) -> tuple[str, ...]:
    """One module per (kernel, dtype): every layout (and tile width, cluster size) of it; the ceiling kernels of
    every dtype in one module (name ignored)."""
    if kind == "throughput":
        return tuple(expression(kind, t) for t in THROUGHPUT_DTYPES)
    if kind == "wgmma":
        return tuple(expression(kind, name, a, b) for a, b in _layouts(name))
    return tuple(expression(kind, name, a, b, bn, c) for bn, c in FAST_CONFIGS for a, b in _layouts(name))


def instantiation_groups():
    """Every module this family builds, for the GPU-less compile check (for ARCHS only)."""
    return [group(kind, name) for kind in ("wgmma", "wgmma_fast") for name in DTYPES] + [group("throughput", "")]


@functools.lru_cache(maxsize=None)
def available(device_id: int) -> bool:
    """True on a compute capability 9.0 device (H100, H200): the only one an sm_90a cubin runs on."""
    return cupy.cuda.Device(device_id).compute_capability == "90"


# ---------------------------------------------------------------------------------------------------- tensor maps
_TMA_DTYPE = {"float16": 6, "bfloat16": 9, "float32": 7}  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16 / BFLOAT16 / FLOAT32
SWIZZLE_128B, L2_PROMOTION_256B, INTERLEAVE_NONE, OOB_FILL_ZEROS = 3, 3, 0, 0
MAX_CACHED_MAPS = 1024
_maps: dict = {}


@functools.lru_cache(maxsize=None)
def _encode_tiled():
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled  # loaded already: CuPy runs on it
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return fn


def tensor_map(name: str, ptr: int, dims: tuple, strides: tuple, box: tuple) -> bytes:
    """The 128 bytes of a tiled 3-D tensor map (dims innermost first, byte strides of dims 1 and 2, box in
    elements), 128-byte swizzle, out-of-range elements read as zeros. Cached per argument set."""
    key = (name, ptr, dims, strides, box)
    found = _maps.get(key)
    if found is not None:
        return found
    raw = ctypes.create_string_buffer(128 + 64)  # CUtensorMap is 64-byte aligned
    address = -(-ctypes.addressof(raw) // 64) * 64
    result = _encode_tiled()(address, _TMA_DTYPE[name], 3, ptr, (ctypes.c_uint64 * 3)(*dims),
                             (ctypes.c_uint64 * 2)(*strides), (ctypes.c_uint32 * 3)(*box),
                             (ctypes.c_uint32 * 3)(1, 1, 1), INTERLEAVE_NONE, SWIZZLE_128B, L2_PROMOTION_256B,
                             OOB_FILL_ZEROS)
    if result != 0:
        raise RuntimeError(f"cudakit: cuTensorMapEncodeTiled failed with CUresult {result} (dims {dims}, "
                           f"byte strides {strides}, box {box})")
    if len(_maps) >= MAX_CACHED_MAPS:
        _maps.clear()
    _maps[key] = found = ctypes.string_at(address, 128)
    return found


def _layout(x, row_axis: int):
    """(K-major, ld) of an operand TMA can read in place (one unit stride, the other positive), else None."""
    item = x.itemsize
    rows, depth = x.shape[row_axis], x.shape[1 - row_axis]
    rs, ks = x.strides[row_axis], x.strides[1 - row_axis]
    if (ks == item or depth == 1) and (rows == 1 or (rs > 0 and rs % item == 0)):
        return True, (rs // item if rows > 1 else depth)
    if (rs == item or rows == 1) and (depth == 1 or (ks > 0 and ks % item == 0)):
        return False, (ks // item if depth > 1 else rows)
    return None


def _bits(x):
    """x as unsigned integers of its size: copies of bfloat16 arrays need nothing of CuPy's bfloat16 support."""
    return x.view({2: np.uint16, 4: np.uint32}[x.itemsize])


def _operand(x, row_axis: int, count: int, stride: int, k_major: bool):
    """x (the first product's operand, rows along `row_axis`: A 0, B 1) as TMA reads it, copied first where it must
    be (layout, alignment, TF32's K-major). Returns (base pointer, MN-major, ld, batch stride or 0, keep-alive)."""
    item = x.itemsize
    batched = count > 1 and stride != 0
    layout = _layout(x, row_axis)
    if layout is not None:
        k_contig, ld = layout
        if (k_contig or not k_major) and x.data.ptr % 16 == 0 and ld * item % 16 == 0 \
                and (not batched or (stride > 0 and stride * item % 16 == 0)):
            return x.data.ptr, not k_contig, ld, stride if batched else 0, x
    # A padded copy of every product, in the operand's own layout where that is allowed (no transpose).
    mn = layout is not None and not layout[0] and not k_major
    contiguous = row_axis if mn else 1 - row_axis
    whole = cupy.ndarray((count,) + x.shape, x.dtype, x.data, (stride * item,) + x.strides) if batched else x[None]
    width = 16 // item
    inner = x.shape[contiguous]
    src = whole if contiguous == 1 else whole.transpose(0, 2, 1)
    if not src.flags.c_contiguous and src.transpose(0, 2, 1).flags.c_contiguous:
        # a transposing copy (TF32's K-major of a C-order B or an F-order A): cudakit's tiled transpose, as CuPy's
        # strided copy would read or write a line per element
        from .transpose import transpose

        src = transpose(_bits(src.transpose(0, 2, 1)), axes=(0, 2, 1))
        if inner % width == 0:  # its rows are whole 16-byte units already
            return src.data.ptr, mn, inner, src.shape[1] * inner if batched else 0, src
    buf = cupy.empty((whole.shape[0], x.shape[1 - contiguous], -(-inner // width) * width), x.dtype)
    _bits(buf)[:, :, :inner] = _bits(src)
    return buf.data.ptr, mn, buf.shape[2], buf.shape[1] * buf.shape[2] if batched else 0, buf


def _map_for(name: str, ptr: int, mn: bool, ld: int, bstride: int, count: int, rows: int, k: int, box_rows: int,
             item: int) -> bytes:
    """The operand's tensor map: K-major boxes of (BK, box_rows) (a cluster's B: its share of the tile's rows),
    MN-major boxes of (64, BK); batch outermost."""
    bk = LINE // item
    dims = (rows, k) if mn else (k, rows)
    batch_bytes = bstride * item if bstride else ld * item * max(dims[1], 1)
    box = (64, bk, 1) if mn else (bk, box_rows, 1)
    return tensor_map(name, ptr, dims + (count if bstride else 1,), (ld * item, batch_bytes), box)


def _kernel(kind: str, name: str, a_mn: bool, b_mn: bool, bn: int = SIMPLE_BN, cluster: int = 1):
    return _compile.kernel_for_arch(FAMILY, expression(kind, name, a_mn, b_mn, bn, cluster), group(kind, name), ARCH)


_max_clusters: dict = {}


def max_clusters(fn, threads: int, shared: int, cluster: int) -> int:
    """How many clusters of `cluster` blocks of `fn` the device runs at once (cuOccupancyMaxActiveClusters: a
    cluster sits in one GPC, so an odd SM of a GPC stays idle); 0 where the driver refuses."""
    key = (fn, threads, shared, cluster)
    found = _max_clusters.get(key)
    if found is None:
        state = _compile._launch_state(fn, shared)  # the dynamic shared-memory cap the query assumes
        attribute = _compile._LaunchAttribute(id=_compile.CLUSTER_DIMENSION)
        attribute.value[:3] = (cluster, 1, 1)
        config = _compile._LaunchConfig((ctypes.c_uint * 3)(cluster, 1, 1), (ctypes.c_uint * 3)(threads, 1, 1),
                                        shared, None, ctypes.pointer(attribute), 1)
        count = ctypes.c_int(0)
        result = _compile._driver().cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(state.function),
                                                                 ctypes.byref(config))
        _max_clusters[key] = found = count.value if result == 0 else 0
    return found


def _check(A, B, out, batch):
    name = out.dtype.name
    if name not in _TMA_DTYPE or A.dtype != out.dtype or B.dtype != out.dtype:
        raise TypeError(f"cudakit.matmul: the wgmma kernels take {', '.join(DTYPES)} operands of one dtype, got "
                        f"{A.dtype}, {B.dtype} -> {out.dtype}")
    m, k = A.shape
    if B.shape[0] != k or out.shape != (m, B.shape[1]) or not out.flags.c_contiguous:
        raise ValueError(f"cudakit.matmul: shapes {A.shape} @ {B.shape} -> {out.shape} (out C-contiguous)")
    return name, m, k, B.shape[1], int(batch[0])


def run_wgmma(kind: str, A, B, out, batch=(1, 0, 0), bn: int | None = None, cluster: int | None = None) -> None:
    """out = A @ B (count products: A + z*batch[1], B + z*batch[2], out + z*m*n elements) on `kind` ("wgmma" or
    "wgmma_fast"; bn and cluster pick the fast kernel's tile width and cluster size, by default the planner's)."""
    name, m, k, n, count = _check(A, B, out, batch)
    if not available(out.device.id):
        raise RuntimeError("cudakit.matmul: the wgmma kernels run on compute capability 9.0 (sm_90a) devices only")
    if m == 0 or n == 0 or count == 0:
        return
    if k == 0:
        _bits(cupy.ndarray((count, m, n), out.dtype, out.data)).fill(0)
        return
    tf32 = name == "float32"
    a_ptr, a_mn, lda, sa, keep_a = _operand(A, 0, count, int(batch[1]), tf32)
    b_ptr, b_mn, ldb, sb, keep_b = _operand(B, 1, count, int(batch[2]), tf32)
    item = out.itemsize
    device = out.device.id
    if kind == "wgmma":
        bn, cluster = SIMPLE_BN, 1
    else:
        bn, cluster, slots = fast_plan(name, a_mn, b_mn, m, n, count, device, bn, cluster)
    a_map = _map_for(name, a_ptr, a_mn, lda, sa, count, m, k, BM, item)
    b_map = _map_for(name, b_ptr, b_mn, ldb, sb, count, n, k, bn // cluster, item)
    fn = _kernel(kind, name, a_mn, b_mn, bn, cluster)
    if kind == "wgmma":
        if -(-m // BM) > MAX_GRID_Z:
            raise ValueError(f"cudakit.matmul: the wgmma variant takes m up to {MAX_GRID_Z * BM} (a grid row per tile)")
        for z0 in range(0, count, MAX_GRID_Z):
            grid = (-(-n // SIMPLE_BN), -(-m // BM), min(count - z0, MAX_GRID_Z))
            _compile.launch(fn, grid, (SIMPLE_THREADS,), (a_map, b_map, out.data.ptr, m, n, k, int(sa > 0),
                                                           int(sb > 0), z0), shared_mem=SIMPLE_SHARED)
    else:
        # persistent: at most the blocks resident at once (one per SM, in whole clusters), each walking tiles
        tiles = -(-m // (BM * cluster)) * cluster * -(-n // bn) * count
        grid = (min(tiles, slots),)
        _compile.launch(fn, grid, (FAST_THREADS,), (a_map, b_map, out.data.ptr, m, n, k, count, int(sa > 0),
                                                    int(sb > 0)), shared_mem=fast_shared(bn),
                        cluster=(cluster, 1, 1) if cluster > 1 else None)
    del keep_a, keep_b  # the copies' memory returns to CuPy's pool in stream order, after the kernel


def _slots(name: str, a_mn: bool, b_mn: bool, bn: int, cluster: int, device_id: int) -> int:
    """Blocks of the fast kernel (bn, cluster) resident at once: one per SM, in whole clusters."""
    if cluster == 1:
        return sm_count(device_id)
    fn = _kernel("wgmma_fast", name, a_mn, b_mn, bn, cluster)
    return cluster * max_clusters(fn, FAST_THREADS, fast_shared(bn), cluster)


def fast_plan(name: str, a_mn: bool, b_mn: bool, m: int, n: int, count: int, device_id: int,
              bn: int | None = None, cluster: int | None = None) -> tuple[int, int, int]:
    """The fast kernel's (BN, cluster size, resident blocks): fewest waves of persistent blocks (tile rows padded to
    whole clusters), each tile weighted by TILE_COST and CLUSTER_COST; ties to the wider tile, the larger cluster.
    bn or cluster given: the best plan with them (cluster 2 where the driver runs none: cluster 1)."""
    best = None
    for b, c in FAST_CONFIGS:
        if (bn is not None and b != bn) or (cluster is not None and c != cluster) or \
                (cluster is None and c > FAST_CLUSTER):
            continue
        slots = _slots(name, a_mn, b_mn, b, c, device_id)
        if slots < c:
            continue  # the driver runs no such cluster here
        tiles = -(-m // (BM * c)) * c * -(-n // b) * count
        cost = math.ceil(tiles / slots) * TILE_COST[b] * CLUSTER_COST[c]
        key = (cost, -b, -c)
        if best is None or key < best[0]:
            best = (key, b, c, slots)
    if best is None:
        if cluster is not None and cluster > 1:
            return fast_plan(name, a_mn, b_mn, m, n, count, device_id, bn, 1)
        raise RuntimeError(f"cudakit.matmul: no wgmma_fast configuration of BN {bn}")
    return best[1], best[2], best[3]


def run_fast(A, B, out, batch=(1, 0, 0)) -> bool:
    """The planner's entry: out = A @ B on the fast kernel and True, or False (nothing launched) where it does not
    take the product: not a compute capability 9.0 device, a dtype it has no kernel for, m or n under
    FAST_MIN_SIDE, or under FAST_MIN_FLOPS in all. float32 operands are multiplied as TF32: the caller decides
    whether that is allowed."""
    if out.dtype.name not in _TMA_DTYPE or not available(out.device.id):
        return False
    m, k = A.shape
    n, count = B.shape[1], int(batch[0])
    if min(m, n) < FAST_MIN_SIDE or 2 * m * n * k * count < FAST_MIN_FLOPS:
        return False
    run_wgmma("wgmma_fast", A, B, out, batch)
    return True


def ceiling_sink_size(device_id: int) -> int:
    """The float32 elements wgmma_throughput's sink needs on that device: one per thread of its grid."""
    return sm_count(device_id) * THROUGHPUT_THREADS


def wgmma_throughput(name: str, iterations: int, sink) -> float:
    """Launch the tensor cores' ceiling kernel on sink's device (current stream) and return the floating-point
    operations it performs: one block per SM, two warpgroups each issuing `iterations` rounds of one stage's
    m64n256 wgmma (k16 float16, or k8 TF32 for name "float32") from shared memory. Time it around this call.
    sink: a float32 CuPy array of at least ceiling_sink_size(device) elements (written only in theory)."""
    if name not in THROUGHPUT_DTYPES:
        raise ValueError(f"cudakit: wgmma_throughput takes {' or '.join(THROUGHPUT_DTYPES)}, got {name!r}")
    device = sink.device.id
    if not available(device):
        raise RuntimeError("cudakit: wgmma_throughput runs on compute capability 9.0 (sm_90a) devices only")
    blocks = sm_count(device)
    if sink.dtype != np.float32 or sink.size < blocks * THROUGHPUT_THREADS:
        raise ValueError(f"cudakit: wgmma_throughput needs a float32 sink of {blocks * THROUGHPUT_THREADS} elements")
    if not 0 <= iterations < 2 ** 31:
        raise ValueError(f"cudakit: wgmma_throughput takes 0 <= iterations < 2^31, got {iterations}")
    with cupy.cuda.Device(device):
        fn = _compile.kernel_for_arch(FAMILY, expression("throughput", name), group("throughput", ""), ARCH)
        _compile.launch(fn, (blocks,), (THROUGHPUT_THREADS,), (sink, int(iterations)), shared_mem=THROUGHPUT_SHARED)
    k_per_round = LINE // np.dtype(name).itemsize  # one stage: 128 bytes of k
    return 2.0 * 64 * 256 * k_per_round * 2 * iterations * blocks


def _variant_run(kind: str):
    def run(A, B, out):
        run_wgmma(kind, A, B, out)

    return run


VARIANTS = register("matmul", [
    Variant("matmul", "wgmma", "TMA tile loads into 128-byte-swizzled shared memory on an mbarrier ring; two "
            "warpgroups run wgmma from shared-memory descriptors (Hopper, sm_90a; float32 as TF32)",
            _variant_run("wgmma"), dtypes=DTYPES, min_cc=90),
    Variant("matmul", "wgmma_fast", "warp-specialised: a TMA producer warpgroup and two wgmma consumers (setmaxnreg) "
            "over a full/empty mbarrier ring, persistent blocks walking grouped tiles (sm_90a; float32 as TF32)",
            _variant_run("wgmma_fast"), dtypes=DTYPES, min_cc=90),
])
