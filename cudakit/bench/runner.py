"""Measure -> a plain results dict: every variant of every op against CuPy, beside the ceilings of the same run.

Each case draws enough input sets that, rotated call by call, they exceed twice the L2 cache (repeats time memory,
not the cache); per-call cases whose inputs fit in L2 use one set. The tables and the plot read only the dict, so
`--load results.json` redraws them on a machine without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .base import Case
from .ceilings import measure_ceilings
from .registry import BENCHES
from .timing import Budget, alternate, l2_bytes, measure, sets_past_l2, WIDE_SPREAD

ALTERNATIONS = 3  # further rounds of a paired row and the reference, one after the other (OpBench.paired)


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


@dataclass
class Runner:
    budget: Budget
    device_id: int = 0
    on_row: object = None  # callback(description) after each row, for the progress bar
    rates: dict = field(default_factory=dict)  # (op, dtype, name) -> work per second, to estimate slow rows

    def _step(self, text: str) -> None:
        if self.on_row is not None:
            self.on_row(text)

    def ceilings(self) -> dict:
        return measure_ceilings(self.budget, self.device_id, self._step)

    def _row(self, case: Case, name: str, kind: str, lesson: str, fn, sets, error_of, per_call: bool) -> dict:
        import cupy

        row = {"op": case.op, "case": case.label, "name": name, "kind": kind, "lesson": lesson}
        work = case.bench.work(case)
        key = (case.op, case.dtype, name)
        rate = self.rates.get(key)
        estimate = work / rate if rate else None
        if estimate is not None and estimate > self.budget.skip_s:
            row["skipped"] = f"~{fmt_time(estimate)} per call (estimated from a smaller size)"
            return row
        try:
            from ..testing import poison

            poison(sets[0]["out"])
            first = fn(sets[0])  # also the warm-up (and the compile, the first time)
            cupy.cuda.get_current_stream().synchronize()
            row["error"] = error_of(first)
            stats, samples = measure(lambda k: fn(sets[k % len(sets)]), self.budget, warm=False,
                                     per_call=per_call, estimate=estimate)
        except Exception as exc:  # a broken variant must not stop the others
            row["failed"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            return row
        row.update(median_s=stats.median, p10_s=stats.p10, p90_s=stats.p90, n=stats.n, spread=stats.spread,
                   samples_s=samples)
        self.rates[key] = work / stats.median
        return row

    def _alternate(self, rows: list[dict], calls: dict, sets, per_call: bool) -> None:
        """Time each of `rows` (paired rows, the reference last) again ALTERNATIONS times, one after the other;
        each row's median becomes the median of its rounds (its first timing included)."""
        rows = [r for r in rows if "median_s" in r]
        if len(rows) < 2 or rows[-1]["kind"] != "reference":
            return
        again = alternate([lambda k, fn=calls[r["name"]]: fn(sets[k % len(sets)]) for r in rows], self.budget,
                          ALTERNATIONS, per_call=per_call, estimates=[r["median_s"] for r in rows])
        for r, medians in zip(rows, again):
            rounds = [r["median_s"]] + medians
            r.update(median_s=float(np.median(rounds)), rounds_s=rounds)

    def case(self, case: Case, variants) -> list[dict]:
        """Every variant on one case, then the CuPy reference (and first any ceiling the case times itself)."""
        import cupy

        bench = case.bench
        per_call = bench.per_call(case, l2_bytes(self.device_id))
        nsets = 1 if per_call and case.bytes <= l2_bytes(self.device_id) else sets_past_l2(case.bytes, self.device_id)
        facts = {"dtype": case.dtype, "dims": list(case.dims), "order": case.order, "headline": case.headline,
                 "per_call": per_call, "flops": case.flops, "bytes": case.bytes, "tf32": case.tf32}
        try:
            sets = [bench.make(case) for _ in range(nsets)]
            ctx = bench.check_context(case, sets[0])
        except Exception as exc:  # out of memory, say: report it and go on with the next case
            sets = ctx = None
            cupy.get_default_memory_pool().free_all_blocks()
            self._step(f"{case.label}: setup failed")
            return [{"op": case.op, "case": case.label, "name": "(inputs)", "kind": "reference", "lesson": "",
                     "failed": f"setting up the inputs: {type(exc).__name__}: {str(exc)[:160]}", **facts,
                     "headline": False, "sets": 0}]

        def timed(name, kind, lesson, fn, error_of):
            row = self._row(case, name, kind, lesson, fn, sets, error_of, per_call)
            self._step(f"{case.label}: {name}")
            return row

        rows = [timed(name, "ceiling", lesson, fn, error_of)
                for name, lesson, fn, error_of in bench.ceiling_rows(case, sets)]
        for v in variants:
            if v.diagnostic:
                rows.append(timed(v.name, "diagnostic", v.lesson, lambda s, v=v: bench.diagnostic(v, s),
                                  lambda out, v=v: bench.diagnostic_error(v, sets[0], out)))
            else:
                kind = "seed" if v.seed else "fast" if v.name == "fast" else "step"
                rows.append(timed(v.name, kind, v.lesson, lambda s, v=v: bench.call(v, s),
                                  lambda out: bench.error(case, ctx, sets[0], out)))
        name, reference = bench.reference_for(case)
        rows.append(timed(name, "reference", "what CuPy does" if reference == bench.reference else "the library "
                          "to beat where CuPy has no such path", reference, lambda out: bench.error(case, ctx, sets[0], out)))
        calls = {v.name: (lambda s, v=v: bench.call(v, s)) for v in variants if not v.diagnostic}
        calls[name] = reference
        self._alternate([r for r in rows if r["name"] in bench.paired or r["kind"] == "reference"], calls, sets,
                        per_call)
        del sets, ctx
        cupy.get_default_memory_pool().free_all_blocks()
        for r in rows:
            r.update(facts, sets=nsets)
        return rows


