// matvec.cu's column-major kernels (included at its end: they use its fast kernels' helpers): matvec_colmajor,
// matvec_few_columns, and matvec_thin_colmajor for few rows.

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

// Fast, column-major A of at most FEW element columns (the planner's FEW_COLUMNS; not whole 16-byte vectors): a lane
// reads ROWS rows FAST_THREADS apart, every column of each, before it adds any, where matvec_colmajor's lane holds one
// row and so has only n element loads in flight. Unsplit; matvec_colmajor's arguments (chunk, dst and counters
// unused), so its launchers, the batch on the grid's z included, serve both.
template <typename T, int ROWS, int FEW>
__global__ void __launch_bounds__(FAST_THREADS) matvec_few_columns(const T* __restrict__ A, const T* __restrict__ x,
                                                                   index_t m, index_t n, index_t,
                                                                   typename Accum<T>::type*, T* out, unsigned int*,
                                                                   index_t a_batch, index_t x_batch) {
    typedef typename Accum<T>::type S;
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
