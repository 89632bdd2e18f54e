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

// ---------------------------------------------------------------------------------------------------------------
// Register-tiled kernels. A block computes a BM x BN tile of C from BK-deep slices of A and B staged in shared
// memory k-major (As[k][row], Bs[k][col]); each thread keeps a TM x TN tile of C in registers. They read any of
// the four layouts in place: A_KC / B_KC say whether the operand's k index is the contiguous one in memory
// (C-order A, F-order B), and lda / ldb are the leading dimensions. Any m, n, k: loads outside read as zero and
// stores are guarded.
// ---------------------------------------------------------------------------------------------------------------

struct TileOrigin {
    index_t m0, n0;
};

// The C tile of this block (a 1-D grid, so no grid-dimension limit). Consecutive blocks sweep GROUP_M tile-rows
// column by column, so the blocks resident together share A rows and B columns in L2.
template <int BM, int BN>
__device__ __forceinline__ TileOrigin tile_origin(index_t m, index_t n, index_t tile = blockIdx.x) {
    const index_t GROUP_M = 8;
    const index_t tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN;
    const index_t per_group = GROUP_M * tiles_n;
    const index_t first_m = tile / per_group * GROUP_M;
    const index_t rows = tiles_m - first_m < GROUP_M ? tiles_m - first_m : GROUP_M;
    const index_t in_group = tile % per_group;
    return {(first_m + in_group % rows) * BM, in_group / rows * BN};
}

// Part j of a block's work: slices [first, last) of one tile (first >= last: no such part). A block below
// tail_start has one part, its whole tile. The stream-K blocks (block tail_start + sk) share the tail's
// (tile, slice) steps, tile-major, in equal runs; part j is the run's piece in its j-th tile.
// A batch of products in one launch, matrix blockIdx.y of the batch: its A and B start batch_a and batch_b
// elements after the previous matrix's (0: an operand broadcast over the batch), its C right after the previous C.
// The last one may be shallower (k_last): split k cuts a long product into a batch of partial products over
// consecutive runs of k, each into its own C, summed afterwards (splitk_sum).
template <typename In, typename Out>
__device__ __forceinline__ void batch_offsets(In& A, In& B, Out& C, index_t c_size, index_t batch_a, index_t batch_b,
                                              index_t& k, index_t k_last) {
    A += blockIdx.y * batch_a;
    B += blockIdx.y * batch_b;
    C += blockIdx.y * c_size;
    if (blockIdx.y == gridDim.y - 1) k = k_last;
}

struct WorkPart {
    index_t tile, first, last;
};

template <int BM, int BN, int BK, bool STREAM_K>
__device__ __forceinline__ WorkPart work_part(int j, index_t m, index_t n, index_t k, index_t tail_start,
                                              int sk_blocks) {
    const index_t slices = (k + BK - 1) / BK, sk = (index_t)blockIdx.x - tail_start;
    if (!STREAM_K || sk < 0) return {blockIdx.x, j == 0 ? 0 : slices, slices};
    const index_t tail_steps = ((m + BM - 1) / BM * ((n + BN - 1) / BN) - tail_start) * slices;
    const index_t start = tail_start * slices + sk * tail_steps / sk_blocks;
    const index_t end = tail_start * slices + (sk + 1) * tail_steps / sk_blocks;
    const index_t tile = start / slices + j;
    const index_t first = j == 0 ? start - tile * slices : 0, rest = end - tile * slices;
    return {tile, first, rest < slices ? rest : slices};
}

// Moves BK-deep slices of one operand (ROWS of A's rows or of B's columns) from global memory into a k-major
// shared tile s[k * LD + row], through registers so that the next slice's loads are in flight during the math.
// K_CONTIG: the operand's k index is contiguous in memory, so the loads run along k and the store transposes;
// otherwise the rows are contiguous and the store is a straight (vector) copy. Each thread moves runs of V
// consecutive elements: with VEC one 16-byte load each (the host checks the pointer and the leading dimension), else
// V element loads (the same addresses, so the same coalescing); a run that straddles the edge is loaded by element.
template <typename T, int ROWS, int BK, int LD, int THREADS, bool K_CONTIG, bool VEC>
struct TileLoader {
    typedef typename Vec16<T>::type Vec;
    static const int V = Vec16<T>::n;
    static const int INNER = K_CONTIG ? BK : ROWS;  // the contiguous extent of a slice
    static const int OUTER = K_CONTIG ? ROWS : BK;
    static const int VECS_PER_LINE = INNER / V;
    static const int LINES_PER_PASS = THREADS / VECS_PER_LINE;
    static const int PASSES = OUTER / LINES_PER_PASS;
    static_assert(INNER % V == 0 && THREADS % VECS_PER_LINE == 0 && OUTER % LINES_PER_PASS == 0 && PASSES >= 1,
                  "the threads must cover the slice in whole passes");

    const T* ptr;        // this thread's first element of the next slice
    const index_t step;  // from one slice to the next
    const index_t pass;  // from one pass's line to the next
    const int rows_left; // rows of this operand from the tile's first on, capped at ROWS
    const int outer0, inner0;  // this thread's first element within a slice
    T reg[PASSES][V];

    __device__ __forceinline__ TileLoader(const T* base, index_t ld, index_t row0, index_t rows, int tid)
        : step(K_CONTIG ? (index_t)BK : BK * ld), pass(LINES_PER_PASS * ld),
          rows_left(rows - row0 < ROWS ? (int)(rows - row0) : ROWS), outer0(tid / VECS_PER_LINE),
          inner0(tid % VECS_PER_LINE * V) {
        // element (row r, depth kk) is base[r * ld + kk] when K_CONTIG, base[kk * ld + r] otherwise
        ptr = K_CONTIG ? base + (row0 + outer0) * ld + inner0 : base + outer0 * ld + row0 + inner0;
    }