def _dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes  # the bench's bfloat16 cases run only where it is installed

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def derive_error(row: dict) -> None:
    """The verdict on a row's error: within the dtype's tolerance, or bit-exact."""
    from .._check import tf32_tolerance, tolerance

    err = row.get("error") or {}
    if err.get("kind") == "rel":
        k = err.get("k", 16)
        err["tol"] = tf32_tolerance(k) if row.get("tf32") else tolerance(_dtype(row["dtype"]), k)
        err["ok"] = err["value"] is not None and bool(err["value"] <= err["tol"])  # NaN (null) fails
    elif err.get("kind") == "exact":
        err["ok"] = bool(err["value"])


def derive(results: dict) -> None:
    """Add throughput, fraction of the ceiling, speed-up over CuPy and the error verdict to every row."""
    ceilings = results["ceilings"]
    by_case: dict = {}
    for r in results["rows"]:
        by_case.setdefault((r["op"], r["case"]), []).append(r)
    for (op, _), rows in by_case.items():
        ref = next((r for r in rows if r["kind"] == "reference" and "median_s" in r), None)
        case_ceiling = next((r for r in rows if r["kind"] == "ceiling" and "median_s" in r), None)
        for r in rows:
            if "median_s" not in r:
                continue
            t = r["median_s"]
            r["gbps"] = r["bytes"] / t / 1e9
            r["tflops"] = r["flops"] / t / 1e12
            reading = BENCHES[op].fraction(r, case_ceiling, ceilings)
            if reading is not None:
                r["ceiling"], r["fraction"] = reading
            if ref is not None and r["kind"] != "ceiling":
                r["speedup"] = ref["median_s"] / t
            derive_error(r)


def run(ops, quick: bool, console, budget: Budget) -> dict:
    """Measure the ceilings, then every case of every op in `ops`, printing each op's table as it completes."""
    import cupy
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    import cudakit

    from .device import device_facts
    from .render import ceilings_table, family_table

    device_id = cupy.cuda.Device().id
    cc = int(cupy.cuda.Device().compute_capability)
    results = {"cudakit": cudakit.__version__, "cupy": cupy.__version__, "device": device_facts(device_id),
               "config": {"quick": quick, "ops": list(ops), "row_s": budget.row_s, "min_runs": budget.min_runs,
                          "max_runs": budget.max_runs, "skip_s": budget.skip_s, "batch": budget.batch,
                          "wide_spread": WIDE_SPREAD},
               "ceilings": {}, "rows": []}
    plan = []
    for op in ops:
        vs = [v for v in cudakit.variants(op, diagnostics=True) if v.min_cc <= cc]
        plan += [(c, [v for v in vs if c.bench.takes(c, v) and (v.name == "fast" or not c.fast_only)])
                 for c in BENCHES[op].cases(quick)]
    total = 5 + sum(len(vs) + 1 + len(c.bench.ceiling_rows(c, [])) for c, vs in plan)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("ceilings", total=total)
        runner = Runner(budget, device_id, on_row=lambda text: progress.update(task, advance=1, description=text))
        results["ceilings"] = runner.ceilings()
        console.print(ceilings_table(results))
        for i, (case, vs) in enumerate(plan):
            progress.update(task, description=f"{case.op} {case.label}")
            results["rows"] += runner.case(case, vs)
            if i + 1 == len(plan) or plan[i + 1][0].op != case.op:
                derive(results)
                console.print(family_table(results, case.op))
    derive(results)
    return results
