// matmul_tc.cu's step 2, its math (included at its end): the fragment reader, the k loop's pipeline and
// matmul_tc_mma.

template <bool B> struct TcBool { static constexpr bool value = B; };

// A warp's fragments of one K-deep step ks of a slice (slot at byte address s): FM 16-row fragments of A from row wm
// on, FN 8-column fragments of B from column wn on. Each lane's byte offsets in a slot are one per-thread base, XORed
// with a constant (the chunk positions the swizzle moves: the step's chunks, or the fragment's) and plus a constant
// (the lines it does not move): the swizzle acts on whole bits of a chunk index when chunks per line, WM and WN are
// powers of 2, and the lines of a step or fragment start on multiples of its 8-line period.
template <typename T_, bool A_KC, bool B_KC, int BM, int BN, int BK, int WM, int WN, bool RAW = false>
struct FragmentReader {  // RAW: float32 fragments keep their bits (split_tf32 takes them apart), else rounded to TF32
    typedef T_ T;
    typedef SwizzledTile<T, BM, BK, A_KC> TileA;
    typedef SwizzledTile<T, BN, BK, B_KC> TileB;
    static constexpr int FM = WM / 16, FN = WN / 8, K = Mma<T>::K, KCH = K * (int)sizeof(T) / 16;  // KCH = 2
    static constexpr unsigned LA = TileA::CHUNKS * 16, LB = TileB::CHUNKS * 16;  // bytes per line
    static_assert((TileA::CHUNKS & (TileA::CHUNKS - 1)) == 0 && (TileB::CHUNKS & (TileB::CHUNKS - 1)) == 0 &&
                  (WM & (WM - 1)) == 0 && (WN & (WN - 1)) == 0, "powers of 2");
    unsigned a0, b0;  // this lane's offsets of step 0's first fragments

    __device__ __forceinline__ FragmentReader(int wm, int wn, int lane) {
        const int g = lane / 4, t = lane % 4;
        if (A_KC)  // lines = rows: matrices (rows 0-7, 8-15) x (chunk 0, 1) in the order a[0..3]
            a0 = TileA::offset(wm + lane % 16, lane / 16);
        else if (!TileA::SCALAR)  // lines = k: matrices (k 0-7, 8-15) x (rows 0-7, 8-15), transposed
            a0 = TileA::offset(lane % 8 + lane / 16 * 8, wm / 8 + lane / 8 % 2);
        else  // 4-byte loads: line t, row g of the fragment
            a0 = TileA::offset(t, (wm + g) / 4) + g % 4 * 4;
        if (B_KC)  // lines = columns: matrices (cols 0-7) x (chunk 0, 1), then (cols 8-15) x (chunk 0, 1)
            b0 = TileB::offset(wn + lane % 8 + lane / 16 * 8, lane / 8 % 2);
        else if (!TileB::SCALAR)  // lines = k: matrices (k 0-7, 8-15) x (cols 0-7), then cols 8-15, transposed
            b0 = TileB::offset(lane % 8 + lane / 8 % 2 * 8, wn / 8 + lane / 16);
        else
            b0 = TileB::offset(t, (wn + g) / 4) + g % 4 * 4;
    }

    __device__ __forceinline__ void a(unsigned (&f)[FM][4], unsigned s, int ks) const {
#pragma unroll
        for (int i = 0; i < FM; ++i) {
            if (A_KC) {
                ldmatrix_x4(f[i], s + (a0 ^ ks * KCH * 16) + i * 16 * LA);
            } else if (!TileA::SCALAR) {
                ldmatrix_x4_trans(f[i], s + (a0 ^ i * 2 * 16) + ks * 16 * LA);
            } else {  // a[q]: line t + q / 2 * 4, row g + q % 2 * 8 (chunk + 2)
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    f[i][q] = __float_as_uint(lds_f32(s + (a0 ^ (i * 4 + q % 2 * 2) * 16) + (ks * 8 + q / 2 * 4) * LA));
            }
            if (sizeof(T) == 4 && !RAW)
#pragma unroll
                for (int q = 0; q < 4; ++q) f[i][q] = to_tf32(__uint_as_float(f[i][q]));
        }
    }

