"""Times a byte transpose for misaligned rows (odd shapes) that stages raw aligned units in shared memory and gathers
each output unit byte by byte, against cudakit.transpose and a device-to-device copy of the same bytes, in turn, in
one process.

    PYTHONPATH=. python3 tools/bytes_probe.py [--rounds 5]

bytes_gather: a block loads the aligned 16-byte units that cover TR + 15 rows of TC columns, as they are (no
realigning in registers), into shared memory; a lane then takes one column and gathers its output units, 16 rows
each, byte by byte, at that row's own offset in the raw units. Every output unit is one aligned 16-byte store but at
the ends of each output row. A tile owns the units whose first row is in its TR rows (the tile at row 0 also the head
unit of each output row).
"""
from __future__ import annotations

import argparse

import cupy
import numpy as np

import cudakit
from cudakit.bench import timing
from cudakit.testing import random_array
from copy_rounds import check_and_time

SOURCE = r"""
typedef long long index_t;

// The aligned unit at p, of which only the bytes in [lo, hi) are wanted (one 16-byte load inside the array).
__device__ __forceinline__ uint4 load_raw(const unsigned char* p, const unsigned char* lo, const unsigned char* hi,
                                          const unsigned char* begin, const unsigned char* end) {
    if (p >= begin && p + 16 <= end) return __ldg(reinterpret_cast<const uint4*>(p));
    unsigned int w[4] = {0, 0, 0, 0};
    for (int i = 0; i < 16; ++i)
        if (p + i >= lo && p + i < hi) w[i >> 2] |= (unsigned int)p[i] << (8 * (i & 3));
    return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ unsigned int pack4(unsigned int a, unsigned int b, unsigned int c, unsigned int d) {
    return __byte_perm(__byte_perm(a, b, 0x0040), __byte_perm(c, d, 0x0040), 0x5410);
}

template <int TC, int TR, int THREADS, int CW, int GROUP, int PAD>
__global__ void __launch_bounds__(THREADS) bytes_gather(unsigned char* __restrict__ out,
                                                        const unsigned char* __restrict__ in, index_t rows,
                                                        index_t cols, unsigned int tiles_r, unsigned int tiles_c) {
    constexpr int RU = TC / 16 + 1, RS = RU * 16 + PAD, LR = TR + 15;
    constexpr int LOADS = (LR * RU + THREADS - 1) / THREADS;
    constexpr int US = 32 / CW, UPC = TR / 16, PER = UPC / US;
    static_assert(TC % 16 == 0 && TR % 16 == 0 && PAD % 16 == 0 && UPC % US == 0, "tile");
    __shared__ uint4 raw[LR * RS / 16];
    unsigned char* const sm = reinterpret_cast<unsigned char*>(raw);
    const unsigned int slot = blockIdx.x / GROUP;
    const unsigned int tile_r = slot / tiles_c * GROUP + blockIdx.x % GROUP;
    if (tile_r >= tiles_r) return;
    const index_t r0 = (index_t)tile_r * TR, c0 = (index_t)(slot % tiles_c) * TC;
    const int rows_left = rows - r0 < LR ? (int)(rows - r0) : LR;
    const int cols_here = cols - c0 < TC ? (int)(cols - c0) : TC;
    const unsigned char* const in_end = in + rows * cols;
    uint4 w[LOADS];
#pragma unroll
    for (int n = 0; n < LOADS; ++n) {
        const int i = threadIdx.x + n * THREADS, r = i / RU, v = i % RU;
        if (i < LR * RU && r < rows_left) {
            const unsigned char* const a = in + (r0 + r) * cols + c0;
            w[n] = load_raw(a - ((unsigned long long)a & 15) + 16 * v, a, a + cols_here, in, in_end);
        }
    }
#pragma unroll
    for (int n = 0; n < LOADS; ++n) {
        const int i = threadIdx.x + n * THREADS, r = i / RU, v = i % RU;
        if (i < LR * RU && r < rows_left) *reinterpret_cast<uint4*>(sm + r * RS + 16 * v) = w[n];
    }
    __syncthreads();

    const int lane = threadIdx.x & 31, q = lane % CW, s = lane / CW;
    const int o = (int)((unsigned long long)(in + r0 * cols + c0) & 15), cm = (int)(cols & 15);
    const int rows_in = rows - r0 < TR + 16 ? (int)(rows - r0) : TR + 16;
    for (int cc = (threadIdx.x >> 5) * CW + q; cc < TC; cc += THREADS / 32 * CW) {
        if (cc >= cols_here) break;
        unsigned char* const p = out + (c0 + cc) * rows + r0;
        const int t = (int)((unsigned long long)p & 15);
        unsigned char* const unit0 = p - t;
        const int m0 = (t > 0) + s, lr0 = 16 * m0 - t;
        int d[16];
#pragma unroll
        for (int k = 0; k < 16; ++k) d[k] = (lr0 + k) * RS + ((o + (lr0 + k) * cm) & 15) + cc;
#pragma unroll
        for (int n = 0; n < PER; ++n) {
            const int lr = lr0 + 16 * US * n;
            unsigned char* const dst = unit0 + 16 * (m0 + US * n);
            if (lr + 16 <= rows_in) {
                unsigned int b[16];
#pragma unroll
                for (int k = 0; k < 16; ++k) b[k] = sm[d[k] + 16 * US * n * RS];
                *reinterpret_cast<uint4*>(dst) =
                    make_uint4(pack4(b[0], b[1], b[2], b[3]), pack4(b[4], b[5], b[6], b[7]),
                               pack4(b[8], b[9], b[10], b[11]), pack4(b[12], b[13], b[14], b[15]));
            } else {
#pragma unroll
                for (int k = 0; k < 16; ++k)
                    if (lr + k < rows_in) dst[k] = sm[d[k] + 16 * US * n * RS];
            }
        }
        if (r0 == 0 && t > 0 && s == 0)  // the head unit of the output row: its first t bytes end the row before
            for (int k = t; k < 16 && k - t < rows_in; ++k)
                unit0[k] = sm[(k - t) * RS + ((o + (k - t) * cm) & 15) + cc];
    }
}
"""

