import os, sys
import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from last_rows import _turns
import taskloom
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program, pack_b_panels
from taskloom.target import host_target
target, M = host_target(), E.var("M")
N, K = int(sys.argv[1]), int(sys.argv[2])
cfgs = {"8x3 kc384 mc168": MatmulConfig(8,3,384,168,1024,1,2,True), "8x3 kc192 mc336": MatmulConfig(8,3,192,336,1024,1,2,True),
        "9x3 kc192 mc675": MatmulConfig(9,3,192,675,1024,1,2,True)}
rng = np.random.default_rng(0)
Bm = rng.standard_normal((1, K, N), dtype=np.float32)
fns = {}
for name, c in cfgs.items():
    p = matmul_program((1, M, N, K), c, target, prepacked_b=1, prefetch_b=True, a_stride=K)
    fns[name] = (taskloom.build(S.Function("matmul", (M, *p.params), p.body, p.kind, p.attrs), target)["matmul"], pack_b_panels(Bm, c, target))
for m in [int(x) for x in sys.argv[3].split(",")]:
    A = rng.standard_normal((1, m, K), dtype=np.float32)
    Cs = {k: np.zeros((1, m, N), np.float32) for k in fns}
    t = _turns({k: (lambda k=k: fns[k][0](A, fns[k][1], Cs[k])) for k in fns}, 10, max(5, 2000 // m))
    for k in fns: np.testing.assert_allclose(Cs[k], A @ Bm, rtol=1e-3, atol=1e-3)
    base = t[list(fns)[0]]
    print(f"M {m:4d} N {N} K {K}  " + "  ".join(f"{k} {v*1e3:8.1f}us ({v/base:.3f})" for k, v in t.items()), flush=True)
