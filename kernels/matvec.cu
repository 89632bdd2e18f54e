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

// Fast, column-major A: threads run down the columns (RL lanes of W consecutive rows each: coalesced 16-byte
// loads), the block's other FAST_THREADS / RL lanes take different columns of the same rows (so a short column
// still gives a full block), UNROLL columns in flight per thread. The column lanes are added in shared memory in
// a fixed order. Tiles of RL * W rows, strided over as in matvec_rowmajor; blockIdx.y splits the columns into
// chunks of `chunk`, written and added as there. VECTOR needs m % Vec16<T>::n == 0 and a 16-byte aligned A.
// A batch of products on the grid's z, unsplit (gridDim.y == 1): matrix z is a_batch elements on from A, its vector
// x_batch on from x, its output z * m on from out.
template <typename T, bool VECTOR, int RL, int UNROLL, bool PIPELINED = true>
__global__ void __launch_bounds__(FAST_THREADS) matvec_colmajor(const T* __restrict__ A, const T* __restrict__ x,
                                                                index_t m, index_t n, index_t chunk,
                                                                typename Accum<T>::type* dst, T* out,
                                                                unsigned int* counters, index_t a_batch,
                                                                index_t x_batch) {
    typedef typename Accum<T>::type S;
    A += blockIdx.z * a_batch;
    x += blockIdx.z * x_batch;
    out += blockIdx.z * m;
    dst += blockIdx.z * m;  // (unsplit, dst is out itself where S is T)
    typedef typename Chunk<T, VECTOR>::type V;
    const int W = Chunk<T, VECTOR>::n;
    const int CL = FAST_THREADS / RL;  // column lanes
    const int r = threadIdx.x % RL, c = threadIdx.x / RL;
    const index_t mv = m / W;
    const index_t begin = (index_t)blockIdx.y * chunk;
    const index_t end = begin + chunk < n ? begin + chunk : n;
    __shared__ S lanes[CL > 1 ? FAST_THREADS * W : 1];  // [column lane][row within the tile]

    for (index_t tile = blockIdx.x; tile * RL < mv; tile += gridDim.x) {
        const index_t rv = tile * RL + r;
        S acc[UNROLL][W];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
            for (int w = 0; w < W; ++w) acc[u][w] = 0;
        if (rv < mv) {
            const V* a = reinterpret_cast<const V*>(A) + rv;  // column j of this lane's rows: a[j * mv]
            index_t j = begin + c;
            struct Batch {  // UNROLL columns' vectors and their x
                V a[UNROLL];
                S x[UNROLL];
            };
            auto fetch = [&](Batch& b, index_t j0) {
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) b.a[u] = __ldcs(a + (j0 + u * CL) * mv);
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) b.x[u] = to_float(__ldg(x + j0 + u * CL));
            };
            auto add = [&](const Batch& b) {
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    if constexpr (W == Vec16<T>::n && sizeof(T) == 2) {  // a 16-bit vector, unpacked by words
                        float as[W];
                        Unpack<T, V>::to(b.a[u], as);
#pragma unroll
                        for (int w = 0; w < W; ++w) acc[u][w] += as[w] * b.x[u];
                    } else {
                        const T* as = reinterpret_cast<const T*>(&b.a[u]);
#pragma unroll
                        for (int w = 0; w < W; ++w) acc[u][w] += to_float(as[w]) * b.x[u];
                    }
                }
            };
            j = in_batches<PIPELINED, Batch>(j, (UNROLL - 1) * CL, UNROLL * CL, end, fetch, add);
            for (; j < end; j += CL) {
                V av = __ldcs(a + j * mv);
                S xj = to_float(__ldg(x + j));
                if constexpr (W == Vec16<T>::n && sizeof(T) == 2) {
                    float as[W];
                    Unpack<T, V>::to(av, as);
#pragma unroll
                    for (int w = 0; w < W; ++w) acc[0][w] += as[w] * xj;
                } else {
                    const T* as = reinterpret_cast<const T*>(&av);
#pragma unroll
                    for (int w = 0; w < W; ++w) acc[0][w] += to_float(as[w]) * xj;
                }
            }
        }
        S s[W];
