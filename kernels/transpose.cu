// Matrix transpose (seed 003): the copy yardsticks, the seed's transposes, then 16-byte-vector tiles at copy speed.
#include "common.cuh"
#include "transpose_thin.cuh"   // thin matrices: a side shorter than a warp
#include "transpose_lines.cuh"  // permutations that keep the last axis: whole lines move

// Every kernel moves raw bits: T is the unsigned integer of the element's size (1, 2, 4 or 8 bytes), so one
// instantiation serves every dtype of that size (int8, bool, float16, float32, complex64, float64, ...).

constexpr int TILE_DIM = 32;   // seed: one 32 x 32 tile per block
constexpr int BLOCK_ROWS = 8;  // seed: 32 x 8 threads, TILE_DIM / BLOCK_ROWS elements per thread

// Fixes shared by the eight seed kernels: the element type is a template; indices are index_t (64-bit); every load
// and store is bounds-checked (the seed assumes both sides are multiples of TILE_DIM); tile_y0 offsets blockIdx.y
// because the host launches the grid in slices of at most 65535 tile rows (the limit of gridDim.y).
// The seed's nreps loop is dropped: a figure from looping inside a kernel is not a memory bandwidth.

// The yardstick: a plain copy with the transposes' tiling and launch shape (not a transpose).
template <typename T>
__global__ void copy(T* __restrict__ odata, const T* __restrict__ idata, index_t width, index_t height, index_t tile_y0) {
    const index_t xIndex = (index_t)blockIdx.x * TILE_DIM + threadIdx.x;
    const index_t yIndex = (tile_y0 + blockIdx.y) * TILE_DIM + threadIdx.y;
    const index_t index = xIndex + width * yIndex;
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (xIndex < width && yIndex + i < height) odata[index + i * width] = idata[index + i * width];  // fix: bounds
}

// The copy staged through a shared tile and a barrier: what the tile and __syncthreads cost (not a transpose).
template <typename T>
__global__ void copySharedMem(T* __restrict__ odata, const T* __restrict__ idata, index_t width, index_t height,
                              index_t tile_y0) {
    __shared__ T tile[TILE_DIM][TILE_DIM];
    const index_t xIndex = (index_t)blockIdx.x * TILE_DIM + threadIdx.x;
    const index_t yIndex = (tile_y0 + blockIdx.y) * TILE_DIM + threadIdx.y;
    const index_t index = xIndex + width * yIndex;
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (xIndex < width && yIndex + i < height) tile[threadIdx.y + i][threadIdx.x] = idata[index + i * width];
    __syncthreads();  // not needed for a copy (no thread reads another's element): here only to time the barrier
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (xIndex < width && yIndex + i < height) odata[index + i * width] = tile[threadIdx.y + i][threadIdx.x];
}

// Reads coalesced, writes one element per output row per thread: every warp store touches 32 different rows.
template <typename T>
__global__ void transposeNaive(T* __restrict__ odata, const T* __restrict__ idata, index_t width, index_t height,
                               index_t tile_y0) {
    const index_t xIndex = (index_t)blockIdx.x * TILE_DIM + threadIdx.x;
    const index_t yIndex = (tile_y0 + blockIdx.y) * TILE_DIM + threadIdx.y;
    const index_t index_in = xIndex + width * yIndex;
    const index_t index_out = yIndex + height * xIndex;
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (xIndex < width && yIndex + i < height) odata[index_out + i] = idata[index_in + i * width];  // fix: bounds
}

