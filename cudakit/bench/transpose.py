"""transpose in the bench: read against cudaMemcpy of the same bytes, timed in the same case."""
from __future__ import annotations

import math

from .base import Case, OpBench
from ..testing import random_array


class TransposeBench(OpBench):
    op = "transpose"
    reference_name = "cupy.ascontiguousarray(A.T)"
    rate_note = "GB/s = 2 × matrix bytes / time"
    fraction_header = "% of memcpy"
    error_header = "exact"

    def cases(self, quick):
        op, f32 = self.op, "float32"
        if quick:
            return [Case(op, f32, (8192, 8192), headline=True), Case(op, "int8", (8191, 8193))]
        cases = [Case(op, t, (16384, 16384), headline=t == f32) for t in ("int8", "float16", f32, "float64")]
        cases += [Case(op, f32, (8192, 8192))]
        cases += [Case(op, t, d) for d in ((1024, 262144), (262144, 1024)) for t in ("int8", "float16", f32, "float64")]
        cases += [Case(op, t, (8191, 8193)) for t in ("int8", "float16", f32, "float64")]
        # thin matrices and image layouts (the fast variant and CuPy only): point clouds (N, 3) both ways,
        # NHWC -> NCHW and back with 3 and 64 channels
        thin = [Case(op, t, d, fast_only=True) for t in ("int8", f32) for d in ((2**25, 3), (3, 2**25))]
        images = [Case(op, t, d, axes, fast_only=True) for t in ("uint8", f32)
                  for d, axes in (((64, 512, 512, 3), "0312"), ((64, 3, 512, 512), "0231"),
                                  ((32, 128, 128, 64), "0312"), ((32, 64, 128, 128), "0231"),
                                  ((32, 128, 128, 64), "0213"))]
        return cases + thin + images

    def takes(self, case, variant):
        """Every transpose variant moves elements of any size (the variant table's dtypes name the float ones)."""
        return True

    def operand_elements(self, case):
        return [math.prod(case.dims)] * 2

    def shape_label(self, case):
        text = super().shape_label(case)
        return text if len(case.dims) == 2 else f"{text}, axes {case.order}"

    def axes(self, case):
        return tuple(int(a) for a in case.order) if len(case.dims) > 2 else None

    def sweep_case(self, draw):
        dtype = draw.choice(("int8", "float16", "float32", "float64"))
        kind = draw.choice(("log", "log", "thin", "prime", "tiny", "nd"))
        if kind == "nd":  # image layouts: NHWC <-> NCHW, HWC -> CHW, NHWC -> NWHC, with 1 to 64 channels
            n, h, w, c = draw.log_uniform(1, 64), draw.log_uniform(1, 4096), draw.log_uniform(1, 4096), \
                draw.log_uniform(1, 64)
            dims, axes = draw.choice((((n, h, w, c), "0312"), ((n, c, h, w), "0231"), ((h, w, c), "201"),
                                      ((n, h, w, c), "0213")))
            return Case(self.op, dtype, dims, axes)
        if kind == "thin":  # a side below 32: a point cloud (N, 3), or its transpose
            dims = (draw.small(), draw.log_uniform())[::draw.choice((1, -1))]
        elif kind == "prime":
            dims = (draw.prime(), draw.prime())
        elif kind == "tiny":
            dims = (draw.log_uniform(1, 64), draw.log_uniform(1, 64))
        else:
            dims = (draw.log_uniform(), draw.log_uniform())
        return Case(self.op, dtype, dims)

    def flops(self, case):
        return 0

    def make(self, case):
        import cupy

        axes = self.axes(case)
        shape = case.dims[::-1] if axes is None else tuple(case.dims[i] for i in axes)
        return {"A": random_array(case.dims, case.dtype), "out": cupy.empty(shape, case.dtype), "axes": axes}

    def call(self, variant, s):
        import cudakit

        return cudakit.transpose(s["A"], s["axes"], variant=variant.name, out=s["out"], check=False)

    def reference(self, s):
        import cupy

        return cupy.ascontiguousarray(cupy.transpose(s["A"], s["axes"]))

    def error(self, case, ctx, s0, out):
        import cupy

        want = cupy.transpose(s0["A"], s0["axes"])
        return {"kind": "exact", "value": bool(cupy.array_equal(out, want)), "against": "A.T"}

    def ceiling_rows(self, case, sets):
        import cupy

        from .._ceilings import device_copy

        def memcpy(s):
            like = s["out"].reshape(s["A"].shape)
            device_copy(like, s["A"])
            return like

        def error_of(out):
            return {"kind": "exact", "against": "copy of A", "value": bool(cupy.array_equal(out, sets[0]["A"]))}

        return [("cudaMemcpy (copy ceiling)", "the same bytes, copied by the driver", memcpy, error_of)]

    def diagnostic_error(self, variant, s0, out):
        import cupy

        if "copy" in variant.name.lower():  # the copy kernels should reproduce A exactly
            return {"kind": "exact", "value": bool(cupy.array_equal(out, s0["A"])), "against": "copy of A"}
        return super().diagnostic_error(variant, s0, out)

    def fraction(self, row, case_ceiling, ceilings):
        if row["kind"] == "ceiling":
            return None
        if case_ceiling is not None:
            return "cudaMemcpy, same bytes", case_ceiling["median_s"] / row["median_s"]
        if "copy" in ceilings:
            return "copy", row["gbps"] / ceilings["copy"]["value"]
        return None

    def footnotes(self, results):
        return ["% of memcpy: of cudaMemcpy of the same bytes (read + write) measured in this case; "
                "exact: bitwise equal to A.T (the copy kernels: to A)"]
