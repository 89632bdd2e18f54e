"""Every kernel module of every family compiled for the current GPU by a pool of processes, into the disk caches that
later processes load from (CuPy's kernel cache; cudakit's cache_dir() for the sm_90a family). A fresh GPU machine
otherwise compiles each module the first time a test, a sanitizer run or a timing needs it, one process at a time.

    PYTHONPATH=. python3 tools/precompile.py [--jobs N]

Prints how many modules each family has and the wall time. The modules are those of the GPU-less compile check
(each family's instantiation_groups()), the groups the library builds at run time.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import multiprocessing
import os
import sys
import time

FAMILIES = ("matmul", "matmul_dmma", "matmul_longk", "matmul_shortk", "matmul_fewrows", "matmul_tc", "matmul_wgmma",
            "matvec", "transpose", "dot", "resize", "ceilings")
MODULES = {"ceilings": "cudakit._ceilings", "matmul_wgmma": "cudakit._hopper", "matmul_dmma": "cudakit._dmma",
           "matmul_longk": "cudakit._longk", "matmul_shortk": "cudakit._shortk",
           "matmul_fewrows": "cudakit._fewrows"}


def groups(family: str) -> list[tuple[str, ...]]:
    return [tuple(g) for g in importlib.import_module(MODULES.get(family, f"cudakit.{family}")).instantiation_groups()]


def build(family: str, group: tuple[str, ...]) -> float:
    """Compile one module as the library does (a worker process); returns its seconds."""
    import cupy

    from cudakit import _compile

    start = time.perf_counter()
    archs = getattr(importlib.import_module(MODULES.get(family, f"cudakit.{family}")), "ARCHS", None)
    if archs:  # built for a named target into cudakit's own cache (kernel_for_arch)
        cc = cupy.cuda.Device().compute_capability
        for arch in (a for a in archs if a[3:5] == cc):
            _compile._build_cubin(family, group, arch)
    else:
        _compile._module(family, group, cupy.cuda.runtime.getDevice())
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    args = ap.parse_args()
    work = [(family, group) for family in FAMILIES for group in groups(family)]
    print(", ".join(f"{f} {sum(w[0] == f for w in work)}" for f in FAMILIES), "modules", flush=True)
    start, failed = time.perf_counter(), 0
    context = multiprocessing.get_context("spawn")  # (CUDA does not survive a fork)
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        futures = {pool.submit(build, *w): w for w in work}
        for future in concurrent.futures.as_completed(futures):
            family, group = futures[future]
            try:
                future.result()
            except Exception as error:  # a module that does not build: reported, the others go on
                failed += 1
                print(f"FAILED {family} {group[0]}: {error}", file=sys.stderr, flush=True)
    print(f"precompile: {len(work)} modules, {failed} failed, {time.perf_counter() - start:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
