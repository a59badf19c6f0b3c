import os, sys, tempfile, time
os.environ["TASKLOOM_CACHE_DIR"] = tempfile.mkdtemp()
import torch; torch.set_num_threads(2)
from taskloom.bench import zoo
import taskloom.torch as tt
import taskloom.frontend.torch as ft
marks = {}
def wrap(mod, name, key):
    orig = getattr(mod, name)
    def w(*a, **k):
        t = time.perf_counter(); marks.setdefault(key + "_start", t - T0)
        r = orig(*a, **k); marks[key] = marks.get(key, 0) + time.perf_counter() - t; return r
    setattr(mod, name, w)
wrap(ft, "lower_to_aten", "lower")
wrap(ft, "convert", "convert")
wrap(ft.compiler if hasattr(ft, "compiler") else ft, "compile_graph", "compile") if hasattr(ft, "compile_graph") else None
mode = sys.argv[2]
model, inputs = zoo.build(sys.argv[1], 3, 7, 0)
T0 = time.perf_counter()
f = tt.compile(model, dynamic=(mode == "dyn"))
with torch.inference_mode(): f(*inputs)
total = time.perf_counter() - T0
c = f.taskloom_backend.compiled[0].compiled_graph
tm = c.meta["timings"]
print(sys.argv[1], mode, f"total {total:.2f} trace(before lower) {marks['lower_start']:.2f} lower {marks['lower']:.2f} convert {marks['convert']:.2f} taskloom {sum(tm.values()):.2f}",
      " ".join(f"{k} {v:.2f}" for k, v in tm.items()))
