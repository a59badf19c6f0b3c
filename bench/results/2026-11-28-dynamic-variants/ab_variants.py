"""GPT-2/BERT dynamic compiles under several variant rules, timed at shapes in one process."""
import os, sys, time, math, statistics, tempfile
os.environ.setdefault("TASKLOOM_CACHE_DIR", tempfile.mkdtemp())
import torch; torch.set_num_threads(2)
torch._dynamo.config.recompile_limit = 64
from unittest import mock
import taskloom.torch as tt
from taskloom.compiler import dynamic as dy
from taskloom.bench import zoo
from taskloom.bench.timing import time_rounds

def old_choose(configs, cost=None):
    distinct = list(dict.fromkeys(configs))
    if cost is None: return dy._most_chosen(configs, distinct)
    times = {c: [cost(k, c) for k in range(len(configs))] for c in distinct}
    own = [times[c][k] for k, c in enumerate(configs)]
    def slowdown(kept): return [min(times[c][k] for c in kept) / own[k] for k in range(len(configs))]
    kept = []
    while len(kept) < dy.MAX_VARIANTS and (not kept or max(slowdown(kept)) > 1 + 0.05):
        kept.append(min((c for c in distinct if c not in kept), key=lambda c: sum(math.log(r) for r in slowdown([*kept, c]))))
    kept.sort(key=distinct.index)
    table = [min(range(len(kept)), key=lambda v: (times[kept[v]][k], v)) for k in range(len(configs))]
    return kept, table

name = sys.argv[1]
shapes = [tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")]
rules = sys.argv[3].split(",")  # old,new,one,gain10
model, _ = zoo.build(name, 1, 7, 0)
systems = {}
import contextlib
def patched(r):
    st = contextlib.ExitStack()
    if r == 'old': st.enter_context(mock.patch.object(dy, 'choose_variants', old_choose))
    if r == 'one': st.enter_context(mock.patch.object(dy, 'MAX_VARIANTS', 1))
    if r.startswith('gain'): st.enter_context(mock.patch.object(dy, 'VARIANT_GAIN', int(r[4:]) / 100))
    return st
for r in rules:
    patches = []
    if r == "old": patches.append(mock.patch.object(dy, "choose_variants", old_choose))
    if r == "one": patches.append(mock.patch.object(dy, "MAX_VARIANTS", 1))
    if r.startswith("gain"): patches.append(mock.patch.object(dy, "VARIANT_GAIN", int(r[4:]) / 100))
    f = tt.compile(model, dynamic=True)
    _, ins = zoo.build(name, 3, 7, 0)
    for p in patches: p.start()
    t0 = time.perf_counter()
    with torch.inference_mode(): f(*ins)
    dt = time.perf_counter() - t0
    for p in patches: p.stop()
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
