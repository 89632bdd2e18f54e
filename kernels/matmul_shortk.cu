// Products of a short k (at most KMAX), whose time is writing C: the register-tile and shared-memory kernels stage
// both operands a slice at a time and store C from fragments; here each lane holds B's k rows of its COLS columns in
// registers for its warp's whole run of rows, the block's rows of A wait in shared memory, and each warp stores
// LANES consecutive elements of 32 / LANES consecutive rows of C per store: whole lines of C, any n. The block's
// warps stand warps_n abreast (each its own LANES * COLS columns) and WARPS / warps_n deep (taking rows in turn):
// a C of few rows gives each warp more of them, so that its B registers serve more stores.
//
// Contract: C = A @ B, A m x k, B k x n (strides in elements, any sign), C m x n C-contiguous. Product z =
// blockIdx.y reads A + z * step_a, B + z * step_b and writes C + z * step_c. Block x takes C's rows
// [tile_m * rows_per_block, +rows_per_block) and columns [tile_n * W, +W), W = warps_n * LANES * COLS, tile_n =
// x % tiles_n. rows_per_block * KMAX elements of dynamic shared memory. Any m, n >= 1, 1 <= k <= KMAX; warps_n
// divides the block's warps.
#include "common.cuh"

#define SHORTK_THREADS 256

template <typename T, int LANES, int COLS, int KMAX>
__global__ void __launch_bounds__(SHORTK_THREADS, 2)
    matmul_shortk(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int m, int n, int k,
                  index_t a_row, index_t a_col, index_t b_row, index_t b_col, index_t step_a, index_t step_b,
                  index_t step_c, int rows_per_block, int tiles_n, int warps_n) {
    static_assert(32 % LANES == 0 && KMAX % 4 == 0, "whole rows a warp; A's rows read four elements at a time");
    constexpr int WARPS = SHORTK_THREADS / 32, GROUP_ROWS = 32 / LANES;
    extern __shared__ __align__(16) unsigned char shortk_bytes[];
    T* const sa = reinterpret_cast<T*>(shortk_bytes);  // the block's rows of A, KMAX elements each (zero past k)

    const index_t z = blockIdx.y;
    A += z * step_a;
    B += z * step_b;
    C += z * step_c;
    const int tile_m = (int)(blockIdx.x / tiles_n), tile_n = (int)(blockIdx.x % tiles_n);
    const int r0 = tile_m * rows_per_block, c0 = tile_n * warps_n * LANES * COLS;
    const int rows = m - r0 < rows_per_block ? m - r0 : rows_per_block;
    const T* const a0 = A + (index_t)r0 * a_row;

    // Stage A's rows, walking the operand along its smaller stride so that neighbouring threads read neighbours.
    const int count = rows * KMAX;
    if ((a_row < 0 ? -a_row : a_row) < (a_col < 0 ? -a_col : a_col)) {
        for (int e = threadIdx.x; e < count; e += SHORTK_THREADS) {
            const int r = e % rows, p = e / rows;
            sa[r * KMAX + p] = p < k ? a0[r * a_row + p * a_col] : T(0);
        }
    } else {
        for (int e = threadIdx.x; e < count; e += SHORTK_THREADS) {
            const int r = e / KMAX, p = e % KMAX;
            sa[e] = p < k ? a0[r * a_row + p * a_col] : T(0);
        }
    }

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, deep = WARPS / warps_n;
    const int col = c0 + warp % warps_n * LANES * COLS + lane % LANES;
    T b[KMAX][COLS];
#pragma unroll
    for (int p = 0; p < KMAX; ++p)
#pragma unroll
        for (int j = 0; j < COLS; ++j)
            b[p][j] = p < k && col + LANES * j < n ? B[p * b_row + (col + LANES * j) * b_col] : T(0);
    __syncthreads();

    T* const c_lane = C + (index_t)r0 * n + col;
    for (int r = warp / warps_n * GROUP_ROWS + lane / LANES; r < rows; r += deep * GROUP_ROWS) {
        T acc[COLS];
#pragma unroll
        for (int j = 0; j < COLS; ++j) acc[j] = T(0);
        const T* const a_row_s = sa + r * KMAX;
#pragma unroll
        for (int p0 = 0; p0 < KMAX; p0 += 4) {
            if (p0 < k) {  // (the elements past k are zeros: a whole group of four is summed)
                T a[4];
                if constexpr (sizeof(T) == 4) {
                    const float4 v = *reinterpret_cast<const float4*>(a_row_s + p0);
                    a[0] = v.x, a[1] = v.y, a[2] = v.z, a[3] = v.w;
                } else {
                    const double2 u = *reinterpret_cast<const double2*>(a_row_s + p0);
                    const double2 v = *reinterpret_cast<const double2*>(a_row_s + p0 + 2);
                    a[0] = u.x, a[1] = u.y, a[2] = v.x, a[3] = v.y;
                }
#pragma unroll
                for (int q = 0; q < 4; ++q)
#pragma unroll
                    for (int j = 0; j < COLS; ++j) acc[j] += a[q] * b[p0 + q][j];
            }
        }
        T* const c_row = c_lane + (index_t)r * n;
#pragma unroll
        for (int j = 0; j < COLS; ++j)
            if (col + LANES * j < n) c_row[LANES * j] = acc[j];
    }
}
