// FP64 products of a small C with a long k on the tensor cores (DMMA). A C of a few dozen rows and columns does a few
// multiply-adds per byte of A and B, so the product is bound by reading them: it runs at memory speed only if every
// byte is read once and many are in flight. Each block sums one run of k for one MT x NT tile of C (tiles as small as
// 16 x 8, so a narrow C is padded little); its warps all hold the whole tile and take turns along k, warp w the w-th
// 8-deep step of each slice, so that a slice of LONGK_THREADS / 4 k steps moves through a deep cp.async ring in large,
// coalesced copies. At the end the warps' tiles are added in shared memory in a fixed order (deterministic), and the
// runs' partial tiles on the host's side (splitk_sum).
//
// Contract: R = P @ Q, P mr x k, Q k x nr; P_KC: P(i, p) = P[i * ldp + p], else P[p * ldp + i]; Q_KC: Q(p, j) =
// Q[j * ldq + p], else Q[p * ldq + j]. Block (x, y, z) sums k from z * run (at most run of it) for columns x * NT and
// rows y * MT of R, and stores R(i, j) at R + z * r_run + i * r_row + j * r_col (so the host runs C^T = B^T @ A^T
// by exchanging the operands and the strides). The blocks of one run are consecutive: those that read the same rows
// of P or columns of Q run side by side, and all but the first find them in L2. Any shape, any ld, any 8-byte aligned
// operand; offsets are 64-bit.
#include "common.cuh"
#include "dmma.cuh"

#define LONGK_THREADS 256
#define LONGK_SLICE (LONGK_THREADS / 4)  // k steps a slice: 8 for each warp

// One operand's slices in shared memory: LINES lines of WIDTH doubles, line r at r * LD, laid out as global memory
// holds them (KC: a line is a row of the tile, k along it; else a line is a k step, the tile's rows along it). They
// move in chunks of CHUNK doubles: thread tid copies chunk tid % SPAN of lines tid / SPAN + i * STEP. A chunk of two
// goes as one 16-byte copy where it is 16-byte aligned and whole, else as two 8-byte halves (an odd ld leaves every
// other line so). Outside the operand (its rows, or k past the run) it zero-fills, so that padding adds nothing.
template <int LINES, int WIDTH, int LD, bool KC, int CHUNK>
struct LongkLoader {
    static constexpr int CHUNKS = WIDTH / CHUNK;
    static constexpr int SPAN = CHUNKS <= 4 ? 4 : CHUNKS <= 8 ? 8 : CHUNKS <= 16 ? 16 : CHUNKS <= 32 ? 32 : 64;
    static constexpr int STEP = LONGK_THREADS / SPAN, PASSES = (LINES + STEP - 1) / STEP;
    static_assert((CHUNK == 1 || CHUNK == 2) && WIDTH % CHUNK == 0 && LD % CHUNK == 0 && CHUNKS <= 64 && PASSES <= 32,
                  "whole chunks of 8 or 16 bytes, aligned in shared memory; a bit of each mask a pass");
    const double* ptr;  // this thread's first chunk at the run's first k
    index_t ld;
    index_t room;       // k steps of the run from this thread's chunk (KC) or its first line (else)
    unsigned tiled;     // bit i: pass i's chunk lies in the shared tile (the others are not copied)
    unsigned inside;    // bit i: ... and in the operand's rows (the others are zero-filled)
    int doubles;        // KC: CHUNK; else the doubles of its chunk in the operand's rows (0 to CHUNK)
    unsigned soff;      // the shared byte offset of its first chunk
    __device__ __forceinline__ LongkLoader(const double* p, index_t ld_, int origin, int extent, index_t k_begin,
                                           index_t k_end, int tid) : ld(ld_), tiled(0), inside(0) {
        const int line0 = tid / SPAN, pos = CHUNK * (tid % SPAN);
        soff = 8u * (line0 * LD + pos);
        ptr = KC ? p + (origin + line0) * ld + k_begin + pos : p + (k_begin + line0) * ld + origin + pos;
        room = KC ? k_end - k_begin - pos : k_end - k_begin - line0;
        const int left = extent - origin - pos;
        doubles = KC ? CHUNK : left < 0 ? 0 : left < CHUNK ? left : CHUNK;
#pragma unroll
        for (int i = 0; i < PASSES; ++i) {
            const int line = line0 + i * STEP;
            tiled |= (unsigned)(pos < WIDTH && line < LINES) << i;
            inside |= (unsigned)(KC ? origin + line < extent : doubles > 0) << i;
        }
        inside &= tiled;
    }
    // Slice kt (k from kt * LONGK_SLICE of the run) into the stage at shared address dst (bytes).
    __device__ __forceinline__ void load(unsigned dst, int kt) const {
        const index_t k0 = (index_t)kt * LONGK_SLICE;
#pragma unroll
        for (int i = 0; i < PASSES; ++i) {
            if (!(tiled >> i & 1)) continue;
            const bool reads = (inside >> i & 1) && (KC ? k0 < room : k0 + i * STEP < room);
            const double* at = KC ? ptr + i * STEP * ld + k0 : ptr + (k0 + i * STEP) * ld;
            const double* src = reads ? at : ptr;  // (a select: a branch here split the copies into blocks)
            const unsigned to = dst + soff + 8u * i * STEP * LD;
            if constexpr (CHUNK == 1) {
                dmma_cp8(to, src, reads ? 8 : 0);
            } else {
                const int have = !reads ? 0 : KC && room - k0 < 2 ? 1 : doubles;  // (KC: the run's last odd k step)
                if (have != 1 && !(reinterpret_cast<unsigned long long>(src) & 15))
                    dmma_cp16(to, src, 8 * have);
                else
                    dmma_cp8x2(to, src, have);
            }
        }
    }
};

