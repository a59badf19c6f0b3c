"""One dynamic compile against a static compile per shape, and against the peers, over a
sweep of batch sizes and sequence lengths, in one run.

    .venv/bin/python bench/dynamic_shapes.py --model bert --batch 1,3 --seq 7,64,128,384 \\
        [--compare static,eager,inductor,ort] [--repeats 10] [--rounds 3] [--json FILE]

Systems (each run the way its documentation recommends):

- ``taskloom-dynamic``: ``taskloom.torch.compile(model, dynamic=True)``, one object for the
  whole sweep; its compile time is the sum of the first calls that compiled (dynamo
  specializes a size of 1, which makes a second graph);
- ``taskloom-static``: ``taskloom.torch.compile(model)`` (``dynamic=False``): a compile per shape;
- ``eager``: the model in PyTorch, ``inference_mode``;
- ``inductor``: ``torch.compile(model, dynamic=True, options={"freezing": True})``;
- ``ort``: ``torch.onnx.export`` with the batch and sequence axes dynamic (the TorchScript
  exporter, or the dynamo one where an operator has no TorchScript export, as GPT-2's
  ``aten::diff`` now), one ONNX Runtime session (``ORT_ENABLE_ALL``) for every shape.

Each shape is timed in ``--rounds`` rounds, every system in a block of its own per round and
the order shifted each round (:mod:`taskloom.bench.timing`); a row gives the median of all
its runs. Every output is checked against eager PyTorch. Compiles are counted from
taskloom's backend; taskloom's and inductor's build caches start empty.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import taskloom.torch as tt
from taskloom.bench.timing import machine, time_block, versions, write_json
from taskloom.bench.zoo import build

SYSTEMS = ("taskloom-dynamic", "static", "eager", "inductor", "ort")


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def _runner(fn: Callable[..., Any], x: torch.Tensor) -> Callable[[], np.ndarray]:
    def run() -> np.ndarray:
        with torch.inference_mode():
            out = fn(x)
        return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)
    return run


class Timed:
    """A system: how to call it on a shape's input, and the seconds its compiles took."""

    def __init__(self, name: str, fn: Callable[[torch.Tensor], Any]):
        self.name, self.fn, self.compile_s, self.first_calls = name, fn, 0.0, []

    def first_call(self, x: torch.Tensor) -> np.ndarray:
        t0 = time.perf_counter()
        out = _runner(self.fn, x)()
        self.first_calls.append(time.perf_counter() - t0)
        return out


def _ort_session(model: Any, x: torch.Tensor, workdir: Path) -> tuple[Callable[[torch.Tensor], Any], float]:
    import onnxruntime as ort
    path = workdir / "model.onnx"
    t0 = time.perf_counter()
    with torch.no_grad():
        try:  # the TorchScript exporter; the dynamo one where an operator has no TorchScript export
            torch.onnx.export(model, (x,), path, dynamo=False, input_names=["input_ids"],
                              dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}})
        except torch.onnx.errors.UnsupportedOperatorError:
            dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence")}
            wide = x.repeat(2, 2) if x.shape[0] == 1 else x  # (an example size of 1 would be specialized)
            torch.onnx.export(model, (wide,), path, dynamo=True, input_names=["input_ids"], dynamic_shapes=(dims,))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return (lambda ids: session.run(None, {"input_ids": ids.numpy()})[0]), time.perf_counter() - t0


def _systems(model: Any, example: torch.Tensor, compare: list[str], workdir: Path) -> list[Timed]:
    out = [Timed("taskloom-dynamic", tt.compile(model, dynamic=True))]
    if "static" in compare:
        out.append(Timed("taskloom-static", tt.compile(model, dynamic=False)))
    if "eager" in compare:
        out.append(Timed("eager", model))
    if "inductor" in compare:
        out.append(Timed("inductor", torch.compile(model, dynamic=True, options={"freezing": True})))
    if "ort" in compare:
        fn, seconds = _ort_session(model, example, workdir)
        timed = Timed("ort", fn)
        timed.compile_s = seconds
        out.append(timed)
    return out


def _taskloom_compiles(fn: Any) -> int:
    return sum(len(f._programs) for f in fn.taskloom_backend.compiled)


def sweep(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    shapes = [(b, s) for b in args.batch for s in args.seq]
    model, _ = build(args.model, 1, max(args.seq))
    compare = args.compare.split(",")
    limits = {"recompile_limit": 1 << 10, "accumulated_recompile_limit": 1 << 12}
    with tempfile.TemporaryDirectory() as tmp, torch._dynamo.config.patch(**limits):
        # cold caches, so that compile times count every build
        os.environ["TASKLOOM_CACHE_DIR"] = os.environ["TORCHINDUCTOR_CACHE_DIR"] = tmp
        example = torch.randint(0, 1000, shapes[0])
        systems = _systems(model, example, compare, Path(tmp))
        rows = []
        for b, s in shapes:
            x = torch.randint(0, 1000, (b, s))
            reference = _runner(model, x)()
            row: dict[str, Any] = {"batch": b, "seq": s, "ms": {}, "max_abs_diff": {}}
            for sys_ in systems:
                out = sys_.first_call(x)
                row["max_abs_diff"][sys_.name] = float(np.abs(out - reference).max())
            runs: dict[str, list[float]] = {sys_.name: [] for sys_ in systems}
            for r in range(args.rounds):
                for sys_ in systems[r % len(systems):] + systems[:r % len(systems)]:
                    runs[sys_.name] += time_block(_runner(sys_.fn, x), repeats=args.repeats, warmup=1)
            row["ms"] = {k: statistics.median(v) for k, v in runs.items()}
            rows.append(row)
            print(_line(row, [t.name for t in systems]), flush=True)
    counts = {"taskloom-dynamic": _taskloom_compiles(systems[0].fn)}
    for t in systems:
        if t.name == "taskloom-static":
            counts[t.name] = _taskloom_compiles(t.fn)
    # what each first call took beyond a timed call: the compile it triggered, if any
    compile_s = {t.name: t.compile_s + sum(max(0.0, c - row["ms"][t.name] / 1e3)
                                           for c, row in zip(t.first_calls, rows)) for t in systems}
    return {"model": args.model, "shapes": shapes, "rows": rows, "compiles": counts, "compile_s": compile_s,
            "first_calls_s": {t.name: t.first_calls for t in systems}, "command": " ".join(sys.argv),
            "machine": machine(), "versions": versions(), "threads": torch.get_num_threads()}


def _line(row: dict[str, Any], names: list[str]) -> str:
    ms = row["ms"]
    cells = "  ".join(f"{n} {ms[n]:8.2f}" for n in names)
    ratio = f"  dyn/static {ms['taskloom-dynamic'] / ms['taskloom-static']:.3f}" if "taskloom-static" in ms else ""
    return f"batch {row['batch']:2d} seq {row['seq']:4d}  {cells}{ratio}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=("bert", "gpt2"), default="bert")
    p.add_argument("--batch", type=_ints, default=[1, 3])
    p.add_argument("--seq", type=_ints, default=[7, 64, 128, 384])
    p.add_argument("--compare", default="static,eager,inductor,ort")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    record = sweep(args)
    print("compiles:", record["compiles"])
    print("compile seconds over the sweep:", {k: round(v, 1) for k, v in record["compile_s"].items()})
    if args.json:
        write_json(args.json, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
