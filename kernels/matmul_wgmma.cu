// Hopper tensor-core matrix products, sm_90a only (wgmma and setmaxnreg exist nowhere else).
// C = A @ B with f32 accumulators, rows of C contiguous (ldc = n), T = half_t, bfloat16_t or float (TF32 products).
// A_MN: A's m index is its contiguous one (F-order A), else its k index is; B_MN: B's n index is (C-order B).
// Each stage holds 128 bytes of k (BK = 128 / sizeof(T)) for BM rows of A and BN rows of B, laid out by TMA with the
// 128-byte swizzle that wgmma's descriptors name, so no thread ever touches an operand. TF32 takes the float32 bits
// as they are: the tensor cores read the top 19 (truncation; _check.tf32_tolerance covers it), as cuBLAS does.
// Read top to bottom (helpers in wgmma.cuh): the plain ring (matmul_wgmma), the warp-specialised persistent kernel
// (matmul_wgmma_fast, optionally in 2-CTA clusters sharing B by TMA multicast), the tensor cores' ceiling.
#include "wgmma.cuh"  // the helpers: mbarriers, TMA, clusters, wgmma, the epilogue

// ---------------------------------------------------------------------------------------------------- kernels
// TMA loads of swizzled tiles into a ring of stages on mbarriers; two warpgroups run wgmma on each stage in turn.
// Grid (n tiles, m tiles, products from z0); 256 threads; shared memory: cudakit._hopper.shared_bytes.
template <typename T, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(256, 1)
matmul_wgmma(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map, T* C, int m, int n,
             int k, int a_batched, int b_batched, int z0) {
    constexpr int BM = 128, BN = 128, STAGES = 4, BK = 128 / sizeof(T);
    constexpr unsigned A_BYTES = BM * 128, STAGE_BYTES = (BM + BN) * 128;
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;  // the 128-byte swizzle repeats every 1024 bytes
    const unsigned full = base + STAGES * STAGE_BYTES;            // STAGES mbarriers of 8 bytes
    const int z = z0 + blockIdx.z, row0 = blockIdx.y * BM, col0 = blockIdx.x * BN, wg = threadIdx.x / 128;
    const int k_tiles = (k + BK - 1) / BK;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) mbar_init(full + 8 * s, 1);
        mbar_init_fence();
    }
    __syncthreads();
    auto load = [&](int kt) {
        const unsigned stage = base + (kt % STAGES) * STAGE_BYTES, bar = full + 8 * (kt % STAGES);
        mbar_expect_tx(bar, STAGE_BYTES);
        load_operand<T, BM, A_MN, 1>(stage, a_map, bar, row0, kt * BK, z * a_batched, 0);
        load_operand<T, BN, B_MN, 1>(stage + A_BYTES, b_map, bar, col0, kt * BK, z * b_batched, 0);
    };
    if (threadIdx.x == 0)
        for (int kt = 0; kt < STAGES - 1 && kt < k_tiles; ++kt) load(kt);
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
    for (int kt = 0; kt < k_tiles; ++kt) {
        // The slot of k-tile kt - 1, which every warpgroup finished reading before the barrier closing that step.
        if (threadIdx.x == 0 && kt + STAGES - 1 < k_tiles) load(kt + STAGES - 1);
        const int s = kt % STAGES;
        mbar_wait(full + 8 * s, (kt / STAGES) & 1);
        wgmma_fence();
        wgmma_stage<T, BN, A_MN, B_MN>(d, base + s * STAGE_BYTES, wg * 64, base + s * STAGE_BYTES + A_BYTES, kt > 0);
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulators(d);
        __syncthreads();
    }
    store_tile<T, BN>(C + (index_t)z * m * n, d, m, n, row0 + wg * 64, col0);
}

