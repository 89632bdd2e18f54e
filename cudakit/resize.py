"""Resize and letterbox: bilinear resizing with half-pixel centres, and the detector preprocessing built on it.

    cudakit.resize(img, (h, w))              uint8, float16 or float32 images (H, W), (H, W, C), (N, H, W, C), C <= 4
    cudakit.letterbox(imgs, (640, 640))      uint8 BGR frames -> normalised float NCHW, one launch per batch
    cudakit.unletterbox_boxes(boxes, map)    (x1, y1, x2, y2) in letterboxed pixels -> original pixels

One variant table serves both ops (naive -> fused -> fast; resize.cu tells the lesson). Source coordinates are
(dst + 0.5) * in / out - 0.5 with the scale in float64 (the convention of OpenCV INTER_LINEAR and PyTorch
align_corners=False); the float64 references (_resize_reference.py) compute exactly that formula.
"""
from __future__ import annotations

import functools
import math
import numbers
from collections import namedtuple

import cupy
import numpy as np

from . import _args, _check
from ._compile import f64_bits, instantiation, kernel, launch, pair, pair_f32
from ._device import current_device
from ._resize_reference import reference_letterbox, reference_resize, verify as _verify
from ._variants import Variant, lookup, register

FAMILY = "resize"
IMAGE_DTYPES = (np.dtype(np.uint8), np.dtype(np.float16), np.dtype(np.float32))
OUT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))  # letterbox's
CTYPES = {"uint8": "unsigned char", "float16": "half_bits", "float32": "float"}  # float16 as its bits (resize.cu)
THREADS = 256
FAST_X, FAST_Y, RUN, ROWS = 32, 8, 4, 2  # as in resize.cu: a 128 x 16 output tile per block of 32 x 8 threads
TILE_W, TILE_H = FAST_X * RUN, FAST_Y * ROWS
TABLE_COLS = 9  # as in resize.cu: pointer, h, w, nh, nw, top, left, inv_y bits, inv_x bits
MAX_GRID_YZ = 65535
_ndarray = cupy.ndarray


# ---- the kernels: a module per image dtype (resize) and per output dtype (letterbox, with the boxes' kernels)
@functools.lru_cache(maxsize=None)
def resize_group(dtype) -> tuple[str, ...]:
    t = CTYPES[np.dtype(dtype).name]
    return (instantiation("resize_naive", t, t), instantiation("resize_fused", t)) + tuple(
        instantiation("resize_fast", t, c, vec) for c in (1, 2, 3, 4) for vec in (True, False))


@functools.lru_cache(maxsize=None)
def letterbox_group(dtype) -> tuple[str, ...]:
    t = CTYPES[np.dtype(dtype).name]
    return (instantiation("resize_naive", "unsigned char", "float"), "letterbox_pad_naive",
            instantiation("letterbox_normalise_naive", t), instantiation("hwc_to_chw_naive", t)) + tuple(
        instantiation("letterbox_fused", t, nchw, table) for nchw in (True, False) for table in (True, False)) + tuple(
        instantiation("letterbox_fast", t, nchw, table, vec)
        for nchw in (True, False) for table in (True, False) for vec in (True, False)) + tuple(
        instantiation("unletterbox_boxes", b) for b in ("float", "double"))


def instantiation_groups():
    """Every module this family builds, for the GPU-less compile check."""
    return [resize_group(d) for d in IMAGE_DTYPES] + [letterbox_group(d) for d in OUT_DTYPES]


def store_unit(nbytes: int) -> int:
    """resize.cu's store_unit: the widest of 16, 8, 4, 2, 1 bytes that divides a run of `nbytes`."""
    return next(u for u in (16, 8, 4, 2, 1) if nbytes % u == 0)


