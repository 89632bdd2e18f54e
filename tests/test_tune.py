"""matmul's tile tuning (`python -m cudakit tune`): the search, its per-device cache, the defaults and the search
space, and how a pair of tiles is scored."""
import importlib
import json

import numpy as np
import pytest

from cudakit import _tune
from cudakit.bench import timing

mm = importlib.import_module("cudakit.matmul")  # the module (cudakit.matmul is the function)
DTYPES = [np.float32, np.float64]


@pytest.mark.gpu
def test_tune_searches_checks_and_caches(monkeypatch, tmp_path):
    """A quick tune on tiny shapes: it stores a winner per dtype and never picks a tile whose result is wrong."""
    import cupy

    cache = tmp_path / "tune.json"
    monkeypatch.setenv(_tune.CACHE_ENV, str(cache))
    monkeypatch.setattr(_tune, "TUNE_SHAPES", {dt: [(256, 256, 128), (64, 64, 32)] for dt in (_tune.F32, _tune.F64)})
    monkeypatch.setattr(_tune, "replay", lambda fn, reps=10, rounds=5: (fn(), timing.Stats(1e-3, 1e-3, 1e-3, 5))[1])
    device = cupy.cuda.runtime.getDevice()
    bad = _tune.candidates(np.float32, _tune.compute_capability(device))[0]
    real_run = mm.run_tile

    def run_tile(tile, A, B, out, split=False):
        real_run(tile, A, B, out, split)
        if tile == bad:
            out[0, 0] += 1000.0  # a wrong element: the check must reject this candidate

    monkeypatch.setattr(mm, "run_tile", run_tile)
    lines = []

    class Console:
        def print(self, text):
            lines.append(text)

    result = _tune.tune(Console())
    assert set(result) == {"float32", "float64"}
    assert any("WRONG" in l and bad.name in l for l in lines)
    assert bad.name not in result["float32"].values()
    stored = json.loads(cache.read_text())["devices"][_tune.device_key(device)]
    assert stored["float32"] == result["float32"]
    for dtype in DTYPES:
        config, source = _tune.active_config(device, dtype)
        assert source == "tuned" and config == result[np.dtype(dtype).name]
        assert _tune.tiles(device, np.dtype(dtype))[0].name == config["large"]
    _tune.tiles.cache_clear()



@pytest.fixture
def cache_file(monkeypatch, tmp_path):
    path = tmp_path / "sub" / "matmul_tune.json"
    monkeypatch.setenv(_tune.CACHE_ENV, str(path))
    yield path
    _tune.tiles.cache_clear()



def test_tune_cache_round_trip(cache_file):
    key = "Fake GPU (sm_90)"
    f32 = _tune.candidates(np.float32, 90)
    config = {"large": f32[2].name, "small": f32[1].name}
    assert _tune.lookup(key, np.float32, 90) == (_tune.default_config(np.float32, 90), "default")
    _tune.store(key, np.float32, config)
    assert cache_file.is_file()
    assert _tune.lookup(key, np.float32, 90) == (config, "tuned")
    assert _tune.lookup(key, np.float64, 90)[1] == "default"  # nothing stored for float64
    assert _tune.lookup("Other GPU (sm_80)", np.float32, 80)[1] == "default"
    f64 = {"large": _tune.candidates(np.float64, 90)[0].name, "small": _tune.candidates(np.float64, 90)[1].name}
    _tune.store(key, np.float64, f64)
    assert _tune.lookup(key, np.float32, 90) == (config, "tuned")  # the first entry survives the second store
    assert _tune.lookup(key, np.float64, 90) == (f64, "tuned")



def test_tune_cache_rejects_bad_entries(cache_file):
    key = "Fake GPU (sm_70)"
    dmma = next(t for t in _tune.CANDIDATES[_tune.F64] if t.kind == "dmma")
    _tune.store(key, np.float64, {"large": dmma.name, "small": dmma.name})
    assert _tune.lookup(key, np.float64, 70) == (_tune.default_config(np.float64, 70), "default")  # no DMMA on sm_70
    _tune.store(key, np.float32, {"large": "no_such_tile", "small": "no_such_tile"})
    assert _tune.lookup(key, np.float32, 70)[1] == "default"
    cache_file.write_text("{not json")
    assert _tune.lookup(key, np.float32, 70)[1] == "default"
    cache_file.write_text(json.dumps({"version": 999, "devices": {}}))
    assert _tune.lookup(key, np.float32, 70)[1] == "default"



