import sys, time, os, tempfile
os.environ["TASKLOOM_CACHE_DIR"] = tempfile.mkdtemp()
import torch
torch.set_num_threads(2)
import taskloom
from taskloom.bench import zoo
name, mode = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab_variants_lib import patched
rule = os.environ.get("RULE", "new")  # a rule of ab_variants_lib.patched
model, inputs = zoo.build(name, 3 if name in ("bert","gpt2") else 1, 7, 0)
stack = patched(rule).__enter__()
t0 = time.perf_counter()
if name in ("bert", "gpt2"):
    import taskloom.torch as tt
    f = tt.compile(model, dynamic=(mode == "dyn"))
    with torch.inference_mode():
        f(*inputs)
    c = f.taskloom_backend.compiled[0].compiled_graph
else:
    kw = dict(dynamic={0: {0: ("batch", 1, 16)}}) if mode == "dyn" else {}
    c = taskloom.compile(model, (inputs[0],), **kw)
t = time.perf_counter() - t0
tm = c.meta["timings"]
src = open(c.meta["source"]).read() if isinstance(c.meta.get("source"), str) and os.path.exists(c.meta["source"]) else ""
print(f"{name} {mode} {rule}: total {t:.2f}s  " + " ".join(f"{k} {v:.2f}" for k, v in tm.items()) + f"  C lines {src.count(chr(10))}")
if len(sys.argv) > 4:
    import re
    cur=None; sizes={}
    for line in src.splitlines():
        m = re.match(r'^(?:static )?(?:inline )?\w[\w\s\*]*\b(\w+)\(.*\)\s*\{$', line)
        if m and not line.startswith(' '): cur=m.group(1); sizes[cur]=0
        if cur: sizes[cur]+=1
    for k,v in sorted(sizes.items(), key=lambda x:-x[1])[:30]: print(v, k)
    print(c.meta.keys())
    import json
    print(json.dumps(c.meta["dynamic"], default=str)[:3000])
    for k in c.meta["kernels"][:12]: print(json.dumps(k, default=str)[:600])
for k in c.meta["kernels"]:
    if "matmul_cpu" in k.get("schedule", "") or ";" in k.get("schedule", ""):
        print("  ", k["name"], k["schedule"][:400])
