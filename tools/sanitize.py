"""Every variant of every op once on odd shapes, for compute-sanitizer (memcheck, racecheck, synccheck).

CuPy's memory pool is switched off so each array is its own cudaMalloc and memcheck sees an access one element
past any array. Usage: compute-sanitizer --tool memcheck python3 tools/sanitize.py [--small] [--part=NAME ...]
The set is in PARTS (every part by default); tools/gpu_check.sh runs each part in a process of its own, side by side.
"""
import importlib
import sys

import cupy
import numpy as np

import cudakit
import cudakit.testing
from cudakit import _check, _matmul_batch, _matmul_routes, _matvec_plan, _tune
from cudakit._compile import launch

matmul = importlib.import_module("cudakit.matmul")  # the module (cudakit.matmul is the function)
matvec = importlib.import_module("cudakit.matvec")

cupy.cuda.set_allocator(None)
rng = np.random.default_rng()


def rand(shape, dtype, order="C"):
    return cupy.asarray(rng.uniform(0.5, 1.5, size=shape).astype(dtype), order=order)


def matmul_variants(small: bool) -> int:
    """Every matmul variant but the tensor-core ones (the seeds and steps included) on odd shapes; the fast variant's
    padded copies and stream-K tail."""
    # (m, k, n); k = 64 and 256 give the 128 x 128 tiles that lie inside C whole slices (the unchecked k loop)
    mm = [(1, 1, 1), (7, 13, 5), (33, 31, 35), (129, 67, 131), (129, 64, 131)] if small else \
        [(257, 129, 65), (131, 517, 263), (257, 256, 263)]
    runs = 0
    for dtype in (np.float32, np.float64):
        for v in cudakit.variants("matmul"):
            if v.tensor_core:  # (the tensor-cores part)
                continue
            for m, k, n in mm:
                for order in ("C", "F"):
                    cudakit.matmul(rand((m, k), dtype, order), rand((k, n), dtype, order), variant=v.name, check=True)
                    runs += 1
        if not small:  # m, n >= matmul.PAD_MIN_DIM with odd leading dimensions: the fast variant's padded copies
            for oa, ob in (("C", "C"), ("F", "F")):
                cudakit.matmul(rand((1025, 19), dtype, oa), rand((19, 1027), dtype, ob), check=True)
                runs += 1
            large, _ = _tune.tiles(0, np.dtype(dtype))
            if large.kind == "simt" and large.ksplit == 1 and large.stages == 2:  # a grid a few tiles past whole waves: the stream-K tail
                rows = matmul.resident_tiles(large, np.dtype(dtype), 0) // 8 + 1
                m, n = rows * large.bm - 3, 8 * large.bn - 5
                for k in (37 * large.bk + 5, 40 * large.bk):  # the second: whole slices (the unchecked k loop)
                    for oa, ob in (("C", "C"), ("F", "F")):
                        cudakit.matmul(rand((m, k), dtype, oa), rand((k, n), dtype, ob), check=True)
                        runs += 1
    return runs


def vector_variants(small: bool) -> int:
    """Every matvec and dot variant on odd shapes, matvec's rows a block each, dot on a misaligned vector."""
    runs = 0
    for dtype in (np.float32, np.float64):
        for v in cudakit.variants("matvec"):
            for m, n in [(1, 1), (7, 13), (33, 4097), (4097, 33), (3, 100003)]:
                for order in ("C", "F"):
                    cudakit.matvec(rand((m, n), dtype, order), rand(n, dtype), variant=v.name, check=True)
                    runs += 1
        n = _matvec_plan.BLOCK_ROW_BYTES // np.dtype(dtype).itemsize  # a block per row, striding past the blocks
        for m, cols in ((1200, n), (1201, n + 1), (2, 8 * n + 3), (23, 4 * n + 5)):
            cudakit.matvec(rand((m, cols), dtype), rand(cols, dtype), check=True)
            runs += 1
        for v in cudakit.variants("dot"):
            for n in [1, 31, 513, 100003]:
                cudakit.dot(rand(n, dtype), rand(n, dtype), variant=v.name, check=True)
                cudakit.dot(rand(n + 1, dtype)[1:], rand(n, dtype), variant=v.name, check=True)  # misaligned
                runs += 2
    return runs


