"""Attention on the CPU: taskloom's fused attention kernel against the unfused chain it
replaces (two matmuls and a softmax, the scores stored) and against PyTorch's
``scaled_dot_product_attention`` (its fused CPU kernel), timed in rotating rounds.

The graph is what a model traces: queries, keys and values (B, L, H*D) as linear layers
leave them, the heads split, ``softmax(q kᵀ / sqrt(D) + mask) v``, the heads merged.

    .venv/bin/python bench/cpu_attention.py [--shapes whisper,bert,vit,gpt2] [--rounds 3] [--json F]
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch

import taskloom
from taskloom import ops
from taskloom.bench.timing import machine, time_rounds, versions, write_json
from taskloom.graph import Graph, input
from taskloom.schedule import registry

#: name: (batch, queries, keys, heads, head size, padding mask, causal)
SHAPES = {
    "whisper": (1, 1500, 1500, 8, 64, False, False),  # Whisper-base encoder
    "bert": (1, 128, 128, 12, 64, True, False),       # BERT-base, a padding mask
    "bert384": (1, 384, 384, 12, 64, True, False),
    "vit": (1, 197, 197, 12, 64, False, False),       # ViT-base/16 at 224
    "gpt2": (1, 1024, 1024, 12, 64, False, True),     # GPT-2 small, full context
}


def traced(B: int, L: int, S: int, H: int, D: int, mask: bool, causal: bool) -> Graph:
    """The attention chain as a model traces it (no fused operator in the graph)."""
    q, k, v = (input((B, n, H * D), "float32", name=x) for x, n in zip("qkv", (L, S, S)))
    m = input((B, 1, 1, S), "float32", name="mask")

    def split(t, n):
        return ops.reshape(ops.permute(ops.reshape(t, (B, n, H, D)), (0, 2, 1, 3)), (B * H, n, D))
    s = ops.reshape(ops.batch_matmul(split(q, L), ops.transpose(split(k, S), 1, 2)), (B, H, L, S))
    s = ops.div(s, taskloom.asarray(np.array(np.sqrt(D), "float32")))
    if mask:
        s = ops.add(s, m)
    if causal:
        s = ops.add(s, taskloom.asarray(np.triu(np.full((L, S), -np.inf, "float32"), 1)))
    p = ops.softmax(s, axis=-1)
    o = ops.batch_matmul(ops.reshape(p, (B * H, L, S)), split(v, S))
    out = ops.reshape(ops.permute(ops.reshape(o, (B, H, L, D)), (0, 2, 1, 3)), (B, L, H * D))
    return Graph([q, k, v, m] if mask else [q, k, v], [out])


def unfused(graph: Graph):
    """``graph`` compiled with the CPU attention template withdrawn: the chain as before."""
    saved = registry._TEMPLATES["cpu"]
    registry._TEMPLATES["cpu"] = [(n, f) for n, f in saved if n != "attention_cpu"]
    try:
        return taskloom.compile(graph)
    finally:
        registry._TEMPLATES["cpu"] = saved


def measure(name: str, rounds: int, repeats: int) -> dict:
    B, L, S, H, D, mask, causal = SHAPES[name]
    graph = traced(B, L, S, H, D, mask, causal)
    fused, chain = taskloom.compile(graph), unfused(graph)
    assert any(k["schedule"].startswith("attention_cpu") for k in fused.meta["kernels"]), fused.meta["kernels"]
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((B, n, H * D), dtype=np.float32) for n in (L, S, S))
    pad = np.where(rng.random((B, 1, 1, S)) < 0.2, -1e4, 0).astype(np.float32)
    args = (q, k, v, pad) if mask else (q, k, v)
    tq, tk, tv = (torch.from_numpy(x).view(B, -1, H, D).transpose(1, 2) for x in (q, k, v))
    tm = torch.from_numpy(pad) if mask else None

    def sdpa():
        with torch.inference_mode():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, is_causal=causal) \
                .transpose(1, 2).reshape(B, L, H * D)
    want = sdpa().numpy()
    diff = max(float(np.abs(f(*args) - want).max()) for f in (fused, chain))
    times = time_rounds({"fused": lambda: fused(*args), "unfused": lambda: chain(*args), "sdpa": sdpa},
                        repeats=repeats, rounds=rounds)
    med = {n: statistics.median(x for r in t for x in r) for n, t in times.items()}  # type: ignore[union-attr]
    return {"shape": name, "dims": SHAPES[name], "ms": med, "max_abs_diff": diff,
            "rounds": {n: [statistics.median(r) for r in t] for n, t in times.items()}}  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="whisper,bert,vit,gpt2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    print("| shape (B, L, S, H, D, mask, causal) | fused ms | unfused ms | torch SDPA ms | fused / unfused "
          "| fused / SDPA | max abs diff |\n|---|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        r = measure(name, args.rounds, args.repeats)
        ms = r["ms"]
        print(f"| {name} {r['dims']} | {ms['fused']:.2f} | {ms['unfused']:.2f} | {ms['sdpa']:.2f} | "
              f"{ms['fused'] / ms['unfused']:.2f} | {ms['fused'] / ms['sdpa']:.2f} | {r['max_abs_diff']:.1e} |",
              flush=True)
        rows.append(r)
    if args.json:
        write_json(args.json, {"machine": machine(), "versions": versions(), "torch_threads": torch.get_num_threads(),
                               "command": "bench/cpu_attention.py --shapes " + args.shapes, "rows": rows})


if __name__ == "__main__":
    main()
