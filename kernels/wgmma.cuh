// Hopper (sm_90a) building blocks of kernels/matmul_wgmma.cu: mbarriers, TMA loads (multicast too), clusters, wgmma
// descriptors and issue, the accumulators' epilogue. Stage tiles are 128-byte lines of k laid out by TMA with the
// 128-byte swizzle that wgmma's descriptors name, each tile starting on 1024 bytes.
#pragma once

#include "half.cuh"

// cuTensorMapEncodeTiled's 128 opaque bytes, passed by value as a __grid_constant__ parameter.
struct __align__(64) TensorMap { unsigned long long words[16]; };

template <typename A, typename B> struct same_type { static constexpr bool value = false; };
template <typename A> struct same_type<A, A> { static constexpr bool value = true; };

// ---------------------------------------------------------------------------------------------------- mbarriers
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the copy engine (the async proxy) before any TMA names them.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// The one arrival a full barrier waits for, announcing the bytes the TMA loads will complete on it.
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Wait until the barrier's phase of this parity has completed. A fresh barrier counts its phase "before 0" (parity 1)
// as complete, which is how a producer passes its first round of empty barriers without waiting.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// ---------------------------------------------------------------------------------------------------- TMA
// One box of a 3-D tensor map (batch outermost) into shared memory; its bytes complete on `bar`. Boxes reaching past
// the tensor's edge are zero-filled and still count their full size.
__device__ __forceinline__ void tma_load(unsigned dst, const TensorMap& map, unsigned bar, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void tma_prefetch_map(const TensorMap& map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(&map)) : "memory");
}

// The same box, written at the same shared-memory offset in every CTA of the cluster named in `mask`; its bytes
// complete on the barrier at `bar`'s offset in each of them.
__device__ __forceinline__ void tma_load_multicast(unsigned dst, const TensorMap& map, unsigned bar, int c0, int c1,
                                                   int c2, unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;"
                 ::"r"(dst), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar),
                 "h"(mask) : "memory");
}

// Part `part` of PARTS of a stage tile of ROWS rows (of m for A, of n for B) by 128 bytes of k from k index k0:
// PARTS == 1, the whole tile into this CTA; PARTS > 1, rows [part, part + 1) * ROWS / PARTS, multicast into every
// CTA of the cluster, which loads the other parts likewise. K-major: one box of BK x ROWS / PARTS, each row one
// 128-byte swizzle line. MN-major: boxes of 64 rows (128 bytes) x BK lines of k, one after another.
template <typename T, int ROWS, bool MN, int PARTS>
__device__ __forceinline__ void load_operand(unsigned dst, const TensorMap& map, unsigned bar, int row0, int k0,
                                             int z, int part) {
    constexpr int BK = 128 / sizeof(T), SUB = ROWS / PARTS;
    static_assert(!MN || SUB % 64 == 0, "MN-major parts are whole 64-row boxes");
    constexpr unsigned short MASK = (1u << PARTS) - 1;
    if (MN) {
#pragma unroll
        for (int c = 0; c < SUB / 64; ++c) {
            const int box = part * (SUB / 64) + c;
            if (PARTS == 1) tma_load(dst + box * BK * 128, map, bar, row0 + 64 * box, k0, z);
            else tma_load_multicast(dst + box * BK * 128, map, bar, row0 + 64 * box, k0, z, MASK);
        }
    } else {
        if (PARTS == 1) tma_load(dst, map, bar, k0, row0, z);
        else tma_load_multicast(dst + part * SUB * 128, map, bar, k0, row0 + part * SUB, z, MASK);
    }
}

// ---------------------------------------------------------------------------------------------------- clusters
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned cluster_id() {
    unsigned r;
    asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}
__device__ __forceinline__ unsigned cluster_count() {
    unsigned r;
    asm volatile("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
    return r;
}

// Every thread of every CTA of the cluster: what each wrote before it (barrier inits included) is seen by all after.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\n barrier.cluster.wait.acquire;" ::: "memory");
}

// Arrive on the barrier at `bar`'s offset in the shared memory of CTA `rank` of the cluster (this one included).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) {
    asm volatile("{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
                 " mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}" ::"r"(bar), "r"(rank)
                 : "memory");
}

// ---------------------------------------------------------------------------------------------------- wgmma
// A shared-memory matrix descriptor: start address, leading and stride byte offsets (all in 16-byte units), 128-byte
// swizzle (mode 1 in bits 62-63). Stage tiles start on 1024 bytes, so the base-offset field stays 0.
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}

