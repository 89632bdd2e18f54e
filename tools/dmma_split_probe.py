"""Split-k on the pipelined DMMA kernel for long-k FP64 products with a small C (probe)."""
import sys
import cupy, numpy as np
import cudakit
from cudakit import _check, _dmma
from cudakit._device import workspace
from cudakit.bench import timing
from cudakit.testing import poisoned, random_array
import importlib
mm = importlib.import_module("cudakit.matmul")
BUDGET = timing.Budget(row_s=0.05, min_runs=3, max_runs=60)
T64 = _dmma.TILES[5]

def split_launches(A, B, out, tile, splits, transposed):
    m, k = A.shape; n = B.shape[1]
    depth = -(-k // splits); depth = -(-depth // 16) * 16
    splits = -(-k // depth)
    a_kc = mm._layout(A, 0)[1]; b_kc = mm._layout(B, 1)[1]
    lda = mm._layout(A, 0)[2]; ldb = mm._layout(B, 1)[2]
    partials = workspace(splits * m * n * 8)[0]
    L = []
    if splits > 1:
        L += _dmma.launches(A[:, :depth], B[:depth, :], out, tile,
                            batch=(splits - 1, depth * (1 if a_kc else lda), depth * (1 if b_kc else ldb)),
                            c_ptr=partials, transposed=transposed)
    last = (splits - 1) * depth
    L += _dmma.launches(A[:, last:], B[last:, :], out, tile, c_ptr=partials + (splits - 1) * m * n * 8, transposed=transposed)
    add = mm.partials_adder(out, splits)
    def run():
        for a in L:
            cudakit._compile.launch(*a)
        add(out.data.ptr, partials)
    return run, splits

def main():
    shapes = sys.argv[1:]
    for s in shapes:
        dims, order = s.split(":")
        m, k, n = map(int, dims.split("x"))
        A = random_array((m, k), np.float64, order[0]); B = random_array((k, n), np.float64, order[1])
        out = poisoned((m, n), np.float64)
        ref = cupy.matmul(A, B)
        t_c = timing.measure(lambda i: cupy.matmul(A, B), BUDGET)[0].median
        t_f = timing.measure(lambda i: cudakit.matmul(A, B, out=out, check=False), BUDGET)[0].median
        res = []
        for tile in _dmma.PLANNED:
            slots = _dmma.resident(tile, 0)
            grid = -(-m // tile.bm) * -(-n // tile.bn)
            for waves in (1, 2, 4):
                sp = max(1, min(k // 256, waves * slots // grid))
                for tr in (None,):
                    try:
                        run, sp2 = split_launches(A, B, out, tile, sp, tr)
                        out.fill(np.nan); run()
                        err = _check.relative_error(out, ref)
                        if not err <= _check.tolerance(np.float64, k):
                            res.append((9, f"{tile.name} sp{sp2} WRONG {err:.1e}")); continue
                        t = timing.measure(lambda i: run(), BUDGET)[0].median
                        res.append((t, f"{tile.name} sp{sp2}"))
                    except Exception as e:
                        res.append((9, f"{tile.name} sp{sp} {type(e).__name__} {e}"))
        res.sort()
        plan = mm.plan(0, np.float64, m, n, k)
        print(f"{s:28} plan {plan[0].name} sp{plan[1]} cupy {t_c*1e6:8.1f} fast {t_f*1e6:8.1f} ({t_c/t_f:.2f}x) best {res[0][0]*1e6:8.1f} ({t_c/res[0][0]:.2f}x) {res[0][1]} | "
              + "; ".join(f"{n_} {t*1e6:.0f}" for t, n_ in res[1:12]), flush=True)
        for r in res:
            if "WRONG" in r[1] or "Error" in r[1]: print("   ", r[1])
main()