    __device__ __forceinline__ void b(unsigned (&f)[FN][2], unsigned s, int ks) const {
#pragma unroll
        for (int j = 0; j < FN; j += 2) {  // two 8-column fragments per ldmatrix
            unsigned r[4];
            if (B_KC) {
                ldmatrix_x4(r, s + (b0 ^ ks * KCH * 16) + j * 8 * LB);
            } else if (!TileB::SCALAR) {
                ldmatrix_x4_trans(r, s + (b0 ^ j * 16) + ks * 16 * LB);
            } else {  // r[q]: line t + q % 2 * 4, column g + q / 2 * 8 (chunk + 2)
#pragma unroll
                for (int q = 0; q < 4; ++q)
                    r[q] = __float_as_uint(lds_f32(s + (b0 ^ (j * 2 + q / 2 * 2) * 16) + (ks * 8 + q % 2 * 4) * LB));
            }
#pragma unroll
            for (int q = 0; q < 4; ++q)
                f[j + q / 2][q % 2] = sizeof(T) == 4 && !RAW ? to_tf32(__uint_as_float(r[q])) : r[q];
        }
    }
};

// float32 as three TF32 products (X3): x = head + tail exactly, head x's top 11 significant bits (truncated: bit
// operations only, no conversions) and tail the rest, which the tensor cores read to its top 11 bits (they drop a
// TF32 operand's low 13 bits, as on sm_80 and sm_90); a product is head·head + head·tail + tail·head, each term off
// by at most 2^-21 of it and the dropped tail·tail at most 2^-20. Infinities and NaN take part in head·head alone:
// their tails are 0 and the cross terms see a finite head of 0, so no inf - inf and no 0·inf appears there. Two
// inputs stay wrong, as in one TF32 product: a NaN whose payload lies only in the low 13 bits reads as infinity,
// and a value below 2^-136 in magnitude has a head of 0 (times an infinity: NaN).
struct Tf32Parts {
    unsigned head, finite_head, tail;
};
__device__ __forceinline__ Tf32Parts split_tf32(unsigned x) {
    const unsigned head = x & 0xffffe000u;
    const bool finite = (x & 0x7f800000u) != 0x7f800000u;
    const float tail = __uint_as_float(x) - __uint_as_float(head);
    return {head, finite ? head : 0u, finite ? __float_as_uint(tail) : 0u};
}

// One K-deep step of a warp's products in X3: the small terms first, each pass over every accumulator before the
// next, so that no mma waits on the one before it.
template <int FM, int FN>
__device__ __forceinline__ void mma_x3(float (&d)[FM][FN][4], const unsigned (&fa)[FM][4], const unsigned (&fb)[FN][2]) {
    unsigned ah[FM][4], af[FM][4], at[FM][4], bh[FN][2], bf[FN][2], bt[FN][2];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const Tf32Parts p = split_tf32(fa[i][q]);
            ah[i][q] = p.head, af[i][q] = p.finite_head, at[i][q] = p.tail;
        }
#pragma unroll
    for (int j = 0; j < FN; ++j)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const Tf32Parts p = split_tf32(fb[j][q]);
            bh[j][q] = p.head, bf[j][q] = p.finite_head, bt[j][q] = p.tail;
        }
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) Mma<float>::run(d[i][j], at[i], bf[j]);
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) Mma<float>::run(d[i][j], af[i], bt[j]);
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) Mma<float>::run(d[i][j], ah[i], bh[j]);
}