// The descriptor of rows [row0, row0 + 64 or N) of a stage tile at k-step ks (32 bytes of k: k16, or k8 for TF32).
// K-major: rows are 128-byte lines, 8-line groups 1024 bytes apart (SBO); a k-step moves the start 32 bytes along
// the line (the swizzle is applied to the final address); LBO is unused. MN-major: lines are k, each 64 rows of
// m/n wide; 8-line groups 1024 bytes apart (SBO), 64-row chunks BK * 128 bytes apart (LBO).
template <typename T, bool MN>
__device__ __forceinline__ unsigned long long operand_desc(unsigned tile, int row0, int ks) {
    constexpr unsigned BK = 128 / sizeof(T);
    if (MN) return smem_desc(tile + (row0 / 64) * (BK * 128) + ks * (32 / sizeof(T)) * 128, BK * 128, 1024);
    return smem_desc(tile + row0 * 128 + ks * 32, 16, 1024);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads or writes of the accumulators across a wgmma wait.
template <int N> __device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define WGMMA_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                    "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_D64 WGMMA_D8(0), WGMMA_D8(8), WGMMA_D8(16), WGMMA_D8(24), WGMMA_D8(32), WGMMA_D8(40), WGMMA_D8(48), \
                  WGMMA_D8(56)
#define WGMMA_D128 WGMMA_D64, WGMMA_D8(64), WGMMA_D8(72), WGMMA_D8(80), WGMMA_D8(88), WGMMA_D8(96), WGMMA_D8(104), \
                   WGMMA_D8(112), WGMMA_D8(120)
#define WGMMA_R64 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, " \
    "%43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WGMMA_R128 WGMMA_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, " \
    "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, " \
    "%120, %121, %122, %123, %124, %125, %126, %127"
// d (64 x N, f32) = A (64 x k-step) * B (k-step x N) + (scale_d ? d : 0); the operands' descriptors, the transpose
// immediates (1: MN-major) for the 16-bit types. D: the operand list, R: its text, A/S/T: the descriptor, scale and
// transpose operand numbers.
#define WGMMA_ASM(SHAPE, TYPES, R, D, A, B, S, TRANSPOSE)                                                         \
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #S ", 0;\n"                                              \
                 " wgmma.mma_async.sync.aligned." SHAPE TYPES " {" R "}, %" #A ", %" #B ", p, 1, 1" TRANSPOSE    \
                 ";\n}\n"                                                                                       \
                 : D : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"((int)TA), "n"((int)TB))

template <typename T, int N, bool TA, bool TB>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], unsigned long long desc_a, unsigned long long desc_b,
                                      int scale_d) {
    static_assert(N == 128 || N == 256, "wgmma tiles of 128 or 256 columns");
    if constexpr (N == 256) {
        if constexpr (same_type<T, half_t>::value)
            WGMMA_ASM("m64n256k16", ".f32.f16.f16", WGMMA_R128, WGMMA_D128, 128, 129, 130, ", %131, %132");
        else if constexpr (same_type<T, bfloat16_t>::value)
            WGMMA_ASM("m64n256k16", ".f32.bf16.bf16", WGMMA_R128, WGMMA_D128, 128, 129, 130, ", %131, %132");
        else  // TF32 reads K-major operands only: there are no transpose immediates
            WGMMA_ASM("m64n256k8", ".f32.tf32.tf32", WGMMA_R128, WGMMA_D128, 128, 129, 130, "");
    } else {
        if constexpr (same_type<T, half_t>::value)
            WGMMA_ASM("m64n128k16", ".f32.f16.f16", WGMMA_R64, WGMMA_D64, 64, 65, 66, ", %67, %68");
        else if constexpr (same_type<T, bfloat16_t>::value)
            WGMMA_ASM("m64n128k16", ".f32.bf16.bf16", WGMMA_R64, WGMMA_D64, 64, 65, 66, ", %67, %68");
        else
            WGMMA_ASM("m64n128k8", ".f32.tf32.tf32", WGMMA_R64, WGMMA_D64, 64, 65, 66, "");
    }
}

// One stage's four k-steps into the warpgroup's 64 x N accumulators: A rows a_row0.. of the A tile, all N of B.
template <typename T, int N, bool A_MN, bool B_MN>
__device__ __forceinline__ void wgmma_stage(float (&d)[N / 2], unsigned a_tile, int a_row0, unsigned b_tile,
                                            bool accumulate) {
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
        wgmma<T, N, A_MN, B_MN>(d, operand_desc<T, A_MN>(a_tile, a_row0, ks), operand_desc<T, B_MN>(b_tile, 0, ks),
                                (accumulate || ks > 0) ? 1 : 0);
}

