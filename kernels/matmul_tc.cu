// Tensor-core matrix products: float16 and bfloat16 operands summed in float32, and float32 operands multiplied in
// TF32. First the warp-level fragment API (wmma), then the Ampere design: cp.async into a multi-stage pipeline of
// swizzled shared tiles, ldmatrix into registers, mma.sync. No CUDA headers (NVRTC in a pip-only CuPy has none), so
// every tensor-core instruction is inline PTX.
//
// The contract of every kernel here: C = A @ B with A m x k, B k x n, C m x n C-contiguous in T (rounded once from
// the float32 sums). A_KC: A(i, p) = A[i * lda + p] (C-order A), else A[p * lda + i]. B_KC: B(p, j) = B[j * ldb + p]
// (F-order B), else B[p * ldb + j]. Product z = blockIdx.z reads A + z * batch_a and B + z * batch_b (0: one operand
// broadcast over the batch) and writes C + z * m * n; matmul_tc_mma's last product (z = gridDim.z - 1) is k_last
// deep (a split of k whose last run is shorter), the others k. Offsets are 64-bit; any m, n, k >= 1.
#include "common.cuh"
#include "half.cuh"

__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// The product of a batch this block works on: its operands and its C.
template <typename In, typename Out>
__device__ __forceinline__ void tc_batch_offsets(In& A, In& B, Out& C, int m, int n, index_t batch_a, index_t batch_b) {
    A += blockIdx.z * batch_a;
    B += blockIdx.z * batch_b;
    C += blockIdx.z * ((index_t)m * n);
}

// The C tile of this block from a 1-D grid: consecutive blocks sweep GROUP_M tile-rows column by column, so the
// blocks resident together share rows of A and columns of B in L2. A group about as tall (in elements) as the
// resident blocks are wide keeps the A and B panels they read together smallest.
__device__ __forceinline__ void tc_tile_origin(int m, int n, int bm, int bn, int group_m, int& m0, int& n0) {
    const int tiles_m = (m + bm - 1) / bm, tiles_n = (n + bn - 1) / bn;
    const int per_group = group_m * tiles_n, tile = blockIdx.x;
    const int first_m = tile / per_group * group_m;
    const int rows = tiles_m - first_m < group_m ? tiles_m - first_m : group_m;
    const int in_group = tile % per_group;
    m0 = (first_m + in_group % rows) * bm;
    n0 = in_group / rows * bn;
}

// Two floats rounded to T and stored side by side, the first at p (p holds 2 * sizeof(T) aligned bytes).
__device__ __forceinline__ void store_pair(float* p, float x, float y) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
template <typename T>
__device__ __forceinline__ void store_pair(T* p, float x, float y) {
    *reinterpret_cast<unsigned*>(p) = (unsigned)from_float<T>(x).bits | (unsigned)from_float<T>(y).bits << 16;
}

