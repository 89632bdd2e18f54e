// Matrix transpose, permutations that keep the last axis: included by transpose.cu; planned in
// cudakit/_transpose_lines.py.
#pragma once
#include "common.cuh"

// ---- Permutations that keep the last axis: whole lines move, each to its place in the output.

// Lines of whole V-sized pieces on both sides: a block moves a tile of lines, tile.x consecutive lines of the output
// (along its fastest axis of lines) by tile.y consecutive lines of the input (along the input's fastest), so both its
// reads and its writes are runs of whole lines, which DRAM serves far better than lines scattered one by one. Blocks
// go tile by tile (counts.x tiles along the input's axis, counts.y in all) through each index of the other axes: the
// innermost of them in the arguments (inner: its dimension, then its input and output strides), the rest in meta
// (their dimensions in output order, then their input strides, then their output strides; all in lines). Each thread
// loads LINE_TILE_IN_FLIGHT pieces before it stores any.
constexpr int LINE_TILE_THREADS = 256;
constexpr int LINE_TILE_IN_FLIGHT = 4;
// A register cap: enough tiles in flight per SM to cover DRAM's latency, at most what the SM holds.
constexpr int LINE_TILE_MIN_BLOCKS = SM_THREADS / LINE_TILE_THREADS < 5 ? SM_THREADS / LINE_TILE_THREADS : 5;

template <typename V>
__global__ void __launch_bounds__(LINE_TILE_THREADS, LINE_TILE_MIN_BLOCKS) permute_line_tiles(
        V* __restrict__ out, const V* __restrict__ in, int pieces, index_t lines_out, index_t in_stride,
        index_t lines_in, index_t out_stride, int2 tile, uint2 counts, unsigned inner, index_t inner_in,
        index_t inner_out, const index_t* __restrict__ meta, int ndim) {
    const unsigned outer = blockIdx.x / counts.y, t = blockIdx.x - outer * counts.y;
    unsigned rest = outer / inner;
    index_t src = (index_t)(outer - rest * inner) * inner_in, dst = (index_t)(outer - rest * inner) * inner_out;
    for (int d = ndim - 1; d >= 0; --d) {
        const unsigned dim = (unsigned)meta[d], q = rest / dim;
        src += (index_t)(rest - q * dim) * meta[ndim + d];
        dst += (index_t)(rest - q * dim) * meta[2 * ndim + d];
        rest = q;
    }
    const index_t o0 = (index_t)(t / counts.x) * tile.x, i0 = (index_t)(t % counts.x) * tile.y;
    const int outs = (int)min((index_t)tile.x, lines_out - o0), ins = (int)min((index_t)tile.y, lines_in - i0);
    const V* from = in + (src + o0 * in_stride + i0) * pieces;
    V* to = out + (dst + i0 * out_stride + o0) * pieces;
    const index_t from_line = in_stride * pieces, to_line = out_stride * pieces;
    const int items = tile.x * tile.y * pieces;
    for (int first = threadIdx.x; first < items; first += LINE_TILE_THREADS * LINE_TILE_IN_FLIGHT) {
        V v[LINE_TILE_IN_FLIGHT];
#pragma unroll
        for (int u = 0; u < LINE_TILE_IN_FLIGHT; ++u) {
            const int item = first + u * LINE_TILE_THREADS, line = item / pieces, p = item - line * pieces;
            const int o = line % tile.x, i = line / tile.x;
            if (item < items && o < outs && i < ins) v[u] = from[o * from_line + i * pieces + p];
        }
#pragma unroll
        for (int u = 0; u < LINE_TILE_IN_FLIGHT; ++u) {
            const int item = first + u * LINE_TILE_THREADS, line = item / pieces, p = item - line * pieces;
            const int o = line % tile.x, i = line / tile.x;
            if (item < items && o < outs && i < ins) to[i * to_line + o * pieces + p] = v[u];
        }
    }
}

// The other lines (not whole 16-byte pieces on both sides, long enough to be runs of their own, or too few a tile to
// keep a block busy; also tile grids past 2^31 blocks): a thread per output piece of V (the widest size that divides
// the line and both addresses), so no lane idles on a line's tail; each thread reads its PIECES_IN_FLIGHT pieces
// before it writes any. A line's place is found through the output's dimensions and the input's strides, both
// counted in lines (meta: the ndim dimensions, then the ndim strides; in shared memory once a block), in 32-bit
// arithmetic while the piece count allows (64-bit division is many times slower).
template <typename I>
__device__ __forceinline__ index_t source_line(I line, const index_t* __restrict__ meta, int ndim) {
    index_t src = 0;
    for (int d = ndim - 1; d >= 0; --d) {
        const I dim = (I)meta[d];
        const I q = line / dim;
        src += (index_t)(line - q * dim) * meta[ndim + d];
        line = q;
    }
    return src;
}

