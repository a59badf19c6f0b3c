import os, sys, time, statistics, tempfile
os.environ.setdefault("TASKLOOM_CACHE_DIR", tempfile.mkdtemp())
import torch; torch.set_num_threads(2)
import taskloom
from taskloom.bench import zoo
from taskloom.bench.timing import time_rounds
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_variants_lib import patched
name = sys.argv[1]; batches = [int(b) for b in sys.argv[2].split(",")]; rules = sys.argv[3].split(",")
model, ins = zoo.build(name, 1, 7, 0)
systems = {}
for r in rules:
    with patched(r):
        t0 = time.perf_counter()
        g = taskloom.compile(model, (ins[0],), dynamic={0: {0: ("batch", 1, 16)}})
        dt = time.perf_counter() - t0
    nk = sum(len(k["schedule"].split(";")) for k in g.meta["kernels"] if k.get("schedule", "").startswith("matmul"))
    print(f"{r}: compile {dt:.2f}s, template variants {nk}", {k: round(v, 2) for k, v in g.meta["timings"].items()}, flush=True)
    systems[r] = g
print("| batch | " + " | ".join(f"{r} ms" for r in rules) + " | " + " | ".join(f"{r}/{rules[0]}" for r in rules[1:]) + " |")
for b in batches:
    _, x = zoo.build(name, b, 7, 0); x = x[0].numpy()
    t = time_rounds({r: (lambda g=g: g(x)) for r, g in systems.items()}, repeats=int(os.environ.get("REPEATS", 10)), rounds=int(os.environ.get("ROUNDS", 6)))
    ms = {r: statistics.median(v for rr in t[r] for v in rr) for r in rules}
    print(f"| {b} | " + " | ".join(f"{ms[r]:.3f}" for r in rules) + " | " + " | ".join(f"{ms[r]/ms[rules[0]]:.3f}" for r in rules[1:]) + " |", flush=True)
