// Matrix product C = A @ B (A m x k, B k x n, C m x n row-major): the seed kernels of articles 001 and 002 with
// their fixes, then register tiling, warp tiling and double buffering up to the fast kernel, and an FP64 kernel on
// the tensor cores (mma.sync m8n8k4, sm_80 and later).
#include "common.cuh"

// ---------------------------------------------------------------------------------------------------------------
// Seed kernels. All seeds were square (width); here A is m x k, B is k x n. They read C-order operands only
// (cudakit.matmul copies any other layout first) and accumulate in T, one output element per thread.
// ---------------------------------------------------------------------------------------------------------------

// Seed 001, Numba cu_matmul: one thread per output element, with the grid's x (the fastest thread index) over
// rows, so a warp reads A and writes C down a column: every access of the warp is strided.
template <typename T>
__global__ void cu_matmul(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, index_t m, index_t n,
                          index_t k) {
    const index_t x = (index_t)blockIdx.x * blockDim.x + threadIdx.x;  // row (cuda.grid(2)[0])
    const index_t y = (index_t)blockIdx.y * blockDim.y + threadIdx.y;  // column
    if (x >= m || y >= n) return;  // fix: rows and columns bounded separately (the seed had one n for both)
    // The seed accumulated into c[x, y] itself; a register holds the same sum without a global update per step.
    T sum = 0;
    for (index_t i = 0; i < k; ++i) sum += a[x * k + i] * b[i * n + y];
    c[x * n + y] = sum;
}

// Seed 001, Numba cu_matmul_sm: tpb x tpb tiles of A and B staged in shared memory, x over rows as above.
template <typename T>
__global__ void cu_matmul_sm(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, index_t m, index_t n,
                             index_t k) {
    const int TPB = 32;  // the seed's tpb (the warp size)
    __shared__ T sA[TPB][TPB];
    __shared__ T sB[TPB][TPB];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const index_t x = (index_t)blockIdx.x * TPB + tx;  // row
    const index_t y = (index_t)blockIdx.y * TPB + ty;  // column
    T acc = 0;
    const index_t tiles = (k + TPB - 1) / TPB;  // fix: the seed's bpg = n / tpb dropped a partial last tile
    for (index_t i = 0; i < tiles; ++i) {
        const index_t ka = ty + i * TPB, kb = tx + i * TPB;
        // fix: the seed needed n to be a multiple of tpb (shared memory is not zero-filled); outside reads as 0
        sA[tx][ty] = (x < m && ka < k) ? A[x * k + ka] : T(0);
        sB[tx][ty] = (kb < k && y < n) ? B[kb * n + y] : T(0);
        __syncthreads();  // the whole tile is in shared memory before anyone reads it
        for (int j = 0; j < TPB; ++j) acc += sA[tx][j] * sB[j][ty];
        __syncthreads();  // everyone is done with the tile before the next one overwrites it
    }
    if (x < m && y < n) C[x * n + y] = acc;
}

// Seed 002, MatmulKernel: one thread per output element with x over columns, so a warp reads B and writes C
// along a row (coalesced) while every thread of the warp reads the same element of A (a broadcast).
template <typename T>
__global__ void MatmulKernel(const T* __restrict__ M_device, const T* __restrict__ N_device, T* __restrict__ P_device,
                             index_t m, index_t n, index_t k) {
    const index_t y = (index_t)blockIdx.y * blockDim.y + threadIdx.y;  // row
    const index_t x = (index_t)blockIdx.x * blockDim.x + threadIdx.x;  // column
    if (y >= m || x >= n) return;  // fix: the seed had no bounds check (width a multiple of the block)
    T P_element = 0;
    for (index_t kk = 0; kk < k; ++kk) P_element += M_device[y * k + kk] * N_device[kk * n + x];
    P_device[y * n + x] = P_element;
}