# (TC, TR, THREADS, CW, GROUP, PAD)
CANDIDATES = [(128, 128, 256, 32, 8, 0), (128, 128, 256, 32, 8, 16), (128, 128, 256, 32, 1, 16),
              (128, 128, 256, 32, 32, 16), (128, 128, 256, 8, 8, 16), (128, 128, 512, 32, 8, 16),
              (64, 128, 256, 8, 8, 16), (128, 256, 256, 32, 8, 16), (128, 64, 256, 16, 8, 16)]
SHAPES = [(8191, 8193), (8193, 8191), (16381, 4099), (3001, 22367), (8190, 8194)]


def expression(c):
    return "bytes_gather<%d, %d, %d, %d, %d, %d>" % c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=[expression(c) for c in CANDIDATES])
    for c in CANDIDATES:
        fn = module.get_function(expression(c))
        print(expression(c), "registers", fn.num_regs, "local", fn.local_size_bytes, "smem", fn.shared_size_bytes)
    for shape in SHAPES:
        probe_shape(module, shape, args.rounds)
        cupy.get_default_memory_pool().free_all_blocks()


def probe_shape(module, shape, rounds):
    budget = timing.Budget(row_s=0.3, min_runs=20, max_runs=200)
    rows, cols = shape
    nbytes = rows * cols
    count = timing.sets_past_l2(2 * nbytes, cupy.cuda.runtime.getDevice())
    sets = [(random_array(shape, np.int8), cupy.empty((cols, rows), np.int8)) for _ in range(count)]
    want = cupy.ascontiguousarray(sets[0][0].T)
    calls = {"memcpy": lambda k: sets[k % count][1].data.copy_from_device_async(sets[k % count][0].data, nbytes),
             "cudakit": lambda k: cudakit.transpose(sets[k % count][0], out=sets[k % count][1])}
    for c in CANDIDATES:
        tc, tr, threads, cw, group = c[:5]
        fn = module.get_function(expression(c))
        tiles_r, tiles_c = -(-rows // tr), -(-cols // tc)
        grid = -(-tiles_r // group) * group * tiles_c

        def run(k, fn=fn, tiles_r=tiles_r, tiles_c=tiles_c, grid=grid, threads=threads):
            a, out = sets[k % count]
            fn((grid,), (threads,), (out, a, np.int64(rows), np.int64(cols), np.uint32(tiles_r), np.uint32(tiles_c)))
        calls["gather TC=%d TR=%d T=%d CW=%d G=%d PAD=%d" % c] = run
    check_and_time(calls, sets[0][1], want, budget, rounds, f"int8 {shape}, {nbytes / 1e6:.0f} MB", 42)

if __name__ == "__main__":
    main()
