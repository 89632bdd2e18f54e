"""The float64 references of resize and letterbox (check=True, the tests, the bench): resize.cu's formula, source
coordinates (dst + 0.5) * in / out - 0.5, in float64 and unrounded."""
from __future__ import annotations

import cupy
import numpy as np

from . import _check


def _axis_taps(out_n: int, in_n: int):
    s = np.maximum((np.arange(out_n, dtype=np.float64) + 0.5) * (in_n / out_n) - 0.5, 0.0)
    i0 = np.floor(s).astype(np.int64)
    last = i0 >= in_n - 1
    i0, w = np.where(last, in_n - 1, i0), np.where(last, 0.0, s - i0)
    return cupy.asarray(i0), cupy.asarray(np.minimum(i0 + 1, in_n - 1)), cupy.asarray(w)


def reference_resize(img, size):
    """resize(img, size) in float64, unrounded (any of resize's shapes)."""
    a = cupy.asarray(img, dtype=np.float64)
    a4 = a[None, :, :, None] if a.ndim == 2 else a[None] if a.ndim == 3 else a
    (y0, y1, wy), (x0, x1, wx) = _axis_taps(size[0], a4.shape[1]), _axis_taps(size[1], a4.shape[2])
    rows = a4[:, y0] * (1 - wy)[:, None, None] + a4[:, y1] * wy[:, None, None]
    r = rows[:, :, x0] * (1 - wx)[:, None] + rows[:, :, x1] * wx[:, None]
    return r[0, :, :, 0] if a.ndim == 2 else r[0] if a.ndim == 3 else r


def reference_letterbox(images, s):
    """letterbox in float64: (the batch in s's layout, the boxes map (N, 3, 2)); images a batch or a list."""
    from .resize import geometry  # (resize imports this module)

    pieces, maps = [], []
    for img in images:
        g = geometry(img.shape[0], img.shape[1], *s.size)
        canvas = cupy.empty(s.size + (3,), np.float64)
        canvas[...] = cupy.asarray(s.pad, np.float64)
        part = reference_resize(img, (g.nh, g.nw))
        canvas[g.top:g.top + g.nh, g.left:g.left + g.nw] = part[..., ::-1] if s.swap else part
        canvas = (canvas * s.scale - cupy.asarray(s.mean)) / cupy.asarray(s.std)
        pieces.append(canvas.transpose(2, 0, 1) if s.nchw else canvas)
        maps.append(g.map_rows)
    return cupy.stack(pieces), cupy.asarray(np.array(maps, np.float64).reshape(-1, 3, 2))


def verify(op, variant, out, ref, dtype):
    """CheckError where a resize or letterbox result is off its float64 reference (check=True)."""
    if dtype == np.uint8:  # rounded half up from float32: within half a level of the float64 value (and a hair)
        err, tol = float(cupy.abs(out.astype(np.float64) - ref).max()), 0.5 + 1e-3
    else:
        err, tol = _check.relative_error(out, ref), _check.tolerance(dtype, 4)
    if not err <= tol:
        raise _check.CheckError(f"cudakit.{op} (variant {variant!r}, {np.dtype(dtype)}): error {err:.3e} against "
                                f"the float64 reference exceeds {tol:.1e}")
