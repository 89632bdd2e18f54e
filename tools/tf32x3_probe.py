"""float32 products as three TF32 products inside the mma_sync kernel (matmul_tc.X3_TILES: x = head + tail, the
products head·head + head·tail + tail·head summed a slice at a time into float32): the fast variant with the X3 tiles
planned, against the same without them (its register tiles) and cuBLAS SGEMM; error against float64.

    python3 tools/tf32x3_probe.py [--shapes MxKxN[:ORDER] ...] [--per-call] [--aligned]

--aligned: also the X3 kernel alone (the planned X3 tile and split, or X3_TILES[0] whole) on the operands as they
are (misaligned lines: the 4-byte-copy build) against the same on padded copies made beforehand (the 16-byte build).

ORDER: A's and B's order (C or F each, default CC). Errors are ||out - ref|| / || |A| @ |B| || (the checked
bound's scale), inputs uniform in [0.5, 1.5) as the tests draw them (all positive: a rounding bias adds up).
"""
import argparse
import importlib

import cupy
import numpy as np

import cudakit
from cudakit import _check, _matmul_routes, matmul_tc
from cudakit.bench import timing
from cudakit.testing import random_array

BUDGET = timing.Budget(row_s=0.1, min_runs=5, max_runs=50)
SHAPES = ["4096x4096x4096", "8192x8192x8192", "2048x2048x2048", "128x65539x128", "4457x4021x151",
          "3137x3701x1217:CF", "2053x4093x1699:FC", "4787x911x2579:FF", "3877x2957x1327:CF", "2579x4229x1109:FF",
          "2441x2221x3209:CF", "3769x1741x3011:FC", "4229x3041x3889:CF", "2741x4493x2383", "1787x2333x3797",
          "12386x1085x3482", "1216x23168x397:FC", "2969x277x4813:FC", "4091x127x4363:FF", "19016x72x672",
          "1009x1213x283:CF", "2551x2053x653:CF", "523x1423x677:FC", "1637x3461x827:CF", "81x5479x18269:CF",
          "601x408x812525", "2460x4518x34543:CF", "1024x1024x1024", "512x512x512", "4097x4095x4099",
          "65536x1024x1024", "256x8192x256", "8192x256x8192"]


def median_us(fn) -> float:
    return timing.measure(lambda i: fn(), BUDGET)[0].median * 1e6


def fast(A, B, out, x3: bool, per_call: bool = False) -> float:
    """The fast variant's time with X3 tiles weighed by the planner or not (its routes planned anew); per_call: back
    to back, host time included, as the sweep times operands within L2."""
    _matmul_routes.X3 = x3
    _matmul_routes._routes.clear()
    if per_call:
        return timing.measure(lambda i: cudakit.matmul(A, B, out=out), BUDGET, per_call=True)[0].median * 1e6
    return median_us(lambda: cudakit.matmul(A, B, out=out))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="*", default=SHAPES)
    p.add_argument("--per-call", action="store_true", help="also the per-call times (host time included)")
    p.add_argument("--aligned", action="store_true", help="also the X3 kernel on misaligned and padded operands")
    args = p.parse_args()
    mm = importlib.import_module("cudakit.matmul")
    device = cupy.cuda.runtime.getDevice()
    print(f"{'shape':>24} {'plan':>34} {'sgemm us':>9} {'simt us':>8} {'x3 us':>8} {'x sgemm':>7} {'x simt':>6}"
          f" {'err sgemm':>9} {'err x3':>9} {'bound':>8}")
    for spec in args.shapes:
        dims, _, order = spec.partition(":")
        order = order or "CC"
        m, k, n = map(int, dims.split("x"))
        A = random_array((m, k), np.float32, order[0])
        B = random_array((k, n), np.float32, order[1])
        out = cupy.empty((m, n), np.float32)
        vectors = mm.reads_vectors(A, B) or min(m, n) >= mm.PAD_MIN_DIM  # (as the route plans)
        tile, splits, depth = mm.plan(device, np.float32, m, n, k, vectors=vectors, x3=matmul_tc.x3_copies(A, B))
        t_s = median_us(lambda: cupy.matmul(A, B))
        t_simt = fast(A, B, out, False)
        t_x3 = fast(A, B, out, True)
        out.fill(np.nan)
        errs = [_check.product_error(cupy.matmul(A, B), A, B), _check.product_error(cudakit.matmul(A, B, out=out), A, B)]
        print(f"{spec:>24} {tile.name + ' /' + str(splits):>34} {t_s:9.1f} {t_simt:8.1f} {t_x3:8.1f} {t_s / t_x3:7.2f}"
              f" {t_simt / t_x3:6.2f} {errs[0]:9.2e} {errs[1]:9.2e} {_check.tolerance(np.float32, k):8.1e}", flush=True)
        if args.per_call:
            t_s = timing.measure(lambda i: cupy.matmul(A, B), BUDGET, per_call=True)[0].median * 1e6
            t_simt, t_x3 = fast(A, B, out, False, True), fast(A, B, out, True, True)
            print(f"{'per call':>59} {t_s:9.1f} {t_simt:8.1f} {t_x3:8.1f} {t_s / t_x3:7.2f} {t_simt / t_x3:6.2f}",
                  flush=True)
        if args.aligned:
            x3_tile, x3_splits, x3_depth = (tile, splits, depth) if tile in matmul_tc.X3_TILES else \
                (matmul_tc.X3_TILES[0], 1, k)
            a, b = mm.aligned_operand(A, 0), mm.aligned_operand(B, 1)
            run_in = matmul_tc.x3_launcher(A, B, out, x3_tile, x3_splits, x3_depth)
            run_pad = matmul_tc.x3_launcher(a, b, out, x3_tile, x3_splits, x3_depth)
            t_in, t_pad = median_us(lambda: run_in(A, B, out)), median_us(lambda: run_pad(a, b, out))
            t_copy = median_us(lambda: (mm.aligned_operand(A, 0), mm.aligned_operand(B, 1)))
            print(f"{'x3 kernel: in place / padded, copies':>59} {x3_tile.name + ' /' + str(x3_splits):>34}"
                  f" {t_in:8.1f} {t_pad:8.1f} {t_pad / t_in:6.2f} {t_copy:8.1f} aligned in place: "
                  f"{mm.reads_vectors(A, B)}", flush=True)
        A = B = out = None
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
