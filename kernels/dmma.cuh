// The FP64 tensor-core kernels' building blocks (matmul_dmma.cu, matmul_longk.cu): cp.async copies global -> shared
// and the m16n8k8 DMMA, as inline PTX (no CUDA headers). Every body is empty before sm_80.
#pragma once

__device__ __forceinline__ unsigned dmma_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16 bytes global -> shared; `bytes` < 16 reads that many and zero-fills the rest (0: src is never read).
__device__ __forceinline__ void dmma_cp16(unsigned dst, const void* src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
#endif
}
// The same 16 bytes as two 8-byte copies (src 8-byte aligned): `doubles` (0, 1, 2) of them read, the rest zero-filled.
__device__ __forceinline__ void dmma_cp8x2(unsigned dst, const void* src, int doubles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "cp.async.ca.shared.global.L2::128B [%0], [%1], 8, %2;\n\t"
        "cp.async.ca.shared.global.L2::128B [%0+8], [%1+8], 8, %3;" ::"r"(dst), "l"(src), "r"(doubles > 0 ? 8 : 0),
        "r"(doubles > 1 ? 8 : 0) : "memory");
#endif
}
__device__ __forceinline__ void dmma_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void dmma_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// One double from shared memory, a load the compiler keeps single (merged with its neighbour into a 16-byte load,
// the two would land in one register quad that the mma cannot take as it is); ordered with the barriers as a
// plain load is.
__device__ __forceinline__ double dmma_lds(const double* p) {
    double x;
    asm volatile("ld.shared.f64 %0, [%1];" : "=d"(x) : "r"(dmma_smem(p)) : "memory");
    return x;
}

// 8 bytes global -> shared; `bytes` 0 zero-fills them without reading src.
__device__ __forceinline__ void dmma_cp8(unsigned dst, const void* src, int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
#endif
}

// c += a b for a 16 x 8 x 8 step. a: rows g, g + 8 at k position t, then both at t + 4; b: k positions t, t + 4 of
// column g; c: row g, columns 2t, 2t + 1, then row g + 8 (g = lane / 4, t = lane % 4). sm_90 runs it as one m16n8k8,
// sm_80 as four m8n8k4.
__device__ __forceinline__ void dmma_16x8x8(double (&c)[4], const double (&a)[4], const double (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
                : "+d"(c[2 * h]), "+d"(c[2 * h + 1])
                : "d"(a[2 * e + h]), "d"(b[e]));
#endif
}
