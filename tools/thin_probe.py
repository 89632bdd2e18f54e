"""The thin transpose kernel against the 32 x 32 tiles (vec16) and CuPy, as fractions of cudaMemcpy of the same bytes
(GPU time, CUDA events), for short sides c from 3 to 63 in both directions and 1-, 2- and 4-byte elements; each
result checked bit for bit. What THIN_SIDE_ROWS / THIN_SIDE_COLUMNS in cudakit/transpose.py were chosen from.

    PYTHONPATH=. python3 tools/thin_probe.py
    PYTHONPATH=. python3 tools/thin_probe.py --tiles   the packed side staged as columns, in its own order, swizzled
"""
import importlib
import sys

import cupy
import numpy as np

from cudakit._ceilings import device_copy
from cudakit.bench import timing

tr = importlib.import_module("cudakit.transpose")
BUDGET = timing.Budget(row_s=0.05, min_runs=5, max_runs=100)
STAGED_BYTES = 1 << 26  # each matrix: 64 MiB


def seconds(fn) -> float:
    return timing.measure(lambda i: fn(), BUDGET)[0].median


def thin_seconds(a, out, tile: int, batch: int = 1) -> float:
    """run_thin's time with the packed side staged as `tile` (THIN_COLUMNS, THIN_PACKED, THIN_SWIZZLED)."""
    rule = tr.thin_tile
    tr.thin_tile = lambda c, itemsize, wide_in: tile
    tr._thin_config.cache_clear()
    try:
        return seconds(lambda: tr.run_thin(a, out, batch))
    finally:
        tr.thin_tile = rule
        tr._thin_config.cache_clear()


def tiles_ab() -> None:
    """Bytes and 16-bit elements, both directions: the ways of staging the packed side that each is built with
    (session 23 also measured a swizzled tile for (rows, c) input: slower than the columns throughout)."""
    tiles = {"columns": tr.THIN_COLUMNS, "packed": tr.THIN_PACKED, "swizzled": tr.THIN_SWIZZLED}
    for dtype in (np.int8, np.float16):
        for c, batch in [(3, 1), (4, 1), (8, 1), (16, 1), (24, 1), (48, 1), (3, 64), (16, 64)]:
            for wide in (False, True):
                e = np.dtype(dtype).itemsize
                n = STAGED_BYTES // (c * e) // 32 * 32 if batch == 1 else 512 * 512
                shape = (batch, n, c) if wide else (batch, c, n)
                a = cupy.random.randint(0, 100, shape).astype(dtype)
                out = cupy.empty((batch, shape[2], shape[1]), dtype)
                copy = seconds(lambda: device_copy(out.reshape(-1), a.reshape(-1)))
                times = {}
                for _ in range(2):
                    for name, tile in tiles.items():
                        if tile not in tr.thin_tiles(2, wide):
                            continue
                        out.fill(101)
                        times.setdefault(name, []).append(thin_seconds(a[0], out[0], tile, batch))
                        assert bool((out == a.transpose(0, 2, 1)).all()), (dtype, shape, name)
                print(f"{np.dtype(dtype).name:8} {str(shape):20} " +
                      " ".join(f"{name} {copy / min(t):.3f}" for name, t in times.items()) + " of the copy  exact",
                      flush=True)


def main() -> None:
    if "--tiles" in sys.argv:
        return tiles_ab()
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
