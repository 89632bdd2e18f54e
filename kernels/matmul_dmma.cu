// FP64 matrix product on the tensor cores (DMMA), the Ampere pipeline design: each block's operand slices move
// global -> shared with cp.async into a STAGES-deep ring (one barrier per slice), warps read their fragments from
// XOR-swizzled shared tiles with conflict-free loads and multiply with mma.sync (m16n8k16 or m16n8k8 on sm_90,
// m8n8k4 on sm_80). No CUDA headers: every tensor-core and copy instruction is inline PTX.
//
// Contract: C = A @ B, A m x k, B k x n, C m x n C-contiguous. A_KC: A(i, p) = A[i * lda + p], else A[p * lda + i].
// B_KC: B(p, j) = B[j * ldb + p], else B[p * ldb + j]. Product z = blockIdx.z reads A + z * batch_a, B + z * batch_b
// (0: an operand broadcast over the batch) and writes C + z * m * n; the grid's last product is k_last deep (a split
// of k whose last run is shorter). Any m, n, k >= 1; 64-bit offsets. Operands move in chunks of two doubles: one
// 16-byte copy where a chunk is 16-byte aligned, else two 8-byte copies (an odd ld leaves every other line so, an
// offset view or an odd batch stride may leave all).
// c_t: the block's result R = A @ B is stored transposed, R(i, j) at C[j * m + i], so the host can run
// C = A @ B as C^T = B^T @ A^T for two C-order operands: the mma's A is then B^T, row-contiguous, whose fragments
// load 8 bytes at a time without bank conflicts. An mma A fragment pairs rows g and g + 8 at one k, which a
// k-contiguous A holds in two different 16-byte chunks: each double is loaded alone (dmma_lds) so that it lands where
// the mma reads it (16-byte loads had the compiler re-pair registers with moves, several per mma); those loads take
// twice the shared-memory wavefronts of conflict-free ones (lines g and g + 2 share banks).
// A slice that ends within k, for a warp whose lines all exist, is copied without bounds checks.
#include "common.cuh"
#include "dmma.cuh"

// The mma k depth on sm_90 (8: m16n8k8, 16: m16n8k16). m16n8k16 holds twice the fragments; it ran faster on some
// shapes and slower on others (docs/NOTES.md); tools/dmma_probe.py builds it with -DCUDAKIT_DMMA_K=16 to compare.
#ifndef CUDAKIT_DMMA_K
#define CUDAKIT_DMMA_K 8
#endif

#define DMMA_GROUP_M 8  // tile-rows one sweep of consecutive blocks covers (they share A's rows and B's columns in L2)

// One operand's slice in shared memory, laid out as global memory holds it (cp.async copies 16-byte chunks as they
// are): KC, BMN lines of BK doubles (k contiguous); else BK lines of BMN doubles. Chunk c of line r sits at
//   KC: c ^ 4 (r & 1)          MN: c ^ 2 ((r >> 1) & 3)
// (chunk indices; both moves stay inside an aligned group of 8 chunks = 128 bytes = all 32 banks once).
// The k order inside each 8-deep step is permuted, the same way for A and B (a sum's order is free): mma k position
// t (lane % 4) is slice row 2t, position t + 4 is row 2t + 1. So a KC fragment pair is one 16-byte load, chunk t of
// the step. A quarter-warp's 16-byte loads (rows g, g + 1: lanes 4g..4g+7) then hit chunks {t} and {t ^ 4} of their
// rows: 8 distinct 16-byte bank groups. A half-warp's 8-byte MN loads (rows 2t + h, columns g..g+3 of an 8-column
// group) put row 2t's two chunks at 2t ^ {0, 1}: 4 rows x 32 bytes on distinct banks.
template <int BMN, int BK, bool KC>
struct DmmaTile {
    static constexpr int LINES = KC ? BMN : BK, LINE = KC ? BK : BMN, CHUNKS = LINE / 2;
    static constexpr int SIZE = LINES * LINE;  // doubles per stage
    static_assert(CHUNKS % 8 == 0, "a swizzle group is 8 chunks: BK (KC) or BM, BN (MN) a multiple of 16");
    static __device__ __forceinline__ int offset(int line, int chunk) {
        return line * LINE + 2 * (KC ? chunk ^ ((line & 1) << 2) : chunk ^ (((line >> 1) & 3) << 1));
    }
};

