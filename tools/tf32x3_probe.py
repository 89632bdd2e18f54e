"""Feasibility of float32 products as three TF32 products (split each operand into a TF32 head and a TF32 tail,
C = Ah Bh + Ah Bt + At Bh, run as one TF32 product over 3k): error against float64 and time against cuBLAS SGEMM.

The split here is CuPy elementwise code (timed apart; one operand set, so the large shapes alone pass the L2); the product is cudakit.matmul(..., tf32=True) on the
concatenated operands, B given K-major as the TF32 kernels read it.
  python tools/tf32x3_probe.py [--shapes MxKxN ...] [--batch B]
"""
import argparse

import cupy

import cudakit
from cudakit.bench import timing

SPLIT = cupy.ElementwiseKernel("float32 a", "float32 head, float32 tail",
                               "unsigned int u = __float_as_uint(a); float h = __uint_as_float((u + 0x1000u) & 0xffffe000u);"
                               "head = h; tail = isfinite(a) ? a - h : 0.0f;", "tf32_split")


BUDGET = timing.Budget(row_s=0.1, min_runs=5, max_runs=50)


def median_ms(fn):
    return timing.measure(lambda i: fn(), BUDGET)[0].median * 1e3


def split3(A, B):
    ah, at = SPLIT(A)
    bh, bt = SPLIT(B)
    A3 = cupy.concatenate([ah, ah, at], axis=-1)
    Bt = cupy.concatenate([bh, bt, bh], axis=-2)
    B3 = cupy.ascontiguousarray(Bt.swapaxes(-1, -2)).swapaxes(-1, -2)  # K-major
    return A3, B3


def relerr(C, ref):
    return float(cupy.linalg.norm((C.astype(cupy.float64) - ref).ravel()) / cupy.linalg.norm(ref.ravel()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="*", default=["4096x4096x4096", "8192x8192x8192", "1283x3391x4799",
                   "179x3917x3767", "2399x3251x409", "1601x487x971", "3041x2767x3803", "2048x2048x2048"])
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    rng = cupy.random.default_rng(1)
    cases = [tuple(map(int, s.split("x"))) for s in args.shapes] + [(args.batch, 512, 512, 512)]
    print(f"{'shape':>22} {'sgemm ms':>9} {'fast ms':>8} {'split ms':>8} {'3xtf32 ms':>9} {'1xtf32 ms':>9}"
          f" {'x sgemm':>7} {'err sgemm':>9} {'err fast':>9} {'err 3x':>9} {'err 1x':>9}")
    for case in cases:
        lead = case[:-3]
        m, k, n = case[-3:]
        A = rng.standard_normal(lead + (m, k), dtype=cupy.float32)
        B = rng.standard_normal(lead + (k, n), dtype=cupy.float32)
        ref = cupy.matmul(A.astype(cupy.float64), B.astype(cupy.float64))
        A3, B3 = split3(A, B)
        t_s = median_ms(lambda: cupy.matmul(A, B))
        t_f = median_ms(lambda: cudakit.matmul(A, B))
        t_split = median_ms(lambda: split3(A, B))
        t_3 = median_ms(lambda: cudakit.matmul(A3, B3, tf32=True))
        t_1 = median_ms(lambda: cudakit.matmul(A, B, tf32=True))
        e = [relerr(f(), ref) for f in (lambda: cupy.matmul(A, B), lambda: cudakit.matmul(A, B),
                                         lambda: cudakit.matmul(A3, B3, tf32=True),
                                         lambda: cudakit.matmul(A, B, tf32=True))]
        label = "x".join(map(str, case))
        print(f"{label:>22} {t_s:9.3f} {t_f:8.3f} {t_split:8.3f} {t_3:9.3f} {t_1:9.3f} {t_s / t_3:7.2f}"
              f" {e[0]:9.2e} {e[1]:9.2e} {e[2]:9.2e} {e[3]:9.2e}", flush=True)
        A = B = ref = A3 = B3 = None
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