def transpose_variants(small: bool) -> int:
    """Every transpose variant (the diagnostic steps included) in 1-, 2-, 4- and 8-byte elements on odd shapes."""
    runs = 0
    for dtype in (np.int8, np.float16, np.float32, np.float64):
        for v in cudakit.variants("transpose", diagnostics=True):
            # the last: wide, 8 tile rows, blocks going down 32
            for m, n in [(1, 1), (7, 13), (33, 31), (97, 1013), (512, 20000)]:
                a = rand((m, n), dtype)
                out = cupy.empty((n, m), dtype)
                if v.diagnostic:
                    v.run(a, out.reshape(m, n))
                else:
                    cudakit.transpose(a, out=out, variant=v.name, check=True)
                runs += 1
    return runs


def drop_in_shapes(small: bool) -> int:
    """The paths the fast planners pick for thin, batched, N-D, one-row, long-k, skinny and tiny-C problems."""
    runs = 0
    for dtype in (np.int8, np.float16, np.float32, np.float64):
        for shape in ((3, 1001), (1001, 3), (31, 4099), (4099, 31), (2, 33), (1, 77), (15, 5939), (27725, 23),
                      (3, 1004), (1004, 3), (5, 4100), (4100, 8), (8, 4100),  # words: the packed tile, columns
                      (65, 4099)):  # misaligned vec16 tiles of one tile row
            cudakit.transpose(rand(shape, dtype), check=True)
            runs += 1
        for shape, axes in (((3, 37, 41, 3), (0, 3, 1, 2)), ((3, 3, 37, 41), (0, 2, 3, 1)),
                            ((2, 33, 35, 40), (0, 3, 1, 2)), ((3, 3, 36, 40), (0, 2, 3, 1)),
                            ((2, 3, 5, 7), (3, 1, 0, 2)), ((3, 5, 7, 160), (0, 2, 1, 3)), ((5, 2, 3, 4, 333), (2, 0, 3, 1, 4)),
                            ((7, 5, 3), (1, 0, 2)), ((3, 11, 5, 9), (0, 2, 1, 3)), ((13, 41, 2), (1, 0, 2)),
                            ((2, 70, 33, 5), (0, 2, 1, 3)), ((3, 4, 5, 3), (2, 1, 0, 3)),
                            ((2, 300, 3, 64), (0, 2, 1, 3)), ((4, 5, 6, 16), (2, 1, 0, 3)),
                            ((40, 3, 37, 20), (2, 1, 0, 3)), ((3, 4, 512), (1, 0, 2))):  # lines, tiles, pieces
            cudakit.transpose(rand(shape, dtype), axes, check=True)
            runs += 1
    for dtype in (np.float32, np.float64):
        for sa, sb in (((5, 33, 17), (5, 17, 9)), ((17,), (3, 17, 9)), ((2, 1, 33, 17), (1, 3, 17, 9)),
                       ((1, 300), (300, 65)), ((65, 300), (300, 1)), ((33, 70001), (70001, 35))):
            cudakit.matmul(rand(sa, dtype), rand(sb, dtype), check=True)
            runs += 1
        for order in ("C", "F"):
            cudakit.matmul(rand((129, 20001), dtype, order), rand((20001, 127), dtype, order), check=True)
            runs += 1
        for m, k, n in ((4099, 3, 7), (4097, 14, 32), (9, 5, 4100), (31, 12, 4101),  # the skinny kernel, both ways
                        (8, 5000, 13), (3, 9001, 16),  # the dots kernel
                        (131, 2049, 9), (9, 2049, 131), (67, 3001, 29), (29, 3001, 67),  # narrow tiles, split k
                        (300, 7, 301), (1, 9001, 9), (13, 9001, 1),  # short k (FP64); the thin matvec kernel
                        (1, 9001, 8), (37, 9001, 1)):  # ... on columns of whole vectors, and past 32 rows
            for order in ("C", "F"):
                cudakit.matmul(rand((m, k), dtype, order), rand((k, n), dtype, order), check=True)
                runs += 1
        for m, n in ((4099, 8), (4099, 28), (4097, 20), (4099, 5), (4099, 30), (5000, 13)):  # short rows (_short_rows)
            cudakit.matvec(rand((m, n), dtype), rand(n, dtype), check=True)
            runs += 1
        # rows staged in shared memory, one element off 16 bytes: odd and even lengths in each dtype, the longest
        # rows, and more tiles than resident blocks (each block's second tile after its first)
        for m, row_bytes in ((70001, 200), (1031, 140), (257, 248), (300001, 132), (5001, 56)):
            n = row_bytes // np.dtype(dtype).itemsize
            cudakit.matvec(rand((m * n + 1,), dtype)[1:].reshape(m, n), rand(n, dtype), check=True)
            runs += 1
        for m, n in ((70001, 191), (1031, 130), (301, 25)) if dtype == np.float32 else ():  # 16-bit rows staged
            cudakit.matvec(rand((m * n + 1,), np.float16)[1:].reshape(m, n), rand(n, np.float16), check=True)
            runs += 1
        for m, n in ((20001, 9), (1001, 1003), (25, 70001), (16, 70001), (39, 30001), (55, 30001), (24, 30001)):
            # column-major element loads; the thin kernel's grid (on rows that are not whole vectors, and whole ones)
            cudakit.matvec(rand((m, n), dtype, "F"), rand(n, dtype), check=True)
            runs += 1
        for m, n in ((20001, 3), (2049, 2), (2051, 7), (5, 3), (20001, 12), (1025, 9), (7, 11)):  # few element
            # columns, both steps (float64: up to 3, then 12)
            cudakit.matvec(rand((m, n), dtype, "F"), rand(n, dtype), check=True)
            runs += 1
        cudakit.matmul(rand((5, 1, 3), dtype), rand((5, 3, 30001), dtype), check=True)  # ... a batch on the grid's z
        cudakit.matmul(rand((5, 1, 11), dtype), rand((5, 11, 30001), dtype), check=True)
        runs += 1
        cudakit.matvec(rand((3, 40, 33), dtype), rand((3, 33), dtype), check=True)
        cudakit.matvec(rand((3, 40, 33), dtype), rand(33, dtype), check=True)
        cudakit.matvec(rand((3, 40, 4096), dtype), rand((3, 4096), dtype)[:, ::-1], check=True)  # split, strided x
        cudakit.matmul(rand((7, 1, 33), dtype), rand((7, 33, 70), dtype), check=True)  # one-row products: columns
        cudakit.matmul(rand((1, 40), dtype), rand((5, 40, 32), dtype), check=True)  # (16-byte loads, a broadcast a)
        runs += 6
        for tile in _matmul_batch.SMALL_TILES:  # every small-product tile, with partial tiles and a partial slice
            for oa, ob in (("C", "C"), ("F", "F")):
                a = rand((3, tile[0] + 3, 21), dtype) if oa == "C" else rand((3, 21, tile[0] + 3), dtype).transpose(0, 2, 1)
                b = rand((3, 21, tile[1] + 5), dtype) if ob == "C" else rand((3, tile[1] + 5, 21), dtype).transpose(0, 2, 1)
                out = cupy.full((3, a.shape[1], b.shape[2]), cupy.nan, dtype)
                steps = (a.strides[0] // a.itemsize, b.strides[0] // b.itemsize, out.strides[0] // out.itemsize)
                for args in _matmul_batch.small_launches(tile, a[0], b[0], out.data.ptr, 3, steps):
                    launch(*args)
                want = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
                assert _check.relative_error(out, want) <= _check.tolerance(np.dtype(dtype), 21), (tile, oa, ob)
                runs += 1
        for m, k, n in ((32, 32, 32), (17, 63, 5), (9, 1, 30)):  # the tiny kernel: 16-byte and element copies
            for a, b in ((rand((3, m, k), dtype), rand((3, k, n), dtype)),
                         (rand((3, m, k + 1), dtype)[:, :, 1:], rand((3, k, n + 2), dtype)[:, :, 1:-1])):
                cudakit.matmul(a, b, check=True)
                runs += 1
        for m, k, n in ((10, 150, 12), (32, 131, 17), (16, 132, 12), (17, 5, 30)):  # the tiny kernel over a long k:
            # chunks, the last partial, 16-byte copies in both dtypes; k shared among groups (a group without a chunk)
            for a, b in ((rand((3, m, k), dtype), rand((3, k, n), dtype)),
                         (rand((3, m, k + 1), dtype)[:, :, 1:], rand((3, k, n + 2), dtype)[:, :, 1:-1])):
                for groups in _matmul_batch.TINY_GROUPS:
                    out = cupy.full((3, m, n), cupy.nan, dtype)
                    steps = (a.strides[0] // a.itemsize, b.strides[0] // b.itemsize, m * n)
                    for args in _matmul_batch.tiny_launches(_matmul_batch.tiny_tile(m, n, 64), a[0], b[0],
                                                            out.data.ptr, 3, steps, groups):
                        launch(*args)
                    want = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
                    assert _check.relative_error(out, want) <= _check.tolerance(np.dtype(dtype), k), (m, k, n, groups)
                    runs += 1
        for m, k, n in ((6, 150, 4), (3, 300, 10)):  # batched dots: partial 8 x 8 parts, warps past a short k
            for oa, ob in (("C", "C"), ("F", "F")):
                a = rand((3, m, k), dtype) if oa == "C" else rand((3, k, m), dtype).transpose(0, 2, 1)
                b = rand((3, k, n), dtype) if ob == "C" else rand((3, n, k), dtype).transpose(0, 2, 1)
                out = cupy.full((3, m, n), cupy.nan, dtype)
                steps = (a.strides[0] // a.itemsize, b.strides[0] // b.itemsize, m * n)
                for args in _matmul_routes.dots_launches(a[0], b[0], out.data.ptr, 3, steps):
                    launch(*args)
                want = cupy.matmul(a.astype(cupy.float64), b.astype(cupy.float64))
                assert _check.relative_error(out, want) <= _check.tolerance(np.dtype(dtype), k), (m, k, n, oa, ob)
                runs += 1
    return runs


def simt_tiles() -> int:
    """Every SIMT tile the fast planner weighs (the tune space, the narrow and the split-only tiles), each over
    partial tiles and a partial slice, whole and with k split in 3 runs (the last one shorter), C- and F-order."""
    runs = 0
    for dtype in (np.float32, np.float64):
        dt = np.dtype(dtype)
        tiles = _tune.CANDIDATES[dt] + _tune.extra_tiles(dt)
        for tile in (t for t in tiles if t.kind == "simt"):
            m, k, n = tile.bm + 3, 7 * tile.bk + 5, tile.bn + 5
            depth = 3 * tile.bk
            for oa, ob in (("C", "C"), ("F", "F")):
                a, b = rand((m, k), dtype, oa), rand((k, n), dtype, ob)
                for splits in (1, 3):
                    out = cudakit.testing.poisoned((m, n), dtype)
                    if splits == 1:
                        matmul.run_tile(tile, a, b, out)
                    else:
                        _matmul_routes.run_split_k(tile, a, b, out, splits, depth)
                    _check.verify("matmul", f"{tile.name} split{splits}", out, a, b, dt, k)
                    runs += 1
    return runs


def preprocessing() -> int:
    """Every resize / letterbox variant on up- and downscales of odd sizes, batches and a list of images."""
    runs = 0
    for v in cudakit.variants("resize"):
        for dtype in (np.uint8, np.float16, np.float32):
            for shape, size in (((37, 53), (20, 71)), ((37, 53, 3), (75, 26)), ((2, 31, 45, 4), (16, 23)),
                                ((2, 30, 44, 1), (60, 88))):
                img = cupy.asarray(rng.integers(1, 255, shape)).astype(dtype)
                cudakit.resize(img, size, variant=v.name, check=True)
                runs += 1
        imgs = cupy.asarray(rng.integers(1, 255, (2, 37, 61, 3)), dtype=cupy.uint8)
        for layout, dtype in (("NCHW", cupy.float32), ("NHWC", cupy.float16)):
            cudakit.letterbox(imgs, (64, 48), layout=layout, dtype=dtype, variant=v.name, check=True)
            runs += 1
        sizes = ((37, 61), (50, 23), (9, 70))
        images = [cupy.asarray(rng.integers(1, 255, (h, w, 3)), dtype=cupy.uint8) for h, w in sizes]
        cudakit.letterbox(images, (41, 40), variant=v.name, check=True)
        runs += 1
    resize = importlib.import_module("cudakit.resize")
    for call in range(2):  # unchecked calls of one batch shape: the second takes the short cut (boxes map kept)
        imgs = cupy.asarray(rng.integers(1, 255, (2, 37, 64, 3)), dtype=cupy.uint8)
        out, boxes = cudakit.letterbox(imgs, (64, 48))
        ref, ref_map = resize.reference_letterbox(imgs, resize.settings((64, 48), 114, True, 1 / 255, None, None,
                                                                         np.dtype(np.float32), "NCHW"))
        assert _check.relative_error(out, ref) <= _check.tolerance(np.float32, 4), call
        assert bool(cupy.array_equal(boxes.array, ref_map)), call
        runs += 1
    return runs


def pipelined_fp64(small: bool) -> int:
    """Every tile of the pipelined FP64 tensor-core kernel in the four layouts (sm_80 and later): odd shapes (every
    other line of an odd leading dimension copied in 8-byte halves), even ones (16-byte chunks), and views 8 bytes
    past 16-byte alignment with an even leading dimension (every line in halves); split runs (odd lds too); a batch of
    odd steps."""
    from cudakit import _dmma

    if int(cupy.cuda.Device().compute_capability) < 80:
        return 0
    runs = 0
    for tile in _dmma.TILES:
        for m, k, n in ([(1, 1, 1), (129, 67, 131), (130, 66, 132)] if small else [(257, 517, 263), (258, 518, 264)]):
            for oa, ob in (("C", "C"), ("C", "F"), ("F", "C"), ("F", "F")):
                A, B = rand((m, k), np.float64, oa), rand((k, n), np.float64, ob)
                out = cupy.empty((m, n), np.float64)
                _dmma.run(A, B, out, tile)
                assert _check.product_error(out, A, B) <= _check.tolerance(np.float64, k), (tile, m, k, n, oa, ob)
                runs += 1
        m, k, n = (65, 37, 67) if small else (257, 517, 263)
        # offset views with an even ld, k contiguous, then m and n contiguous; then views that end where their
        # allocation does (sizes whole 512-byte units, the pool's), so that a copy past a line's end would show
        offset = lambda rows, cols: rand((rows, cols + 3), np.float64)[:, 1:cols + 1]
        ending = lambda rows, cols: rand((rows, cols + 1), np.float64)[:, 1:]
        views = ((offset(m, k), offset(n, k).T), (offset(k, m).T, offset(k, n)), (ending(64, 37), ending(96, 37).T))
        for A, B in views:
            out = cupy.empty((A.shape[0], B.shape[1]), np.float64)
            _dmma.run(A, B, out, tile)
            assert _check.product_error(out, A, B) <= _check.tolerance(np.float64, A.shape[1]), (tile, "offset views")
            runs += 1
    # k in runs, the last one shorter, off the slice
    for tile in dict.fromkeys(_dmma.PLANNED + _dmma.SPLIT_TILES + (_dmma.NARROW_SPLIT_TILE,)):
        for oa, ob in (("C", "C"), ("C", "F"), ("F", "C"), ("F", "F")):
            m, k, n = 70, 1030, 50
            A, B = rand((m, k), np.float64, oa), rand((k, n), np.float64, ob)
            out = cupy.empty((m, n), np.float64)
            _dmma.split_launcher(A, B, out, tile, 3, 352)(A, B, out)
            assert _check.product_error(out, A, B) <= _check.tolerance(np.float64, k), (tile, "split", oa, ob)
            A, B = rand((m + 1, k + 1), np.float64, oa)[:m, :k], rand((k + 1, n + 1), np.float64, ob)[:k, :n]
            _dmma.split_launcher(A, B, out, tile, 3, 352)(A, B, out)  # odd lds: lines in halves
            assert _check.product_error(out, A, B) <= _check.tolerance(np.float64, k), (tile, "halves", oa, ob)
            runs += 2
    for tile in dict.fromkeys(_dmma.PLANNED + _dmma.BATCH_TILES):  # a batch of odd steps and lds: every other
        # product starts off 16 bytes
        count, m, k, n = 3, 67, 37, 69
        A, B = rand((count, m, k), np.float64), rand((count, k, n), np.float64)
        out = cupy.empty((count, m, n), np.float64)
        for args in _dmma.launches(A[0], B[0], out[0], tile, batch=(count, m * k, k * n)):
            launch(*args)
        for i in range(count):
            assert _check.product_error(out[i], A[i], B[i]) <= _check.tolerance(np.float64, k), (tile, "batch", i)
        runs += 1
    return runs


def long_k_fp64(small: bool) -> int:
    """Every tile of the streaming FP64 kernel for a long k (sm_80 and later), both orientations, the four layouts,
    one run and several (the last one short, off the slice), and views that end where their allocation does."""
    from cudakit import _longk

    if int(cupy.cuda.Device().compute_capability) < 80:
        return 0
    runs = 0
    shapes = [(1, 1, 1), (17, 130, 9)] if small else [(37, 1000, 21), (70, 3001, 45)]
    ending = lambda rows, cols: rand((rows, cols + 1), np.float64)[:, 1:]
    for tile in _longk.TILES:
        for m, k, n in shapes:
            for oa, ob in (("C", "C"), ("C", "F"), ("F", "C"), ("F", "F")):
                A, B = rand((m, k), np.float64, oa), rand((k, n), np.float64, ob)
                for swap, count in ((False, 1), (False, 3), (True, 1), (True, 3)):
                    out = cupy.empty((m, n), np.float64)
                    _longk.launcher(A, B, out, _longk.plan(m, n, k, 0, tile, swap, count))(A, B, out)
                    assert _check.product_error(out, A, B) <= _check.tolerance(np.float64, k), (tile, m, k, n, oa, ob)
                    runs += 1
        # views that end where their allocation does: k contiguous, then m and n contiguous
        for A, B in ((ending(19, 517), ending(11, 517).T), (ending(517, 19).T, ending(517, 11))):
            for swap in (False, True):
                out = cupy.empty((19, 11), np.float64)
                _longk.launcher(A, B, out, _longk.plan(19, 11, 517, 0, tile, swap, 2))(A, B, out)
                assert _check.product_error(out, A, B) <= _check.tolerance(np.float64, 517), (tile, "views")
                runs += 1
    return runs


def short_k(small: bool) -> int:
    """Every layout and depth of the short-k writer, both dtypes, 2-D on the four layouts (edge rows and columns, warps
    abreast and deep), views that end where their allocation does, and a batch with B broadcast."""
    from cudakit import _shortk

    runs = 0
    shapes = [(1, 1, 1), (3, 5, 17)] if small else [(37, 16, 71), (300, 7, 133)]
    ending = lambda rows, cols, dtype: rand((rows, cols + 1), dtype)[:, 1:]
    for dtype in (np.float32, np.float64):
        item = np.dtype(dtype).itemsize
        for lanes, cols in _shortk.LAYOUTS[item]:
            for m, k, n in shapes:
                for oa, ob in (("C", "C"), ("C", "F"), ("F", "C"), ("F", "F")):
                    A, B = rand((m, k), dtype, oa), rand((k, n), dtype, ob)
                    for warps_n in (1, 8):
                        out = cupy.empty((m, n), dtype)
                        _shortk.run(A, B, out, _shortk.plan(m, n, k, item, (lanes, cols), None, warps_n))
                        assert _check.product_error(out, A, B) <= _check.tolerance(dtype, k), (lanes, cols, m, k, n)
                        runs += 1
            A, B = ending(45, 9, dtype), ending(9, 33, dtype)
            out = cupy.empty((45, 33), dtype)
            _shortk.launcher(A, B, out, _shortk.plan(45, 33, 9, item, (lanes, cols)))(A, B, out)
            assert _check.product_error(out, A, B) <= _check.tolerance(dtype, 9), (lanes, cols, "views")
            A, B = rand((3, 20, 5), dtype), rand((5, 40), dtype)
            out = cupy.empty((3, 20, 40), dtype)
            for args in _shortk.launches(_shortk.plan(20, 40, 5, item, (lanes, cols)), A[0], B, out.data.ptr, 3,
                                         (100, 0, 800)):
                launch(*args)
            for i in range(3):
                assert _check.product_error(out[i], A[i], B) <= _check.tolerance(dtype, 5), (lanes, cols, "batch", i)
            runs += 2
    return runs


def tensor_cores(small: bool) -> int:
    """Every tensor-core variant this GPU runs, float16, bfloat16 and TF32, on odd shapes in the four layouts,
    offset (misaligned) views and a batch with a broadcast operand."""
    import ml_dtypes

    cc = int(cupy.cuda.Device().compute_capability)
    shapes = [(1, 1, 1), (17, 33, 65), (70, 9, 131), (129, 200, 67)] if small else [(257, 263, 1031), (300, 64, 520)]
    runs = 0
    for v in cudakit.variants("matmul"):
        if "float16" not in v.dtypes or v.min_cc > cc:  # the tensor-core variants and fast
            continue
        for dtype, tf32 in ((np.float16, None), (ml_dtypes.bfloat16, None), (np.float32, True)):
            if (tf32 or dtype is ml_dtypes.bfloat16) and cc < 80:
                continue
            for m, k, n in shapes:
                for oa, ob in (("C", "C"), ("C", "F"), ("F", "C"), ("F", "F")):
                    a = cudakit.testing.random_array((m, k), dtype, oa)
                    b = cudakit.testing.random_array((k, n), dtype, ob)
                    cudakit.matmul(a, b, variant=v.name, tf32=tf32, check=True)
                    runs += 1
            a = cudakit.testing.random_array((3, 40, 77), dtype)[:, 1:, 1:]  # rows start off 16 bytes
            b = cudakit.testing.random_array((77, 45), dtype)[1:, :]  # one B for the whole batch
            cudakit.matmul(a, b, variant=v.name, tf32=tf32, check=True)
            runs += 1
    return runs


def x3_tiles(small: bool) -> int:
    """The X3 tiles (float32 as three TF32 products), whole and split, over partial tiles and slices: offset 0 reads
    every line on 16 bytes (the aligned build), offset 1 none (the misaligned build, in place), offset 2 an A two
    elements off and a B of every other column (C order: copied; F order: read in place, lines twice as far apart);
    then a batch of 3 (x3_batch_launches), lines on 16 bytes and off them, one B for the whole batch."""
    if int(cupy.cuda.Device().compute_capability) < 80:
        return 0
    from cudakit import matmul_tc

    runs = 0
    for tile in matmul_tc.X3_TILES:
        for (m, k, n), wanted in [((tile.bm + 4, 3 * tile.bk + 4, tile.bn + 4), 1),
                                  ((tile.bm + 4, matmul_tc.X3_MIN_K, tile.bn + 4), 1),  # (the shortest k planned)
                                  ((tile.bm - 4, 304, tile.bn + 8), 3)]:
            splits, depth = _tune.split_depth(k, wanted, tile.bk)
            for oa, ob in (("C", "C"), ("F", "F"), ("C", "F")):
                for offset in (0, 1, 2):
                    a = rand((m + offset, k + offset), np.float32, oa)[offset:, offset:]
                    b = rand((k, n), np.float32, ob) if offset < 2 else rand((k, 2 * n), np.float32, ob)[:, ::2]
                    out = cupy.empty((m, n), np.float32)
                    matmul_tc.x3_launcher(a, b, out, tile, splits, depth)(a, b, out)
                    _check.verify("matmul", "x3", out, a, b, np.float32, k)
                    runs += 1
        for offset in (0, 1):  # a batch of 3, lines on 16 bytes and off them; one B for the whole batch
            m, k, n = tile.bm + 4, 3 * tile.bk + 4, tile.bn + 4
            a = rand((3, m, k + offset), np.float32, "C")[:, :, offset:]
            b = rand((k, n), np.float32, "C")
            out = cupy.empty((3, m, n), np.float32)
            for args in matmul_tc.x3_batch_launches(tile, a[0], b, out.data.ptr, 3, (a.strides[0] // 4, 0)):
                launch(*args)
            for i in range(3):
                _check.verify("matmul", "x3 batch", out[i], a[i], b, np.float32, k)
            runs += 1
    return runs


def few_rows(small: bool) -> int:
    """Every M and columns-a-lane width of the few-rows kernel, both dtypes: several units a block, chunks of a wide C
    ending at the allocation's end, narrow units over a long k, an F-order A and a broadcast B."""
    from cudakit import _fewrows

    runs = 0
    shapes = [(3, 1, 5), (7, 117, 33), (2000, 3, 5)]  # (count, k, n): one, two, four columns a lane; several units
    shapes += [] if small else [(40, 3, 70), (5, 300, 33), (2, 2000, 130)]  # a block; narrow units
    for dtype in (np.float32, np.float64):
        for m in range(2, _fewrows.TAKES_ROWS[np.dtype(dtype).itemsize] + 1):
            for count, k, n in shapes:
                A, B = rand((count, k, m), dtype).transpose(0, 2, 1), rand((count, k, n), dtype)
                out = cupy.empty((count, m, n), dtype)
                p = _fewrows.plan(m, n, k, count)
                for args in _fewrows.launches(p, A[0], B[0], out.data.ptr, count, (m * k, k * n, m * n)):
                    launch(*args)
                wide = lambda x: x.astype(np.float64)
                err = _check.relative_error(out, cupy.matmul(wide(A), wide(B)))
                assert err <= _check.tolerance(dtype, k), (m, k, n, p)
                for args in _fewrows.launches(p, A[0], B[0], out.data.ptr, count, (m * k, 0, m * n)):
                    launch(*args)
                err = _check.relative_error(out, cupy.matmul(wide(A), wide(B[0])))
                assert err <= _check.tolerance(dtype, k), (m, k, n, p, "B broadcast")
                runs += 2
    return runs


PARTS = {
    "matmul": matmul_variants,
    "vectors": vector_variants,
    "transpose": transpose_variants,
    "drop-in": drop_in_shapes,  # the fast planners' paths for thin, batched, N-D, long-k, skinny and tiny problems
    "preprocessing": lambda small: preprocessing(),
    "tensor-cores": tensor_cores,
    "dmma": pipelined_fp64,  # the pipelined FP64 kernel
    "longk": long_k_fp64,  # the streaming FP64 kernel for a long k
    "shortk": short_k,  # the short-k writer
    "fewrows": few_rows,  # batches of a C of few rows
    "tiles": lambda small: simt_tiles(),  # the fast matmul's SIMT tiles, whole and split
    "x3": x3_tiles,
}


def main(argv) -> int:
    strays = [a for a in argv if a != "--small" and not a.startswith("--part=")]
    if strays:
        sys.exit(f"sanitize: unknown arguments {strays}; usage: sanitize.py [--small] [--part=NAME ...]")
    parts = [a.split("=", 1)[1] for a in argv if a.startswith("--part=")] or list(PARTS)
    unknown = set(parts) - set(PARTS)
    if unknown:
        sys.exit(f"sanitize: no part {sorted(unknown)}; the parts: {', '.join(PARTS)}")
    runs = sum(PARTS[part]("--small" in argv) for part in parts)
    cupy.cuda.Device().synchronize()
    print(f"sanitize: {runs} launches checked ({', '.join(parts)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
