"""The Dask face of cudakit's ops: `dask.array` arrays of CuPy chunks in, `dask.array` arrays of CuPy chunks out,
lazily. Dask is the engine (scheduler, transport, workers); cudakit only adds its kernel on every block.

The ops route here when an operand is a Dask array, so callers never import this module: `cudakit.matmul(A, B)`
with a Dask A builds a graph. Contractions are built as dask.array.matmul builds them: a blockwise product per
pair of blocks along the contracted axis, then a sum of the partial products that never concatenates them.
Every graph is made with an explicit meta (a CuPy array), so Dask never calls a kernel on dummy arrays; no device
id is fixed in the graph, and each worker compiles the kernels on its first block.

Mixed operands (one Dask, one CuPy) follow dask.array's rule: the CuPy array becomes a one-chunk Dask array.
Contracted axes chunked differently are rechunked to common chunks, as dask.array's blockwise does; axes that a
kernel needs whole (the image axes of resize and letterbox) and unknown chunk sizes are refused with an error that
names the chunks.
"""
from __future__ import annotations

import functools
import importlib
import math
import operator
import sys

import cupy
import dask.array as da
import numpy as np

import cudakit

from . import _args, _check, _nd
from ._variants import lookup

# the modules (cudakit.matmul, cudakit.resize and cudakit.transpose are the functions)
_matmul = importlib.import_module(__package__ + ".matmul")
_resize = importlib.import_module(__package__ + ".resize")
_transpose = importlib.import_module(__package__ + ".transpose")


# The chunks' array module. Only the GPU-less tests of the graphs change it (to NumPy, with NumPy stand-ins for
# the ops), so that CI checks how the graphs cut, pair and sum blocks without a GPU.
xp = cupy


# ---------------------------------------------------------------------------------------------------- operands
def operand(op: str, name: str, x, ndims=None, whole_axes=(), whole="images") -> da.Array:
    """x as a Dask array of CuPy chunks (a CuPy array becomes one chunk, as dask.array.asarray makes it): of one of
    the `ndims` (None: any), its chunks known, the axes in `whole_axes` one chunk each (each block whole `whole`)."""
    if isinstance(x, xp.ndarray):
        x = da.from_array(x, chunks=x.shape, asarray=False, name=False)  # (name=False: not hashed through the host)
    elif not isinstance(x, da.Array):
        raise TypeError(f"cudakit.{op}: {name} must be a cupy.ndarray or a dask.array.Array of CuPy chunks, got "
                        f"{type(x).__module__}.{type(x).__name__}")
    if ndims is not None and x.ndim not in ndims:
        want = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"cudakit.{op}: {name} must be {want}, got {x.ndim}-D with shape {x.shape}")
    if any(math.isnan(c) for chunks in x.chunks for c in chunks):
        raise ValueError(f"cudakit.{op}: {name} has unknown chunk sizes {x.chunks}; call "
                         f"{name}.compute_chunk_sizes() first")
    split = sorted(axis % x.ndim for axis in whole_axes if len(x.chunks[axis]) > 1)
    if split:
        spec = ", ".join(f"{axis}: -1" for axis in split)
        raise ValueError(f"cudakit.{op}: {name} is chunked along axes {split} (chunks {x.chunks}); each block must "
                         f"hold whole {whole}: rechunk with {name}.rechunk({{{spec}}})")
    if not isinstance(x._meta, xp.ndarray):
        meta = type(x._meta)
        raise TypeError(f"cudakit.{op}: {name} is a Dask array of {meta.__module__}.{meta.__name__} chunks; cudakit "
                        f"runs on CuPy chunks: {name}.map_blocks(cupy.asarray)")
    return x


def no_out(op: str, out) -> None:
    if out is not None:
        raise TypeError(f"cudakit.{op}: out= is not supported with Dask arrays (they are immutable; the result is a "
                        "new Dask array)")


def meta(ndim: int, dtype):
    """An empty CuPy array that tells Dask the chunks' type, so it calls no function to find out."""
    return xp.empty((0,) * ndim, dtype)


# ---------------------------------------------------------------------------------------------------- 16-bit blocks
def _widened(x, dtype):
    """A 16-bit block of `dtype` in float32; a block an earlier step of the sum has widened, as it is."""
    return _check.widened(x) if x.dtype == dtype else x


def _narrowed(x, dtype):
    """float32 back to a 16-bit `dtype`, rounded once; other dtypes as they are."""
    return _check.narrowed(x, dtype) if dtype.name in _args.HALVES else x


# ---------------------------------------------------------------------------------------------------- sums
def _keep(block, axis=None, keepdims=False):
    return block


