"""The tensor-core template's bar products, each launched once on the GPU, for Nsight Compute
to read (``ncu --kernel-name regex:^k[0-9]+_ python3 bench/gpu_ncu_matmul.py``): tensor-pipe
use, bank conflicts, stall reasons and occupancy, where the emulator can only count."""
from __future__ import annotations

from typing import Any

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input

SHAPES = [(4096, 4096, 4096), (2039, 2039, 2039), (128, 3072, 768)]  # (M, N, K)


def compile_products(target: Any, device: str) -> list[tuple[tuple[int, int, int], Any]]:
    """Each shape's float16 product compiled for ``target``."""
    out = []
    for m, n, k in SHAPES:
        a, b = input((m, k), "float16", name="a"), input((k, n), "float16", name="b")
        out.append(((m, n, k), taskloom.compile(Graph([a, b], [ops.matmul(a, b)]), target=target, device=device)))
    return out


def main() -> None:
    import torch
    for (m, n, k), compiled in compile_products("cuda", "cuda"):
        print(f"{m}x{n}x{k}: {compiled.meta['kernels'][0]['schedule']}", flush=True)
        compiled(torch.randn(m, k, device="cuda", dtype=torch.float16),
                 torch.randn(k, n, device="cuda", dtype=torch.float16))
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
