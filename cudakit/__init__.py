"""cudakit: hand-written CUDA C kernels for CuPy arrays, from the seed lesson to the fast production variant.

    cudakit.matvec(A, x)     A @ x          cudakit.matmul(A, B)   A @ B
    cudakit.transpose(A)     A.T, C-order   cudakit.dot(a, b)      a . b as a 0-d array
    cudakit.resize(img, (h, w))   bilinear  cudakit.letterbox(imgs)  detector preprocessing, one launch
    cudakit.variants(op)     the kernels behind an op, each with one line on what it demonstrates

Every op takes variant= (default "fast"), out= and check=, and launches on CuPy's current stream. Given dask.array
arrays of CuPy chunks, the ops build lazy Dask graphs instead (cudakit/dask.py; `import cudakit` imports no Dask).

    cudakit.stream_map(fn, host_chunks)   fn over host chunks, copies and kernels overlapped across streams
    cudakit.pinned_empty(shape, dtype)    a NumPy array in pinned memory (the copies read and write it in place)
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
from .resize import letterbox, resize, unletterbox_boxes
from .transpose import transpose
# Not an op: the host-facing pipeline that overlaps copies and kernels across streams (no kernel of its own).
from .stream import pinned_empty, stream_map

__version__ = "0.1.0"
__all__ = ["matvec", "matmul", "transpose", "dot", "resize", "letterbox", "unletterbox_boxes",
           "variants", "Variant", "CheckError", "stream_map", "pinned_empty"]