    __device__ __forceinline__ bool whole_rows() const { return rows_left == ROWS; }
    __device__ __forceinline__ void rewind() { ptr -= step; }

    // Loads the next slice, of which k_left (capped at BK) columns of depth exist, then steps past it.
    __device__ __forceinline__ void load(int k_left) {
        const int outer_left = (K_CONTIG ? rows_left : k_left) - outer0;
        const int inner_left = (K_CONTIG ? k_left : rows_left) - inner0;
        const bool full = rows_left == ROWS && k_left == BK;  // the same for the whole block: interior tiles skip checks
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const T* src = ptr + p * pass;
            const bool line_ok = p * LINES_PER_PASS < outer_left;
            if (VEC && (full || (line_ok && inner_left >= V))) {
                const Vec v = *reinterpret_cast<const Vec*>(src);
                const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
                for (int i = 0; i < V; ++i) reg[p][i] = e[i];
            } else {
#pragma unroll
                for (int i = 0; i < V; ++i) reg[p][i] = (full || (line_ok && i < inner_left)) ? src[i] : T(0);
            }
        }
        ptr += step;
    }

    // load() for a slice known to be whole (every row of the tile exists, BK columns of depth): no checks.
    __device__ __forceinline__ void load_whole() {
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const T* src = ptr + p * pass;
            if (VEC) {
                const Vec v = *reinterpret_cast<const Vec*>(src);
#pragma unroll
                for (int i = 0; i < V; ++i) reg[p][i] = reinterpret_cast<const T*>(&v)[i];
            } else {
#pragma unroll
                for (int i = 0; i < V; ++i) reg[p][i] = src[i];
            }
        }
        ptr += step;
    }

    __device__ __forceinline__ void store(T* s) const {
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const int outer = outer0 + p * LINES_PER_PASS;
            if (K_CONTIG) {
#pragma unroll
                for (int i = 0; i < V; ++i) s[(inner0 + i) * LD + outer] = reg[p][i];
            } else {
                Vec v;
                T* e = reinterpret_cast<T*>(&v);
#pragma unroll
                for (int i = 0; i < V; ++i) e[i] = reg[p][i];
                *reinterpret_cast<Vec*>(s + outer * LD + inner0) = v;
            }
        }
    }
};

// The register-tiled kernels' operand tiles, in dynamic shared memory (the host sizes it: Tile.shared_bytes), so
// tiles past the 48 KiB of static shared memory build too. A launch with less than `elements` traps.
template <typename T>
__device__ __forceinline__ T* tile_shared(int elements) {
    extern __shared__ __align__(16) unsigned char matmul_tile_bytes[];
    unsigned int bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    if (bytes < elements * sizeof(T)) __trap();
    return reinterpret_cast<T*>(matmul_tile_bytes);
}

// The k loop shared by the register-tiled kernels. STAGES == 1: load, barrier, math, barrier. STAGES == 2
// (double buffering): the next slice's global loads are issued before the math on the current one and land in the
// other shared stage afterwards, so their latency hides behind the math and one barrier per slice suffices. Where
// every row of the tile exists (an interior tile: most of a large product) the whole slices load without the edge
// checks, whose predicates and branches would otherwise be issued on every slice. With k a multiple of BK that is one
// body whose last loads fetch the last slice again; otherwise (PARTIAL_UNCHECKED) the last one or two steps run as a
// loop of their own with the checked load: the partial slice, then a load of no columns (it reads nothing). One body
// with a `more` test spilled the registers of the layouts whose loaders transpose, a peeled copy of the body cost the
// whole slices 2%, and the FP64 tensor-core kernel ran its whole slices slower with the second loop beside them
// (docs/NOTES.md, "matmul.cu: the unchecked interior k loop").
template <int STAGES, int BK, bool PARTIAL_UNCHECKED, typename T, class LoaderA, class LoaderB, class Math>
__device__ __forceinline__ void k_loop(LoaderA& la, LoaderB& lb, T* As, int a_stage, T* Bs, int b_stage, index_t k,
                                       Math&& math) {
    const int slices = (int)((k + BK - 1) / BK);
    index_t k_rest = k;  // depth from the slice being loaded on (64-bit: k itself may pass 2^31)
    la.load(k_rest < BK ? (int)k_rest : BK);
    lb.load(k_rest < BK ? (int)k_rest : BK);
    la.store(As);
    lb.store(Bs);
    __syncthreads();
    if (STAGES == 2 && la.whole_rows() && lb.whole_rows() && (PARTIAL_UNCHECKED || k % BK == 0)) {
        auto compute_and_stage = [&](int cur) {  // the math on stage cur, the loaded slice into the other
            math(As + cur * a_stage, Bs + cur * b_stage);
            la.store(As + (cur ^ 1) * a_stage);
            lb.store(Bs + (cur ^ 1) * b_stage);
            __syncthreads();
        };
        if (k % BK == 0) {  // every slice whole: one body, the last slice's loads fetch it again (never read)
            for (int t = 0; t < slices; ++t) {
                const int cur = t & 1;
                if (t + 1 == slices) {
                    la.rewind();
                    lb.rewind();
                }
                la.load_whole();
                lb.load_whole();
                compute_and_stage(cur);
            }
            return;
        }
        const int whole = (int)(k / BK);  // slices with all BK columns of depth
        int t = 0;
        for (; t + 1 < whole; ++t) {  // the next slice is whole
            const int cur = t & 1;
            la.load_whole();
            lb.load_whole();
            compute_and_stage(cur);
        }
        for (; t < slices; ++t) {  // the next slice is partial, or there is none (no columns: nothing is read)
            const int cur = t & 1;
            const index_t left = k - (index_t)(t + 1) * BK;
            const int k_left = left <= 0 ? 0 : (left < BK ? (int)left : BK);
            la.load(k_left);
            lb.load(k_left);
            compute_and_stage(cur);
        }
        return;
    }
    for (int t = 0; t < slices; ++t) {
        const bool more = t + 1 < slices;
        k_rest -= BK;
        const int k_left = k_rest < BK ? (int)k_rest : BK;  // depth of the next slice
        if (STAGES == 2) {
            const int cur = t & 1;
            if (more) {
                la.load(k_left);
                lb.load(k_left);
            }
            math(As + cur * a_stage, Bs + cur * b_stage);
            if (more) {
                la.store(As + (cur ^ 1) * a_stage);
                lb.store(Bs + (cur ^ 1) * b_stage);
            }
            __syncthreads();  // the other stage is written before anyone reads it; this one is free to refill
        } else {
            math(As, Bs);
            __syncthreads();  // every warp is done with the slice before it is overwritten
            if (more) {
                la.load(k_left);
                lb.load(k_left);
                la.store(As);
                lb.store(Bs);
            }
            __syncthreads();
        }
    }
}

