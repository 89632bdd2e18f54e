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

#include "matmul_tc_async.cuh"  // step 2, the Ampere design: cp.async, ldmatrix, mma.sync, swizzled tiles, loaders
#include "matmul_tc_mma.cuh"    // step 2: fragments, the pipeline, matmul_tc_mma
