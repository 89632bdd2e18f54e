// Matrix transpose, thin matrices (a side shorter than a warp): included by transpose.cu; planned in transpose.py.
#pragma once
#include "common.cuh"

// Thin matrices: one side shorter than a warp. A 32 x 32 tile would leave most of each warp idle on the short
// side, so a block instead stages `run` long-side positions by all c short-side elements in shared memory: in one
// array they are one contiguous stretch, in the other c contiguous runs, so reads and writes both stay coalesced.
// Each of `batch` matrices (rows * c elements apart in both arrays) takes `blocks_per_matrix` blocks.
// WIDE_IN: the input is (rows, c) and the output (c, rows); else the input is (c, rows) and the output (rows, c).
constexpr int THIN_THREADS = 256;
constexpr int THIN_UNROLL = 4;  // independent loads in flight per thread

// P elements of T in one 32-bit word: P > 1 (bytes, 16-bit elements) moves whole words on both global sides, so a
// thread's load or store carries 4 bytes whatever the element size (the host takes it where rows % P == 0 and both
// arrays start on 4 bytes); P == 1 moves one element per access.
template <typename T, int P> struct ThinUnit { typedef unsigned int type; };  // what one thread moves per access
template <typename T> struct ThinUnit<T, 1> { typedef T type; };

template <typename T, int P>
__device__ __forceinline__ T word_part(unsigned int word, int i) {
    return P == 1 ? (T)word : (T)(word >> (8 * sizeof(T) * i));
}

template <typename T, int P>
__device__ __forceinline__ unsigned int to_word(const T* parts) {
    unsigned int word = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) word |= (unsigned int)parts[i] << (8 * sizeof(T) * i);
    return word;
}

// The packed stretch (here rows of c elements, count in all) to or from the tile, a unit of P elements per thread.
// Element e is (e / c, e % c); a step of THIN_THREADS units moves (row, col) by a fixed amount, so no division
// inside the loop.
template <typename T, int P, bool LOAD>
__device__ __forceinline__ void thin_packed(T* tile, int pitch, T* packed, int count, int c) {
    typedef typename ThinUnit<T, P>::type U;
    const int units = count / P;
    const int step_row = THIN_THREADS * P / c, step_col = THIN_THREADS * P % c;
    int row = threadIdx.x * P / c, col = threadIdx.x * P % c;
    for (int u0 = 0; u0 < units; u0 += THIN_THREADS * THIN_UNROLL) {
        U v[THIN_UNROLL];
        if (LOAD) {
#pragma unroll
            for (int u = 0; u < THIN_UNROLL; ++u) {
                const int w = u0 + u * THIN_THREADS + threadIdx.x;
                if (w < units) v[u] = reinterpret_cast<const U*>(packed)[w];
            }
        }
#pragma unroll
        for (int u = 0; u < THIN_UNROLL; ++u) {
            const int w = u0 + u * THIN_THREADS + threadIdx.x;
            if (w < units) {
                T parts[P];
                int r = row, k = col;
#pragma unroll
                for (int i = 0; i < P; ++i) {
                    if (LOAD) tile[k * pitch + r] = P == 1 ? (T)v[u] : word_part<T, P>((unsigned int)v[u], i);
                    else parts[i] = tile[k * pitch + r];
                    if (++k == c) { k = 0; ++r; }
                }
                if (!LOAD) reinterpret_cast<U*>(packed)[w] = P == 1 ? (U)parts[0] : (U)to_word<T, P>(parts);
            }
            row += step_row;
            col += step_col;
            if (col >= c) { col -= c; ++row; }
        }
    }
}

