"""One-off A/B of the exact-rows change (107174c): the matmul template before it (saved as
matmul_cpu_old.py from ``git show 107174c~1:taskloom/schedule/templates/matmul_cpu.py``)
against the current one, and the clamped last tile, timed in turns in one process.

    python template_ab.py N K MR NV [A_STRIDE [ROWS,...]]
"""
import sys, importlib.util, numpy as np
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), "..", ".."))
from last_rows import _turns
import taskloom
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.schedule.templates import matmul_cpu as new
spec = importlib.util.spec_from_file_location("matmul_cpu_old", __import__("os").path.join(__import__("os").path.dirname(__file__), "matmul_cpu_old.py"))
old = importlib.util.module_from_spec(spec); sys.modules["matmul_cpu_old"] = old; spec.loader.exec_module(old)
from taskloom.target import host_target
target, M = host_target(), E.var("M")
N, K, mr, nv = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def build(mod, exact, a_stride):
    config = mod.MatmulConfig(mr, nv, 256, 256, 1024, 1, 2, exact_rows=exact)
    p = mod.matmul_program((1, M, N, K), config, target, prepacked_b=1, prefetch_b=True, a_stride=a_stride)
    return taskloom.build(S.Function("matmul", (M, *p.params), p.body, p.kind, p.attrs), target)["matmul"], config
a_stride = K if len(sys.argv) < 6 else int(sys.argv[5])
(c, config), (o, _), (n, _) = build(new, False, a_stride), build(old, True, a_stride), build(new, True, a_stride)
rng = np.random.default_rng(0)
panels = new.pack_b_panels(rng.standard_normal((1, K, N), dtype=np.float32), config, target)
for m in [int(x) for x in sys.argv[6].split(",")] if len(sys.argv) > 6 else (5, 7, 21, 30, 64):
    A = rng.standard_normal((1, m, K), dtype=np.float32)
    Cs = {k: np.zeros((1, m, N), np.float32) for k in "con"}
    t = _turns({"clamped": lambda: c(A, panels, Cs["c"]), "old": lambda: o(A, panels, Cs["o"]), "new": lambda: n(A, panels, Cs["n"])}, 10, 50)
    assert np.allclose(Cs["o"], Cs["n"]) and np.allclose(Cs["c"], Cs["n"])
    print(f"rows {m:4d} clamped {t['clamped']*1e3:8.1f} us old {t['old']*1e3:8.1f} new {t['new']*1e3:8.1f}  new/old {t['new']/t['old']:.3f} new/clamped {t['new']/t['clamped']:.3f}", flush=True)
