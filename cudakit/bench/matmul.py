"""matmul in the bench: read against the FMA throughput measured in the run and cupy.matmul (cuBLAS)."""
from __future__ import annotations

import numpy as np

from .. import _check
from ..testing import random_array
from .base import Case, OpBench

SAMPLE_ROWS = 256  # float64 reference rows for large matmuls
SAMPLE_ABOVE = 2**34  # m * k * n beyond which the reference is sampled
SWEEP_MAX_FLOPS = 2**42  # the sweep draws again past this, to stay within its time


class MatmulBench(OpBench):
    op = "matmul"
    reference_name = "cupy.matmul (cuBLAS)"
    rate = "tflops"
    rate_note = "TFLOP/s = 2·m·k·n / time"
    fraction_header = "% of FMA peak"
    error_header = "rel. error†"
    roofline_marker = "^"

    def cases(self, quick):
        op, f32 = self.op, "float32"
        if quick:
            return [Case(op, f32, (1024, 1024, 1024), headline=True), Case(op, f32, (1025, 1023, 1027))]
        dims = ((512,) * 3, (2048,) * 3, (4096,) * 3, (8192,) * 3, (4097, 4095, 4099), (65536, 1024, 1024))
        layouts = [Case(op, f32, (4096,) * 3, order, fast_only=True) for order in ("FC", "CF", "FF")]
        # the shapes drop-in use meets: split k, one row, small k, skinny, batches (the fast variant and CuPy only)
        drop_in = [Case(op, t, d, fast_only=True) for t in (f32, "float64")
                   for d in ((256, 65536, 256), (128, 4096, 128), (1, 4096, 4096), (4096, 64, 4096), (2**24, 8, 8),
                             (64, 512, 512, 512), (10000, 32, 32, 32))]
        return ([Case(op, f32, d, headline=d == (4096,) * 3) for d in dims] + layouts
                + [Case(op, "float64", (4096,) * 3)] + drop_in)

    def shape_label(self, case):
        if len(case.dims) == 4:
            return f"{case.dims[0]} × " + "×".join(map(str, case.dims[1:])) + " (batch × m×k×n)"
        text = super().shape_label(case) + " (m×k×n)"
        orders = case.matmul_orders
        if orders != ("C", "C"):
            text += ", " + " and ".join(f"{x} F-order" for x, o in zip("AB", orders) if o == "F")
        return text

    def operand_elements(self, case):
        *batch, m, k, n = case.dims
        count = batch[0] if batch else 1
        return [count * m * k, count * k * n, count * m * n]

    def sweep_case(self, draw):
        dtype, order = draw.choice(("float32", "float64")), draw.choice(("C", "CF", "FC", "FF"))
        kind = draw.choice(("log", "log", "small k", "long k", "m=1", "n=1", "small m·n", "prime", "tiny", "batched"))
        m, k, n = draw.log_uniform(), draw.log_uniform(), draw.log_uniform()
        if kind == "small k":
            k = draw.log_uniform(1, 64)
        elif kind == "long k":
            m, n, k = draw.log_uniform(1, 512), draw.log_uniform(1, 512), draw.log_uniform(4096, 2**22)
        elif kind == "m=1":
            m = 1
        elif kind == "n=1":
            n = 1
        elif kind == "small m·n":
            m, n = draw.log_uniform(64, 256), draw.log_uniform(64, 256)
        elif kind == "prime":
            m, k, n = draw.prime(2, 5000), draw.prime(2, 5000), draw.prime(2, 5000)
        elif kind == "tiny":
            m, k, n = draw.log_uniform(1, 64), draw.log_uniform(1, 64), draw.log_uniform(1, 64)
        elif kind == "batched":  # batch counts from 1 to 10^4, C order
            count = draw.log_uniform(1, 10_000)
            m, k, n = draw.log_uniform(1, 1024), draw.log_uniform(1, 1024), draw.log_uniform(1, 1024)
            return Case(self.op, dtype, (count, m, k, n)) if 2 * count * m * k * n <= SWEEP_MAX_FLOPS else None
        if 2 * m * k * n > SWEEP_MAX_FLOPS:
            return None
        return Case(self.op, dtype, (m, k, n), order)

    def make(self, case):
        import cupy

        if len(case.dims) == 4:  # a batch of C-order products
            count, m, k, n = case.dims
            return {"A": random_array((count, m, k), case.dtype), "B": random_array((count, k, n), case.dtype),
                    "out": cupy.empty((count, m, n), case.dtype)}
        m, k, n = case.dims
        a_order, b_order = case.matmul_orders  # an F-order operand is the .T view of a C-order array
        a = random_array((m, k), case.dtype) if a_order == "C" else random_array((k, m), case.dtype).T
        b = random_array((k, n), case.dtype) if b_order == "C" else random_array((n, k), case.dtype).T
        return {"A": a, "B": b, "out": cupy.empty((m, n), case.dtype)}

    def call(self, variant, s):
        import cudakit

        return cudakit.matmul(s["A"], s["B"], variant=variant.name, out=s["out"], check=False)

    def reference(self, s):
        import cupy

        return cupy.matmul(s["A"], s["B"])

    def check_context(self, case, s0):
        import cupy

        *batch, m, k, n = case.dims
        if batch or m * k * n <= SAMPLE_ABOVE:
            return None, cupy.matmul(s0["A"].astype(cupy.float64), s0["B"].astype(cupy.float64))
        # float64 rows A[rows] @ B: cheap, and still every column and k
        rows = np.unique(np.random.default_rng(0).integers(0, m, SAMPLE_ROWS))
        rows = cupy.asarray(np.union1d(rows, [0, m - 1]))
        return rows, s0["A"][rows].astype(cupy.float64) @ s0["B"].astype(cupy.float64)

    def error(self, case, ctx, s0, out):
        rows, ref = ctx
        got = out if rows is None else out[rows]
        return {"kind": "rel", "value": _check.relative_error(got, ref), "k": case.dims[-2],
                "sampled_rows": None if rows is None else int(rows.size)}

    def fraction(self, row, case_ceiling, ceilings):
        key = "fp64" if row["dtype"] == "float64" else "fp32"
        return (key, row["tflops"] / ceilings[key]["value"]) if key in ceilings else None

    def footnotes(self, results):
        ce = results["ceilings"]
        peaks = ", ".join(f"{k.upper()} {ce[k]['value']:.1f} TFLOP/s" for k in ("fp32", "fp64") if k in ce)
        return [f"% of FMA peak: of the FMA throughput measured in this run ({peaks}); "
                "above 100% of the FP64 one means FP64 tensor cores (DMMA)",
                f"† matmuls above 2^34 multiply-adds: error on {SAMPLE_ROWS} sampled rows (A[rows] @ B in float64)"]