def _add_blocks(blocks, dtype_, last, axis=None, keepdims=False):
    """The sum of equally shaped partial results (each of length 1 along `axis`), in list order; 16-bit partials
    summed in float32 and rounded once, by the last step."""
    blocks = blocks if isinstance(blocks, list) else [blocks]
    total = functools.reduce(operator.add, [_widened(b, dtype_) for b in blocks])
    total = _narrowed(total, dtype_) if last else total
    return total if keepdims else total.squeeze(axis)


def sum_partials(partials: da.Array, axis: int) -> da.Array:
    """Sum `partials` along `axis`, where every block is one partial result of length 1: a tree of elementwise
    sums over whole blocks (no concatenation), as dask.array.matmul's reduction."""
    if partials.numblocks[axis] == 1:
        return partials.squeeze(axis)
    dtype = partials.dtype
    return da.reduction(partials, _keep, functools.partial(_add_blocks, dtype_=dtype, last=True),
                        combine=functools.partial(_add_blocks, dtype_=dtype, last=False), axis=axis,
                        concatenate=False, dtype=dtype, meta=meta(partials.ndim - 1, dtype))


# ---------------------------------------------------------------------------------------------------- the ops
# Each block function calls the public op, in the worker, on the worker's current device.
def _matmul_block(a, b, **kwargs):
    return cudakit.matmul(a, b, **kwargs)[..., None, :]


def _matmul_whole_k(a, b, **kwargs):  # (the one block of each along k, in a list)
    return cudakit.matmul(a[0], b[0], **kwargs)


def matmul(A, B, *, out=None, variant="fast", check=None, tf32=None):
    """cudakit.matmul over Dask arrays: (..., m, k) @ (..., k, n) with cupy.matmul's shapes (1-D promoted, batch
    axes broadcast). A block product per pair of blocks along k, summed without concatenation."""
    no_out("matmul", out)
    A, B = operand("matmul", "A", A), operand("matmul", "B", B)
    _nd.matmul_shapes("matmul", A.shape, B.shape)
    dtype = common_dtype("matmul", {"A": A, "B": B})
    tf32 = _matmul.tf32_in_effect(tf32, dtype)  # (resolved here: every block follows the caller's setting)
    _matmul.check_takes(lookup("matmul", variant), dtype, tf32)
    a = A[None, :] if A.ndim == 1 else A
    b = B[:, None] if B.ndim == 1 else B
    ndim = max(a.ndim, b.ndim)
    a, b = a[(None,) * (ndim - a.ndim)], b[(None,) * (ndim - b.ndim)]
    batch = tuple(range(ndim - 2))
    m, k, n = ndim - 2, ndim - 1, ndim
    if a.numblocks[-1] == 1 and b.numblocks[-2] == 1:  # k whole in every block: one product per C block
        C = da.blockwise(_matmul_whole_k, batch + (m, n), a, batch + (m, k), b, batch + (k, n), concatenate=False,
                         dtype=dtype, meta=meta(ndim, dtype), variant=variant, check=check, tf32=tf32)
    else:
        partials = da.blockwise(_matmul_block, batch + (m, k, n), a, batch + (m, k), b, batch + (k, n),
                                adjust_chunks={k: 1}, concatenate=False, dtype=dtype, meta=meta(ndim + 1, dtype),
                                variant=variant, check=check, tf32=tf32)
        C = sum_partials(partials, axis=-2)
    return C[(Ellipsis,) + ((0,) if A.ndim == 1 else (slice(None),)) + ((0,) if B.ndim == 1 else (slice(None),))]


def _matvec_block(a, x, **kwargs):
    return cudakit.matvec(a, x, **kwargs)[..., None]


def _matvec_whole_n(a, x, **kwargs):  # (the one block of each along n, in a list)
    return cudakit.matvec(a[0], x[0], **kwargs)