#pragma unroll
        for (int w = 0; w < W; ++w) {
            s[w] = acc[0][w];
#pragma unroll
            for (int u = 1; u < UNROLL; ++u) s[w] += acc[u][w];
        }
        S* rows = dst + (index_t)blockIdx.y * m + tile * RL * W;  // this tile's rows in dst, and in out
        T* out_rows = out + tile * RL * W;
        if (CL == 1) {
            if (rv < mv)
#pragma unroll
                for (int w = 0; w < W; ++w) store_sum(s[w], &rows[r * W + w], &out_rows[r * W + w]);
        } else {
            const index_t rows_left = m - tile * RL * W;
            __syncthreads();  // the previous tile's readers of `lanes` are done
#pragma unroll
            for (int w = 0; w < W; ++w) lanes[c * RL * W + r * W + w] = s[w];
            __syncthreads();
            for (int e = threadIdx.x; e < RL * W && e < rows_left; e += FAST_THREADS) {
                S t = 0;
                for (int l = 0; l < CL; ++l) t += lanes[l * RL * W + e];
                store_sum(t, rows + e, out_rows + e);
            }
        }
        if (gridDim.y > 1) {
            const index_t row0 = tile * RL * W;
            finish_tile(dst, m, row0, (int)(m - row0 < RL * W ? m - row0 : RL * W), counters + tile, out);
        }
    }
}

// Fast, column-major A of few element columns (n <= FEW_COLUMNS, not whole 16-byte vectors): a lane reads ROWS rows
// FAST_THREADS apart, every column of each, before it adds any, where matvec_colmajor's lane holds one row and so
// has only n element loads in flight. Unsplit; matvec_colmajor's arguments (chunk, dst and counters unused), so its
// launchers, the batch on the grid's z included, serve both.
template <typename T, int ROWS>
__global__ void __launch_bounds__(FAST_THREADS) matvec_few_columns(const T* __restrict__ A, const T* __restrict__ x,
                                                                   index_t m, index_t n, index_t,
                                                                   typename Accum<T>::type*, T* out, unsigned int*,
                                                                   index_t a_batch, index_t x_batch) {
    typedef typename Accum<T>::type S;
    constexpr int FEW = sizeof(T) == 8 ? 3 : 7;  // FEW_COLUMNS in _matvec_plan.py
    A += blockIdx.z * a_batch;
    x += blockIdx.z * x_batch;
    out += blockIdx.z * m;
    const index_t row0 = (index_t)blockIdx.x * (FAST_THREADS * ROWS) + threadIdx.x;
    T a[ROWS][FEW];
#pragma unroll
    for (int j = 0; j < FEW; ++j)
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
            if (j < n && row0 + r * FAST_THREADS < m) a[r][j] = __ldcs(A + j * m + row0 + r * FAST_THREADS);
    S xs[FEW];
#pragma unroll
    for (int j = 0; j < FEW; ++j) xs[j] = j < n ? to_float(__ldg(x + j)) : S(0);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const index_t row = row0 + r * FAST_THREADS;
        if (row >= m) break;
        S acc = to_float(a[r][0]) * xs[0];
#pragma unroll
        for (int j = 1; j < FEW; ++j)
            if (j < n) acc += to_float(a[r][j]) * xs[j];
        out[row] = from_float<T>(acc);
    }
}

// ---- Column-major A with few rows (columns that are not whole 16-byte vectors, which the column-major kernel would
// load an element per lane, and the shortest whole-vector columns): A is read as what it is in memory, one contiguous
// run of m * n elements, in 16-byte vectors, UNROLL in flight per thread. Element f of the run is A[f % m][f / m].
// The grid strides over the run by a multiple of m elements (the host sizes it so), so each of a thread's W elements
// stays on one row and its column steps by a constant. A block adds its threads' sums by row into
// dst[block * m + row], and the last block to finish adds the blocks' sums by row into out. Both sums split a row's
// terms the same way: thread t takes row t % m and every slices-th term from term t / m on, then a warp per row adds
// the row's slices (a fixed order: deterministic).
constexpr int THIN_UNROLL = 4;

// Row r's sums of the terms term(q) (q < count, term q on row (first_row + q) % m), one a slice: thread t adds row
// t % m's terms from the (t / m)-th on, every (FAST_THREADS / m)-th, into part[t]. The caller, after a
// __syncthreads, adds each row's slices (a warp per row).
template <typename S, typename Load>
__device__ __forceinline__ void thin_row_slices(S* part, int m, int first_row, int count, Load term) {
    const int slices = FAST_THREADS / m, r = threadIdx.x % m, slice = threadIdx.x / m;
    if (slice >= slices) return;
    S sum = 0;
#pragma unroll 16
    for (int q = (r - first_row + m) % m + slice * m; q < count; q += slices * m) sum += term(q);
    part[threadIdx.x] = sum;
}