// The SIMT kernels: every multiply-add a true FP32 (or FP64) FMA. Each k step a thread reads TM values of A and
// TN of B from shared memory (16-byte reads) and does TM * TN FMAs on its register tile.
// WARP_TILED = false (blocktile_2d): thread t owns a contiguous TM x TN patch; the 16 threads of a half-warp read
// B 32 bytes apart, two of them per bank group, a 2-way bank conflict on every B read.
// WARP_TILED = true: each warp owns a WM x WN tile, its lanes an LM x LN grid, and a thread's tile is split into
// 16-byte sub-blocks LM (LN) lanes apart, so a warp's fragment reads are contiguous: broadcasts, no conflicts.
// KSPLIT > 1 (sliced k, for grids too small to fill the GPU): KSPLIT groups of threads each own the whole C tile
// and a 1/KSPLIT share of every slice's depth; their sums meet in shared memory at the end, in a fixed order.
// Stream-K tail (KSPLIT == 1, STAGES == 2): a last wave that would leave SMs idle is avoided by giving the tiles
// from tail_start on to `sk_blocks` blocks (one per resident slot) as equal runs of slices; a tile cut between two
// of them is summed through `partials` by the one that finishes it last. tail_start = the tile count: every block
// owns one tile.
template <typename T, int BM, int BN, int BK, int WM, int WN, int TM, int TN, bool WARP_TILED, int STAGES,
          int MIN_BLOCKS, int KSPLIT, bool A_KC, bool B_KC, bool VEC>
