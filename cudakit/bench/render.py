"""The results dict as rich tables: the ceilings, then one table per op (its title, rate and ceiling columns and
footnotes come from the op's bench class)."""
from __future__ import annotations

from rich.markup import escape

from .registry import BENCHES
from .runner import fmt_time
from .timing import WIDE_SPREAD


def _fmt_number(x: float) -> str:
    """Three significant digits, without exponents for the usual range."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 1 else f"{x:.3g}"


def _fmt_error(r: dict) -> str:
    err = r.get("error") or {}
    if err.get("kind") == "rel":
        v = err["value"]
        text = "nan" if v is None or v != v else f"{v:.1e}"
        text += "†" if err.get("sampled_rows") else ""
        return text if err.get("ok", True) else f"[red]{text} ✗ over {err['tol']:.0e}[/]"
    if err.get("kind") == "exact":
        return "exact ✓" if err["value"] else "[red]MISMATCH ✗[/]"
    return "—"


def _notes(r: dict, dram_bytes_s=None) -> str:
    notes = []
    if dram_bytes_s and r.get("gbps") and BENCHES[r["op"]].rate == "gbps" and r["gbps"] * 1e9 > dram_bytes_s:
        notes.append("above the DRAM peak: not a memory bandwidth (cache hits, or less work done)")
    if r.get("skipped"):
        notes.append(f"skipped: {escape(r['skipped'])}")
    if r.get("failed"):
        notes.append(f"[red]failed: {escape(r['failed'])}[/]")
    if r["kind"] == "diagnostic":
        notes.append(escape((r.get("error") or {}).get("note") or "diagnostic"))
    if "median_s" in r:
        if r["n"] < 3:
            notes.append(f"{r['n']} run{'s' if r['n'] > 1 else ''} (slow)")
        elif r["spread"] > WIDE_SPREAD:
            notes.append(f"wide spread {r['spread']:.0%} (p10-p90)")
    return "; ".join(notes)


def _footnotes(results: dict, op: str, per_call: bool) -> list[str]:
    bench, ce = BENCHES[op], results["ceilings"]
    foot = []
    if per_call:
        floor = f"; an empty launch takes {ce['launch']['value']:.1f} µs" if "launch" in ce else ""
        foot.append(f"* per call: median over samples of {results['config']['batch']} back-to-back calls "
                    f"(host overhead included{floor}; inputs rotated past L2 when larger than it)")
    foot += bench.footnotes(results)
    alternated = [r for r in results["rows"] if r["op"] == op and "rounds_s" in r]
    if alternated:
        names = ", ".join(sorted({r["name"] for r in alternated if r["kind"] != "reference"}))
        foot.append(f"{names} and the reference: each the median of {len(alternated[0]['rounds_s'])} timings taken "
                    "in turn with the other's (a drift of the clocks over a case weighs on both)")
    if bench.error_header != "exact":
        foot.append("rel. error = ‖out − ref‖ / ‖ref‖ against float64; inputs uniform in [0.5, 1.5)")
    return foot


def family_table(results: dict, op: str):
    from rich.table import Table

    bench = BENCHES[op]
    rows = [r for r in results["rows"] if r["op"] == op]
    per_call = any(r.get("per_call") for r in rows)
    table = Table(title=f"{op}  ({bench.rate_note})", title_justify="left", show_lines=False, header_style="bold")
    table.add_column("case", no_wrap=True)
    table.add_column("variant", no_wrap=True)
    table.add_column("kind")
    table.add_column("time" + (" (per call*)" if per_call else ""), justify="right")
    table.add_column("TFLOP/s" if bench.rate == "tflops" else "GB/s", justify="right")
    table.add_column(bench.fraction_header, justify="right")
    table.add_column("× CuPy", justify="right")
    table.add_column(bench.error_header, justify="right")
    table.add_column("note")
    last = None
    for r in rows:
        if last is not None and r["case"] != last:
            table.add_section()
        timed = "median_s" in r
        time_text = fmt_time(r["median_s"]) + ("*" if r.get("per_call") else "") if timed else "—"
        rate = _fmt_number(r[bench.rate]) if timed else "—"
        frac = "—" if not timed or "fraction" not in r else f"{r['fraction']:.1%}" if r["fraction"] < 0.1 else \
            f"{r['fraction']:.0%}"
        speed = f"{r['speedup']:.3g}×" if timed and "speedup" in r and r["kind"] != "reference" else "—"
        style = "bold" if r["kind"] == "fast" else "dim" if r["kind"] in ("diagnostic", "ceiling") else None
        case = escape(r["case"]) if r["case"] != last else ""
        table.add_row(case, escape(r["name"]), r["kind"], time_text, rate, frac, speed, _fmt_error(r),
                      _notes(r, results.get("device", {}).get("peak_memory_bandwidth_bytes_s")), style=style)
        last = r["case"]
    table.caption = escape("\n".join(_footnotes(results, op, per_call)))
    table.caption_justify = "left"
    return table


def ceilings_table(results: dict):
    from rich.table import Table

    table = Table(title="ceilings measured in this run", title_justify="left", header_style="bold")
    for col, just in (("ceiling", "left"), ("measured", "right"), ("time", "right"), ("note", "left")):
        table.add_column(col, justify=just)
    for key, c in results["ceilings"].items():
        note = f"wide spread {c['spread']:.0%}" if c["n"] >= 3 and c["spread"] > WIDE_SPREAD else ""
        table.add_row(f"{key}: {escape(c['what'])}", f"{c['value']:.1f} {c['unit']}", fmt_time(c["median_s"]), note)
    bw = results.get("device", {}).get("peak_memory_bandwidth_bytes_s")
    if bw:
        table.caption = f"memory clock × bus width gives {bw / 1e9:.0f} GB/s on paper"
        table.caption_justify = "left"
    return table
