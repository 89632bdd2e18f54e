// The device's own limits, measured by the bench so every row can be read as a fraction of what is possible.
#include "common.cuh"

// Streaming read: the fastest a kernel can pull bytes from device memory (the matvec and dot ceiling).
// Each thread keeps UNROLL independent 16-byte loads in flight per step; XOR folds them at one integer op each,
// and one word per block is written so the compiler cannot drop the loads.
template <int UNROLL>
__global__ void __launch_bounds__(256) stream_read(const uint4* __restrict__ src, index_t n16,
                                                   unsigned int* __restrict__ block_out) {
    __shared__ unsigned int scratch[32];
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint4 acc = make_uint4(0u, 0u, 0u, 0u);
    for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = src[i + u * stride];  // all loads issue before the first use
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) { acc.x ^= v[u].x; acc.y ^= v[u].y; acc.z ^= v[u].z; acc.w ^= v[u].w; }
    }
    for (; i < n16; i += stride) {
        const uint4 v = src[i];
        acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
    unsigned int v = acc.x ^ acc.y ^ acc.z ^ acc.w;
    // XOR, not a sum: an integer fold that cannot overflow, and a single-instruction warp reduction step.
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v ^= __shfl_xor_sync(0xffffffffu, v, offset);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w) v ^= scratch[w];
        block_out[blockIdx.x] = v;
    }
}

// FMA throughput: the fastest a kernel can do arithmetic in T (the matmul ceiling). CHAINS independent
// multiply-add chains per thread hide the FMA latency; multiplier and addend arrive at run time so nothing folds,
// and the result is stored only when it equals a value it never reaches, so the chains stay live without traffic.
template <typename T, int CHAINS>
__global__ void __launch_bounds__(256) fma_throughput(T mul, T add, int iterations, T never, T* __restrict__ out) {
    T acc[CHAINS];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) acc[c] = T(threadIdx.x + c);
#pragma unroll 8
    for (int it = 0; it < iterations; ++it) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) acc[c] = fma(acc[c], mul, add);
    }
    T total = 0;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) total += acc[c];
    if (total == never) out[(index_t)blockIdx.x * blockDim.x + threadIdx.x] = total;
}

// Tensor-core throughput of the warp-wide mma.sync (sm_80 and later): CHAINS independent accumulator tiles per warp
// over register operands (m16n8k16 float16 or m16n8k8 TF32 products, float32 sums), stored only when their total
// equals a value it never reaches. The Ampere path's roof; Hopper's wgmma goes past it.
template <bool TF32, int CHAINS>
__global__ void __launch_bounds__(256) mma_throughput(int iterations, float never, float* __restrict__ out) {
    float acc[CHAINS][4];
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.0f;
#if __CUDA_ARCH__ >= 800
    const unsigned a0 = 0x3c003c00u ^ threadIdx.x, a1 = a0 ^ 1u, a2 = a0 ^ 2u, a3 = a0 ^ 3u, b0 = a0 ^ 4u, b1 = a0 ^ 5u;
    for (int it = 0; it < iterations; ++it) {
#pragma unroll
        for (int c = 0; c < CHAINS; ++c) {
            if (TF32)
                asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                             "{%8, %9}, {%0, %1, %2, %3};"
                             : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
                             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            else
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                             "{%8, %9}, {%0, %1, %2, %3};"
                             : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
                             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
#endif
    float total = 0.0f;
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) total += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    if (total == never) out[(index_t)blockIdx.x * blockDim.x + threadIdx.x] = total;
    (void)iterations;
}

// Holds the stream for `cycles` SM clock cycles so the timed launches queued behind it run back to back:
// the bench's GPU times then leave out the host's launch overhead.
__global__ void hold_stream(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// Does nothing: launched back to back it measures the host's cost of one launch, the floor of any op's per-call
// time when its GPU work is tiny (a small dot).
__global__ void launch_floor() {}
