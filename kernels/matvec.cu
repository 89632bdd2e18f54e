// Matrix-vector product out = A @ x for a row-major (C-order) or column-major (F-order) A, read in place.
// Row-major: element (i, k) at A[i * n + k]; column-major: at A[i + k * m].
// float16 and bfloat16 (the non-seed kernels): 16-bit loads, products summed in float (Accum<T>), every partial sum
// kept in float, and the result rounded to T once, when it is stored.
#include "half.cuh"

template <bool COL_MAJOR>
__device__ __forceinline__ index_t element(index_t i, index_t k, index_t m, index_t n) {
    return COL_MAJOR ? i + k * m : i * n + k;
}

// Seed kernel (000): one thread per row. On a row-major A the lanes of a warp walk 32 different rows (one
// 32-byte sector per lane per step); on a column-major A the same code reads 32 neighbours of one column.
// Fixes: the layout is a template parameter; m, n and the indices are 64-bit (i * n passes 2^31 at 46341^2).
template <typename T, bool COL_MAJOR>
__global__ void mat_vec_mul(T* out, const T* in_mat, const T* in_vec, index_t m, index_t n) {
    index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;

    T temp = 0;
    for (index_t k = 0; k < n; ++k)
        temp += in_mat[element<COL_MAJOR>(i, k, m, n)] * in_vec[k];
    out[i] = temp;
}

// Seed kernel (000): x staged in dynamic shared memory one blockDim.x-element tile per phase, so a block reads
// x once instead of once per thread; A is read exactly as in mat_vec_mul.
// Fixes: the layout is a template parameter; 64-bit indices; unsigned char instead of uint8_t (NVRTC has no
// <cstdint>); the final write is guarded.
template <typename T, bool COL_MAJOR>
__global__ void mat_vec_mul_tiles(T* out, const T* in_mat, const T* in_vec, index_t m, index_t n) {
    extern __shared__ unsigned char tiles_uint8[];
    T* tiles = reinterpret_cast<T*>(tiles_uint8);

    index_t i = (index_t)blockIdx.x * blockDim.x + threadIdx.x;

    T res = 0;
    index_t n_phases = (n + blockDim.x - 1) / blockDim.x;
    for (index_t phase = 0; phase < n_phases; ++phase) {
        index_t elem_idx = phase * blockDim.x + threadIdx.x;
        tiles[threadIdx.x] = elem_idx < n ? in_vec[elem_idx] : T(0);
        __syncthreads();

        if (i < m)
            for (int k = 0; k < (int)blockDim.x && phase * blockDim.x + k < n; ++k)
                res += in_mat[element<COL_MAJOR>(i, phase * blockDim.x + k, m, n)] * tiles[k];
        __syncthreads();
    }
    if (i < m) out[i] = res;  // fix: the seed wrote out[i] unguarded, out of bounds whenever m % blockDim.x != 0
}

