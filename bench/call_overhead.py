"""Where the time of a small model goes: three linears (H -> H -> H -> 10, ReLU between)
called through each layer of taskloom's stack, next to eager PyTorch.

    python bench/call_overhead.py --batch 1 --hidden 64 --hidden 768 [--rounds 5] [--json F]

Rows, each the median microseconds per call over ``--rounds`` blocks of ``--calls`` calls:

- ``torch eager``: the module under ``torch.inference_mode``;
- ``torch.compile(taskloom)``: what dynamo adds (guards, frame) around the next row;
- ``compiled graph, torch in``: ``taskloom.compile(model, (x,))`` called with a tensor;
- ``compiled graph, numpy in``: the same called with a numpy array;
- ``kernels``: the kernels alone, timed inside the native launcher (``profiling()``).

The differences between rows are the costs of each layer; a small model's kernels take a
few microseconds, so those costs decide its latency.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

import taskloom
from taskloom.bench.timing import machine, versions


def per_call_us(fn, calls: int, rounds: int) -> float:
    for _ in range(max(10, calls // 10)):
        fn()
    blocks = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        blocks.append((time.perf_counter() - started) / calls * 1e6)
    return float(np.median(blocks))


def measure(batch: int, hidden: int, calls: int, rounds: int, threads: int) -> dict:
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                                torch.nn.ReLU(), torch.nn.Linear(hidden, 10)).eval()
    x = torch.randn(batch, hidden)
    xn = x.numpy()
    graph = taskloom.compile(model, (x,))
    graph.set_num_threads(threads)
    dynamo = torch.compile(model, backend="taskloom")
    with torch.inference_mode():
        want = model(x)
        for out in (dynamo(x), graph(x), torch.from_numpy(np.asarray(graph(xn)))):
            torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
        rows = {"torch eager": per_call_us(lambda: model(x), calls, rounds),
                "torch.compile(taskloom)": per_call_us(lambda: dynamo(x), calls, rounds),
                "compiled graph, torch in": per_call_us(lambda: graph(x), calls, rounds),
                "compiled graph, numpy in": per_call_us(lambda: graph(xn), calls, rounds)}
        with graph.profiling() as kernels:
            for _ in range(calls):
                graph(xn)
    rows["kernels"] = sum(k["median_ms"] for k in kernels) * 1e3
    return {"batch": batch, "hidden": hidden, "us": rows, "schedules": [k["schedule"] for k in kernels]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, action="append", help="batch sizes (default 1)")
    parser.add_argument("--hidden", type=int, action="append", help="hidden widths (default 64)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed block (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="timed blocks per row (default 5)")
    parser.add_argument("--threads", type=int, default=taskloom.target.CpuTarget.host().num_cores)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch._dynamo.config.recompile_limit = 64  # a torch.compile'd model per row, all of one class
    results = []
    for batch in args.batch or [1]:
        for hidden in args.hidden or [64]:
            r = measure(batch, hidden, args.calls, args.rounds, args.threads)
            results.append(r)
            cells = "  ".join(f"{k} {v:.1f}" for k, v in r["us"].items())
            print(f"batch {batch} hidden {hidden} (us per call): {cells}", flush=True)
    if args.json:
        command = "python bench/call_overhead.py " + " ".join(sys.argv[1:] if argv is None else argv)
        Path(args.json).write_text(json.dumps({"command": command, "results": results, "machine": machine(),
                                               "versions": versions()}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
