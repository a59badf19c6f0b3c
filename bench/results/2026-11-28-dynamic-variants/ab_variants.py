"""GPT-2/BERT dynamic compiles under several variant rules, timed at shapes in one process."""
import os, sys, time, statistics, tempfile
os.environ.setdefault("TASKLOOM_CACHE_DIR", tempfile.mkdtemp())
import torch; torch.set_num_threads(2)
torch._dynamo.config.recompile_limit = 64
import taskloom.torch as tt
from taskloom.bench import zoo
from taskloom.bench.timing import time_rounds

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_variants_lib import patched

name = sys.argv[1]
shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")]
rules = sys.argv[3].split(",")  # old,new,one,gain10
model, _ = zoo.build(name, 1, 7, 0)
systems = {}
for r in rules:
    f = tt.compile(model, dynamic=True)
    _, ins = zoo.build(name, 3, 7, 0)
    with patched(r), torch.inference_mode():
        t0 = time.perf_counter()
        f(*ins)
        dt = time.perf_counter() - t0
    c = f.taskloom_backend.compiled[0].compiled_graph
    nk = sum(len(k["schedule"].split(";")) for k in c.meta["kernels"] if "matmul" in k["name"])
    print(f"{r}: compile {dt:.2f}s, matmul variants {nk}, timings", {k: round(v, 2) for k, v in c.meta["timings"].items()}, flush=True)
    systems[r] = f
for r, f in systems.items(): print(r, "graphs compiled", len(f.taskloom_backend.compiled))
print("| batch | seq | " + " | ".join(f"{r} ms" for r in rules) + " | " + " | ".join(f"{r}/{rules[0]}" for r in rules[1:]) + " |")
with torch.inference_mode():
    for b, s in shapes:
        _, ins = zoo.build(name, b, s, 0)
        def mk(f, r):
            def call():
                with patched(r): return f(*ins)
            return call
        calls = {r: mk(f, r) for r, f in systems.items()}
        t = time_rounds(calls, repeats=int(os.environ.get("REPEATS", 10)), rounds=int(os.environ.get("ROUNDS", 6)))
        ms = {r: statistics.median(x for rr in v for x in rr) for r, v in t.items()}
        print(*(sum(len(c._programs) for c in f.taskloom_backend.compiled) for f in systems.values()))
        print(f"| {b} | {s} | " + " | ".join(f"{ms[r]:.3f}" for r in rules) + " | " + " | ".join(f"{ms[r]/ms[rules[0]]:.3f}" for r in rules[1:]) + " |", flush=True)