__device__ __forceinline__ unsigned to_tf32(float x) {  // round to nearest (ties away), 10 mantissa bits kept
    unsigned r;
#if __CUDA_ARCH__ >= 800
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
#else
    r = __float_as_uint(x);
#endif
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// Step 1: wmma. mma.h's fragment API spelled in PTX: load_matrix_sync / mma_sync / store_matrix_sync on 16 x 16
// fragments whose register layout is the hardware's business. float16 from sm_70; bfloat16 and TF32 (16 x 16 x 8)
// from sm_80.
template <typename T> struct Wmma;
template <> struct Wmma<half_t> { static constexpr int K = 16, REGS = 8; };
template <> struct Wmma<bfloat16_t> { static constexpr int K = 16, REGS = 4; };
template <> struct Wmma<float> { static constexpr int K = 8, REGS = 4; };

template <typename T> struct FragmentAB { unsigned x[Wmma<T>::REGS]; };
struct FragmentAcc { float x[8]; };

__device__ __forceinline__ void fill_fragment(FragmentAcc& c, float v) {
#pragma unroll
    for (int i = 0; i < 8; ++i) c.x[i] = v;
}

#define TC_R4(f) "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])
#define TC_R8(f) TC_R4(f), "=r"(f.x[4]), "=r"(f.x[5]), "=r"(f.x[6]), "=r"(f.x[7])
#define TC_IN4(f) "r"(f.x[0]), "r"(f.x[1]), "r"(f.x[2]), "r"(f.x[3])
#define TC_IN8(f) TC_IN4(f), "r"(f.x[4]), "r"(f.x[5]), "r"(f.x[6]), "r"(f.x[7])
#define TC_OUT8(c) \
    "f"(c.x[0]), "f"(c.x[1]), "f"(c.x[2]), "f"(c.x[3]), "f"(c.x[4]), "f"(c.x[5]), "f"(c.x[6]), "f"(c.x[7])
#define TC_ACC(c) \
    "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3]), "+f"(c.x[4]), "+f"(c.x[5]), "+f"(c.x[6]), "+f"(c.x[7])

// A fragment: 16 rows of A, row-major in shared memory, ld elements apart. B fragment: 16 columns of B, column-major
// (each column's k values contiguous), ld elements apart.
__device__ __forceinline__ void load_matrix_sync_a(FragmentAB<half_t>& f, const half_t* p, unsigned ld) {
    asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8], %9;"
                 : TC_R8(f) : "r"(smem_u32(p)), "r"(ld) : "memory");
}
__device__ __forceinline__ void load_matrix_sync_b(FragmentAB<half_t>& f, const half_t* p, unsigned ld) {
    asm volatile("wmma.load.b.sync.aligned.col.m16n16k16.shared.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8], %9;"
                 : TC_R8(f) : "r"(smem_u32(p)), "r"(ld) : "memory");
}
__device__ __forceinline__ void mma_sync(FragmentAcc& d, const FragmentAB<half_t>& a, const FragmentAB<half_t>& b) {
    asm volatile("wmma.mma.sync.aligned.row.col.m16n16k16.f32.f32 {%0, %1, %2, %3, %4, %5, %6, %7}, "
                 "{%8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19, %20, %21, %22, %23}, "
                 "{%0, %1, %2, %3, %4, %5, %6, %7};" : TC_ACC(d) : TC_IN8(a), TC_IN8(b));
}
__device__ __forceinline__ void store_matrix_sync(float* p, const FragmentAcc& c, unsigned ld, half_t) {
    asm volatile("wmma.store.d.sync.aligned.row.m16n16k16.shared.f32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8}, %9;"
                 :: "r"(smem_u32(p)), TC_OUT8(c), "r"(ld) : "memory");
}

