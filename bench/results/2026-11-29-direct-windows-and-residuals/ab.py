"""A/B in one process: a model compiled with the features of this change turned off one by
one (monkeypatched at compile time), and ORT, timed in rotating rounds at each batch.

    python ab.py resnet50 1,2,4,8,16 base,direct,both      # dynamic batch 1-16
    python ab.py resnet50 8 base,both                        # static batch 8
    TARGET="cpu -isa=avx2" python ab.py resnet50 8 base,both  # the AVX2 code, on this machine
"""
import contextlib, os, sys, time, statistics, tempfile
from pathlib import Path
os.environ.setdefault("TASKLOOM_CACHE_DIR", tempfile.mkdtemp())
import torch; torch.set_num_threads(2)
import numpy as np, taskloom
from taskloom.bench import zoo, peers
from taskloom.bench.timing import time_rounds
import taskloom.schedule.cpu as cpu
from taskloom.target.cpu import CpuTarget
from taskloom.compiler.graph_compiler import _Places


@contextlib.contextmanager
def features(name):
    saved = cpu.a_window_run, CpuTarget.nhwc_pads_windows, _Places._written_over
    if name in ("base", "inplace"):  # no direct window convolution
        cpu.a_window_run = lambda con: 0
        CpuTarget.nhwc_pads_windows = lambda self: False
    if name in ("base", "direct"):  # no result written over an input
        _Places._written_over = lambda self, *a: {}
    try:
        yield
    finally:
        cpu.a_window_run, CpuTarget.nhwc_pads_windows, _Places._written_over = saved


def main():
    name, batches, rules = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], sys.argv[3].split(",")
    dynamic = len(batches) > 1
    model, ins = zoo.build(name, batches[0])
    systems = {}
    for r in rules:
        with features(r):
            t0 = time.perf_counter()
            systems[r] = taskloom.compile(model, (ins[0],), dynamic={0: {0: ("batch", 1, 16)}} if dynamic else None,
                                          target=os.environ.get("TARGET"))
        print(f"{r}: compile {time.perf_counter() - t0:.2f}s, {systems[r].meta['memory']}", flush=True)
    cols = rules + ["ort"]
    print("| batch | " + " | ".join(f"{c} ms" for c in cols) + " | " + " | ".join(f"{r}/{rules[0]}" for r in rules[1:])
          + " | " + " | ".join(f"{r}/ort" for r in rules) + " |")
    for b in batches:
        m, x = zoo.build(name, b)
        ort = peers.prepare("ort", m, tuple(x), threads=2, workdir=Path(tempfile.mkdtemp()))
        xn = x[0].numpy()
        ref = systems[rules[0]](xn)
        for r in rules[1:]:
            assert np.abs(systems[r](xn) - ref).max() <= 1e-4 * np.abs(ref).max()
        fns = {r: (lambda s=systems[r]: s(xn)) for r in rules}
        fns["ort"] = ort.run
        t = time_rounds(fns, repeats=int(os.environ.get("REPEATS", 10)), rounds=int(os.environ.get("ROUNDS", 5)))
        ms = {k: statistics.median(v for rr in t[k] for v in rr) for k in fns}
        print(f"| {b} | " + " | ".join(f"{ms[c]:.2f}" for c in cols) + " | "
              + " | ".join(f"{ms[r] / ms[rules[0]]:.3f}" for r in rules[1:]) + " | "
              + " | ".join(f"{ms[r] / ms['ort']:.3f}" for r in rules) + " |", flush=True)


if __name__ == "__main__":
    main()