__global__ void __launch_bounds__(BM * BN / (TM * TN) * KSPLIT, MIN_BLOCKS)
    matmul_regtile(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, index_t m, index_t n,
                   index_t k, index_t lda, index_t ldb, int vec_c, index_t tail_start, int sk_blocks, T* partials,
                   unsigned int* counters, index_t batch_a, index_t batch_b, index_t k_last) {
    typedef typename Vec16<T>::type Vec;
    batch_offsets(A, B, C, m * n, batch_a, batch_b, k, k_last);
    constexpr int GROUP = BM * BN / (TM * TN);  // threads that cover the C tile once
    constexpr int THREADS = GROUP * KSPLIT;
    constexpr bool STREAM_K = KSPLIT == 1 && STAGES == 2;  // the tiles that take a stream-K tail (host: stream_k_tail)
    constexpr int V = Vec16<T>::n;
    // One 16-byte vector of padding per shared row: the transposing stores of K_CONTIG loaders hit distinct banks
    // (and rows stay 16-byte aligned for the vector reads).
    constexpr int LDA = BM + V, LDB = BN + V;
    constexpr int LM = WM / TM, LN = WN / TN;
    static_assert(TM % V == 0 && TN % V == 0, "thread tiles are whole 16-byte vectors");
    static_assert(!WARP_TILED || (LM * LN == 32 && BM % WM == 0 && BN % WN == 0), "warp tiles must fill the block");
    static_assert(BM % TM == 0 && BN % TN == 0 && GROUP % 32 == 0, "thread tiles must fill the block");
    static_assert(BK % KSPLIT == 0 && (KSPLIT == 1 || BM * BN <= STAGES * BK * LDA), "k groups and their reduction");
    T* const As = tile_shared<T>(STAGES * BK * (LDA + LDB));
    T* const Bs = As + STAGES * BK * LDA;

    const int tid = threadIdx.x;
    const int kgroup = KSPLIT == 1 ? 0 : tid / GROUP, gtid = KSPLIT == 1 ? tid : tid % GROUP;
    // This thread's first row and column in the block tile, and the distance between its 16-byte sub-blocks.
    constexpr int RSTEP = WARP_TILED ? LM * V : V, CSTEP = WARP_TILED ? LN * V : V;
    int row0, col0;
    if (WARP_TILED) {
        const int warp = gtid / 32, lane = gtid % 32;
        row0 = warp / (BN / WN) * WM + lane / LN * V;
        col0 = warp % (BN / WN) * WN + lane % LN * V;
    } else {
        row0 = gtid / (BN / TN) * TM;
        col0 = gtid % (BN / TN) * TN;
    }

#pragma unroll 1
    for (int j = 0; j < (STREAM_K ? 0x7fffffff : 1); ++j) {
        const WorkPart part = work_part<BM, BN, BK, STREAM_K>(j, m, n, k, tail_start, sk_blocks);
        if (part.first >= part.last) break;
        const index_t k0 = part.first * BK, depth = (part.last * BK < k ? part.last * BK : k) - k0;
        const TileOrigin tile = tile_origin<BM, BN>(m, n, part.tile);
        // All the epilogue needs, computed up front (64-bit divisions after the k loop would spill the
        // accumulators): this thread's first C element, how many rows / columns exist from it on, and whether the
        // tile is cut between two stream-K blocks (the head from k = 0, or the rest).
        T* const c_out = C + (tile.m0 + row0) * n + tile.n0 + col0;
        const int rows_out = (int)(m - tile.m0 < BM ? m - tile.m0 : BM) - row0;
        const int cols_out = (int)(n - tile.n0 < BN ? n - tile.n0 : BN) - col0;
        const bool cut = part.first > 0 || part.last < (k + BK - 1) / BK, head = part.first == 0;

        // k0 is a whole number of slices, so a share's first element keeps the operands' 16-byte alignment.
        TileLoader<T, BM, BK, LDA, THREADS, A_KC, VEC> la(A + (A_KC ? k0 : k0 * lda), lda, tile.m0, m, tid);
        TileLoader<T, BN, BK, LDB, THREADS, B_KC, VEC> lb(B + (B_KC ? k0 : k0 * ldb), ldb, tile.n0, n, tid);

        T acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = T(0);

        k_loop<STAGES, BK, true>(la, lb, As, BK * LDA, Bs, BK * LDB, depth, [&](const T* as, const T* bs) {
            as += kgroup * (BK / KSPLIT) * LDA;  // this group's share of the slice's depth
            bs += kgroup * (BK / KSPLIT) * LDB;
#pragma unroll
            for (int kk = 0; kk < BK / KSPLIT; ++kk) {
                T a[TM], b[TN];
#pragma unroll
                for (int s = 0; s < TM / V; ++s) {
                    const Vec v = *reinterpret_cast<const Vec*>(as + kk * LDA + row0 + s * RSTEP);
#pragma unroll
                    for (int i = 0; i < V; ++i) a[s * V + i] = reinterpret_cast<const T*>(&v)[i];
                }
#pragma unroll
                for (int s = 0; s < TN / V; ++s) {
                    const Vec v = *reinterpret_cast<const Vec*>(bs + kk * LDB + col0 + s * CSTEP);
#pragma unroll
                    for (int j = 0; j < V; ++j) b[s * V + j] = reinterpret_cast<const T*>(&v)[j];
                }
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
            }
        });

        if (KSPLIT > 1) {  // k_loop ended on a barrier: the shared tiles are free to hold the other groups' sums
            for (int g = 1; g < KSPLIT; ++g) {
                if (kgroup == g) {
#pragma unroll
                    for (int i = 0; i < TM; ++i)
#pragma unroll
                        for (int j = 0; j < TN; ++j) As[(i * TN + j) * GROUP + gtid] = acc[i][j];
                }
                __syncthreads();
                if (kgroup == 0) {
#pragma unroll
                    for (int i = 0; i < TM; ++i)
#pragma unroll
                        for (int j = 0; j < TN; ++j) acc[i][j] += As[(i * TN + j) * GROUP + gtid];
                }
                __syncthreads();
            }
            if (kgroup != 0) return;
        }

        // A tile cut by a boundary between two stream-K blocks (the host makes each block's share at least a tile,
        // so a tile has at most two parts: the head from k = 0, the rest from the boundary on). Both blocks store
        // their sums by boundary, as GROUP-strided columns so that each store and load is coalesced; the later one
        // to finish adds the other's into its own (a + b == b + a: the result does not depend on which) and
        // writes C.
        if (STREAM_K && cut) {
            constexpr index_t PART = (index_t)TM * TN * GROUP;
            const index_t boundary = (index_t)blockIdx.x - tail_start + head;  // b: where stream-K block b starts
            T* mine = partials + (2 * boundary + head) * PART + gtid;
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) mine[(i * TN + j) * GROUP] = acc[i][j];
            if (!last_to_arrive(counters + boundary, 2)) continue;
            const T* other = partials + (2 * boundary + !head) * PART + gtid;
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += __ldcg(other + (i * TN + j) * GROUP);
        }

        // C rows are written a sub-block (16 bytes) at a time where n and C allow it (vec_c), element-wise at the edge.
#pragma unroll
        for (int s = 0; s < TM / V; ++s) {
#pragma unroll
            for (int i = 0; i < V; ++i) {
                const int r = s * RSTEP + i;
                if (r >= rows_out) continue;
                T* crow = c_out + r * n;
#pragma unroll
                for (int t = 0; t < TN / V; ++t) {
                    const int c = t * CSTEP;
                    const T* src = &acc[s * V + i][t * V];
                    if (vec_c && c + V <= cols_out) {
                        Vec v;
#pragma unroll
                        for (int j = 0; j < V; ++j) reinterpret_cast<T*>(&v)[j] = src[j];
                        *reinterpret_cast<Vec*>(crow + c) = v;
                    } else {
#pragma unroll
                        for (int j = 0; j < V; ++j)
                            if (c + j < cols_out) crow[c + j] = src[j];
                    }
                }
            }
        }
    }
}

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

// ---- Skinny products: one side of C at most NP long, the other long, k short, so the product is bound by memory.
// A thread computes one line of C across its short side (p <= NP outputs): the short operand S (k x p, zero-padded
// to NP columns) sits in shared memory and is read as broadcast 16-byte vectors, the long one L one element of its
// line per k. Line r's output j is C[r * ldc + j] when ROWS (n short: the block's lines are one contiguous run of C,
// staged through shared memory so that the stores are coalesced), else C[j * ldc + r] (m short: consecutive
// threads store consecutive addresses as they are).
constexpr int SKINNY_THREADS = 128;

