// matmul.cu's register-tiled kernels (included by it after the seeds): the tile helpers, the k-major tile
// loaders, the k loop's pipeline and matmul_regtile.

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

