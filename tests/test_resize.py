"""cudakit.resize, letterbox and unletterbox_boxes: every variant against the float64 reference of the same formula,
uint8 against cv2.resize, letterbox against PyTorch (where installed), outputs poisoned first.

`python tests/test_resize.py` runs every kernel once on odd shapes with CuPy's memory pool off, for
compute-sanitizer: compute-sanitizer --tool memcheck python3 tests/test_resize.py
"""
import importlib
import re

import numpy as np
import pytest

import cudakit
from cudakit import _check, _compile
from conftest import on_a_side_stream, poisoned, random_array

resize_module = importlib.import_module("cudakit.resize")  # cudakit.resize is the function

VARIANTS = [v.name for v in cudakit.variants("resize")]
DTYPES = [np.uint8, np.float16, np.float32]
# (input shape, output size): down, up, mixed, identity, 1-pixel sides, odd sizes, tiles with partial runs and rows
SHAPES = [((37, 53), (18, 26)), ((20, 31, 1), (45, 64)), ((29, 40, 2), (29, 40)), ((33, 47, 3), (64, 15)),
          ((2, 61, 45, 3), (30, 131)), ((3, 17, 19, 4), (40, 9)), ((1, 1, 3), (5, 7)), ((50, 1), (1, 33))]


def assert_matches_reference(out, img, size, what):
    import cupy

    ref = resize_module.reference_resize(img, size)
    assert out.shape == ref.shape and out.dtype == img.dtype, what
    got = out.astype(np.float64)
    if img.dtype == np.uint8:  # rounded half up from float32: within half a level of the float64 value
        err = float(cupy.abs(got - ref).max())
        assert err <= 0.5 + 1e-3, f"{what}: {err} levels from the float64 reference"
    else:  # inputs in [0.5, 1.5): element-wise relative error, float16 rounded once
        err = float((cupy.abs(got - ref) / ref).max())
        tol = 16 * np.finfo(np.float32).eps if img.dtype == np.float32 else float(np.finfo(np.float16).eps)
        assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, size", SHAPES)