// Stages a tile in shared memory so both the global reads and the global writes are coalesced rows.
template <typename T>
__global__ void transposeCoalesced(T* __restrict__ odata, const T* __restrict__ idata, index_t width, index_t height,
                                   index_t tile_y0) {
    __shared__ T tile[TILE_DIM][TILE_DIM];
    index_t xIndex = (index_t)blockIdx.x * TILE_DIM + threadIdx.x;
    index_t yIndex = (tile_y0 + blockIdx.y) * TILE_DIM + threadIdx.y;
    const index_t index_in = xIndex + yIndex * width;
    const bool in_x = xIndex < width;
    const index_t in_y = yIndex;
    xIndex = (tile_y0 + blockIdx.y) * TILE_DIM + threadIdx.x;
    yIndex = (index_t)blockIdx.x * TILE_DIM + threadIdx.y;
    const index_t index_out = xIndex + yIndex * height;
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (in_x && in_y + i < height) tile[threadIdx.y + i][threadIdx.x] = idata[index_in + i * width];  // fix: bounds
    __syncthreads();  // the column read below takes elements other threads loaded
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (xIndex < height && yIndex + i < width) odata[index_out + i * height] = tile[threadIdx.x][threadIdx.y + i];
}

// transposeCoalesced with one padding column: a tile column now spans all 32 banks instead of one.
template <typename T>
__global__ void transposeNoBankConflicts(T* __restrict__ odata, const T* __restrict__ idata, index_t width,
                                         index_t height, index_t tile_y0) {
    __shared__ T tile[TILE_DIM][TILE_DIM + 1];
    index_t xIndex = (index_t)blockIdx.x * TILE_DIM + threadIdx.x;
    index_t yIndex = (tile_y0 + blockIdx.y) * TILE_DIM + threadIdx.y;
    const index_t index_in = xIndex + yIndex * width;
    const bool in_x = xIndex < width;
    const index_t in_y = yIndex;
    xIndex = (tile_y0 + blockIdx.y) * TILE_DIM + threadIdx.x;
    yIndex = (index_t)blockIdx.x * TILE_DIM + threadIdx.y;
    const index_t index_out = xIndex + yIndex * height;
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (in_x && in_y + i < height) tile[threadIdx.y + i][threadIdx.x] = idata[index_in + i * width];  // fix: bounds
    __syncthreads();
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (xIndex < height && yIndex + i < width) odata[index_out + i * height] = tile[threadIdx.x][threadIdx.y + i];
}

// Writes whole tiles to their transposed place without transposing inside them: isolates the cost of where the
// tiles go (not a transpose; the output is laid out as a width x height matrix).
template <typename T>
__global__ void transposeCoarseGrained(T* __restrict__ odata, const T* __restrict__ idata, index_t width,
                                       index_t height, index_t tile_y0) {
    __shared__ T block[TILE_DIM][TILE_DIM + 1];
    index_t xIndex = (index_t)blockIdx.x * TILE_DIM + threadIdx.x;
    index_t yIndex = (tile_y0 + blockIdx.y) * TILE_DIM + threadIdx.y;
    const index_t index_in = xIndex + yIndex * width;
    const bool in_x = xIndex < width;
    const index_t in_y = yIndex;
    xIndex = (tile_y0 + blockIdx.y) * TILE_DIM + threadIdx.x;
    yIndex = (index_t)blockIdx.x * TILE_DIM + threadIdx.y;
    const index_t index_out = xIndex + yIndex * height;
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (in_x && in_y + i < height) block[threadIdx.y + i][threadIdx.x] = idata[index_in + i * width];
    __syncthreads();
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)  // fix: bounds (on rectangles some of these elements were never loaded)
        if (xIndex < height && yIndex + i < width) odata[index_out + i * height] = block[threadIdx.y + i][threadIdx.x];
}

// Transposes inside each tile but writes the tile where a copy would: isolates the cost of the in-tile transpose
// (not a transpose; on rectangles the seed's index formula is kept and merely clipped to the array).
template <typename T>
__global__ void transposeFineGrained(T* __restrict__ odata, const T* __restrict__ idata, index_t width, index_t height,
                                     index_t tile_y0) {
    __shared__ T block[TILE_DIM][TILE_DIM + 1];
    const index_t xIndex = (index_t)blockIdx.x * TILE_DIM + threadIdx.x;
    const index_t yIndex = (tile_y0 + blockIdx.y) * TILE_DIM + threadIdx.y;
    const index_t index = xIndex + yIndex * width;
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (xIndex < width && yIndex + i < height) block[threadIdx.y + i][threadIdx.x] = idata[index + i * width];
    __syncthreads();
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)  // fix: bounds, the seed's index clipped to the array
        if (xIndex < width && index + i * height < width * height) odata[index + i * height] = block[threadIdx.x][threadIdx.y + i];
}

