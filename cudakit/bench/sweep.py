"""`python bench.py --sweep`: the fast variant of every op against the CuPy call doing the same job, over a fresh
draw of shapes per op (log-uniform sizes and the adversarial classes each op's bench class adds), every result
checked before it is timed. The verdict per op: the minimum and median speed ratio (CuPy time / cudakit time) and
the worst shapes; a shape below the goal is timed again, alternating the two, before it counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .registry import BENCHES
from .timing import Budget, alternate, l2_bytes, measure

GOAL = 0.9  # every shape at least this fraction of CuPy's speed
MAX_OPERAND_BYTES = 2 * 2**30  # a drawn shape whose operands pass this is drawn again
RETIMES = 5  # alternating re-timings of a shape below the goal
BUDGET = Budget(row_s=0.03, min_runs=3, max_runs=100, batch=16)


@dataclass
class Draw:
    """What an op's sweep_cases draws from: the generator and the size limits."""

    rng: np.random.Generator
    max_side: int = 2**26

    def log_uniform(self, lo: int = 1, hi: int | None = None) -> int:
        hi = self.max_side if hi is None else hi
        return int(math.exp(self.rng.uniform(math.log(lo), math.log(hi + 1)))) if hi > lo else lo

    def small(self) -> int:
        return int(self.rng.integers(1, 32))

    def prime(self, lo: int = 2, hi: int = 100_000) -> int:
        while True:
            p = int(self.rng.integers(lo, hi))
            if p > 1 and all(p % d for d in range(2, int(p**0.5) + 1)):
                return p

    def choice(self, options):
        return options[int(self.rng.integers(len(options)))]


def _shares_input(result, s: dict) -> bool:
    """True when `result` is one of the inputs' memory (a view), so timing it would time no work."""
    ptr = result.data.ptr
    return any(ptr == x.data.ptr for name, x in s.items() if name != "out" and hasattr(x, "data"))


def _plain_copy(s: dict):
    """The same bytes as the op's result, moved by the driver: what a reference that returned a view stands for."""
    from .._ceilings import device_copy

    first = next(x for name, x in s.items() if name != "out")
    out = s["out"].reshape(-1)
    device_copy(out, first.reshape(-1) if first.flags.c_contiguous else first.T.reshape(-1))
    return out


def sweep_case(case, device_id: int) -> dict:
    """One shape: check the fast result, then time fast and the CuPy call (re-timed, alternating, below the goal)."""
    import cupy

    import cudakit

    bench = case.bench
    fast = next(v for v in cudakit.variants(case.op) if v.name == "fast")
    row = {"op": case.op, "case": case.label, "dtype": case.dtype, "dims": list(case.dims), "order": case.order}
    try:
        s = bench.make(case)
        from ..testing import poison

        poison(s["out"])
        out = bench.call(fast, s)
        row["error"] = bench.error(case, bench.check_context(case, s), s, out)
        reference = bench.reference
        if _shares_input(reference(s), s):
            reference, row["reference"] = _plain_copy, "a copy of the same bytes (CuPy returns a view)"
        per_call = case.bytes <= l2_bytes(device_id)
        row["per_call"] = per_call

        def timed(fn):
            return measure(lambda k: fn(s), BUDGET, per_call=per_call)[0].median

        t_fast, t_ref = timed(lambda x: bench.call(fast, x)), timed(reference)
        if t_ref / t_fast < GOAL:
            fast_times, ref_times = alternate([lambda k: bench.call(fast, s), lambda k: reference(s)], BUDGET,
                                              RETIMES, per_call=per_call)
            t_fast, t_ref = float(np.median([t_fast] + fast_times)), float(np.median([t_ref] + ref_times))
            row["retimed"] = RETIMES
        row.update(fast_s=t_fast, reference_s=t_ref, ratio=t_ref / t_fast)
    except Exception as exc:
        row["failed"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    finally:
        s = None
        cupy.get_default_memory_pool().free_all_blocks()
    return row


def draw_cases(op: str, seed: int, count: int) -> list:
    """`count` cases of `op` from its bench class, whose operands stay within MAX_OPERAND_BYTES."""
    bench = BENCHES[op]
    draw = Draw(np.random.default_rng([seed, sum(op.encode())]))
    cases = []
    while len(cases) < count:
        case = bench.sweep_case(draw)
        if case is not None and max(bench.operand_bytes(case)) <= MAX_OPERAND_BYTES:
            cases.append(case)
    return cases


def summarize(rows: list[dict], worst: int = 5) -> dict:
    from ..bench.runner import derive_error

    timed = [r for r in rows if "ratio" in r]
    for r in rows:
        derive_error(r)
    ratios = sorted(r["ratio"] for r in timed)
    return {"shapes": len(rows), "timed": len(timed),
            "failed": [r for r in rows if "failed" in r],
            "wrong": [r for r in rows if not (r.get("error") or {}).get("ok", True)],
            "min": ratios[0] if ratios else None, "median": float(np.median(ratios)) if ratios else None,
            "below_goal": sum(x < GOAL for x in ratios),
            "worst": sorted(timed, key=lambda r: r["ratio"])[:worst]}


def run_sweep(ops, seed: int, count: int, console) -> dict:
    """Draw, check and time `count` shapes per op; print each op's verdict as it completes."""
    import cupy
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    device_id = cupy.cuda.Device().id
    results = {"seed": seed, "count": count, "goal": GOAL, "ops": {}}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        for op in ops:
            cases = draw_cases(op, seed, count)
            task = progress.add_task(op, total=len(cases))
            rows = []
            for case in cases:
                progress.update(task, description=f"{op} {case.label}")
                rows.append(sweep_case(case, device_id))
                progress.advance(task)
            results["ops"][op] = {"rows": rows, "summary": summarize(rows)}
            console.print(sweep_table(op, results["ops"][op]["summary"]))
    return results


def sweep_table(op: str, summary: dict):
    from rich.markup import escape
    from rich.table import Table

    from .runner import fmt_time

    ratio = "—" if summary["min"] is None else f"min {summary['min']:.2f}×, median {summary['median']:.2f}×"
    table = Table(title=f"{op} sweep: {summary['timed']} of {summary['shapes']} shapes timed; {ratio} CuPy's speed; "
                        f"{summary['below_goal']} below {GOAL}×", title_justify="left", header_style="bold")
    for col in ("worst shapes", "fast", "CuPy", "× CuPy", "note"):
        table.add_column(col, justify="left" if col in ("worst shapes", "note") else "right")
    for r in summary["worst"]:
        star = "*" if r.get("per_call") else ""
        note = "; ".join(filter(None, [r.get("reference"), f"re-timed {r['retimed']}×" if r.get("retimed") else ""]))
        table.add_row(escape(r["case"]), fmt_time(r["fast_s"]) + star, fmt_time(r["reference_s"]) + star,
                      f"{r['ratio']:.2f}", escape(note))
    for r in summary["failed"]:
        table.add_row(escape(r["case"]), "—", "—", "—", f"[red]failed: {escape(r['failed'])}[/]")
    for r in summary["wrong"]:
        table.add_row(escape(r["case"]), "—", "—", "—", f"[red]wrong result: {escape(str(r['error']))}[/]")
    table.caption = ("× CuPy = CuPy's time / cudakit's (above 1: cudakit faster); * per call, back to back, host time "
                     "included (operands within L2); the others GPU time, inputs past L2")
    table.caption_justify = "left"
    return table
