"""A/B in one process: a model compiled with results written in place into pads and
concatenations (``before``: turned off by monkeypatching the target at compile time) and
ORT, timed in rotating rounds at each batch.

    python ab.py inception_v3 8                 # static batch 8
    python ab.py resnet50 1,2,4,8,16            # dynamic batch 1-16
    TARGET="cpu -isa=avx2" python ab.py resnet50 8
"""
import contextlib, os, sys, time, statistics, tempfile
from pathlib import Path
os.environ.setdefault("TASKLOOM_CACHE_DIR", tempfile.mkdtemp())
import torch; torch.set_num_threads(2)
import numpy as np, taskloom
from taskloom.bench import zoo, peers
from taskloom.bench.timing import time_rounds
from taskloom.target.cpu import CpuTarget


@contextlib.contextmanager
def placed(on):
    saved = CpuTarget.writes_blocks_in_place
    if not on:
        CpuTarget.writes_blocks_in_place = lambda self: False
    try:
        yield
    finally:
        CpuTarget.writes_blocks_in_place = saved


def main():
    name, batches = sys.argv[1], [int(b) for b in sys.argv[2].split(",")]
    dynamic = len(batches) > 1
    model, ins = zoo.build(name, batches[0])
    systems = {}
    for r in ("before", "after"):
        with placed(r == "after"):
            t0 = time.perf_counter()
            systems[r] = taskloom.compile(model, (ins[0],), dynamic={0: {0: ("batch", 1, 16)}} if dynamic else None,
                                          target=os.environ.get("TARGET"))
        print(f"{r}: compile {time.perf_counter() - t0:.2f}s, {len(systems[r].meta['kernels'])} kernels, "
              f"{systems[r].meta['memory']}", flush=True)
    cols = ["before", "after", "ort"]
    print("| batch | before ms | after ms | ort ms | after/before | before/ort | after/ort |")
    for b in batches:
        m, x = zoo.build(name, b)
        ort = peers.prepare("ort", m, tuple(x), threads=2, workdir=Path(tempfile.mkdtemp()))
        xn = x[0].numpy()
        ref = systems["before"](xn)
        assert np.abs(systems["after"](xn) - ref).max() <= 1e-4 * np.abs(ref).max()
        fns = {r: (lambda s=systems[r]: s(xn)) for r in ("before", "after")}
        fns["ort"] = ort.run
        t = time_rounds(fns, repeats=int(os.environ.get("REPEATS", 10)), rounds=int(os.environ.get("ROUNDS", 5)))
        ms = {k: statistics.median(v for rr in t[k] for v in rr) for k in fns}
        print(f"| {b} | " + " | ".join(f"{ms[c]:.2f}" for c in cols) + f" | {ms['after'] / ms['before']:.3f} | "
              f"{ms['before'] / ms['ort']:.3f} | {ms['after'] / ms['ort']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
