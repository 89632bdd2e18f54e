"""The ops the bench knows, in the order it runs them: adding an op is one class and one line here.

dot first: its small sizes are host-bound per-call rows, read against the launch floor, so they are timed right
after it, in the same host state (docs/NOTES.md, "bench/registry.py: the bench runs dot first").
"""
from .dot import DotBench
from .matmul import MatmulBench
from .matvec import MatvecBench
from .resize import ResizeBench
from .transpose import TransposeBench

BENCHES = {b.op: b for b in (
    DotBench(),
    TransposeBench(),
    MatvecBench(),
    MatmulBench(),
    ResizeBench(),
)}
OPS = tuple(BENCHES)