// transposeNoBankConflicts with blocks taken in diagonal order, so that concurrent blocks spread their reads and
// writes over all memory partitions (the seed's cure for partition camping; modern GPUs hash addresses instead).
template <typename T>
__global__ void transposeDiagonal(T* __restrict__ odata, const T* __restrict__ idata, index_t width, index_t height,
                                  index_t tile_y0) {
    __shared__ T tile[TILE_DIM][TILE_DIM + 1];
    index_t blockIdx_x, blockIdx_y;
    if (width == height) {  // square: the grid is square too, and a single launch (tile_y0 == 0)
        blockIdx_y = blockIdx.x;
        blockIdx_x = (blockIdx.x + blockIdx.y) % gridDim.x;
    } else {  // a permutation of this launch's blocks for any grid shape
        const index_t bid = blockIdx.x + (index_t)gridDim.x * blockIdx.y;
        blockIdx_y = bid % gridDim.y;
        blockIdx_x = ((bid / gridDim.y) + blockIdx_y) % gridDim.x;
    }
    blockIdx_y += tile_y0;
    index_t xIndex = blockIdx_x * TILE_DIM + threadIdx.x;
    index_t yIndex = blockIdx_y * TILE_DIM + threadIdx.y;
    const index_t index_in = xIndex + yIndex * width;
    const bool in_x = xIndex < width;
    const index_t in_y = yIndex;
    xIndex = blockIdx_y * TILE_DIM + threadIdx.x;
    yIndex = blockIdx_x * TILE_DIM + threadIdx.y;
    const index_t index_out = xIndex + yIndex * height;
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (in_x && in_y + i < height) tile[threadIdx.y + i][threadIdx.x] = idata[index_in + i * width];  // fix: bounds
    __syncthreads();
    for (int i = 0; i < TILE_DIM; i += BLOCK_ROWS)
        if (xIndex < height && yIndex + i < width) odata[index_out + i * height] = tile[threadIdx.x][threadIdx.y + i];
}

// ---------------------------------------------------------------------------------------------------------------
// 16-byte vector tiles. A "unit" is 16 aligned bytes of global memory, V = 16 / sizeof(T) elements. Every global
// load and store below moves one whole unit, except units that stick out of the array or of a tile's rows, which
// go element by element. Rows that do not start on a unit boundary (odd shapes, offset views) are realigned in
// registers on the way in and by a row offset on the way out, so their accesses stay 16-byte aligned too.

// Element i of a unit held as four 32-bit words (constant i after unrolling: the words stay in registers).
template <typename T>
__device__ __forceinline__ void put_element(unsigned int (&w)[4], int i, T v) {
    if constexpr (sizeof(T) == 8) {
        w[2 * i] = (unsigned int)v;
        w[2 * i + 1] = (unsigned int)(v >> 32);
    } else {
        w[i * (int)sizeof(T) / 4] |= (unsigned int)v << (8 * (i * (int)sizeof(T) % 4));
    }
}

template <typename T>
__device__ __forceinline__ T get_element(const unsigned int (&w)[4], int i) {
    if constexpr (sizeof(T) == 8) {
        return (T)w[2 * i] | ((T)w[2 * i + 1] << 32);
    } else {
        return (T)(w[i * (int)sizeof(T) / 4] >> (8 * (i * (int)sizeof(T) % 4)));
    }
}

// One 16-byte access. The alignment is stated because the compiler splits a uint4 access it cannot prove aligned
// into 4-byte accesses (seen in the PTX of the aligned path: st.global.u32 x4 instead of st.global.v4.u32).
__device__ __forceinline__ void store_unit(char* p, const unsigned int (&w)[4]) {
    *reinterpret_cast<uint4*>(__builtin_assume_aligned(p, 16)) = make_uint4(w[0], w[1], w[2], w[3]);
}

