"""GPT-2 compiled twice in one process: weights packed with numpy's hugepage advice and
without; compile times, then the two timed in rotating rounds."""
import os, sys, tempfile, time, statistics
os.environ.setdefault("TASKLOOM_CACHE_DIR", tempfile.mkdtemp())
import numpy as np, torch
torch.set_num_threads(2)
import taskloom
from taskloom.bench import zoo
from taskloom.bench.timing import time_rounds
name, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
model, inputs = zoo.build(name, batch, seq, 0) if name in ("gpt2", "bert") else zoo.build(name, batch)
systems = {}
for label, huge in (("huge", True), ("small", False), ("huge2", True)):
    np._core.multiarray._set_madvise_hugepage(huge)
    t = time.perf_counter()
    systems[label] = taskloom.compile(model, tuple(inputs))
    print(label, f"compile {time.perf_counter() - t:.2f}s", {k: round(v, 2) for k, v in systems[label].meta["timings"].items()}, flush=True)
np._core.multiarray._set_madvise_hugepage(True)
xs = [x.numpy() for x in inputs]
fns = {k: (lambda s=s: s(*xs)) for k, s in systems.items()}
t = time_rounds(fns, repeats=20, rounds=5)
ms = {k: statistics.median(v for r in t[k] for v in r) for k in fns}
print({k: round(v, 3) for k, v in ms.items()}, "small/huge", round(ms["small"] / ms["huge"], 3), "huge2/huge", round(ms["huge2"] / ms["huge"], 3))
