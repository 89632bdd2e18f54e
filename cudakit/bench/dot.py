"""dot in the bench: read against the streaming-read ceiling and cupy.dot; sizes that fit in L2 are timed per call."""
from __future__ import annotations

from ..testing import random_array
from .base import Case, ProductBench
from .ceilings import read_fraction, read_footnote


class DotBench(ProductBench):
    op = "dot"
    operands = ("a", "b")
    reference_name = "cupy.dot(a, b) (cuBLAS)"
    rate_note = "GB/s = bytes of a and b / time"
    fraction_header = "% of read"
    roofline_marker = "o"

    def cases(self, quick):
        op, f32, f64 = self.op, "float32", "float64"
        if quick:
            return [Case(op, f32, (2**16,)), Case(op, f32, (2**24,), headline=True), Case(op, f64, (2**20,))]
        return ([Case(op, f32, (2**e,), headline=e == 28) for e in (16, 20, 24, 28)]
                + [Case(op, f64, (2**e,)) for e in (16, 20, 24, 27)])

    def shape_label(self, case):
        n = case.dims[0]
        return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)

    def operand_elements(self, case):
        return [case.dims[0], case.dims[0]]

    def sweep_case(self, draw):
        kind = draw.choice(("log", "log", "prime", "tiny"))
        n = draw.prime(2, 2**26) if kind == "prime" else draw.log_uniform(1, 64) if kind == "tiny" else \
            draw.log_uniform()
        return Case(self.op, draw.choice(("float32", "float64")), (n,))

    def per_call(self, case, l2_bytes):
        """A dot small enough to sit in L2 is host-bound: its time is what a loop of calls sees."""
        return case.per_call or case.bytes <= l2_bytes

    def make(self, case):
        import cupy

        n = case.dims[0]
        return {"a": random_array((n,), case.dtype), "b": random_array((n,), case.dtype),
                "out": cupy.empty((), case.dtype)}

    def call(self, variant, s):
        import cudakit

        return cudakit.dot(s["a"], s["b"], variant=variant.name, out=s["out"], check=False)

    def reference(self, s):
        import cupy

        return cupy.dot(s["a"], s["b"])

    def fraction(self, row, case_ceiling, ceilings):
        return read_fraction(row, ceilings)

    def footnotes(self, results):
        return read_footnote(results)