// The c long-side runs of `here` elements (`rows` apart in global memory) to or from the tile, a unit of P elements
// per thread: all c * here / P units in one stream of THIN_UNROLL independent accesses per thread (a run alone is too
// short to keep enough loads in flight). A unit is one 32-bit word on both sides (the pitch is whole words).
template <typename T, int P, bool LOAD>
__device__ __forceinline__ void thin_runs(T* tile, int pitch, T* runs, index_t rows, int here, int c) {
    typedef typename ThinUnit<T, P>::type U;
    const int units = here / P, total = c * units, pitch_units = pitch / P;
    const int step_j = THIN_THREADS / units, step_w = THIN_THREADS % units;
    int j = threadIdx.x / units, w = threadIdx.x % units;
    for (int e0 = 0; e0 < total; e0 += THIN_THREADS * THIN_UNROLL) {
        U v[THIN_UNROLL];
        int at[THIN_UNROLL];  // the unit's place in the tile
#pragma unroll
        for (int u = 0; u < THIN_UNROLL; ++u) {
            const bool in = e0 + u * THIN_THREADS + (int)threadIdx.x < total;
            U* line = reinterpret_cast<U*>(runs + j * rows);
            at[u] = j * pitch_units + w;
            if (LOAD && in) v[u] = line[w];
            if (!LOAD && in) line[w] = reinterpret_cast<const U*>(tile)[at[u]];
            j += step_j;
            w += step_w;
            if (w >= units) { w -= units; ++j; }
        }
        if (LOAD) {
#pragma unroll
            for (int u = 0; u < THIN_UNROLL; ++u)
                if (e0 + u * THIN_THREADS + (int)threadIdx.x < total) reinterpret_cast<U*>(tile)[at[u]] = v[u];
        }
    }
}

// Packed order in the tile: the c runs' words (a word of P elements per access, as thin_runs) to or from a tile that
// holds the packed side as it is in global memory, so that side moves as one contiguous stretch. Element i of run
// j's word w is at (w * P + i) * c + j: a thread's words are c words apart, bank-conflict free for odd c.
// SWIZZLED: word x of the packed stretch sits at x ^ (x / 32 % 32), so that words c apart spread over the banks
// where c has a large power-of-two factor; the stretch then moves a word per access (a row of 32 words stays a row).
template <bool SWIZZLED>
__device__ __forceinline__ int packed_word(int x) { return SWIZZLED ? x ^ ((x >> 5) & 31) : x; }

template <typename T, int P, bool LOAD, bool SWIZZLED>
__device__ __forceinline__ void thin_runs_packed(T* packed, T* runs, index_t rows, int here, int c) {
    const int units = here / P, total = c * units;
    const int step_j = THIN_THREADS / units, step_w = THIN_THREADS % units;
    int j = threadIdx.x / units, w = threadIdx.x % units;
    for (int e0 = 0; e0 < total; e0 += THIN_THREADS * THIN_UNROLL) {
        unsigned int v[THIN_UNROLL];
        int at[THIN_UNROLL];  // the word's first element in the packed tile
        unsigned int* line[THIN_UNROLL];
#pragma unroll
        for (int u = 0; u < THIN_UNROLL; ++u) {
            at[u] = w * P * c + j;
            line[u] = reinterpret_cast<unsigned int*>(runs + j * rows) + w;
            if (LOAD && e0 + u * THIN_THREADS + (int)threadIdx.x < total) v[u] = *line[u];
            j += step_j;
            w += step_w;
            if (w >= units) { w -= units; ++j; }
        }
#pragma unroll
        for (int u = 0; u < THIN_UNROLL; ++u) {
            if (e0 + u * THIN_THREADS + (int)threadIdx.x < total) {
                T parts[P];
#pragma unroll
                for (int i = 0; i < P; ++i) {
                    const int a = at[u] + i * c;
                    T* element = packed + (SWIZZLED ? packed_word<true>(a / P) * P + a % P : a);
                    if (LOAD) *element = word_part<T, P>(v[u], i);
                    else parts[i] = *element;
                }
                if (!LOAD) *line[u] = to_word<T, P>(parts);
            }
        }
    }
}