// Copies one operand's slices: thread tid moves chunk c = tid % CHUNKS of lines line0 + i * STEP, line0 from
// tid / CHUNKS, where KC puts the even lines on the first half of the threads and the odd lines on the second: with
// an odd ld, lines of one parity are 16-byte aligned, and each warp's lines share a parity (MN: a warp is within one
// line, or two lines of 16 chunks, which an odd ld then divides by alignment). The swizzle of line0 + i * STEP
// repeats every PERIOD chunks, so the shared offsets are PERIOD values plus constants.
template <int BMN, int BK, bool KC, int THREADS>
struct DmmaLoader {
    using Tile = DmmaTile<BMN, BK, KC>;
    static constexpr int STEP = THREADS / Tile::CHUNKS, PER = Tile::LINES / STEP;
    static constexpr int PERIOD = KC ? 1 : (STEP % 8 == 0 ? 1 : STEP % 4 == 0 ? 2 : 4);
    static constexpr int SLOTS = PERIOD < PER ? PERIOD : PER;
    static_assert(THREADS % Tile::CHUNKS == 0 && Tile::LINES % STEP == 0, "whole lines per pass, every line covered");
    static_assert(STEP % 2 == 0 && PER < 30, "a thread's lines share a parity; the line bits stay below HALVES");
    static_assert(KC ? STEP / 2 % (32 / Tile::CHUNKS) == 0 : Tile::CHUNKS % 32 == 0 || Tile::CHUNKS == 16,
                  "a warp's lines share a parity (KC) or a warp covers whole lines (MN)");
    const double* ptr;  // this thread's first chunk at k = 0
    index_t stride;     // elements from one of its chunks to the next (STEP lines)
    int soff[SLOTS];    // shared byte offsets of its first SLOTS chunks
    int fixed;          // KC: bit i set where chunk i's line exists; MN: doubles of its chunks that exist (0, 1, 2);
                        // and HALVES set where its chunks are not 16-byte aligned (each copied as two 8-byte halves)
    int room;           // k less the k index of its chunks at k = 0 (KC) or of its first line (MN)
    int full;           // slices of k from 0 that end within k (the same for every thread of the block)
    bool lines;         // every line of the warp's chunks exists, and each chunk whole (the same for the warp)
    static constexpr int HALVES = 1 << 30;
    __device__ __forceinline__ DmmaLoader(const double* p, index_t ld, int origin, int mn, int k, int tid) {
        const int pass = tid / Tile::CHUNKS, chunk = tid % Tile::CHUNKS, extent = mn - origin;
        const int line0 = KC ? 2 * (pass % (STEP / 2)) + pass / (STEP / 2) : pass;
#pragma unroll
        for (int i = 0; i < SLOTS; ++i) soff[i] = 8 * Tile::offset(line0 + i * STEP, chunk);
        if (KC) {
            ptr = p + (index_t)(origin + line0) * ld + 2 * chunk;
            stride = STEP * ld;
            room = k - 2 * chunk;
            fixed = 0;
#pragma unroll
            for (int i = 0; i < PER; ++i) fixed |= (line0 + i * STEP < extent) << i;
        } else {
            ptr = p + (index_t)line0 * ld + origin + 2 * chunk;
            stride = STEP * ld;
            room = k - line0;
            fixed = extent - 2 * chunk < 0 ? 0 : extent - 2 * chunk < 2 ? extent - 2 * chunk : 2;
        }
        full = k / BK;
        lines = __all_sync(0xffffffffu, KC ? fixed == (1 << PER) - 1 : fixed == 2);
        if (reinterpret_cast<unsigned long long>(ptr) & 15) fixed |= HALVES;  // (STEP, BK even: so are all its chunks)
    }
    // Slice kt (k from kt * BK) into the stage at shared address dst (bytes).
    __device__ __forceinline__ void load(unsigned dst, int kt) const {
        const int k0 = kt * BK;
        const double* src = KC ? ptr + k0 : ptr + (index_t)k0 * stride / STEP;
        if (kt < full && lines) {  // every chunk whole: no bounds
#pragma unroll
            for (int i = 0; i < PER; ++i, src += stride) copy(dst, i, src, 2);
            return;
        }
        const int have_k = room - k0 < 0 ? 0 : room - k0 < 2 ? room - k0 : 2;  // KC
#pragma unroll
        for (int i = 0; i < PER; ++i, src += stride)
            copy(dst, i, src, KC ? (fixed >> i & 1 ? have_k : 0) : (k0 + i * STEP < room ? fixed & 3 : 0));
    }
    // This thread's chunk i of the slice at dst, `have` doubles of it from src (none: ptr, never read, names it).
    __device__ __forceinline__ void copy(unsigned dst, int i, const double* src, int have) const {
        const unsigned to = dst + soff[i % SLOTS] + (i / SLOTS) * SLOTS * STEP * Tile::LINE * 8;
        if (!(fixed & HALVES) && have != 1)  // (one double: 8 bytes, so that no copy names bytes past a line's end)
            dmma_cp16(to, have ? src : ptr, have * 8);
        else
            dmma_cp8x2(to, have ? src : ptr, have);
    }
};