// The unit at p (16-byte aligned), of which only the bytes in [lo, hi) are wanted: one 16-byte load when the unit
// lies inside the array [begin, end) (bytes of neighbouring rows are harmless), else only the wanted elements.
template <typename T>
__device__ __forceinline__ void load_unit(unsigned int (&w)[4], const char* p, const char* lo, const char* hi,
                                          const char* begin, const char* end) {
    w[0] = w[1] = w[2] = w[3] = 0;
    if (p >= hi) return;
    if (p >= begin && p + 16 <= end) {
        const uint4 u = __ldg(reinterpret_cast<const uint4*>(__builtin_assume_aligned(p, 16)));
        w[0] = u.x; w[1] = u.y; w[2] = u.z; w[3] = u.w;
    } else {
#pragma unroll
        for (int i = 0; i < 16 / (int)sizeof(T); ++i) {
            const char* e = p + i * (int)sizeof(T);
            if (e >= lo && e < hi) put_element<T>(w, i, *reinterpret_cast<const T*>(e));
        }
    }
}

// Bytes s .. s+15 (s in 0..15) of the 32 bytes lo:hi.
__device__ __forceinline__ void realign(unsigned int (&w)[4], const unsigned int (&lo)[4], const unsigned int (&hi)[4],
                                        int s) {
    const unsigned int x[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
    const int q = s >> 2;
    unsigned int y[5];
#pragma unroll
    for (int i = 0; i < 5; ++i)  // y[i] = x[i + q] by selects: a run-time index would put x in local memory
        y[i] = q == 0 ? x[i] : q == 1 ? x[i + 1] : q == 2 ? x[i + 2] : x[i + 3];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = __funnelshift_r(y[i], y[i + 1], 8 * (s & 3));
}

// Byte offset of (row, byte) in a tile of ROW_UNITS units per row. With SWIZZLE the unit index is XORed with
// (row / V) % 8: the 8 lanes that each gather one output unit of a column read rows V apart, which padding cannot
// move off one bank (16-byte rows keep a 16-byte pad's shift a multiple of 128 bytes for V >= 8), and the XOR does.
template <typename T, int ROW_UNITS, bool SWIZZLE>
__device__ __forceinline__ int tile_offset(int row, int byte) {
    constexpr int V = 16 / sizeof(T);
    const int unit = (byte >> 4) ^ (SWIZZLE ? (int)((unsigned int)row / V) & 7 : 0);
    return row * ROW_UNITS * 16 + unit * 16 + (byte & 15);
}

template <typename T, int ROW_UNITS, bool SWIZZLE>
__device__ __forceinline__ T tile_element(const unsigned char* smem, int row, int col) {
    return *reinterpret_cast<const T*>(smem + tile_offset<T, ROW_UNITS, SWIZZLE>(row, col * (int)sizeof(T)));
}

// One output unit at dst, gathered from tile rows row0 .. row0+V-1 of column c: one 16-byte store when all V rows
// are in the matrix (rows_here is what the tile holds), else element by element (only at the matrix's top and
// bottom edges, where the unit's other bytes belong to the neighbouring output rows).
template <typename T, int ROW_UNITS, bool SWIZZLE>
__device__ __forceinline__ void store_unit_from_tile(char* dst, const unsigned char* smem, int row0, int c, int rows_here) {
    constexpr int E = sizeof(T), V = 16 / E;
    if (row0 >= 0 && row0 + V <= rows_here) {
        unsigned int w[4] = {0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < V; ++i) put_element<T>(w, i, tile_element<T, ROW_UNITS, SWIZZLE>(smem, row0 + i, c));
        store_unit(dst, w);
    } else {
#pragma unroll
        for (int i = 0; i < V; ++i)
            if (row0 + i >= 0 && row0 + i < rows_here)
                *reinterpret_cast<T*>(dst + i * E) = tile_element<T, ROW_UNITS, SWIZZLE>(smem, row0 + i, c);
    }
}

// Writes tile column c to its output row, whose tile row 0 lands at seg: lane k of 8 writes units k, k+8, ... of the
// aligned units there. A row that starts mid-unit (t bytes into a SEAM-byte seam) puts its units at tile rows
// (16 u - t) / E. Consecutive tiles overlap by SEAM / E rows (own = TR - SEAM / E) and meet on SEAM-aligned
// output bytes: the tile that holds a seam's first row writes all of it, so no 32-byte sector is shared by two
// blocks when SEAM >= 32, and every store but those at the matrix's top and bottom edges is a whole 16-byte store.
template <typename T, int ROW_UNITS, bool SWIZZLE, bool ALIGNED, int SEAM>
__device__ __forceinline__ void store_column(char* seg, const unsigned char* smem, int c, int rows_here, int own,
                                             bool top, int k) {
    constexpr int E = sizeof(T), SEAM_UNITS = SEAM / 16;
    const int t = ALIGNED ? 0 : (int)((unsigned long long)seg & (SEAM - 1));
    char* const base = seg - t;
    for (int u = k;; u += 8) {
        const int seam_row0 = (u / SEAM_UNITS * SEAM - t) / E;  // exact: t is a multiple of E
        if (seam_row0 >= own) break;
        if (seam_row0 < 0 && !top) continue;  // the previous tile's (the first tile writes what lies in the matrix)
        store_unit_from_tile<T, ROW_UNITS, SWIZZLE>(base + 16 * u, smem, (16 * u - t) / E, c, rows_here);
    }
}

// The V x W block of V 4-byte words (one per tile row, W = 4 / E columns each) as W column units: rows 4g..4g+3
// (halfwords: 2g, 2g+1) of one word column become word g of each column's unit.
template <int E>
__device__ __forceinline__ void transpose_words(unsigned int (&u)[4 / E][4], const unsigned int (&x)[16 / E]) {
#pragma unroll
    for (int g = 0; g < 4; ++g) {
        if constexpr (E == 1) {  // pair the rows bytewise, then the pairs
            const unsigned int ab_lo = __byte_perm(x[4 * g], x[4 * g + 1], 0x5140);
            const unsigned int ab_hi = __byte_perm(x[4 * g], x[4 * g + 1], 0x7362);
            const unsigned int cd_lo = __byte_perm(x[4 * g + 2], x[4 * g + 3], 0x5140);
            const unsigned int cd_hi = __byte_perm(x[4 * g + 2], x[4 * g + 3], 0x7362);
            u[0][g] = __byte_perm(ab_lo, cd_lo, 0x5410);
            u[1][g] = __byte_perm(ab_lo, cd_lo, 0x7632);
            u[2][g] = __byte_perm(ab_hi, cd_hi, 0x5410);
            u[3][g] = __byte_perm(ab_hi, cd_hi, 0x7632);
        } else {
            u[0][g] = __byte_perm(x[2 * g], x[2 * g + 1], 0x5410);
            u[1][g] = __byte_perm(x[2 * g], x[2 * g + 1], 0x7632);
        }
    }
}

// 1- and 2-byte elements on aligned rows: a lane reads whole 4-byte words (W = 4 / E columns) from V tile rows and
// transposes that V x W block in registers with __byte_perm, writing W output units: a quarter (bytes) or half
// (halfwords) of store_column's shared-memory loads.
template <typename T, int ROW_UNITS, bool SWIZZLE>
__device__ __forceinline__ void store_words(char* out, index_t rows, index_t r0, index_t c0, const unsigned char* smem,
                                            int c_first, int rows_here, int cols_here, int k) {
    constexpr int E = sizeof(T), V = 16 / E, W = 4 / E;
    for (int v = k; 16 * v < rows_here * E; v += 8) {
        const int row0 = v * V;
        if (row0 + V <= rows_here) {
            unsigned int x[V];
#pragma unroll
            for (int i = 0; i < V; ++i)
                x[i] = *reinterpret_cast<const unsigned int*>(smem + tile_offset<T, ROW_UNITS, SWIZZLE>(row0 + i, c_first * E));
            unsigned int u[W][4];
            transpose_words<E>(u, x);
#pragma unroll
            for (int n = 0; n < W; ++n)
                if (c_first + n < cols_here)
                    store_unit(out + ((c0 + c_first + n) * rows + r0) * E + 16 * v, u[n]);
        } else {  // the bottom edge of the matrix: element by element
#pragma unroll
            for (int n = 0; n < W; ++n)
                if (c_first + n < cols_here)
                    for (int i = 0; i < V && row0 + i < rows_here; ++i)
                        *reinterpret_cast<T*>(out + ((c0 + c_first + n) * rows + r0 + row0 + i) * E) =
                            tile_element<T, ROW_UNITS, SWIZZLE>(smem, row0 + i, c_first + n);
        }
    }
}

// Bytes on misaligned rows (only bytes come here: halfwords stay with store_column, which is faster for them;
// docs/NOTES.md, "transpose.cu: misaligned bytes and halfwords"): the 4 columns of a word start their output rows
// at different shifts t (bytes into a SEAM-byte seam), so lanes gather aligned V-row vectors of W columns (rows
// V v .. V v + V - 1, as store_words does) and cut each column's output unit from two consecutive vectors at that
// column's shift. The unit whose head is vector v takes vector v - 1 from lane k - 1 by a shuffle. Lane k holds
// vector v0 + k and rounds step 7 vectors: lane 0 only feeds lane 1 (lane 7 wrote its unit the round before),
// which carries no registers across rounds (an int8 tile needs 8 vectors: one round).
template <typename T, int ROW_UNITS, bool SWIZZLE, int SEAM, int TR>
__device__ __forceinline__ void store_words_shifted(char* out, index_t rows, index_t r0, index_t c0,
                                                    const unsigned char* smem, int c_first, int rows_here,
                                                    int cols_here, int own, bool top, int k) {
    constexpr int E = sizeof(T), V = 16 / E, W = 4 / E, SEAM_UNITS = SEAM / 16, STEP = 7;
    static_assert(E == 1, "bytes only (the host's vec16_expression)");
    const index_t row_bytes = rows * E;
    char* const seg0 = out + ((c0 + c_first) * rows + r0) * E;  // column c_first's output row at tile row 0
    const int vectors = (own + SEAM / E + V - 1) / V;  // past the head vector of every unit this tile writes
    const auto word = [&](int row) { return tile_offset<T, ROW_UNITS, SWIZZLE>(row, c_first * E); };
#pragma unroll
    for (int round = 0; round < (TR / V + STEP - 1) / STEP; ++round) {  // the same rounds in every lane
        const int v0 = round * STEP;
        if (v0 + 1 >= vectors) break;
        const int v = v0 + k;
        unsigned int x[V];
        if (V * v + V <= rows_here) {
#pragma unroll
            for (int i = 0; i < V; ++i) x[i] = *reinterpret_cast<const unsigned int*>(smem + word(V * v + i));
        } else {  // rows past the tile read as zero (never stored)
#pragma unroll
            for (int i = 0; i < V; ++i)
                x[i] = V * v + i < rows_here ? *reinterpret_cast<const unsigned int*>(smem + word(V * v + i)) : 0u;
        }
        unsigned int cur[W][4];
        transpose_words<E>(cur, x);
        const bool writes = k > 0 || v0 == 0;
#pragma unroll
        for (int n = 0; n < W; ++n) {
            unsigned int prev[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) prev[i] = __shfl_up_sync(0xffffffffu, cur[n][i], 1, 8);  // in every lane
            if (!writes || c_first + n >= cols_here) continue;
            char* const seg = seg0 + n * row_bytes;
            const int t = (int)((unsigned long long)seg & (SEAM - 1)), ts = t & 15;
            const int u = v + (t >> 4);  // the unit (16 bytes from the seam before seg) whose head is vector v
            const int seam_row0 = (u / SEAM_UNITS * SEAM - t) / E;
            if (seam_row0 >= own || (seam_row0 < 0 && !top)) continue;  // another tile's (see store_column)
            unsigned int lo[4], w[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) lo[i] = ts ? prev[i] : cur[n][i];
            realign(w, lo, cur[n], (16 - ts) & 15);
            char* const dst = seg - t + 16 * u;
            const int row0 = V * v - ts / E;
            if (row0 >= 0 && row0 + V <= rows_here) {
                store_unit(dst, w);
            } else {  // the matrix's top and bottom edges
#pragma unroll
                for (int i = 0; i < V; ++i)
                    if (row0 + i >= 0 && row0 + i < rows_here)
                        *reinterpret_cast<T*>(dst + i * E) = get_element<T>(w, i);
            }
        }
    }
}

// One block per tile of TR x TC elements (OC x IC units), 16-byte accesses throughout:
//   phase 1: IC lanes per tile row read one unit each (all of a thread's loads in flight before any use), realign
//            rows that start mid-unit with their left neighbour's unit (a shuffle), store units to shared memory;
//   phase 2: 8 lanes per output row segment gather and store one unit each (store_column, store_words or
//            store_words_shifted).
// ALIGNED: both arrays start on a unit and both row lengths are whole units (chosen by the host), so nothing moves
// and tiles follow each other every TR rows; otherwise every TR - SEAM / E rows (see store_column).
// MIN_BLOCKS: the blocks per SM that ptxas must leave registers for (the host's choice, see vec16_min_blocks), at most
// what the SM holds. GROUP_SHIFT: the block order (a template parameter: as a run-time one its arithmetic spilled).
// BATCHED: blockIdx.y picks one of a batch of matrices, batch_stride elements apart in both arrays (its own
// instantiation: the offset pointers cost the register-bound misaligned tiles a spill).

template <typename T, int IC, int OC, int THREADS, bool ALIGNED, bool SWIZZLE, bool WORD_GATHER, int SEAM,
          int MIN_BLOCKS, int GROUP_SHIFT, bool BATCHED>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS < SM_THREADS / THREADS ? MIN_BLOCKS : SM_THREADS / THREADS)