template <typename T, int NP, bool ROWS>
__global__ void __launch_bounds__(SKINNY_THREADS) matmul_skinny(const T* __restrict__ L, const T* __restrict__ S,
    T* __restrict__ C, index_t lines, int p, index_t k, index_t l_line, index_t l_k, index_t s_k, index_t s_j,
    index_t ldc) {
    typedef typename Vec16<T>::type V;
    constexpr int W = Vec16<T>::n;
    extern __shared__ __align__(16) unsigned char skinny_shared[];
    T* Ss = reinterpret_cast<T*>(skinny_shared);
    for (index_t i = threadIdx.x; i < k * NP; i += SKINNY_THREADS) {
        const int j = (int)(i % NP);
        Ss[i] = j < p ? S[(i / NP) * s_k + j * s_j] : T(0);
    }
    __syncthreads();
    const index_t first = (index_t)blockIdx.x * SKINNY_THREADS;
    const index_t r = first + threadIdx.x;
    T acc[NP];
#pragma unroll
    for (int j = 0; j < NP; ++j) acc[j] = T(0);
    if (r < lines) {
        const T* line = L + r * l_line;
        for (index_t kk = 0; kk < k; ++kk) {
            const T a = __ldg(line + kk * l_k);
            const V* s = reinterpret_cast<const V*>(Ss + kk * NP);
#pragma unroll
            for (int v = 0; v < NP / W; ++v) {
                union { V vector; T lane[W]; } u;
                u.vector = s[v];
#pragma unroll
                for (int w = 0; w < W; ++w) acc[v * W + w] += a * u.lane[w];
            }
        }
    }
    if (!ROWS) {
        if (r < lines) {
#pragma unroll
            for (int j = 0; j < NP; ++j)
                if (j < p) C[j * ldc + r] = acc[j];
        }
        return;
    }
    __syncthreads();  // S is read: its shared memory now stages the block's rows, p + 1 apart
#pragma unroll
    for (int j = 0; j < NP; ++j)
        if (j < p) Ss[threadIdx.x * (p + 1) + j] = acc[j];
    __syncthreads();
    const index_t here = lines - first < SKINNY_THREADS ? lines - first : SKINNY_THREADS;
    T* out = C + first * ldc;  // ldc == p: the block's rows are here * p consecutive elements
    for (int i = threadIdx.x; i < here * p; i += SKINNY_THREADS) out[i] = Ss[(i / p) * (p + 1) + i % p];
}

// ---- Tiny C, long k: each block takes a run of k for one DM x DN part of C, its threads striding over that run
// (thread t takes k = t of every DOTS_THREADS), each keeping all DM x DN sums; the block adds its threads' sums in a
// fixed order and stores them as one partial C (partials[blockIdx.x]), which splitk_sum adds up. A batch of
// `count` products, batch_a and batch_b elements apart, numbers its blocks run by run, product by product
// (blockIdx.x = run * count + product), so that the partials of one run are the batch's Cs one after the other:
// for one run, C itself.
constexpr int DOTS_THREADS = 256;

// One step of a warp's reduce-scatter over the first 2 * HALF of acc: a lane keeps the upper half where its bit
// `o` is set (else the lower) and adds its partner's (lane ^ o) copy of that half, into acc[0, HALF).
template <int HALF, typename T>
__device__ __forceinline__ void dots_halve(T* acc, int lane, int o) {
    const bool upper = lane & o;
#pragma unroll
    for (int e = 0; e < HALF; ++e) {
        const T send = upper ? acc[e] : acc[e + HALF];
        acc[e] = (upper ? acc[e + HALF] : acc[e]) + __shfl_xor_sync(0xffffffffu, send, o);
    }
}

template <typename T, int DM, int DN>
__global__ void __launch_bounds__(DOTS_THREADS, sizeof(T) == 4 ? 2 : 1) matmul_dots(const T* __restrict__ A,
    const T* __restrict__ B, T* __restrict__ partials, index_t m, index_t n, index_t k, index_t run, index_t a_m,
    index_t a_k, index_t b_k, index_t b_n, index_t count, index_t batch_a, index_t batch_b) {
    constexpr int SUMS = DM * DN, WARPS = DOTS_THREADS / 32;
    static_assert(SUMS % 32 == 0, "the warp's reduce-scatter leaves each lane SUMS / 32 sums");
    __shared__ T warp_sums[WARPS][SUMS];
    const index_t product = (index_t)blockIdx.x % count, r = (index_t)blockIdx.x / count;
    A += product * batch_a;
    B += product * batch_b;
    const index_t i0 = (index_t)blockIdx.y * DM, j0 = (index_t)blockIdx.z * DN;
    const index_t k_end = (r + 1) * run < k ? (r + 1) * run : k;
    const int t = threadIdx.x;
    T acc[SUMS];
#pragma unroll
    for (int e = 0; e < SUMS; ++e) acc[e] = T(0);
    for (index_t kk = r * run + t; kk < k_end; kk += DOTS_THREADS) {
        T a[DM], b[DN];
#pragma unroll
        for (int i = 0; i < DM; ++i) a[i] = i0 + i < m ? __ldg(A + (i0 + i) * a_m + kk * a_k) : T(0);
#pragma unroll
        for (int j = 0; j < DN; ++j) b[j] = j0 + j < n ? __ldg(B + kk * b_k + (j0 + j) * b_n) : T(0);
#pragma unroll
        for (int i = 0; i < DM; ++i)
#pragma unroll
            for (int j = 0; j < DN; ++j) acc[i * DN + j] += a[i] * b[j];
    }
    // Reduce-scatter across the warp (dots_halve five times): each lane ends with SUMS / 32 of the warp's totals,
    // from sum e0 on, e0 spelled out by the lane's bits. Warps past the run's end hold only zeros: they skip it,
    // and the block's sum leaves them out.
    const int warp = t / 32, lane = t % 32;
    const index_t lines = k_end - r * run;
    const int busy = lines < DOTS_THREADS ? (int)(lines + 31) / 32 : WARPS;
    if (warp < busy) {
        dots_halve<SUMS / 2>(acc, lane, 16);
        dots_halve<SUMS / 4>(acc, lane, 8);
        dots_halve<SUMS / 8>(acc, lane, 4);
        dots_halve<SUMS / 16>(acc, lane, 2);
        dots_halve<SUMS / 32>(acc, lane, 1);
        const int e0 = (lane & 16 ? SUMS / 2 : 0) + (lane & 8 ? SUMS / 4 : 0) + (lane & 4 ? SUMS / 8 : 0) +
                       (lane & 2 ? SUMS / 16 : 0) + (lane & 1 ? SUMS / 32 : 0);
#pragma unroll
        for (int e = 0; e < SUMS / 32; ++e) warp_sums[warp][e0 + e] = acc[e];
    }
    __syncthreads();
    for (int e = t; e < SUMS; e += DOTS_THREADS) {
        const index_t i = i0 + e / DN, j = j0 + e % DN;
        if (i < m && j < n) {
            T sum = warp_sums[0][e];
            for (int w = 1; w < busy; ++w) sum += warp_sums[w][e];
            partials[(index_t)blockIdx.x * m * n + i * n + j] = sum;
        }
    }
}

