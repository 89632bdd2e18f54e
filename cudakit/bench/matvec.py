"""matvec in the bench: read against the streaming-read ceiling and cuBLAS `A @ x`."""
from __future__ import annotations

from ..testing import random_array
from .base import Case, ProductBench
from .ceilings import read_fraction, read_footnote


class MatvecBench(ProductBench):
    op = "matvec"
    reference_name = "A @ x (cuBLAS)"
    rate_note = "GB/s = bytes of A, x and y / time"
    fraction_header = "% of read"
    roofline_marker = "s"

    def cases(self, quick):
        op, f32, f64 = self.op, "float32", "float64"
        if quick:
            return [Case(op, f32, (4096, 4096), "C", True), Case(op, f32, (4096, 4096), "F"),
                    Case(op, f32, (4194304, 64), "C")]
        shapes = ((16384, 16384), (4096, 4096), (4194304, 64), (64, 4194304))
        # 4096² again per call: whether a loop of calls sees CuPy's host time for `A @ x` at a kernel this short,
        # which the GPU-time rows hide (their runs are queued behind a busy GPU).
        per_call = [Case(op, t, (4096, 4096), o, fast_only=True, per_call=True) for t in (f32, f64) for o in "CF"]
        return [Case(op, t, s, o, t == f32 and s == shapes[0] and o == "C")
                for t in (f32, f64) for s in shapes for o in ("C", "F")] + per_call

    def shape_label(self, case):
        order = ", A C-order" if case.order == "C" else ", A F-order (a .T view)"
        return super().shape_label(case) + order

    def operand_elements(self, case):
        m, n = case.dims
        return [m * n, n, m]

    def sweep_case(self, draw):
        dtype, order = draw.choice(("float32", "float64")), draw.choice("CF")
        kind = draw.choice(("log", "log", "m=1", "n=1", "thin", "prime", "tiny"))
        m, n = draw.log_uniform(), draw.log_uniform()
        if kind == "m=1":
            m = 1
        elif kind == "n=1":
            n = 1
        elif kind == "thin":
            m, n = (draw.small(), n) if draw.choice((True, False)) else (m, draw.small())
        elif kind == "prime":
            m, n = draw.prime(), draw.prime()
        elif kind == "tiny":
            m, n = draw.log_uniform(1, 64), draw.log_uniform(1, 64)
        return Case(self.op, dtype, (m, n), order)

    def make(self, case):
        import cupy

        m, n = case.dims
        a = random_array((m, n), case.dtype) if case.order == "C" else random_array((n, m), case.dtype).T
        return {"A": a, "x": random_array((n,), case.dtype), "out": cupy.empty((m,), case.dtype)}

    def call(self, variant, s):
        import cudakit

        return cudakit.matvec(s["A"], s["x"], variant=variant.name, out=s["out"], check=False)

    def reference(self, s):
        return s["A"] @ s["x"]

    def fraction(self, row, case_ceiling, ceilings):
        return read_fraction(row, ceilings)

    def footnotes(self, results):
        return read_footnote(results)
