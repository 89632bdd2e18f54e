"""The device's limits, measured in the same run as the ops: streaming read, device-to-device copy, FP32 and FP64
FMA throughput, and the per-call floor of an empty launch. Every row of the tables is read against one of them."""
from __future__ import annotations

import numpy as np

from .. import _ceilings
from .timing import measure

# GiBs, not MiBs: a launch's fixed cost and its last partial wave are then a negligible share of the time, where a
# smaller working set read measurably slower (docs/NOTES.md, "bench/ceilings.py: GiB working sets").
CEILING_BYTES = 2**30


def measure_ceilings(budget, device_id: int, step=lambda text: None) -> dict:
    """{key: measurement} for read, copy, fp32, fp64 and launch; step(text) is called after each."""
    import cupy

    src = cupy.empty(2 * CEILING_BYTES, cupy.uint8)
    dst = cupy.empty(CEILING_BYTES, cupy.uint8)
    src.fill(1)
    sink32 = cupy.empty(_ceilings.blocks(device_id), cupy.uint32)
    out = {}

    def record(key, what, unit, timed, amount):  # a rate of `amount` per second, or a time in µs
        stats, samples = timed
        value = stats.median * 1e6 if unit == "µs" else amount / stats.median / (1e9 if unit == "GB/s" else 1e12)
        out[key] = {"what": what, "unit": unit, "value": value, "median_s": stats.median, "p10_s": stats.p10,
                    "p90_s": stats.p90, "n": stats.n, "spread": stats.spread, "samples_s": samples}
        step(f"ceiling: {what}")

    record("read", f"streaming read of {src.nbytes >> 20} MiB (16-byte loads)", "GB/s",
           measure(lambda k: _ceilings.stream_read(src, sink32), budget), src.nbytes)
    src = src[:CEILING_BYTES]
    record("copy", f"cudaMemcpy device to device, {CEILING_BYTES >> 20} MiB (read + write)", "GB/s",
           measure(lambda k: _ceilings.device_copy(dst, src), budget), 2 * CEILING_BYTES)
    del src, dst
    for key, dtype, iters in (("fp32", np.float32, 1 << 15), ("fp64", np.float64, 1 << 14)):
        sink = cupy.empty(_ceilings.blocks(device_id) * _ceilings.THREADS, dtype)
        flops = 2 * _ceilings.FMA_CHAINS * iters * sink.size
        record(key, f"{np.dtype(dtype).name} FMA chains ({_ceilings.FMA_CHAINS} per thread)", "TFLOP/s",
               measure(lambda k: _ceilings.fma_throughput(dtype, iters, sink), budget), flops)
    if int(cupy.cuda.Device(device_id).compute_capability) >= 80:
        sink = cupy.empty(_ceilings.blocks(device_id) * _ceilings.THREADS, cupy.float32)
        for key, tf32, iters in (("mma16", False, 1 << 12), ("mma_tf32", True, 1 << 12)):
            flops = 2 * 16 * 8 * (8 if tf32 else 16) * _ceilings.MMA_CHAINS * iters * (sink.size // 32)
            record(key, f"mma.sync {'TF32 m16n8k8' if tf32 else 'float16 m16n8k16'} chains, float32 sums "
                   f"({_ceilings.MMA_CHAINS} per warp; wgmma goes past it on Hopper)", "TFLOP/s",
                   measure(lambda k: _ceilings.mma_throughput(tf32, iters, sink), budget), flops)
    from .. import _hopper

    if _hopper.available(device_id):  # Hopper: wgmma, the tensor cores' real roof
        sink = cupy.empty(_hopper.ceiling_sink_size(device_id), cupy.float32)
        for key, name, iters in (("wgmma16", "float16", 1 << 12), ("wgmma_tf32", "float32", 1 << 12)):
            flops = _hopper.wgmma_throughput(name, 1, sink) * iters  # (the FLOPs per iteration, times the count)
            record(key, f"wgmma {'TF32' if name == 'float32' else 'float16'} m64n256 from shared memory, float32 "
                   "sums (two warpgroups per SM)", "TFLOP/s",
                   measure(lambda k: _hopper.wgmma_throughput(name, iters, sink), budget), flops)
    record("launch", "an empty kernel per call, back to back (host-bound: the floor of a per-call time)", "µs",
           measure(lambda k: _ceilings.empty_launch(), budget, per_call=True), None)
    return out


def read_fraction(row: dict, ceilings: dict):
    """A memory-bound op's row read against the streaming-read ceiling."""
    return ("read", row["gbps"] / ceilings["read"]["value"]) if "read" in ceilings else None


def read_footnote(results: dict) -> list[str]:
    ce = results["ceilings"]
    if "read" not in ce:
        return []
    return [f"% of read: of the streaming-read ceiling, {ce['read']['value']:.0f} GB/s measured in this run"]
