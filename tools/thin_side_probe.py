"""Probe: 2-D transposes with a short side at and past THIN_SIDE (8-byte) and past the 4-byte limits, the fast
variant as planned against the thin kernel forced, beside CuPy's copy (GPU time, GB/s of bytes read and written).

    PYTHONPATH=. python3 tools/thin_side_probe.py [--shapes float64:32x341628 int8:64x2000000 ...]

Each result is compared bit for bit with cupy.ascontiguousarray(a.T) before it is timed.
"""
import argparse
import importlib

import cupy
import numpy as np

import cudakit
from cudakit.bench import timing

BUDGET = timing.Budget(row_s=0.05, min_runs=5, max_runs=40)
SHAPES = ["float64:32x341628", "float64:341628x32", "float64:33x341628", "float64:48x230000", "float64:64x170000",
          "float64:230000x48", "float32:64x341628", "float32:341628x40", "float32:96x230000", "float64:32x341632",
          "int8:64x2000000"]
transpose_module = importlib.import_module("cudakit.transpose")  # (cudakit.transpose is the function)


def random_bits(shape, dtype):
    """Every bit pattern of the element size equally likely (floats included: the kernels move raw bits)."""
    words = cupy.random.randint(0, 256, size=shape + (np.dtype(dtype).itemsize,), dtype=cupy.uint8)
    return words.view(dtype).reshape(shape)


def timed(a, out, want) -> tuple[float, bool]:
    out.fill(0)
    cudakit.transpose(a, out=out)
    same = bool((out.view(np.uint8) == want.view(np.uint8)).all())
    return timing.measure(lambda i: cudakit.transpose(a, out=out, check=False), BUDGET)[0].median, same


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="*", default=SHAPES)
    for text in p.parse_args().shapes:
        dtype, dims = text.split(":")
        shape = tuple(map(int, dims.split("x")))
        a = random_bits(shape, dtype)
        want = cupy.ascontiguousarray(a.T)
        out = cupy.empty(want.shape, dtype)
        t_cupy = timing.measure(lambda i: cupy.ascontiguousarray(a.T), BUDGET)[0].median
        t_fast, fast_ok = timed(a, out, want)
        keep = transpose_module.THIN_SIDE, transpose_module.THIN_SIDE_ROWS, transpose_module.THIN_SIDE_COLUMNS
        transpose_module.THIN_SIDE = transpose_module.THIN_SIDE_ROWS = transpose_module.THIN_SIDE_COLUMNS = 1 << 10
        try:
            t_thin, thin_ok = timed(a, out, want)
        finally:
            transpose_module.THIN_SIDE, transpose_module.THIN_SIDE_ROWS, transpose_module.THIN_SIDE_COLUMNS = keep
        cells = [f"{label} {t * 1e6:.1f} µs ({2 * a.nbytes / t / 1e9:.0f} GB/s){'' if ok else ' WRONG'}"
                 for label, t, ok in (("cupy", t_cupy, True), ("fast", t_fast, fast_ok), ("thin", t_thin, thin_ok))]
        print(f"{text:22} " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
