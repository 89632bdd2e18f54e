"""Probe: 2-D transposes with a short side at and past THIN_SIDE (8-byte) and past the 4-byte limits, the fast
variant as planned against the thin kernel forced, beside CuPy's copy (GPU time, GB/s of bytes read and written).

    PYTHONPATH=. python3 tools/thin_side_probe.py

Each result is compared bit for bit with cupy.ascontiguousarray(a.T) before it is timed.
"""
import importlib

import cupy

import cudakit
from cudakit.bench import timing
B_ = timing.Budget(row_s=0.05, min_runs=5, max_runs=40)
tm = importlib.import_module("cudakit.transpose")  # the module (cudakit.transpose is the function)
for dt, shape in [("float64", (32, 341628)), ("float64", (341628, 32)), ("float64", (33, 341628)), ("float64", (48, 230000)),
                  ("float64", (64, 170000)), ("float64", (230000, 48)), ("float32", (64, 341628)), ("float32", (341628, 40)),
                  ("float32", (96, 230000)), ("float64", (32, 341632)), ("int8", (64, 2000000))]:
    a = cupy.random.random(shape).astype(dt)
    want = cupy.ascontiguousarray(a.T)
    out = cupy.empty(want.shape, dt)
    gbs = lambda t: 2 * a.nbytes / t / 1e9
    t_cupy = timing.measure(lambda i: cupy.ascontiguousarray(a.T), B_)[0].median
    cudakit.transpose(a, out=out)
    assert bool((out == want).all())
    t_fast = timing.measure(lambda i: cudakit.transpose(a, out=out, check=False), B_)[0].median
    keep = tm.THIN_SIDE, tm.THIN_SIDE_ROWS, tm.THIN_SIDE_COLUMNS
    tm.THIN_SIDE = tm.THIN_SIDE_ROWS = tm.THIN_SIDE_COLUMNS = 1 << 10
    try:
        out.fill(0); cudakit.transpose(a, out=out)
        ok = bool((out == want).all())
        t_thin = timing.measure(lambda i: cudakit.transpose(a, out=out, check=False), B_)[0].median
    except Exception as e:
        ok, t_thin = f"{type(e).__name__}", float("nan")
    tm.THIN_SIDE, tm.THIN_SIDE_ROWS, tm.THIN_SIDE_COLUMNS = keep
    print(f"{dt} {shape}: cupy {t_cupy*1e6:.1f} ({gbs(t_cupy):.0f} GB/s) fast {t_fast*1e6:.1f} ({gbs(t_fast):.0f}) thin {t_thin*1e6:.1f} ({gbs(t_thin):.0f}) {'' if ok is True else ok}", flush=True)