def matvec(A, x, *, out=None, variant="fast", check=None):
    """cudakit.matvec over Dask arrays: A (..., m, n) and x (..., n), batch axes broadcast, giving (..., m). A
    product per pair of blocks along n, summed without concatenation."""
    no_out("matvec", out)
    A, x = operand("matvec", "A", A), operand("matvec", "x", x)
    if A.ndim < 2 or x.ndim < 1:
        raise ValueError(f"cudakit.matvec: A must be at least 2-D and x at least 1-D, got {A.shape} and {x.shape}")
    _nd.matmul_shapes("matvec", A.shape, x.shape + (1,))
    dtype = common_dtype("matvec", {"A": A, "x": x})
    row = lookup("matvec", variant)
    if dtype not in _args.FLOATS:
        _args.check_variant("matvec", row, dtype)
    nb = max(A.ndim - 2, x.ndim - 1)
    A, x = A[(None,) * (nb + 2 - A.ndim)], x[(None,) * (nb + 1 - x.ndim)]
    batch = tuple(range(nb))
    m, n = nb, nb + 1
    if A.numblocks[-1] == 1 and x.numblocks[-1] == 1:  # n whole in every block: one product per y block
        return da.blockwise(_matvec_whole_n, batch + (m,), A, batch + (m, n), x, batch + (n,), concatenate=False,
                            dtype=dtype, meta=meta(nb + 1, dtype), variant=variant, check=check)
    partials = da.blockwise(_matvec_block, batch + (m, n), A, batch + (m, n), x, batch + (n,),
                            adjust_chunks={n: 1}, concatenate=False, dtype=dtype, meta=meta(nb + 2, dtype),
                            variant=variant, check=check)
    return sum_partials(partials, axis=-1)


def _dot_block(a, b, **kwargs):
    return cudakit.dot(a, b, **kwargs)[None]


def dot(a, b, *, out=None, variant="fast", check=None):
    """cudakit.dot over 1-D Dask arrays: a dot per pair of blocks, the partial dots summed; a 0-d Dask array."""
    no_out("dot", out)
    a, b = operand("dot", "a", a), operand("dot", "b", b)
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"cudakit.dot: a and b must be 1-D of one length, got shapes {a.shape} and {b.shape}")
    dtype = common_dtype("dot", {"a": a, "b": b})
    _args.check_variant("dot", lookup("dot", variant), dtype)
    partials = da.blockwise(_dot_block, (0,), a, (0,), b, (0,), adjust_chunks={0: 1}, dtype=dtype,
                            meta=meta(1, dtype), variant=variant, check=check)
    return sum_partials(partials, axis=0)


def _transpose_block(a, **kwargs):
    return cudakit.transpose(a, **kwargs)


def transpose(a, axes=None, *, out=None, variant="fast", check=None):
    """cudakit.transpose over a Dask array: each block transposed (C-contiguous), the chunks permuted with it."""
    no_out("transpose", out)
    a = operand("transpose", "a", a)
    lookup("transpose", variant)
    _transpose.check_array(a)
    axes = _nd.normalize_axes("transpose", a.ndim, axes)
    index = tuple(range(a.ndim))
    return da.blockwise(_transpose_block, tuple(index[i] for i in axes), a, index, dtype=a.dtype,
                        meta=meta(a.ndim, a.dtype), axes=axes, variant=variant, check=check)


def _resize_block(img, size, **kwargs):
    return cudakit.resize(img, size, **kwargs)


def resize(img, size, *, out=None, variant="fast", check=None):
    """cudakit.resize over a Dask array of images (H, W), (H, W, C) or (N, H, W, C): each block of whole images
    resized, so only N may be chunked."""
    no_out("resize", out)
    lookup(_resize.FAMILY, variant)
    ndim = getattr(img, "ndim", 0)
    lead = 1 if ndim == 4 else 0
    img = operand("resize", "img", img, ndims=(2, 3, 4), whole_axes=range(lead, ndim))
    if img.dtype not in _resize.IMAGE_DTYPES:
        raise TypeError(f"cudakit.resize: unsupported dtype {img.dtype}; supported: uint8, float16, float32")
    oh, ow = _resize.output_size("resize", size)
    chunks = img.chunks[:lead] + ((oh,), (ow,)) + img.chunks[lead + 2:]
    return da.map_blocks(_resize_block, img, chunks=chunks, dtype=img.dtype, meta=meta(img.ndim, img.dtype),
                         size=(oh, ow), variant=variant, check=check)


def _letterbox_block(imgs, size, dtype_, **kwargs):  # (map_blocks takes dtype= for itself)
    return cudakit.letterbox(imgs, size, dtype=dtype_, **kwargs)[0]


def _boxes_map_block(imgs, size):
    row = _resize.geometry(*imgs.shape[1:3], *size).map_rows
    return xp.asarray(np.broadcast_to(row, (imgs.shape[0], 3, 2)))


