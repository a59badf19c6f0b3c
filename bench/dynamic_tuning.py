"""A dynamic compile tuned by measurement at its sample points (``tune=1``) against the
same compile at ``tune=0`` (the analytic model's configs) and a static ``tune=0`` compile
per shape, in one process, the three timed in rotating rounds. The model is compiled with
``taskloom.compile(model, inputs, dynamic=...)`` over declared ranges (the batch up to
``--max-batch``, the sequence from 2 up to ``--max-seq``), so that tuning visits each point of
their ladders; the tuning records start empty, and the ``tune=0`` compile runs first (a
later one would read the records).

    python bench/dynamic_tuning.py bert --batch 1,4 --seq 7,64,128 --max-batch 4 --max-seq 128 --budget 6m
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

TRANSFORMERS = ("bert", "gpt2")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="a model of taskloom bench model's zoo")
    p.add_argument("--batch", default="1,4", help="comma-separated batch sizes timed (default 1,4)")
    p.add_argument("--seq", default="7,64,128", help="comma-separated sequence lengths timed (default 7,64,128)")
    p.add_argument("--max-batch", type=int, default=4, help="the symbolic batch's largest value (default 4)")
    p.add_argument("--max-seq", type=int, default=128, help="the symbolic sequence's largest value (default 128)")
    p.add_argument("--budget", default="6m", help="the tuned compile's budget (default 6m)")
    p.add_argument("--repeats", type=int, default=10, help="calls per round (default 10)")
    p.add_argument("--rounds", type=int, default=6, help="rounds the three take turns in (default 6)")
    args = p.parse_args(argv)
    os.environ["TASKLOOM_CACHE_DIR"] = tempfile.mkdtemp(prefix="taskloom-dynamic-tuning-")
    import torch
    import taskloom
    from taskloom.bench import zoo
    from taskloom.bench.peers import first_output
    from taskloom.bench.timing import machine, medians, time_rounds, versions
    torch.set_num_threads(2)
    print(f"machine: {machine()}\nversions: {versions()}")
    transformer = args.model in TRANSFORMERS
    model, example = zoo.build(args.model, 1, 7 if transformer else 128, 0)
    # (transformers' models branch on a sequence of 1: the range starts at 2)
    dims = {0: {0: ("batch", 1, args.max_batch), 1: ("seq", 2, args.max_seq)}} if transformer \
        else {0: {0: ("batch", 1, args.max_batch)}}
    compiled, seconds = {}, {}
    for name, tune in (("untuned", 0), ("tuned", 1)):
        t0 = time.perf_counter()
        compiled[name] = taskloom.compile(model, example, dynamic=dims, tune=tune,
                                          budget=args.budget if tune else None)
        seconds[name] = time.perf_counter() - t0
        print(f"{name} dynamic compile: {seconds[name]:.1f} s; the products' schedules (kernels):")
        schedules = [k["schedule"] for k in compiled[name].meta["kernels"] if k["schedule"].startswith("matmul_cpu")]
        for schedule in dict.fromkeys(schedules):
            print(f"  ({schedules.count(schedule)}) {schedule}")
    print("\n| batch | seq | tuned ms | untuned ms | static ms | tuned / untuned | tuned / static |\n"
          "|---|---|---|---|---|---|---|")
    with torch.inference_mode():
        for batch in (int(b) for b in args.batch.split(",")):
            for seq in ([int(s) for s in args.seq.split(",")] if transformer else [0]):
                _, inputs = zoo.build(args.model, batch, seq or 128, 0)
                static = taskloom.compile(model, inputs)
                xs = [x.numpy() for x in inputs]
                want = first_output(model(*inputs))
                for c in (compiled["tuned"], compiled["untuned"], static):
                    assert abs(first_output(c(*xs)) - want).max() < 1e-3, "an output differs from eager PyTorch"
                times = time_rounds({"tuned": lambda: compiled["tuned"](*xs),
                                     "untuned": lambda: compiled["untuned"](*xs), "static": lambda: static(*xs)},
                                    repeats=args.repeats, rounds=args.rounds)
                ms = medians(times)
                print(f"| {batch} | {seq or '-'} | {ms['tuned']:.3f} | {ms['untuned']:.3f} | {ms['static']:.3f} | "
                      f"{ms['tuned'] / ms['untuned']:.3f} | {ms['tuned'] / ms['static']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
