"""Per-device tile configuration of the fast matmul: a small space of compile-time tiles, searched on the current
GPU by `tune()` and cached per user as JSON, keyed by device name and compute capability.

The cache is ~/.cache/cudakit/matmul_tune.json ($XDG_CACHE_HOME respected; $CUDAKIT_TUNE_CACHE overrides the path).
A configuration names two tiles per dtype: "large" for grids that fill the GPU, "small" for the others.
"""
from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._compile import instantiation
from .bench.timing import replay

CACHE_ENV = "CUDAKIT_TUNE_CACHE"
CACHE_VERSION = 1
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


@dataclass(frozen=True)
class Tile:
    """One compile-time configuration of matmul_regtile ("simt") or matmul_dmma ("dmma", FP64 tensor cores)."""

    kind: str  # "simt" | "dmma"
    bm: int  # block tile rows
    bn: int  # block tile columns
    bk: int  # depth of one shared-memory slice
    wm: int  # warp tile rows
    wn: int  # warp tile columns
    tm: int = 0  # thread tile rows (simt)
    tn: int = 0  # thread tile columns (simt)
    stages: int = 2  # 2: double-buffered shared memory
    min_blocks: int = 1  # __launch_bounds__ blocks per SM (caps registers at 64K / (threads * min_blocks))
    warp_tiled: bool = True
    ksplit: int = 1  # simt: groups of threads sharing each slice's depth (sliced k)

    def __hash__(self) -> int:  # (a tile keys the planners' caches on every call: hashed once)
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        return hash(tuple(getattr(self, f) for f in self.__dataclass_fields__))

    @functools.cached_property
    def name(self) -> str:
        body = f"{self.kind}_{self.bm}x{self.bn}x{self.bk}"
        if self.kind == "simt":
            body += f"_t{self.tm}x{self.tn}" + (f"_w{self.wm}x{self.wn}" if self.warp_tiled else "_nowarp")
            body += f"_k{self.ksplit}" if self.ksplit > 1 else ""
        else:
            body += f"_w{self.wm}x{self.wn}"
        return body + f"_s{self.stages}_b{self.min_blocks}"

    @functools.cached_property
    def threads(self) -> int:
        if self.kind == "simt":
            return self.bm * self.bn // (self.tm * self.tn) * self.ksplit
        return (self.bm // self.wm) * (self.bn // self.wn) * 32

    def shared_bytes(self, dtype) -> int:
        """Dynamic shared memory a block takes: STAGES slices of A (BK x BM) and B (BK x BN), each row padded by
        one 16-byte vector (simt) or 4 doubles (dmma), as the kernels lay them out."""
        itemsize = np.dtype(dtype).itemsize
        pad = 4 if self.kind == "dmma" else 16 // itemsize
        return self.stages * self.bk * (self.bm + self.bn + 2 * pad) * itemsize

    def supports(self, dtype, cc: int) -> bool:
        """dmma is FP64 on sm_80 and later; simt runs everywhere."""
        return self.kind == "simt" or (np.dtype(dtype) == F64 and cc >= 80)

    def expression(self, dtype, a_kc: bool, b_kc: bool, vec: bool) -> str:
        flags = (bool(a_kc), bool(b_kc), bool(vec))
        if self.kind == "dmma":  # FP64 only: no type argument
            return instantiation("matmul_dmma", self.bm, self.bn, self.bk, self.wm, self.wn, self.stages,
                                 self.min_blocks, *flags)
        return instantiation("matmul_regtile", np.dtype(dtype), self.bm, self.bn, self.bk, self.wm, self.wn, self.tm,
                             self.tn, bool(self.warp_tiled), self.stages, self.min_blocks, self.ksplit, *flags)


def simt(bm, bn, bk, wm, wn, tm, tn, min_blocks=1, stages=2, warp_tiled=True, ksplit=1) -> Tile:
    return Tile("simt", bm, bn, bk, wm, wn, tm, tn, stages, min_blocks, warp_tiled, ksplit)


def dmma(bm, bn, bk, wm, wn, min_blocks=1, stages=2) -> Tile:
    return Tile("dmma", bm, bn, bk, wm, wn, stages=stages, min_blocks=min_blocks)


# The search space (each tile is one module of 8 instantiations: 4 layouts x 16-byte or element loads).
CANDIDATES = {
    F32: (
        simt(128, 128, 16, 64, 32, 8, 8, min_blocks=2),  # 256 threads, 2 blocks per SM: the large default
        simt(128, 128, 8, 64, 32, 8, 8, min_blocks=2),  # half-depth slices (the double_buffered step)
        simt(128, 256, 8, 64, 64, 8, 16),  # 128 accumulators a thread, 1 block per SM
        simt(128, 128, 16, 64, 64, 16, 8, min_blocks=2),  # 128 threads, 128 accumulators each
        simt(64, 64, 32, 32, 32, 4, 8, min_blocks=4),  # 128 threads, deep slices for short grids
        simt(32, 64, 32, 16, 32, 4, 4, min_blocks=4),  # 128 threads, 4x the blocks of 64x64
        simt(32, 64, 32, 16, 32, 4, 4, min_blocks=2, ksplit=2),  # 2 x 128 threads on each slice: the small default
    ),
    F64: (
        dmma(64, 64, 8, 32, 32, min_blocks=3),  # 128 threads, 4 warps of 32x32: the small default on sm_80+
        dmma(128, 128, 8, 64, 32),  # 256 threads, 8 warps of 64x32: the large default on sm_80+
        simt(128, 128, 8, 64, 32, 8, 8),  # plain FP64 FMA, 256 threads (the double_buffered step)
        simt(64, 64, 8, 32, 32, 4, 8, min_blocks=2),  # plain FP64 FMA, 128 threads
    ),
}
_BY_NAME = {t.name: t for tiles in CANDIDATES.values() for t in tiles}
# Beside the tuned pair, the planner weighs these: FP32's 64 x 64 tile between the pair's two (its 4 blocks per SM
# split long k without sliced k's shared-memory sums); for a short k, the 32 x 64 tile at 4 blocks per SM, whose
# blocks overlap one another's stores of C.
MIDDLE_TILE = {F32: CANDIDATES[F32][4]}
SMALL_K_TILE = {F32: CANDIDATES[F32][5]}
# The 128 x 128 tile of 16 x 8 sums a thread (128 threads) outran the tuned pair and SMALL_K_TILE where its operands
# were read with 16-byte loads and its grid filled the SMs: one product with k from WIDE_MIN_K to WIDE_SHORT_MAX_K,
# and batches (no stream-K tail) with k up to WIDE_BATCH_MAX_K (docs/NOTES.md, session 25). A single product of
# mid k (100 to 227) filling the SMs several times ran slower on it; k under WIDE_MIN_K was not measured.
WIDE_TILE = {F32: CANDIDATES[F32][3]}
WIDE_MIN_K, WIDE_SHORT_MAX_K, WIDE_BATCH_MAX_K = 32, 64, 1024
# Split k only: 64 x 128 and 128 x 64 tiles of 8 x 8 sums a thread, 3 blocks per SM. Their smaller tiles cut a split
# product's padding and its rounds finer than the tuned pair's; unsplit, the tuned pair's tiles ran as fast or faster.
# Their modelled rate is set where no product of the session-34 A/B that they took ran slower (docs/NOTES.md).
SPLIT_TILES = {F32: (simt(64, 128, 16, 32, 64, 8, 8, min_blocks=3), simt(128, 64, 16, 64, 32, 8, 8, min_blocks=3))}
# A C with a side of at most NARROW_SIDE: tiles 16 or 32 wide on that side, 128 long on the other, so that a long
# k split into many shares computes little padding (a 64 x 64 tile of a 9-column C is 86% padding).
NARROW_SIDE = 32
NARROW_TILES = {
    F32: (simt(128, 16, 32, 32, 16, 4, 4, min_blocks=4), simt(16, 128, 32, 16, 32, 4, 4, min_blocks=4),
          simt(128, 32, 32, 32, 32, 4, 8, min_blocks=4), simt(32, 128, 32, 32, 32, 8, 4, min_blocks=4)),
    F64: (simt(128, 16, 16, 32, 16, 8, 2, min_blocks=3), simt(16, 128, 16, 16, 32, 2, 8, min_blocks=3),
          simt(128, 32, 16, 32, 32, 8, 4, min_blocks=3), simt(32, 128, 16, 32, 32, 4, 8, min_blocks=3)),
}


def extra_tiles(dtype) -> tuple[Tile, ...]:
    """The tiles the planner weighs beside the tune space: the narrow tiles and the split-only ones."""
    dtype = np.dtype(dtype)
    return NARROW_TILES[dtype] + SPLIT_TILES.get(dtype, ())


def default_config(dtype, cc: int) -> dict:
    """The configuration used until `tune()` has run on this device (the winners measured on an H200)."""
    dtype = np.dtype(dtype)
    if dtype == F32:
        large, small = CANDIDATES[F32][0], CANDIDATES[F32][6]
    elif cc >= 80:
        large, small = CANDIDATES[F64][1], CANDIDATES[F64][0]
    else:
        large, small = CANDIDATES[F64][2], CANDIDATES[F64][3]
    return {"large": large.name, "small": small.name}


def candidates(dtype, cc: int) -> tuple[Tile, ...]:
    return tuple(t for t in CANDIDATES[np.dtype(dtype)] if t.supports(dtype, cc))


# ---- the fast variant's plan for one product -----------------------------------------------------------------

# The planner's model of each tile: its rate on padded work (whole tiles) with every resident slot busy, measured on
# an H100 (docs/NOTES.md, "matmul: the planner's model"). Other GPUs keep the ratios, which is what the choice uses.
TILE_TFLOPS = {
    "simt_128x128x16_t8x8_w64x32_s2_b2": 43.0, "simt_128x128x8_t8x8_w64x32_s2_b2": 41.0,
    "simt_128x256x8_t8x16_w64x64_s2_b1": 40.0, "simt_128x128x16_t16x8_w64x64_s2_b2": 38.0,
    "simt_64x64x32_t4x8_w32x32_s2_b4": 33.6, "simt_64x128x16_t8x8_w32x64_s2_b3": 35.0,
    "simt_128x64x16_t8x8_w64x32_s2_b3": 35.0, "simt_32x64x32_t4x4_w16x32_s2_b4": 28.0,
    "simt_32x64x32_t4x4_w16x32_k2_s2_b2": 28.0, "dmma_128x128x8_w64x32_s2_b1": 40.7,
    "dmma_64x64x8_w32x32_s2_b3": 39.0, "simt_128x128x8_t8x8_w64x32_s2_b1": 21.0, "simt_64x64x8_t4x8_w32x32_s2_b2": 17.5,
    "simt_128x16x32_t4x4_w32x16_s2_b4": 22.3, "simt_16x128x32_t4x4_w16x32_s2_b4": 29.3,
    "simt_128x32x32_t4x8_w32x32_s2_b4": 32.7, "simt_32x128x32_t8x4_w32x32_s2_b4": 40.6,
    "simt_128x16x16_t8x2_w32x16_s2_b3": 14.0, "simt_16x128x16_t2x8_w16x32_s2_b3": 11.4,
    "simt_128x32x16_t8x4_w32x32_s2_b3": 20.3, "simt_32x128x16_t4x8_w32x32_s2_b3": 19.2,
    # the pipelined FP64 kernel's tiles: those of _dmma.PLANNED fitted to session 37's probe (docs/NOTES.md); those
    # of _dmma.SPLIT_TILES session 21's; the 32 x 32 batch tile fitted to 64 x 512^3 (session 49)
    "128x64x16_w64x32_s3": 51.0, "64x128x16_w32x64_s3": 51.0, "64x64x16_w32x32_s4": 50.0, "32x32x16_w16x16_s5": 35.0,
    "128x64x16_w64x32_s4": 49.0, "64x128x16_w32x64_s4": 49.0, "64x64x32_w32x32_s3": 49.0,
    # FP32 as three TF32 products (matmul_tc.X3_TILES), fitted to their whole-k times beside the register tiles'
    "x3_128x64x16_w64x32_s4": 60.0, "x3_64x64x16_w32x32_s4": 46.0,
}
SUM_BYTES_PER_S = 2.8e12  # what the split-k sum's reads and writes move at (the H100's, as the rates above)
LAUNCH_S = 3e-6  # the split-k sum's launch
STREAM_K_TAIL_COST = 1.4  # a stream-K tail's tiles, shared and summed through memory, against whole tiles
SMALL_K = 64  # k up to which a product is bound by writing C: the small tile with the most blocks per SM serves
# (FP32 from matmul_tc.X3_MIN_K with C past NARROW_SIDE: X3, on its GPUs)
MIN_SPLITS = 3  # fewer shares gain less than the partial sums' extra pass costs (docs/NOTES.md, "matmul.py: split k")


def split_depth(k: int, splits: int, bk: int, odd: bool = False) -> tuple[int, int]:
    """(splits, depth): k cut into runs of `depth`, a whole number of bk-deep slices (the last run may be shorter);
    odd: an odd number of slices, so that the runs of an operand whose lines are a power of two long do not start a
    large power of two apart (such starts fall on the same memory channels: docs/NOTES.md, "The FP64 split's tiles
    and rounds")."""
    slices = -(-k // splits)
    slices = -(-slices // bk)
    if odd and slices % 2 == 0 and slices * bk < k:
        slices += 1
    depth = slices * bk
    return -(-k // depth), depth


def product_seconds(tile: Tile, m: int, n: int, k: int, splits: int, slots: int, sms: int, itemsize: int,
                    tail_tiles: int = 0, count: int = 1, last_round_alone: bool = False, depth: int = 0) -> float:
    """The model's time for `count` products m x n x k in one launch on `tile`, k cut in `splits` runs (`depth` deep,
    or as split_depth cuts them), `slots` blocks resident at once on `sms` SMs.

    Whole rounds of blocks, each block's padded tile at the tile's rate per slot; a grid of less than one round
    spreads over the SMs, and an SM holding fewer blocks than it can runs each faster (by the square root of the
    share it leaves idle); last_round_alone: so does a partial last round (the pipelined FP64 tiles, whose rates
    were fitted so); the last `tail_tiles` tiles of a stream-K tail are shared by one round of blocks at
    STREAM_K_TAIL_COST; split k adds its sum pass."""
    rate = TILE_TFLOPS.get(tile.name, min(TILE_TFLOPS.values())) * 1e12
    depth = depth or split_depth(k, splits, tile.bk)[1]
    blocks = -(-m // tile.bm) * -(-n // tile.bn) * splits * count
    block_flops = 2.0 * tile.bm * tile.bn * depth

    def spread(blocks: int) -> float:
        per_sm, most = -(-blocks // sms), max(1, slots // sms)
        return block_flops * per_sm / (rate / sms * math.sqrt(per_sm / most))

    if blocks <= slots:
        seconds = spread(blocks)
    elif tail_tiles:
        seconds = (blocks - tail_tiles + STREAM_K_TAIL_COST * tail_tiles) * block_flops / rate
    elif last_round_alone:
        seconds = blocks // slots * block_flops * slots / rate + (spread(blocks % slots) if blocks % slots else 0)
    else:
        seconds = -(-blocks // slots) * block_flops * slots / rate
    if splits > 1:
        seconds += (splits + 1) * m * n * itemsize / SUM_BYTES_PER_S + LAUNCH_S
    return seconds


MIN_TAIL_SLICES = 8  # slices of k a tile needs before its tail is worth sharing (each cut tile costs a store)
MAX_TAIL_FILL = 15 / 16  # a last wave fuller than this gains too little from sharing


def stream_k_tail(tiles: int, slots: int, k: int, bk: int) -> tuple[int, int]:
    """(tail_start, sk_blocks) for a grid of `tiles` on `slots` resident blocks: the tiles from tail_start on are
    shared in equal runs of k slices by sk_blocks blocks; (tiles, 0) when every block keeps one tile. The tail holds
    a wave more than the leftover so that each block's run is at least a tile long: a tile is cut at most once.
    """
    full, rest = divmod(tiles, slots)
    if full == 0 or rest == 0 or rest > MAX_TAIL_FILL * slots or -(-k // bk) < MIN_TAIL_SLICES:
        return tiles, 0
    return tiles - rest - slots, slots


def split_counts(most: int) -> list[int]:
    """The split counts the planner weighs: 1, and MIN_SPLITS up to `most` in steps of about 1.5x."""
    counts, s = [1], MIN_SPLITS
    while s < most:
        counts.append(s)
        s = max(s + 1, s * 3 // 2)
    return counts + ([most] if most >= MIN_SPLITS else [])


# ---- the cache -----------------------------------------------------------------------------------------------


def cache_path() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cudakit" / "matmul_tune.json"


def _read_cache(path: Path) -> dict:
    """The cache's device table; a missing, unreadable or older-format file reads as empty."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("devices"), dict):
        return {}
    return data["devices"]


def _write_cache(path: Path, devices: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": CACHE_VERSION, "devices": devices}, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)  # readers never see a half-written file


def store(key: str, dtype, config: dict, path: Path | None = None) -> None:
    """Record `config` ({"large": name, "small": name}) as the tuned one for device `key` and `dtype`."""
    path = cache_path() if path is None else path
    devices = _read_cache(path)
    devices.setdefault(key, {})[np.dtype(dtype).name] = dict(config)
    _write_cache(path, devices)
    tiles.cache_clear()


def lookup(key: str, dtype, cc: int, path: Path | None = None) -> tuple[dict, str]:
    """(config, "tuned") from the cache when it holds a valid entry for device `key`, else (default, "default")."""
    entry = _read_cache(cache_path() if path is None else path).get(key, {}).get(np.dtype(dtype).name)
    if isinstance(entry, dict) and all(
        isinstance(entry.get(slot), str) and entry[slot] in _BY_NAME and _BY_NAME[entry[slot]].supports(dtype, cc)
        for slot in ("large", "small")
    ):
        return {"large": entry["large"], "small": entry["small"]}, "tuned"
    return default_config(dtype, cc), "default"


# ---- the current device -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def compute_capability(device_id: int) -> int:
    import cupy

    return int(cupy.cuda.Device(device_id).compute_capability)


@functools.lru_cache(maxsize=None)
def device_key(device_id: int) -> str:
    import cupy

    name = cupy.cuda.runtime.getDeviceProperties(device_id)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    return f"{name} (sm_{compute_capability(device_id)})"


def active_config(device_id: int, dtype) -> tuple[dict, str]:
    """The fast matmul's tiles on `device_id` for `dtype`: (config, "tuned" | "default")."""
    return lookup(device_key(device_id), dtype, compute_capability(device_id))


@functools.lru_cache(maxsize=None)
def tiles(device_id: int, dtype) -> tuple[Tile, Tile]:
    """(large, small) Tile objects of the active configuration (cached; store() and tune() refresh it)."""
    config, _ = active_config(device_id, dtype)
    return _BY_NAME[config["large"]], _BY_NAME[config["small"]]


# ---- the search ---------------------------------------------------------------------------------------------

# Representative shapes (m, n, k), the goal shapes among them: small grids that leave SMs idle, large ones
# that fill the GPU many times over (inputs beyond L2), aligned and odd.
TUNE_SHAPES = {
    F32: [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (4097, 4095, 4099),
          (65536, 1024, 1024)],
    F64: [(512, 512, 512), (1024, 1024, 1024), (2049, 2047, 2051), (4096, 4096, 4096)],
}


MAX_PADDING = 1.25  # the large tile may compute at most this much more padding than the small one


def choose(large: Tile, small: Tile, m: int, n: int, sms: int, count: int = 1) -> Tile:
    """The rule `tune` scores a pair by, for `count` products of m x n: the large tile when its grid covers every SM
    at least once and the padding its edge tiles compute is not much more than the small tile's, else the small one
    (a batch of small products would otherwise spend most of the large tile's work on padding). The fast variant
    itself weighs the pair through its time model (matmul.plan)."""
    def padded(t: Tile) -> int:
        return -(-m // t.bm) * t.bm * -(-n // t.bn) * t.bn

    covers = count * -(-m // large.bm) * -(-n // large.bn) >= sms
    return large if covers and padded(large) <= MAX_PADDING * padded(small) else small


def best_pair(rates: dict, sms: int) -> tuple[Tile, Tile]:
    """The (large, small) pair whose choices, shape by shape, give the best geometric mean rate.

    `rates` maps each tile that ran every shape correctly to {(m, n, k): TFLOP/s}. Scoring the pair as `choose`
    will use it keeps a large tile whose grid is too short for a shape from costing that shape the small tile's
    rate unseen. Ties go to the earlier candidate (the defaults come first).
    """
    best, best_score = None, -math.inf
    for large in rates:
        for small in rates:
            picked = [rates[choose(large, small, m, n, sms)][(m, n, k)] for m, n, k in rates[large]]
            score = sum(math.log(r) for r in picked) / len(picked)
            if score > best_score:
                best, best_score = (large, small), score
    return best


def _say(console, text: str) -> None:
    if console is not None:
        console.print(text)
    else:
        print(text, flush=True)


def _measure(matmul, tile: Tile, dtype, console) -> dict:
    """{(m, n, k): TFLOP/s} of `tile` on every tune shape, each result checked first; {} when one fails."""
    import cupy

    from . import _check

    rates = {}
    for m, n, k in TUNE_SHAPES[dtype]:
        a = cupy.random.uniform(-1, 1, (m, k)).astype(dtype)
        b = cupy.random.uniform(-1, 1, (k, n)).astype(dtype)
        out = cupy.empty((m, n), dtype)
        try:
            matmul.run_fast_tile(tile, a, b, out)
        except Exception as exc:  # e.g. a compile failure on this toolkit: not a candidate here
            _say(console, f"  {dtype.name} {tile.name}: skipped ({type(exc).__name__}: {exc})")
            return {}
        err = _check.product_error(out, a, b)
        if not err <= _check.tolerance(dtype, k):
            _say(console, f"  {dtype.name} {tile.name}: WRONG at {m}x{n}x{k} (relative error {err:.2e}), skipped")
            return {}
        seconds = replay(lambda: matmul.run_fast_tile(tile, a, b, out)).median
        rates[(m, n, k)] = 2.0 * m * n * k / seconds / 1e12
    return rates


def tune(console=None) -> dict:
    """Search the tile space on the current device; store and return {dtype name: {"large": name, "small": name}}.

    Every candidate's result is checked against a float64 reference before it is timed; a wrong one is skipped.
    """
    import importlib

    import cupy

    from ._device import sm_count

    matmul = importlib.import_module(__package__ + ".matmul")  # the module (the package's `matmul` is the function)
    device_id = cupy.cuda.runtime.getDevice()
    cc, key = compute_capability(device_id), device_key(device_id)
    _say(console, f"tuning cudakit.matmul on {key}; cache: {cache_path()}")
    sms = sm_count(device_id)
    result = {}
    for dtype in (F32, F64):
        rates = {}
        for tile in candidates(dtype, cc):
            measured = _measure(matmul, tile, dtype, console)
            if measured:
                rates[tile] = measured
                _say(console, f"  {dtype.name} {tile.name:40} " + ", ".join(f"{r:.2f}" for r in measured.values())
                     + " TFLOP/s")
        config = default_config(dtype, cc)
        if rates:
            large, small = best_pair(rates, sms)
            config = {"large": large.name, "small": small.name}
        store(key, dtype, config)
        result[dtype.name] = config
        _say(console, f"  {dtype.name}: large = {config['large']}, small = {config['small']}")
    cupy.get_default_memory_pool().free_all_blocks()
    return result
