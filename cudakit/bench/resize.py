"""resize and letterbox in the bench: read against the device-to-device copy ceiling (the source bytes plus the
bytes written), the per-call rows against an empty launch.

The reference a case's × column reads against: PyTorch doing the same letterbox as a user writes it (`.float()`,
`F.interpolate`, pad, channel flip, normalise) where torch is installed, else the same job in CuPy;
cupyx.scipy.ndimage.zoom for a plain resize. The runner times one reference per case, so the other libraries
(cupyx for the letterbox, OpenCV on the host) come as extra rows timed in the case (ceiling_rows), for scale.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import _check
from ..testing import random_array
from .base import Case, OpBench


class ResizeCase(Case):
    """dims = (N, H, W, C, out_h, out_w); order = "resize", or the letterbox's layout ("NCHW", "NHWC"); dtype: the
    resize's, or the letterbox's output (its input is uint8). Its bytes: the source's plus the output's."""

    @property
    def bytes(self) -> int:
        return sum(self.bench.operand_bytes(self))


@functools.lru_cache(maxsize=None)
def _torch():
    """torch, where it is installed and sees a GPU; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def torch_letterbox(src, size, layout="NCHW", dtype="float32"):
    """The letterbox in PyTorch from the same uint8 batch on the GPU, as a user writes it; a CuPy view of the result
    (no copy, no synchronisation), computed on CuPy's current stream."""
    import cupy
    import torch
    import torch.nn.functional as F

    from ..resize import geometry

    n, h, w, _ = src.shape
    (oh, ow), g = size, geometry(h, w, *size)
    ptr = cupy.cuda.get_current_stream().ptr
    with torch.cuda.stream(torch.cuda.ExternalStream(ptr)) if ptr else torch.cuda.stream(None):
        y = _torch_input(src).permute(0, 3, 1, 2).float()
        y = F.interpolate(y, size=(g.nh, g.nw), mode="bilinear", align_corners=False)
        y = F.pad(y, (g.left, ow - g.nw - g.left, g.top, oh - g.nh - g.top), value=114.0)
        y = y.flip(1) / 255
        y = (y.permute(0, 2, 3, 1) if layout == "NHWC" else y).to(getattr(torch, np.dtype(dtype).name)).contiguous()
    mem = cupy.cuda.UnownedMemory(y.data_ptr(), y.numel() * y.element_size(), owner=y)
    return cupy.ndarray(tuple(y.shape), np.dtype(dtype), cupy.cuda.MemoryPointer(mem, 0))


_torch_inputs: dict = {}


def _torch_input(src):
    """The batch as a torch tensor (shared memory), made once per array."""
    key = (src.data.ptr, src.shape)
    if key not in _torch_inputs:
        import torch

        if len(_torch_inputs) >= 64:
            _torch_inputs.clear()
        _torch_inputs[key] = (torch.from_dlpack(src), src)  # (src kept alive: its address is the key)
    return _torch_inputs[key][0]


def cupy_letterbox(src, size, layout="NCHW", dtype="float32"):
    """The letterbox in CuPy as a user writes it: cupyx.scipy.ndimage.zoom (half-pixel centres), a canvas, a flip."""
    import cupy
    from cupyx.scipy import ndimage

    from ..resize import geometry

    n, h, w, _ = src.shape
    (oh, ow), g = size, geometry(h, w, *size)
    x = ndimage.zoom(src.astype(cupy.float32), (1, g.nh / h, g.nw / w, 1), order=1, mode="nearest", grid_mode=True)
    canvas = cupy.full((n, oh, ow, 3), 114, cupy.float32)
    canvas[:, g.top:g.top + g.nh, g.left:g.left + g.nw] = x
    canvas = canvas[..., ::-1] * cupy.float32(1 / 255)
    return cupy.ascontiguousarray(canvas.transpose(0, 3, 1, 2) if layout == "NCHW" else canvas, dtype=dtype)


def zoom_resize(src, size):
    from cupyx.scipy import ndimage

    _, h, w, _ = src.shape
    return ndimage.zoom(src, (1, size[0] / h, size[1] / w, 1), order=1, mode="nearest", grid_mode=True)


def _cv2():
    try:
        import cv2
    except ImportError:
        return None
    return cv2


