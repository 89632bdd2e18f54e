// matmul.cu's kernels for small and skinny problems (included at its end): matmul_skinny, matmul_dots,
// matmul_batched_small, matmul_batched_tiny.

// ---- Skinny products: one side of C at most NP long, the other long, k short, so the product is bound by memory.
// A thread computes one line of C across its short side (p <= NP outputs): the short operand S (k x p, zero-padded
// to NP columns) sits in shared memory and is read as broadcast 16-byte vectors, the long one L one element of its
// line per k. Line r's output j is C[r * ldc + j] when ROWS (n short: the block's lines are one contiguous run of C,
// staged through shared memory so that the stores are coalesced), else C[j * ldc + r] (m short: consecutive
// threads store consecutive addresses as they are).
constexpr int SKINNY_THREADS = 128;

template <typename T, int NP, bool ROWS>
__global__ void __launch_bounds__(SKINNY_THREADS) matmul_skinny(const T* __restrict__ L, const T* __restrict__ S,
    T* __restrict__ C, index_t lines, int p, index_t k, index_t l_line, index_t l_k, index_t s_k, index_t s_j,
    index_t ldc) {
    typedef typename Vec16<T>::type V;
    constexpr int W = Vec16<T>::n;
    extern __shared__ __align__(16) unsigned char skinny_shared[];
    T* Ss = reinterpret_cast<T*>(skinny_shared);
    for (index_t i = threadIdx.x; i < k * NP; i += SKINNY_THREADS) {
        const int j = (int)(i % NP);
        Ss[i] = j < p ? S[(i / NP) * s_k + j * s_j] : T(0);
    }
    __syncthreads();
    const index_t first = (index_t)blockIdx.x * SKINNY_THREADS;
    const index_t r = first + threadIdx.x;
    T acc[NP];
#pragma unroll
    for (int j = 0; j < NP; ++j) acc[j] = T(0);
    if (r < lines) {
        const T* line = L + r * l_line;
        for (index_t kk = 0; kk < k; ++kk) {
            const T a = __ldg(line + kk * l_k);
            const V* s = reinterpret_cast<const V*>(Ss + kk * NP);
#pragma unroll
            for (int v = 0; v < NP / W; ++v) {
                union { V vector; T lane[W]; } u;
                u.vector = s[v];
#pragma unroll
                for (int w = 0; w < W; ++w) acc[v * W + w] += a * u.lane[w];
            }
        }
    }
    if (!ROWS) {
        if (r < lines) {
#pragma unroll
            for (int j = 0; j < NP; ++j)
                if (j < p) C[j * ldc + r] = acc[j];
        }
        return;
    }
    __syncthreads();  // S is read: its shared memory now stages the block's rows, p + 1 apart
#pragma unroll
    for (int j = 0; j < NP; ++j)
        if (j < p) Ss[threadIdx.x * (p + 1) + j] = acc[j];
    __syncthreads();
    const index_t here = lines - first < SKINNY_THREADS ? lines - first : SKINNY_THREADS;
    T* out = C + first * ldc;  // ldc == p: the block's rows are here * p consecutive elements
    for (int i = threadIdx.x; i < here * p; i += SKINNY_THREADS) out[i] = Ss[(i / p) * (p + 1) + i % p];
}

// ---- Tiny C, long k: each block takes a run of k for one DM x DN part of C, its threads striding over that run
// (thread t takes k = t of every DOTS_THREADS), each keeping all DM x DN sums; the block adds its threads' sums in a
// fixed order and stores them as one partial C (partials[blockIdx.x]), which splitk_sum adds up. A batch of
// `count` products, batch_a and batch_b elements apart, numbers its blocks run by run, product by product
// (blockIdx.x = run * count + product), so that the partials of one run are the batch's Cs one after the other:
// for one run, C itself.
constexpr int DOTS_THREADS = 256;

