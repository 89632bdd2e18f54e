"""The GPU as seed 002 lists it (cudaGetDeviceProperties and cudaDeviceGetAttribute), and whether there is one."""
from __future__ import annotations


def no_gpu_reason() -> str | None:
    """None when CuPy sees a CUDA GPU, else why not, in a few words (for one sentence on stderr)."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no CuPy, no driver, driver too old, no device
        text = str(exc).strip().splitlines()[0].strip() if str(exc).strip() else type(exc).__name__
        return text.rstrip(".")
    return None if count > 0 else "no CUDA device is visible"


def attribute(name: str, device_id: int):
    """cudaDeviceGetAttribute(cudaDevAttr<name>), or None where this CUDA does not know it."""
    from cupy.cuda import runtime

    enum = getattr(runtime, f"cudaDevAttr{name}", None)
    if enum is None:
        return None
    try:
        return runtime.deviceGetAttribute(enum, device_id)
    except Exception:
        return None


def device_facts(device_id: int = 0) -> dict:
    """The device listing of seed 002, from cudaGetDeviceProperties and cudaDeviceGetAttribute."""
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)

    def pick(prop: str, attr: str):
        # CUDA 13 dropped some fields (clock rates) from cudaDeviceProp; the attributes still carry them
        value = attribute(attr, device_id)
        return props.get(prop) if value is None else value

    name = props.get("name", b"?")
    facts = {
        "name": name.decode(errors="replace") if isinstance(name, bytes) else str(name),
        "compute_capability": f"{props.get('major')}.{props.get('minor')}",
        "global_memory_bytes": props.get("totalGlobalMem"),
        "l2_cache_bytes": pick("l2CacheSize", "L2CacheSize"),
        "shared_memory_per_block_bytes": props.get("sharedMemPerBlock"),
        "shared_memory_per_block_optin_bytes": pick("sharedMemPerBlockOptin", "MaxSharedMemoryPerBlockOptin"),
        "shared_memory_per_sm_bytes": pick("sharedMemPerMultiprocessor", "MaxSharedMemoryPerMultiprocessor"),
        "sm_clock_khz": pick("clockRate", "ClockRate"),
        "memory_clock_khz": pick("memoryClockRate", "MemoryClockRate"),
        "memory_bus_width_bits": pick("memoryBusWidth", "GlobalMemoryBusWidth"),
        "sm_count": pick("multiProcessorCount", "MultiProcessorCount"),
        "warp_size": pick("warpSize", "WarpSize"),
        "max_blocks_per_sm": pick("maxBlocksPerMultiProcessor", "MaxBlocksPerMultiprocessor"),
        "max_threads_per_block": pick("maxThreadsPerBlock", "MaxThreadsPerBlock"),
        "max_block_dims": list(props.get("maxThreadsDim", ())),
        "max_grid_dims": list(props.get("maxGridSize", ())),
    }
    clock, bus = facts["memory_clock_khz"], facts["memory_bus_width_bits"]
    # double data rate: two transfers per memory clock over the whole bus
    facts["peak_memory_bandwidth_bytes_s"] = 2 * clock * 1e3 * bus / 8 if clock and bus else None
    return facts


def device_rows(facts: dict) -> list[tuple[str, str]]:
    """(label, value) pairs for a table, in the order of seed 002's listing."""

    def size(key, unit, scale):
        v = facts.get(key)
        return "n/a" if v is None else f"{v / scale:.2f} {unit}" if v / scale % 1 else f"{v // scale} {unit}"

    def clock(key):
        v = facts.get(key)
        return "n/a" if not v else f"{v / 1e6:.3f} GHz"

    def dims(key):
        v = facts.get(key)
        return " x ".join(str(d) for d in v) if v else "n/a"

    bw = facts.get("peak_memory_bandwidth_bytes_s")
    return [
        ("Device name", str(facts["name"])),
        ("Compute capability", str(facts["compute_capability"])),
        ("Global memory", size("global_memory_bytes", "GiB", 2**30)),
        ("L2 cache", size("l2_cache_bytes", "MiB", 2**20)),
        ("Shared memory per block", size("shared_memory_per_block_bytes", "KiB", 2**10)),
        ("Shared memory per block (opt-in max)", size("shared_memory_per_block_optin_bytes", "KiB", 2**10)),
        ("Shared memory per SM", size("shared_memory_per_sm_bytes", "KiB", 2**10)),
        ("SM clock", clock("sm_clock_khz")),
        ("Memory clock", clock("memory_clock_khz")),
        ("Memory bus width", "n/a" if not facts.get("memory_bus_width_bits") else f"{facts['memory_bus_width_bits']} bit"),
        ("Peak memory bandwidth (clock x bus)", "n/a" if not bw else f"{bw / 1e9:.0f} GB/s"),
        ("SM count", str(facts["sm_count"])),
        ("Warp size", str(facts["warp_size"])),
        ("Max blocks per SM", str(facts["max_blocks_per_sm"])),
        ("Max threads per block", str(facts["max_threads_per_block"])),
        ("Max block dimensions", dims("max_block_dims")),
        ("Max grid dimensions", dims("max_grid_dims")),
    ]