def test_active_config_uses_the_device_key(cache_file, monkeypatch):
    monkeypatch.setattr(_tune, "device_key", lambda device_id: f"Fake GPU {device_id} (sm_90)")
    monkeypatch.setattr(_tune, "compute_capability", lambda device_id: 90)
    assert _tune.active_config(0, np.float32) == (_tune.default_config(np.float32, 90), "default")
    config = {"large": _tune.candidates(np.float32, 90)[1].name, "small": _tune.candidates(np.float32, 90)[0].name}
    _tune.store("Fake GPU 0 (sm_90)", np.float32, config)
    assert _tune.active_config(0, np.float32) == (config, "tuned")
    assert _tune.active_config(1, np.float32)[1] == "default"
    assert [t.name for t in _tune.tiles(0, np.dtype(np.float32))] == [config["large"], config["small"]]



def test_cache_path_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(_tune.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _tune.cache_path() == tmp_path / "xdg" / "cudakit" / "matmul_tune.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _tune.cache_path() == tmp_path / "home" / ".cache" / "cudakit" / "matmul_tune.json"
    monkeypatch.setenv(_tune.CACHE_ENV, str(tmp_path / "x.json"))
    assert _tune.cache_path() == tmp_path / "x.json"



def test_default_tiles_and_the_search_space():
    names = {t.name for tiles in _tune.CANDIDATES.values() for t in tiles}
    assert len(names) == sum(len(t) for t in _tune.CANDIDATES.values())  # names are unique
    for cc in (70, 80, 90):
        for dtype in DTYPES:
            config = _tune.default_config(dtype, cc)
            usable = {t.name for t in _tune.candidates(dtype, cc)}
            assert config["large"] in usable and config["small"] in usable
    assert all(t.kind == "simt" for t in _tune.candidates(np.float32, 90))  # FP32 never goes near the tensor cores
    assert _tune.default_config(np.float64, 90)["large"].startswith("dmma")
    assert _tune.default_config(np.float64, 70)["large"].startswith("simt")



def test_every_tile_is_compiled_by_the_compile_check():
    groups = {e for g in mm.instantiation_groups() for e in g}
    for dtype, tiles in _tune.CANDIDATES.items():
        for tile in tiles + _tune.extra_tiles(dtype):
            assert set(mm.tile_instantiations(tile, dtype)) <= groups
    for tiles in (mm.BLOCKTILE_2D, mm.WARP_TILED, mm.DOUBLE_BUFFERED):
        for dtype, tile in tiles.items():
            assert set(mm.tile_instantiations(tile, dtype)) <= groups



def test_tune_scores_the_pair_as_choose_will_run_it():
    """Session 2's H100 tune picked 128x256 as the large tile on 4096^3 alone; at 2048^3 its 128 blocks leave SMs
    idle, so the small tile ran there at a third of the speed. Scored pair by pair, the 128x128 tile wins."""
    f32 = _tune.CANDIDATES[_tune.F32]
    t128, t256, small = f32[0], f32[2], f32[6]
    shapes = [(512, 512, 512), (2048, 2048, 2048), (4096, 4096, 4096)]
    rates = {t128: dict(zip(shapes, (14.0, 42.9, 44.2))),
             t256: dict(zip(shapes, (9.0, 44.0, 45.0))),
             small: dict(zip(shapes, (16.5, 28.0, 30.0)))}
    assert _tune.choose(t256, small, 2048, 2048, 132) is small  # 16 x 8 blocks < 132 SMs
    assert _tune.choose(t128, small, 2048, 2048, 132) is t128
    assert _tune.best_pair(rates, 132) == (t128, small)
    rates[t256][(2048, 2048, 2048)] = rates[small][(2048, 2048, 2048)] = 60.0  # now 2048^3 costs it nothing
    assert _tune.best_pair(rates, 132) == (t256, small)
