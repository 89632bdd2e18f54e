// Batches of products whose C has few rows (M of them): each element of B serves only M multiply-adds, so the product
// streams B once, where the register tiles would pad C's rows to a tile's height and step through k one slice at a
// time. A block's threads are cut into units of `width` column lanes by `slices` k slices: unit u of block x takes
// product p = (x * units + u) / chunks, C's columns [q * width * COLS, +width * COLS) with q = (x * units + u) %
// chunks; its lane l takes COLS of them, width apart from the unit's l-th, and every slices-th k from its slice on,
// all M rows of A at each. A warp's lanes read whole runs of B's rows. Each unit then adds its slices' sums by row
// and column in shared memory, slice by slice (a fixed order: deterministic), and stores C a row at a time.
//
// Contract: C_p = A_p @ B_p for p < count, A_p m x k (strides a_row, a_col in elements, any), B_p k x n with unit
// column stride (rows ldb elements apart), C_p m x n C-contiguous; A_p = A + p * step_a, B_p = B + p * step_b,
// C_p = C + p * step_c. m == M, 1 <= width <= 32, units * width * slices <= FEWROWS_THREADS.
#include "common.cuh"

#define FEWROWS_THREADS 256

template <typename T, int M, int COLS>
__global__ void __launch_bounds__(FEWROWS_THREADS)
    matmul_fewrows(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int n, int k, index_t a_row,
                   index_t a_col, index_t ldb, index_t step_a, index_t step_b, index_t step_c, index_t count,
                   int chunks, int width, int slices, int units) {
    __shared__ T part[FEWROWS_THREADS * M];  // [unit][row][slice][lane], one of the lane's columns at a time
    const int group = width * slices;
    const int u = threadIdx.x / group, lane = threadIdx.x % group % width, slice = threadIdx.x % group / width;
    const index_t unit = (index_t)blockIdx.x * units + u;
    const index_t p = unit / chunks;
    const int c0 = (int)(unit % chunks) * width * COLS;  // the unit's first column; its lanes': c0 + lane + j * width
    const bool active = u < units && p < count;
    T acc[M][COLS];
#pragma unroll
    for (int r = 0; r < M; ++r)
#pragma unroll
        for (int j = 0; j < COLS; ++j) acc[r][j] = T(0);
    if (active && c0 + lane < n) {
        const T* a = A + p * step_a;
        const T* b = B + p * step_b + c0 + lane;
        bool in[COLS];
#pragma unroll
        for (int j = 0; j < COLS; ++j) in[j] = c0 + lane + j * width < n;
        int kk = slice;
        for (; kk + slices < k; kk += 2 * slices) {  // two steps of k a round: their loads all in flight together
            T bk[2][COLS], ak[2][M];
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const index_t row = kk + s * slices;
#pragma unroll
                for (int j = 0; j < COLS; ++j) bk[s][j] = in[j] ? __ldg(b + row * ldb + j * width) : T(0);
#pragma unroll
                for (int r = 0; r < M; ++r) ak[s][r] = __ldg(a + r * a_row + row * a_col);
            }
#pragma unroll
            for (int s = 0; s < 2; ++s)
#pragma unroll
                for (int r = 0; r < M; ++r)
#pragma unroll
                    for (int j = 0; j < COLS; ++j) acc[r][j] += ak[s][r] * bk[s][j];
        }
        if (kk < k) {
#pragma unroll
            for (int j = 0; j < COLS; ++j) {
                const T bk = in[j] ? __ldg(b + (index_t)kk * ldb + j * width) : T(0);
#pragma unroll
                for (int r = 0; r < M; ++r) acc[r][j] += __ldg(a + r * a_row + (index_t)kk * a_col) * bk;
            }
        }
    }
    T* const mine = part + u * M * group;  // this unit's sums
    T* const c = C + p * step_c;
#pragma unroll
    for (int j = 0; j < COLS; ++j) {
        if (j) __syncthreads();  // the previous column's readers of `part` are done
        if (active) {
#pragma unroll
            for (int r = 0; r < M; ++r) mine[(r * slices + slice) * width + lane] = acc[r][j];
        }
        __syncthreads();
        if (active) {
            for (int e = slice * width + lane; e < M * width; e += group) {
                const int r = e / width, col = c0 + e % width + j * width;
                if (col >= n) continue;
                T s = mine[r * slices * width + e % width];
                for (int q = 1; q < slices; ++q) s += mine[(r * slices + q) * width + e % width];
                c[(index_t)r * n + col] = s;
            }
        }
    }
}
