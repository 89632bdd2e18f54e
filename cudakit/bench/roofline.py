"""The roofline picture: every variant of each op's headline case against the measured read bandwidth and FMA
peaks; an op with no arithmetic (transpose) as bars against the copy of the same bytes beside it."""
from __future__ import annotations

import math

import numpy as np

from .registry import BENCHES


class PlotError(Exception):
    """A one-sentence reason the plot cannot be drawn."""


def _headline_cases(results: dict, op: str) -> list[list[dict]]:
    """The rows of each of op's headline cases (those marked, else the one with most rows)."""
    rows = [r for r in results["rows"] if r["op"] == op and "median_s" in r and r["kind"] != "ceiling"]
    if not rows:
        return []
    cases = {}
    for r in rows:
        cases.setdefault(r["case"], []).append(r)
    marked = [c for c, rs in cases.items() if rs[0].get("headline")]
    picks = marked or [max(cases, key=lambda c: (len(cases[c]), cases[c][0]["bytes"]))]
    return [cases[c] for c in picks]


def _headline_rows(results: dict, op: str) -> list[dict]:
    cases = _headline_cases(results, op)
    return cases[0] if cases else []


def _plot_case(ax, op: str, marker: str, rows: list[dict]) -> None:
    rows = sorted(rows, key=lambda r: r["median_s"], reverse=True)  # slowest first
    label_at = -math.inf
    for r in rows:
        x, y = r["flops"] / r["bytes"], r["flops"] / r["median_s"] / 1e12
        color = "tab:gray" if r["kind"] == "reference" else "tab:red" if r["kind"] == "seed" else \
            "tab:green" if r["kind"] == "fast" else "tab:blue"
        ax.scatter([x], [y], marker=marker, color=color, s=40, zorder=3)
        label_at = max(math.log10(y), label_at + 0.07)  # labels of close points are pushed apart upwards
        ax.annotate(f"{op}: {r['name']}", (x, y), xytext=(x * 1.6, 10**label_at), fontsize=7, va="center",
                    arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5})
    if rows:
        ax.scatter([], [], marker=marker, color="k", label=f"{op}: {rows[0]['case']}")


def plot_roofline(results: dict, path: str) -> None:
    plt = pyplot()
    ce = results["ceilings"]
    if "read" not in ce or "fp32" not in ce:
        raise PlotError("bench.py --plot needs the read and FP32 ceilings, which these results lack")
    bw, peak32 = ce["read"]["value"] * 1e9, ce["fp32"]["value"] * 1e12
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(16, 7.5), gridspec_kw={"width_ratios": [2.2, 1]})
    ai = np.logspace(-3, 12, 400, base=2)
    ax.loglog(ai, np.minimum(bw * ai, peak32) / 1e12, "k-", lw=2,
              label=f"read {bw / 1e9:.0f} GB/s, FP32 {peak32 / 1e12:.1f} TFLOP/s")
    if "fp64" in ce:
        peak64 = ce["fp64"]["value"] * 1e12
        ax.loglog(ai, np.minimum(bw * ai, peak64) / 1e12, "k--", lw=1, label=f"FP64 FMA {peak64 / 1e12:.1f} TFLOP/s")
    for key, style, what in (("wgmma16", "b-", "float16 tensor cores, wgmma"), ("mma16", "b-.", "float16, mma.sync"),
                             ("wgmma_tf32", "c-", "TF32, wgmma"), ("mma_tf32", "c-.", "TF32, mma.sync")):
        if key in ce:
            peak = ce[key]["value"] * 1e12
            ax.loglog(ai, np.minimum(bw * ai, peak) / 1e12, style, lw=1, label=f"{what} {peak / 1e12:.0f} TFLOP/s")
    markers = ("s", "D", "v")  # an op's further headline cases
    for op, marker in ((op, b.roofline_marker) for op, b in BENCHES.items() if b.roofline_marker):
        for i, rows in enumerate(_headline_cases(results, op)):
            _plot_case(ax, op, marker if i == 0 else markers[(i - 1) % len(markers)], rows)
    ax.set_xlabel("arithmetic intensity (FLOP / byte, fewest bytes the op must move)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"roofline, {results.get('device', {}).get('name', 'GPU')}  (red: seed, blue: step, green: fast, "
                 "grey: CuPy)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    bar_op = next((op for op, b in BENCHES.items() if not b.roofline_marker), None)
    rows = _headline_rows(results, bar_op) if bar_op else []
    if rows:  # no arithmetic at all: placed against the copy bandwidth instead
        names = [r["name"] for r in rows]
        gbps = [r["gbps"] for r in rows]
        colors = ["tab:gray" if r["kind"] == "reference" else "tab:red" if r["kind"] == "seed" else "tab:green"
                  if r["kind"] == "fast" else "tab:olive" if r["kind"] == "diagnostic" else "tab:blue" for r in rows]
        bx.barh(range(len(rows)), gbps, color=colors)
        bx.set_yticks(range(len(rows)), names, fontsize=8)
        bx.invert_yaxis()
        copy = next((r for r in results["rows"] if r["op"] == bar_op and r["case"] == rows[0]["case"]
                     and r["kind"] == "ceiling" and "median_s" in r), None)
        if copy is not None:
            bx.axvline(copy["gbps"], color="k", lw=2, label=f"cudaMemcpy {copy['gbps']:.0f} GB/s")
        if "read" in ce:
            bx.axvline(ce["read"]["value"], color="k", ls=":", label=f"read ceiling {ce['read']['value']:.0f} GB/s")
        bx.set_xlabel("GB/s (read + write)")
        bx.set_title(f"{bar_op} (0 FLOP): {rows[0]['case']}\n(olive: diagnostics, not transposes)", fontsize=10)
        bx.legend(loc="lower right", fontsize=8)
        bx.grid(True, axis="x", alpha=0.3)
    else:
        bx.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError("bench.py --plot needs matplotlib, which is not installed (pip install matplotlib)") from None
    return plt
