"""FP64 products of a small C with a long k through kernels/matmul_longk.cu: k cut into runs, each block one run of one
small tile of C on the tensor cores (its warps splitting k among them), the runs' partial Cs added in a fixed order.
These products are bound by reading A and B; the DMMA split's tiles pad a narrow C to 32 or 64 and read it slower
(`takes` weighs the two by a time model). `plan` picks the orientation (C or C^T = B^T @ A^T), the tile and the runs;
`launcher` builds the launches once per geometry (matmul's routes keep them).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from . import _dmma, _tune
from ._compile import instantiation, kernel, rebased, resident_blocks
from ._device import shared_per_block, sm_count, workspace

FAMILY = "matmul_longk"
THREADS = 256  # LONGK_THREADS in matmul_longk.cu
SLICE = THREADS // 4  # k steps a slice (LONGK_SLICE)
MAX_GRID_YZ = 65535


@dataclass(frozen=True)
class LongkTile:
    """An mt x nt tile of R = P @ Q (mt a multiple of 16, nt of 8), the cp.async ring's `stages`, and the doubles one
    copy moves (`chunk`: 1, or 2 where aligned)."""

    mt: int
    nt: int
    stages: int
    chunk: int

    @property
    def name(self) -> str:
        return f"longk_{self.mt}x{self.nt}_s{self.stages}_c{self.chunk}"

    def expression(self, p_kc: bool, q_kc: bool) -> str:
        return instantiation("matmul_longk", self.mt, self.nt, self.stages, self.chunk, p_kc, q_kc)

    def expressions(self) -> tuple[str, ...]:
        return tuple(self.expression(p, q) for p in (True, False) for q in (True, False))

    def shared_bytes(self, p_kc: bool, q_kc: bool) -> int:
        """The kernel's dynamic shared memory: the ring of slices, or the warps' tiles where they need more."""
        return 8 * max(self.stages * stage_doubles(self.mt, self.nt, p_kc, q_kc), THREADS // 32 * self.mt * self.nt)

    @property
    def largest_shared_bytes(self) -> int:
        """shared_bytes of its largest layout: what fits() and resident() count, whichever layout runs."""
        return max(self.shared_bytes(p, q) for p in (True, False) for q in (True, False))


def stage_doubles(mt: int, nt: int, p_kc: bool, q_kc: bool) -> int:
    """One slice of both operands in shared memory (as matmul_longk lays its lines out)."""
    def lines(rows: int, kc: bool) -> int:
        return rows * (SLICE + 4) if kc else SLICE * (rows + (24 - rows % 16) % 16)
    return lines(mt, p_kc) + lines(nt, q_kc)


def _tile(mt: int, nt: int, chunk: int) -> LongkTile:
    """The tile with as many stages as RING_BYTES holds (within STAGES_RANGE), whatever the layouts."""
    stage = 8 * max(stage_doubles(mt, nt, p, q) for p in (True, False) for q in (True, False))
    return LongkTile(mt, nt, max(STAGES_RANGE[0], min(STAGES_RANGE[1], RING_BYTES // stage)), chunk)


RING_BYTES, STAGES_RANGE = 112 * 1024, (3, 8)  # (two blocks an SM where three stages fit)
# 16-byte copies ran the tiles of up to 128 registers faster and the larger ones slower (docs/NOTES.md, session 39)
TILES = tuple(_tile(mt, nt, 2) for mt, nt in ((16, 8), (32, 8), (48, 8), (64, 8), (32, 16))) + tuple(
    _tile(mt, nt, 1) for mt, nt in ((64, 16), (48, 24), (32, 32)))


def instantiation_groups():
    """Every module this family builds (a tile's four layouts each), for the GPU-less compile check."""
    return [tile.expressions() for tile in TILES]


@dataclass(frozen=True)
class LongkPlan:
    tile: LongkTile
    swap: bool  # run C^T = B^T @ A^T: the tile's rows over C's columns
    runs: int
    run: int  # k steps a run (a whole number of slices; the last run shorter)


# The time model (ns per k step) that picks the tile and decides whether this kernel takes a product: A and B read once
# from memory at BYTES_PER_NS, and by every tile that needs them from L2 at L2_BYTES_PER_NS; the padded tiles'
# multiply-adds at FMAS_PER_NS here, on the DMMA split (the route it replaces) at SPLIT_FMAS_PER_NS on its 64 x 64
# tiles; its 32 x 32 tiles (_dmma.NARROW_SPLIT_TILE) read at NARROW_SPLIT_BYTES_PER_NS and multiply-add at
# NARROW_SPLIT_FMAS_PER_NS.
BYTES_PER_NS, L2_BYTES_PER_NS, FMAS_PER_NS, SPLIT_FMAS_PER_NS = 3600.0, 7000.0, 8000.0, 20000.0
NARROW_SPLIT_BYTES_PER_NS, NARROW_SPLIT_FMAS_PER_NS = 3200.0, 10000.0
MIN_DEPTH = 16384  # (shallower products were not timed)
MIN_RUN = 8 * SLICE  # the least k a run sums: shallower runs add more partial sums than they save


def tile_cost(tile: LongkTile, rows: int, cols: int) -> tuple:
    """The model's ns per k step of `tile` over an R of rows x cols, then what orders the tiles it times alike:
    where the multiply-adds bound it, the fewer; then the fewer tiles (less re-read, fewer partial tiles), 16-byte
    copies, the less padding."""
    tiles_m, tiles_n = -(-rows // tile.mt), -(-cols // tile.nt)
    fmas = tiles_m * tile.mt * tiles_n * tile.nt
    reads = max(8 * (rows + cols) / BYTES_PER_NS, 8 * (tiles_n * rows + tiles_m * cols) / L2_BYTES_PER_NS)
    compute = fmas / FMAS_PER_NS
    return max(reads, compute), fmas if compute >= reads else 0, tiles_m * tiles_n, tile.chunk == 1, fmas


def split_cost(m: int, n: int, k: int, device_id: int) -> float:
    """The model's ns per k step of the DMMA split: its 32 x 32 tiles where _dmma.split_plan takes them, else its
    64 x 64 ones."""
    tile = _dmma.split_plan(m, n, k, device_id)[0] if _dmma.split_planned(m, n, k, device_id) else None
    if tile == _dmma.NARROW_SPLIT_TILE:
        return max(8 * (m + n) / NARROW_SPLIT_BYTES_PER_NS,
                   -(-m // tile.bm) * tile.bm * -(-n // tile.bn) * tile.bn / NARROW_SPLIT_FMAS_PER_NS)
    return max(8 * (m + n) / BYTES_PER_NS, -(-m // 64) * 64 * -(-n // 64) * 64 / SPLIT_FMAS_PER_NS)


def takes(m: int, n: int, k: int, device_id: int) -> bool:
    """Whether matmul's route puts an m x k x n FP64 product here: sm_80 and later, k at least MIN_DEPTH, C neither
    one row nor one column (the matvec kernels read the matrix once) nor past the grid's tiles of 16 rows, and the
    model's best tile ahead of the split."""
    if k < MIN_DEPTH or min(m, n) < 2 or max(m, n) > 16 * MAX_GRID_YZ or _tune.compute_capability(device_id) < 80:
        return False
    options = [t for t in TILES if fits(t, device_id)]
    return bool(options) and (min(tile_cost(t, *o)[0] for t in options for o in ((m, n), (n, m)))
                              < split_cost(m, n, k, device_id))


def plan(m: int, n: int, k: int, device_id: int, tile: LongkTile | None = None, swap: bool | None = None,
         runs: int | None = None) -> LongkPlan:
    """The cheapest (tile, orientation) by tile_cost (or those given), k cut into runs so that the blocks fill one
    round of the SMs (runs at least MIN_RUN deep) or `runs`."""
    options = [(t, s) for t in ((tile,) if tile else TILES) for s in ((swap,) if swap is not None else (False, True))
               if fits(t, device_id)]
    tile, swap = min(options, key=lambda o: tile_cost(o[0], *((n, m) if o[1] else (m, n))))
    rows, cols = (n, m) if swap else (m, n)
    tiles = -(-rows // tile.mt) * -(-cols // tile.nt)
    if runs is None:
        runs = max(1, min(resident(tile, device_id) // tiles, -(-k // MIN_RUN)))
    run = -(-(-(-k // runs)) // SLICE) * SLICE
    return LongkPlan(tile, swap, -(-k // run), run)


def fits(tile: LongkTile, device_id: int) -> bool:
    return _tune.compute_capability(device_id) >= 80 and tile.largest_shared_bytes <= shared_per_block(device_id)


@functools.lru_cache(maxsize=None)
def resident(tile: LongkTile, device_id: int) -> int:
    """Blocks of `tile` the GPU holds at once (its largest layout's shared memory) on device_id, the current one."""
    fn = kernel(FAMILY, tile.expression(True, False), tile.expressions())
    return sm_count(device_id) * resident_blocks(fn, THREADS, tile.largest_shared_bytes)


def launcher(A, B, out, plan: LongkPlan):
    """f(A, B, out): out = A @ B (float64, 2-D, C-order out) as `plan` says, its launches built once for operands of
    these shapes and strides, read in place (an operand without a unit stride is copied first, on every call)."""
    from ._matmul_routes import partials_adder
    from .matmul import _layout

    (a, a_kc, lda), (b, b_kc, ldb) = _layout(A, 0), _layout(B, 1)
    if a is not A or b is not B:
        def copying_first(A, B, out):
            a, b = _layout(A, 0)[0], _layout(B, 1)[0]
            launcher(a, b, out, plan)(a, b, out)
        return copying_first
    m, k = A.shape
    n = B.shape[1]
    tile, swap, runs = plan.tile, plan.swap, plan.runs
    # R = P @ Q: P = A and Q = B, or P = B^T (its k index contiguous where B's is) and Q = A^T
    (p, p_kc, ldp), (q, q_kc, ldq) = ((b, b_kc, ldb), (a, a_kc, lda)) if swap else ((a, a_kc, lda), (b, b_kc, ldb))
    rows, cols = (n, m) if swap else (m, n)
    r_row, r_col = (1, n) if swap else (n, 1)
    fn = kernel(FAMILY, tile.expression(p_kc, q_kc), tile.expressions())
    grid = (-(-cols // tile.nt), -(-rows // tile.mt), runs)
    assert max(grid[1:]) <= MAX_GRID_YZ, (rows, runs, tile)
    shared = tile.shared_bytes(p_kc, q_kc)
    size = m * n
    target = workspace(runs * size * 8)[0] if runs > 1 else out.data.ptr
    sums = rebased([(fn, grid, (THREADS,), (p.data.ptr, q.data.ptr, target, rows, cols, k, ldp, ldq, plan.run, size,
                                            r_row, r_col), shared)], p.data.ptr, q.data.ptr, target)
    first = (lambda A, B: (B.data.ptr, A.data.ptr)) if swap else (lambda A, B: (A.data.ptr, B.data.ptr))
    if runs == 1:
        return lambda A, B, out: sums(*first(A, B), out.data.ptr)
    add = partials_adder(out, runs)

    def run_launches(A, B, out):
        partials = workspace(runs * size * 8)[0]
        sums(*first(A, B), partials)
        add(out.data.ptr, partials)
    return run_launches