// The sums of thread g's W elements on the run from vector g on, `threads` vectors a step (the grid's stride: a
// multiple of m elements). With PAIRS (m >= W) a vector's elements lie in two columns at most, the same two offsets
// for every vector of the thread: two loads of x a vector, not one an element.
template <typename T, int UNROLL, bool PAIRS>
__device__ __forceinline__ void thin_sums(const T* __restrict__ A, const T* __restrict__ x, index_t m, index_t total,
                                          index_t g, index_t threads, typename Accum<T>::type (&acc)[Vec16<T>::n]) {
    typedef typename Accum<T>::type S;
    typedef typename Vec16<T>::type V;
    constexpr int W = Vec16<T>::n;
    const index_t whole = total / W, col_step = threads * W / m;
    const T* xp = x + g * W / m;  // element 0's column
    int next[W];  // columns past element 0's
    const int row0 = (int)(g * W % m);
#pragma unroll
    for (int i = 0; i < W; ++i) {
        next[i] = (row0 + i) / (int)m;
        acc[i] = 0;
    }
    const int second = next[W - 1] > 0;  // (x1 is read from x0's column where there is no second: no branch)
    auto x_at = [&](const T* p, int i) -> S { return to_float(__ldg(p + next[i])); };
    // A batch: UNROLL vectors of A and the x values each needs.
    constexpr int NX = PAIRS ? 2 : W;
    struct Batch {
        V a[UNROLL];
        T x[UNROLL][NX];
    };
    const V* vectors = reinterpret_cast<const V*>(A);
    const T* xq = xp;  // the next batch's x (fetch is called once a batch, in order)
    auto fetch = [&](Batch& b, index_t v0) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            b.a[u] = __ldcs(vectors + v0 + u * threads);
#pragma unroll
            for (int j = 0; j < NX; ++j) b.x[u][j] = __ldg(xq + u * col_step + (PAIRS ? (j ? second : 0) : next[j]));
        }
        xq += UNROLL * col_step;
    };
    auto add = [&](const Batch& b) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const T* e = reinterpret_cast<const T*>(&b.a[u]);
#pragma unroll
            for (int i = 0; i < W; ++i)
                acc[i] += to_float(e[i]) * to_float(PAIRS ? (next[i] ? b.x[u][1] : b.x[u][0]) : b.x[u][i]);
        }
    };
    index_t v = in_batches<true, Batch>(g, (UNROLL - 1) * threads, UNROLL * threads, whole, fetch, add);
    xp = xq;
    for (; v < whole; v += threads, xp += col_step) {
        const V a = __ldcs(vectors + v);
        const T* e = reinterpret_cast<const T*>(&a);
#pragma unroll
        for (int i = 0; i < W; ++i) acc[i] += to_float(e[i]) * x_at(xp, i);
    }
    if (v == whole) {  // the run's partial last vector, by element
#pragma unroll
        for (int i = 0; i < W; ++i)
            if (v * W + i < total) acc[i] += to_float(A[v * W + i]) * x_at(xp, i);
    }
}

template <typename T, int UNROLL = THIN_UNROLL>
__global__ void __launch_bounds__(FAST_THREADS) matvec_thin_colmajor(const T* __restrict__ A,
        const T* __restrict__ x, index_t m, index_t n, typename Accum<T>::type* dst, T* out, unsigned int* counter) {
    typedef typename Accum<T>::type S;
    constexpr int W = Vec16<T>::n;
    __shared__ S terms[FAST_THREADS * W];
    __shared__ S part[FAST_THREADS];
    const index_t threads = (index_t)gridDim.x * FAST_THREADS;
    const index_t first = (index_t)blockIdx.x * FAST_THREADS, g = first + threadIdx.x;
    S acc[W];
    if (m >= W)
        thin_sums<T, UNROLL, true>(A, x, m, m * n, g, threads, acc);
    else
        thin_sums<T, UNROLL, false>(A, x, m, m * n, g, threads, acc);

    // Term q = W * t + i of the block is thread t's element i, on row (first * W + q) % m.
    // (m <= FAST_THREADS, as the host plans it: a slice or more a row)
    const int rows = (int)m, warp = threadIdx.x / 32, lane = threadIdx.x % 32, slices = FAST_THREADS / rows;
#pragma unroll
    for (int i = 0; i < W; ++i) terms[threadIdx.x * W + i] = acc[i];
    __syncthreads();
    thin_row_slices(part, rows, (int)(first * W % m), FAST_THREADS * W, [&](int q) { return terms[q]; });
    __syncthreads();
    for (int r = warp; r < rows; r += FAST_THREADS / 32) {
        S s = 0;
        for (int j = lane; j < slices; j += 32) s += part[j * rows + r];
        s = warp_sum(s);
        if (lane == 0) dst[blockIdx.x * m + r] = s;
    }
    if (!last_to_arrive(counter, gridDim.x)) return;
    // Term q = block q's sums, row q % m, in dst's order
    thin_row_slices(part, rows, 0, (int)(gridDim.x * m), [&](int q) { return __ldcg(dst + q); });
    __syncthreads();
    for (int r = warp; r < rows; r += FAST_THREADS / 32) {
        S s = 0;
        for (int j = lane; j < slices; j += 32) s += part[j * rows + r];
        s = warp_sum(s);
        if (lane == 0) out[r] = from_float<T>(s);
    }
}
