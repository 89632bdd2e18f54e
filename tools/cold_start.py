"""Time a new process's first tensor-core matmul (import, module load or compile, launch, result), as a user's
script meets it. Run it twice: the first run may compile (and fill CuPy's and cudakit's disk caches), the second
shows what every later process pays.

    PYTHONPATH=. python3 tools/cold_start.py [dtype]
"""
import sys
import time

start = time.perf_counter()
import cupy  # noqa: E402
import numpy as np  # noqa: E402

import cudakit  # noqa: E402

dtype = np.dtype(sys.argv[1] if len(sys.argv) > 1 else "float16")
a = cupy.ones((256, 256), dtype)
b = cupy.ones((256, 256), dtype)
imported = time.perf_counter()
c = cudakit.matmul(a, b)
cupy.cuda.get_current_stream().synchronize()
done = time.perf_counter()
assert float(c[0, 0]) == 256.0, c[0, 0]
print(f"cold start {dtype}: import + two arrays {imported - start:.3f} s, first matmul (load or compile, run) "
      f"{done - imported:.3f} s")
