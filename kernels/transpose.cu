// Matrix transpose (seed 003): the copy yardsticks, the seed's transposes, then 16-byte-vector tiles at copy speed.
#include "common.cuh"

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
#if __CUDA_ARCH__ == 750
constexpr int SM_THREADS = 1024;  // the most threads an SM holds
#elif __CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890
constexpr int SM_THREADS = 1536;
#else
constexpr int SM_THREADS = 2048;
#endif

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

// ---------------------------------------------------------------------------------------------------------------
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
constexpr int LINE_TILE_MIN_BLOCKS = 5;  // a register cap: enough tiles in flight per SM to cover DRAM's latency

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
