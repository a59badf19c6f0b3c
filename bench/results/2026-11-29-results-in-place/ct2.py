import sys, time, os, tempfile
os.environ["TASKLOOM_CACHE_DIR"] = tempfile.mkdtemp()
import torch
torch.set_num_threads(2)
import taskloom
from taskloom.bench import zoo
import taskloom.torch as tt
name, mode = sys.argv[1], sys.argv[2]
model, inputs = zoo.build(name, 3, 7, 0)
t0 = time.perf_counter()
f = tt.compile(model, dynamic=(mode == "dyn"))
with torch.inference_mode():
    f(*inputs)
t = time.perf_counter() - t0
c = f.taskloom_backend.compiled[0].compiled_graph
print(f"{name} {mode} {sys.argv[3] if len(sys.argv) > 3 else ''}: total {t:.2f}s  " + " ".join(f"{k} {v:.2f}" for k, v in c.meta["timings"].items()))
