"""torch.compile's per-call cost after a call that sweeps the caches: a backend whose
compiled function only sums a numpy array of SIZE bytes, timed alone and inside the frame.

    python bench/results/2026-11-23-small-models/dynamo_sweep.py SIZE
"""
import sys
import time

import numpy as np
import torch

from taskloom.bench.zoo import build

torch.set_num_threads(2)
model, (x,) = build("mlp", 1)
big = np.ones(int(sys.argv[1]) // 4, np.float32)
out = torch.zeros(1, 10)


def per_call_us(f, *a, n=2000):
    for _ in range(200):
        f(*a)
    blocks = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            f(*a)
        blocks.append((time.perf_counter() - t0) / n * 1e6)
    return np.median(blocks)


def backend(gm, example_inputs):
    def run(*args):
        big.sum()
        return (out,)
    return run


with torch.inference_mode():
    framed = torch.compile(model, backend=backend)
    print(f"sweep of {sys.argv[1]} bytes: alone {per_call_us(big.sum):.1f} us, "
          f"inside torch.compile's frame {per_call_us(framed, x):.1f} us")