template <int MT, int NT, int STAGES, int CHUNK, bool P_KC, bool Q_KC>
__global__ void __launch_bounds__(LONGK_THREADS, 1)
    matmul_longk(const double* __restrict__ P, const double* __restrict__ Q, double* __restrict__ R, int mr, int nr,
                 index_t k, index_t ldp, index_t ldq, index_t run, index_t r_run, index_t r_row, index_t r_col) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int WARPS = LONGK_THREADS / 32, FM = MT / 16, FN = NT / 8, KS = LONGK_SLICE;
    static_assert(MT % 16 == 0 && NT % 8 == 0 && MT <= 64 && NT <= 64 && STAGES >= 2, "tile shape");
    // Shared lines: KC, KS + 4 doubles (rows g, k t read 4 banks apart); else the least width past the tile's that is
    // 8 modulo 16 (k steps t read two rows of 8 banks apart): a warp's fragment loads touch every bank twice, the
    // least for 256 bytes.
    constexpr int LDP = P_KC ? KS + 4 : MT + (24 - MT % 16) % 16, LDQ = Q_KC ? KS + 4 : NT + (24 - NT % 16) % 16;
    using LoadP = LongkLoader<P_KC ? MT : KS, P_KC ? KS : MT, LDP, P_KC, CHUNK>;
    using LoadQ = LongkLoader<Q_KC ? NT : KS, Q_KC ? KS : NT, LDQ, Q_KC, CHUNK>;
    constexpr int SIZE_P = (P_KC ? MT : KS) * LDP, SIZE_Q = (Q_KC ? NT : KS) * LDQ;  // doubles a stage
    extern __shared__ __align__(16) unsigned char longk_bytes[];
    double* const sp = reinterpret_cast<double*>(longk_bytes);
    double* const sq = sp + STAGES * SIZE_P;

    const index_t k_begin = blockIdx.z * run, k_end = k - k_begin < run ? k : k_begin + run;
    const int m0 = blockIdx.y * MT, n0 = blockIdx.x * NT;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const LoadP lp(P, ldp, m0, mr, k_begin, k_end, tid);
    const LoadQ lq(Q, ldq, n0, nr, k_begin, k_end, tid);
    const unsigned sp_addr = dmma_smem(sp), sq_addr = dmma_smem(sq);

    double acc[FM][FN][4];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0;

    const int slices = (int)((k_end - k_begin + KS - 1) / KS);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) {
            lp.load(sp_addr + s * SIZE_P * 8, s);
            lq.load(sq_addr + s * SIZE_Q * 8, s);
        }
        dmma_commit();
    }
    const int kw = 8 * warp;  // this warp's k steps in each slice
    for (int kt = 0; kt < slices; ++kt) {
        dmma_wait<STAGES - 2>();  // slice kt has landed (this thread's copies) ...
        __syncthreads();          // ... everyone's, and slice kt - 1's stage is free
        {
            const int next = kt + STAGES - 1, slot = next % STAGES;
            if (next < slices) {
                lp.load(sp_addr + slot * SIZE_P * 8, next);
                lq.load(sq_addr + slot * SIZE_Q * 8, next);
            }
            dmma_commit();
        }
        const double* ps = sp + (kt % STAGES) * SIZE_P;
        const double* qs = sq + (kt % STAGES) * SIZE_Q;
        auto p_at = [&](int row, int step) { return P_KC ? ps[row * LDP + kw + step] : ps[(kw + step) * LDP + row]; };
        auto q_at = [&](int step, int col) { return Q_KC ? qs[col * LDQ + kw + step] : qs[(kw + step) * LDQ + col]; };
        double b[FN][2];
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            b[j][0] = q_at(t, 8 * j + g);
            b[j][1] = q_at(t + 4, 8 * j + g);
        }
#pragma unroll
        for (int i = 0; i < FM; ++i) {
            const double a[4] = {p_at(16 * i + g, t), p_at(16 * i + g + 8, t), p_at(16 * i + g, t + 4),
                                 p_at(16 * i + g + 8, t + 4)};
#pragma unroll
            for (int j = 0; j < FN; ++j) dmma_16x8x8(acc[i][j], a, b[j]);
        }
    }
    dmma_wait<0>();  // no copy (of an empty slice) outlives the block
    __syncthreads();  // every warp is done with the ring, which now holds the warps' tiles

    double* const sums = sp;  // WARPS tiles of MT x NT (the host sizes the shared memory for the larger use)
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                sums[warp * MT * NT + (16 * i + g + 8 * (e >> 1)) * NT + 8 * j + 2 * t + (e & 1)] = acc[i][j][e];
    __syncthreads();
    R += blockIdx.z * r_run;
    for (int e = tid; e < MT * NT; e += LONGK_THREADS) {
        const int i = m0 + e / NT, j = n0 + e % NT;
        if (i >= mr || j >= nr) continue;
        double s = sums[e];
#pragma unroll
        for (int w = 1; w < WARPS; ++w) s += sums[w * MT * NT + e];
        R[i * r_row + j * r_col] = s;
    }
#endif
}