def _grid_1d(total: int) -> tuple[int]:
    return (max(1, min(-(-total // THREADS), 2**31 - 1)),)


# ---- resize: a job is (src, out), both C-contiguous (N, H, W, C)
def _resize_threads(name: str, per_value: bool):
    """The naive (a thread per output value) or fused (a thread per output pixel) resize."""
    def run(src, out):
        (n, h, w, c), (oh, ow), t = src.shape, out.shape[1:3], CTYPES[src.dtype.name]
        fn = kernel(FAMILY, instantiation(name, *(t, t)[:1 + per_value]), resize_group(src.dtype))
        count = out.size if per_value else n * oh * ow
        launch(fn, _grid_1d(count), (THREADS,), (out.data.ptr, src.data.ptr, count, h, w, oh, ow, c, f64_bits(h / oh),
                                                 f64_bits(w / ow)))
    return run


_resize_naive, _resize_fused = _resize_threads("resize_naive", True), _resize_threads("resize_fused", False)


def _resize_fast(src, out):
    (n, h, w, c), (oh, ow), e = src.shape, out.shape[1:3], src.itemsize
    if -(-oh // TILE_H) > MAX_GRID_YZ:  # taller than a grid's y: one thread per pixel
        return _resize_fused(src, out)
    pixel = c * e if c * e in (2, 4, 8, 16) else 1  # a pixel that is one word loads as one (resize.cu)
    unit = store_unit(RUN * c * e)
    vec = out.data.ptr % unit == 0 and ow * c * e % unit == 0 and src.data.ptr % pixel == 0
    fn = kernel(FAMILY, instantiation("resize_fast", CTYPES[src.dtype.name], c, vec), resize_group(src.dtype))
    for b in range(0, n, MAX_GRID_YZ):
        launch(fn, (-(-ow // TILE_W), -(-oh // TILE_H), min(MAX_GRID_YZ, n - b)), (FAST_X, FAST_Y),
               (out.data.ptr + b * oh * ow * c * e, src.data.ptr + b * h * w * c * e, h, w, oh, ow, f64_bits(h / oh),
                f64_bits(w / ow)))


# ---- letterbox
# letterbox's checked keyword arguments (pad, mean, std per output channel) and the kernels' packed forms: tail, the
# last arguments ((alpha, beta) per output channel as float2, the pad bytes, the swap); pad_src, the pad bytes in
# source channel order (the naive canvas, swapped later).
Settings = namedtuple("Settings", "size pad swap scale mean std dtype nchw tail pad_src")


class Geometry(namedtuple("Geometry", "h w nh nw top left")):
    """Where an (h, w) image lands in the letterbox: resized to (nh, nw) at (top, left)."""
    @property
    def args(self) -> tuple:
        """The kernels' (h, w), (nh, nw), (top, left) as int2, and h / nh, w / nw as doubles."""
        return (pair(self.h, self.w), pair(self.nh, self.nw), pair(self.top, self.left), f64_bits(self.h / self.nh),
                f64_bits(self.w / self.nw))

    @property
    def map_rows(self) -> np.ndarray:
        """The image's (3, 2) rows of the BoxesMap, as the letterbox kernels write them."""
        return np.array([[self.nh / self.h, self.nw / self.w], [self.top, self.left], [self.h, self.w]], np.float64)


class BoxesMap:
    """What unletterbox_boxes needs, per image, over one (N, 3, 2) float64 array: scale = (nh / h, nw / w), the
    factor each axis was resized by; offset = (top, left) of the resized image in the output; size = (h, w)."""
    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    scale = property(lambda self: self.array[:, 0])
    offset = property(lambda self: self.array[:, 1])
    size = property(lambda self: self.array[:, 2])


def _triple(name, value, default):
    if value is None or isinstance(value, numbers.Real):
        return (float(default if value is None else value),) * 3
    try:
        values = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"cudakit.letterbox: {name} must be a number or 3 numbers, got {value!r}") from None
    if len(values) != 3:
        raise ValueError(f"cudakit.letterbox: {name} must be a number or 3 numbers (output channel order), "
                         f"got {value!r}")
    return values


def hashable(value):
    """value as a cache key: a sequence (a list of means, an array) as a tuple."""
    as_is = value is None or isinstance(value, (numbers.Number, str, tuple))
    return value if as_is else tuple(np.ravel(value).tolist())


def output_size(op: str, size) -> tuple[int, int]:
    """(height, width) from `size`, two positive integers."""
    try:
        oh, ow = size
    except (TypeError, ValueError):
        oh = ow = None
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 < v < 2**31 for v in (oh, ow)):
        raise ValueError(f"cudakit.{op}: size must be (height, width), two positive integers in array order, "
                         f"got {size!r}")
    return int(oh), int(ow)


@functools.lru_cache(maxsize=1024)
def settings(size, pad, bgr_to_rgb, scale, mean, std, dtype, layout) -> Settings:
    pads, means, stds = _triple("pad", pad, 0), _triple("mean", mean, 0.0), _triple("std", std, 1.0)
    if any(p != int(p) or not 0 <= p <= 255 for p in pads):
        raise ValueError(f"cudakit.letterbox: pad must be a pixel value 0..255 (or 3 of them), got {pad!r}")
    if not isinstance(scale, numbers.Real) or not math.isfinite(scale):
        raise TypeError(f"cudakit.letterbox: scale must be a finite number, got {scale!r}")
    if not all(map(math.isfinite, means)) or not all(math.isfinite(s) and s != 0 for s in stds):
        raise ValueError(f"cudakit.letterbox: mean must be finite and std finite and nonzero, got {mean!r}, {std!r}")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        dtype = None
    if dtype not in OUT_DTYPES:
        raise TypeError(f"cudakit.letterbox: dtype must be float32 or float16, got {dtype}")
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"cudakit.letterbox: layout must be 'NCHW' or 'NHWC', got {layout!r}")
    tail = tuple(pair_f32(scale / s, -m / s) for m, s in zip(means, stds)) + (
        sum(int(p) << 8 * c for c, p in enumerate(pads)), int(bool(bgr_to_rgb)))
    pad_src = sum(int(p) << 8 * c for c, p in enumerate(pads[::-1] if bgr_to_rgb else pads))
    return Settings(output_size("letterbox", size), pads, bool(bgr_to_rgb), float(scale), means, stds, dtype,
                    layout == "NCHW", tail, pad_src)


@functools.lru_cache(maxsize=4096)
def geometry(h: int, w: int, oh: int, ow: int) -> Geometry:
    """An (h, w) image in an (oh, ow) letterbox: resized to round(r * h) x round(r * w) (half up, at least 1) with
    r = min(oh / h, ow / w), centred; an odd padding puts its extra pixel at the bottom or right."""
    r = min(oh / h, ow / w)
    nh, nw = (min(limit, max(1, math.floor(r * side + 0.5))) for side, limit in ((h, oh), (w, ow)))
    return Geometry(h, w, nh, nw, (oh - nh) // 2, (ow - nw) // 2)


# A checked letterbox call: src, the batch (N, h, w, 3) with its geometry, or the table (N, TABLE_COLS) int64 with
# geometry None and images, [(image (1, h, w, 3), its geometry)] (the naive variant walks them); boxes_map (N, 3, 2).
LetterboxJob = namedtuple("LetterboxJob", "s out boxes_map src geometry images")


def _letterbox_naive(job: LetterboxJob):
    """A launch per step: resize into a float32 buffer, pad, swap and normalise, then NHWC -> NCHW."""
    s, (oh, ow), t = job.s, job.s.size, CTYPES[job.s.dtype.name]
    group = letterbox_group(s.dtype)
    parts = [(job.src, job.geometry, job.out, job.boxes_map)] if job.geometry else [
        (img, g, job.out[i:i + 1], job.boxes_map[i:i + 1]) for i, (img, g) in enumerate(job.images)]
    for src, g, out, boxes_map in parts:
        hw, nhw, topleft, iy, ix = g.args
        resized = cupy.empty((src.shape[0], g.nh, g.nw, 3), np.float32)
        launch(kernel(FAMILY, instantiation("resize_naive", "unsigned char", "float"), group), _grid_1d(resized.size),
               (THREADS,), (resized.data.ptr, src.data.ptr, resized.size, g.h, g.w, g.nh, g.nw, 3, iy, ix))
        canvas = cupy.empty((src.shape[0], oh, ow, 3), np.float32)
        launch(kernel(FAMILY, "letterbox_pad_naive", group), _grid_1d(canvas.size), (THREADS,),
               (canvas.data.ptr, resized.data.ptr, boxes_map.data.ptr, canvas.size, hw, nhw, topleft, pair(oh, ow),
                s.pad_src))
        nhwc = cupy.empty(canvas.shape, s.dtype) if s.nchw else out
        launch(kernel(FAMILY, instantiation("letterbox_normalise_naive", t), group), _grid_1d(canvas.size), (THREADS,),
               (nhwc.data.ptr, canvas.data.ptr, canvas.size) + s.tail[:3] + s.tail[4:])
        if s.nchw:
            launch(kernel(FAMILY, instantiation("hwc_to_chw_naive", t), group), _grid_1d(canvas.size), (THREADS,),
                   (out.data.ptr, nhwc.data.ptr, canvas.size, oh * ow))


def _letterbox_fused(job: LetterboxJob):
    s, g = job.s, job.geometry
    fn = kernel(FAMILY, instantiation("letterbox_fused", CTYPES[s.dtype.name], s.nchw, g is None),
                letterbox_group(s.dtype))
    hw, nhw, topleft, iy, ix = g.args if g else (0,) * 5
    launch(fn, _grid_1d(job.out.size), (THREADS,), (job.out.data.ptr, job.src.data.ptr, job.boxes_map.data.ptr,
                                                    job.out.size, hw, nhw, topleft, pair(*s.size), iy, ix) + s.tail)


@functools.lru_cache(maxsize=4096)
def _fast_plan(s: Settings, g: Geometry | None, vec: bool, device_id: int):
    """(kernel, blocks per image, the arguments after the three pointers) of the fast letterbox."""
    (oh, ow), t = s.size, CTYPES[s.dtype.name]
    fn = kernel(FAMILY, instantiation("letterbox_fast", t, s.nchw, g is None, vec), letterbox_group(s.dtype))
    return fn, (-(-ow // TILE_W), -(-oh // TILE_H)), (g.args[:3] if g else (0,) * 3) + (pair(oh, ow),) + (
        g.args[3:] if g else (0, 0)) + s.tail


def _letterbox_fast(job: LetterboxJob):
    s, out = job.s, job.out
    (oh, ow), e = s.size, s.dtype.itemsize
    if -(-oh // TILE_H) > MAX_GRID_YZ:  # taller than a grid's y: one thread per value
        return _letterbox_fused(job)
    vec = out.data.ptr % (RUN * e) == 0 and ow % RUN == 0  # every full run aligned (resize.cu's store_run)
    fn, grid, tail = _fast_plan(s, job.geometry, vec, out.data.device_id)
    n, per_image = out.shape[0], job.src.strides[0]  # an image of the batch, or a row of the table
    for b in range(0, n, MAX_GRID_YZ):
        firsts = (out.data.ptr + b * 3 * oh * ow * e, job.src.data.ptr + b * per_image, job.boxes_map.data.ptr + 48 * b)
        launch(fn, grid + (min(MAX_GRID_YZ, n - b),), (FAST_X, FAST_Y), firsts + tail)


def _runner(resize_fn, letterbox_fn):
    return lambda job: letterbox_fn(job) if isinstance(job, LetterboxJob) else resize_fn(*job)


VARIANTS = register(FAMILY, [
    Variant(FAMILY, "naive",
            "one thread per output value (seed 002's bilinear lesson); letterbox: a launch per step (resize, pad, "
            "swap + normalise, NHWC -> NCHW) through float32 buffers", _runner(_resize_naive, _letterbox_naive),
            seed=True),
    Variant(FAMILY, "fused",
            "resize: one thread per pixel, its taps once for all channels; letterbox: every step in one thread per "
            "output value, one launch, no buffers", _runner(_resize_fused, _letterbox_fused)),
    Variant(FAMILY, "fast",
            "128 x 16 output tiles, taps once per block in shared memory, 4 x 2 pixels per thread, 8-byte loads of "
            "pixel pairs, vector stores, the batch on the grid", _runner(_resize_fast, _letterbox_fast)),
])


# ---- the ops
def resize(img, size, *, out=None, variant: str = "fast", check: bool | None = None):
    """Bilinear resize of `img` to `size` = (height, width), in array order (cv2.resize takes (width, height)).

    img: uint8, float16 or float32 CuPy array (H, W), (H, W, C) or a batch (N, H, W, C), C <= 4; the result has the
    same dtype and layout. Pixel centres sit at half-integers, as OpenCV's INTER_LINEAR, PyTorch's
    align_corners=False and cupyx.scipy.ndimage.zoom(..., grid_mode=True); like OpenCV's bilinear it does not
    antialias, so a strong downscale aliases (each output pixel reads 2 x 2 source pixels). Values are computed in
    float32 from float64 coordinates and rounded once: uint8 half up (within a level of cv2.resize), float16 to
    nearest. Runs on CuPy's current stream with no synchronisation; other strides are copied to C order first.
    """
    if type(img) is not cupy.ndarray and (face := _args.dask_face(img)) is not None:
        return face.resize(img, size, out=out, variant=variant, check=check)
    img = _args.device_array("resize", "img", img, (2, 3, 4))
    if img.dtype not in IMAGE_DTYPES:
        raise TypeError(f"cudakit.resize: unsupported dtype {img.dtype}; supported: uint8, float16, float32")
    if img.ndim > 2 and not 1 <= img.shape[-1] <= 4:
        raise ValueError(f"cudakit.resize: img must be (H, W), (H, W, C) or (N, H, W, C) with C <= 4 channels, got "
                         f"shape {img.shape} (a batch of one-channel images is (N, H, W, 1))")
    oh, ow = output_size("resize", size)
    lead, channels = (img.shape[:1], img.shape[3:]) if img.ndim == 4 else ((), img.shape[2:])  # (N,) and (C,)
    h, w = img.shape[len(lead):len(lead) + 2]
    if h == 0 or w == 0:
        raise ValueError(f"cudakit.resize: img of shape {img.shape} has no pixels to interpolate")
    run = lookup(FAMILY, variant).run
    with _args.on_device(img.data.device_id):
        out = _args.output("resize", out, lead + (oh, ow) + channels, img.dtype, img.data.device_id, {"img": img})
        if out.size:
            src = img if img.flags.c_contiguous else cupy.ascontiguousarray(img)
            c = channels[0] if channels else 1
            run((src.reshape(-1, h, w, c), out.reshape(-1, oh, ow, c)))
            if _check.enabled(check):
                _verify("resize", variant, out, reference_resize(img, (oh, ow)), img.dtype)
    return out


def letterbox(imgs, size=(640, 640), *, pad=114, bgr_to_rgb=True, scale=1 / 255, mean=None, std=None,
              dtype=cupy.float32, layout="NCHW", out=None, variant: str = "fast", check: bool | None = None):
    """Detector preprocessing in one launch: each uint8 image is resized keeping its aspect ratio, centred in a
    `size` = (height, width) canvas of `pad` (114, or 3 values in output channel order), its channels reversed
    (BGR -> RGB), normalised to (v * scale - mean) / std (mean, std: a number or 3, in output channel order) and
    written as `dtype` (float32 or float16) in `layout` "NCHW" (N, 3, H, W) or "NHWC" (N, H, W, 3).

    imgs: a batch (N, H, W, 3) uint8, or a list of (H, W, 3) uint8 images of any sizes (still one launch, through
    a table of pointers and sizes uploaded asynchronously). The resized size is round(r * h) x round(r * w) (half
    up) with r = min(out_h / h, out_w / w), resampled from (h, w) to exactly that size (resize's bilinear); an odd
    padding puts the extra pixel at the bottom or right.

    Returns (batch, boxes_map): a BoxesMap of per-image scale, (top, left) offset and original size, written by
    the same launch (nothing is copied to or from the host), which unletterbox_boxes() takes. Repeated calls on
    batches of one shape with the same settings return one shared BoxesMap, whose values follow from the shapes
    alone (kept on the device since the first such call): read it, don't write into it.
    """
    try:  # the usual call (a batch, the fast variant, a plan made by an earlier call): a few cheap tests
        key = (imgs.shape, imgs.dtype, size, pad, bgr_to_rgb, scale, mean, std, dtype, layout, variant, check)
        plan = _plans.get(key)
    except (AttributeError, TypeError):  # a list, an unhashable argument
        plan = None
    if plan is not None and type(imgs) is _ndarray and not _check.enabled(check):
        (fn, grid, tail, shape, out_dtype, device_id, boxes_map), src = plan, imgs.data
        if src.device_id == device_id == current_device() and imgs.flags.c_contiguous:
            if out is None:
                out = cupy.empty(shape, out_dtype)
                dst = out.data
            elif type(out) is _ndarray and out.shape == shape and out.dtype == out_dtype and out.flags.c_contiguous:
                dst = out.data  # on the device, aligned for the vector stores, apart from imgs:
                if dst.device_id != device_id or dst.ptr % 16 or src.ptr < dst.ptr + out.nbytes and \
                        dst.ptr < src.ptr + imgs.nbytes:
                    dst = None
            else:
                dst = None
            if dst is not None:
                launch(fn, grid, (FAST_X, FAST_Y), (dst.ptr, src.ptr, 0) + tail)
                return out, boxes_map
    return _letterbox(imgs, size, pad, bgr_to_rgb, scale, mean, std, dtype, layout, out, variant, check)


_plans: dict = {}  # letterbox's usual calls: key -> (kernel, grid, arguments after the pointers, out shape, dtype,
#                    device, the BoxesMap every such call returns: its values follow from the shapes alone)


def _letterbox(imgs, size, pad, bgr_to_rgb, scale, mean, std, dtype, layout, out, variant, check):
    if (face := _args.dask_face(imgs)) is not None:
        return face.letterbox(imgs, size, pad=pad, bgr_to_rgb=bgr_to_rgb, scale=scale, mean=mean, std=std,
                              dtype=dtype, layout=layout, out=out, variant=variant, check=check)
    s = settings(hashable(size), hashable(pad), bgr_to_rgb, scale, hashable(mean), hashable(std), dtype, layout)
    oh, ow = s.size
    uniform = not isinstance(imgs, (list, tuple))
    images = [_args.device_array("letterbox", "imgs", imgs, 4)] if uniform else list(imgs)
    if not images:
        raise ValueError("cudakit.letterbox: imgs is an empty list")
    for i, img in enumerate(images):
        name = "imgs" if uniform else f"imgs[{i}]"
        _args.device_array("letterbox", name, img, None if uniform else 3)
        if img.dtype != np.uint8:
            raise TypeError(f"cudakit.letterbox: {name} must be uint8 (camera frames), got {img.dtype}")
        if img.shape[-1] != 3 or 0 in img.shape[-3:-1]:
            raise ValueError(f"cudakit.letterbox: {name} must be {'(N, H, W, 3)' if uniform else '(H, W, 3)'} with "
                             f"H, W >= 1, got shape {img.shape}")
    device_id = images[0].data.device_id
    if any(img.data.device_id != device_id for img in images):
        raise ValueError("cudakit.letterbox: the images must be on one device")
    run = lookup(FAMILY, variant).run
    n = imgs.shape[0] if uniform else len(images)
    with _args.on_device(device_id):
        shape = (n, 3, oh, ow) if s.nchw else (n, oh, ow, 3)
        named = {"imgs": imgs} if uniform else {f"imgs[{i}]": img for i, img in enumerate(images)}
        out = _args.output("letterbox", out, shape, s.dtype, device_id, named)
        boxes_map = cupy.empty((n, 3, 2), np.float64)
        if n:
            images = [img if img.flags.c_contiguous else cupy.ascontiguousarray(img) for img in images]
            if uniform:
                job = LetterboxJob(s, out, boxes_map, images[0], geometry(*imgs.shape[1:3], oh, ow), [])
            else:
                parts = [(img[None], geometry(*img.shape[:2], oh, ow)) for img in images]
                rows = [(img.data.ptr, *g, *g.args[3:]) for img, g in parts]
                table = cupy.asarray(np.array(rows, np.int64))  # pinned staging, asynchronous on the current stream
                job = LetterboxJob(s, out, boxes_map, table, None, parts)
            run(job)
            if _check.enabled(check):
                ref, ref_map = reference_letterbox(images[0] if uniform else images, s)
                _verify("letterbox", variant, out, ref, s.dtype)
                _verify("letterbox", variant, boxes_map, ref_map, np.float64)
            elif uniform and variant == "fast" and n <= MAX_GRID_YZ and -(-oh // TILE_H) <= MAX_GRID_YZ \
                    and ow % RUN == 0 and len(_plans) < 4096:  # the next such call takes the short cut
                fn, grid, tail = _fast_plan(s, job.geometry, True, device_id)
                shared = BoxesMap(cupy.asarray(np.broadcast_to(job.geometry.map_rows, (n, 3, 2))))  # the kernel's
                try:
                    _plans[(imgs.shape, imgs.dtype, size, pad, bgr_to_rgb, scale, mean, std, dtype, layout, variant,
                            check)] = (fn, grid + (n,), tail, shape, s.dtype, device_id, shared)
                except TypeError:  # an unhashable argument (a list of means, say): no short cut
                    pass
    return out, BoxesMap(boxes_map)


def unletterbox_boxes(boxes, boxes_map, *, clip: bool = True):
    """Boxes (x1, y1, x2, y2) in letterboxed pixels -> the original images' pixels: (v - offset) / scale per axis,
    clipped into [0, w] x [0, h] unless clip=False. boxes: float32/float64 (N, ..., 4), image i's boxes at [i]; or a
    list of N arrays (..., 4), giving a list. boxes_map: what letterbox returned."""
    if not isinstance(boxes_map, BoxesMap):
        raise TypeError(f"cudakit.unletterbox_boxes: boxes_map must be the BoxesMap letterbox returned, got "
                        f"{type(boxes_map).__name__}")
    if (face := _args.dask_face(boxes, boxes_map.array)) is not None:
        return face.unletterbox_boxes(boxes, boxes_map, clip=clip)
    m = _args.device_array("unletterbox_boxes", "boxes_map.array", boxes_map.array, 3)
    n = m.shape[0]
    if m.shape[1:] != (3, 2):
        raise ValueError(f"cudakit.unletterbox_boxes: boxes_map.array must be (N, 3, 2), got {m.shape}")
    m = cupy.ascontiguousarray(m, np.float64)
    listed = isinstance(boxes, (list, tuple))
    if listed and len(boxes) != n:
        raise ValueError(f"cudakit.unletterbox_boxes: {len(boxes)} arrays of boxes for {n} images")
    results = []
    for i, b in enumerate(boxes if listed else [boxes]):
        name = f"boxes[{i}]" if listed else "boxes"
        b = _args.device_array("unletterbox_boxes", name, b, min_ndim=1 if listed else 2)
        if b.dtype not in _args.FLOATS:
            raise TypeError(f"cudakit.unletterbox_boxes: {name} must be float32 or float64, got {b.dtype}")
        if b.shape[-1] != 4 or (not listed and b.shape[0] != n):
            raise ValueError(f"cudakit.unletterbox_boxes: {name} must be {'(..., 4)' if listed else f'({n}, ..., 4)'}"
                             f" (x1, y1, x2, y2), got shape {b.shape}")
        if b.data.device_id != m.data.device_id:
            raise ValueError(f"cudakit.unletterbox_boxes: {name} is on device {b.data.device_id}, boxes_map on "
                             f"device {m.data.device_id}")
        with _args.on_device(b.data.device_id):
            b = cupy.ascontiguousarray(b)
            res = cupy.empty_like(b)
            if b.size:
                fn = kernel(FAMILY, instantiation("unletterbox_boxes", b.dtype), letterbox_group(np.float32))
                launch(fn, _grid_1d(b.size), (THREADS,), (res.data.ptr, b.data.ptr, m.data.ptr + 48 * i * listed,
                                                          b.size, max(1, b.size // 4 // (1 if listed else n)),
                                                          int(bool(clip))))
            results.append(res)
    return results if listed else results[0]
