"""Dynamo's own trace of a zoo model, with a backend that compiles nothing: `python dynamo_only.py gpt2
static|true|mark` (dynamic=False, dynamic=True, or every input dimension marked dynamic)."""
import sys, time, torch
torch.set_num_threads(2)
from taskloom.bench import zoo
model, inputs = zoo.build(sys.argv[1], 3, 7, 0)
mode = sys.argv[2]
seen = {}
def backend(gm, ex):
    seen["t"] = time.perf_counter(); return gm.forward
t = time.perf_counter()
if mode == "static": f = torch.compile(model, backend=backend, dynamic=False)
elif mode == "true": f = torch.compile(model, backend=backend, dynamic=True)
elif mode == "mark":
    for x in inputs:
        if isinstance(x, torch.Tensor): torch._dynamo.mark_dynamic(x, list(range(x.dim())))
    f = torch.compile(model, backend=backend, dynamic=None)
with torch.inference_mode(): f(*inputs)
print(mode, "trace", round(seen["t"] - t, 2), "total", round(time.perf_counter() - t, 2))
