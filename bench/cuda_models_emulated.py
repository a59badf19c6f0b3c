"""Benchmark models compiled for a CUDA target and run whole in the SIMT emulator, against
eager PyTorch on the CPU: the check that every operator of a real model schedules, builds
with nvcc and computes the right numbers on the GPU path, where no GPU is at hand.

    .venv/bin/python bench/cuda_models_emulated.py [--arch sm_90] [--seq 32] mlp mobilenet_v2 bert resnet50
"""
from __future__ import annotations

import argparse
import time

import torch

from taskloom.bench.zoo import build
from taskloom.frontend.torch import Backend


def first(out):
    return out if isinstance(out, torch.Tensor) else out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--seq", type=int, default=32)
    args = parser.parse_args()
    print("| model | kernels | compile + one emulated call (s) | max relative difference to eager |\n|---|---|---|---|")
    for name in args.models:
        model, inputs = build(name, batch=1, seq=args.seq)
        torch._dynamo.reset()
        backend = Backend(target=f"cuda:{args.arch}", device="emulator")
        compiled = torch.compile(model, backend=backend)
        started = time.perf_counter()
        with torch.no_grad():
            got = first(compiled(*inputs))
            seconds = time.perf_counter() - started
            want = first(model(*inputs))
        diff = float((got - want).abs().max() / want.abs().max())
        kernels = sum(len(fn.compiled_graph.meta["kernels"]) for fn in backend.compiled if fn.compiled_graph)
        print(f"| {name} | {kernels} | {seconds:.0f} | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
