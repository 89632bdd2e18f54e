"""float32 products as three TF32 products inside the mma_sync kernel (matmul_tc.X3_TILES: x = head + tail, the
products head·head + head·tail + tail·head summed a slice at a time into float32): error against float64, beside
cuBLAS SGEMM's and the fast variant's, and time against both.

    python3 tools/tf32x3_probe.py [--shapes MxKxN[:ORDER] ...]

ORDER: A's and B's order (C or F each, default CC). Errors are ||out - ref|| / || |A| @ |B| || (the checked
bound's scale), inputs uniform in [0.5, 1.5) as the tests draw them (all positive: a rounding bias adds up).
"""
import argparse

import cupy
import numpy as np

import cudakit
from cudakit import _check, matmul_tc
from cudakit.bench import timing
from cudakit.testing import random_array

BUDGET = timing.Budget(row_s=0.1, min_runs=5, max_runs=50)
SHAPES = ["4096x4096x4096", "8192x8192x8192", "2048x2048x2048", "128x65539x128", "4457x4021x151",
          "3137x3701x1217:CF", "2053x4093x1699:FC", "4787x911x2579:FF", "3877x2957x1327:CF", "2579x4229x1109:FF",
          "2441x2221x3209:CF", "3769x1741x3011:FC", "4229x3041x3889:CF", "2741x4493x2383", "1787x2333x3797",
          "12386x1085x3482", "1216x23168x397:FC", "2969x277x4813:FC", "4091x127x4363:FF", "19016x72x672",
          "1009x1213x283:CF", "2551x2053x653:CF", "523x1423x677:FC", "1637x3461x827:CF", "81x5479x18269:CF",
          "601x408x812525", "2460x4518x34543:CF"]


def median_us(fn) -> float:
    return timing.measure(lambda i: fn(), BUDGET)[0].median * 1e6


def x3_run(tile):
    def run(A, B, out):
        matmul_tc.run_tc("mma_sync", A, B, out, tile=tile)
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="*", default=SHAPES)
    args = p.parse_args()
    tiles = matmul_tc.X3_TILES
    names = [f"{t.bm}x{t.bn}" for t in tiles]
    print(f"{'shape':>24} {'sgemm us':>9} {'fast us':>8} " + " ".join(f"{n:>8}" for n in names) +
          f" {'best':>8} {'x sgemm':>7} {'x fast':>6} {'err sgemm':>9} {'err fast':>9} {'err x3':>9} {'bound':>8}")
    for spec in args.shapes:
        dims, _, order = spec.partition(":")
        order = order or "CC"
        m, k, n = map(int, dims.split("x"))
        A = random_array((m, k), np.float32, order[0])
        B = random_array((k, n), np.float32, order[1])
        out = cupy.empty((m, n), np.float32)
        t_s = median_us(lambda: cupy.matmul(A, B))
        t_f = median_us(lambda: cudakit.matmul(A, B, out=out))
        t_x = [median_us(lambda: x3_run(t)(A, B, out)) for t in tiles]
        best = int(np.argmin(t_x))
        errs = []
        for f in (lambda: cupy.matmul(A, B), lambda: cudakit.matmul(A, B),
                  lambda: (x3_run(tiles[best])(A, B, out), out)[1]):
            out.fill(np.nan)
            errs.append(_check.product_error(f(), A, B))
        print(f"{spec:>24} {t_s:9.1f} {t_f:8.1f} " + " ".join(f"{t:8.1f}" for t in t_x) +
              f" {names[best]:>8} {t_s / t_x[best]:7.2f} {t_f / t_x[best]:6.2f} {errs[0]:9.2e} {errs[1]:9.2e}"
              f" {errs[2]:9.2e} {_check.tolerance(np.float32, k):8.1e}", flush=True)
        A = B = out = None
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
