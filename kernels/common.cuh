// Shared by every kernel family. NVRTC compiles these without the standard headers.
#pragma once

// Element counts and offsets are 64-bit: a 46341 x 46341 matrix already has more than 2^31 elements.
typedef long long index_t;

// The most threads an SM holds: a cap on the blocks per SM a __launch_bounds__ may ask for (ptxas warns past it).
#if __CUDA_ARCH__ == 750
constexpr int SM_THREADS = 1024;
#elif __CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890
constexpr int SM_THREADS = 1536;
#else
constexpr int SM_THREADS = 2048;
#endif

template <typename T> struct Vec16;  // the 16-byte vector holding 16 / sizeof(T) elements of T
template <> struct Vec16<float> { typedef float4 type; static const int n = 4; };
template <> struct Vec16<double> { typedef double2 type; static const int n = 2; };

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Sum of v over the block (all threads must call; blockDim.x a multiple of 32). The result is valid in thread 0.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch /* >= 32 elements of shared memory */) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // an earlier call's readers of scratch are done
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = threadIdx.x < (blockDim.x >> 5) ? scratch[threadIdx.x] : T(0);
    if (warp == 0) v = warp_sum(v);
    return v;
}

// True in every thread of the block that is the last of `expected` blocks to call this on `counter`, which it
// resets to 0 for the next launch. That block then sees what the others wrote before their calls.
__device__ __forceinline__ bool last_to_arrive(unsigned int* counter, unsigned int expected) {
    __shared__ bool is_last;
    __threadfence();  // publish this block's writes before counting it as done
    __syncthreads();
    if (threadIdx.x == 0) {
        is_last = atomicAdd(counter, 1u) == expected - 1;
        if (is_last) *counter = 0;  // every block has counted: nobody reads it again in this launch
    }
    __syncthreads();
    if (is_last) __threadfence();  // see the other blocks' writes
    return is_last;
}