// One step of a warp's reduce-scatter over the first 2 * HALF of acc: a lane keeps the upper half where its bit
// `o` is set (else the lower) and adds its partner's (lane ^ o) copy of that half, into acc[0, HALF).
template <int HALF, typename T>
__device__ __forceinline__ void dots_halve(T* acc, int lane, int o) {
    const bool upper = lane & o;
#pragma unroll
    for (int e = 0; e < HALF; ++e) {
        const T send = upper ? acc[e] : acc[e + HALF];
        acc[e] = (upper ? acc[e + HALF] : acc[e]) + __shfl_xor_sync(0xffffffffu, send, o);
    }
}

template <typename T, int DM, int DN>
__global__ void __launch_bounds__(DOTS_THREADS, sizeof(T) == 4 ? 2 : 1) matmul_dots(const T* __restrict__ A,
    const T* __restrict__ B, T* __restrict__ partials, index_t m, index_t n, index_t k, index_t run, index_t a_m,
    index_t a_k, index_t b_k, index_t b_n, index_t count, index_t batch_a, index_t batch_b) {
    constexpr int SUMS = DM * DN, WARPS = DOTS_THREADS / 32;
    static_assert(SUMS % 32 == 0, "the warp's reduce-scatter leaves each lane SUMS / 32 sums");
    __shared__ T warp_sums[WARPS][SUMS];
    const index_t product = (index_t)blockIdx.x % count, r = (index_t)blockIdx.x / count;
    A += product * batch_a;
    B += product * batch_b;
    const index_t i0 = (index_t)blockIdx.y * DM, j0 = (index_t)blockIdx.z * DN;
    const index_t k_end = (r + 1) * run < k ? (r + 1) * run : k;
    const int t = threadIdx.x;
    T acc[SUMS];
#pragma unroll
    for (int e = 0; e < SUMS; ++e) acc[e] = T(0);
    for (index_t kk = r * run + t; kk < k_end; kk += DOTS_THREADS) {
        T a[DM], b[DN];
#pragma unroll
        for (int i = 0; i < DM; ++i) a[i] = i0 + i < m ? __ldg(A + (i0 + i) * a_m + kk * a_k) : T(0);
#pragma unroll
        for (int j = 0; j < DN; ++j) b[j] = j0 + j < n ? __ldg(B + kk * b_k + (j0 + j) * b_n) : T(0);
#pragma unroll
        for (int i = 0; i < DM; ++i)
#pragma unroll
            for (int j = 0; j < DN; ++j) acc[i * DN + j] += a[i] * b[j];
    }
    // Reduce-scatter across the warp (dots_halve five times): each lane ends with SUMS / 32 of the warp's totals,
    // from sum e0 on, e0 spelled out by the lane's bits. Warps past the run's end hold only zeros: they skip it,
    // and the block's sum leaves them out.
    const int warp = t / 32, lane = t % 32;
    const index_t lines = k_end - r * run;
    const int busy = lines < DOTS_THREADS ? (int)(lines + 31) / 32 : WARPS;
    if (warp < busy) {
        dots_halve<SUMS / 2>(acc, lane, 16);
        dots_halve<SUMS / 4>(acc, lane, 8);
        dots_halve<SUMS / 8>(acc, lane, 4);
        dots_halve<SUMS / 16>(acc, lane, 2);
        dots_halve<SUMS / 32>(acc, lane, 1);
        const int e0 = (lane & 16 ? SUMS / 2 : 0) + (lane & 8 ? SUMS / 4 : 0) + (lane & 4 ? SUMS / 8 : 0) +
                       (lane & 2 ? SUMS / 16 : 0) + (lane & 1 ? SUMS / 32 : 0);
#pragma unroll
        for (int e = 0; e < SUMS / 32; ++e) warp_sums[warp][e0 + e] = acc[e];
    }
    __syncthreads();
    for (int e = t; e < SUMS; e += DOTS_THREADS) {
        const index_t i = i0 + e / DN, j = j0 + e % DN;
        if (i < m && j < n) {
            T sum = warp_sums[0][e];
            for (int w = 1; w < busy; ++w) sum += warp_sums[w][e];
            partials[(index_t)blockIdx.x * m * n + i * n + j] = sum;
        }
    }
}