transpose_vec16(T* __restrict__ out, const T* __restrict__ in, index_t rows, index_t cols, unsigned int tiles_r,
                unsigned int tiles_c, index_t batch_stride) {
    if (BATCHED) {
        in += blockIdx.y * batch_stride;
        out += blockIdx.y * batch_stride;
    }
    constexpr int E = sizeof(T), V = 16 / E;
    constexpr int TR = OC * V, TC = IC * V;  // tile rows and columns, in elements
    constexpr int ROWS_PER_PASS = THREADS / IC, PASSES = TR / ROWS_PER_PASS;
    constexpr int W = E < 4 ? 4 / E : 1;  // tile columns per 4-byte word (one for 8-byte elements)
    constexpr int TR_STEP = ALIGNED ? TR : TR - SEAM / E;  // tile rows this block writes out
    static_assert(IC >= 8 && IC <= 32 && (IC & (IC - 1)) == 0, "a tile row is one shuffle segment of 8..32 lanes");
    static_assert(SEAM >= 16 && (SEAM & (SEAM - 1)) == 0 && SEAM / E < TR, "seam");
    static_assert(OC % 8 == 0 && THREADS % 32 == 0 && TR % ROWS_PER_PASS == 0 && TC % (4 * W) == 0, "tile shape");
    __shared__ uint4 tile[TR * IC];
    unsigned char* const smem = reinterpret_cast<unsigned char*>(tile);

    // Consecutive blocks go down 2^GROUP_SHIFT tile rows, then one tile column right (0: row by row); see
    // vec16_group_shift. The grid rounds the tile rows up to whole groups: the blocks past the last tile row exit.
    const unsigned int slot = blockIdx.x >> GROUP_SHIFT;
    const unsigned int tile_r = (slot / tiles_c << GROUP_SHIFT) | (blockIdx.x & ((1u << GROUP_SHIFT) - 1));
    if (GROUP_SHIFT > 0 && tile_r >= tiles_r) return;
    const index_t r0 = (index_t)tile_r * TR_STEP;
    const index_t c0 = (index_t)(slot % tiles_c) * TC;
    const int rows_here = rows - r0 < TR ? (int)(rows - r0) : TR;
    const int cols_here = cols - c0 < TC ? (int)(cols - c0) : TC;
    const int own = rows_here < TR_STEP ? rows_here : TR_STEP;

    // Phase 1. Misaligned rows: lane j loads unit j + 1 of its row and takes unit j from lane j - 1 (lane 0 loads
    // unit 0 too). (The mirror image, loading unit j and taking j + 1 from the right, the last lane loading the unit
    // after the tile, was slower: docs/NOTES.md, "transpose.cu: phase 1 of misaligned tiles".)
    const char* const in_begin = reinterpret_cast<const char*>(in);
    const char* const in_end = in_begin + rows * cols * E;
    const int j = threadIdx.x % IC;
    unsigned int w[PASSES][4], first[PASSES][4];
    int shift[PASSES];
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const int r = p * ROWS_PER_PASS + threadIdx.x / IC;
        const char* const a = in_begin + ((r0 + r) * cols + c0) * E;  // the tile row's first element
        const char* const a_end = a + (r < rows_here ? cols_here * E : 0);
        shift[p] = ALIGNED ? 0 : (int)((unsigned long long)a & 15);
        const char* const u0 = a - shift[p];
        load_unit<T>(w[p], u0 + 16 * (ALIGNED ? j : j + 1), a, a_end, in_begin, in_end);
        if (!ALIGNED && j == 0) load_unit<T>(first[p], u0, a, a_end, in_begin, in_end);
    }
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const int r = p * ROWS_PER_PASS + threadIdx.x / IC;
        unsigned int v[4] = {w[p][0], w[p][1], w[p][2], w[p][3]};
        if (!ALIGNED) {  // the row starts shift[p] bytes into unit j: the rest is in unit j + 1
            unsigned int prev[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) prev[i] = __shfl_up_sync(0xffffffffu, w[p][i], 1, IC);
#pragma unroll
            for (int i = 0; i < 4; ++i) prev[i] = j == 0 ? first[p][i] : prev[i];
            realign(v, prev, w[p], shift[p]);
        }
        if (r < rows_here)
            *reinterpret_cast<uint4*>(__builtin_assume_aligned(smem + tile_offset<T, IC, SWIZZLE>(r, 16 * j), 16)) =
                make_uint4(v[0], v[1], v[2], v[3]);
    }
    __syncthreads();  // phase 2 reads columns, i.e. units other threads stored

    // Phase 2: warp g-loop over groups of 4 words (4 * W tile columns); lane = 8 * q + k reads word q of the group.
    // (Where there are more warps than groups, the rest idle: sharing a group's units among warps costs registers,
    // and so a block per SM, for more than it gains; docs/NOTES.md, "transpose.cu: idle warps in phase 2".)
    char* const out_bytes = reinterpret_cast<char*>(out);
    const int lane = threadIdx.x & 31, k = lane & 7, q = lane >> 3;
    for (int g = threadIdx.x >> 5; g < TC / (4 * W); g += THREADS / 32) {
        const int c_first = (4 * g + q) * W;
        if constexpr (WORD_GATHER && ALIGNED && E < 4) {
            if (c_first < cols_here)
                store_words<T, IC, SWIZZLE>(out_bytes, rows, r0, c0, smem, c_first, rows_here, cols_here, k);
        } else if constexpr (WORD_GATHER && E < 4) {  // every lane: it shuffles
            store_words_shifted<T, IC, SWIZZLE, SEAM, TR>(out_bytes, rows, r0, c0, smem, c_first, rows_here,
                                                          cols_here, own, r0 == 0, k);
        } else {
#pragma unroll
            for (int b = 0; b < W; ++b) {
                const int c = c_first + b;  // the 4 lanes q of one k read 4 different words: 4 different banks
                if (c < cols_here)
                    store_column<T, IC, SWIZZLE, ALIGNED, SEAM>(out_bytes + ((c0 + c) * rows + r0) * E, smem, c,
                                                                rows_here, own, r0 == 0, k);
            }
        }
    }
}