// The main loop of matmul_tc_mma: slices t < end, copying slice t + STAGES - 1 as they go (WHOLE: it exists and
// lies inside the operands' edges). Per slice one commit group and one barrier; fragments double-buffered across the
// steps of a slice and across slices: each step reads the next step's fragments, issues its part of the copies, then
// multiplies. The last step waits for slice t + 1, passes the barrier and reads that slice's first fragments before
// its own products, so the tensor cores have work while the loads are in flight. X3: the products of a slice go to
// `part`, which is added into acc at the slice's end and cleared (the tensor cores' sums keep no rounding bias over
// more than a slice); otherwise part is acc.
template <bool WHOLE, int STEPS, int STAGES, bool X3, typename Reader, typename LoadA, typename LoadB, int FM, int FN>
__device__ __forceinline__ void tc_main_loop(int& t, int end, int slices, int& rs, int& ws, unsigned sa, unsigned sb,
                                             const Reader& rd, LoadA& la, LoadB& lb, unsigned (&fa)[2][FM][4],
                                             unsigned (&fb)[2][FN][2], float (&acc)[FM][FN][4],
                                             float (&part)[FM][FN][4]) {
    typedef typename Reader::TileA TileA;
    typedef typename Reader::TileB TileB;
    typedef typename Reader::T T;
    for (; t < end; ++t) {
        const unsigned as = sa + rs * TileA::BYTES, bs = sb + rs * TileB::BYTES;
        const bool more = WHOLE || t + STAGES - 1 < slices;
#pragma unroll
        for (int ks = 0; ks < STEPS; ++ks) {
            if (ks + 1 < STEPS) {  // the next step's fragments are on their way during this step's products
                rd.a(fa[(ks + 1) % 2], as, ks + 1);
                rd.b(fb[(ks + 1) % 2], bs, ks + 1);
            }
            if (more) {  // slot ws was last read in slice t - 1, before the barrier that ended it
                la.template load<WHOLE>(sa + ws * TileA::BYTES, ks, STEPS);
                lb.template load<WHOLE>(sb + ws * TileB::BYTES, ks, STEPS);
            }
            if (ks + 1 == STEPS) {
                cp_async_commit();
                cp_async_wait<STAGES - 2>();  // slice t + 1 has landed (this thread's copies) ...
                __syncthreads();              // ... everyone's; and every warp is done with slice t's fragments
                rs = rs + 1 == STAGES ? 0 : rs + 1;
                ws = ws + 1 == STAGES ? 0 : ws + 1;
                // slice t + 1's first fragments (past the last slice: stale values of a slot, never used)
                rd.a(fa[0], sa + rs * TileA::BYTES, 0);
                rd.b(fb[0], sb + rs * TileB::BYTES, 0);
            }
            if (X3) {
                mma_x3(part, fa[ks % 2], fb[ks % 2]);
            } else {
#pragma unroll
                for (int i = 0; i < FM; ++i)
#pragma unroll
                    for (int j = 0; j < FN; ++j) {
                        const int jj = i % 2 ? FN - 1 - j : j;  // serpentine: consecutive products share a fragment
                        Mma<T>::run(part[i][jj], fa[ks % 2][i], fb[ks % 2][jj]);
                    }
            }
        }
        if (X3)
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j)
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        acc[i][j][q] += part[i][j][q];
                        part[i][j][q] = 0.0f;
                    }
    }
}

// Shared memory of a block of a tile: the ring of slices, or C's tile (rows padded by 8 elements, whole 16-byte
// chunks, so neither the fragment stores nor the row reads conflict) when that is larger. The host's
// TcTile.shared_bytes is the same formula.
template <typename T, int BM, int BN, int BK, int STAGES>
struct TcShared {
    static constexpr int CLD = BN + 8;
    static constexpr int SLICES = STAGES * (BM + BN) * BK * (int)sizeof(T), C = BM * CLD * (int)sizeof(T);
    static constexpr int BYTES = SLICES > C ? SLICES : C;
};

// The Ampere tensor-core kernel: BM x BN block tiles, BK-deep slices in a STAGES-slot cp.async ring (tc_main_loop),
// each warp a WM x WN tile of m16n8 accumulators; C leaves through shared memory in 16-byte row chunks. X3: float32
// as three TF32 products (mma_x3), summed a slice at a time. ALIGNED = false: ElementLoader's copies (any alignment).
template <typename T, bool A_KC, bool B_KC, int BM, int BN, int BK, int WM, int WN, int STAGES, bool X3 = false,
          bool ALIGNED = true>
