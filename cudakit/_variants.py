"""The Variant record: the one table of kernels that the API, the tests and the bench all read.

The dependency runs one way: each family module (dot, matmul, matvec, transpose, resize) imports this one and
registers its rows when it is imported; this module imports no family. The package's __init__ imports every family,
so the table is complete whenever `cudakit` (or any of its modules) has been imported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

OPS = ("matvec", "matmul", "transpose", "dot", "resize")


@dataclass(frozen=True)
class Variant:
    op: str
    name: str
    lesson: str  # one line: what this variant demonstrates
    run: Callable = field(repr=False, compare=False)  # family-specific launcher
    seed: bool = False  # a kernel from the seed articles (kept as the lesson, bugs fixed)
    diagnostic: bool = False  # bench-only: its output is not op's result (never reachable through the API)
    dtypes: tuple = ("float32", "float64")  # the dtype names it takes (float32 on a tensor-core variant: TF32)
    min_cc: int = 0  # the least compute capability it runs on (major * 10 + minor)

    @property
    def tensor_core(self) -> bool:
        """A tensor-core kernel (16-bit inputs, float32 as TF32, no float64): the FP32/FP64 lessons leave it out."""
        return "float16" in self.dtypes and "float64" not in self.dtypes


_TABLE: dict[str, dict[str, Variant]] = {}


def register(op: str, rows: list[Variant]) -> dict[str, Variant]:
    table = _TABLE.setdefault(op, {})
    for row in rows:
        assert row.op == op and row.name not in table, row
        table[row.name] = row
    return table


def variants(op: str, *, diagnostics: bool = False) -> tuple[Variant, ...]:
    """The variants of `op` in lesson order (seed kernels first, the fast one last)."""
    if op not in _TABLE:
        raise ValueError(f"cudakit.variants: unknown op {op!r}; valid ops: {', '.join(OPS)}")
    return tuple(v for v in _TABLE[op].values() if diagnostics or not v.diagnostic)


def lookup(op: str, name: str) -> Variant:
    row = _TABLE.get(op, {}).get(name) if isinstance(name, str) else None
    if row is None or row.diagnostic:
        valid = ", ".join(v.name for v in variants(op))
        raise ValueError(f"cudakit.{op}: unknown variant {name!r}; valid variants: {valid}")
    return row
