"""What the copy-relative probes (lines_probe.py, bytes_probe.py) share: check every call's output, then time the
calls in alternating rounds and print each against the first (a device-to-device copy of the same bytes)."""
from __future__ import annotations

import cupy

from cudakit.bench import timing
from cudakit.testing import poison


def check_and_time(calls: dict, out, want, budget, rounds: int, header: str, width: int = 28) -> None:
    """calls: name -> call(k), the copy first; out: the array every call but the copy writes for k = 0, compared bit for
    bit with `want` after poisoning."""
    bits = f"u{out.itemsize}"
    wrong = []
    for name, call in list(calls.items())[1:]:
        poison(out)
        call(0)
        if not cupy.array_equal(out.view(bits), want.view(bits)):
            wrong.append(name)
    medians = timing.alternate(list(calls.values()), budget, rounds)
    print(f"\n{header}")
    copy = medians[0]
    for name, m in zip(calls, medians):
        ratios = sorted(c / x for c, x in zip(copy, m))
        flag = "  WRONG" if name in wrong else ""
        print(f"  {name:{width}s} {sorted(m)[len(m) // 2] * 1e6:8.1f} us (median of rounds)  x copy per round: median "
              f"{ratios[len(m) // 2]:5.3f}, min {ratios[0]:5.3f}, max {ratios[-1]:5.3f}{flag}")
