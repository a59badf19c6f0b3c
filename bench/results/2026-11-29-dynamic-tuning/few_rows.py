"""GPT-2 compiled once through taskloom.torch.compile(dynamic=True) with FEW_ROWS_TILES set to the
second argument (0: no micro-kernels for each count of last rows); prints the phases."""
import os, sys, tempfile, time
os.environ["TASKLOOM_CACHE_DIR"] = tempfile.mkdtemp()
import torch; torch.set_num_threads(2)
from taskloom.bench import zoo
import taskloom.torch as tt
import taskloom.compiler.drivers as dr
dr.FEW_ROWS_TILES = int(sys.argv[2])
model, inputs = zoo.build(sys.argv[1], 3, 7, 0)
T0 = time.perf_counter()
f = tt.compile(model, dynamic=True)
with torch.inference_mode(): f(*inputs)
total = time.perf_counter() - T0
tm = f.taskloom_backend.compiled[0].compiled_graph.meta["timings"]
print(sys.argv[1:], f"total {total:.2f} taskloom {sum(tm.values()):.2f}", " ".join(f"{k} {v:.2f}" for k, v in tm.items()))