// Registers for three blocks an SM where a block holds at most 64 x 64 of C and three fit in shared memory.
#define DMMA_MIN_BLOCKS(BM, BN, BK, STAGES) ((BM) * (BN) <= 64 * 64 && 3 * (STAGES) * ((BM) + (BN)) * (BK) * 8 <= 227 * 1024 ? 3 : 1)

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool A_KC, bool B_KC>
__global__ void __launch_bounds__(BM / WM * (BN / WN) * 32, DMMA_MIN_BLOCKS(BM, BN, BK, STAGES))
    matmul_dmma_async(const double* __restrict__ A, const double* __restrict__ B, double* __restrict__ C, int m,
                      int n, int k, index_t lda, index_t ldb, index_t batch_a, index_t batch_b, int c_t,
                      int k_last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int THREADS = BM / WM * (BN / WN) * 32, FM = WM / 16, FN = WN / 8;
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BM % WM == 0 && BN % WN == 0 && BK % 8 == 0 && STAGES >= 2,
                  "tile shape");
    using TA = DmmaTile<BM, BK, A_KC>;
    using TB = DmmaTile<BN, BK, B_KC>;
    extern __shared__ __align__(128) unsigned char dmma_bytes[];
    double* const sa = reinterpret_cast<double*>(dmma_bytes);
    double* const sb = sa + STAGES * TA::SIZE;

    if (blockIdx.z == gridDim.z - 1) k = k_last;
    A += blockIdx.z * batch_a;
    B += blockIdx.z * batch_b;
    C += blockIdx.z * ((index_t)m * n);
    // this block's C tile: consecutive blocks sweep DMMA_GROUP_M tile-rows column by column
    int m0, n0;
    {
        const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN, per_group = DMMA_GROUP_M * tiles_n;
        const int first = (int)blockIdx.x / per_group * DMMA_GROUP_M, in_group = (int)blockIdx.x % per_group;
        const int rows = tiles_m - first < DMMA_GROUP_M ? tiles_m - first : DMMA_GROUP_M;
        m0 = (first + in_group % rows) * BM;
        n0 = in_group / rows * BN;
    }
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int wrow = warp / (BN / WN) * WM, wcol = warp % (BN / WN) * WN;

    const DmmaLoader<BM, BK, A_KC, THREADS> la(A, lda, m0, m, k, tid);
    const DmmaLoader<BN, BK, B_KC, THREADS> lb(B, ldb, n0, n, k, tid);
    const unsigned sa_addr = dmma_smem(sa), sb_addr = dmma_smem(sb);

    // This lane's fragment offsets (doubles, within a stage) for 8-deep step 0 and 8-row (column) group 0, with the
    // swizzle's lane-dependent part split off: +-d for an odd step (KC) or an odd group (MN), the sign by parity.
    // KC, line r = base + g + 8 q, step s: r * BK + 8 (s ^ (g & 1)) + 2t.
    // MN, row 8 s + 2t + h, column base + 8 q + g: row * LINE + base + 8 (q ^ (t >> 1)) + 2 ((g >> 1) ^ 2 (t & 1)) + (g & 1).
    auto kc_base = [&](int wbase) { return (wbase + g) * BK + 2 * t; };
    auto mn_base = [&](int wbase, int line) { return 2 * t * line + wbase + 2 * ((g >> 1) ^ (2 * (t & 1))) + (g & 1); };
    const int a0 = A_KC ? kc_base(wrow) : mn_base(wrow, BM), b0 = B_KC ? kc_base(wcol) : mn_base(wcol, BN);
    const int ad = A_KC ? 8 * (g & 1) : 8 * (t >> 1), bd = B_KC ? 8 * (g & 1) : 8 * (t >> 1);

    double acc[FM][FN][4];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0;

    // 8-deep steps per mma: 2 (m16n8k16) on sm_90 where the slice allows, else 1
    constexpr int DEPTH = __CUDA_ARCH__ >= 900 && CUDAKIT_DMMA_K == 16 && BK % 16 == 0 ? 2 : 1;
    const int tiles_k = (k + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles_k) {
            la.load(sa_addr + s * TA::SIZE * 8, s);
            lb.load(sb_addr + s * TB::SIZE * 8, s);
        }
        dmma_commit();
    }
    for (int kt = 0; kt < tiles_k; ++kt) {
        dmma_wait<STAGES - 2>();  // slice kt has landed (this thread's copies) ...
        __syncthreads();          // ... everyone's, and slice kt - 1's stage is free
        {
            const int next = kt + STAGES - 1, slot = next % STAGES;
            if (next < tiles_k) {
                la.load(sa_addr + slot * TA::SIZE * 8, next);
                lb.load(sb_addr + slot * TB::SIZE * 8, next);
            }
            dmma_commit();
        }
        const double* as = sa + (kt % STAGES) * TA::SIZE;
        const double* bs = sb + (kt % STAGES) * TB::SIZE;
        // Fragments of DEPTH 8-deep steps from step s0. A block i (rows 16 i..): f[4 d + e], e: (g, t), (g + 8, t),
        // (g, t + 4), (g + 8, t + 4) of step s0 + d. B block j (columns 8 j..): f[2 d + e], e: k position t, t + 4.
        auto frag_a = [&](double(&f)[4 * DEPTH], int i, int s0) {
#pragma unroll
            for (int d = 0; d < DEPTH; ++d) {
                const int s = s0 + d;
#pragma unroll
                for (int h = 0; h < 2; ++h) {  // rows g + 8 h: 8-line group q = 2i + h
                    const int q = 2 * i + h;
                    if (A_KC) {  // (two 8-byte loads: see dmma_lds)
                        const double* p = as + a0 + q * 8 * BK + 8 * s + (s & 1 ? -ad : ad);
                        f[4 * d + h] = dmma_lds(p);
                        f[4 * d + 2 + h] = dmma_lds(p + 1);
                    } else {
                        const int off = a0 + 8 * q + (q & 1 ? -ad : ad) + 8 * s * BM;
                        f[4 * d + h] = as[off];
                        f[4 * d + 2 + h] = as[off + BM];
                    }
                }
            }
        };
        auto frag_b = [&](double(&f)[2 * DEPTH], int j, int s0) {
#pragma unroll
            for (int d = 0; d < DEPTH; ++d) {
                const int s = s0 + d;
                if (B_KC) {
                    const double2 v = *reinterpret_cast<const double2*>(bs + b0 + j * 8 * BK + 8 * s + (s & 1 ? -bd : bd));
                    f[2 * d] = v.x;
                    f[2 * d + 1] = v.y;
                } else {
                    const int off = b0 + 8 * j + (j & 1 ? -bd : bd) + 8 * s * BN;
                    f[2 * d] = bs[off];
                    f[2 * d + 1] = bs[off + BN];
                }
            }
        };
        auto mma = [](double(&c)[4], const double(&a)[4 * DEPTH], const double(&b)[2 * DEPTH]) {
            if constexpr (DEPTH == 2)  // (sm_90 only)
                asm("mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, "
                    "{%4, %5, %6, %7, %8, %9, %10, %11}, {%12, %13, %14, %15}, {%0, %1, %2, %3};"
                    : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
                    : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
                      "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
            else
                dmma_16x8x8(c, a, b);
        };
        // The operand with fewer fragment registers a warp tile is held whole; the other's streams block by block.
#pragma unroll
        for (int s0 = 0; s0 < BK / 8; s0 += DEPTH) {
            if constexpr (2 * FM >= FN) {
                double b[FN][2 * DEPTH];
#pragma unroll
                for (int j = 0; j < FN; ++j) frag_b(b[j], j, s0);
#pragma unroll
                for (int i = 0; i < FM; ++i) {
                    double a[4 * DEPTH];
                    frag_a(a, i, s0);
#pragma unroll
                    for (int j = 0; j < FN; ++j) mma(acc[i][j], a, b[j]);
                }
            } else {
                double a[FM][4 * DEPTH];
#pragma unroll
                for (int i = 0; i < FM; ++i) frag_a(a[i], i, s0);
#pragma unroll
                for (int j = 0; j < FN; ++j) {
                    double b[2 * DEPTH];
                    frag_b(b, j, s0);
#pragma unroll
                    for (int i = 0; i < FM; ++i) mma(acc[i][j], a[i], b);
                }
            }
        }
    }
    dmma_wait<0>();  // no copy (of an empty slice) outlives the block

    // c0, c1: row g, columns 2t, 2t + 1 of the warp's (i, j) 16 x 8 block; c2, c3: row g + 8
    const int rows = m - m0 - wrow - g, cols = n - n0 - wcol - 2 * t;
    if (c_t) {  // column 2t of R is a row of C: lanes g = 0..7 of one t store 8 consecutive doubles
        double* const out = C + (index_t)(n0 + wcol + 2 * t) * m + m0 + wrow + g;
#pragma unroll
        for (int i = 0; i < FM; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = 16 * i + 8 * h;
                if (r >= rows) continue;
#pragma unroll
                for (int j = 0; j < FN; ++j) {
                    const int c = 8 * j;
                    if (c < cols) out[(index_t)c * m + r] = acc[i][j][2 * h];
                    if (c + 1 < cols) out[(index_t)(c + 1) * m + r] = acc[i][j][2 * h + 1];
                }
            }
        return;
    }
    const bool pairs = (reinterpret_cast<unsigned long long>(C) & 15) == 0 && (n & 1) == 0;
    double* const out = C + (index_t)(m0 + wrow + g) * n + n0 + wcol + 2 * t;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = 16 * i + 8 * h;
            if (r >= rows) continue;
            double* const row = out + (index_t)r * n;
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                const int c = 8 * j;
                const double x = acc[i][j][2 * h], y = acc[i][j][2 * h + 1];
                if (pairs && c + 2 <= cols) {
                    *reinterpret_cast<double2*>(row + c) = make_double2(x, y);
                } else {
                    if (c < cols) row[c] = x;
                    if (c + 1 < cols) row[c + 1] = y;
                }
            }
        }
#endif
}
