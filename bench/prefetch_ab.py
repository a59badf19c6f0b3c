"""Whole models with their weights' panels prefetched and without: each model compiled twice
in one process (``weights_stream`` forced off, then on, whatever the graph's size says) and
timed in alternating rounds, so that drift hits both.

    python bench/prefetch_ab.py resnet50 bert --rounds 10
"""
from __future__ import annotations

import argparse
import statistics
import sys
from unittest import mock

import numpy as np

import taskloom
from taskloom.bench import zoo
from taskloom.bench.peers import first_output
from taskloom.bench.timing import machine, time_rounds
from taskloom.schedule.select import schedule_kernel


def compile_with(model, inputs, stream: bool):
    """``taskloom.compile(model, inputs)`` with every kernel told the weights stream (or not)."""
    forced = lambda *a, **k: schedule_kernel(*a, **{**k, "weights_stream": stream})  # noqa: E731
    with mock.patch("taskloom.compiler.graph_compiler.schedule_kernel", forced):
        return taskloom.compile(model, inputs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args(argv)
    print(f"machine: {machine()}")
    print("| model | weights (MiB) | not prefetched ms | prefetched ms | speed-up |\n|---|---|---|---|---|")
    for name in args.models:
        model, inputs = zoo.build(name, args.batch, args.seq, 0)
        plain, streamed = (compile_with(model, tuple(inputs), s) for s in (False, True))
        data = [x.numpy() for x in inputs]
        np.testing.assert_allclose(first_output(plain(*data)), first_output(streamed(*data)), rtol=1e-4, atol=1e-4)
        times = time_rounds({"plain": lambda: plain(*data), "streamed": lambda: streamed(*data)},
                            repeats=10, rounds=args.rounds)
        med = {k: statistics.median(t for r in v for t in r) for k, v in times.items()}  # type: ignore[union-attr]
        mib = sum(c.nbytes for c in streamed.constants) / 2 ** 20
        print(f"| {name} | {mib:.0f} | {med['plain']:.2f} | {med['streamed']:.2f} | "
              f"{med['plain'] / med['streamed']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
