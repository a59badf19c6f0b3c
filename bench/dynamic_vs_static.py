"""One dynamic compile against a compile per shape, in one process, the two timed in
alternating rounds (the sweep of ``taskloom bench model NAME --dynamic`` times each shape in
three short rounds, which a noisy spell can tip). A CNN is compiled once for a symbolic
batch (``taskloom.compile(..., dynamic=...)``); BERT and GPT-2 through
``taskloom.torch.compile(model, dynamic=True)``, as the sweep does.

    python bench/dynamic_vs_static.py mobilenet_v2 --batch 1,2,8
    python bench/dynamic_vs_static.py gpt2 --batch 1,3 --seq 7,128
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

import taskloom
from taskloom.bench import zoo
from taskloom.bench.timing import machine, medians, time_rounds

TRANSFORMERS = ("bert", "gpt2")


def _systems(name: str, max_batch: int) -> tuple[Any, Callable[[Any], Any]]:
    """The dynamic compile, and how to compile one shape statically (from its example inputs)."""
    model, inputs = zoo.build(name, 1, 7, 0)
    if name in TRANSFORMERS:
        import taskloom.torch as tt
        return tt.compile(model, dynamic=True), lambda ins: tt.compile(model)
    dynamic = taskloom.compile(model, (inputs[0],), dynamic={0: {0: ("batch", 1, max_batch)}})
    return dynamic, lambda ins: taskloom.compile(model, tuple(ins))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a model of taskloom bench model's zoo")
    p.add_argument("--batch", default="1,2,8", help="comma-separated batch sizes (default 1,2,8)")
    p.add_argument("--seq", default="128", help="comma-separated sequence lengths of bert and gpt2 (default 128)")
    p.add_argument("--max-batch", type=int, default=16, help="a CNN's symbolic batch's largest value (default 16)")
    p.add_argument("--repeats", type=int, default=10, help="calls per round (default 10)")
    p.add_argument("--rounds", type=int, default=8, help="rounds the two take turns in (default 8)")
    args = p.parse_args(argv)
    import torch
    torch.set_num_threads(2)
    torch._dynamo.config.recompile_limit = 64  # a static compile per shape, all of one model
    print(f"machine: {machine()}")
    dynamic, static_of = _systems(args.model, args.max_batch)
    seqs = [int(s) for s in args.seq.split(",")] if args.model in TRANSFORMERS else [0]
    print("| batch | seq | dynamic ms | static ms | dynamic / static |\n|---|---|---|---|---|")
    with torch.inference_mode():
        for batch in (int(b) for b in args.batch.split(",")):
            for seq in seqs:
                _, inputs = zoo.build(args.model, batch, seq or 128, 0)
                static = static_of(inputs)
                xs = [x.numpy() for x in inputs] if args.model not in TRANSFORMERS else inputs
                times = time_rounds({"dynamic": lambda: dynamic(*xs), "static": lambda: static(*xs)},
                                    repeats=args.repeats, rounds=args.rounds)
                ms = medians(times)
                print(f"| {batch} | {seq or '-'} | {ms['dynamic']:.3f} | {ms['static']:.3f} | "
                      f"{ms['dynamic'] / ms['static']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