// ---- Batches of small products: one block per BM x BN tile of one product (blockIdx.x the tile, blockIdx.y the
// product), the whole C of a small product in one or a few blocks, so that a batch of tiny products is not one
// padded 64 x 64 tile each. The block's rows of A and columns of B, over the whole of k (the host keeps k short and
// sizes the dynamic shared memory to it), are copied into shared memory at once with cp.async: no registers hold
// them on the way, so more blocks stay resident and more of their loads are in flight. A thread then keeps OUT
// consecutive rows of one column of the tile: per k step one read of B and OUT / W vector reads of A (stored
// k-major), broadcast across the lanes that share the rows. Any strides: each operand is copied along whichever of
// its indices is contiguous (a_k == 1: along k), in slices of BK.
constexpr int SMALL_THREADS = 256;

template <typename T>
__device__ __forceinline__ void copy_element_async(T* shared_dst, const T* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned dst = (unsigned)__cvta_generic_to_shared(shared_dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(src), "n"(sizeof(T)) : "memory");
#else
    *shared_dst = __ldg(src);
#endif
}

__device__ __forceinline__ void copies_arrived() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
    __syncthreads();
}

template <typename T, int BM, int BN, int BK>
__global__ void __launch_bounds__(SMALL_THREADS) matmul_batched_small(const T* __restrict__ A,
    const T* __restrict__ B, T* __restrict__ C, index_t m, index_t n, index_t k, index_t a_m, index_t a_k,
    index_t b_k, index_t b_n, index_t batch_a, index_t batch_b, index_t batch_c, int tiles_n) {
    typedef typename Vec16<T>::type V;
    constexpr int W = Vec16<T>::n;
    constexpr int OUT = BM * BN / SMALL_THREADS;
    constexpr int LDA = BM % W == 0 ? BM + W : BM;  // rows of As stay 16-byte aligned, k-wise copies spread
    constexpr int LDB = BN + 1;  // + 1: a k-wise copy of B spreads over the banks
    constexpr int A_LOADS = (BM * BK + SMALL_THREADS - 1) / SMALL_THREADS;
    constexpr int B_LOADS = (BK * BN + SMALL_THREADS - 1) / SMALL_THREADS;
    static_assert(OUT >= 1 && SMALL_THREADS % BN == 0 && BM * BN % SMALL_THREADS == 0, "tile shape");
    T* const As = tile_shared<T>((int)k * (LDA + LDB));  // k rows of LDA, then k rows of LDB
    T* const Bs = As + k * LDA;

    A += blockIdx.y * batch_a;
    B += blockIdx.y * batch_b;
    C += blockIdx.y * batch_c;
    const index_t i0 = (index_t)(blockIdx.x / tiles_n) * BM, j0 = (index_t)(blockIdx.x % tiles_n) * BN;
    // Element e = t + l * SMALL_THREADS of a slice, ordered along the operand's contiguous index, is this thread's
    // first element plus l steps of (rows, k): along k, SMALL_THREADS / BK rows a step; else SMALL_THREADS / BM of k.
    const int t = threadIdx.x;
    const bool a_along_k = a_k == 1 && a_m != 1, b_along_k = b_k == 1 && b_n != 1;
    const int a_i = a_along_k ? t / BK : t % BM, a_kk = a_along_k ? t % BK : t / BM;
    const int a_di = a_along_k ? SMALL_THREADS / BK : 0, a_dk = a_along_k ? 0 : SMALL_THREADS / BM;
    const int b_j = b_along_k ? t / BK : t % BN, b_kk = b_along_k ? t % BK : t / BN;
    const int b_dj = b_along_k ? SMALL_THREADS / BK : 0, b_dk = b_along_k ? 0 : SMALL_THREADS / BN;
    const T* a_ptr = A + (i0 + a_i) * a_m + a_kk * a_k;
    const T* b_ptr = B + b_kk * b_k + (j0 + b_j) * b_n;
    const index_t a_step = a_di * a_m + a_dk * a_k, b_step = b_dk * b_k + b_dj * b_n;
    for (index_t k0 = 0; k0 < k; k0 += BK) {  // every slice's copies issued before any is waited for
#pragma unroll
        for (int l = 0; l < A_LOADS; ++l) {
            const int kk = a_kk + l * a_dk;
            if (t + l * SMALL_THREADS >= BM * BK || k0 + kk >= k) continue;
            T* dst = &As[(k0 + kk) * LDA + a_i + l * a_di];
            if (i0 + a_i + l * a_di < m) copy_element_async(dst, a_ptr + k0 * a_k + l * a_step);
            else *dst = T(0);
        }
#pragma unroll
        for (int l = 0; l < B_LOADS; ++l) {
            const int kk = b_kk + l * b_dk;
            if (t + l * SMALL_THREADS >= BK * BN || k0 + kk >= k) continue;
            T* dst = &Bs[(k0 + kk) * LDB + b_j + l * b_dj];
            if (j0 + b_j + l * b_dj < n) copy_element_async(dst, b_ptr + k0 * b_k + l * b_step);
            else *dst = T(0);
        }
    }
    copies_arrived();

    // One k step: this thread's OUT rows from As (16-byte reads where they hold whole vectors) times B's element.
    const int col = t % BN, row0 = t / BN * OUT;
    T acc[OUT];
#pragma unroll
    for (int o = 0; o < OUT; ++o) acc[o] = T(0);
    auto step = [&](index_t kk) {
        const T b = Bs[kk * LDB + col];
        const T* a_row = As + kk * LDA + row0;
        if constexpr (OUT % W == 0) {
#pragma unroll
            for (int v = 0; v < OUT / W; ++v) {
                union { V vector; T lane[W]; } a;
                a.vector = *reinterpret_cast<const V*>(a_row + v * W);
#pragma unroll
                for (int w = 0; w < W; ++w) acc[v * W + w] += a.lane[w] * b;
            }
        } else {
#pragma unroll
            for (int o = 0; o < OUT; ++o) acc[o] += a_row[o] * b;
        }
    };
    index_t kk = 0;
    for (; kk + BK <= k; kk += BK) {
#pragma unroll
        for (int s = 0; s < BK; ++s) step(kk + s);
    }
    for (; kk < k; ++kk) step(kk);
    const index_t j = j0 + col;
    if (j >= n) return;
#pragma unroll
    for (int o = 0; o < OUT; ++o) {
        const index_t i = i0 + row0 + o;
        if (i < m) C[i * n + j] = acc[o];
    }
}

