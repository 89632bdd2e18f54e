"""GPU-less: how the package meets an environment (the package declares no CuPy: its wheel is per CUDA major)."""
import subprocess
import sys
from pathlib import Path


def test_import_without_cupy_names_the_extras():
    """Without CuPy, `import cudakit` raises an ImportError that says which extras install it, chained from the
    original error."""
    code = ("import sys; sys.modules['cupy'] = None  # as if no CuPy were installed\n"
            "try:\n    import cudakit\n"
            "except ImportError as e:\n    print(type(e).__name__, type(e.__cause__).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("ImportError ModuleNotFoundError "), out
    assert "pip install cudakit[cuda12] or cudakit[cuda13]" in out, out