// ---- Batches of small products: one block per BM x BN tile of one product (blockIdx.x the tile, blockIdx.y the
// product), the whole C of a small product in one or a few blocks, so that a batch of tiny products is not one
// padded 64 x 64 tile each. The block's rows of A and columns of B, over the whole of k (the host keeps k short and
// sizes the dynamic shared memory to it), are copied into shared memory at once with cp.async: no registers hold
// them on the way, so more blocks stay resident and more of their loads are in flight. A thread then keeps OUT
// consecutive rows of one column of the tile: per k step one read of B and OUT / W vector reads of A (stored
// k-major), broadcast across the lanes that share the rows. Any strides: each operand is copied along whichever of
// its indices is contiguous (a_k == 1: along k), in slices of BK.
constexpr int SMALL_THREADS = 256;

template <typename T>
__device__ __forceinline__ void copy_element_async(T* shared_dst, const T* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned dst = (unsigned)__cvta_generic_to_shared(shared_dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(src), "n"(sizeof(T)) : "memory");
#else
    *shared_dst = __ldg(src);
#endif
}

__device__ __forceinline__ void copies_arrived() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
    __syncthreads();
}

template <typename T, int BM, int BN, int BK>
__global__ void __launch_bounds__(SMALL_THREADS) matmul_batched_small(const T* __restrict__ A,
    const T* __restrict__ B, T* __restrict__ C, index_t m, index_t n, index_t k, index_t a_m, index_t a_k,
    index_t b_k, index_t b_n, index_t batch_a, index_t batch_b, index_t batch_c, int tiles_n) {
    typedef typename Vec16<T>::type V;
    constexpr int W = Vec16<T>::n;
    constexpr int OUT = BM * BN / SMALL_THREADS;
    constexpr int LDA = BM % W == 0 ? BM + W : BM;  // rows of As stay 16-byte aligned, k-wise copies spread
    constexpr int LDB = BN + 1;  // + 1: a k-wise copy of B spreads over the banks
    constexpr int A_LOADS = (BM * BK + SMALL_THREADS - 1) / SMALL_THREADS;
    constexpr int B_LOADS = (BK * BN + SMALL_THREADS - 1) / SMALL_THREADS;
    static_assert(OUT >= 1 && SMALL_THREADS % BN == 0 && BM * BN % SMALL_THREADS == 0, "tile shape");
    T* const As = tile_shared<T>((int)k * (LDA + LDB));  // k rows of LDA, then k rows of LDB
    T* const Bs = As + k * LDA;

    A += blockIdx.y * batch_a;
    B += blockIdx.y * batch_b;
    C += blockIdx.y * batch_c;
    const index_t i0 = (index_t)(blockIdx.x / tiles_n) * BM, j0 = (index_t)(blockIdx.x % tiles_n) * BN;
    // Element e = t + l * SMALL_THREADS of a slice, ordered along the operand's contiguous index, is this thread's
    // first element plus l steps of (rows, k): along k, SMALL_THREADS / BK rows a step; else SMALL_THREADS / BM of k.
    const int t = threadIdx.x;
    const bool a_along_k = a_k == 1 && a_m != 1, b_along_k = b_k == 1 && b_n != 1;
    const int a_i = a_along_k ? t / BK : t % BM, a_kk = a_along_k ? t % BK : t / BM;
    const int a_di = a_along_k ? SMALL_THREADS / BK : 0, a_dk = a_along_k ? 0 : SMALL_THREADS / BM;
    const int b_j = b_along_k ? t / BK : t % BN, b_kk = b_along_k ? t % BK : t / BN;
    const int b_dj = b_along_k ? SMALL_THREADS / BK : 0, b_dk = b_along_k ? 0 : SMALL_THREADS / BN;
    const T* a_ptr = A + (i0 + a_i) * a_m + a_kk * a_k;
    const T* b_ptr = B + b_kk * b_k + (j0 + b_j) * b_n;
    const index_t a_step = a_di * a_m + a_dk * a_k, b_step = b_dk * b_k + b_dj * b_n;
    for (index_t k0 = 0; k0 < k; k0 += BK) {  // every slice's copies issued before any is waited for
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int kk = a_kk + l * a_dk;
            if (t + l * SMALL_THREADS >= BM * BK || k0 + kk >= k) continue;
            T* dst = &As[(k0 + kk) * LDA + a_i + l * a_di];
            if (i0 + a_i + l * a_di < m) copy_element_async(dst, a_ptr + k0 * a_k + l * a_step);
            else *dst = T(0);
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int kk = b_kk + l * b_dk;
            if (t + l * SMALL_THREADS >= BK * BN || k0 + kk >= k) continue;
            T* dst = &Bs[(k0 + kk) * LDB + b_j + l * b_dj];
            if (j0 + b_j + l * b_dj < n) copy_element_async(dst, b_ptr + k0 * b_k + l * b_step);
            else *dst = T(0);
        }
    }
    copies_arrived();

    // One k step: this thread's OUT rows from As (16-byte reads where they hold whole vectors) times B's element.
    const int col = t % BN, row0 = t / BN * OUT;
    T acc[OUT];
