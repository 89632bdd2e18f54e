"""The command lines (bench.py, python -m cudakit) and the bench's statistics, tables and plot.

Everything here but the `gpu` tests runs without a GPU. The no-GPU checks hide any GPU with CUDA_VISIBLE_DEVICES="",
so they run (and must pass) on a GPU machine too.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from rich.console import Console

from cudakit.bench import cli, device, render, roofline, runner, timing
from cudakit.bench.base import Case
from cudakit.bench.registry import BENCHES, OPS
from conftest import HIDE_GPU, run_cli



# ---------------------------------------------------------------------------------------------------- command lines
@pytest.mark.parametrize("args", [("bench.py",), ("bench.py", "--quick", "--ops", "dot"), ("-m", "cudakit", "info"),
                                  ("-m", "cudakit", "tune")])
def test_without_a_gpu_one_sentence_and_a_failing_status(args):
    res = run_cli(*args, env=HIDE_GPU)
    assert res.returncode != 0
    err = res.stderr.strip()
    assert "Traceback" not in res.stderr and "\n" not in err, res.stderr
    assert "GPU" in err and err.endswith("."), err
    assert res.stdout == ""


@pytest.mark.parametrize("args", [("bench.py", "--help"), ("-m", "cudakit", "--help"), ("-m", "cudakit", "info", "--help"),
                                  ("-m", "cudakit", "tune", "--help")])
def test_help_needs_no_gpu(args):
    res = run_cli(*args, env=HIDE_GPU)
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout


def test_bench_help_lists_the_options():
    out = run_cli("bench.py", "--help", env=HIDE_GPU).stdout
    for option in ("--quick", "--ops", "--json", "--plot", "--load"):
        assert option in out


def test_unknown_op_is_refused_before_anything_runs():
    res = run_cli("bench.py", "--ops", "matmul,nope", env=HIDE_GPU)
    assert res.returncode == 2
    assert "nope" in res.stderr and "valid ops: dot, transpose, matvec, matmul" in res.stderr


def test_a_subcommand_is_required():
    res = run_cli("-m", "cudakit", env=HIDE_GPU)
    assert res.returncode == 2 and "info" in res.stderr


# ---------------------------------------------------------------------------------------------------- statistics
def test_percentile_matches_numpy_on_synthetic_samples():
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 10, 11, 257):
        xs = rng.lognormal(size=n)
        for q in (0, 10, 50, 90, 100):
            assert timing.percentile(list(xs), q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)


def test_summarize_median_and_spread():
    s = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0])  # order does not matter
    assert (s.median, s.n) == (3.0, 5)
    assert (s.p10, s.p90) == pytest.approx((1.4, 4.6))
    assert s.spread == pytest.approx((4.6 - 1.4) / 3.0)
    assert timing.summarize([1.0, 2.0, 3.0, 4.0]).median == 2.5
    one = timing.summarize([7.0])
    assert (one.median, one.p10, one.p90, one.spread) == (7.0, 7.0, 7.0, 0.0)


def test_wide_spread_flag():
    tight = timing.summarize([1.0] * 20 + [1.05])
    assert not timing.is_wide(tight)
    wide = timing.summarize([1.0] * 8 + [1.5] * 4)
    assert wide.spread == pytest.approx(0.5) and timing.is_wide(wide)
    assert not timing.is_wide(timing.summarize([1.0, 2.0]))  # two runs say nothing about the spread
    assert timing.is_wide(timing.summarize([1.0, 1.0, 1.2]), limit=0.05)


def test_statistics_refuse_nonsense():
    with pytest.raises(ValueError):
        timing.summarize([])
    with pytest.raises(ValueError):
        timing.percentile([1.0], 101)


# ---------------------------------------------------------------------------------------------------- accounting
def test_case_flops_and_bytes():
    assert Case("matmul", "float32", (2, 3, 4)).flops == 2 * 2 * 3 * 4
    assert Case("matmul", "float32", (2, 3, 4)).bytes == 4 * (2 * 3 + 3 * 4 + 2 * 4)
    assert Case("matvec", "float64", (5, 7)).bytes == 8 * (5 * 7 + 7 + 5)
    assert Case("matvec", "float64", (5, 7)).flops == 2 * 35
    assert Case("dot", "float32", (1024,)).bytes == 4 * 2048
    t = Case("transpose", "int8", (3, 5))
    assert (t.flops, t.bytes) == (0, 2 * 15)
    assert Case("dot", "float32", (2**20,)).label == "float32 2^20"
    assert "F-order" in Case("matvec", "float32", (4, 4), "F").label


@pytest.mark.parametrize("quick", [False, True])
def test_every_op_has_cases_and_one_headline(quick):
    for op in OPS:
        cases = BENCHES[op].cases(quick)
        headlines = [c.dtype for c in cases if c.headline]  # the roofline plots one case per dtype at most
        assert cases and headlines and len(set(headlines)) == len(headlines)
        assert len({c.label for c in cases}) == len(cases)


def test_the_default_sizes_are_the_documented_ones():
    labels = {op: [c.label for c in BENCHES[op].cases(False)] for op in OPS}
    assert "float64 16384×16384" in labels["transpose"] and "int8 8191×8193" in labels["transpose"]
    assert "float64 2^27" in labels["dot"] and "float32 2^28" in labels["dot"]
    assert "float32 4097×4095×4099 (m×k×n)" in labels["matmul"]
    assert "float32 4096×4096×4096 (m×k×n), A F-order and B F-order" in labels["matmul"]
    assert {f"{t} {d}" for t in ("int8", "float16", "float32", "float64")
            for d in ("1024×262144", "262144×1024", "8191×8193", "16384×16384")} <= set(labels["transpose"])
    assert len(labels["matvec"]) == 2 * 4 * 2 + 4
    per_call = [c for c in BENCHES["matvec"].cases(False) if c.per_call]
    assert {(c.dtype, c.dims, c.order) for c in per_call} == {(t, (4096, 4096), o) for t in ("float32", "float64")
                                                              for o in "CF"}
    assert all(c.fast_only and c.label.endswith(", per call") for c in per_call)
    fast_only = [c for c in BENCHES["matmul"].cases(False) if c.fast_only]
    assert {c.matmul_orders for c in fast_only if c.dims == (4096,) * 3} == {("F", "C"), ("C", "F"), ("F", "F")}
    drop_in = {c.dims for c in fast_only if c.dtype == "float64"}
    assert {(256, 65536, 256), (1, 4096, 4096), (4096, 64, 4096), (64, 512, 512, 512), (10000, 32, 32, 32)} <= drop_in


# ---------------------------------------------------------------------------------------------------- rendering
def synthetic_results() -> dict:
    """Hand-made results: a transpose case, a per-call dot case, a sampled matmul case."""

    def ceiling(unit, value, t):
        return {"what": "synthetic", "unit": unit, "value": value, "median_s": t, "p10_s": t, "p90_s": t, "n": 9,
                "spread": 0.0, "samples_s": [t] * 9}

    def row(case, name, kind, t, error, spread=0.01, n=9, **extra):
        r = {"op": case.op, "case": case.label, "name": name, "kind": kind, "lesson": "", "dtype": case.dtype,
             "dims": list(case.dims), "order": case.order, "headline": case.headline, "flops": case.flops,
             "bytes": case.bytes, "sets": 1, "per_call": extra.pop("per_call", False), "error": error}
        if t is not None:
            r.update(median_s=t, p10_s=t, p90_s=t * (1 + spread), n=n, spread=spread, samples_s=[t] * n)
        r.update(extra)
        return r

    tr = Case("transpose", "float32", (1024, 1024), headline=True)
    dot = Case("dot", "float32", (2**16,), headline=True)
    mm = Case("matmul", "float32", (4096, 4096, 4096), headline=True)
    exact = {"kind": "exact", "value": True}
    rel = {"kind": "rel", "value": 1e-7, "k": 4096, "sampled_rows": 258}
    rows = [
        row(tr, "cudaMemcpy (copy ceiling)", "ceiling", 2e-3, exact),
        row(tr, "transposeNaive", "seed", 8e-3, exact, spread=0.4),
        row(tr, "copy", "diagnostic", 2.5e-3, {"kind": "exact", "value": True, "against": "copy of A"}),
        row(tr, "transposeFineGrained", "diagnostic", 3e-3, {"kind": None, "note": "diagnostic: not a transpose"}),
        row(tr, "fast", "fast", 2.5e-3, {"kind": "exact", "value": False}),
        row(tr, "cupy.ascontiguousarray(A.T)", "reference", 5e-3, exact),
        row(dot, "gpu_dot", "seed", 20e-6, {"kind": "rel", "value": 1e-6, "k": 2**16}, per_call=True),
        row(dot, "fast", "fast", 5e-6, {"kind": "rel", "value": float("nan"), "k": 2**16}, per_call=True),
        row(dot, "cupy.dot(a, b) (cuBLAS)", "reference", 10e-6, {"kind": "rel", "value": 1e-7, "k": 2**16},
            per_call=True),
        row(mm, "MatmulKernel", "seed", None, None, skipped="~3 s per call (estimated from a smaller size)"),
        row(mm, "broken", "step", None, None, failed="CUDARuntimeError: [boom]"),
        row(mm, "fast", "fast", mm.flops / 40e12, dict(rel), n=2),
        row(mm, "cupy.matmul (cuBLAS)", "reference", mm.flops / 50e12, dict(rel)),
    ]
    return {"device": {"name": "synthetic GPU"}, "config": {"batch": 64},
            "ceilings": {"read": ceiling("GB/s", 3000.0, 1e-3), "copy": ceiling("GB/s", 2800.0, 1e-3),
                         "fp32": ceiling("TFLOP/s", 60.0, 1e-3), "fp64": ceiling("TFLOP/s", 30.0, 1e-3),
                         "launch": dict(ceiling("µs", 4.2, 4.2e-6), what="an empty kernel per call")},
            "rows": rows}


def rendered(table) -> str:
    console = Console(record=True, width=260, file=open(os.devnull, "w"))
    console.print(table)
    return console.export_text()


def test_derive_fractions_speedups_and_verdicts():
    res = synthetic_results()
    runner.derive(res)
    by = {(r["op"], r["name"]): r for r in res["rows"]}
    naive = by["transpose", "transposeNaive"]
    assert naive["fraction"] == pytest.approx(2e-3 / 8e-3)  # against the memcpy of the same bytes
    assert naive["speedup"] == pytest.approx(5e-3 / 8e-3)
    assert naive["gbps"] == pytest.approx(2 * 4 * 1024 * 1024 / 8e-3 / 1e9)
    assert by["transpose", "fast"]["error"]["ok"] is False
    fast_dot = by["dot", "fast"]
    assert fast_dot["speedup"] == pytest.approx(2.0)
    assert fast_dot["fraction"] == pytest.approx(fast_dot["gbps"] / 3000.0)
    assert fast_dot["error"]["ok"] is False  # NaN never passes
    assert by["dot", "gpu_dot"]["error"]["ok"] is True
    mm = by["matmul", "fast"]
    assert mm["tflops"] == pytest.approx(40.0) and mm["fraction"] == pytest.approx(40 / 60)
    assert mm["speedup"] == pytest.approx(0.8)
    assert "median_s" not in by["matmul", "MatmulKernel"]


def test_paired_rows_are_timed_again_in_turn_with_the_reference(monkeypatch):
    """The rows a goal names and the reference alternate ALTERNATIONS more times; each keeps the median of its
    rounds, and the table says so."""
    order, times = [], {"fast": iter([3.0, 1.0, 2.0]), "cupy.matmul (cuBLAS)": iter([5.0, 7.0, 6.0])}

    class Stats:
        def __init__(self, median):
            self.median = median

    def fake_measure(call, budget, **kw):
        name = call(0)
        order.append(name)
        return Stats(next(times[name])), []

    monkeypatch.setattr(timing, "measure", fake_measure)
    monkeypatch.setattr(runner, "ALTERNATIONS", 3)
    rows = [{"name": "fast", "kind": "fast", "median_s": 4.0}, {"name": "wgmma", "kind": "step", "median_s": 9.0},
            {"name": "cupy.matmul (cuBLAS)", "kind": "reference", "median_s": 8.0}]
    calls = {r["name"]: (lambda s, name=r["name"]: name) for r in rows}
    runner.Runner(timing.Budget())._alternate([rows[0], rows[2]], calls, [{}], per_call=False)
    assert order == ["fast", "cupy.matmul (cuBLAS)"] * 3
    assert rows[0]["median_s"] == 2.5 and rows[0]["rounds_s"] == [4.0, 3.0, 1.0, 2.0]
    assert rows[2]["median_s"] == 6.5 and rows[1]["median_s"] == 9.0 and "rounds_s" not in rows[1]
    res = synthetic_results()
    for r in res["rows"]:
        if r["op"] == "matmul" and r["name"] in ("fast", "cupy.matmul (cuBLAS)") and "median_s" in r:
            r["rounds_s"] = [r["median_s"]] * 4
    runner.derive(res)
    text = rendered(render.family_table(res, "matmul")).replace("\n", " ")
    assert "fast and the reference: each the median of 4 timings" in " ".join(text.split())


def test_tables_show_every_row_and_its_notes():
    res = synthetic_results()
    runner.derive(res)
    text = {op: rendered(render.family_table(res, op)) for op in ("transpose", "dot", "matmul")}
    assert "25%" in text["transpose"] and "0.625×" in text["transpose"]  # naive: fraction of memcpy, speed-up
    assert "MISMATCH" in text["transpose"] and "exact ✓" in text["transpose"]
    assert "wide spread 40%" in text["transpose"] and "not a transpose" in text["transpose"]
    assert "5.0 µs*" in text["dot"] and "back-to-back" in text["dot"] and "nan" in text["dot"]
    assert "skipped: ~3 s per call" in text["matmul"] and "[boom]" in text["matmul"]
    assert "40.0 " in text["matmul"] and "67%" in text["matmul"] and "2 runs (slow)" in text["matmul"]
    assert "sampled rows" in text["matmul"] and "1.0e-07†" in text["matmul"]
    assert "60.0" in rendered(render.ceilings_table(res)) and "4.2 µs" in rendered(render.ceilings_table(res))
    assert "empty launch takes 4.2 µs" in text["dot"].replace("\n", " ").replace("  ", " ")


def test_load_redraws_saved_results_without_a_gpu(tmp_path):
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps(cli.finite(synthetic_results())))
    json.loads(saved.read_text())  # strict JSON: the NaN became null
    res = run_cli("bench.py", "--load", str(saved), "--ops", "dot,matmul", env=HIDE_GPU)
    assert res.returncode == 0, res.stderr
    assert "float32 2^16" in res.stdout and "4096×4096×4096" in res.stdout and "transposeNaive" not in res.stdout


def test_readme_table_is_written_between_its_markers_from_saved_results(tmp_path):
    from cudakit.bench.readme import BEGIN, END

    saved = tmp_path / "results.json"
    saved.write_text(json.dumps(cli.finite(synthetic_results())))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nstale table\n{END}\noutro\n")
    res = run_cli("bench.py", "--load", str(saved), "--readme", str(readme), env=HIDE_GPU)
    assert res.returncode == 0, res.stderr
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{END}\noutro\n") and "stale" not in text
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0].startswith("| op | case | fast |")
    fast_rows = {(r["op"], r["case"]) for r in synthetic_results()["rows"] if r["kind"] == "fast"}
    assert len(lines) - 1 == len(fast_rows)  # one line per case whose fast variant was timed
    dot = next(line for line in lines if line.startswith("| dot |"))
    assert "5.0 µs*" in dot and "10.0 µs*" in dot and "| 2.00 |" in dot  # fast, CuPy, × CuPy
    assert "synthetic GPU" in text and "read 3000.0 GB/s" in text


def test_readme_without_markers_is_one_sentence(tmp_path):
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps(cli.finite(synthetic_results())))
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    res = run_cli("bench.py", "--load", str(saved), "--readme", str(readme), env=HIDE_GPU)
    assert res.returncode == 1 and "markers" in res.stderr and "Traceback" not in res.stderr
    assert readme.read_text() == "no markers here\n"


def test_missing_results_file_is_one_sentence(tmp_path):
    res = run_cli("bench.py", "--load", str(tmp_path / "absent.json"), env=HIDE_GPU)
    assert res.returncode == 1 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1


def test_roofline_plot(tmp_path):
    pytest.importorskip("matplotlib")
    res = synthetic_results()
    runner.derive(res)
    path = tmp_path / "roofline.png"
    roofline.plot_roofline(res, str(path))
    assert path.stat().st_size > 10_000


def test_plot_without_matplotlib_is_one_sentence(tmp_path):
    try:
        import matplotlib  # noqa: F401

        pytest.skip("matplotlib is installed")
    except ImportError:
        pass
    saved = tmp_path / "results.json"
    saved.write_text(json.dumps(cli.finite(synthetic_results())))
    res = run_cli("bench.py", "--load", str(saved), "--plot", str(tmp_path / "r.png"), env=HIDE_GPU)
    assert res.returncode == 1 and "matplotlib" in res.stderr and "Traceback" not in res.stderr


def test_device_rows_format_and_tolerate_missing_facts():
    facts = {"name": "X", "compute_capability": "9.0", "global_memory_bytes": 80 * 2**30, "l2_cache_bytes": 50 * 2**20,
             "shared_memory_per_block_bytes": 48 * 1024, "shared_memory_per_block_optin_bytes": 227 * 1024,
             "shared_memory_per_sm_bytes": 228 * 1024, "sm_clock_khz": 1980000, "memory_clock_khz": None,
             "memory_bus_width_bits": 5120, "sm_count": 132, "warp_size": 32, "max_blocks_per_sm": 32,
             "max_threads_per_block": 1024, "max_block_dims": [1024, 1024, 64], "max_grid_dims": [],
             "peak_memory_bandwidth_bytes_s": None}
    rows = dict(device.device_rows(facts))
    assert rows["Global memory"] == "80 GiB" and rows["L2 cache"] == "50 MiB"
    assert rows["Shared memory per block (opt-in max)"] == "227 KiB" and rows["SM clock"] == "1.980 GHz"
    assert rows["Memory clock"] == "n/a" and rows["Max grid dimensions"] == "n/a"
    assert rows["Max block dimensions"] == "1024 x 1024 x 64" and rows["SM count"] == "132"


# ---------------------------------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_quick_dot_bench_on_the_gpu(tmp_path):
    import cudakit

    out = tmp_path / "dot.json"
    res = run_cli("bench.py", "--quick", "--ops", "dot", "--json", str(out), timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    data = json.loads(out.read_text())
    for key in ("read", "copy", "fp32", "fp64", "launch"):
        assert data["ceilings"][key]["value"] > 0
    names = {v.name for v in cudakit.variants("dot", diagnostics=True)} | {"cupy.dot(a, b) (cuBLAS)"}
    cases = {c.label for c in BENCHES["dot"].cases(True)}
    rows = data["rows"]
    assert {(r["case"], r["name"]) for r in rows} == {(c, n) for c in cases for n in names}
    for r in rows:
        assert "failed" not in r and r["median_s"] > 0 and r["n"] >= 1, r
        assert r["error"]["ok"], r
    assert any(r["per_call"] for r in rows) and not all(r["per_call"] for r in rows)


@pytest.mark.gpu
def test_timeline_spans_follow_the_queue_on_each_stream():
    import cupy

    timing.keep_busy(1e-6)  # compiled and loaded outside the spans
    tl = timing.Timeline()
    side = cupy.cuda.Stream(non_blocking=True)
    with tl.span("held"):
        timing.keep_busy(0.002)
    with tl.span("after", cupy.cuda.get_current_stream()):
        cupy.arange(10)
    with side, tl.span("side", side):
        timing.keep_busy(0.002)
    spans = {label: (ptr, start, end) for label, ptr, start, end in tl.spans()}
    assert list(spans) == ["held", "after", "side"]
    held, after, on_side = spans["held"], spans["after"], spans["side"]
    assert held[0] == after[0] != on_side[0] == side.ptr
    assert 0 <= held[1] < held[2] <= after[1] < after[2]  # one stream: in queue order
    assert held[2] - held[1] > 0.001 and on_side[2] - on_side[1] > 0.001  # the holds took their time


@pytest.mark.gpu
def test_measure_and_replay_time_a_hold():
    budget = timing.Budget(row_s=0.02, min_runs=3, max_runs=10)
    stats, samples = timing.measure(lambda k: timing.keep_busy(0.001), budget)
    assert stats.n == len(samples) >= 3 and 0.0008 < stats.median < 0.005
    replayed = timing.replay(lambda: timing.keep_busy(0.001), reps=3, rounds=3)
    assert replayed.n == 3 and 0.0008 < replayed.median < 0.005


@pytest.mark.gpu
def test_shared_inputs_are_fresh_and_never_zero_and_poison_marks_every_element():
    import cupy

    from cudakit import testing

    for dtype in (np.float16, np.float32, np.float64):
        a, b = testing.random_array((64, 33), dtype), testing.random_array((64, 33), dtype, order="F")
        assert b.flags.f_contiguous and float(a.min()) >= 0.5 and float(a.max()) < 1.5 + 1e-3
        assert not bool(cupy.array_equal(a, b))
        assert bool(cupy.isnan(testing.poisoned((5, 7), dtype)).all())
    x = testing.random_array(4096, np.int8)
    assert int(x.min()) < -100 and int(x.max()) > 100
    assert bool((testing.poisoned(9, np.uint16) == 0xA5A5).all())


@pytest.mark.gpu
def test_info_on_the_gpu():
    res = run_cli("-m", "cudakit", "info")
    assert res.returncode == 0, res.stderr
    for label in ("Compute capability", "L2 cache", "SM count", "Max grid dimensions", "matmul tile configuration"):
        assert label in res.stdout


def test_throughput_above_the_dram_peak_is_flagged():
    res = synthetic_results()
    runner.derive(res)
    gbps = {r["name"]: r["gbps"] for r in res["rows"] if r["op"] == "transpose"}
    res["device"]["peak_memory_bandwidth_bytes_s"] = 3.0e9  # between naive's and the copy kernel's rate
    assert gbps["transposeNaive"] < 3.0 < gbps["copy"]
    lines = rendered(render.family_table(res, "transpose")).splitlines()
    flagged = {name for name in gbps for line in lines if f" {name} " in line and "above the DRAM peak" in line}
    assert flagged == {name for name, v in gbps.items() if v > 3.0}


@pytest.mark.gpu
def test_matmul_layout_cases_make_the_layouts_they_name():
    for order in ("C", "FC", "CF", "FF"):
        case = Case("matmul", "float32", (64, 32, 48), order)
        s = BENCHES["matmul"].make(case)
        assert s["A"].shape == (64, 32) and s["B"].shape == (32, 48)
        for x, o in zip((s["A"], s["B"]), case.matmul_orders):
            assert x.flags.c_contiguous if o == "C" else x.flags.f_contiguous, (order, o)


def test_the_bench_times_the_fast_transpose_on_every_element_size():
    """Every transpose case, int8, uint8 and float16 included, has its fast row (no GPU needed)."""
    import cudakit
    from cudakit.bench.registry import BENCHES

    bench = BENCHES["transpose"]
    fast = next(v for v in cudakit.variants("transpose") if v.name == "fast")
    cases = bench.cases(quick=False)
    assert {"int8", "uint8", "float16"} <= {case.dtype for case in cases}
    assert all(bench.takes(case, fast) for case in cases)
