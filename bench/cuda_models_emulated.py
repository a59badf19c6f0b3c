"""Benchmark models compiled for a CUDA target and run whole in the SIMT emulator, against
eager PyTorch on the CPU: the check that every operator of a real model schedules, builds
with nvcc and computes the right numbers on the GPU path, where no GPU is at hand. With
``--dtype float16`` the model runs in half precision on the GPU path (its contractions on
the tensor-core template) and is compared with the float32 model in eager PyTorch.

    .venv/bin/python bench/cuda_models_emulated.py [--arch sm_90] [--seq 32] [--dtype float16] \
        mlp mobilenet_v2 bert resnet50
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
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    args = parser.parse_args()
    print("| model | kernels | tensor-core matmuls | fused attentions | compile + one emulated call (s) | max relative "
          "difference to eager float32 |\n|---|---|---|---|---|---|")
    for name in args.models:
        model, inputs = build(name, batch=1, seq=args.seq)
        torch._dynamo.reset()
        backend = Backend(target=f"cuda:{args.arch}", device="emulator")
        with torch.no_grad():
            want = first(model(*inputs))
        if args.dtype == "float16":
            model = model.half()
            inputs = [i.half() if i.is_floating_point() else i for i in inputs]
        compiled = torch.compile(model, backend=backend)
        started = time.perf_counter()
        with torch.no_grad():
            got = first(compiled(*inputs)).float()
            seconds = time.perf_counter() - started
        diff = float((got - want).abs().max() / want.abs().max())
        graphs = [g for fn in backend.compiled for g in fn.compiled_graphs]
        kernels = sum(len(g.meta["kernels"]) for g in graphs)
        texts = [text for g in graphs for text in g.meta["kernel_ir"]]
        mma, fused = (sum(f"template='{t}'" in text for text in texts) for t in ("matmul_mma", "attention_cuda"))
        print(f"| {name} | {kernels} | {mma} | {fused} | {seconds:.0f} | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
