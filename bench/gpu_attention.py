"""Attention on an NVIDIA GPU: taskloom's fused attention template against PyTorch eager
(``scaled_dot_product_attention``: flash or memory-efficient kernels), ``torch.compile`` and
``torch.compile(mode="reduce-overhead")``, in one process on the same inputs, checked against
eager first, then timed with CUDA events in rounds (:mod:`taskloom.bench.gpu`).

    .venv/bin/python bench/gpu_attention.py [--dtype float16] [--causal] [--json FILE] \\
        --shape 1,12,128,64 --shape 1,12,512,64 --shape 8,16,1024,64

Each ``--shape`` is ``batch,heads,sequence,head_size``; queries, keys and values share it.
Needs a GPU (``torch.cuda.is_available()``).
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from taskloom.bench.gpu import SYSTEMS, _check, _peers, _rows, _torch, format_rows, gpu_facts


def bench_attention(shape: tuple[int, int, int, int], dtype: str, causal: bool, repeats: int,
                    rounds: int) -> dict[str, Any]:
    """``softmax(q kᵀ / sqrt(d)) v`` over ``shape`` (B, H, L, D): the rows and the problem."""
    torch = _torch()
    B, H, L, D = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=getattr(torch, dtype), generator=g) for _ in range(3))
    reference = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)

    def attention(a: Any, b: Any, c: Any) -> Any:  # what torch.compile traces
        return torch.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=causal)
    makes = _peers(torch, attention, (q, k, v))
    flop = 4 * B * H * L * L * D // (2 if causal else 1)
    with torch.inference_mode():
        checked = {name: _check(name, makes[name], reference, 2e-2) for name in SYSTEMS}
        rows = _rows(checked, repeats, rounds, flop)
    torch._dynamo.reset()
    return {"op": "attention", "shape": list(shape), "dtype": dtype, "causal": causal, "flop": flop, "rows": rows,
            "gpu": gpu_facts()}


def _shape(text: str) -> tuple[int, int, int, int]:
    parts = tuple(int(x) for x in text.split(","))
    if len(parts) != 4 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"--shape takes batch,heads,sequence,head_size, got {text!r}")
    return parts  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", action="append", type=_shape, required=True)
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = []
    for shape in args.shape:
        results.append(bench_attention(shape, args.dtype, args.causal, args.repeats, args.rounds))
        print(format_rows(f"attention {'x'.join(map(str, shape))} ({args.dtype}{', causal' if args.causal else ''}) "
                          f"on {results[-1]['gpu']['name']}", results[-1]["rows"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"op": "attention", "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
