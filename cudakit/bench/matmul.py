"""matmul in the bench: read against the FMA throughput measured in the run and cupy.matmul (cuBLAS)."""
from __future__ import annotations

import numpy as np

from .. import _check
from ..testing import random_array
from .base import Case, OpBench
from .resize import _torch

HALVES = ("float16", "bfloat16")

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
    paired = ("fast", "mma_sync")

    def cases(self, quick):
        op, f32 = self.op, "float32"
        if quick:
            return [Case(op, f32, (1024, 1024, 1024), headline=True), Case(op, f32, (1025, 1023, 1027)),
                    Case(op, "float16", (1024, 1024, 1024))]
        dims = ((512,) * 3, (2048,) * 3, (4096,) * 3, (8192,) * 3, (4097, 4095, 4099), (65536, 1024, 1024))
        layouts = [Case(op, f32, (4096,) * 3, order, fast_only=True) for order in ("FC", "CF", "FF")]
        # the shapes drop-in use meets: split k, one row, small k, skinny, batches (the fast variant and CuPy only)
        drop_in = [Case(op, t, d, fast_only=True) for t in (f32, "float64")
                   for d in ((256, 65536, 256), (128, 4096, 128), (32, 2**20, 32), (1, 4096, 4096), (4096, 64, 4096),
                             (2**24, 8, 8), (64, 512, 512, 512), (10000, 32, 32, 32))]
        # the tensor cores: float16 and bfloat16 (bfloat16 where ml_dtypes is installed), TF32 when asked for
        halves = ("float16", "bfloat16") if _ml_dtypes() else ("float16",)
        tensor = [Case(op, t, d, headline=t == "float16" and d == (8192,) * 3) for t in halves
                  for d in ((2048,) * 3, (4096,) * 3, (8192,) * 3, (4097, 4095, 4099), (65536, 1024, 1024),
                            (64, 1024, 1024, 1024))]
        tensor += [Case(op, f32, (8192,) * 3, tf32=True), Case(op, "float16", (4096,) * 3, "CF", fast_only=True),
                   Case(op, "float16", (4096,) * 3, "FC", fast_only=True)]
        return ([Case(op, f32, d, headline=d == (4096,) * 3) for d in dims] + layouts
                + [Case(op, "float64", (4096,) * 3), Case(op, "float64", (8192,) * 3)] + drop_in + tensor)

    def takes(self, case, variant):
        """The tensor-core variants run the float16, bfloat16 and TF32 cases, the others the rest; fast all."""
        tensor = case.tf32 or case.dtype in HALVES
        return case.dtype in variant.dtypes and (variant.name == "fast" or variant.tensor_core == tensor)

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

        dtype = _dtype(case.dtype)
        if len(case.dims) == 4:  # a batch of C-order products
            count, m, k, n = case.dims
            return {"A": random_array((count, m, k), dtype), "B": random_array((count, k, n), dtype),
                    "out": cupy.empty((count, m, n), dtype), "tf32": case.tf32}
        m, k, n = case.dims
        a_order, b_order = case.matmul_orders  # an F-order operand is the .T view of a C-order array
        a = random_array((m, k), dtype) if a_order == "C" else random_array((k, m), dtype).T
        b = random_array((k, n), dtype) if b_order == "C" else random_array((n, k), dtype).T
        return {"A": a, "B": b, "out": cupy.empty((m, n), dtype), "tf32": case.tf32}

    def call(self, variant, s):
        import cudakit

        return cudakit.matmul(s["A"], s["B"], variant=variant.name, out=s["out"], check=False, tf32=s["tf32"])

    def reference(self, s):
        import cupy
        from cupy._core import _routines_linalg as linalg

        if not s["tf32"]:
            return cupy.matmul(s["A"], s["B"])
        before = linalg.get_compute_type(np.float32)
        linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32)  # what CUPY_TF32=1 selects
        try:
            return cupy.matmul(s["A"], s["B"])
        finally:
            linalg.set_compute_type(np.float32, before)

    def reference_for(self, case):
        """torch.bmm for batches of 16-bit products (CuPy sums float16 batches in float32 and has no bfloat16
        batch), cupy.matmul otherwise."""
        if len(case.dims) == 4 and case.dtype in HALVES and _torch():
            return "torch.matmul (cuBLAS strided batched)", torch_matmul
        return self.reference_name, self.reference

    def ceiling_rows(self, case, sets):
        """The other library, for scale, on the tensor-core cases: torch.matmul, or cupy.matmul where torch is
        the reference."""
        if not (case.tf32 or case.dtype in HALVES) or not _torch():
            return []
        reference = {}

        def error_of(out):
            if "ctx" not in reference:
                reference["ctx"] = self.check_context(case, sets[0])
            return self.error(case, reference["ctx"], sets[0], out)

        if self.reference_for(case)[1] is torch_matmul:  # (CuPy has no bfloat16 batch to show)
            return [] if case.dtype == "bfloat16" else [(self.reference_name, "for scale", self.reference, error_of)]
        return [("torch.matmul (cuBLAS)", "for scale", torch_matmul, error_of)]

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
        if row.get("tf32") or row["dtype"] in HALVES:  # against wgmma's roof on Hopper, else mma.sync's
            keys = ("wgmma_tf32", "mma_tf32") if row.get("tf32") else ("wgmma16", "mma16")
            key = next((k for k in keys if k in ceilings), keys[-1])
        else:
            key = "fp64" if row["dtype"] == "float64" else "fp32"
        return (key, row["tflops"] / ceilings[key]["value"]) if key in ceilings else None

    def footnotes(self, results):
        ce = results["ceilings"]
        peaks = ", ".join(f"{k.upper()} {ce[k]['value']:.1f} TFLOP/s" for k in ("fp32", "fp64") if k in ce)
        mma = ", ".join(f"{k} {ce[k]['value']:.0f} TFLOP/s" for k in ("wgmma16", "wgmma_tf32", "mma16", "mma_tf32")
                        if k in ce)
        return [f"% of FMA peak: of the FMA throughput measured in this run ({peaks}); "
                "above 100% of the FP64 one means FP64 tensor cores (DMMA); float16, bfloat16 and TF32 rows: of "
                f"the tensor-core throughput measured ({mma}; wgmma's where the GPU has it)",
                f"† matmuls above 2^34 multiply-adds: error on {SAMPLE_ROWS} sampled rows (A[rows] @ B in float64)"]


