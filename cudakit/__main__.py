"""`python -m cudakit info` (the GPU as seed 002 lists it, plus the active matmul tiles) and `python -m cudakit tune`."""
from __future__ import annotations

import argparse
import sys

import numpy as np


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cudakit", description="cudakit: device facts and matmul tuning.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{info,tune}")
    sub.add_parser("info", help="list every visible GPU's properties and the matmul tile configuration in use",
                   description="List every visible GPU's properties and the matmul tile configuration in use.")
    sub.add_parser("tune", help="time the matmul tile configurations on this GPU and keep the fastest",
                   description="Time the matmul tile configurations on this GPU and keep the fastest.")
    return p


def _tile_rows(device_id: int) -> list[tuple[str, str, str]]:
    """(dtype, configuration, where it came from) per dtype, or 'not available' when there is no tuner."""
    try:
        from . import _tune
    except ImportError:
        return [(t, "not available", "cudakit._tune is missing") for t in ("float32", "float64")]
    rows = []
    for t in ("float32", "float64"):
        try:
            config, source = _tune.active_config(device_id, np.dtype(t))
            text = ", ".join(f"{k}: {v}" for k, v in config.items()) if isinstance(config, dict) else str(config)
            rows.append((t, text, str(source)))
        except Exception as exc:  # a tuner bug must not hide the device listing
            rows.append((t, "not available", f"{type(exc).__name__}: {str(exc)[:120]}"))
    return rows


def info(console) -> None:
    import cupy
    from rich.table import Table

    from .bench.device import device_facts, device_rows

    for device_id in range(cupy.cuda.runtime.getDeviceCount()):
        table = Table(title=f"device {device_id}", title_justify="left", show_header=False)
        table.add_column("property", style="bold")
        table.add_column("value")
        for label, value in device_rows(device_facts(device_id)):
            table.add_row(label, value)
        console.print(table)
        tiles = Table(title=f"matmul tile configuration, device {device_id}", title_justify="left", header_style="bold")
        for col in ("dtype", "configuration", "source"):
            tiles.add_column(col)
        for row in _tile_rows(device_id):
            tiles.add_row(*row)
        console.print(tiles)


def tune(console) -> int:
    try:
        from . import _tune
    except ImportError:
        print("cudakit tune: the matmul tuner (cudakit._tune) is not part of this build.", file=sys.stderr)
        return 1
    _tune.tune(console)
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from .bench.device import no_gpu_reason

    reason = no_gpu_reason()
    if reason is not None:
        print(f"cudakit {args.command} needs a CUDA GPU, and none is usable here ({reason}).", file=sys.stderr)
        return 1
    from rich.console import Console

    console = Console()
    if args.command == "info":
        info(console)
        return 0
    return tune(console)


if __name__ == "__main__":
    sys.exit(main())