def letterbox(imgs, size=(640, 640), *, pad=114, bgr_to_rgb=True, scale=1 / 255, mean=None, std=None,
              dtype=cupy.float32, layout="NCHW", out=None, variant="fast", check=None):
    """cudakit.letterbox over a Dask array (N, H, W, 3) of uint8 frames chunked along N: (batch, boxes_map), both
    lazy. The boxes map follows from the frames' shape alone, so its blocks are made without the kernel."""
    no_out("letterbox", out)
    lookup(_resize.FAMILY, variant)
    imgs = operand("letterbox", "imgs", imgs, ndims=(4,), whole_axes=(1, 2, 3))
    if imgs.ndim != 4 or imgs.shape[-1] != 3 or imgs.dtype != np.uint8:
        raise ValueError(f"cudakit.letterbox: imgs must be (N, H, W, 3) uint8, got shape {imgs.shape} and dtype "
                         f"{imgs.dtype}")
    hashable = _resize.hashable
    s = _resize.settings(hashable(size), hashable(pad), bgr_to_rgb, scale, hashable(mean), hashable(std), dtype,
                         layout)
    (oh, ow), n = s.size, imgs.chunks[0]
    chunks = (n, (3,), (oh,), (ow,)) if s.nchw else (n, (oh,), (ow,), (3,))
    batch = da.map_blocks(_letterbox_block, imgs, chunks=chunks, dtype=s.dtype, meta=meta(4, s.dtype), size=(oh, ow),
                          pad=pad, bgr_to_rgb=bgr_to_rgb, scale=scale, mean=mean, std=std, dtype_=s.dtype,
                          layout=layout, variant=variant, check=check)
    boxes = da.map_blocks(_boxes_map_block, imgs, chunks=(n, (3,), (2,)), drop_axis=3, dtype=np.float64,
                          meta=meta(3, np.float64), size=(oh, ow))
    return batch, _resize.BoxesMap(boxes)


def _unletterbox_block(boxes, array, clip):
    return cudakit.unletterbox_boxes(boxes, _resize.BoxesMap(array), clip=clip)


def unletterbox_boxes(boxes, boxes_map, *, clip=True):
    """cudakit.unletterbox_boxes over a Dask array (N, ..., 4) of boxes and a Dask BoxesMap, aligned along N."""
    if not isinstance(boxes_map, _resize.BoxesMap):
        raise TypeError(f"cudakit.unletterbox_boxes: boxes_map must be the BoxesMap letterbox returned, got "
                        f"{type(boxes_map).__name__}")
    boxes = operand("unletterbox_boxes", "boxes", boxes, whole_axes=(-1,), whole="boxes (x1, y1, x2, y2)")
    if boxes.dtype not in _args.FLOATS:
        raise TypeError(f"cudakit.unletterbox_boxes: boxes must be float32 or float64, got {boxes.dtype}")
    array = operand("unletterbox_boxes", "boxes_map.array", boxes_map.array, ndims=(3,))
    if array.shape[1:] != (3, 2):
        raise ValueError(f"cudakit.unletterbox_boxes: boxes_map.array must be (N, 3, 2), got {array.shape}")
    if boxes.ndim < 2 or boxes.shape[-1] != 4 or boxes.shape[0] != array.shape[0]:
        raise ValueError(f"cudakit.unletterbox_boxes: boxes must be ({array.shape[0]}, ..., 4), got {boxes.shape}")
    index = "abcdefgh"[:boxes.ndim]
    return da.blockwise(_unletterbox_block, index, boxes, index, array.rechunk({1: -1, 2: -1}), "a" + "yz",
                        dtype=boxes.dtype, meta=meta(boxes.ndim, boxes.dtype), concatenate=True, clip=clip)


def common_dtype(op: str, arrays: dict) -> np.dtype:
    """The one dtype the operands share, float32/float64/float16/bfloat16, as the ops require."""
    dtypes = {x.dtype for x in arrays.values()}
    if len(dtypes) > 1:
        listed = ", ".join(f"{name}: {x.dtype}" for name, x in arrays.items())
        raise TypeError(f"cudakit.{op}: operands must share one dtype, got {listed} (cast explicitly with .astype())")
    dtype = dtypes.pop()
    if dtype not in _args.FLOATS and dtype.name not in _args.HALVES:
        raise TypeError(f"cudakit.{op}: unsupported dtype {dtype}; supported: "
                        f"{_args.supported_names(_args.FLOATS_AND_HALVES)}")
    if dtype.name == "bfloat16" and _distributed_client() is not None:
        raise TypeError(f"cudakit.{op}: bfloat16 Dask arrays cannot run on a distributed cluster: distributed sends "
                        "a CuPy block with its dtype.str, which for ml_dtypes' bfloat16 is a 2-byte void, so a block "
                        "that moves between processes loses its dtype. Use float16, or Dask's local threads")
    return dtype


def _distributed_client():
    """The distributed Client that Dask computes on by default, if there is one (without importing distributed)."""
    module = sys.modules.get("distributed")
    if module is None:
        return None
    try:
        return module.default_client()
    except ValueError:
        return None
