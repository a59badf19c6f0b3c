"""Compiles zoo models for a CUDA target once with symbolic batch and sequence
(``torch.compile(dynamic=True)``) and once per static shape, without running them (no GPU
needed): the compile times (each compile into a build cache of its own, so neither reuses
the other's kernels), the kernels, the variant tables, and whether the symbolic sizes were
kept (else the frontend compiled per shape and warned).

    python3 bench/cuda_dynamic_compile.py --arch sm_90a bert gpt2
"""
from __future__ import annotations

import argparse
import os
import tempfile
import warnings

from gpu_prepare import compile_only
from taskloom.bench.zoo import build
from taskloom.frontend.torch import PerShapeWarning
from taskloom.target import CudaTarget


def compile_once(name: str, target: CudaTarget, seq: int, dynamic: bool) -> dict:
    """Model ``name`` in float16 compiled for ``target``: seconds, kernels, variants."""
    model, inputs = build(name, batch=1, seq=seq)
    model = model.half().eval()
    inputs = tuple(x.half() if x.is_floating_point() else x for x in inputs)
    before = os.environ.get("TASKLOOM_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="taskloom-cache-") as cache, \
            warnings.catch_warnings(record=True) as caught:
        os.environ["TASKLOOM_CACHE_DIR"] = cache  # a cold build cache
        warnings.simplefilter("always", PerShapeWarning)
        seconds, backend = compile_only(lambda *xs: model(*xs), inputs, target, dynamic)
    if before is None:
        os.environ.pop("TASKLOOM_CACHE_DIR", None)
    else:
        os.environ["TASKLOOM_CACHE_DIR"] = before
    meta = [fn.compiled_graph.meta for fn in backend.compiled if fn.compiled_graph is not None]
    return {"model": name, "dynamic": dynamic, "seq": seq, "seconds": round(seconds, 1),
            "kernels": sum(len(m["kernels"]) for m in meta),
            "symbols": sorted({s["name"] for m in meta for s in m.get("dynamic", {}).get("symbols", [])}),
            "variant_tables": sum(len(m.get("dynamic", {}).get("variants", [])) for m in meta),
            "per_shape": [str(w.message)[:160] for w in caught if issubclass(w.category, PerShapeWarning)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    target = CudaTarget.from_arch(args.arch)
    print("| model | compile | seconds | kernels | symbols | variant tables | per-shape warning |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models:
        for dynamic in (False, True):
            r = compile_once(name, target, args.seq, dynamic)
            how = "dynamic=True" if dynamic else f"static, seq {args.seq}"
            print(f"| {name} | {how} | {r['seconds']} | {r['kernels']} | {', '.join(r['symbols']) or '-'} | "
                  f"{r['variant_tables']} | {'; '.join(r['per_shape']) or '-'} |", flush=True)


if __name__ == "__main__":
    main()