__global__ void __launch_bounds__(BM / WM * (BN / WN) * 32, 1)  // 1: else ptxas trades registers for spills
    matmul_tc_mma(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int m, int n, int k,
                  index_t lda, index_t ldb, index_t batch_a, index_t batch_b, int k_last) {
#if __CUDA_ARCH__ >= 800
    constexpr int THREADS = BM / WM * (BN / WN) * 32, FM = WM / 16, FN = WN / 8, STEPS = BK / Mma<T>::K;
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % Mma<T>::K == 0 && STAGES >= 3, "tile shape");
    static_assert(STEPS % 2 == 0, "a slice's steps end on the fragment buffer the next slice starts on");
    static_assert(!X3 || sizeof(T) == 4, "three TF32 products are for float32");
    typedef FragmentReader<T, A_KC, B_KC, BM, BN, BK, WM, WN, X3> Reader;
    typedef typename Reader::TileA TileA;
    typedef typename Reader::TileB TileB;
    typedef TcShared<T, BM, BN, BK, STAGES> Shared;
    extern __shared__ __align__(128) unsigned char tc_slices[];  // STAGES slices of A, then STAGES of B; then C
    const unsigned sa = smem_u32(tc_slices), sb = sa + STAGES * TileA::BYTES;

    tc_batch_offsets(A, B, C, m, n, batch_a, batch_b);
    if (blockIdx.z == gridDim.z - 1) k = k_last;
    int m0, n0;
    tc_tile_origin(m, n, BM, BN, BN >= 2 * BM ? 16 : 8, m0, n0);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / (BN / WN) * WM, wn = warp % (BN / WN) * WN;
    const Reader rd(wm, wn, lane);
    typename Loader<ALIGNED, T, BM, BK, A_KC, THREADS>::type la(A, lda, m0, m, k, tid);
    typename Loader<ALIGNED, T, BN, BK, B_KC, THREADS>::type lb(B, ldb, n0, n, k, tid);

    const int slices = (k + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {  // fill the ring but one slot; a group per slot, empty or not
        if (s < slices) {
            la.template load<false>(sa + s * TileA::BYTES, 0, 1);
            lb.template load<false>(sb + s * TileB::BYTES, 0, 1);
        }
        cp_async_commit();
    }

    float acc[FM][FN][4], part[FM][FN][4];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[i][j][q] = part[i][j][q] = 0.0f;
    float (&sums)[FM][FN][4] = X3 ? part : acc;  // where the products go (X3: a slice's, then added into acc)
    unsigned fa[2][FM][4], fb[2][FN][2];

    cp_async_wait<STAGES - 2>();  // slice 0 has landed
    __syncthreads();
    rd.a(fa[0], sa, 0);
    rd.b(fb[0], sb, 0);
    int rs = 0, ws = STAGES - 1;  // the slots of slice t and of slice t + STAGES - 1, which is slot (t - 1) % STAGES
    int t = 0;
    // An interior block's slices before the last whole ones copy without bounds checks; the rest check.
    const int whole = m0 + BM <= m && n0 + BN <= n ? k / BK - (STAGES - 1) : 0;
    tc_main_loop<true, STEPS, STAGES, X3>(t, whole, slices, rs, ws, sa, sb, rd, la, lb, fa, fb, acc, sums);
    tc_main_loop<false, STEPS, STAGES, X3>(t, slices, slices, rs, ws, sa, sb, rd, la, lb, fa, fb, acc, sums);
    cp_async_wait<0>();  // (only empty groups can be left) nothing is in flight when the block exits
    __syncthreads();     // every warp is done with the slices: C's tile takes their place

    // Out of the registers, rounded to T, into C's tile in shared memory: lane (g, t) holds D[g][2t, 2t+1] and
    // D[g+8][2t, 2t+1] of each m16n8 block. Then out to global memory in 16-byte rows of chunks.
    T* const cs = reinterpret_cast<T*>(tc_slices);
    {
        T* const c0 = cs + (wm + lane / 4) * Shared::CLD + wn + lane % 4 * 2;
#pragma unroll
        for (int i = 0; i < FM; ++i)
#pragma unroll
            for (int j = 0; j < FN; ++j)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    store_pair(c0 + (i * 16 + h * 8) * Shared::CLD + j * 8, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
    }
    __syncthreads();
    constexpr int V = 16 / sizeof(T), CH = BN / V;  // elements per chunk, chunks per row
    const bool vectors = n % V == 0 && reinterpret_cast<unsigned long long>(C) % 16 == 0;
#pragma unroll 4
    for (int e = tid; e < BM * CH; e += THREADS) {
        const int r = e / CH, c = e % CH * V, row = m0 + r, col = n0 + c;
        if (row >= m) break;  // rows only grow with e
        const T* const s = cs + r * Shared::CLD + c;
        T* const d = C + (index_t)row * n + col;
        if (vectors && col + V <= n) {
            *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(s);
        } else {
#pragma unroll
            for (int q = 0; q < V; ++q)
                if (col + q < n) d[q] = s[q];
        }
    }
#endif
}
