"""Issue 30's grid of shapes through one dynamic compile of each transformer: every (batch,
sequence) of batches 1, 3, 8 and sequences 1, 7, 16, 64, 128, 384, 512, against eager
PyTorch, counting the graphs dynamo gave taskloom and the libraries taskloom built.

    .venv/bin/python bench/dynamic_shape_grid.py [bert gpt2] [--first 3,7] [--json FILE]

The first call is at ``--first``; the grid follows in order (batch outer). Each row gives
what the first call at that shape took (a trace, a lowering and a compile, when dynamo
traced again), the graphs and libraries so far, and the largest difference from eager.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

BATCHES = (1, 3, 8)
SEQUENCES = (1, 7, 16, 64, 128, 384, 512)


def grid(name: str, first: tuple[int, int]) -> dict:
    import torch

    import taskloom.torch as tt
    from taskloom.bench.zoo import build, inputs
    torch.manual_seed(0)
    model, _ = build(name, batch=first[0], seq=first[1])
    compiled = tt.compile(model, dynamic=True)
    backend = compiled.taskloom_backend
    rows = []
    for b, s in [first] + [(b, s) for b in BATCHES for s in SEQUENCES]:
        (x,) = inputs(name, b, s)
        with torch.inference_mode():
            t0 = time.perf_counter()
            got = compiled(x)
            first_s = time.perf_counter() - t0
            want = model(x)
        libraries = backend.libraries
        rows.append({"batch": b, "seq": s, "first_call_s": round(first_s, 3), "graphs": len(backend.compiled),
                     "libraries": libraries, "max_abs_diff": float((got - want).abs().max())})
        print(f"{name} batch {b} seq {s:3d}: first call {first_s:6.2f} s  graphs {rows[-1]['graphs']}  "
              f"libraries {libraries}  max |diff| {rows[-1]['max_abs_diff']:.1e}", flush=True)
    return {"model": name, "first": first, "rows": rows,
            "reuses": [None if fn.reuses is None else backend.compiled.index(fn.reuses) for fn in backend.compiled]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="*", default=["bert", "gpt2"])
    p.add_argument("--first", default="3,7", help="the first call's batch,sequence")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    first = tuple(int(v) for v in args.first.split(","))
    records = [grid(name, first) for name in args.models]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
