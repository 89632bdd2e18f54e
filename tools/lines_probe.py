"""Times ways to move whole lines (permutations that keep the last axis, as (B, R, C, L) -> (B, C, R, L), axes 0213)
against cudakit.transpose and a device-to-device copy of the same bytes, in turn, in one process.

    PYTHONPATH=. python3 tools/lines_probe.py [--rounds 5]

Beside the library as it is: the library with other settings (SETTINGS), and for axes 0213 two stand-alone tile
kernels: lines_tiled (TS x TS lines a block, U 16-byte pieces loaded per thread before any store; session 46's first
probe) and lines_grid3 (the library's body on a 3-D grid, no division before the first loads; not yet run).
"""
from __future__ import annotations

import argparse
import importlib

import cupy
import numpy as np

import cudakit
from cudakit.bench import timing
from cudakit.testing import random_array
from copy_rounds import check_and_time

LINES = importlib.import_module("cudakit._transpose_lines")

SOURCE = r"""
template <int TS, int U, bool ROWS_FIRST>
__global__ void __launch_bounds__(256) lines_tiled(uint4* __restrict__ out, const uint4* __restrict__ in, int rows,
                                                   int cols, int pieces, int tiles_r, int tiles_c) {
    const int tiles = tiles_r * tiles_c;
    const long long b = blockIdx.x / tiles;
    const int t = (int)(blockIdx.x - b * tiles);
    const int tr = ROWS_FIRST ? t % tiles_r : t / tiles_c, tc = ROWS_FIRST ? t / tiles_r : t % tiles_c;
    const int i0 = tr * TS, j0 = tc * TS;
    const long long mat = (long long)rows * cols * pieces;
    const uint4* src = in + b * mat;
    uint4* dst = out + b * mat;
    const int total = TS * TS * pieces;
    for (int base = threadIdx.x; base < total; base += 256 * U) {
        uint4 v[U];
        long long to[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int item = base + u * 256;
            const int line = item / pieces, p = item - line * pieces;
            const int i = i0 + line % TS, j = j0 + line / TS;
            to[u] = -1;
            if (item < total && i < rows && j < cols) {
                v[u] = src[((long long)i * cols + j) * pieces + p];
                to[u] = ((long long)j * rows + i) * pieces + p;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (to[u] >= 0) dst[to[u]] = v[u];
    }
}

// The library's permute_line_tiles body on a 3-D grid: tiles along the input's axis in x, along the output's in y,
// the batch in z, so that no division precedes a block's first loads (session 46's next step; not yet measured).
__global__ void __launch_bounds__(256, 5) lines_grid3(uint4* __restrict__ out, const uint4* __restrict__ in,
                                                      int pieces, long long lines_out, long long in_stride,
                                                      long long lines_in, long long out_stride, int2 tile,
                                                      long long batch_stride) {
    const long long o0 = (long long)blockIdx.y * tile.x, i0 = (long long)blockIdx.x * tile.y;
    const long long base = blockIdx.z * batch_stride;
    const int outs = (int)min((long long)tile.x, lines_out - o0), ins = (int)min((long long)tile.y, lines_in - i0);
    const uint4* from = in + (base + o0 * in_stride + i0) * pieces;
    uint4* to = out + (base + i0 * out_stride + o0) * pieces;
    const long long from_line = in_stride * pieces, to_line = out_stride * pieces;
    const int items = tile.x * tile.y * pieces;
    for (int first = threadIdx.x; first < items; first += 256 * 4) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int item = first + u * 256, line = item / pieces, p = item - line * pieces;
            const int o = line % tile.x, i = line / tile.x;
            if (item < items && o < outs && i < ins) v[u] = from[o * from_line + i * pieces + p];
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int item = first + u * 256, line = item / pieces, p = item - line * pieces;
            const int o = line % tile.x, i = line / tile.x;
            if (item < items && o < outs && i < ins) to[i * to_line + o * pieces + p] = v[u];
        }
    }
}
"""
GRID3_TILES = (None, (8, 8))  # lines_grid3's tiles: the library's (line_tile), then 8 x 8 lines

