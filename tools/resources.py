"""ptxas's resource report for the matmul tiles, with no GPU: registers, spills, shared memory, and the blocks per
SM those allow. This is the compiler's half of "what limits it" (the profiler's half needs the GPU: ncu).

    python3 tools/resources.py [--arch sm_90] [--layout CC|FC|CF|FF]

Needs cuda-bindings and NVRTC (the test extra). Each tile is compiled for the given layout with 16-byte loads.
"""
from __future__ import annotations

import argparse
import os
import re

import numpy as np

from cudakit import _compile, _tune
from cudakit.matmul import BLOCKTILE_2D, DOUBLE_BUFFERED, WARP_TILED

os.environ["CUDA_CACHE_DISABLE"] = "1"  # NVRTC's cache would return earlier programs without ptxas's report
REGISTERS_PER_SM, MAX_THREADS_PER_SM = 65536, 2048
SHARED_PER_SM = {"sm_70": 96, "sm_75": 64, "sm_80": 164, "sm_86": 100, "sm_89": 100, "sm_90": 228}  # KiB

ENTRY = re.compile(r"Compiling entry function '(\w+)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def report(log: str) -> dict:
    """{mangled name: {"registers", "spill_stores", "spill_loads", "smem"}} parsed from a ptxas -v log."""
    out, name = {}, None
    for line in log.splitlines():
        if m := ENTRY.search(line):
            name = m.group(1)
            out[name] = {"registers": 0, "spill_stores": 0, "spill_loads": 0, "smem": 0}
        elif name and (m := FRAME.search(line)):
            out[name].update(spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif name and (m := USED.search(line)):
            out[name].update(registers=int(m.group(1)), smem=int(m.group(2) or 0))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--layout", default="CC", choices=("CC", "FC", "CF", "FF"),
                    help="A's and B's order (C: row-major); default CC, the plain A @ B")
    args = ap.parse_args()
    a_kc, b_kc = args.layout[0] == "C", args.layout[1] == "F"  # k is contiguous in C-order A and F-order B
    cc = int(args.arch[3:])
    print(f"matmul tiles on {args.arch}, layout {args.layout}, 16-byte loads")
    print(f"{'dtype':8} {'tile':40} {'threads':>7} {'regs':>5} {'spill st/ld':>11} {'smem KiB':>8} "
          f"{'blocks/SM (regs, smem, threads)':>32}")
    for dtype, candidates in _tune.CANDIDATES.items():
        tiles = dict.fromkeys([BLOCKTILE_2D[dtype], WARP_TILED[dtype], DOUBLE_BUFFERED[dtype], *candidates,
                               *_tune.SPLIT_TILES.get(dtype, ())])
        for tile in tiles:
            if not tile.supports(dtype, cc):
                continue
            expr = tile.expression(dtype, a_kc, b_kc, True)
            ok, log, lowered = _compile.compile_offline("matmul", [expr], args.arch, ("--ptxas-options=-v",))
            if not ok:
                print(f"{np.dtype(dtype).name:8} {tile.name:40} failed to compile:\n{log}")
                continue
            r = report(log)[lowered[expr]]
            by_regs = REGISTERS_PER_SM // (r["registers"] * tile.threads)
            by_smem = SHARED_PER_SM.get(args.arch, 48) * 1024 // max(r["smem"], 1)
            by_threads = MAX_THREADS_PER_SM // tile.threads
            limits = f"{min(by_regs, by_smem, by_threads)} ({by_regs}, {by_smem}, {by_threads})"
            print(f"{np.dtype(dtype).name:8} {tile.name:40} {tile.threads:7} {r['registers']:5} "
                  f"{r['spill_stores']:>5}/{r['spill_loads']:<5} {r['smem'] / 1024:8.1f} {limits:>32}")


if __name__ == "__main__":
    main()
