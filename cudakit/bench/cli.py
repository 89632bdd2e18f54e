"""`python bench.py`: every cudakit variant against CuPy, read against ceilings measured in the same run."""
from __future__ import annotations

import argparse
import json
import math
import sys

from .registry import OPS


class BenchError(Exception):
    """A one-sentence reason the bench cannot run (printed without a traceback)."""


def finite(x):
    """JSON without NaN/Infinity (strict parsers reject them): non-finite floats become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench.py",
        description="Time every cudakit variant against CuPy (CUDA events, median of many runs) and read each "
                    "against ceilings measured in the same run: streaming read and copy bandwidth, FMA peak.")
    p.add_argument("--quick", action="store_true", help="a small subset of the sizes (under a minute)")
    p.add_argument("--ops", default=",".join(OPS), metavar="OP[,OP...]",
                   help=f"families to run, comma-separated (default: {','.join(OPS)})")
    p.add_argument("--json", metavar="FILE", help="write every number (all samples included) to FILE")
    p.add_argument("--plot", metavar="FILE.png", help="draw a roofline of the results (needs matplotlib)")
    p.add_argument("--load", metavar="FILE.json",
                   help="measure nothing: redraw the tables (and --plot, --readme) from a saved --json file")
    p.add_argument("--readme", metavar="README.md",
                   help="write the measured table between the bench markers of README.md")
    p.add_argument("--sweep", action="store_true",
                   help="the fast variants against CuPy over a fresh random draw of shapes per op (with --json: save)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="the sweep's draw (default: a new one)")
    p.add_argument("--sweep-count", type=int, default=200, metavar="N", help="shapes per op in the sweep (200)")
    p.add_argument("--row-seconds", type=float, metavar="S", help="timed seconds per row (default 0.25, quick 0.06)")
    p.add_argument("--streams", action="store_true",
                   help="the stream lesson on its own: cudakit.stream_map over 1 GiB of host chunks with 1 to 4 "
                        "streams, pinned and pageable, against the ideal overlap timed in the same run "
                        "(with --json: save)")
    p.add_argument("--plot-streams", metavar="FILE.png",
                   help="draw stream_map's timeline, each stream a lane of copies and kernels, for 1 stream and for 3 "
                        "(needs matplotlib; runs on its own or with --streams)")
    p.add_argument("--dask", action="store_true",
                   help="cudakit's ops on Dask arrays: a dask-cuda LocalCUDACluster of 1 worker and of N (one GPU "
                        "each) against one GPU without Dask (needs cudakit[dask]; with --json: save)")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="--dask's N (default: every GPU)")
    p.add_argument("--protocol", choices=("tcp", "ucx"), default="tcp",
                   help="--dask's transport between workers: tcp, or ucx (NVLink; needs distributed-ucxx)")
    args = p.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        p.error("--workers must be at least 1")
    if args.dask and (args.sweep or args.readme or args.plot or args.streams or args.plot_streams):
        p.error("--dask runs on its own (or with --load to redraw a saved run), not with --sweep, --readme, --plot "
                "or --streams")
    if (args.streams or args.plot_streams) and (args.load or args.sweep or args.readme or args.plot):
        p.error("--streams and --plot-streams run on their own, not with --load, --sweep, --readme or --plot")
    ops = tuple(o.strip() for o in args.ops.split(",") if o.strip())
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        p.error(f"unknown op {', '.join(bad) or '(none)'}; valid ops: {', '.join(OPS)}")
    args.ops = tuple(o for o in OPS if o in ops)
    return args


def load(path: str) -> dict:
    from .runner import derive

    with open(path) as f:
        try:
            results = json.load(f)
            derive(results)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise BenchError(f"bench.py --load: {path} is not a results file written by --json") from None
    return results


def measure(args, console) -> dict:
    from .device import no_gpu_reason
    from .runner import run
    from .timing import Budget

    reason = no_gpu_reason()
    if reason is not None:
        raise BenchError(f"bench.py needs a CUDA GPU, and none is usable here ({reason})")
    budget = Budget.quick() if args.quick else Budget()
    if args.row_seconds:
        budget.row_s = args.row_seconds
    results = run(args.ops, args.quick, console, budget)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(finite(results), f, indent=1)
        console.print(f"wrote {args.json}")
    return results


def sweep(args, console) -> dict:
    import secrets

    from .device import no_gpu_reason
    from .sweep import run_sweep

    reason = no_gpu_reason()
    if reason is not None:
        raise BenchError(f"bench.py --sweep needs a CUDA GPU, and none is usable here ({reason})")
    seed = secrets.randbelow(2**31) if args.seed is None else args.seed
    console.print(f"sweep seed {seed}")
    results = run_sweep(args.ops, seed, args.sweep_count, console)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(finite(results), f, indent=1)
        console.print(f"wrote {args.json}")
    return results


def stream_lesson(args, console) -> None:
    """--streams and --plot-streams: stream_map against the ideal overlap, and its timeline."""
    from .device import no_gpu_reason
    from .roofline import pyplot

    if args.plot_streams:
        pyplot()  # fail before a long run, not after it
    reason = no_gpu_reason()
    if reason is not None:
        option = "--streams" if args.streams else "--plot-streams"
        raise BenchError(f"bench.py {option} needs a CUDA GPU, and none is usable here ({reason})")
    from .streams import measure_streams, plot_streams

    if args.streams:
        results = measure_streams(console, args.quick)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(finite(results), f, indent=1)
            console.print(f"wrote {args.json}")
    if args.plot_streams:
        plot_streams(args.plot_streams, args.quick)
        console.print(f"wrote {args.plot_streams}")


def dask_lesson(args, console) -> int:
    """--dask: the ops on a LocalCUDACluster of 1 worker and of N, beside one GPU without Dask (--load: redraw).
    The exit status is 1 where a checked answer is wrong or its check failed."""
    from .dask import dask_table, task_lines
    from .dask_answers import answer_lines

    if args.load:
        with open(args.load) as f:
            try:
                results = json.load(f)
                table = dask_table(results)
            except (ValueError, KeyError, TypeError):
                raise BenchError(f"bench.py --dask --load: {args.load} is not a file written by --dask --json") \
                    from None
    else:
        results = measure_dask(args, console)
        table = dask_table(results)
    console.print(table)
    answers = answer_lines(results)
    for line in task_lines(results) + answers:
        console.print(line)
    if args.json and not args.load:
        with open(args.json, "w") as f:
            json.dump(finite(results), f, indent=1)
        console.print(f"wrote {args.json}")
    return 1 if any("WRONG" in line or "FAILED" in line for line in answers) else 0


def measure_dask(args, console) -> dict:
    from .device import no_gpu_reason

    try:
        import dask_cuda  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as exc:
        raise BenchError(f"bench.py --dask needs Dask, distributed and dask-cuda ({exc.name} is missing): "
                         "pip install cudakit[dask]") from None
    reason = no_gpu_reason()
    if reason is not None:
        raise BenchError(f"bench.py --dask needs a CUDA GPU, and none is usable here ({reason})")
    from .dask import run_dask

    try:
        return run_dask(args.workers, args.protocol, args.quick, console, args.ops)
    except ValueError as exc:
        raise BenchError(f"bench.py {exc}") from None


def main(argv=None) -> int:
    args = parse_args(argv)
    from rich.console import Console

    from .readme import write_readme
    from .render import ceilings_table, family_table
    from .roofline import PlotError, plot_roofline, pyplot

    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # a log file gets the whole table on one line per row
    try:
        if args.streams or args.plot_streams:
            stream_lesson(args, console)
            return 0
        if args.dask:
            return dask_lesson(args, console)
        if args.plot:
            pyplot()  # fail before a long run, not after it
        if args.sweep:
            results = sweep(args, console)
        elif args.load:
            results = load(args.load)
            console.print(ceilings_table(results))
            for op in args.ops:
                if any(r["op"] == op for r in results["rows"]):
                    console.print(family_table(results, op))
        else:
            results = measure(args, console)
        if args.plot and not args.sweep:
            plot_roofline(results, args.plot)
            console.print(f"wrote {args.plot}")
        if args.readme:
            write_readme(args.readme, results)
            console.print(f"wrote the measured table into {args.readme}")
    except (BenchError, PlotError) as exc:
        print(f"{exc}.", file=sys.stderr)
        return 1
    except ValueError as exc:  # the README has no markers
        print(f"bench.py: {exc}.", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"bench.py: {exc.strerror or exc}: {exc.filename}.", file=sys.stderr)
        return 1
    return 0
