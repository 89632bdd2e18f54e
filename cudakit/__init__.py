"""cudakit: hand-written CUDA C kernels for CuPy arrays, from the seed lesson to the fast production variant.

    cudakit.matvec(A, x)     A @ x          cudakit.matmul(A, B)   A @ B
    cudakit.transpose(A)     A.T, C-order   cudakit.dot(a, b)      a . b as a 0-d array
    cudakit.variants(op)     the kernels behind an op, each with one line on what it demonstrates

Every op takes variant= (default "fast"), out= and check=, and launches on CuPy's current stream.
"""
try:
    import cupy  # noqa: F401  (the package declares no CuPy: its wheel is per CUDA major)
except ModuleNotFoundError as exc:
    if exc.name != "cupy":
        raise
    raise ImportError("cudakit needs CuPy for your CUDA major version (nvidia-smi's \"CUDA Version\"): "
                      "pip install cudakit[cuda12] or cudakit[cuda13] (or cupy-cuda12x / cupy-cuda13x itself)") from exc

from ._check import CheckError
from ._variants import Variant, variants
# The families: importing each registers its variants in _variants' table (which imports no family itself).
from .dot import dot
from .matmul import matmul
from .matvec import matvec
from .transpose import transpose

__version__ = "0.1.0"
__all__ = ["matvec", "matmul", "transpose", "dot", "variants", "Variant", "CheckError"]
