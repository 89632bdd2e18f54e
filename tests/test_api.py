"""GPU-less: the package imports without a GPU and its variant tables are complete and well formed."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import cudakit
from cudakit import _compile, _variants


def test_import_needs_no_gpu():
    code = "import cudakit; print(sorted(cudakit.__all__))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"CUDA_VISIBLE_DEVICES": "", "PATH": ""})
    assert res.returncode == 0, res.stderr
    assert "matmul" in res.stdout


@pytest.mark.parametrize("value, on", [("1", True), ("0", False), ("", False)])
def test_cudakit_check_is_read_at_import(value, on):
    code = "from cudakit import _check; print(_check.CHECK_BY_DEFAULT, _check.enabled(None), _check.enabled(False))"
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "", "CUDAKIT_CHECK": value}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(on), str(on), "False"]


@pytest.mark.parametrize("op", _variants.OPS)
def test_every_op_has_seed_variants_and_a_fast_one(op):
    rows = cudakit.variants(op)
    names = [v.name for v in rows]
    assert "fast" in names
    assert any(v.seed for v in rows), f"{op} has no seed variant"
    for v in cudakit.variants(op, diagnostics=True):
        assert v.op == op and v.lesson and "\n" not in v.lesson and callable(v.run)


def test_unknown_op_lists_the_valid_ones():
    with pytest.raises(ValueError, match="matvec, matmul, transpose, dot"):
        cudakit.variants("conv")


def test_kernel_sources_ship_with_the_package():
    for family in ("matvec", "matmul", "transpose", "dot"):
        assert "__global__" in _compile.source(family)


def test_variants_imports_no_family():
    """The table's module imports no family (the families import it and register themselves): no import circle.

    Read from its source: importing cudakit._variants runs the package's __init__ first, which imports every family.
    """
    tree = ast.parse(Path(_variants.__file__).read_text())
    named = set()
    for node in ast.walk(tree):  # function bodies included
        if isinstance(node, ast.Import):
            named |= {part for alias in node.names for part in alias.name.split(".")}
        elif isinstance(node, ast.ImportFrom):
            named |= set((node.module or "").split(".")) | {alias.name for alias in node.names}
        elif isinstance(node, ast.Call):  # nor any dynamic import
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            assert name not in ("import_module", "__import__"), ast.unparse(node)
    assert not named & set(_variants.OPS), sorted(named)  # each op's family module has the op's name
