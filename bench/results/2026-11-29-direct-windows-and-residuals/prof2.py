"""Kernel by kernel: a model compiled under two feature sets (ab.features), pads apart."""
import os, sys, tempfile
os.environ.setdefault("TASKLOOM_CACHE_DIR", tempfile.mkdtemp())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch; torch.set_num_threads(2)
import taskloom
from taskloom.bench import zoo
from ab import features
name, batch, (ra, rb) = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
model, ins = zoo.build(name, batch)
xn = ins[0].numpy()
gs = {}
for r in (ra, rb):
    with features(r):
        gs[r] = taskloom.compile(model, (ins[0],))
prof = {r: [] for r in gs}
for rnd in range(3):  # alternate, so both meet the same weather
    for r, g in gs.items():
        prof[r].append(g.profile(xn, repeats=15))
import statistics
def med(r):
    ks = prof[r][0]
    return [(k["name"], statistics.median(p[i]["median_ms"] for p in prof[r])) for i, k in enumerate(ks)]
a, b = med(ra), med(rb)
pads = [(n, t) for n, t in b if n.endswith("_pad")]
b = [(n, t) for n, t in b if not n.endswith("_pad")]
print(f"{ra} total {sum(t for _, t in a):.2f}  {rb} total {sum(t for _, t in b) + sum(t for _, t in pads):.2f} (pads {sum(t for _, t in pads):.2f})")
for (na, ta), (nb, tb) in zip(a, b):
    if abs(ta - tb) > 0.08:
        print(f"{na:22s} {ta:.3f} -> {nb:22s} {tb:.3f}  {tb - ta:+.3f}")
