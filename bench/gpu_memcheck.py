"""ResNet-50 and BERT-base in float16 at batch 1, compiled for this GPU and called once,
kernel by kernel: the program for ``compute-sanitizer --tool memcheck`` to watch, so that
every kernel of the two models is checked for an access outside its buffers.

    compute-sanitizer --tool memcheck --error-exitcode 1 python3 bench/gpu_memcheck.py [NAMES]
"""
from __future__ import annotations

import os
import sys

import torch

from gpu_session import _first  # (the models stage's wrapping, so that its builds serve)
from taskloom.bench.gpu import _taskloom_backend
from taskloom.bench.zoo import build


def main(names: list[str]) -> None:
    os.environ["TASKLOOM_CUDA_GRAPHS"] = "0"  # each kernel its own launch, as the sanitizer sees best
    for name in names:
        model, inputs = build(name, batch=1, seq=128)
        model = model.to("cuda", torch.float16).eval()
        inputs = tuple(x.to("cuda", torch.float16) if x.is_floating_point() else x.to("cuda") for x in inputs)
        torch._dynamo.reset()
        compiled = torch.compile(lambda *xs: _first(model(*xs)), backend=_taskloom_backend())
        with torch.inference_mode():
            compiled(*inputs)
        torch.cuda.synchronize()
        print(f"{name}: called once under the sanitizer", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["resnet50", "bert"])
