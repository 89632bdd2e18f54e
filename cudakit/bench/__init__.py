"""The bench behind `python bench.py`.

    timing      the one timer (CUDA events; graph replay; the GPU-side hold; stream timelines)
    ceilings    the device's limits measured in the run
    device      the device listing of seed 002
    base        Case and OpBench, the interface every op's bench class fills in
    dot, transpose, matvec, matmul   one class per op: its cases, bytes, FLOPs, labels, CuPy reference, ceiling
    registry    the ops the bench runs, in order
    runner      measure -> results dict;  render  rich tables;  roofline  the plot;  readme  README's table
    cli         the command line
"""
