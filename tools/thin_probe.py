"""The thin transpose kernel against the 32 x 32 tiles (vec16) and CuPy, as fractions of cudaMemcpy of the same bytes
(GPU time, CUDA events), for short sides c from 3 to 63 in both directions and 1-, 2- and 4-byte elements; each
result checked bit for bit. What THIN_SIDE_ROWS / THIN_SIDE_COLUMNS in cudakit/transpose.py were chosen from.

    PYTHONPATH=. python3 tools/thin_probe.py
"""
import importlib

import cupy
import numpy as np

from cudakit._ceilings import device_copy
from cudakit.bench import timing

tr = importlib.import_module("cudakit.transpose")
BUDGET = timing.Budget(row_s=0.05, min_runs=5, max_runs=100)
STAGED_BYTES = 1 << 26  # each matrix: 64 MiB


def seconds(fn) -> float:
    return timing.measure(lambda i: fn(), BUDGET)[0].median


def main() -> None:
    vec16 = tr.vec16_runner(*tr.VEC16_STEPS["fast"])
    for dtype in (np.int8, np.float16, np.float32):
        for c in (3, 8, 17, 31, 35, 48, 63):
            for wide in (True, False):
                n = STAGED_BYTES // (c * np.dtype(dtype).itemsize) // 32 * 32
                shape = (n, c) if wide else (c, n)
                a = cupy.random.randint(0, 100, shape).astype(dtype)
                out = cupy.empty(shape[::-1], dtype)
                copy = seconds(lambda: device_copy(out.reshape(-1), a.reshape(-1)))
                thin = seconds(lambda: tr.run_thin(a, out))
                ok = bool((out == a.T).all())
                tiles = seconds(lambda: vec16(a, out))
                ok = ok and bool((out == a.T).all())
                ref = seconds(lambda: cupy.ascontiguousarray(a.T))
                print(f"{np.dtype(dtype).name:8} {str(shape):18} thin {copy / thin:.2f} tiles {copy / tiles:.2f} "
                      f"cupy {copy / ref:.2f} of the copy  {'exact' if ok else 'WRONG'}", flush=True)


if __name__ == "__main__":
    main()