// bfloat16 and TF32 fragments exist from sm_80; before it these compile to a trap (the host never launches them there).
#if __CUDA_ARCH__ >= 800
#define TC_SM80(code) code
#else
#define TC_SM80(code) asm volatile("trap;")
#endif
__device__ __forceinline__ void load_matrix_sync_a(FragmentAB<bfloat16_t>& f, const bfloat16_t* p, unsigned ld) {
    TC_SM80(asm volatile("wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;"
                         : TC_R4(f) : "r"(smem_u32(p)), "r"(ld) : "memory"));
}
__device__ __forceinline__ void load_matrix_sync_b(FragmentAB<bfloat16_t>& f, const bfloat16_t* p, unsigned ld) {
    TC_SM80(asm volatile("wmma.load.b.sync.aligned.col.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;"
                         : TC_R4(f) : "r"(smem_u32(p)), "r"(ld) : "memory"));
}
__device__ __forceinline__ void mma_sync(FragmentAcc& d, const FragmentAB<bfloat16_t>& a,
                                         const FragmentAB<bfloat16_t>& b) {
    TC_SM80(asm volatile("wmma.mma.sync.aligned.row.col.m16n16k16.f32.bf16.bf16.f32 {%0, %1, %2, %3, %4, %5, %6, %7}, "
                         "{%8, %9, %10, %11}, {%12, %13, %14, %15}, {%0, %1, %2, %3, %4, %5, %6, %7};"
                         : TC_ACC(d) : TC_IN4(a), TC_IN4(b)));
}
__device__ __forceinline__ void store_matrix_sync(float* p, const FragmentAcc& c, unsigned ld, bfloat16_t) {
    store_matrix_sync(p, c, ld, half_t());  // the same float32 accumulator fragment
}
// TF32: the fragments hold float32 values; the hardware reads only a TF32's bits, so each is rounded first.
__device__ __forceinline__ void load_matrix_sync_a(FragmentAB<float>& f, const float* p, unsigned ld) {
    TC_SM80(asm volatile("wmma.load.a.sync.aligned.row.m16n16k8.shared.tf32 {%0, %1, %2, %3}, [%4], %5;"
                         : TC_R4(f) : "r"(smem_u32(p)), "r"(ld) : "memory"));
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = to_tf32(__uint_as_float(f.x[i]));
}
__device__ __forceinline__ void load_matrix_sync_b(FragmentAB<float>& f, const float* p, unsigned ld) {
    TC_SM80(asm volatile("wmma.load.b.sync.aligned.col.m16n16k8.shared.tf32 {%0, %1, %2, %3}, [%4], %5;"
                         : TC_R4(f) : "r"(smem_u32(p)), "r"(ld) : "memory"));
#pragma unroll
    for (int i = 0; i < 4; ++i) f.x[i] = to_tf32(__uint_as_float(f.x[i]));
}
__device__ __forceinline__ void mma_sync(FragmentAcc& d, const FragmentAB<float>& a, const FragmentAB<float>& b) {
    TC_SM80(asm volatile("wmma.mma.sync.aligned.row.col.m16n16k8.f32.tf32.tf32.f32 {%0, %1, %2, %3, %4, %5, %6, %7}, "
                         "{%8, %9, %10, %11}, {%12, %13, %14, %15}, {%0, %1, %2, %3, %4, %5, %6, %7};"
                         : TC_ACC(d) : TC_IN4(a), TC_IN4(b)));
}
__device__ __forceinline__ void store_matrix_sync(float* p, const FragmentAcc& c, unsigned ld, float) {
    TC_SM80(asm volatile("wmma.store.d.sync.aligned.row.m16n16k8.shared.f32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8}, "
                         "%9;" :: "r"(smem_u32(p)), TC_OUT8(c), "r"(ld) : "memory"));
}

#define WMMA_BM 64
#define WMMA_BN 64
#define WMMA_BK 32
#define WMMA_THREADS 128

// The simplest tensor-core kernel: 64 x 64 block tiles, each of 4 warps owns 32 x 32 of C as 2 x 2 wmma fragments.
template <typename T, bool A_KC, bool B_KC>
__global__ void __launch_bounds__(WMMA_THREADS, 1)  // 1: else ptxas trades registers for spills
    matmul_tc_wmma(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int m, int n, int k,
                   index_t lda, index_t ldb, index_t batch_a, index_t batch_b) {
    constexpr int K = Wmma<T>::K;
    // Rows padded by 16 bytes: fragment loads start on 32 bytes and their rows spread over the banks.
    constexpr int LD = WMMA_BK + 16 / (int)sizeof(T);
    __shared__ __align__(32) T As[WMMA_BM * LD];      // As[i * LD + p] = A(m0 + i, k0 + p): row-major
    __shared__ __align__(32) T Bs[WMMA_BN * LD];      // Bs[j * LD + p] = B(k0 + p, n0 + j): column-major
    __shared__ __align__(32) float Cs[WMMA_THREADS / 32][16 * 16];  // one fragment of C per warp on its way out
    tc_batch_offsets(A, B, C, m, n, batch_a, batch_b);
    int m0, n0;
    tc_tile_origin(m, n, WMMA_BM, WMMA_BN, 8, m0, n0);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / 2 * 32, wn = warp % 2 * 32;

    FragmentAcc acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < k; k0 += WMMA_BK) {
        // Stage the slices with element loads, consecutive threads along the contiguous index (coalesced);
        // elements past m, n or k are zeros, so they add nothing.
        for (int e = tid; e < WMMA_BM * WMMA_BK; e += WMMA_THREADS) {
            const int i = A_KC ? e / WMMA_BK : e % WMMA_BM, p = A_KC ? e % WMMA_BK : e / WMMA_BM;
            const bool ok = m0 + i < m && k0 + p < k;
            As[i * LD + p] = ok ? A[A_KC ? (m0 + i) * lda + k0 + p : (k0 + p) * lda + m0 + i] : T{};
        }
        for (int e = tid; e < WMMA_BN * WMMA_BK; e += WMMA_THREADS) {
            const int j = B_KC ? e / WMMA_BK : e % WMMA_BN, p = B_KC ? e % WMMA_BK : e / WMMA_BN;
            const bool ok = n0 + j < n && k0 + p < k;
            Bs[j * LD + p] = ok ? B[B_KC ? (n0 + j) * ldb + k0 + p : (k0 + p) * ldb + n0 + j] : T{};
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < WMMA_BK; p += K) {
            FragmentAB<T> a[2], b[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) load_matrix_sync_a(a[i], As + (wm + i * 16) * LD + p, LD);
#pragma unroll
            for (int j = 0; j < 2; ++j) load_matrix_sync_b(b[j], Bs + (wn + j * 16) * LD + p, LD);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) mma_sync(acc[i][j], a[i], b[j]);
        }
        __syncthreads();  // every warp is done with the slices before they are overwritten
    }

    // Each fragment goes through the warp's shared 16 x 16 buffer, then out, rounded to T, within C's bounds.
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            store_matrix_sync(Cs[warp], acc[i][j], 16, T());
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                const int r = m0 + wm + i * 16 + e / 16, c = n0 + wn + j * 16 + e % 16;
                if (r < m && c < n) C[(index_t)r * n + c] = from_float<T>(Cs[warp][e]);
            }
            __syncwarp();
        }
}