#pragma unroll
    for (int o = 0; o < OUT; ++o) acc[o] = T(0);
    auto step = [&](index_t kk) {
        const T b = Bs[kk * LDB + col];
        const T* a_row = As + kk * LDA + row0;
        if constexpr (OUT % W == 0) {
#pragma unroll
            for (int v = 0; v < OUT / W; ++v) {
                union { V vector; T lane[W]; } a;
                a.vector = *reinterpret_cast<const V*>(a_row + v * W);
#pragma unroll
                for (int w = 0; w < W; ++w) acc[v * W + w] += a.lane[w] * b;
            }
        } else {
#pragma unroll
            for (int o = 0; o < OUT; ++o) acc[o] += a_row[o] * b;
        }
    };
    index_t kk = 0;
    for (; kk + BK <= k; kk += BK) {
#pragma unroll
        for (int s = 0; s < BK; ++s) step(kk + s);
    }
    for (; kk < k; ++kk) step(kk);
    const index_t j = j0 + col;
    if (j >= n) return;
#pragma unroll
    for (int o = 0; o < OUT; ++o) {
        const index_t i = i0 + row0 + o;
        if (i < m) C[i * n + j] = acc[o];
    }
}

// ---- Batches of tiny products (m <= BM, n <= BN, both at most 32; rows of A and B contiguous): one block per
// product, GROUPS groups of 8 x BN / 4 threads. Each group copies a chunk of k of A (m x k) and B (k x n) into shared
// memory as they lie, rows padded: 16 bytes a cp.async where every row starts on 16 bytes (VEC), else an element at a
// time. One group takes TINY_CHUNK of k at a time (a short k whole); GROUPS > 1 take consecutive TINY_SPLIT_CHUNKs
// side by side, so that a deep k with few products per SM keeps GROUPS chunks in flight per block, and add their
// sums in shared memory in group order at the end. Thread (ty, tx) of a group keeps rows ty, ty + 8, ... and columns
// 4 tx .. 4 tx + 3 of C: per W-deep step of k one vector read per row of A and W reads of its 4 columns of B, for
// BM / 8 * 4 * W multiply-adds (the small-product kernel's threads do 1 * OUT per two reads). A warp's reads of A hit
// consecutive rows, which a pitch of 4 (mod 8) words spreads over distinct banks.
constexpr int TINY_ROW_THREADS = 8;
constexpr int TINY_COLS = 4;
constexpr int TINY_CHUNK = 64;  // the depth of k one group stages at once: a longer k is summed chunk by chunk
constexpr int TINY_SPLIT_CHUNK = 32;  // ... where several groups share the block
static_assert(TINY_CHUNK % Vec16<float>::n == 0 && TINY_SPLIT_CHUNK % Vec16<float>::n == 0,
              "every chunk but the last starts on a whole 16-byte vector");

// f(i, j) for the elements e = first, first + step, ... of a rows x cols grid (e = i * cols + j): one division in all.
template <typename F>
__device__ __forceinline__ void for_grid(int rows, int cols, int first, int step, F&& f) {
    int i = first / cols, j = first - i * cols;
    const int di = step / cols, dj = step - di * cols;
    for (; i < rows; i += di) {
        f(i, j);
        j += dj;
        if (j >= cols) {
            j -= cols;
            ++i;
        }
    }
}