// `bytes` (a whole number of words) between the shared tile and global memory, in order: 16 bytes per access where
// the global side starts on 16 bytes (the last few, and any other start, a word per access), THIN_UNROLL accesses
// in flight per thread.
template <bool LOAD, bool SWIZZLED, typename V>
__device__ __forceinline__ void thin_copy_pieces(V* global, V* tile, int first, int count) {
    for (int v0 = first + threadIdx.x; v0 < count; v0 += THIN_THREADS * THIN_UNROLL) {
        V piece[THIN_UNROLL];
#pragma unroll
        for (int u = 0; u < THIN_UNROLL; ++u) {
            const int v = v0 + u * THIN_THREADS;
            if (v < count) piece[u] = LOAD ? global[v] : tile[packed_word<SWIZZLED>(v)];
        }
#pragma unroll
        for (int u = 0; u < THIN_UNROLL; ++u) {
            const int v = v0 + u * THIN_THREADS;
            if (v < count) {
                if (LOAD) tile[packed_word<SWIZZLED>(v)] = piece[u];
                else global[v] = piece[u];
            }
        }
    }
}

template <bool LOAD, bool SWIZZLED>
__device__ __forceinline__ void thin_copy(unsigned char* global, unsigned char* tile, int bytes) {
    int words_done = 0;
    if (!SWIZZLED && (reinterpret_cast<size_t>(global) & 15) == 0) {
        thin_copy_pieces<LOAD, false>(reinterpret_cast<uint4*>(global), reinterpret_cast<uint4*>(tile), 0, bytes / 16);
        words_done = bytes / 16 * 4;
    }
    thin_copy_pieces<LOAD, SWIZZLED>(reinterpret_cast<unsigned int*>(global), reinterpret_cast<unsigned int*>(tile),
                                     words_done, bytes / 4);
}

// TILE (whole words only past THIN_COLUMNS, P > 1): the tile holds the packed side in its own order
// (thin_runs_packed), plain or (for (c, rows) input) swizzled, else c columns of run + P elements (thin_packed).
constexpr int THIN_COLUMNS = 0, THIN_PACKED = 1, THIN_SWIZZLED = 2;

template <typename T, bool WIDE_IN, int P, int TILE>
__global__ void __launch_bounds__(THIN_THREADS) transpose_thin(T* __restrict__ out, const T* __restrict__ in,
                                                               index_t rows, int c, int run, index_t blocks_per_matrix) {
    extern __shared__ __align__(16) unsigned char thin_tile_bytes[];
    T* tile = reinterpret_cast<T*>(thin_tile_bytes);  // c rows of run + P elements: whole units, and the pad
    const int pitch = run + P;                         // spreads a tile column over the banks
    const index_t matrix = blockIdx.x / blocks_per_matrix;
    const index_t r0 = (blockIdx.x - matrix * blocks_per_matrix) * (index_t)run;
    const int here = (int)min((index_t)run, rows - r0);  // long-side positions this block moves
    const index_t base = matrix * rows * c;
    const int packed_bytes = here * c * (int)sizeof(T);
    static_assert(TILE == THIN_COLUMNS || TILE == THIN_PACKED || (TILE == THIN_SWIZZLED && !WIDE_IN),
                  "a staging of the tile (swizzled: (c, rows) input only)");
    constexpr bool SWIZZLED = TILE == THIN_SWIZZLED;
    if (TILE != THIN_COLUMNS && WIDE_IN) {
        thin_copy<true, false>(reinterpret_cast<unsigned char*>(const_cast<T*>(in + base + r0 * c)),
                               thin_tile_bytes, packed_bytes);
        __syncthreads();
        thin_runs_packed<T, P, false, false>(tile, out + base + r0, rows, here, c);
    } else if (TILE != THIN_COLUMNS) {
        thin_runs_packed<T, P, true, SWIZZLED>(tile, const_cast<T*>(in + base + r0), rows, here, c);
        __syncthreads();
        thin_copy<false, SWIZZLED>(reinterpret_cast<unsigned char*>(out + base + r0 * c), thin_tile_bytes,
                                   packed_bytes);
    } else if (WIDE_IN) {
        thin_packed<T, P, true>(tile, pitch, const_cast<T*>(in + base + r0 * c), here * c, c);
        __syncthreads();
        thin_runs<T, P, false>(tile, pitch, out + base + r0, rows, here, c);
    } else {
        thin_runs<T, P, true>(tile, pitch, const_cast<T*>(in + base + r0), rows, here, c);
        __syncthreads();
        thin_packed<T, P, false>(tile, pitch, out + base + r0 * c, here * c, c);
    }
}