// ---- Batches of tiny products (m <= BM, n <= BN, both at most 32; rows of A and B contiguous): one block per
// product, GROUPS groups of 8 x BN / 4 threads. Each group copies a chunk of k of A (m x k) and B (k x n) into shared
// memory as they lie, rows padded: 16 bytes a cp.async where every row starts on 16 bytes (VEC), else an element at a
// time. One group takes TINY_CHUNK of k at a time (a short k whole); GROUPS > 1 take consecutive TINY_SPLIT_CHUNKs
// side by side, so that a deep k with few products per SM keeps GROUPS chunks in flight per block, and add their
// sums in shared memory in group order at the end. Thread (ty, tx) of a group keeps rows ty, ty + 8, ... and columns
// 4 tx .. 4 tx + 3 of C: per W-deep step of k one vector read per row of A and W reads of its 4 columns of B, for
// BM / 8 * 4 * W multiply-adds (the small-product kernel's threads do 1 * OUT per two reads). A warp's reads of A hit
// consecutive rows, which a pitch of 4 (mod 8) words spreads over distinct banks.
constexpr int TINY_ROW_THREADS = 8;
constexpr int TINY_COLS = 4;
constexpr int TINY_CHUNK = 64;  // the depth of k one group stages at once: a longer k is summed chunk by chunk
constexpr int TINY_SPLIT_CHUNK = 32;  // ... where several groups share the block
static_assert(TINY_CHUNK % Vec16<float>::n == 0 && TINY_SPLIT_CHUNK % Vec16<float>::n == 0,
              "every chunk but the last starts on a whole 16-byte vector");

