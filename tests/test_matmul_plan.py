"""The fast matmul's tile planner (cudakit/_matmul_plan.py) by its rules, on a GPU and on a modelled H100 (no GPU):
the wide, split-only and X3 tiles, stream-K's tail, a batch's small tile."""
import importlib
import os

import numpy as np
import pytest

from cudakit import _longk, _tune

mm = importlib.import_module("cudakit.matmul")  # the module (cudakit.matmul is the function)


@pytest.mark.gpu
def test_fast_plans_tiles_and_splits_by_shape():
    import cupy

    device = cupy.cuda.runtime.getDevice()
    f32 = np.dtype(np.float32)
    large, small = _tune.tiles(device, f32)
    assert mm.plan(device, f32, 8192, 8192, 8192) == (large, 1, 8192)  # a full grid: the large tile, k whole
    assert mm.plan(device, f32, 4096, 4096, 64)[0] == _tune.SMALL_K_TILE[f32]  # short k
    wide = _tune.WIDE_TILE[f32]  # short k read with 16-byte loads: the wide tile where its grid fills the SMs
    assert mm.plan(device, f32, 4096, 4096, 64, vectors=True)[0] == wide
    assert mm.plan(device, f32, 512, 512, 32, vectors=True)[0] == _tune.SMALL_K_TILE[f32]
    assert mm.plan(device, f32, 4096, 4096, 200, vectors=True)[0] != wide  # mid k, one product
    assert mm.plan(device, f32, 512, 512, 512, 64, vectors=True) == (wide, 1, 512)  # a batch: the wide tile
    assert mm.plan(device, f32, 512, 512, 512, 64)[0] != wide
    assert mm.plan(device, f32, 512, 512, 512, 2, vectors=True)[0] != wide  # a grid short of a round
    tile, splits, depth = mm.plan(device, f32, 128, 128, 65536)  # one tile's worth of C: k split
    assert splits >= _tune.MIN_SPLITS and (splits - 1) * depth < 65536 <= splits * depth
    narrow_rows, narrow_columns = _tune.NARROW_TILES[f32][:2]  # a side of C up to 16, a long k: a narrow tile, k split
    tile, splits, _ = mm.plan(device, f32, 327, 9, 486410)
    assert tile == narrow_rows and splits > 1, tile.name
    assert mm.plan(device, f32, 9, 327, 486410)[0] == narrow_columns
    # (FP64: the pipelined DMMA kernel's split weighs in beside them; the route gives such a C to _longk first)
    assert all(_longk.takes(m, n, 486410, device) for m, n in ((327, 9), (9, 327)))