def test_resize_matches_the_float64_reference(variant, dtype, shape, size):
    img = random_array(shape, dtype)
    out_shape = size if len(shape) == 2 else size + shape[-1:] if len(shape) == 3 else shape[:1] + size + shape[-1:]
    out = poisoned(out_shape, dtype)
    res = cudakit.resize(img, size, out=out, variant=variant)
    assert res is out
    assert_matches_reference(res, img, size, f"{variant} {np.dtype(dtype)} {shape} -> {size}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_resize_uint8_within_one_level_of_cv2(variant):
    import cupy

    cv2 = pytest.importorskip("cv2")
    cases = [((720, 1280, 3), (360, 640)), ((1080, 1920, 3), (342, 608)), ((97, 131, 3), (256, 301)),
             ((480, 640), (123, 77)), ((64, 48, 4), (31, 100)), ((33, 35, 1), (66, 70))]
    for shape, (oh, ow) in cases:
        img = random_array(shape, np.uint8)
        res = cudakit.resize(img, (oh, ow), variant=variant)
        want = cv2.resize(cupy.asnumpy(img), (ow, oh), interpolation=cv2.INTER_LINEAR).reshape(res.shape)
        diff = np.abs(cupy.asnumpy(res).astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1, f"{variant} {shape} -> {(oh, ow)}: {diff.max()} levels from cv2 at " \
                                f"{np.unravel_index(diff.argmax(), diff.shape)}"


@pytest.mark.gpu
def test_resize_of_views_batches_and_allocated_outputs():
    base = random_array((3, 70, 90, 4), np.float32)
    for what, img in {"stepped": base[:, ::2, ::3, :3], "sliced": base[1, 5:60, 7:80], "channel": base[..., 1:2],
                      "offset batch": base[1:], "big batch": random_array((70, 9, 11, 2), np.float32)}.items():
        res = cudakit.resize(img, (21, 34))
        assert res.flags.c_contiguous
        assert_matches_reference(res, img, (21, 34), what)


@pytest.mark.gpu
def test_resize_on_a_non_default_stream():
    import cupy

    img = random_array((4, 123, 77, 3), np.uint8)
    res = on_a_side_stream(lambda out: cudakit.resize(img, (60, 200), out=out), cupy.empty((4, 60, 200, 3), np.uint8))
    assert_matches_reference(res, img, (60, 200), "side stream")


@pytest.mark.gpu
def test_resize_check_mode_catches_a_wrong_result(monkeypatch):
    from cudakit import _variants

    img = random_array((30, 40, 3), np.float32)
    cudakit.resize(img, (15, 20), check=True)
    fast = _variants.lookup("resize", "fast")
    broken = _variants.Variant("resize", "fast", fast.lesson, lambda job: job[1].fill(0))
    monkeypatch.setitem(_variants._TABLE["resize"], "fast", broken)
    with pytest.raises(_check.CheckError):
        cudakit.resize(img, (15, 20), check=True)


@pytest.mark.gpu
def test_resize_bad_inputs():
    import cupy

    img = random_array((8, 6, 3), np.uint8)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.resize(np.zeros((8, 6, 3), np.uint8), (4, 3))
    with pytest.raises(TypeError, match="unsupported dtype float64"):
        cudakit.resize(img.astype(np.float64), (4, 3))
    with pytest.raises(ValueError, match="C <= 4"):
        cudakit.resize(random_array((8, 6, 5), np.uint8), (4, 3))
    with pytest.raises(ValueError, match="1-D|2-D"):
        cudakit.resize(random_array((8,), np.uint8), (4, 3))
    for size in [(4,), (0, 3), (4, -1), "ab", (4.0, 3), None]:
        with pytest.raises(ValueError, match="size must be"):
            cudakit.resize(img, size)
    with pytest.raises(ValueError, match="no pixels"):
        cudakit.resize(cupy.empty((0, 6, 3), np.uint8), (4, 3))
    with pytest.raises(ValueError, match=r"\(3, 4, 3\)"):
        cudakit.resize(img, (4, 3), out=cupy.empty((3, 4, 3), np.uint8))
    with pytest.raises(TypeError, match="dtype"):
        cudakit.resize(img, (4, 3), out=cupy.empty((4, 3, 3), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        cudakit.resize(img, (4, 3), out=cupy.empty((3, 3, 4), np.uint8).transpose(2, 1, 0))
    with pytest.raises(ValueError, match="overlaps"):
        cudakit.resize(img, (8, 6), out=img)
    with pytest.raises(ValueError, match=f"valid variants: {re.escape(', '.join(VARIANTS))}$"):
        cudakit.resize(img, (4, 3), variant="nope")
    assert cudakit.resize(cupy.empty((0, 5, 6, 3), np.uint8), (4, 3)).shape == (0, 4, 3, 3)


# ---------------------------------------------------------------------------------------------------- letterbox
LETTERBOX_CASES = [  # (image shapes, or one batch shape; output size): odd paddings both ways, up and down
    ((2, 37, 61, 3), (64, 64)), ((1, 90, 40, 3), (33, 50)), ([(41, 29, 3), (17, 80, 3), (64, 64, 3)], (48, 40))]


def letterbox_inputs(shapes):
    return [random_array(s, np.uint8) for s in shapes] if isinstance(shapes, list) else random_array(shapes, np.uint8)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shapes, size", LETTERBOX_CASES)
def test_letterbox_matches_the_float64_reference(variant, dtype, layout, shapes, size):
    import cupy

    kw = dict(pad=(114, 0, 255), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)) if layout == "NHWC" else {}
    s = resize_module.settings(size, kw.get("pad", 114), True, 1 / 255, kw.get("mean"), kw.get("std"), dtype, layout)
    for call in range(2):  # a batch's second call takes the short cut of the usual call (its boxes map kept)
        imgs = letterbox_inputs(shapes)
        n = len(imgs)
        out = poisoned((n, 3) + size if layout == "NCHW" else (n,) + size + (3,), dtype)
        res, boxes_map = cudakit.letterbox(imgs, size, dtype=dtype, layout=layout, out=out, variant=variant, **kw)
        assert res is out
        ref, ref_map = resize_module.reference_letterbox(imgs, s)
        err, tol = _check.relative_error(res, ref), _check.tolerance(dtype, 4)
        assert err <= tol, f"{variant} {np.dtype(dtype)} {layout} call {call}: relative error {err:.2e} > {tol:.1e}"
        assert bool(cupy.array_equal(boxes_map.array, ref_map)), call


@pytest.mark.gpu
def test_letterbox_geometry_padding_and_channels():
    """A flat grey frame shows where the image lands: odd paddings put the extra pixel at the bottom or right."""
    import cupy

    frame = cupy.empty((1, 30, 100, 3), np.uint8)
    frame[...] = cupy.asarray([10, 20, 30], np.uint8)  # BGR
    for variant in VARIANTS:
        res, m = cudakit.letterbox(frame, (42, 51), pad=(1, 2, 3), scale=1.0, variant=variant)  # r = 0.51
        g = resize_module.geometry(30, 100, 42, 51)
        assert (g.nh, g.nw, g.top, g.left) == (15, 51, 13, 0)  # 42 - 15 = 27 rows of padding: 13 above, 14 below
        want = cupy.empty((3, 42, 51), np.float32)
        want[:] = cupy.asarray([1, 2, 3], np.float32)[:, None, None]
        want[:, 13:28, :] = cupy.asarray([30, 20, 10], np.float32)[:, None, None]  # RGB
        assert bool(cupy.array_equal(res[0], want)), variant
        assert m.scale.tolist() == [[15 / 30, 51 / 100]] and m.offset.tolist() == [[13, 0]]
        assert m.size.tolist() == [[30, 100]]
    g = resize_module.geometry(1, 2, 5, 4)  # r = 2: (2, 4), 3 rows of padding, the extra one below
    assert (g.nh, g.nw, g.top, g.left) == (2, 4, 1, 0)
    g = resize_module.geometry(10, 7, 6, 6)  # r = 0.6: 6 x round(4.2) = 4; 2 columns, one each side
    assert (g.nh, g.nw, g.top, g.left) == (6, 4, 0, 1)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, size", [((3, 720, 1280, 3), (640, 640)), ((2, 1080, 1920, 3), (608, 608))])
def test_letterbox_against_torch(shape, size):
    """PyTorch doing the same job from the same batch, as a user writes it."""
    import cupy

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    bench = importlib.import_module("cudakit.bench.resize")
    imgs = random_array(shape, np.uint8)
    for variant in VARIANTS:
        res, _ = cudakit.letterbox(imgs, size, variant=variant)
        want = bench.torch_letterbox(imgs, size)
        err = float(cupy.abs(res - want).max())
        assert err <= 1e-3, f"{variant}: {err} from torch"


@pytest.mark.gpu
def test_letterbox_of_a_list_is_one_launch_and_matches_each_image_alone(monkeypatch):
    import cupy

    imgs = [random_array(s, np.uint8) for s in [(480, 640, 3), (37, 1000, 3), (1000, 37, 3), (1, 1, 3)]]
    imgs.append(random_array((100, 120, 3), np.uint8)[::2, 1::3])  # a view, copied first
    launches = []
    real_launch = resize_module.launch
    monkeypatch.setattr(resize_module, "launch", lambda *a, **k: launches.append(a[0]) or real_launch(*a, **k))
    for variant in ("fused", "fast"):
        for call in range(2):  # the second batch call takes the short cut of the usual call
            launches.clear()
            cudakit.letterbox(imgs, (96, 128), variant=variant)
            cudakit.letterbox(imgs[0][None], (96, 128), variant=variant)
            assert len(launches) == 2, (variant, call, len(launches))
    monkeypatch.undo()
    batch, m = cudakit.letterbox(imgs, (96, 128), layout="NHWC", dtype=np.float16)
    for i, img in enumerate(imgs):
        one, m1 = cudakit.letterbox(img[None], (96, 128), layout="NHWC", dtype=np.float16)
        assert bool(cupy.array_equal(batch[i], one[0])), i
        assert bool(cupy.array_equal(m.offset[i], m1.offset[0])) and bool(cupy.array_equal(m.scale[i], m1.scale[0]))


@pytest.mark.gpu
def test_letterbox_on_a_non_default_stream_and_check_mode():
    import cupy

    imgs = random_array((2, 50, 70, 3), np.uint8)
    res = on_a_side_stream(lambda out: cudakit.letterbox(imgs, (32, 32), out=out),
                           cupy.empty((2, 3, 32, 32), np.float32))
    ref, _ = resize_module.reference_letterbox(imgs, resize_module.settings((32, 32), 114, True, 1 / 255, None, None,
                                                                             np.float32, "NCHW"))
    assert _check.relative_error(res, ref) <= _check.tolerance(np.float32, 4)
    cudakit.letterbox(imgs, (32, 32), check=True, mean=0.5, std=(0.2, 0.3, 0.4), bgr_to_rgb=False)


@pytest.mark.gpu
def test_unletterbox_boxes_round_trip():
    import cupy

    imgs = [random_array(s, np.uint8) for s in [(720, 1280, 3), (300, 200, 3)]]
    _, m = cudakit.letterbox(imgs, (640, 640))
    sizes = [(720, 1280), (300, 200)]
    boxes = cupy.stack([cupy.asarray([[0, 0, w, h], [w * 0.25, h * 0.5, w * 0.75, h]], np.float32) for h, w in sizes])
    sy, sx = m.scale[:, 0, None], m.scale[:, 1, None]
    top, left = m.offset[:, 0, None], m.offset[:, 1, None]
    forward64 = cupy.stack([boxes[..., 0] * sx + left, boxes[..., 1] * sy + top,
                            boxes[..., 2] * sx + left, boxes[..., 3] * sy + top], axis=-1)
    forward = forward64.astype(np.float32)
    back = cudakit.unletterbox_boxes(forward, m)
    assert back.dtype == np.float32 and back.shape == boxes.shape
    assert float(cupy.abs(back - boxes).max()) <= 1e-3
    listed = cudakit.unletterbox_boxes([forward64[0], forward[1, :1]], m)
    assert float(cupy.abs(listed[0] - boxes[0]).max()) <= 1e-9 and listed[1].shape == (1, 4)
    outside = cupy.asarray([[[-5, -5, 700, 700]], [[-5, -5, 700, 700]]], np.float32)
    clipped = cudakit.unletterbox_boxes(outside, m)
    assert clipped[0, 0].tolist() == [0, 0, 1280, 720] and clipped[1, 0].tolist() == [0, 0, 200, 300]
    assert float(cudakit.unletterbox_boxes(outside, m, clip=False)[0, 0, 0]) < 0


@pytest.mark.gpu
def test_letterbox_and_boxes_bad_inputs():
    import cupy

    imgs = random_array((2, 20, 30, 3), np.uint8)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        cudakit.letterbox(np.zeros((2, 20, 30, 3), np.uint8))
    with pytest.raises(TypeError, match="uint8"):
        cudakit.letterbox(imgs.astype(np.float32))
    with pytest.raises(ValueError, match="4-D"):
        cudakit.letterbox(imgs[0])
    with pytest.raises(ValueError, match=r"\(N, H, W, 3\)"):
        cudakit.letterbox(imgs[..., :2])
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        cudakit.letterbox([imgs[0], imgs[1, :0]])
    with pytest.raises(ValueError, match="empty list"):
        cudakit.letterbox([])
    with pytest.raises(TypeError, match="float32 or float16"):
        cudakit.letterbox(imgs, dtype=np.float64)
    with pytest.raises(ValueError, match="layout"):
        cudakit.letterbox(imgs, layout="CHW")
    with pytest.raises(ValueError, match="pad"):
        cudakit.letterbox(imgs, pad=300)
    with pytest.raises(ValueError, match="std"):
        cudakit.letterbox(imgs, std=(1, 0, 1))
    with pytest.raises(ValueError, match="3 numbers"):
        cudakit.letterbox(imgs, mean=(1, 2))
    with pytest.raises(ValueError, match="size must be"):
        cudakit.letterbox(imgs, size=(640,))
    with pytest.raises(ValueError, match=r"\(2, 3, 64, 64\)"):
        cudakit.letterbox(imgs, (64, 64), out=cupy.empty((2, 64, 64, 3), np.float32))
    with pytest.raises(ValueError, match="unknown variant"):
        cudakit.letterbox(imgs, variant="nope")
    _, m = cudakit.letterbox(imgs, (64, 64))
    with pytest.raises(ValueError, match=r"\(2, \.\.\., 4\)"):
        cudakit.unletterbox_boxes(cupy.zeros((3, 4), np.float32), m)
    with pytest.raises(TypeError, match="float32 or float64"):
        cudakit.unletterbox_boxes(cupy.zeros((2, 4), np.int32), m)
    with pytest.raises(TypeError, match="BoxesMap"):
        cudakit.unletterbox_boxes(cupy.zeros((2, 4), np.float32), m.scale)
    with pytest.raises(ValueError, match="2 images"):
        cudakit.unletterbox_boxes([cupy.zeros((1, 4), np.float32)], m)


# ---------------------------------------------------------------------------------------------------- GPU-less
def test_instantiation_groups_cover_every_kernel():
    kernels = set(re.findall(r"__global__ void(?: __launch_bounds__\([^)]*\))?\s+(\w+)\(", _compile.source("resize")))
    built = {re.match(r"\w+", e).group() for group in resize_module.instantiation_groups() for e in group}
    assert kernels == built and "letterbox_fast" in kernels
    for group in resize_module.instantiation_groups():
        assert len(set(group)) == len(group)


def test_the_host_and_the_kernels_agree_on_their_shared_constants():
    src = _compile.source("resize")
    for name in ("FAST_X", "FAST_Y", "RUN", "ROWS", "TABLE_COLS"):
        assert re.search(rf"\b{name} = {getattr(resize_module, name)}\b", src), name
    assert [resize_module.store_unit(b) for b in (48, 24, 12, 4, 6, 3)] == [16, 8, 4, 4, 2, 1]


def test_variant_table_shape():
    assert VARIANTS == ["naive", "fused", "fast"]
    assert [v.name for v in cudakit.variants("resize") if v.seed] == ["naive"]


def test_letterbox_geometry_without_a_gpu():
    g = resize_module.geometry(720, 1280, 640, 640)  # an exact halving: every source row read once
    assert g == (720, 1280, 360, 640, 140, 0)
    g = resize_module.geometry(1080, 1920, 608, 608)
    assert (g.nh, g.nw, g.top, g.left) == (342, 608, 133, 0)
    g = resize_module.geometry(3, 1000, 640, 640)  # a sliver keeps at least one row
    assert (g.nh, g.nw) == (2, 640)
    assert resize_module.geometry(1, 100000, 64, 64).nh == 1


def sanitize() -> int:
    """Every kernel once on odd shapes, each array its own allocation (for compute-sanitizer)."""
    import cupy

    cupy.cuda.set_allocator(None)
    runs = 0
    for variant in VARIANTS:
        for dtype in DTYPES:
            for shape, size in SHAPES:
                cudakit.resize(random_array(shape, dtype), size, variant=variant, check=True)
                runs += 1
        for dtype in (np.float32, np.float16):
            for layout in ("NCHW", "NHWC"):
                for shapes, size in LETTERBOX_CASES + [([(1, 1, 3), (7, 300, 3)], (17, 9))]:
                    cudakit.letterbox(letterbox_inputs(shapes), size, dtype=dtype, layout=layout, variant=variant,
                                      check=True)
                    runs += 1
    _, m = cudakit.letterbox(random_array((2, 9, 7, 3), np.uint8), (5, 5))
    cudakit.unletterbox_boxes(random_array((2, 3, 4), np.float32), m)
    cudakit.unletterbox_boxes([random_array((4,), np.float64), random_array((5, 4), np.float64)], m)
    cupy.cuda.Device().synchronize()
    return runs + 2


if __name__ == "__main__":
    print(f"sanitize: {sanitize()} calls checked")
