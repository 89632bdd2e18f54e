"""The thin transpose kernel's paths alone (the packed tile and the column tile, words and elements, 2-D and
batched), for racecheck and synccheck when the whole of tools/sanitize.py does not fit a device call.

    compute-sanitizer --tool racecheck python3 tools/sanitize_thin.py
"""
import cupy
import numpy as np

import cudakit

runs = 0
for dtype in (np.int8, np.float16, np.float32):
    for shape in ((3, 1004), (1004, 3), (5, 4100), (4100, 5), (4100, 8), (8, 4100), (16, 4100), (2, 70_000),
                  (4100, 4), (4100, 16)):
        a = cupy.random.randint(0, 100, shape).astype(dtype)
        assert bool((cudakit.transpose(a) == a.T).all()), (dtype, shape)
        runs += 1
    for shape, axes in (((3, 3, 36, 40), (0, 2, 3, 1)), ((3, 36, 40, 3), (0, 3, 1, 2))):
        a = cupy.random.randint(0, 100, shape).astype(dtype)
        assert bool((cudakit.transpose(a, axes) == a.transpose(axes)).all()), (dtype, shape)
        runs += 1
print(f"sanitize_thin: {runs} transposes checked")