def test_the_wide_tile_is_planned_by_its_rule(monkeypatch):
    """_tune.WIDE_TILE's rule on a modelled H100 (no GPU: 132 SMs, each tile's min_blocks resident an SM): float32
    read with 16-byte loads, one product with k of WIDE_MIN_K to WIDE_SHORT_MAX_K where the model prefers it, a
    batch with k up to WIDE_BATCH_MAX_K whose grid fills a round; never for element loads, mid or very short k, a
    small grid or a batch short of a round."""
    f32 = np.dtype(np.float32)
    config = _tune.default_config(f32, 90)
    pair = _tune._BY_NAME[config["large"]], _tune._BY_NAME[config["small"]]
    monkeypatch.setattr(_tune, "tiles", lambda device_id, dtype: pair)
    monkeypatch.setattr(mm, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(mm, "resident_tiles", lambda tile, dtype, device_id: 132 * tile.min_blocks)
    monkeypatch.setattr(mm, "_compute_capability", lambda device_id: 90)
    wide, short_k = _tune.WIDE_TILE[f32], _tune.SMALL_K_TILE[f32]
    mm._plan.cache_clear()
    try:
        assert mm.plan(0, f32, 4096, 4096, 64, vectors=True)[0] == wide
        assert mm.plan(0, f32, 2048, 2048, 32, vectors=True)[0] == wide
        assert mm.plan(0, f32, 4096, 4096, 64)[0] == short_k  # element loads
        assert mm.plan(0, f32, 4096, 4096, 16, vectors=True)[0] == short_k  # under WIDE_MIN_K
        assert mm.plan(0, f32, 512, 512, 32, vectors=True)[0] == short_k  # a grid of 16 wide tiles
        assert mm.plan(0, f32, 4096, 4096, 200, vectors=True)[0] != wide  # mid k, one product
        assert mm.plan(0, f32, 512, 512, 512, 64, vectors=True) == (wide, 1, 512)  # a batch
        assert mm.plan(0, f32, 17, 240, 212, 2281, vectors=True)[0] != wide  # a batch of a narrow C
        assert mm.plan(0, f32, 512, 512, 512, 64)[0] != wide
        assert mm.plan(0, f32, 512, 512, 512, 2, vectors=True)[0] != wide  # 32 tiles: short of a round
        assert mm.plan(0, f32, 512, 512, 2048, 64, vectors=True)[0] != wide  # past WIDE_BATCH_MAX_K
    finally:
        mm._plan.cache_clear()



def test_split_only_tiles_are_planned_with_k_split_alone(monkeypatch):
    """_tune.SPLIT_TILES on a modelled H100 (no GPU, as above): planned only for one product with k split in at
    least MIN_SPLITS runs, never whole, for a batch or a short k; taken where the session-34 A/B measured them
    faster (143 x 219950 x 106, 4457 x 4021 x 151) and left where they ran slower (2551 x 2053 x 653)."""
    f32 = np.dtype(np.float32)
    config = _tune.default_config(f32, 90)
    monkeypatch.setattr(_tune, "tiles", lambda device_id, dtype: (_tune._BY_NAME[config["large"]],
                                                                  _tune._BY_NAME[config["small"]]))
    monkeypatch.setattr(mm, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(mm, "resident_tiles", lambda tile, dtype, device_id: 132 * tile.min_blocks)
    monkeypatch.setattr(mm, "_compute_capability", lambda device_id: 90)
    split_only = _tune.SPLIT_TILES[f32]
    mm._plan.cache_clear()
    try:
        taken = 0
        for m in (64, 143, 500, 1009, 4457):
            for n in (36, 106, 151, 283, 2048):
                for k in (65, 300, 1213, 4021, 52000, 219950):
                    for count in (1, 8):
                        tile, splits, depth = mm.plan(0, f32, m, n, k, count, vectors=True)
                        if tile in split_only:
                            taken += 1
                            assert count == 1 and splits >= _tune.MIN_SPLITS and (splits - 1) * depth < k, \
                                (m, n, k, splits, depth)
        assert taken > 0
        assert mm.plan(0, f32, 143, 106, 219950, vectors=True)[0] in split_only
        assert mm.plan(0, f32, 4457, 151, 4021, vectors=True)[0] in split_only
        assert mm.plan(0, f32, 2551, 653, 2053, vectors=True)[0] not in split_only
    finally:
        mm._plan.cache_clear()



def test_cudakit_fp32_x3_0_keeps_float32_on_the_register_tiles():
    """CUDAKIT_FP32_X3=0, read at import, turns the X3 offer off (a fresh interpreter: the flag is read once)."""
    import subprocess
    import sys

    code = "from cudakit import _matmul_routes as r; print(r.X3)"
    for value, want in (("0", "False"), ("1", "True"), ("", "True")):
        env = dict(os.environ, CUDAKIT_FP32_X3=value)
        got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert got.stdout.strip() == want, (value, got.stdout, got.stderr)



def test_x3_tiles_are_planned_for_fp32_products_where_offered(monkeypatch):
    """matmul_tc.X3_TILES on a modelled H100 (no GPU, as above): weighed only where the route offers them (x3 not
    None) for FP32 products with k past SMALL_K or a short k (x3_short_k: X3 alone; a batch's k whole), their split
    runs at least X3_MIN_DEPTH deep;
    taken for the products the probes measured faster (4096^3 1.20x, 4787 x 911 x 2579 1.33x the register tiles),
    left for 512^3 (a split of 128-deep runs measured 0.59x), where their copies cost more than they gain, for FP64
    and on GPUs outside X3_ARCHS."""
    from cudakit import matmul_tc

    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    configs = {dt: _tune.default_config(dt, 90) for dt in (f32, f64)}
    monkeypatch.setattr(_tune, "tiles", lambda device_id, dtype: (_tune._BY_NAME[configs[dtype]["large"]],
                                                                  _tune._BY_NAME[configs[dtype]["small"]]))
    monkeypatch.setattr(mm, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(mm, "resident_tiles", lambda tile, dtype, device_id: 132 * tile.min_blocks)
    monkeypatch.setattr(mm, "_compute_capability", lambda device_id: 90)
    monkeypatch.setattr(matmul_tc, "resident", lambda tile, device_id: 132 * 2)
    mm._plan.cache_clear()
    try:
        taken = 0
        for m, n, k in [(4096, 4096, 4096), (4787, 2579, 911), (1009, 283, 1213), (143, 106, 219950), (512, 512, 512),
                        (2048, 2048, 65), (2048, 2048, 64), (512, 768, 1000), (768, 768, 700)]:
            for count in (1, 8):
                tile, splits, depth = mm.plan(0, f32, m, n, k, count, vectors=True, x3=(0.0, 0.0))
                if tile in matmul_tc.X3_TILES:
                    taken += 1
                    assert k > _tune.SMALL_K or matmul_tc.x3_short_k(m, n, k), (m, n, k)
                    assert count == 1 or splits == 1, (m, n, k, count, splits)
                    assert splits == 1 or depth >= matmul_tc.X3_MIN_DEPTH, (m, n, k, splits, depth)
                assert mm.plan(0, f32, m, n, k, count, vectors=True)[0] not in matmul_tc.X3_TILES
        assert taken > 0
        assert mm.plan(0, f32, 4096, 4096, 4096, vectors=True, x3=(0.0, 0.0))[0] in matmul_tc.X3_TILES
        assert mm.plan(0, f32, 4787, 2579, 911, vectors=True, x3=(0.0, 0.0))[0] in matmul_tc.X3_TILES
        assert mm.plan(0, f32, 512, 512, 512, vectors=True, x3=(0.0, 0.0))[0] not in matmul_tc.X3_TILES
        # a short k (session 38: 1.3-2.7x the short-k and wide tiles), not a shallower one nor a narrow C
        for count in (1, 8):
            assert mm.plan(0, f32, 4096, 4096, 32, count, vectors=True, x3=(0.0, 0.0))[0] in matmul_tc.X3_TILES
            for m, n, k in ((4096, 4096, matmul_tc.X3_MIN_K - 1), (4096, _tune.NARROW_SIDE, 32)):
                assert mm.plan(0, f32, m, n, k, count, vectors=True, x3=(0.0, 0.0))[0] not in matmul_tc.X3_TILES
        # a grid of one to two rounds has k cut to fill the second (3372 x 58625 x 935: 1.26x whole), one of more not
        assert mm.plan(0, f32, 3372, 935, 58625, vectors=True, x3=(0.0, 0.0))[1] > 1
        assert mm.plan(0, f32, 1297, 4931, 1019, vectors=True, x3=(0.0, 0.0))[1] == 1
        # a batch that fills the GPU, k whole, on 16 bytes or off them (the misaligned build's slowdown)
        for copies in ((0.0, 0.0), (0.0, np.inf)):
            assert mm.plan(0, f32, 512, 512, 512, 64, vectors=True, x3=copies)[0] in matmul_tc.X3_TILES
        # a small C with a long k, its runs in one launch (session 36: 1.13x the register tiles' split)
        assert mm.plan(0, f32, 81, 93, 1004304, vectors=True, x3=(0.0, 0.0))[0] in matmul_tc.X3_TILES
        assert mm.plan(0, f32, 4787, 2579, 911, vectors=True, x3=(1.0, 0.0))[0] not in matmul_tc.X3_TILES  # (copies)
        # lines off 16 bytes whose padded copies would cost 1 s: the misaligned build's slowdown instead
        assert mm.plan(0, f32, 4787, 2579, 911, vectors=True, x3=(0.0, 1.0))[0] in matmul_tc.X3_TILES
        assert mm.plan(0, f64, 4096, 4096, 4096, pipelined=False, vectors=True,
                       x3=(0.0, 0.0))[0] not in matmul_tc.X3_TILES
        for cc in (75, 86, 89):  # (no TF32, or TF32 at about the FP32 rate)
            monkeypatch.setattr(mm, "_compute_capability", lambda device_id, cc=cc: cc)
            mm._plan.cache_clear()
            assert mm.plan(0, f32, 4096, 4096, 4096, vectors=True, x3=(0.0, 0.0))[0] not in matmul_tc.X3_TILES, cc
    finally:
        mm._plan.cache_clear()



def test_stream_k_tail_takes_a_short_last_wave_and_a_wave_more():
    assert mm.stream_k_tail(1024, 264, 4096, 16) == (528, 264)  # 4096^3 on an H100: 232 tiles past 3 waves
    assert mm.stream_k_tail(1089, 264, 4099, 16) == (792, 264)  # 4097 x 4099: 33 tiles past 4 waves
    assert mm.stream_k_tail(256, 264, 4096, 16) == (256, 0)  # under one wave: the small tile's case
    assert mm.stream_k_tail(528, 264, 4096, 16) == (528, 0)  # whole waves
    assert mm.stream_k_tail(527, 264, 4096, 16) == (527, 0)  # a last wave 263 / 264 full: too little to gain
    assert mm.stream_k_tail(265, 264, 100, 16) == (265, 0)  # too little k to share
    for tiles in range(265, 3000, 7):
        tail_start, sk_blocks = mm.stream_k_tail(tiles, 264, 4096, 16)
        if sk_blocks:  # every stream-K block's run is at least a tile: a tile is cut at most once
            assert sk_blocks == 264 and tiles - tail_start >= sk_blocks and tail_start % 264 == 0, tiles



def test_a_batch_of_small_products_takes_the_small_tile():
    """A batch's grid covers the GPU many times over, but a 32 x 54 product in a 128 x 128 tile is mostly padding:
    the model gives it the small tile; products the large tile fits closely keep it, batched or not."""
    f32 = _tune.CANDIDATES[_tune.F32]
    large, small = f32[0], f32[6]

    def faster(m, n, k, count):
        seconds = {t: _tune.product_seconds(t, m, n, k, 1, 132 * t.min_blocks, 132, 4, count=count)
                   for t in (large, small)}
        return min(seconds, key=seconds.get)

    assert faster(32, 54, 128, 2965) is small
    assert faster(512, 512, 512, 64) is large
    assert faster(4097, 4099, 4096, 1) is large