// Seed 002, MatmulSharedStaticKernel: 16 x 16 tiles of M and N in static shared memory, each element read from
// global memory once per tile instead of once per output element.
template <typename T>
__global__ void MatmulSharedStaticKernel(const T* __restrict__ M_device, const T* __restrict__ N_device,
                                         T* __restrict__ P_device, index_t m, index_t n, index_t k) {
    const int BLOCKSIZE = 16;
    __shared__ T M_deviceShared[BLOCKSIZE][BLOCKSIZE];
    __shared__ T N_deviceShared[BLOCKSIZE][BLOCKSIZE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const index_t x = (index_t)blockIdx.x * BLOCKSIZE + tx;  // column
    const index_t y = (index_t)blockIdx.y * BLOCKSIZE + ty;  // row
    T P_element = 0;
    const index_t tiles = (k + BLOCKSIZE - 1) / BLOCKSIZE;  // fix: width / BLOCKSIZE dropped a partial tile
    for (index_t t = 0; t < tiles; ++t) {
        const index_t mk = t * BLOCKSIZE + tx, nk = t * BLOCKSIZE + ty;
        // fix: the seed had no bounds checks; elements outside the matrices read as 0
        M_deviceShared[ty][tx] = (y < m && mk < k) ? M_device[y * k + mk] : T(0);
        N_deviceShared[ty][tx] = (nk < k && x < n) ? N_device[nk * n + x] : T(0);
        __syncthreads();
        for (int kk = 0; kk < BLOCKSIZE; ++kk) P_element += M_deviceShared[ty][kk] * N_deviceShared[kk][tx];
        __syncthreads();
    }
    if (y < m && x < n) P_device[y * n + x] = P_element;  // fix: unguarded write
}

// Seed 002, MatmulSharedDynamicKernel: the same tiling with the tile size chosen at launch and both tiles carved
// out of one dynamic shared array (every extern __shared__ array starts at the same address).
template <typename T>
__global__ void MatmulSharedDynamicKernel(const T* __restrict__ M_device, const T* __restrict__ N_device,
                                          T* __restrict__ P_device, index_t m, index_t n, index_t k, int blockSize) {
    extern __shared__ __align__(16) unsigned char matmul_dynamic_bytes[];
    T* deviceShared = reinterpret_cast<T*>(matmul_dynamic_bytes);
    const int stride = blockSize * blockSize;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const index_t x = (index_t)blockIdx.x * blockSize + tx;  // column
    const index_t y = (index_t)blockIdx.y * blockSize + ty;  // row
    T P_element = 0;
    const index_t tiles = (k + blockSize - 1) / blockSize;  // fix: width / blockSize dropped the last partial tile
    for (index_t t = 0; t < tiles; ++t) {
        const index_t mk = t * blockSize + tx, nk = t * blockSize + ty;
        // fix: the seed guarded only the final write, so these loads read past the matrices; now zero-filled
        deviceShared[ty * blockSize + tx] = (y < m && mk < k) ? M_device[y * k + mk] : T(0);
        deviceShared[stride + ty * blockSize + tx] = (nk < k && x < n) ? N_device[nk * n + x] : T(0);
        __syncthreads();
        for (int kk = 0; kk < blockSize; ++kk)
            P_element += deviceShared[ty * blockSize + kk] * deviceShared[stride + kk * blockSize + tx];
        __syncthreads();
    }
    if (y < m && x < n) P_device[y * n + x] = P_element;
}

// Seed 002, MatmulSharedStaticConflictPadKernel: one tile is stored transposed and read down its columns, the
// access that puts a warp's threads on one bank; the padding column (BLOCKSIZE + 1) spreads them over all banks.
template <typename T>
__global__ void MatmulSharedStaticConflictPadKernel(const T* __restrict__ M_device, const T* __restrict__ N_device,
                                                    T* __restrict__ P_device, index_t m, index_t n, index_t k) {
    const int BLOCKSIZE = 16;
    __shared__ T M_deviceShared[BLOCKSIZE][BLOCKSIZE + 1];
    __shared__ T N_deviceShared[BLOCKSIZE][BLOCKSIZE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    // fix: the seed ran threadIdx.x down P's column (x a row, P[x * width + y]), so every global access of a warp
    // was strided; x now runs along the row, and only N's tile is transposed (the access the pad is for).
    const index_t x = (index_t)blockIdx.x * BLOCKSIZE + tx;  // column
    const index_t y = (index_t)blockIdx.y * BLOCKSIZE + ty;  // row
    T P_element = 0;
    const index_t tiles = (k + BLOCKSIZE - 1) / BLOCKSIZE;  // fix: width / BLOCKSIZE dropped a partial tile
    for (index_t t = 0; t < tiles; ++t) {
        const index_t mk = t * BLOCKSIZE + tx, nk = t * BLOCKSIZE + ty;
        M_deviceShared[ty][tx] = (y < m && mk < k) ? M_device[y * k + mk] : T(0);  // fix: bounds, zero fill
        // fix: the seed loaded this tile from M_device instead of N_device
        N_deviceShared[tx][ty] = (nk < k && x < n) ? N_device[nk * n + x] : T(0);
        __syncthreads();
        // N_deviceShared[tx][kk]: the warp's threads read one column, 17 words apart, so 16 different banks
        for (int kk = 0; kk < BLOCKSIZE; ++kk) P_element += M_deviceShared[ty][kk] * N_deviceShared[tx][kk];
        __syncthreads();
    }
    if (y < m && x < n) P_device[y * n + x] = P_element;  // fix: row-major P[row * n + column], guarded
}

// Seed 002, MatmulSharedDynamicConflictPadKernel: the padded, transposed tile in dynamic shared memory.
template <typename T>
__global__ void MatmulSharedDynamicConflictPadKernel(const T* __restrict__ M_device, const T* __restrict__ N_device,
                                                     T* __restrict__ P_device, index_t m, index_t n, index_t k,
                                                     int blockSize) {
    extern __shared__ __align__(16) unsigned char matmul_dynamic_pad_bytes[];
    T* deviceShared = reinterpret_cast<T*>(matmul_dynamic_pad_bytes);
    const int pitch = blockSize + 1;
    const int stride = pitch * blockSize;
    const int tx = threadIdx.x, ty = threadIdx.y;
    // fix: threadIdx.x runs along P's row (the seed ran it down a column and wrote P[x * width + y])
    const index_t x = (index_t)blockIdx.x * blockSize + tx;  // column
    const index_t y = (index_t)blockIdx.y * blockSize + ty;  // row
    T P_element = 0;
    const index_t tiles = (k + blockSize - 1) / blockSize;  // fix: width / blockSize dropped a partial tile
    for (index_t t = 0; t < tiles; ++t) {
        const index_t mk = t * blockSize + tx, nk = t * blockSize + ty;
        // fix: bounds-checked, zero-filled loads (the seed read past the matrices)
        deviceShared[ty * pitch + tx] = (y < m && mk < k) ? M_device[y * k + mk] : T(0);
        deviceShared[stride + tx * pitch + ty] = (nk < k && x < n) ? N_device[nk * n + x] : T(0);
        __syncthreads();
        for (int kk = 0; kk < blockSize; ++kk)
            P_element += deviceShared[ty * pitch + kk] * deviceShared[stride + tx * pitch + kk];
        __syncthreads();
    }
    if (y < m && x < n) P_device[y * n + x] = P_element;  // fix: row-major and guarded (the seed wrote P[x * width + y])
}

#include "matmul_tiles.cuh"  // register-tiled kernels: tile helpers, loaders, pipeline, matmul_regtile

// FP64 on the tensor cores: the same tiles and k loop, but each warp's WM x WN tile is a grid of 8 x 8 blocks, each
// advanced 4 deep per mma.sync.m8n8k4 (FP64 products and sums, 512 flops per warp instruction; on sm_90 two
// blocks and two k steps per m16n8k8). Fragments (PTX ISA), g = lane / 4, t = lane % 4: A 8x4 row-major, lane holds
// A[g][t]; B 4x8, lane holds B[t][g]; C 8x8, lane holds C[g][2t], C[g][2t + 1].
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int MIN_BLOCKS, bool A_KC, bool B_KC, bool VEC>
__global__ void __launch_bounds__(BM / WM * (BN / WN) * 32, MIN_BLOCKS)
    matmul_dmma(const double* __restrict__ A, const double* __restrict__ B, double* __restrict__ C, index_t m,
                index_t n, index_t k, index_t lda, index_t ldb, int vec_c,
                index_t /*tail_start*/, int /*sk_blocks*/, double* /*partials*/, unsigned int* /*counters*/,
                index_t batch_a, index_t batch_b, index_t k_last) {
    // The stream-K parameters keep matmul_regtile's launch signature; the host never gives a DMMA grid a tail.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    batch_offsets(A, B, C, m * n, batch_a, batch_b, k, k_last);
    constexpr int THREADS = BM / WM * (BN / WN) * 32;
    // Row stride = 4 (mod 16) doubles: a fragment read (4 k rows x 4 columns per half-warp) hits 16 distinct banks.
    constexpr int LDA = BM + 4, LDB = BN + 4;
    constexpr int FM = WM / 8, FN = WN / 8;
    static_assert(WM % 8 == 0 && WN % 8 == 0 && BK % 4 == 0 && BM % WM == 0 && BN % WN == 0, "tile shape");
    double* const As = tile_shared<double>(STAGES * BK * (LDA + LDB));
    double* const Bs = As + STAGES * BK * LDA;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const TileOrigin tile = tile_origin<BM, BN>(m, n);
    const int wrow = warp / (BN / WN) * WM, wcol = warp % (BN / WN) * WN;
    const int frag_k = lane % 4, frag_mn = lane / 4;

    TileLoader<double, BM, BK, LDA, THREADS, A_KC, VEC> la(A, lda, tile.m0, m, tid);
    TileLoader<double, BN, BK, LDB, THREADS, B_KC, VEC> lb(B, ldb, tile.n0, n, tid);
    // this thread's first C element (row lane / 4, column 2 * (lane % 4) of the warp's first 8x8 block) and how
    // many rows / columns exist from it on
    const int row0 = wrow + frag_mn, col0 = wcol + frag_k * 2;
    double* const c_out = C + (tile.m0 + row0) * n + tile.n0 + col0;
    const int rows_out = (int)(m - tile.m0 < BM ? m - tile.m0 : BM) - row0;
    const int cols_out = (int)(n - tile.n0 < BN ? n - tile.n0 : BN) - col0;

    double acc[FM][FN][2];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) acc[i][j][0] = acc[i][j][1] = 0.0;

    k_loop<STAGES, BK, false>(la, lb, As, BK * LDA, Bs, BK * LDB, k, [&](const double* as, const double* bs) {
#if __CUDA_ARCH__ >= 900
        // Hopper's FP64 tensor cores run m8n8k4 at a fraction of their rate; m16n8k8 covers two of our 8x8 blocks
        // (rows g, g + 8) two k-steps deep (columns t, t + 4) from the very same fragments, in one instruction.
        static_assert(FM % 2 == 0 && BK % 8 == 0, "m16n8k8 pairs 8-row blocks and 4-deep k steps");
#pragma unroll
        for (int kq = 0; kq < BK / 4; kq += 2) {
            double a[2][FM], b[2][FN];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const double* ak = as + ((kq + h) * 4 + frag_k) * LDA + wrow + frag_mn;
                const double* bk = bs + ((kq + h) * 4 + frag_k) * LDB + wcol + frag_mn;
#pragma unroll
                for (int i = 0; i < FM; ++i) a[h][i] = ak[i * 8];
#pragma unroll
                for (int j = 0; j < FN; ++j) b[h][j] = bk[j * 8];
            }
#pragma unroll
            for (int i = 0; i < FM; i += 2)
#pragma unroll
                for (int j = 0; j < FN; ++j)
                    asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                        "{%8, %9}, {%0, %1, %2, %3};"
                        : "+d"(acc[i][j][0]), "+d"(acc[i][j][1]), "+d"(acc[i + 1][j][0]), "+d"(acc[i + 1][j][1])
                        : "d"(a[0][i]), "d"(a[0][i + 1]), "d"(a[1][i]), "d"(a[1][i + 1]), "d"(b[0][j]), "d"(b[1][j]));
        }
#else
#pragma unroll
        for (int kq = 0; kq < BK / 4; ++kq) {
            double a[FM], b[FN];
            const double* ak = as + (kq * 4 + frag_k) * LDA + wrow + frag_mn;
            const double* bk = bs + (kq * 4 + frag_k) * LDB + wcol + frag_mn;
#pragma unroll
            for (int i = 0; i < FM; ++i) a[i] = ak[i * 8];
#pragma unroll
            for (int j = 0; j < FN; ++j) b[j] = bk[j * 8];
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j)
                    asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
                        : "+d"(acc[i][j][0]), "+d"(acc[i][j][1])
                        : "d"(a[i]), "d"(b[j]));
        }
