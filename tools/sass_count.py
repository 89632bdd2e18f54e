"""Instruction counts of a kernel's main loop from its SASS (no GPU): per function, the instructions from its first
to its last tensor-core instruction (DMMA, HMMA, HGMMA), and how many of them are register moves.

    PYTHONPATH=. python3 tools/sass_count.py FAMILY 'EXPRESSION' [...] [--arch sm_90]   compile with NVRTC first
    python3 tools/sass_count.py --sass FILE                                              read cuobjdump -sass output

Needs cuobjdump (the CUDA toolkit, or the nvidia-cuda-cuobjdump wheel) on PATH or in $CUOBJDUMP.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile

TENSOR = ("DMMA", "HMMA", "HGMMA")


def counts(sass: str) -> list[tuple[str, int, int, int, collections.Counter]]:
    """(function, tensor instructions, instructions in the span, moves in the span, opcode counts of the span)."""
    rows = []
    for text in re.split(r"\n\s+Function : ", sass)[1:]:
        name = text.split("\n")[0].strip()
        ops = [op for _, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", text)]
        tensor = [i for i, op in enumerate(ops) if op.split(".")[0] in TENSOR]
        if not tensor:
            continue
        span = ops[tensor[0]:tensor[-1] + 1]
        moves = sum(op.startswith("IMAD.MOV") or op == "MOV" for op in span)
        rows.append((name, len(tensor), len(span), moves, collections.Counter(op.split(".")[0] for op in span)))
    return rows


def cubin_sass(family: str, expressions: list[str], arch: str) -> str:
    from cuda.bindings import nvrtc

    from cudakit import _compile

    def ok(result):
        assert result[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS, result[0]
        return result[1] if len(result) == 2 else None

    prog = ok(nvrtc.nvrtcCreateProgram(_compile.source(family).encode(), f"{family}.cu".encode(), 0, [], []))
    try:
        for expr in expressions:
            ok(nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
        opts = [o.encode() for o in _compile.options() + (f"--gpu-architecture={arch}",)]
        ok(nvrtc.nvrtcCompileProgram(prog, len(opts), opts))
        cubin = b" " * ok(nvrtc.nvrtcGetCUBINSize(prog))
        nvrtc.nvrtcGetCUBIN(prog, cubin)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([os.environ.get("CUOBJDUMP", "cuobjdump"), "-sass", f.name], capture_output=True,
                              text=True, check=True).stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("family", nargs="?")
    ap.add_argument("expressions", nargs="*")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--sass")
    args = ap.parse_args()
    sass = open(args.sass).read() if args.sass else cubin_sass(args.family, args.expressions, args.arch)
    for name, tensor, span, moves, ops in counts(sass):
        print(f"{name}\n  {tensor} tensor-core instructions; {span} from the first to the last, {moves} of them "
              f"moves; {', '.join(f'{op} {n}' for op, n in ops.most_common(6))}")


if __name__ == "__main__":
    main()