def cv2_resize(host, size):
    """OpenCV on the host, image by image (cv2.resize takes (width, height))."""
    cv2 = _cv2()
    oh, ow = size
    return np.stack([cv2.resize(im, (ow, oh), interpolation=cv2.INTER_LINEAR).reshape(oh, ow, -1) for im in host])


def cv2_letterbox(host, size, layout="NCHW", dtype="float32"):
    """The letterbox with OpenCV and NumPy on the host, image by image (resized in float32, as the GPU rows)."""
    from ..resize import geometry

    cv2 = _cv2()
    (oh, ow), g = size, geometry(host.shape[1], host.shape[2], *size)
    out = []
    for im in host:
        r = cv2.resize(im.astype(np.float32), (g.nw, g.nh), interpolation=cv2.INTER_LINEAR)
        r = cv2.copyMakeBorder(r, g.top, oh - g.nh - g.top, g.left, ow - g.nw - g.left, cv2.BORDER_CONSTANT,
                               value=(114.0, 114.0, 114.0))
        r = r[..., ::-1] * np.float32(1 / 255)
        out.append((r.transpose(2, 0, 1) if layout == "NCHW" else r).astype(dtype))
    return np.stack(out)


class ResizeBench(OpBench):
    op = "resize"
    reference_name = "the reference"  # set per case by make(): torch, CuPy or cupyx.scipy.ndimage.zoom
    rate_note = "GB/s = (source bytes + bytes written) / time"
    fraction_header = "% of copy"
    error_header = "check"

    def cases(self, quick):
        op = self.op
        if quick:
            return [ResizeCase(op, "float32", (16, 720, 1280, 3, 640, 640), "NCHW", headline=True),
                    ResizeCase(op, "uint8", (16, 720, 1280, 3, 360, 640), "resize")]
        return [
            ResizeCase(op, "float32", (64, 720, 1280, 3, 640, 640), "NCHW", headline=True),  # an exact halving
            ResizeCase(op, "float32", (64, 1080, 1920, 3, 608, 608), "NCHW"),  # r = 608 / 1920: not an integer
            ResizeCase(op, "float16", (64, 720, 1280, 3, 640, 640), "NCHW", fast_only=True),
            ResizeCase(op, "float32", (64, 720, 1280, 3, 640, 640), "NHWC", fast_only=True),
            ResizeCase(op, "float32", (1, 720, 1280, 3, 640, 640), "NCHW", fast_only=True, per_call=True),
            ResizeCase(op, "uint8", (64, 720, 1280, 3, 360, 640), "resize"),
            ResizeCase(op, "uint8", (64, 1080, 1920, 3, 608, 1080), "resize"),
        ]

    def shape_label(self, case):
        n, h, w, c, oh, ow = case.dims
        if case.order == "resize":
            return f"resize {n}×{h}×{w}×{c} → {oh}×{ow}"
        return f"letterbox {n}×{h}×{w}×3 uint8 → {case.order} {oh}×{ow}"

    def operand_elements(self, case):
        n, h, w, c, oh, ow = case.dims
        return [n * h * w * c, n * oh * ow * c]

    def operand_bytes(self, case):
        src, out = self.operand_elements(case)
        return [src * (case.itemsize if case.order == "resize" else 1), out * case.itemsize]

    def flops(self, case):
        return 0

    def sweep_case(self, draw):
        n, h, w = draw.log_uniform(1, 16), draw.log_uniform(1, 2048), draw.log_uniform(1, 2048)
        if draw.choice(("resize", "letterbox")) == "resize":
            size = (draw.log_uniform(1, 2048), draw.log_uniform(1, 2048))
            return ResizeCase(self.op, draw.choice(("uint8", "float32")), (n, h, w, draw.choice((1, 2, 3, 4))) + size,
                              "resize")
        side = draw.choice((320, 416, 512, 608, 640, 1024))
        return ResizeCase(self.op, draw.choice(("float32", "float16")), (n, h, w, 3, side, side),
                          draw.choice(("NCHW", "NHWC")))

    # ---- running a case
    def make(self, case):
        import cupy

        n, h, w, c, oh, ow = case.dims
        if case.order == "resize":
            src, out = random_array((n, h, w, c), case.dtype), cupy.empty((n, oh, ow, c), case.dtype)
            self.reference_name = "cupyx.scipy.ndimage.zoom(order=1, grid_mode=True)"
        else:
            src = random_array((n, h, w, 3), "uint8")
            out = cupy.empty((n, 3, oh, ow) if case.order == "NCHW" else (n, oh, ow, 3), case.dtype)
            self.reference_name = "torch (.float, interpolate, pad, flip, /255)" if _torch() else \
                "CuPy (astype, ndimage.zoom, pad, flip, /255)"
        return {"src": src, "out": out, "job": (case.order, (oh, ow), case.dtype)}

    def call(self, variant, s):
        import cudakit

        kind, size, dtype = s["job"]
        if kind == "resize":
            return cudakit.resize(s["src"], size, out=s["out"], variant=variant.name, check=False)
        return cudakit.letterbox(s["src"], size, dtype=dtype, layout=kind, out=s["out"], variant=variant.name,
                                 check=False)[0]

    def reference(self, s):
        kind, size, dtype = s["job"]
        if kind == "resize":
            return zoom_resize(s["src"], size)
        return (torch_letterbox if _torch() else cupy_letterbox)(s["src"], size, kind, dtype)

    def check_context(self, case, s0):
        from ..resize import reference_letterbox, reference_resize, settings

        kind, size, dtype = s0["job"]
        if kind == "resize":
            return reference_resize(s0["src"], size)
        return reference_letterbox(s0["src"], settings(size, 114, True, 1 / 255, None, None, dtype, kind))[0]

    def error(self, case, ref, s0, out):
        import cupy

        out = cupy.asarray(out)
        if out.dtype == np.uint8:  # rounded results: every value within one level of the float64 value
            worst = float(cupy.abs(out.astype(np.float64) - ref).max())
            return {"kind": "exact", "value": worst <= 1.0, "against": f"float64 reference, worst {worst:.2f} levels"}
        return {"kind": "rel", "value": _check.relative_error(out, ref), "k": 4}

    def ceiling_rows(self, case, sets):
        """The other libraries, for scale: cupyx for the letterbox (when torch is the reference), OpenCV on the
        host. Not for per-call cases."""
        import cupy

        if case.per_call:
            return []
        kind, rows = case.order, []

        def on_host(fn):  # host work between CUDA events: start it on an idle GPU, so the events bracket it
            def run(s):
                cupy.cuda.get_current_stream().synchronize()
                return fn(s)
            return run

        def error_of(out):
            return self.error(case, self._ref, sets[0], out)

        if kind != "resize" and _torch():
            rows.append(("cupyx zoom letterbox (CuPy as a user writes it)", "astype, ndimage.zoom, pad, flip, /255",
                         lambda s: cupy_letterbox(s["src"], *s["job"][1:2], kind, case.dtype), error_of))
        if _cv2() is not None:
            for s in sets:
                s["host"] = cupy.asnumpy(s["src"])
            fn = (lambda s: cv2_resize(s["host"], s["job"][1])) if kind == "resize" else \
                (lambda s: cv2_letterbox(s["host"], s["job"][1], kind, case.dtype))
            rows.append((f"cv2 {'resize' if kind == 'resize' else 'letterbox'} on the CPU, image by image",
                         "OpenCV on the host from host memory (for scale)", on_host(fn), error_of))
        if sets and rows:
            self._ref = self.check_context(case, sets[0])
        return rows

    def fraction(self, row, case_ceiling, ceilings):
        if row["kind"] == "ceiling":
            return None
        if row.get("per_call") and "launch" in ceilings:
            return "launch", ceilings["launch"]["value"] * 1e-6 / row["median_s"]
        return ("copy", row["gbps"] / ceilings["copy"]["value"]) if "copy" in ceilings else None

    def footnotes(self, results):
        ce = results["ceilings"]
        copy = f", {ce['copy']['value']:.0f} GB/s measured in this run" if "copy" in ce else ""
        return [f"% of copy: of the device-to-device copy ceiling{copy}, bytes = uint8 source + output; per call: "
                "an empty launch's time / the call's time (1.5x the launch = 67%)",
                "× CuPy: against the case's reference (torch as a user writes it, or cupyx.scipy.ndimage.zoom); "
                "dim rows: other libraries for scale (OpenCV on the host)",
                "check: uint8 within one level of the float64 reference (✓), floats by relative error; torch, zoom "
                "and OpenCV find source coordinates in float32, so their rows can miss the float32 tolerance"]