// ---------------------------------------------------------------------------------------------------------------
// Step 2: the Ampere design. Each block's operand slices move global -> shared with cp.async (no registers on the
// way, zero-filled past the edges) into a ring of STAGES slots, so STAGES - 1 slices are in flight during the math;
// warps read their fragments with ldmatrix from XOR-swizzled tiles (no bank conflicts, no padding) and multiply
// with mma.sync: m16n8k16 for float16 / bfloat16, m16n8k8 for TF32.

__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {  // bytes < 16: zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {  // all 16 bytes exist
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
// 4 bytes (one float32) at a time, for operands whose lines do not start on 16 bytes (.ca: the 16-byte .cg form only).
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, int bytes) {  // bytes 0: zero-filled
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Four 8 x 8 matrices of 16-bit values (8 rows of 16 bytes each; lane l gives the address of row l % 8 of matrix
// l / 8). Lane l receives, of each matrix, row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1; with .trans the same of
// the transposed matrix.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ float lds_f32(unsigned addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

// One mma.sync of a warp: D (16 x 8, float) += A (16 x K) B (K x 8). With g = lane / 4, t = lane % 4 (PTX ISA):
// 16-bit, K = 16: a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..];
//                 b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g].
// TF32, K = 8:    a[0] = A[g][t], a[1] = A[g+8][t], a[2] = A[g][t+4], a[3] = A[g+8][t+4];
//                 b[0] = B[t][g], b[1] = B[t+4][g].
// Both:           d[0], d[1] = D[g][2t, 2t+1], d[2], d[3] = D[g+8][2t, 2t+1].
template <typename T> struct Mma;
template <> struct Mma<half_t> {
    static constexpr int K = 16;
    static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};
template <> struct Mma<bfloat16_t> {
    static constexpr int K = 16;
    static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};
template <> struct Mma<float> {
    static constexpr int K = 8;
    static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
        asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

// One operand's slice in shared memory, laid out as global memory holds it so that cp.async copies 16-byte chunks
// straight across: KC (k contiguous): ROWS lines of BK elements; otherwise BK lines of ROWS elements. A line is
// CHUNKS 16-byte chunks. Chunk c of line l sits at chunk position c ^ f(l), f chosen per reader:
// - ldmatrix reads one chunk position down 8 consecutive lines (from a multiple of 8): f spreads those 8 chunks over
//   the 8 distinct 16-byte bank groups of a 128-byte row of banks (R lines share one such row when CHUNKS < 8);
// - TF32 MN tiles are read by 4-byte loads, 4 lines x 8 consecutive values (2 chunks) per warp: f = 2 (l % 4) puts
//   the 4 lines' chunk pairs on 4 distinct pairs of bank groups.
// Either way a warp's cp.async writes of 8 consecutive chunks of a line (aligned to 8) stay one permutation apart.
template <typename T, int ROWS, int BK, bool KC>
struct SwizzledTile {
    static constexpr int V = 16 / sizeof(T);  // elements per chunk
    static constexpr int LINES = KC ? ROWS : BK, CHUNKS = (KC ? BK : ROWS) / V;
    static constexpr int BYTES = LINES * CHUNKS * 16;
    static constexpr bool SCALAR = sizeof(T) == 4 && !KC;  // read by 4-byte loads (TF32 MN), not ldmatrix
    static constexpr int R = CHUNKS >= 8 ? 1 : 8 / CHUNKS, M = CHUNKS >= 8 ? 8 : CHUNKS;
    static_assert(CHUNKS * V == (KC ? BK : ROWS) && (!SCALAR || CHUNKS >= 8), "whole chunks per line");
    static __device__ __forceinline__ int chunk_at(int line, int chunk) {
        return SCALAR ? chunk ^ ((line & 3) << 1) : chunk ^ ((line / R) % M);
    }
    static __device__ __forceinline__ unsigned offset(int line, int chunk) {
        return (unsigned)(line * CHUNKS + chunk_at(line, chunk)) * 16u;
    }
};

// Moves one operand's slices, global -> shared, with cp.async: each thread copies PER_THREAD chunks a slice, one
// chunk position of lines LINE_STEP apart, so its shared offsets are one offset plus multiples of JUMP (the swizzle
// repeats every 8 lines, 4 for SCALAR tiles) and its global addresses one pointer plus multiples of `step`.
// WHOLE: the caller knows every row of the block and every k of the slice exist; no bounds checks. Otherwise a chunk
// partly past the operand's edge (rows, or depth k) copies only the bytes that exist and zero-fills the rest; one
// wholly past it copies nothing (src-size 0) and reads the base address, which is in bounds. The host guarantees
// 16-byte aligned bases and ld a multiple of V.
template <typename T, int ROWS, int BK, bool KC, int THREADS>
struct AsyncLoader {
    typedef SwizzledTile<T, ROWS, BK, KC> Tile;
    static constexpr int V = Tile::V, LINE_STEP = THREADS / Tile::CHUNKS;
    static constexpr int PER_THREAD = Tile::LINES * Tile::CHUNKS / THREADS;
    static constexpr unsigned JUMP = LINE_STEP * Tile::CHUNKS * 16;
    static_assert(THREADS % Tile::CHUNKS == 0 && PER_THREAD >= 1 && PER_THREAD * LINE_STEP == Tile::LINES,
                  "the threads cover a slice in whole passes");
    static_assert(PER_THREAD == 1 || LINE_STEP % (Tile::SCALAR ? 4 : 8) == 0, "a thread's lines share a swizzle");
    const T* const base;
    const T* src;          // this thread's first chunk in the next slice
    const index_t step;    // elements from one of its chunks to the next (LINE_STEP lines)
    const unsigned soff;   // byte offset of its first chunk in a slot
    const int row_room;    // KC: rows of the operand from this thread's first line on; else from its chunk on
    int k_room;            // KC: depth of the next slice from this chunk's first element on; else from its first line

    __device__ __forceinline__ AsyncLoader(const T* p, index_t ld, int row0, int rows, int k, int tid)
        : base(p),
          src(KC ? p + (index_t)(row0 + tid / Tile::CHUNKS) * ld + tid % Tile::CHUNKS * V
                 : p + (index_t)(tid / Tile::CHUNKS) * ld + row0 + tid % Tile::CHUNKS * V),
          step(LINE_STEP * ld), soff(Tile::offset(tid / Tile::CHUNKS, tid % Tile::CHUNKS)),
          row_room(KC ? rows - row0 - tid / Tile::CHUNKS : rows - row0 - tid % Tile::CHUNKS * V),
          k_room(KC ? k - tid % Tile::CHUNKS * V : k - tid / Tile::CHUNKS) {}

    // Part `part` of `parts` of the next slice into the slot at byte address `slot`: chunks j = part, part + parts, ...
    // The last part also steps on to the following slice.
    template <bool WHOLE>
    __device__ __forceinline__ void load(unsigned slot, int part, int parts) {
        const T* p = src + part * step;
        const int e = KC ? k_room : row_room, elems = e < V ? e : V, lines = KC ? row_room : k_room;
#pragma unroll
        for (int j = part; j < PER_THREAD; j += parts, p += parts * step) {
            if (WHOLE) {
                cp_async16(slot + soff + j * JUMP, p);
            } else {
                const bool any = lines > j * LINE_STEP && elems > 0;
                cp_async16(slot + soff + j * JUMP, any ? p : base, any ? elems * (int)sizeof(T) : 0);
            }
        }
        if (part == parts - 1) {
            src += KC ? (index_t)BK : PER_THREAD * step;  // (not KC: BK = PER_THREAD * LINE_STEP lines)
            k_room -= BK;
        }
    }
};

// AsyncLoader's work for operands whose lines need not start on 16 bytes (any base, any ld; 4-byte T): one element
// per cp.async, the threads laid along the lines so that a warp's copies are consecutive elements (coalesced). Each
// thread keeps one element position of the line and steps over lines LINE_STEP apart; where LINE_STEP is a whole
// number of the swizzle's periods (8 lines, 4 for SCALAR tiles) its shared offsets are one offset plus multiples of
// JUMP, else each is computed.
template <typename T, int ROWS, int BK, bool KC, int THREADS>
struct ElementLoader {
    typedef SwizzledTile<T, ROWS, BK, KC> Tile;
    static constexpr int V = Tile::V, WIDTH = KC ? BK : ROWS, LINE_STEP = THREADS / WIDTH;
    static constexpr int COPIES = Tile::LINES / LINE_STEP;
    static constexpr bool PERIODIC = LINE_STEP % (Tile::SCALAR ? 4 : 8) == 0;
    static constexpr unsigned JUMP = LINE_STEP * Tile::CHUNKS * 16;
    static_assert(sizeof(T) == 4 && THREADS % WIDTH == 0 && COPIES * LINE_STEP == Tile::LINES, "whole passes");
    const T* const base;
    const T* src;          // this thread's element in its first line of the next slice
    const index_t step;    // elements from one of its lines to the next (LINE_STEP lines)
    const int line0, elem;
    const unsigned soff;   // byte offset of its first copy in a slot
    const int row_room;    // KC: rows of the operand from this thread's first line on; else from its element on
    int k_room;            // KC: depth of the next slice from this thread's element on; else from its first line

    __device__ __forceinline__ ElementLoader(const T* p, index_t ld, int row0, int rows, int k, int tid)
        : base(p),
          src(KC ? p + (index_t)(row0 + tid / WIDTH) * ld + tid % WIDTH
                 : p + (index_t)(tid / WIDTH) * ld + row0 + tid % WIDTH),
          step(LINE_STEP * ld), line0(tid / WIDTH), elem(tid % WIDTH),
          soff(Tile::offset(tid / WIDTH, tid % WIDTH / V) + tid % WIDTH % V * 4),
          row_room(KC ? rows - row0 - tid / WIDTH : rows - row0 - tid % WIDTH),
          k_room(KC ? k - tid % WIDTH : k - tid / WIDTH) {}

    template <bool WHOLE>
    __device__ __forceinline__ void load(unsigned slot, int part, int parts) {
        const T* p = src + part * step;
        const bool elem_in = (KC ? k_room : row_room) > 0;
        const int lines = KC ? row_room : k_room;
#pragma unroll
        for (int j = part; j < COPIES; j += parts, p += parts * step) {
            const bool here = WHOLE || (elem_in && lines > j * LINE_STEP);
            const unsigned dst = PERIODIC ? soff + j * JUMP
                                          : Tile::offset(line0 + j * LINE_STEP, elem / V) + elem % V * 4;
            cp_async4(slot + dst, here ? p : base, here ? 4 : 0);
        }
        if (part == parts - 1) {
            src += KC ? (index_t)BK : COPIES * step;  // (not KC: BK = COPIES * LINE_STEP lines)
            k_room -= BK;
        }
    }
};

template <bool ALIGNED, typename T, int ROWS, int BK, bool KC, int THREADS> struct Loader {
    typedef AsyncLoader<T, ROWS, BK, KC, THREADS> type;
};
template <typename T, int ROWS, int BK, bool KC, int THREADS> struct Loader<false, T, ROWS, BK, KC, THREADS> {
    typedef ElementLoader<T, ROWS, BK, KC, THREADS> type;
};

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