#endif
    });

#pragma unroll
    for (int i = 0; i < FM; ++i) {
        const int r = i * 8;
        if (r >= rows_out) continue;
        double* crow = c_out + r * n;
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            const int c = j * 8;
            if (vec_c && c + 2 <= cols_out) {
                *reinterpret_cast<double2*>(crow + c) = make_double2(acc[i][j][0], acc[i][j][1]);
            } else {
                if (c < cols_out) crow[c] = acc[i][j][0];
                if (c + 1 < cols_out) crow[c + 1] = acc[i][j][1];
            }
        }
    }
#endif
}

// The partial products of a split k, summed in an order fixed by `splits` and the block's shape (the result does not
// depend on timing): `splits` arrays of `count` elements each. A block sums runs of blockDim.x consecutive outputs
// (threadIdx.x); its blockDim.y rows each add every blockDim.y-th array from the row's own on, and the rows' sums are
// added in order of row. The host gives a block rows where the outputs alone would leave the GPU's threads idle, so
// that more loads per output are in flight. Blocks of at most SPLITK_SUM_THREADS threads.
#define SPLITK_SUM_THREADS 256
template <typename T>
__global__ void splitk_sum(T* __restrict__ out, const T* __restrict__ partials, index_t count, int splits) {
    __shared__ T sums[SPLITK_SUM_THREADS];
    const int x = threadIdx.x, y = threadIdx.y, width = blockDim.x, rows = blockDim.y;
    for (index_t i0 = (index_t)blockIdx.x * width; i0 < count; i0 += (index_t)gridDim.x * width) {
        const index_t i = i0 + x;
        T sum = T(0);
        if (i < count) {
#pragma unroll 4
            for (int p = y; p < splits; p += rows) sum += partials[p * count + i];
        }
        if (rows == 1) {
            if (i < count) out[i] = sum;
            continue;
        }
        sums[y * width + x] = sum;
        __syncthreads();
        if (y == 0 && i < count) {
            for (int r = 1; r < rows; ++r) sum += sums[r * width + x];
            out[i] = sum;
        }
        __syncthreads();
    }
}

#include "matmul_small.cuh"  // small and skinny problems: skinny, dots, batched small and tiny products
