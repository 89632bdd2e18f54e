"""README.md's measured table, written from a results dict (a saved `bench.py --json` run) between two markers,
so the README never carries a figure copied by hand."""
from __future__ import annotations

from .registry import BENCHES
from .runner import fmt_time

BEGIN = "<!-- bench.py --readme: begin -->"
END = "<!-- bench.py --readme: end -->"


def measured_table(results: dict) -> str:
    """One line per case: the fast variant beside the CuPy reference and the case's ceiling, as markdown."""
    device = results.get("device", {}).get("name", "GPU")
    ce = results["ceilings"]
    ceilings = ", ".join(f"{key} {c['value']:.1f} {c['unit']}" for key, c in ce.items())
    lines = [f"Measured on an {device} by `python bench.py` (CuPy {results.get('cupy', '?')}); ceilings of the "
             f"same run: {ceilings}.", "",
             "| op | case | fast | rate | of ceiling | CuPy | × CuPy |", "|---|---|---|---|---|---|---|"]
    for op, bench in BENCHES.items():
        cases: dict = {}
        for r in results["rows"]:
            if r["op"] == op:
                cases.setdefault(r["case"], {})[r["kind"]] = r
        unit = "TFLOP/s" if bench.rate == "tflops" else "GB/s"
        for case, kinds in cases.items():
            fast, ref = kinds.get("fast"), kinds.get("reference")
            if fast is None or "median_s" not in fast:
                continue
            star = "*" if fast.get("per_call") else ""
            frac = f"{fast['fraction']:.3f} of {fast['ceiling']}" if "fraction" in fast else "—"
            ref_text = fmt_time(ref["median_s"]) + star if ref and "median_s" in ref else "—"
            speed = f"{fast['speedup']:.2f}" if "speedup" in fast else "—"
            lines.append(f"| {op} | {case} | {fmt_time(fast['median_s'])}{star} | {fast[bench.rate]:.1f} {unit} "
                         f"| {frac} | {ref_text} | {speed} |")
    lines += ["", "\\* per call: back-to-back calls, host time included."]
    return "\n".join(lines)


def write_readme(path: str, results: dict) -> None:
    """Replace what lies between the markers in `path` with measured_table(results)."""
    text = open(path, encoding="utf-8").read()
    try:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise ValueError(f"{path} has no '{BEGIN}' ... '{END}' markers") from None
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{head}{BEGIN}\n{measured_table(results)}\n{END}{tail}")
