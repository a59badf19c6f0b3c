import sys, time, glob, os, numpy as np, taskloom
from taskloom import ops
from taskloom.graph import Graph, input
N, H, C, O, k, s = [int(v) for v in sys.argv[1].split(",")]
rng = np.random.default_rng(0)
Hp = H + 2
x = input((N, Hp, Hp, C), name="x")
W = rng.standard_normal((k, k, C, O), dtype=np.float32) / 10
y = ops.relu(ops.conv2d(x, taskloom.asarray(W), stride=s, padding=0, layout="NHWC"))
m = taskloom.compile(Graph([x], [y]), verbose=False)
X = rng.standard_normal((N, Hp, Hp, C), dtype=np.float32)
out = m(X)
import torch
ref = torch.nn.functional.conv2d(torch.from_numpy(X).permute(0, 3, 1, 2), torch.from_numpy(W).permute(3, 2, 0, 1), stride=s).relu().permute(0, 2, 3, 1).numpy()
print("max err", np.abs(out - ref).max())
for r in range(3):
    ts = []
    for _ in range(30):
        t = time.perf_counter(); m(X); ts.append(time.perf_counter() - t)
    print("median ms %.3f" % (1e3 * np.median(ts)))
