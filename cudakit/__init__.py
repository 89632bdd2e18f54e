"""cudakit: hand-written CUDA C kernels for CuPy arrays, from the seed lesson to the fast production variant.

    cudakit.matvec(A, x)     A @ x          cudakit.matmul(A, B)   A @ B
    cudakit.transpose(A)     A.T, C-order   cudakit.dot(a, b)      a . b as a 0-d array
    cudakit.variants(op)     the kernels behind an op, each with one line on what it demonstrates

Every op takes variant= (default "fast"), out= and check=, and launches on CuPy's current stream.
"""
from ._check import CheckError
from ._variants import Variant, variants
from .dot import dot
from .matmul import matmul
from .matvec import matvec
from .transpose import transpose

__version__ = "0.1.0"
__all__ = ["matvec", "matmul", "transpose", "dot", "variants", "Variant", "CheckError"]
