"""What every op's bench class provides (OpBench) and the Case it measures. The runner, the tables and the plot
read only this interface, so an op's facts (its cases, bytes and FLOPs, labels, CuPy reference, ceiling) live in
its own class and nowhere else."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Case:
    op: str
    dtype: str
    dims: tuple  # transpose, matvec: (m, n); dot: (n,); matmul: (m, k, n)
    order: str = "C"  # matvec: the layout of A; matmul: of A and B ("C" = "CC", "CF", "FC", "FF")
    headline: bool = False  # the case the roofline plots
    fast_only: bool = False  # time only the fast variant (and the CuPy reference): a layout row
    per_call: bool = False  # time back-to-back calls, host overhead included (what a Python loop of calls sees)
    tf32: bool = False  # float32 products on the tensor cores in TF32 (ours and the reference's)

    def __post_init__(self):
        self.dims = tuple(int(d) for d in self.dims)

    @property
    def bench(self) -> "OpBench":
        from .registry import BENCHES

        return BENCHES[self.op]

    @property
    def itemsize(self) -> int:
        return 2 if self.dtype == "bfloat16" else np.dtype(self.dtype).itemsize  # (bfloat16: ml_dtypes' dtype)

    @property
    def label(self) -> str:
        text = f"{'TF32' if self.tf32 else self.dtype} {self.bench.shape_label(self)}"
        return text + ", per call" if self.per_call and self.op != "dot" else text

    @property
    def flops(self) -> int:
        return self.bench.flops(self)

    @property
    def bytes(self) -> int:
        """The fewest bytes the op must move: every input read once, every output written once."""
        return self.itemsize * self.bench.elements_moved(self)

    @property
    def matmul_orders(self) -> tuple[str, str]:
        return ("C", "C") if self.order == "C" else (self.order[0], self.order[1])


class OpBench:
    """How one op is set up, called, checked and reported; the runner does the rest for every op alike."""

    op = ""
    reference_name = ""  # the CuPy call each case is compared with
    rate = "gbps"  # the table's rate column: "gbps" or "tflops"
    rate_note = ""  # how the rate is counted, in the table's title
    fraction_header = ""  # the column that reads each row against its ceiling
    error_header = "rel. error"
    roofline_marker = None  # a matplotlib marker places the headline case on the roofline
    # Rows whose ratio to the reference a goal names: timed again ALTERNATIONS times, alternating with the
    # reference, so that a drift of the GPU's clocks over the case (a long matrix product heats it) weighs on both
    # sides alike; each side's time is the median of its rounds.
    paired: tuple = ()

    # ---- the cases and what each one costs
    def cases(self, quick: bool) -> list[Case]:
        raise NotImplementedError

    def shape_label(self, case: Case) -> str:
        return "×".join(str(d) for d in case.dims)

    def operand_elements(self, case: Case) -> list[int]:
        """Elements of each input and of the output."""
        raise NotImplementedError

    def elements_moved(self, case: Case) -> int:
        return sum(self.operand_elements(case))

    def operand_bytes(self, case: Case) -> list[int]:
        return [case.itemsize * e for e in self.operand_elements(case)]

    def flops(self, case: Case) -> int:
        return 2 * math.prod(case.dims)  # one multiply-add per element of A (matvec), of a (dot), per m, k, n (matmul)

    def work(self, case: Case) -> int:
        """What the op's time scales with (bytes or FLOPs), to estimate a slow row from a smaller case's rate."""
        return case.flops if self.rate == "tflops" else case.bytes

    def per_call(self, case: Case, l2_bytes: int) -> bool:
        """Time back-to-back calls with host time included, rather than GPU time behind a busy GPU."""
        return case.per_call

    def sweep_case(self, draw) -> Case | None:
        """One case of `bench.py --sweep`, drawn with `draw` (a sweep.Draw): log-uniform sizes and the op's
        adversarial classes. None: draw again."""
        raise NotImplementedError

    # ---- running a case
    def make(self, case: Case) -> dict:
        """One input set, with its output under "out"."""
        raise NotImplementedError

    def call(self, variant, s):
        raise NotImplementedError

    def reference(self, s):
        raise NotImplementedError

    def reference_for(self, case: Case) -> tuple:
        """(name, fn(s)) of the call case's × column reads against: reference_name and reference(), unless an
        op names another library for some cases."""
        return self.reference_name, self.reference

    def takes(self, case: Case, variant) -> bool:
        """Whether `variant` runs this case (its dtypes)."""
        return case.dtype in variant.dtypes

    def check_context(self, case: Case, s0: dict):
        """What error() needs beyond the output (a float64 reference, say), computed once per case."""
        return None

    def error(self, case: Case, ctx, s0: dict, out) -> dict:
        raise NotImplementedError

    def ceiling_rows(self, case: Case, sets: list) -> list[tuple]:
        """Extra rows timed in the case itself: (name, lesson, fn(s), error_of(out)) each."""
        return []

    def diagnostic(self, variant, s):
        """Bench-only kernels take (first input, an output of as many elements, shaped like it)."""
        first = next(iter(s.values()))
        like = s.get("like")
        if like is None:
            import cupy

            like = s["out"].reshape(first.shape) if s["out"].size == first.size else cupy.empty_like(first)
            s["like"] = like
        variant.run(first, like)
        return like

    def diagnostic_error(self, variant, s0: dict, out) -> dict:
        return {"kind": None, "note": "diagnostic: output is not the op's result"}

    # ---- reading the results
    def fraction(self, row: dict, case_ceiling: dict | None, ceilings: dict):
        """(ceiling name, fraction of it) for a timed row, or None where no ceiling applies."""
        return None

    def footnotes(self, results: dict) -> list[str]:
        return []


class ProductBench(OpBench):
    """An op whose result is the product of its two inputs (names in `operands`), checked against float64."""

    operands = ("A", "x")

    def check_context(self, case, s0):
        import cupy

        x, y = (s0[name].astype(cupy.float64) for name in self.operands)
        return x @ y

    def error(self, case, ref, s0, out):
        from .. import _check

        return {"kind": "rel", "value": _check.relative_error(out, ref), "k": case.dims[-1]}
