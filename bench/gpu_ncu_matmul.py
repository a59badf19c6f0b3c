"""The tensor-core template's bar products, each launched once on the GPU, for Nsight Compute
to read (``ncu --kernel-name regex:^k[0-9]+_ python3 bench/gpu_ncu_matmul.py``): tensor-pipe
use, bank conflicts, stall reasons and occupancy, where the emulator can only count."""
from __future__ import annotations

import os
from typing import Any

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input

SHAPES = [(4096, 4096, 4096), (2039, 2039, 2039), (128, 3072, 768)]  # (M, N, K)


def compile_products(target: Any, device: str) -> list[tuple[tuple[int, int, int], Any]]:
    """Each shape's float16 product compiled for ``target``, then the first shape again with
    wgmma turned off (on sm_90a: the mma.sync template's pick beside the Hopper one's)."""
    out = []
    for (m, n, k), wgmma in [(s, "1") for s in SHAPES] + [(SHAPES[0], "0")]:
        a, b = input((m, k), "float16", name="a"), input((k, n), "float16", name="b")
        before = os.environ.get("TASKLOOM_WGMMA")
        os.environ["TASKLOOM_WGMMA"] = wgmma if before != "0" else "0"
        try:
            out.append(((m, n, k), taskloom.compile(Graph([a, b], [ops.matmul(a, b)]), target=target, device=device)))
        finally:
            if before is None:
                del os.environ["TASKLOOM_WGMMA"]
            else:
                os.environ["TASKLOOM_WGMMA"] = before
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