// f(i, j) for the elements e = first, first + step, ... of a rows x cols grid (e = i * cols + j): one division in all.
template <typename F>
__device__ __forceinline__ void for_grid(int rows, int cols, int first, int step, F&& f) {
    int i = first / cols, j = first - i * cols;
    const int di = step / cols, dj = step - di * cols;
    for (; i < rows; i += di) {
        f(i, j);
        j += dj;
        if (j >= cols) {
            j -= cols;
            ++i;
        }
    }
}

template <typename T>
__device__ __forceinline__ void copy_chunk_async(T* shared_dst, const T* src, int bytes) {  // bytes < 16: zero-filled
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned dst = (unsigned)__cvta_generic_to_shared(shared_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
#else
    constexpr int W = Vec16<T>::n;
#pragma unroll
    for (int w = 0; w < W; ++w) shared_dst[w] = w * (int)sizeof(T) < bytes ? __ldg(src + w) : T(0);
#endif
}

template <typename T, int BM, int BN, bool VEC, int GROUPS>
__global__ void __launch_bounds__(GROUPS * TINY_ROW_THREADS * BN / TINY_COLS) matmul_batched_tiny(
    const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int m, int n, int k, index_t lda,
    index_t ldb, index_t batch_a, index_t batch_b, index_t batch_c, int vec_c) {
    typedef typename Vec16<T>::type V;
    union Lanes { V vector; T lane[Vec16<T>::n]; };
    constexpr int W = Vec16<T>::n, TM = BM / TINY_ROW_THREADS, TX = BN / TINY_COLS, THREADS = TINY_ROW_THREADS * TX;
    constexpr int CHUNK = GROUPS == 1 ? TINY_CHUNK : TINY_SPLIT_CHUNK;
    static_assert(BM % TINY_ROW_THREADS == 0 && BN % TINY_COLS == 0 && TINY_COLS % W == 0, "tile shape");
    const int chunk = k < CHUNK ? k : CHUNK;  // the depth a group stages at once
    const int chunk_w = (chunk + W - 1) / W * W;
    const int pitch = chunk_w % (2 * W) == 0 ? chunk_w + W : chunk_w;  // W (mod 2 W) elements: 4 (mod 8) words
    const int staging = m * pitch + chunk_w * BN;  // m rows of `pitch`, then chunk_w rows of BN
    const int region = GROUPS == 1 || staging >= m * BN ? staging : m * BN;  // a group's: its staging, its sums
    const int group = GROUPS == 1 ? 0 : (int)threadIdx.x / THREADS;
    T* const As = tile_shared<T>(GROUPS * region) + group * region;
    T* const Bs = As + m * pitch;

    const index_t z = blockIdx.x;
    A += z * batch_a;
    B += z * batch_b;
    C += z * batch_c;
    const int t = (int)threadIdx.x - group * THREADS;
    const int tx = t % TX, ty = t / TX;
    T acc[TM][TINY_COLS];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int c = 0; c < TINY_COLS; ++c) acc[r][c] = T(0);
    for (int base = 0; base < k; base += GROUPS * chunk) {  // every group passes every barrier
        const int k0 = base + group * chunk;
        const int depth = k - k0 < 0 ? 0 : k - k0 < chunk ? k - k0 : chunk;
        const int kw = (depth + W - 1) / W * W;  // this chunk in whole vectors; A's tail and B's rows past it zeros
        const T* a = A + k0;
        const T* b = B + (index_t)k0 * ldb;
        if (base) __syncthreads();  // every thread is done with the previous chunk
        if (VEC && depth) {
            for_grid(m, kw / W, t, THREADS, [&](int i, int c) {
                const int p = c * W;
                copy_chunk_async(As + i * pitch + p, a + i * lda + p, (depth - p < W ? depth - p : W) * (int)sizeof(T));
            });
            for_grid(depth, (n + W - 1) / W, t, THREADS, [&](int p, int c) {
                const int j = c * W;
                copy_chunk_async(Bs + p * BN + j, b + p * ldb + j, (n - j < W ? n - j : W) * (int)sizeof(T));
            });
            for (int e = t; e < (kw - depth) * BN; e += THREADS) Bs[depth * BN + e] = T(0);
        } else if (depth) {
            for_grid(m, kw, t, THREADS, [&](int i, int p) {
                if (p < depth) copy_element_async(As + i * pitch + p, a + i * lda + p);
                else As[i * pitch + p] = T(0);
            });
            for_grid(kw, n, t, THREADS, [&](int p, int j) {
                if (p < depth) copy_element_async(Bs + p * BN + j, b + p * ldb + j);
                else Bs[p * BN + j] = T(0);
            });
        }
        copies_arrived();

        for (int kk = 0; kk < kw; kk += W) {
            Lanes av[TM], bv[W][TINY_COLS / W];
#pragma unroll
            for (int r = 0; r < TM; ++r) {  // a row past m reads row m - 1 (only m rows are staged), never stored
                const int i = ty + r * TINY_ROW_THREADS < m ? ty + r * TINY_ROW_THREADS : m - 1;
                av[r].vector = *reinterpret_cast<const V*>(As + i * pitch + kk);
            }
#pragma unroll
            for (int w = 0; w < W; ++w)
#pragma unroll
                for (int v = 0; v < TINY_COLS / W; ++v)
                    bv[w][v].vector = *reinterpret_cast<const V*>(Bs + (kk + w) * BN + tx * TINY_COLS + v * W);
#pragma unroll
            for (int r = 0; r < TM; ++r)
#pragma unroll
                for (int w = 0; w < W; ++w)
#pragma unroll
                    for (int c = 0; c < TINY_COLS; ++c) acc[r][c] += av[r].lane[w] * bv[w][c / W].lane[c % W];
        }
    }
    if (GROUPS > 1) {  // groups 1.. leave their sums in their regions; group 0 adds them in order
        __syncthreads();
        if (group) {
#pragma unroll
            for (int r = 0; r < TM; ++r)
                if (ty + r * TINY_ROW_THREADS < m)
#pragma unroll
                    for (int c = 0; c < TINY_COLS; ++c)
                        As[(ty + r * TINY_ROW_THREADS) * BN + tx * TINY_COLS + c] = acc[r][c];
        }
        __syncthreads();
        if (group) return;
        for (int g = 1; g < GROUPS; ++g)
#pragma unroll
            for (int r = 0; r < TM; ++r)
                if (ty + r * TINY_ROW_THREADS < m)
#pragma unroll
                    for (int c = 0; c < TINY_COLS; ++c)
                        acc[r][c] += As[g * region + (ty + r * TINY_ROW_THREADS) * BN + tx * TINY_COLS + c];
    }
    const int j = tx * TINY_COLS;
    if (j >= n) return;
#pragma unroll
    for (int r = 0; r < TM; ++r) {
        const int i = ty + r * TINY_ROW_THREADS;
        if (i >= m) break;
        T* row = C + (index_t)i * n + j;
        if (vec_c) {  // n a multiple of TINY_COLS, every row on 16 bytes: j + TINY_COLS <= n
#pragma unroll
            for (int v = 0; v < TINY_COLS / W; ++v) {
                Lanes out;
#pragma unroll
                for (int w = 0; w < W; ++w) out.lane[w] = acc[r][v * W + w];
                *reinterpret_cast<V*>(row + v * W) = out.vector;
            }
        } else {
#pragma unroll
            for (int c = 0; c < TINY_COLS; ++c)
                if (j + c < n) row[c] = acc[r][c];
        }
    }
}