constexpr int PIECES_IN_FLIGHT = 4;
constexpr int PIECES_THREADS = 256;
constexpr int MAX_LINE_DIMS = 8;

template <typename V, typename I>
__global__ void __launch_bounds__(PIECES_THREADS) permute_pieces(V* __restrict__ out, const V* __restrict__ in,
                                                                 I pieces, I line_pieces,
                                                                 const index_t* __restrict__ meta, int ndim) {
    __shared__ index_t dims[2 * MAX_LINE_DIMS];
    if (threadIdx.x < 2 * ndim) dims[threadIdx.x] = meta[threadIdx.x];
    __syncthreads();
    const I first = (I)blockIdx.x * (PIECES_THREADS * PIECES_IN_FLIGHT) + threadIdx.x;
    V v[PIECES_IN_FLIGHT];
#pragma unroll
    for (int u = 0; u < PIECES_IN_FLIGHT; ++u) {
        const I q = first + u * PIECES_THREADS;
        if (q < pieces) {
            const I line = q / line_pieces;
            v[u] = in[source_line<I>(line, dims, ndim) * line_pieces + (q - line * line_pieces)];
        }
    }
#pragma unroll
    for (int u = 0; u < PIECES_IN_FLIGHT; ++u) {
        const I q = first + u * PIECES_THREADS;
        if (q < pieces) out[q] = v[u];
    }
}

// ---- A batch of (rows, cols) matrices of short lines, each matrix to (cols, rows) with its lines whole (NHWC ->
// NWHC with few channels): a block moves a T x T tile of lines through shared memory, reading T input rows and
// writing T output rows, each a contiguous run of T lines, so every sector is read and written once. Lines are
// `line` units of U (the widest size that divides the line and both addresses). The tile keeps T + 1 lines a row:
// a warp reading an output run walks the tile's rows, and the extra line spreads those reads over the banks.
// A tile's unit counts stay below 2^16, so its index divisions are float multiplications (exact at that size).
constexpr int TILES_THREADS = 256;
constexpr int TILES_IN_FLIGHT = 4;  // units each thread reads before it stores them

__device__ __forceinline__ int tile_quotient(int i, float inverse) {  // i / d, inverse = 1 / d
    return __float2int_rz(((float)i + 0.5f) * inverse);
}

template <typename U, int T>
__global__ void __launch_bounds__(TILES_THREADS) permute_tiles(U* __restrict__ out, const U* __restrict__ in,
                                                               index_t rows, index_t cols, int line,
                                                               index_t tiles_r, index_t tiles_c) {
    extern __shared__ __align__(16) unsigned char tiles_shared[];
    U* tile = reinterpret_cast<U*>(tiles_shared);
    const index_t tiles = tiles_r * tiles_c;
    const index_t b = blockIdx.x / tiles, t = blockIdx.x - b * tiles;
    const index_t r0 = t / tiles_c * T, c0 = (t - t / tiles_c * tiles_c) * T;
    const int here_r = (int)min((index_t)T, rows - r0), here_c = (int)min((index_t)T, cols - c0);
    const int pitch = (T + 1) * line;  // units a tile row
    const index_t matrix = rows * cols * line;

    // Input rows r0.. of the tile: here_r runs of here_c lines.
    const U* src = in + b * matrix + (r0 * cols + c0) * line;
    const int run_in = here_c * line;
    const float inverse_in = 1.0f / (float)run_in;
    for (int i0 = threadIdx.x; i0 < here_r * run_in; i0 += TILES_IN_FLIGHT * TILES_THREADS) {
        U v[TILES_IN_FLIGHT];
        int at[TILES_IN_FLIGHT];
#pragma unroll
        for (int u = 0; u < TILES_IN_FLIGHT; ++u) {
            const int i = i0 + u * TILES_THREADS;
            if (i < here_r * run_in) {
                const int r = tile_quotient(i, inverse_in), o = i - r * run_in;
                v[u] = src[(index_t)r * cols * line + o];
                at[u] = r * pitch + o;
            }
        }
#pragma unroll
        for (int u = 0; u < TILES_IN_FLIGHT; ++u)
            if (i0 + u * TILES_THREADS < here_r * run_in) tile[at[u]] = v[u];
    }
    __syncthreads();

    // Output rows c0.. (input columns): here_c runs of here_r lines, line r of run c from tile row r, place c.
    U* dst = out + b * matrix + (c0 * rows + r0) * line;
    const int run_out = here_r * line;
    const float inverse_out = 1.0f / (float)run_out, inverse_line = 1.0f / (float)line;
    for (int j = threadIdx.x; j < here_c * run_out; j += TILES_THREADS) {
        const int c = tile_quotient(j, inverse_out), o = j - c * run_out;
        const int r = tile_quotient(o, inverse_line);
        dst[(index_t)c * rows * line + o] = tile[r * pitch + c * line + (o - r * line)];
    }
}