def _ml_dtypes():
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


def _dtype(name: str):
    return np.dtype(_ml_dtypes().bfloat16) if name == "bfloat16" else np.dtype(name)


_torch_views: dict = {}


def _as_torch(x):
    """A torch tensor sharing x's memory (bfloat16 through int16: DLPack need not know ml_dtypes'), made once per
    array."""
    key = (x.data.ptr, x.shape, x.strides)
    if key not in _torch_views:
        torch = _torch()
        if len(_torch_views) >= 64:
            _torch_views.clear()
        t = torch.from_dlpack(x.view(np.int16)).view(torch.bfloat16) if x.dtype.name == "bfloat16" else \
            torch.from_dlpack(x)
        _torch_views[key] = (t, x)  # (x kept alive: its address is the key)
    return _torch_views[key][0]


def torch_matmul(s):
    """torch.matmul of the set's operands on CuPy's current stream (TF32 as the set asks); a CuPy view of the
    result."""
    import cupy

    torch = _torch()
    a, b = _as_torch(s["A"]), _as_torch(s["B"])
    ptr = cupy.cuda.get_current_stream().ptr
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = bool(s["tf32"])
    try:
        with torch.cuda.stream(torch.cuda.ExternalStream(ptr)) if ptr else torch.cuda.stream(None):
            y = torch.matmul(a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    bits = y.view(torch.int16) if y.dtype == torch.bfloat16 else y
    view = cupy.from_dlpack(bits)
    return view.view(s["A"].dtype) if y.dtype == torch.bfloat16 else view
