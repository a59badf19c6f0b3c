"""Where a transformer's dynamic compile goes, against a static one: torch's part (dynamo's
trace up to the backend, then ``lower_to_aten``'s ``make_fx``) and taskloom's (the rest of
the backend: conversion, passes, scheduling, code generation, gcc). Each compile runs in a
fresh process with a fresh cache, the two modes taking turns, and the table gives medians and
the ratio the compile-time bar of dynamic shapes reads (dynamic over one static compile),
with the floor torch's part sets: the ratio if taskloom's part of the dynamic compile cost no
more than its static one.

    python bench/dynamic_compile_phases.py gpt2 bert --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = "--child"


def child(name: str, mode: str) -> None:
    """One compile of ``name`` (batch 3, sequence 7) in this process; prints its phases as JSON."""
    os.environ["TASKLOOM_CACHE_DIR"] = tempfile.mkdtemp()
    import torch
    torch.set_num_threads(2)
    import taskloom.frontend.torch as frontend
    import taskloom.torch as tt
    from taskloom.bench import zoo
    model, inputs = zoo.build(name, 3, 7, 0)
    marks: dict[str, float] = {}
    entered, lower = frontend.Backend.__call__, frontend.lower_to_aten

    def backend(self, *args, **kwargs):
        marks.setdefault("backend", time.perf_counter())
        return entered(self, *args, **kwargs)

    def lowering(*args, **kwargs):
        started = time.perf_counter()
        try:
            return lower(*args, **kwargs)
        finally:
            marks["lower"] = marks.get("lower", 0.0) + time.perf_counter() - started
    frontend.Backend.__call__, frontend.lower_to_aten = backend, lowering
    started = time.perf_counter()
    compiled = tt.compile(model, dynamic=mode == "dynamic")
    with torch.inference_mode():
        compiled(*inputs)
    total = time.perf_counter() - started
    dynamo = marks["backend"] - started
    print(json.dumps({"total": total, "dynamo": dynamo, "lower": marks["lower"],
                      "taskloom": total - dynamo - marks["lower"]}))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == CHILD:
        child(sys.argv[2], sys.argv[3])
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", choices=("bert", "gpt2"))
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for name in args.models:
            for mode in ("dynamic", "static"):
                out = subprocess.run([sys.executable, __file__, CHILD, name, mode], capture_output=True,
                                     text=True, check=True).stdout
                runs.setdefault((name, mode), []).append(json.loads(out.strip().splitlines()[-1]))
    print(f"medians of {args.rounds} fresh processes each, seconds\n")
    print("| model | mode | total | dynamo | lower_to_aten | taskloom |\n|---|---|---|---|---|---|")
    med = {key: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for key, rs in runs.items()}
    for (name, mode), m in med.items():
        print(f"| {name} | {mode} | {m['total']:.2f} | {m['dynamo']:.2f} | {m['lower']:.2f} | {m['taskloom']:.2f} |")
    print("\n| model | dynamic / static | floor (torch's part alone) |\n|---|---|---|")
    for name in args.models:
        d, s = med[(name, "dynamic")], med[(name, "static")]
        floor = (d["dynamo"] + d["lower"] + s["taskloom"]) / s["total"]
        print(f"| {name} | {d['total'] / s['total']:.2f}x | {floor:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
