"""Tensor-core matrix products (kernels/matmul_tc.cu): float16 and bfloat16 operands summed in float32 and rounded
once to the operands' dtype, float32 operands multiplied in TF32 (rounded to 11 significant bits) and summed in
float32.

Two teaching steps, registered as variants of op "matmul": `wmma` (warp-level 16 x 16 fragments; float16 from sm_70,
bfloat16 and TF32 from sm_80) and `mma_sync` (the Ampere design: cp.async pipeline, swizzled shared tiles,
ldmatrix, mma.sync; sm_80+). `run_fast` is what cudakit.matmul's fast variant calls for these dtypes: the Hopper
module first on sm_90, else mma_sync with the tile `plan_fast` picks, else (sm_70 / sm_75) wmma.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import cupy
import numpy as np

from ._compile import ctype, instantiation, kernel, launch, resident_blocks
from ._device import shared_per_block, sm_count, workspace
from ._variants import Variant, register

FAMILY = "matmul_tc"
DTYPES = ("float16", "bfloat16", "float32")  # by name (bfloat16 is ml_dtypes'); float32: TF32 products
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
NEEDS_SM80 = ("bfloat16", "float32")  # bfloat16 and TF32 fragments, conversions and mma shapes
MAX_GRID_Z = 65535  # products per launch; the host loops beyond
MAX_DIM = 2**31 - 1  # m, n, k are int in the kernels (offsets are 64-bit)
WMMA_TILE, WMMA_THREADS = (64, 64), 128  # as #defined in matmul_tc.cu


@dataclass(frozen=True)
class TcTile:
    """One matmul_tc_mma configuration: a bm x bn block tile in bk-deep slices (bk elements), warps of wm x wn,
    `stages` slots in the cp.async ring. `weight`: the modelled rate of a block of this tile relative to the others
    (warp tiles that reuse each fragment more run closer to the tensor cores' peak), for plan_fast."""

    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int
    weight: float = 1.0
    x3: bool = False  # float32 as three TF32 products, summed a slice at a time (X3 in matmul_tc_mma.cuh)

    @property
    def threads(self) -> int:
        return self.bm // self.wm * (self.bn // self.wn) * 32

    @property
    def name(self) -> str:  # (the planner's rate table, _tune.TILE_TFLOPS, is keyed by it)
        return f"{'x3' if self.x3 else 'tc'}_{self.bm}x{self.bn}x{self.bk}_w{self.wm}x{self.wn}_s{self.stages}"

    def shared_bytes(self, itemsize: int) -> int:
        """The ring of slices, or C's tile staged on its way out (rows padded by 8 elements) where that is larger:
        TcShared in matmul_tc_mma.cuh."""
        return max(self.stages * (self.bm + self.bn) * self.bk, self.bm * (self.bn + 8)) * itemsize

    def expression(self, ctype: str, a_kc: bool, b_kc: bool, aligned: bool = True) -> str:
        """aligned=False (X3 tiles only): the operands' lines need not start on 16 bytes (4-byte copies)."""
        assert aligned or self.x3, "only the X3 tiles are built to read misaligned operands"
        x3 = (True,) if aligned and self.x3 else (True, False) if self.x3 else ()
        return instantiation("matmul_tc_mma", ctype, a_kc, b_kc, self.bm, self.bn, self.bk, self.wm, self.wn,
                             self.stages, *x3)


# 64-byte slice lines (bk = 32 16-bit values, 16 floats) except the last tile of each list, whose 128-byte lines halve
# the barriers per flop where shared memory allows three such stages (sm_80 and sm_90: over 144 KiB per block).
# TF32 warps hold 64 x 32 of C: its fragment reads of m-contiguous tiles are 4-byte loads, whose addresses take the
# registers a 64 x 64 warp tile would need for its accumulators.
HALF_TILES = (TcTile(128, 256, 32, 64, 64, 4), TcTile(128, 128, 32, 64, 64, 4, 0.9),
              TcTile(64, 64, 32, 32, 32, 4, 0.6), TcTile(128, 256, 64, 64, 64, 3))
TF32_TILES = (TcTile(128, 128, 16, 64, 32, 4), TcTile(128, 64, 16, 64, 32, 4, 0.9),
              TcTile(64, 64, 16, 32, 32, 4, 0.6), TcTile(128, 128, 32, 64, 32, 3))


# float32 as three TF32 products (x3); planned for float32 where they beat the register tiles (matmul.plan).
X3_TILES = (TcTile(128, 64, 16, 64, 32, 4, x3=True), TcTile(64, 64, 16, 32, 32, 4, x3=True))


def tiles(name: str) -> tuple[TcTile, ...]:
    """The mma_sync tiles built for dtype `name` (plan_fast's candidates are those that fit the device)."""
    return TF32_TILES if name == "float32" else HALF_TILES


LAYOUTS = tuple((a_kc, b_kc) for a_kc in (True, False) for b_kc in (True, False))


@functools.lru_cache(maxsize=None)
def wmma_instantiations(name: str) -> tuple[str, ...]:
    """One module per dtype: the wmma kernel in the 4 layouts."""
    return tuple(instantiation("matmul_tc_wmma", ctype(name), a_kc, b_kc) for a_kc, b_kc in LAYOUTS)


@functools.lru_cache(maxsize=None)
def mma_instantiations(tile: TcTile, name: str) -> tuple[str, ...]:
    """One module per (tile, dtype): the 4 layouts (X3 tiles: each aligned and misaligned)."""
    return tuple(tile.expression(ctype(name), a_kc, b_kc, aligned) for a_kc, b_kc in LAYOUTS
                 for aligned in ((True, False) if tile.x3 else (True,)))


def instantiation_groups():
    """Every module this family builds, for the GPU-less compile check."""
    groups = [wmma_instantiations(name) for name in DTYPES]
    groups += [mma_instantiations(tile, name) for name in DTYPES for tile in tiles(name)]
    groups += [mma_instantiations(tile, "float32") for tile in X3_TILES]
    return groups


def compute_capability(device_id: int) -> int:
    from ._tune import compute_capability as cc

    return cc(device_id)


def dtype_name(op_dtype) -> str:
    name = np.dtype(op_dtype).name
    if name not in DTYPES:
        raise TypeError(f"cudakit.matmul: the tensor-core kernels take float16, bfloat16 or float32 (TF32), got {name}")
    return name


def check_supported(kind: str, name: str, cc: int) -> None:
    """A TypeError, before anything launches, where the device lacks the instructions `kind` needs for `name`."""
    if kind == "mma_sync" and cc < 80:
        raise TypeError(f"cudakit.matmul: variant 'mma_sync' needs sm_80 or later (cp.async, ldmatrix, mma.sync "
                        f"m16n8k16); this GPU is sm_{cc}")
    if name in NEEDS_SM80 and cc < 80:
        what = "TF32" if name == "float32" else name
        raise TypeError(f"cudakit.matmul: {what} on the tensor cores needs sm_80 or later; this GPU is sm_{cc} "
                        f"(float16 runs on the wmma variant from sm_70)")
    if kind == "wmma" and cc < 70:
        raise TypeError(f"cudakit.matmul: the tensor cores need sm_70 or later; this GPU is sm_{cc}")


def _batch_of(x, count: int, stride: int):
    """The 3-D view of `count` matrices like x, `stride` elements apart (0: x itself, broadcast)."""
    return cupy.ndarray((count,) + x.shape, x.dtype, x.data, (stride * x.itemsize,) + x.strides)


def batch_operand(x, row_axis: int, count: int, stride: int, aligned: bool):
    """(matrix, stride) of a batch operand the kernels read: x and its stride where they can, else a copy of the
    whole batch in a layout they read. aligned: rows (lines of the contiguous index) start on 16 bytes in every matrix
    (16-byte base, leading dimension and batch stride whole 16-byte vectors), as cp.async and ldmatrix need;
    a copy pads its lines to whole vectors (the kernels never read the padding)."""
    from .matmul import _layout

    item = x.itemsize
    width = 16 // item
    a, k_contig, ld = _layout(x, row_axis)
    in_place = a is x
    ok = not aligned or (a.data.ptr % 16 == 0 and ld % width == 0 and (count == 1 or stride % width == 0))
    if ok and (in_place or count == 1 or stride == 0):
        return a, stride  # x, or the one matrix _layout copied (broadcast: every product reads it)
    if count == 1 or stride == 0:  # one matrix: pad its lines
        from .matmul import aligned_operand

        return aligned_operand(a, row_axis), stride
    contiguous = 1 - row_axis if k_contig else row_axis  # the axis whose elements lie next to each other
    extent = x.shape[contiguous]
    padded = -(-extent // width) * width if aligned else extent
    buf = cupy.empty((count, x.shape[1 - contiguous], padded), x.dtype)
    view = buf[:, :, :extent] if contiguous == 1 else buf[:, :, :extent].transpose(0, 2, 1)
    view[...] = _batch_of(x, count, stride)
    return view[0], buf.strides[0] // item


def run_tc(kind: str, A, B, out, batch=(1, 0, 0), tile: TcTile | None = None) -> None:
    """C = A @ B on a tensor-core kernel: kind "wmma" or "mma_sync" (with `tile`, default the first of the dtype's).

    A (m x k) and B (k x n) are 2-D CuPy views of one dtype, out the C-contiguous m x n result (float32 operands:
    TF32 products). batch = (count, A's stride, B's stride) in elements: `count` products, A, B and out being the
    first one's, the outputs one after the other from out. Any layout is read (C- or F-ordered, transposed views;
    others copied); mma_sync copies operands whose rows don't start on 16 bytes into padded ones.
    """
    name = dtype_name(out.dtype)
    if A.dtype != out.dtype or B.dtype != out.dtype:
        raise TypeError(f"cudakit.matmul: the tensor-core kernels take operands of one dtype, got A {A.dtype}, "
                        f"B {B.dtype}, out {out.dtype}")
    if kind not in ("wmma", "mma_sync"):
        raise ValueError(f"cudakit.matmul: unknown tensor-core kernel {kind!r} (wmma, mma_sync)")
    device_id = out.data.device_id
    check_supported(kind, name, compute_capability(device_id))
    m, k = A.shape
    n = B.shape[1]
    if max(m, n, k) > MAX_DIM:
        raise ValueError(f"cudakit.matmul: the tensor-core kernels take sides below 2^31, got {m} x {k} x {n}")
    count, step_a, step_b = batch
    if count == 0 or m == 0 or n == 0:
        return
    if k == 0:
        cupy.ndarray((count * m * n * out.itemsize,), np.uint8, out.data).fill(0)  # zero bits: 0.0 in every float dtype
        return
    mma = kind == "mma_sync"
    from .matmul import _layout

    A, step_a = batch_operand(A, 0, count, step_a, mma)
    B, step_b = batch_operand(B, 1, count, step_b, mma)
    a, a_kc, lda = _layout(A, 0)
    b, b_kc, ldb = _layout(B, 1)
    if mma:
        tile = tile or tiles(name)[0]
        fn = kernel(FAMILY, tile.expression(ctype(name), a_kc, b_kc), mma_instantiations(tile, name))
        grid = -(-m // tile.bm) * -(-n // tile.bn)
        threads, smem = tile.threads, tile.shared_bytes(ITEMSIZE[name])
    else:
        fn = kernel(FAMILY, instantiation("matmul_tc_wmma", ctype(name), a_kc, b_kc), wmma_instantiations(name))
        grid = -(-m // WMMA_TILE[0]) * -(-n // WMMA_TILE[1])
        threads, smem = WMMA_THREADS, 0
    item = out.itemsize
    for z0 in range(0, count, MAX_GRID_Z):
        here = min(MAX_GRID_Z, count - z0)
        launch(fn, (grid, 1, here), (threads,),
               (a.data.ptr + z0 * step_a * item, b.data.ptr + z0 * step_b * item, out.data.ptr + z0 * m * n * item,
                m, n, k, lda, ldb, step_a, step_b) + ((k,) if mma else ()), shared_mem=smem)


@functools.lru_cache(maxsize=None)
def _fits(tile: TcTile, name: str, device_id: int) -> bool:
    """Whether a block of `tile` fits the device's shared memory (what a block may opt in to)."""
    return tile.shared_bytes(ITEMSIZE[name]) <= shared_per_block(device_id)


@functools.lru_cache(maxsize=4096)
def plan_fast(device_id: int, name: str, m: int, n: int, k: int, count: int = 1) -> TcTile:
    """The mma_sync tile for `count` m x k x n products: of the dtype's tiles with 64-byte slice lines that fit the
    device, the one whose modelled time is least. The busiest SM runs ceil(blocks / SMs) blocks, each taking
    bm bn / weight: a large product takes the large tile; a grid that would leave SMs idle, a smaller one."""
    sms, best = sm_count(device_id), None
    for tile in tiles(name):
        if tile.bk * ITEMSIZE[name] != 64 or not _fits(tile, name, device_id):
            continue
        blocks = -(-m // tile.bm) * -(-n // tile.bn) * count
        seconds = -(-blocks // sms) * tile.bm * tile.bn / tile.weight
        if best is None or seconds < best[0]:
            best = (seconds, tile)
    return best[1]


def run_fast(A, B, out, batch=(1, 0, 0)) -> None:
    """cudakit.matmul's fast variant for float16, bfloat16 and float32 in TF32: the Hopper kernels on sm_90 where
    they take the case, else mma_sync (sm_80+) on plan_fast's tile, else wmma (float16 on sm_70 / sm_75)."""
    device_id = out.data.device_id
    cc = compute_capability(device_id)
    name = dtype_name(out.dtype)
    if cc >= 90:
        try:
            from . import _hopper

            hopper = _hopper.run_fast
        except (ImportError, AttributeError):
            hopper = None
        if hopper is not None and hopper(A, B, out, batch):
            return
    if cc >= 80:
        m, k = A.shape
        run_tc("mma_sync", A, B, out, batch, plan_fast(device_id, name, m, B.shape[1], k, batch[0]))
    else:
        run_tc("wmma", A, B, out, batch)


def resident(tile: TcTile, device_id: int) -> int:
    """Blocks of a float32 `tile` the GPU holds at once (SMs x the driver's occupancy calculator, C-order operands)."""
    fn = kernel(FAMILY, tile.expression("float", True, False), mma_instantiations(tile, "float32"))
    return sm_count(device_id) * resident_blocks(fn, tile.threads, tile.shared_bytes(4))


X3_MIN_DEPTH = 256  # the least k a split's run takes: shorter runs spend most of their time filling the pipeline
X3_MARGIN = 1.05  # the planner takes them only where its model has them this much faster (it overrated narrow wins)
# Where TF32 products run several times the FP32 rate (A100, H100): on sm_86 / sm_89 parts the tensor cores' TF32 rate
# is about the FP32 one, and three products would lose.
X3_ARCHS = (80, 90)


# A k from X3_MIN_K to _tune.SMALL_K with both sides of C past _tune.NARROW_SIDE: X3 alone (matmul._plan), before the
# short-k kernel too (_matmul_routes.x3_short_k_takes: 2-D products, and batches past the small kernel's limits). They
# outran the short-k kernel, the small-k and the wide register tiles on every such product timed but one tiny one; a
# narrow C kept its narrow tiles (docs/NOTES.md, session 38). A shallower k was not timed.
X3_MIN_K = 20
# An X3 grid of one to two rounds of resident blocks may have k cut into up to X3_WAVE_SPLITS runs: the model then
# weighs the second round's idle slots against the partial sums (X3 tiles have no stream-K tail). Grids of more rounds
# ran slower so (docs/NOTES.md, session 38).
X3_WAVE_SPLITS = 6


def x3_offered(dtype, m: int, n: int, k: int, count: int, cc: int) -> tuple[TcTile, ...]:
    """The X3 tiles matmul._plan weighs for `count` m x k x n products of `dtype` on an sm_`cc` GPU: float32 products
    with k past _tune.SMALL_K, or from X3_MIN_K with both sides of C past _tune.NARROW_SIDE (x3_short_k), and sides
    within int, on X3_ARCHS."""
    from . import _tune

    if np.dtype(dtype) != np.float32 or max(m, n, k) > MAX_DIM or cc not in X3_ARCHS:
        return ()
    return X3_TILES if k > _tune.SMALL_K or x3_short_k(m, n, k) else ()


def x3_short_k(m: int, n: int, k: int) -> bool:
    """Whether an m x k x n product's k is short (X3_MIN_K to _tune.SMALL_K) and its C past _tune.NARROW_SIDE on
    both sides: X3 alone takes it, where x3_offered offers X3 at all."""
    from . import _tune

    return X3_MIN_K <= k <= _tune.SMALL_K and min(m, n) > _tune.NARROW_SIDE


def x3_seconds(modelled: float, copies: tuple[float, float], splits: int, depth: int) -> float:
    """An X3 plan's time for the planner: the model's time times X3_MARGIN, plus x3_copies' copies: those of operands
    with no unit stride, and for lines off 16 bytes the cheaper of their padded copies and the misaligned build's
    slowdown; infinite (never planned) for runs of k shorter than X3_MIN_DEPTH."""
    if splits > 1 and depth < X3_MIN_DEPTH:
        return math.inf
    strided, padded = copies
    return modelled * X3_MARGIN + strided + min(padded, modelled * (1 / X3_MISALIGNED_RATE - 1))


COPY_BYTES_PER_S = 1.2e12  # a device copy's reads and writes, as the planner counts them (measured: 1.4-1.6e12)
X3_MISALIGNED_RATE = 0.89  # the build reading lines off 16 bytes (4-byte copies) against the 16-byte one (measured)


def _copy_seconds(x) -> float:
    from . import _tune

    return 2 * x.nbytes / COPY_BYTES_PER_S + _tune.LAUNCH_S


def _lines_aligned(x, ld: int) -> bool:
    return x.data.ptr % 16 == 0 and ld % 4 == 0


def x3_copies(A, B) -> tuple[float, float]:
    """The modelled seconds of the copies an X3 product may make, for matmul.plan: (C-order copies of operands with no
    unit stride, which it always makes; padded copies of those whose lines do not start on 16 bytes, which it makes
    where they cost less than the misaligned build's slowdown)."""
    from .matmul import _layout

    strided = padded = 0.0
    for x, axis in ((A, 0), (B, 1)):
        a, _, ld = _layout(x, axis)
        strided += _copy_seconds(x) if a is not x else 0.0
        padded += 0.0 if _lines_aligned(a, ld) else _copy_seconds(a)
    return strided, padded


def x3_launcher(A, B, out, tile: TcTile, splits: int = 1, depth: int = 0):
    """f(A, B, out): one float32 product on an X3 tile, k cut into `splits` runs of `depth` (the last shorter) whose
    partial products are summed in a fixed order; launches built once for operands of these shapes, strides and
    16-byte alignments (the fast variant's route key holds all three). An operand with no unit stride is copied to C
    order on every call; lines off 16 bytes are padded on every call where x3_seconds has the copy cheaper than the
    misaligned build, else read in place by it."""
    from . import _tune
    from ._matmul_routes import partials_adder
    from .matmul import _layout, aligned_operand

    m, k = A.shape
    n = B.shape[1]
    device_id = out.data.device_id
    modelled = _tune.product_seconds(tile, m, n, k, splits, resident(tile, device_id), sm_count(device_id), 4,
                                     depth=depth)
    pads = 0 < x3_copies(A, B)[1] < modelled * (1 / X3_MISALIGNED_RATE - 1)
    laid = [_layout(x, axis) for x, axis in ((A, 0), (B, 1))]
    pad_a, pad_b = (pads and not _lines_aligned(x, ld) for x, _, ld in laid)
    copy_a, copy_b = pad_a or laid[0][0] is not A, pad_b or laid[1][0] is not B

    def operands(A, B):  # (the copies must outlive the launches that read them: the caller holds them)
        a = (aligned_operand(A, 0) if pad_a else _layout(A, 0)[0]) if copy_a else A
        b = (aligned_operand(B, 1) if pad_b else _layout(B, 1)[0]) if copy_b else B
        return a, b

    (a, a_kc, lda), (b, b_kc, ldb) = (_layout(x, axis) for x, axis in zip(operands(A, B), (0, 1)))
    step_a, step_b = (depth * (1 if a_kc else lda), depth * (1 if b_kc else ldb)) if splits > 1 else (0, 0)
    aligned = _lines_aligned(a, lda) and _lines_aligned(b, ldb) and step_a % 4 == 0 and step_b % 4 == 0
    fn = kernel(FAMILY, tile.expression("float", a_kc, b_kc, aligned), mma_instantiations(tile, "float32"))
    grid, block, smem = -(-m // tile.bm) * -(-n // tile.bn), (tile.threads,), tile.shared_bytes(4)
    if splits == 1:
        def run(A, B, out):
            a, b = operands(A, B)
            launch(fn, (grid,), block, (a.data.ptr, b.data.ptr, out.data.ptr, m, n, k, lda, ldb, 0, 0, k),
                   shared_mem=smem)
        return run
    k_last, add = k - (splits - 1) * depth, partials_adder(out, splits)

    def run_split(A, B, out):  # the runs as one batch of products, the last one k_last deep
        a, b = operands(A, B)
        partials = workspace(splits * m * n * 4)[0]
        launch(fn, (grid, 1, splits), block, (a.data.ptr, b.data.ptr, partials, m, n, depth, lda, ldb, step_a, step_b,
                                              k_last), shared_mem=smem)
        add(out.data.ptr, partials)
    return run_split


def _batch_aligned(a0, b0, steps) -> bool:
    """Whether every product of a batch read in place has its lines on 16 bytes (the aligned build reads it)."""
    from .matmul import _layout

    return (all(_lines_aligned(x, ld) for x, _, ld in (_layout(a0, 0), _layout(b0, 1)))
            and all(step % 4 == 0 for step in steps))


def x3_batch_copies(a0, b0, steps: tuple[int, ...]) -> tuple[float, float]:
    """x3_copies for a batch read in place (matmul's batch route): no copy; lines or steps off 16 bytes are read by the
    misaligned build (a padded copy of the whole batch is never modelled cheaper)."""
    return 0.0, 0.0 if _batch_aligned(a0, b0, steps) else math.inf


def x3_batch_launches(tile: TcTile, a0, b0, c_ptr: int, count: int, steps: tuple[int, int]) -> list:
    """The launches of `count` float32 products on an X3 tile, k whole: a0 and b0 the first product's operands, read
    in place, `steps` the elements between consecutive products' A and B (C's products lie one after the other)."""
    from .matmul import _layout

    (a, a_kc, lda), (b, b_kc, ldb) = _layout(a0, 0), _layout(b0, 1)
    assert a is a0 and b is b0, "a batch's operands are read in place"
    m, k = a0.shape
    n = b0.shape[1]
    fn = kernel(FAMILY, tile.expression("float", a_kc, b_kc, _batch_aligned(a0, b0, steps)),
                mma_instantiations(tile, "float32"))
    grid, launches = -(-m // tile.bm) * -(-n // tile.bn), []
    for z0 in range(0, count, MAX_GRID_Z):
        here = min(MAX_GRID_Z, count - z0)
        launches.append((fn, (grid, 1, here), (tile.threads,),
                         (a.data.ptr + z0 * steps[0] * 4, b.data.ptr + z0 * steps[1] * 4, c_ptr + z0 * m * n * 4,
                          m, n, k, lda, ldb, *steps, k), tile.shared_bytes(4)))
    return launches


def _variant_run(kind: str):
    def run(A, B, out):
        run_tc(kind, A, B, out)

    return run


TC_DTYPES = ("float16", "bfloat16", "float32")
VARIANTS = register("matmul", [
    Variant("matmul", "wmma", "warp-level 16x16x16 tensor-core fragments (wmma): float16/bfloat16 products summed in "
            "float32, float32 as TF32; 64x64 tiles staged by element loads", _variant_run("wmma"),
            dtypes=TC_DTYPES, min_cc=70),
    Variant("matmul", "mma_sync", "the Ampere design: a cp.async multi-stage pipeline into XOR-swizzled shared tiles, "
            "ldmatrix fragments, mma.sync m16n8k16 (TF32 m16n8k8) on 128x256 tiles", _variant_run("mma_sync"),
            dtypes=TC_DTYPES, min_cc=80),
])