CANDIDATES = [(8, 4, False), (16, 4, False)]
B0213 = (0, 2, 1, 3)
SHAPES = [((32, 128, 128, 64), np.float32, B0213), ((32, 128, 128, 64), np.uint8, B0213),
          ((32, 128, 128, 32), np.float32, B0213), ((8, 256, 256, 128), np.float32, B0213),
          ((32, 128, 128, 64), np.float64, B0213), ((8, 256, 256, 128), np.float64, B0213),
          ((16, 96, 200, 64), np.float32, B0213), ((64, 64, 64, 256), np.float32, B0213),
          ((16, 32, 32, 64, 32), np.float32, (3, 1, 0, 2, 4)), ((4000, 3, 2048), np.float32, (1, 0, 2)),
          ((8, 2048, 3, 64), np.uint8, B0213)]
# the library's settings tried beside its own: LINE_TILE_BYTES, and the lines forced onto permute_pieces
SETTINGS = {"16 KB tiles": {"LINE_TILE_BYTES": 16 << 10}, "64 KB tiles": {"LINE_TILE_BYTES": 64 << 10},
            "pieces": {"moves_tiles": lambda *args: False}}


def expression(ts, u, rows_first):
    return f"lines_tiled<{ts}, {u}, {'true' if rows_first else 'false'}>"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",),
                            name_expressions=[expression(*c) for c in CANDIDATES] + ["lines_grid3"])
    for shape, dtype, axes in SHAPES:
        probe_shape(module, shape, dtype, axes, args.rounds)
        cupy.get_default_memory_pool().free_all_blocks()


def with_settings(call, settings):
    """call(k) run with the lines module's names set to `settings`, and launch plans of its own."""
    settings = dict(settings, _line_plans={})

    def run(k):
        saved = {name: getattr(LINES, name) for name in settings}
        try:
            for name, value in settings.items():
                setattr(LINES, name, value)
            call(k)
        finally:
            for name, value in saved.items():
                setattr(LINES, name, value)
    return run


def probe_shape(module, shape, dtype, axes, rounds):
    budget = timing.Budget(row_s=0.3, min_runs=20, max_runs=200)
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    count = timing.sets_past_l2(2 * nbytes, cupy.cuda.runtime.getDevice())
    out_shape = tuple(shape[a] for a in axes)
    sets = [(random_array(shape, dtype), cupy.empty(out_shape, dtype)) for _ in range(count)]
    want = cupy.ascontiguousarray(sets[0][0].transpose(axes))
    calls = {"memcpy": lambda k: sets[k % count][1].data.copy_from_device_async(sets[k % count][0].data, nbytes),
             "cudakit": lambda k: cudakit.transpose(sets[k % count][0], axes, out=sets[k % count][1])}
    for name, settings in SETTINGS.items():
        calls[f"cudakit, {name}"] = with_settings(calls["cudakit"], settings)
    tiled = axes == B0213 and shape[-1] * np.dtype(dtype).itemsize % 16 == 0
    if tiled:
        batch, rows, cols, line = shape
        pieces = line * np.dtype(dtype).itemsize // 16
    for c in (CANDIDATES if tiled else ()):
        ts = c[0]
        fn = module.get_function(expression(*c))
        tiles_r, tiles_c = -(-rows // ts), -(-cols // ts)
        grid = batch * tiles_r * tiles_c

        def run(k, fn=fn, tiles_r=tiles_r, tiles_c=tiles_c, grid=grid):
            a, out = sets[k % count]
            fn((grid,), (256,), (out, a, np.int32(rows), np.int32(cols), np.int32(pieces), np.int32(tiles_r),
                                 np.int32(tiles_c)))
        calls[f"tiled TS={ts} U={c[1]}{' rows first' if c[2] else ''}"] = run
    for tile in (GRID3_TILES if tiled else ()):
        tile_out, tile_in = tile or LINES.line_tile(pieces * 16, rows, cols)
        fn = module.get_function("lines_grid3")
        grid = (-(-cols // tile_in), -(-rows // tile_out), batch)

        def run(k, fn=fn, grid=grid, tile_out=tile_out, tile_in=tile_in):
            a, out = sets[k % count]
            fn(grid, (256,), (out, a, np.int32(pieces), np.int64(rows), np.int64(cols), np.int64(cols),
                              np.int64(rows), np.int64(LINES.pair(tile_out, tile_in)), np.int64(rows * cols)))
        calls[f"grid3 {tile_out}x{tile_in}"] = run
    header = (f"{np.dtype(dtype).name} {shape} axes {axes}, {nbytes / 1e6:.0f} MB, lines of "
              f"{shape[-1] * np.dtype(dtype).itemsize} B")
    check_and_time(calls, sets[0][1], want, budget, rounds, header)

if __name__ == "__main__":
    main()