template <typename T>
__device__ __forceinline__ void copy_chunk_async(T* shared_dst, const T* src, int bytes) {  // bytes < 16: zero-filled
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned dst = (unsigned)__cvta_generic_to_shared(shared_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
#else
    constexpr int W = Vec16<T>::n;
#pragma unroll
    for (int w = 0; w < W; ++w) shared_dst[w] = w * (int)sizeof(T) < bytes ? __ldg(src + w) : T(0);
#endif
}

template <typename T, int BM, int BN, bool VEC, int GROUPS>
__global__ void __launch_bounds__(GROUPS * TINY_ROW_THREADS * BN / TINY_COLS) matmul_batched_tiny(
    const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int m, int n, int k, index_t lda,
    index_t ldb, index_t batch_a, index_t batch_b, index_t batch_c, int vec_c) {
    typedef typename Vec16<T>::type V;
    union Lanes { V vector; T lane[Vec16<T>::n]; };
    constexpr int W = Vec16<T>::n, TM = BM / TINY_ROW_THREADS, TX = BN / TINY_COLS, THREADS = TINY_ROW_THREADS * TX;
    constexpr int CHUNK = GROUPS == 1 ? TINY_CHUNK : TINY_SPLIT_CHUNK;
    static_assert(BM % TINY_ROW_THREADS == 0 && BN % TINY_COLS == 0 && TINY_COLS % W == 0, "tile shape");
    const int chunk = k < CHUNK ? k : CHUNK;  // the depth a group stages at once
    const int chunk_w = (chunk + W - 1) / W * W;
    const int pitch = chunk_w % (2 * W) == 0 ? chunk_w + W : chunk_w;  // W (mod 2 W) elements: 4 (mod 8) words
    const int staging = BM * pitch + chunk_w * BN;  // BM rows of `pitch`, then chunk_w rows of BN
    const int region = GROUPS == 1 || staging >= BM * BN ? staging : BM * BN;  // a group's: its staging, its sums
    const int group = GROUPS == 1 ? 0 : (int)threadIdx.x / THREADS;
    T* const As = tile_shared<T>(GROUPS * region) + group * region;
    T* const Bs = As + BM * pitch;

    const index_t z = blockIdx.x;
    A += z * batch_a;
    B += z * batch_b;
    C += z * batch_c;
    const int t = (int)threadIdx.x - group * THREADS;
    const int tx = t % TX, ty = t / TX;
    T acc[TM][TINY_COLS];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int c = 0; c < TINY_COLS; ++c) acc[r][c] = T(0);
    for (int base = 0; base < k; base += GROUPS * chunk) {  // every group passes every barrier
        const int k0 = base + group * chunk;
        const int depth = k - k0 < 0 ? 0 : k - k0 < chunk ? k - k0 : chunk;
        const int kw = (depth + W - 1) / W * W;  // this chunk in whole vectors; A's tail and B's rows past it zeros
        const T* a = A + k0;
        const T* b = B + (index_t)k0 * ldb;
        if (base) __syncthreads();  // every thread is done with the previous chunk
        if (VEC && depth) {
            for_grid(m, kw / W, t, THREADS, [&](int i, int c) {
                const int p = c * W;
                copy_chunk_async(As + i * pitch + p, a + i * lda + p, (depth - p < W ? depth - p : W) * (int)sizeof(T));
            });
            for_grid(depth, (n + W - 1) / W, t, THREADS, [&](int p, int c) {
                const int j = c * W;
                copy_chunk_async(Bs + p * BN + j, b + p * ldb + j, (n - j < W ? n - j : W) * (int)sizeof(T));
            });
            for (int e = t; e < (kw - depth) * BN; e += THREADS) Bs[depth * BN + e] = T(0);
        } else if (depth) {
            for_grid(m, kw, t, THREADS, [&](int i, int p) {
                if (p < depth) copy_element_async(As + i * pitch + p, a + i * lda + p);
                else As[i * pitch + p] = T(0);
            });
            for_grid(kw, n, t, THREADS, [&](int p, int j) {
                if (p < depth) copy_element_async(Bs + p * BN + j, b + p * ldb + j);
                else Bs[p * BN + j] = T(0);
            });
        }
        copies_arrived();

        for (int kk = 0; kk < kw; kk += W) {
            Lanes av[TM], bv[W][TINY_COLS / W];
#pragma unroll
            for (int r = 0; r < TM; ++r)
                av[r].vector = *reinterpret_cast<const V*>(As + (ty + r * TINY_ROW_THREADS) * pitch + kk);
#pragma unroll
            for (int w = 0; w < W; ++w)
#pragma unroll
                for (int v = 0; v < TINY_COLS / W; ++v)
                    bv[w][v].vector = *reinterpret_cast<const V*>(Bs + (kk + w) * BN + tx * TINY_COLS + v * W);
#pragma unroll
            for (int r = 0; r < TM; ++r)
#pragma unroll
                for (int w = 0; w < W; ++w)
#pragma unroll
                    for (int c = 0; c < TINY_COLS; ++c) acc[r][c] += av[r].lane[w] * bv[w][c / W].lane[c % W];
        }
    }
    if (GROUPS > 1) {  // groups 1.. leave their sums in their regions; group 0 adds them in order
        __syncthreads();
        if (group) {
#pragma unroll
            for (int r = 0; r < TM; ++r)
#pragma unroll
                for (int c = 0; c < TINY_COLS; ++c) As[(ty + r * TINY_ROW_THREADS) * BN + tx * TINY_COLS + c] = acc[r][c];
        }
        __syncthreads();
        if (group) return;
        for (int g = 1; g < GROUPS; ++g)
#pragma unroll
            for (int r = 0; r < TM; ++r)
#pragma unroll
                for (int c = 0; c < TINY_COLS; ++c)
                    acc[r][c] += As[g * region + (ty + r * TINY_ROW_THREADS) * BN + tx * TINY_COLS + c];
    }
    const int j = tx * TINY_COLS;
    if (j >= n) return;
#pragma unroll
    for (int r = 0; r < TM; ++r) {
        const int i = ty + r * TINY_ROW_THREADS;
        if (i >= m) break;
        T* row = C + (index_t)i * n + j;
        if (vec_c) {  // n a multiple of TINY_COLS, every row on 16 bytes: j + TINY_COLS <= n
#pragma unroll
            for (int v = 0; v < TINY_COLS / W; ++v) {
                Lanes out;
#pragma unroll
                for (int w = 0; w < W; ++w) out.lane[w] = acc[r][v * W + w];
                *reinterpret_cast<V*>(row + v * W) = out.vector;
            }
        } else {
#pragma unroll
            for (int c = 0; c < TINY_COLS; ++c)
                if (j + c < n) row[c] = acc[r][c];
        }
    }
}
