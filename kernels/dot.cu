// Dot product: a shared-memory tree reduction (seed 004), then a one-pass reduction that finishes on the device.
// float16 and bfloat16 (the one-pass kernel): products summed in float (Accum<T>), the per-block partial sums kept in
// float, and the total rounded to T once.
#include "half.cuh"

// Seed kernel. Fixes: n, the block size and the block count are parameters instead of #defines; the shared
// array is dynamic (blockDim.x elements, a power of two); the index is 64-bit.
template <typename T>
__global__ void gpu_dot(const T* d_a, const T* d_b, T* d_c, index_t n) {
    extern __shared__ unsigned char partial_sum_bytes[];
    T* partial_sum = reinterpret_cast<T*>(partial_sum_bytes);
    index_t tid = threadIdx.x + (index_t)blockIdx.x * blockDim.x;
    int index = threadIdx.x;
    T sum = 0;
    while (tid < n) {
        sum += d_a[tid] * d_b[tid];
        tid += (index_t)blockDim.x * gridDim.x;
    }
    partial_sum[index] = sum;
    __syncthreads();
    int i = blockDim.x / 2;
    while (i != 0) {
        if (index < i) partial_sum[index] += partial_sum[index + i];
        __syncthreads();
        i /= 2;
    }
    if (index == 0) d_c[blockIdx.x] = partial_sum[0];
}

// The seed leaves the per-block sums to the host (a copy and a synchronisation); this one block finishes them.
template <typename T>
__global__ void sum_partials(const T* partial, int count, T* out) {
    __shared__ T scratch[32];
    T v = 0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) v += partial[i];
    v = block_sum(v, scratch);
    if (threadIdx.x == 0) *out = v;
}

// Fast: 16-byte loads with UNROLL independent accumulators per thread, warp shuffles instead of a shared-memory
// tree, enough blocks to fill the GPU, and the last block to finish adds the per-block sums in a fixed order
// (deterministic), so a single launch leaves the result on the device.
template <typename T, bool VECTOR, int UNROLL>
__global__ void __launch_bounds__(256) dot_onepass(const T* __restrict__ a, const T* __restrict__ b, index_t n,
                                                   typename Accum<T>::type* __restrict__ partial,
                                                   unsigned int* __restrict__ blocks_done, T* __restrict__ out) {
    typedef typename Accum<T>::type S;
    __shared__ S scratch[32];
    typedef typename Vec16<T>::type V;
    const int W = VECTOR ? Vec16<T>::n : 1;
    const index_t stride = (index_t)gridDim.x * blockDim.x;
    const index_t nvec = n / W;
    S acc[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc[u] = 0;

    index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (VECTOR) {
        const V* va = reinterpret_cast<const V*>(a);
        const V* vb = reinterpret_cast<const V*>(b);
        for (; i + (UNROLL - 1) * stride < nvec; i += UNROLL * stride) {
            V x[UNROLL], y[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) { x[u] = va[i + u * stride]; y[u] = vb[i + u * stride]; }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                S xs[W], ys[W];
                Unpack<T, V>::to(x[u], xs);
                Unpack<T, V>::to(y[u], ys);
#pragma unroll
                for (int w = 0; w < W; ++w) acc[u] += xs[w] * ys[w];
            }
        }
        for (; i < nvec; i += stride) {
            V x = va[i], y = vb[i];
            S xs[W], ys[W];
            Unpack<T, V>::to(x, xs);
            Unpack<T, V>::to(y, ys);
#pragma unroll
            for (int w = 0; w < W; ++w) acc[0] += xs[w] * ys[w];
        }
        // the n % W tail elements
        i = nvec * W + (index_t)blockIdx.x * blockDim.x + threadIdx.x;
        for (; i < n; i += stride) acc[0] += to_float(a[i]) * to_float(b[i]);
    } else {
        for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) acc[u] += to_float(a[i + u * stride]) * to_float(b[i + u * stride]);
        }
        for (; i < n; i += stride) acc[0] += to_float(a[i]) * to_float(b[i]);
    }
    S v = 0;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v += acc[u];
    v = block_sum(v, scratch);

    if (threadIdx.x == 0) partial[blockIdx.x] = v;
    if (!last_to_arrive(blocks_done, gridDim.x)) return;
    S total = 0;
    for (int j = threadIdx.x; j < (int)gridDim.x; j += blockDim.x) total += __ldcg(partial + j);
    total = block_sum(total, scratch);
    if (threadIdx.x == 0) *out = from_float<T>(total);
}
