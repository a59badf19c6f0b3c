"""Whole models at tune=0: the analytic model's picks against the target's fixed default
config, compiled in one process and timed in alternating blocks (so drift hits both).

    python bench/tune0_ab.py resnet50 bert --rounds 5
"""
from __future__ import annotations

import argparse
import sys
from unittest import mock

import numpy as np
import torch

import taskloom
from taskloom.bench import zoo
from taskloom.bench.peers import first_output
from taskloom.bench.timing import machine, median_ms
from taskloom.schedule.templates.matmul_cpu import default_config


def compile_both(name: str, batch: int, seq: int):
    model, inputs = zoo.build(name, batch, seq, 0)
    inputs = tuple(inputs)
    # tune=0 with an empty record database: the model's pick ...
    picked = taskloom.compile(model, inputs)
    # ... and the fixed default, which tune=0 built before the analytic model
    with mock.patch("taskloom.tune.model.best_config", lambda shape, target, pack=None: default_config(shape, target)):
        fixed = taskloom.compile(model, inputs)
    args = [x.numpy() for x in inputs]
    np.testing.assert_allclose(first_output(picked(*args)), first_output(fixed(*args)), rtol=1e-3, atol=1e-3)
    return (lambda: picked(*args)), (lambda: fixed(*args))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    print(f"machine: {machine()}")
    print("| model | tune=0 model pick ms | fixed default ms | default / pick |\n|---|---|---|---|")
    for name in args.models:
        pick, fixed = compile_both(name, args.batch, args.seq)
        a, b = [], []
        for _ in range(args.rounds):
            a.append(median_ms(pick, repeats=20))
            b.append(median_ms(fixed, repeats=20))
        ma, mb = float(np.median(a)), float(np.median(b))
        print(f"| {name} | {ma:.2f} | {mb:.2f} | {mb / ma:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