// One warp per row, lanes striding along it, a shuffle reduction at the end: coalesced on a row-major A (the
// mirror image of mat_vec_mul), strided on a column-major one.
template <typename T, bool COL_MAJOR>
__global__ void warp_per_row(T* __restrict__ out, const T* __restrict__ A, const T* __restrict__ x, index_t m,
                             index_t n) {
    const int lane = threadIdx.x & 31;
    const index_t row = ((index_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= m) return;  // whole warps leave together, so the shuffles below see all 32 lanes
    typename Accum<T>::type acc = 0;
    for (index_t k = lane; k < n; k += 32) acc += to_float(A[element<COL_MAJOR>(row, k, m, n)]) * to_float(x[k]);
    acc = warp_sum(acc);
    if (lane == 0) out[row] = from_float<T>(acc);
}

// ---- The fast kernels: 16-byte loads (when rows/columns are 16-byte aligned), several in flight per thread, A
// streamed with __ldcs (evict-first: A is read once, so its lines should not push x, which every row reads again,
// out of the cache; docs/NOTES.md, "matvec.cu: A streamed evict-first"), x through the read-only path (__ldg).

// A load of one element, or of the 16-byte vector holding Vec16<T>::n of them.
template <typename T, bool VECTOR> struct Chunk { typedef T type; static const int n = 1; };
template <typename T> struct Chunk<T, true> { typedef typename Vec16<T>::type type; static const int n = Vec16<T>::n; };

// The streaming and read-only loads of one 16-bit value: the builtins take unsigned short, not half.cuh's structs.
template <typename H> __device__ __forceinline__ H from_bits(unsigned short bits) { H h; h.bits = bits; return h; }
__device__ __forceinline__ half_t __ldcs(const half_t* p) {
    return from_bits<half_t>(__ldcs(reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ bfloat16_t __ldcs(const bfloat16_t* p) {
    return from_bits<bfloat16_t>(__ldcs(reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ half_t __ldg(const half_t* p) {
    return from_bits<half_t>(__ldg(reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ bfloat16_t __ldg(const bfloat16_t* p) {
    return from_bits<bfloat16_t>(__ldg(reinterpret_cast<const unsigned short*>(p)));
}

template <typename T, typename V>
__device__ __forceinline__ typename Accum<T>::type dot_chunk(const V& a, const V& b, typename Accum<T>::type acc) {
    const int N = (int)(sizeof(V) / sizeof(T));
    if constexpr (N == Vec16<T>::n && sizeof(T) == 2) {  // a 16-bit vector: unpacked by words
        float as[N], bs[N];
        Unpack<T, V>::to(a, as);
        Unpack<T, V>::to(b, bs);
#pragma unroll
        for (int w = 0; w < N; ++w) acc += as[w] * bs[w];
    } else {
        const T* as = reinterpret_cast<const T*>(&a);
        const T* bs = reinterpret_cast<const T*>(&b);
#pragma unroll
        for (int w = 0; w < N; ++w) acc += to_float(as[w]) * to_float(bs[w]);
    }
    return acc;
}

const int FAST_THREADS = 256;

// A row's sum over this block's chunk of the reduced dimension, at dst[chunk * m + row]. float and double: dst is out
// itself when there is one chunk. The 16-bit types keep partial sums in float (never rounded to 16 bits), in dst, for
// finish_tile; the only chunk is rounded to T straight into out.
template <typename T, typename S>
__device__ __forceinline__ void store_sum(S s, S* dst_row /* dst + chunk * m + row */, T* out_row) {
    if constexpr (sizeof(S) == sizeof(T)) {  // S is T
        *dst_row = s;
    } else {
        if (gridDim.y == 1) *out_row = from_float<T>(s);
        else *dst_row = s;
    }
}

// Called by every thread of a block once its chunk's partial sums of rows [row0, row0 + nrows) are stored at
// partial[chunk * m + row]: the block that completes the tile (the last of the gridDim.y chunks to arrive) adds the
// chunks in order (deterministic) into out, rounding once, and resets the tile's counter for the next launch on
// this stream. One launch in all, where a separate summing kernel would add a launch and a pass over the partials.
template <typename T, typename S>
__device__ __forceinline__ void finish_tile(const S* partial, index_t m, index_t row0, int nrows,
                                            unsigned int* counter, T* __restrict__ out) {
    if (!last_to_arrive(counter, gridDim.y)) return;
    for (int r = threadIdx.x; r < nrows; r += blockDim.x) {
        S s = 0;
        for (unsigned int c = 0; c < gridDim.y; ++c) s += __ldcg(partial + (index_t)c * m + row0 + r);
        out[row0 + r] = from_float<T>(s);
    }
}

// A load of A: read-only (CACHED) or evict-first.
template <bool CACHED, typename V> __device__ __forceinline__ V load_a(const V* p) {
    if constexpr (CACHED) return __ldg(p);
    else return __ldcs(p);
}

// The batches of loads at i, i + step, i + 2 * step, ... while a batch's last load (span past its first) is before
// end: fetch(batch, i) issues one batch's loads (in order, once a batch), add(batch) sums them. PIPELINED fetches each
// batch before adding the one before it: left to itself, ptxas adds each load as soon as it is issued, and the thread
// waits out one load's latency at a time. Returns where the batches stopped.
template <bool PIPELINED, typename Batch, typename Fetch, typename Add>
__device__ __forceinline__ index_t in_batches(index_t i, index_t span, index_t step, index_t end, Fetch fetch,
                                              Add add) {
    if constexpr (!PIPELINED) {
        for (; i + span < end; i += step) {
            Batch b;
            fetch(b, i);
            add(b);
        }
    } else if (i + span < end) {
        Batch current;
        fetch(current, i);
        for (; i + step + span < end; i += step) {
            Batch following;
            fetch(following, i + step);
            add(current);
            current = following;
        }
        add(current);
        i += step;
    }
    return i;
}

// Fast, row-major A: a group of TPR lanes per row (the whole block for very long rows, 32 for long ones, fewer for
// short ones so no lane idles), UNROLL independent loads per lane, a shuffle (or block) reduction inside the
// group. A block takes FAST_THREADS / TPR rows at a time and strides over such tiles (tiles = ceil(m / rows per
// tile); a grid smaller than that saves block launches when each tile is short work). blockIdx.y splits the rows
// into chunks of `chunk` vectors so that few, long rows still fill the GPU; each chunk writes its partial sums to
// dst[blockIdx.y * m + row] and finish_tile adds them into out (see store_sum for one chunk). VECTOR needs
// n % Vec16<T>::n == 0 and 16-byte aligned A and x. A batch of matrices stacked into one tall A takes a vector per
// matrix: row r reads the x that starts (r / x_rows) * x_step elements on (x_step 0: one x for every row).
// CACHED reads A through the read-only path instead of evict-first: where a warp's load covers only part of each
// line (short rows), its next loads read the rest of those lines, which evict-first lets go first.
template <typename T, bool VECTOR, int TPR, int UNROLL, bool CACHED, bool PIPELINED = false>
__global__ void __launch_bounds__(FAST_THREADS) matvec_rowmajor(const T* __restrict__ A, const T* __restrict__ x,
                                                                index_t m, index_t n, index_t chunk,
                                                                typename Accum<T>::type* dst, T* out,
                                                                unsigned int* counters, index_t x_rows,
                                                                index_t x_step) {
    typedef typename Accum<T>::type S;
    typedef typename Chunk<T, VECTOR>::type V;
    const int W = Chunk<T, VECTOR>::n;
    const int ROWS = FAST_THREADS / TPR;
    const int lane = threadIdx.x % TPR;
    const index_t nv = n / W;
    const index_t begin = (index_t)blockIdx.y * chunk;
    const index_t end = begin + chunk < nv ? begin + chunk : nv;

    for (index_t tile = blockIdx.x; tile * ROWS < m; tile += gridDim.x) {
        const index_t row = tile * ROWS + threadIdx.x / TPR;
        S acc[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc[u] = 0;
        if (row < m) {
            const V* a = reinterpret_cast<const V*>(A + row * n);
            const V* xv = reinterpret_cast<const V*>(x_step ? x + row / x_rows * x_step : x);
            index_t v = begin + lane;
            struct Batch {  // UNROLL vectors of the row and of x
                V a[UNROLL], x[UNROLL];
            };
            auto fetch = [&](Batch& b, index_t v0) {
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) b.a[u] = load_a<CACHED>(a + v0 + u * TPR);
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) b.x[u] = __ldg(xv + v0 + u * TPR);
            };
            auto add = [&](const Batch& b) {
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) acc[u] = dot_chunk<T>(b.a[u], b.x[u], acc[u]);
            };
            v = in_batches<PIPELINED, Batch>(v, (UNROLL - 1) * TPR, UNROLL * TPR, end, fetch, add);
            for (; v < end; v += TPR)
                acc[0] = dot_chunk<T>(load_a<CACHED>(a + v), __ldg(xv + v), acc[0]);
        }
        S s = acc[0];
#pragma unroll
        for (int u = 1; u < UNROLL; ++u) s += acc[u];
        if constexpr (TPR == FAST_THREADS) {  // a block per row: row < m is the same in every thread
            __shared__ S warp_sums[32];
            s = block_sum(s, warp_sums);
        } else {
            // Every lane of the warp takes part (rows past m hold 0), so the full mask is valid; the xor offsets
            // stay inside each aligned group of TPR lanes.
#pragma unroll
            for (int offset = TPR / 2; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
        }
        if (row < m && lane == 0) store_sum(s, dst + (index_t)blockIdx.y * m + row, out + row);
        if (gridDim.y > 1) {
            const index_t row0 = tile * ROWS;
            finish_tile(dst, m, row0, (int)(m - row0 < ROWS ? m - row0 : ROWS), counters + tile, out);
        }
    }
}

// Fast, row-major A of short rows of elements: a block copies FAST_THREADS whole rows, one contiguous run of A, into
// shared memory with 16-byte loads (coalesced whatever the row length and where the run starts), then each thread
// sums one row from there. A row of even length starts at a column rotated by its thread, so that the lanes of a
// warp read different banks. Row r reads its x as in matvec_rowmajor (x_rows, x_step). Dynamic shared memory:
// FAST_THREADS * n + Vec16 elements (the run's first whole vector lands 16-byte aligned).
const int STAGE_UNROLL = 4;  // 16-byte loads in flight per thread while a tile is copied
template <typename T>
__global__ void __launch_bounds__(FAST_THREADS) matvec_rows_staged(const T* __restrict__ A, const T* __restrict__ x,
                                                                   index_t m, index_t n, T* __restrict__ out,
                                                                   index_t x_rows, index_t x_step) {
    typedef typename Accum<T>::type S;
    constexpr int W = 16 / (int)sizeof(T);
    extern __shared__ uint4 staged_vectors[];
    const int t = threadIdx.x, row_length = (int)n;
    for (index_t tile = blockIdx.x; tile * FAST_THREADS < m; tile += gridDim.x) {
        const index_t row0 = tile * FAST_THREADS;
        const int rows = m - row0 < FAST_THREADS ? (int)(m - row0) : FAST_THREADS;
        const int count = rows * row_length;
        const T* run = A + row0 * n;
        const int lead = (int)(reinterpret_cast<size_t>(run) % 16 / sizeof(T));  // elements before run in its vector
        const int head = lead ? (W - lead < count ? W - lead : count) : 0;  // elements before the first whole vector
        const int vectors = (count - head) / W;
        T* const staged = reinterpret_cast<T*>(staged_vectors) + lead;  // element e of the run at staged[e]
        const uint4* src = reinterpret_cast<const uint4*>(run + head);
        uint4* dst = reinterpret_cast<uint4*>(staged + head);
        for (int v = t; v < vectors; v += FAST_THREADS * STAGE_UNROLL) {
            uint4 chunk[STAGE_UNROLL];
#pragma unroll
            for (int u = 0; u < STAGE_UNROLL; ++u)
                if (v + u * FAST_THREADS < vectors) chunk[u] = __ldcs(src + v + u * FAST_THREADS);
#pragma unroll
            for (int u = 0; u < STAGE_UNROLL; ++u)
                if (v + u * FAST_THREADS < vectors) dst[v + u * FAST_THREADS] = chunk[u];
        }
        const int tail = head + vectors * W;  // the elements past the last whole vector: fewer than W
        if (t < head) staged[t] = run[t];
        else if (t - head < count - tail) staged[tail + t - head] = run[tail + t - head];
        __syncthreads();
        if (t < rows) {
            const index_t row = row0 + t;
            const T* xr = x_step ? x + row / x_rows * x_step : x;
            const T* a = staged + t * row_length;
            int c = row_length % 2 ? 0 : t % row_length;
            S acc = 0;
            for (int j = 0; j < row_length; ++j) {
                acc += to_float(a[c]) * to_float(__ldg(xr + c));
                if (++c == row_length) c = 0;
            }
            out[row] = from_float<T>(acc);
        }
        __syncthreads();  // the next tile's copies overwrite these rows
    }
}

#include "matvec_columns.cuh"  // column-major A: lanes down the columns, few columns, few rows