// Warp specialisation: a producer warpgroup (registers lowered) keeps a full/empty ring of stages loaded by TMA;
// two consumer warpgroups (registers raised) run wgmma on BM x BN tiles, keeping one stage's wgmma in flight while
// the next is issued. Persistent: each block (CLUSTER == 1) or cluster walks the tiles of every product, GROUP
// tile rows at a time, so blocks running together share A and B tiles in L2. 384 threads.
// CLUSTER == 2: launched in clusters of 2 along x; the pair takes tile rows 2r and 2r + 1 of one tile column, and
// each CTA loads its own A and half of the shared B tile, multicast into both. A stage's slot is then written by
// both producers, so each CTA's empty barrier counts the consumer warps of both CTAs, and every consumer warp
// releases the slot in both. No CTA exits before its peer is done with its barriers (the closing cluster_sync).
template <typename T, int BN, int CLUSTER, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(384, 1)
matmul_wgmma_fast(const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map, T* C, int m,
                  int n, int k, int count, int a_batched, int b_batched) {
    constexpr int BM = 128, BK = 128 / sizeof(T), STAGES = BN == 256 ? 4 : 6, GROUP = 8 / CLUSTER;
    constexpr unsigned A_BYTES = BM * 128, STAGE_BYTES = (BM + BN) * 128;
    static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of 1 or 2 CTAs");
    extern __shared__ unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023) & ~1023u;
    const unsigned full = base + STAGES * STAGE_BYTES, empty = full + 8 * STAGES;
    const int rank = CLUSTER > 1 ? (int)cluster_rank() : 0;
    const long long first = CLUSTER > 1 ? cluster_id() : blockIdx.x, step = CLUSTER > 1 ? cluster_count() : gridDim.x;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(full + 8 * s, 1);                // the producer's expect_tx (and then the bytes)
            mbar_init(empty + 8 * s, CLUSTER * 2 * 4);  // every consumer warp of the cluster, its wgmma done
        }
        mbar_init_fence();
    }
    __syncthreads();
    if constexpr (CLUSTER > 1) cluster_sync();  // the peer's barriers exist before anything names them
    // Tiles in rows of CLUSTER: tile row tm = CLUSTER * (cluster tile row) + rank. A CTA whose row is past m (odd
    // tile rows) still loads (zeros) and computes, for its peer's B, and stores nothing.
    const int tiles_m = (m + BM - 1) / BM, tiles_n = (n + BN - 1) / BN, k_tiles = (k + BK - 1) / BK;
    const int rows = (tiles_m + CLUSTER - 1) / CLUSTER;
    const long long per_product = (long long)rows * tiles_n, total = per_product * count;
    const long long per_group = (long long)GROUP * tiles_n;
    auto tile_of = [&](long long t, int& z, int& tm, int& tn) {  // grouped order: GROUP rows of tiles, column by column
        z = (int)(t / per_product);
        const long long r = t - (long long)z * per_product, g = r / per_group, within = r - g * per_group;
        const int height = min(rows - (int)(g * GROUP), GROUP);
        tm = ((int)(g * GROUP) + (int)(within % height)) * CLUSTER + rank;
        tn = (int)(within / height);
    };
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0) {
            tma_prefetch_map(a_map);
            tma_prefetch_map(b_map);
            unsigned it = 0;  // stages filled so far: slot it % STAGES, round it / STAGES
            for (long long t = first; t < total; t += step) {
                int z, tm, tn;
                tile_of(t, z, tm, tn);
                for (int kt = 0; kt < k_tiles; ++kt, ++it) {
                    const unsigned s = it % STAGES, stage = base + s * STAGE_BYTES, bar = full + 8 * s;
                    mbar_wait(empty + 8 * s, ((it / STAGES) & 1) ^ 1);
                    mbar_expect_tx(bar, STAGE_BYTES);  // A, and all of B: this CTA's part and its peer's
                    load_operand<T, BM, A_MN, 1>(stage, a_map, bar, tm * BM, kt * BK, z * a_batched, 0);
                    load_operand<T, BN, B_MN, CLUSTER>(stage + A_BYTES, b_map, bar, tn * BN, kt * BK,
                                                       z * b_batched, rank);
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const int wg = threadIdx.x / 128 - 1;
        const bool lane0 = (threadIdx.x & 31) == 0;
        auto release = [&](unsigned s) {  // this warp is done reading slot s
            if (!lane0) return;
            if constexpr (CLUSTER == 1) {
                mbar_arrive(empty + 8 * s);
            } else {
#pragma unroll
                for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(empty + 8 * s, r);
            }
        };
        float d[BN / 2];
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
        unsigned it = 0;
        for (long long t = first; t < total; t += step) {
            int z, tm, tn;
            tile_of(t, z, tm, tn);
            for (int kt = 0; kt < k_tiles; ++kt, ++it) {
                const unsigned s = it % STAGES, stage = base + s * STAGE_BYTES;
                mbar_wait(full + 8 * s, (it / STAGES) & 1);
                wgmma_fence();
                wgmma_stage<T, BN, A_MN, B_MN>(d, stage, wg * 64, stage + A_BYTES, kt > 0);
                wgmma_commit();
                wgmma_wait<1>();  // the previous stage's wgmma is done: hand its slot back
                if (kt > 0) release((it - 1) % STAGES);
            }
            wgmma_wait<0>();
            fence_accumulators(d);
            release((it - 1) % STAGES);
            store_tile<T, BN, true>(C + (index_t)z * m * n, d, m, n, tm * BM + wg * 64, tn * BN);
        }
    }
    if constexpr (CLUSTER > 1) cluster_sync();
}

// ---------------------------------------------------------------------------------------------------- ceiling
// The tensor cores' throughput: two warpgroups per block issue m64n256 wgmma back to back (one stage's k-steps a
// round, one round kept in flight) from one fixed, swizzled stage tile in shared memory into register accumulators;
// nothing else runs. Inputs are small positive values, so the sum is never negative: the store under that test
// only keeps the work observable. One block per SM, 256 threads, THROUGHPUT_SHARED bytes of dynamic shared memory.
template <typename T>
__global__ void __launch_bounds__(256, 1) wgmma_throughput(float* sink, int iterations) {
    constexpr unsigned A_BYTES = 64 * 128, B_BYTES = 256 * 128;
    extern __shared__ unsigned char smem_raw[];
    const unsigned offset = ((smem_u32(smem_raw) + 1023) & ~1023u) - smem_u32(smem_raw);
    unsigned* words = reinterpret_cast<unsigned*>(smem_raw + offset);
    for (unsigned i = threadIdx.x; i < (A_BYTES + B_BYTES) / 4; i += blockDim.x)  // 2^-6 and a little, positive
        words[i] = sizeof(T) == 2 ? 0x24002400u + (i & 15u) * 0x10001u : 0x3C800000u + ((i & 15u) << 13);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic stores that wgmma reads next
    __syncthreads();
    const unsigned a = smem_u32(smem_raw) + offset, b = a + A_BYTES;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;
    for (int i = 0; i < iterations; ++i) {
        wgmma_fence();
        wgmma_stage<T, 256, false, false>(d, a, 0, b, true);
        wgmma_commit();
        wgmma_wait<1>();
    }
    wgmma_wait<0>();
    fence_accumulators(d);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < 128; ++i) sum += d[i];
    if (sum < 0.f) sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