// ---------------------------------------------------------------------------------------------------- epilogue
__device__ __forceinline__ void store_pair(half_t* p, float x, float y) {
    *reinterpret_cast<unsigned*>(p) = from_float<half_t>(x).bits | ((unsigned)from_float<half_t>(y).bits << 16);
}
__device__ __forceinline__ void store_pair(bfloat16_t* p, float x, float y) {
    *reinterpret_cast<unsigned*>(p) =
        from_float<bfloat16_t>(x).bits | ((unsigned)from_float<bfloat16_t>(y).bits << 16);
}
__device__ __forceinline__ void store_pair(float* p, float x, float y) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
}

// Lane q of each quad (4 lanes) holds v[0..3]; afterwards it holds v[i] = (v[q] of lane i): a 4 x 4 transpose
// across the quad. The registers are first rotated by q (selects: no run-time register index), so that the one
// each shuffle step sends is the same in every lane, then rotated back.
__device__ __forceinline__ void quad_transpose(unsigned (&v)[4]) {
    const int q = threadIdx.x & 3, lane = threadIdx.x & 31;
    unsigned a[4], b[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) {  // a[t] = v[(q - t) & 3]
        const unsigned lo = (q & 1) ? v[(5 - t) & 3] : v[(4 - t) & 3];  // v[((q & 1) - t) & 3]
        const unsigned hi = (q & 1) ? v[(7 - t) & 3] : v[(6 - t) & 3];  // v[((q & 1) + 2 - t) & 3]
        a[t] = (q & 2) ? hi : lo;
    }
    b[0] = a[0];  // step 0: lane q's own v[q]
#pragma unroll
    for (int t = 1; t < 4; ++t)  // from lane i = q + t of the quad: its a[t] = v[(i - t) & 3] = v[q]
        b[t] = __shfl_sync(0xffffffffu, a[t], (lane & ~3) | ((q + t) & 3));
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // v[i] = b[(i - q) & 3]
        const unsigned lo = (q & 1) ? b[(i + 3) & 3] : b[i & 3];
        const unsigned hi = (q & 1) ? b[(i + 1) & 3] : b[(i + 2) & 3];
        v[i] = (q & 2) ? hi : lo;
    }
}

__device__ __forceinline__ unsigned pack2(float x, float y, half_t) {
    return from_float<half_t>(x).bits | ((unsigned)from_float<half_t>(y).bits << 16);
}
__device__ __forceinline__ unsigned pack2(float x, float y, bfloat16_t) {
    return from_float<bfloat16_t>(x).bits | ((unsigned)from_float<bfloat16_t>(y).bits << 16);
}

// The warpgroup's 64 x N accumulators to C at (row0, col0), rounded to T, masked to m x n. wgmma's layout: warp w
// holds rows 16w..16w+15; in each 8-column group j a thread holds (lane/4, 2(lane%4) + {0,1}) and the same 8 rows on.
// WIDE (16-bit T, rows of whole 16 bytes, C on 16 bytes): each quad trades its pairs so that lane q stores all 8
// columns of group 4g + q in one 16-byte store; a row of a quad's four stores is then 64 contiguous bytes.
template <typename T, int N, bool WIDE = false>
__device__ __forceinline__ void store_tile(T* C, const float (&d)[N / 2], int m, int n, int row0, int col0) {
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
    const int r = row0 + warp * 16 + (lane >> 2);
    if constexpr (WIDE && sizeof(T) == 2) {
        if (n % 8 == 0 && reinterpret_cast<unsigned long long>(C) % 16 == 0) {
#pragma unroll
            for (int g = 0; g < N / 32; ++g) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    unsigned v[4];
#pragma unroll
                    for (int jj = 0; jj < 4; ++jj)
                        v[jj] = pack2(d[4 * (4 * g + jj) + 2 * h], d[4 * (4 * g + jj) + 2 * h + 1], T());
                    quad_transpose(v);  // every lane takes part, stored or not
                    const int row = r + 8 * h, c = col0 + 8 * (4 * g + (lane & 3));
                    if (row < m && c < n)  // n % 8 == 0: the 8 columns from c are all inside
                        *reinterpret_cast<uint4*>(C + (index_t)row * n + c) = make_uint4(v[0], v[1], v[2], v[3]);
                }
            }
            return;
        }
    }
    const bool pairs = n % 2 == 0 && reinterpret_cast<unsigned long long>(C) % (2 * sizeof(T)) == 0;
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
        const int c = col0 + j * 8 + (lane & 3) * 2;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = r + 8 * h;
            if (row < m && c < n) {
                T* p = C + (index_t)row * n + c;
                const float x = d[4 * j + 2 * h], y = d[4 * j + 2 * h + 1];
                if (pairs) {  // n even: c + 1 < n too
                    store_pair(p, x, y);
                } else {
                    p[0] = from_float<T>(x);
                    if (c + 1 < n) p[1] = from_float<T>(y);
                }
            }
        }
    }
}
