"""``taskloom bench model NAME --dynamic``: one dynamic compile against a static compile per
shape, and against the peers, over a sweep of batch sizes (and sequence lengths), in one run.

    taskloom bench model bert --dynamic --batch 1,3 --seq 7,64,128,384 \\
        [--compare static,torch,inductor,ort] [--repeats 10] [--rounds 3] [--json FILE]

Systems, each run the way its documentation recommends:

- ``taskloom-dynamic``, one compiled object for the whole sweep. BERT and GPT-2:
  ``taskloom.torch.compile(model, dynamic=True)``; dynamo specializes a size of 1 where the
  model's code branches on it, which makes graphs of their own (running the first graph's
  library where they are that graph at that size). The CNNs and the MLP, whose image or feature sizes are fixed:
  ``taskloom.compile(model, inputs, dynamic={0: {0: ("batch", 1, B)}})``, one graph up to the
  sweep's largest batch B.
- ``taskloom-static`` (``static``): a compile per shape, the same way with fixed shapes.
- ``torch``: the model in PyTorch eager, ``inference_mode``.
- ``inductor``: ``torch.compile(model, options={"freezing": True})``, ``dynamic=True`` for
  BERT and GPT-2, the batch marked dynamic for the others.
- ``ort``: the model exported with the swept axes dynamic, one ONNX Runtime session
  (``ORT_ENABLE_ALL``) for every shape.

Each shape is timed in ``--rounds`` rounds, every system in a block of its own per round and
the order shifted each round (:mod:`taskloom.bench.timing`); a row gives the median of all
its runs. Every output is checked against eager PyTorch. A system's compile time is what
its first call at each shape took beyond a timed call (the compiles that call triggered),
plus any compile before the sweep; taskloom's and inductor's build caches start empty.
Compiles are counted from taskloom's backend (each program built for a graph; a graph dynamo
traced again that runs an earlier graph's library builds none), beside the graphs dynamo gave it.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from taskloom.bench.peers import first_output
from taskloom.bench.timing import machine, time_rounds, versions, write_json
from taskloom.bench.zoo import SEQUENCE_MODELS, build, inputs

PEERS = ("static", "torch", "inductor", "ort")


class System:
    """A system of the sweep: how to call it on a shape's input, the seconds its compiles took
    before the sweep, its first call at each shape, and how many compiles it made."""

    def __init__(self, name: str, fn: Callable[[Any], Any], compile_s: float = 0.0,
                 compiles: Callable[[], int] | None = None, graphs: Callable[[], int] | None = None):
        self.name, self.fn, self.compile_s, self.compiles, self.graphs = name, fn, compile_s, compiles, graphs
        self.first_calls: list[float] = []


def _runner(fn: Callable[[Any], Any], x: Any) -> Callable[[], np.ndarray]:
    import torch

    def run() -> np.ndarray:
        with torch.inference_mode():
            return first_output(fn(x))
    return run


def _taskloom(name: str, model: Any, example: Any, max_batch: int, dynamic: bool) -> System:
    """taskloom's system (see the module docstring): ``dynamic`` one compile for the sweep,
    else one per shape."""
    import taskloom
    import taskloom.torch as tt
    label = "taskloom-dynamic" if dynamic else "taskloom-static"
    if name in SEQUENCE_MODELS:
        compiled = tt.compile(model, dynamic=dynamic)
        return System(label, compiled, compiles=lambda: compiled.taskloom_backend.libraries,
                      graphs=lambda: len(compiled.taskloom_backend.compiled))
    if not dynamic:
        graphs: dict[tuple[int, ...], Any] = {}

        def call(x: Any) -> Any:
            if tuple(x.shape) not in graphs:
                graphs[tuple(x.shape)] = taskloom.compile(model, (x,))
            return graphs[tuple(x.shape)](x)
        return System(label, call, compiles=lambda: len(graphs))
    t0 = time.perf_counter()
    graph = taskloom.compile(model, (example,), dynamic={0: {0: ("batch", 1, max_batch)}})
    return System(label, graph, time.perf_counter() - t0, compiles=lambda: 1)


def _inductor(name: str, model: Any) -> System:
    import torch
    if name in SEQUENCE_MODELS:
        return System("inductor", torch.compile(model, dynamic=True, options={"freezing": True}))
    compiled = torch.compile(model, options={"freezing": True})
    marked: list[bool] = []

    def call(x: Any) -> Any:
        if not marked:  # the first call's batch marked dynamic: later batches reuse its graph
            torch._dynamo.mark_dynamic(x, 0)
            marked.append(True)
        return compiled(x)
    return System("inductor", call)


def _ort(name: str, model: Any, example: Any, workdir: Path) -> System:
    """One ONNX Runtime session for every shape: the TorchScript exporter with the swept axes
    dynamic, or the dynamo one where an operator has no TorchScript export (GPT-2's ``aten::diff``)."""
    import onnxruntime as ort
    import torch
    path = workdir / "model.onnx"
    axes = {0: "batch", 1: "sequence"} if name in SEQUENCE_MODELS else {0: "batch"}
    t0 = time.perf_counter()
    with torch.no_grad():
        try:
            torch.onnx.export(model, (example,), path, dynamo=False, input_names=["input"],
                              dynamic_axes={"input": axes})
        except torch.onnx.errors.UnsupportedOperatorError:
            dims = {k: torch.export.Dim(v) for k, v in axes.items()}
            wide = example.repeat(2, 2) if example.shape[0] == 1 else example  # (a size of 1 would be fixed)
            torch.onnx.export(model, (wide,), path, dynamo=True, input_names=["input"], dynamic_shapes=(dims,))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = torch.get_num_threads()
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return System("ort", lambda x: session.run(None, {"input": x.numpy()})[0], time.perf_counter() - t0)


def _systems(name: str, model: Any, example: Any, max_batch: int, peers: tuple[str, ...],
             workdir: Path) -> list[System]:
    out = [_taskloom(name, model, example, max_batch, dynamic=True)]
    if "static" in peers:
        out.append(_taskloom(name, model, example, max_batch, dynamic=False))
    if "torch" in peers:
        out.append(System("torch", model))
    if "inductor" in peers:
        out.append(_inductor(name, model))
    if "ort" in peers:
        out.append(_ort(name, model, example, workdir))
    return out


def sweep(name: str, batches: list[int], seqs: list[int], peers: tuple[str, ...], repeats: int = 10,
          rounds: int = 3) -> dict[str, Any]:
    """Times every system at every (batch, seq) and counts compiles; the record
    :func:`format_sweep` prints (see the module docstring)."""
    import torch
    seqs = seqs if name in SEQUENCE_MODELS else [0]
    shapes = [(b, s) for b in batches for s in seqs]
    model, _ = build(name, 1, max(max(seqs), 1))
    limits = {"recompile_limit": 1 << 10, "accumulated_recompile_limit": 1 << 12}
    with tempfile.TemporaryDirectory() as tmp, torch._dynamo.config.patch(**limits), _cold_caches(tmp):
        example = inputs(name, *shapes[0])[0]
        systems = _systems(name, model, example, max(batches), peers, Path(tmp))
        rows = [_time_shape(model, systems, inputs(name, b, s)[0], b, s, repeats, rounds) for b, s in shapes]
    compiles = {t.name: t.compiles() for t in systems if t.compiles is not None}
    graphs = {t.name: t.graphs() for t in systems if t.graphs is not None}  # (dynamo's, for the torch frontend)
    # what each first call took beyond a timed call: the compile it triggered, if any
    compile_s = {t.name: t.compile_s + sum(max(0.0, c - row["ms"][t.name] / 1e3) for c, row in zip(t.first_calls, rows))
                 for t in systems}
    return {"model": name, "shapes": shapes, "rows": rows, "compiles": compiles, "graphs": graphs,
            "compile_s": compile_s, "first_calls_s": {t.name: t.first_calls for t in systems},
            "threads": torch.get_num_threads(), "machine": machine(), "versions": versions()}


@contextlib.contextmanager
def _cold_caches(directory: str) -> Any:
    """taskloom's and inductor's build caches in ``directory``, so that compile times count every build."""
    keys = ("TASKLOOM_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: directory for k in keys})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _time_shape(model: Any, systems: list[System], x: Any, batch: int, seq: int, repeats: int,
                rounds: int) -> dict[str, Any]:
    reference = _runner(model, x)()
    row: dict[str, Any] = {"batch": batch, "seq": seq, "ms": {}, "max_abs_diff": {}}
    for system in systems:
        t0 = time.perf_counter()
        out = _runner(system.fn, x)()
        system.first_calls.append(time.perf_counter() - t0)
        row["max_abs_diff"][system.name] = float(np.abs(out - reference).max())
    runs = time_rounds({system.name: _runner(system.fn, x) for system in systems},
                       repeats=max(1, repeats // rounds), rounds=rounds, warmup=1)
    for times in runs.values():
        if isinstance(times, Exception):
            raise times
    row["ms"] = {name: statistics.median(t for block in blocks for t in block)  # type: ignore[union-attr]
                 for name, blocks in runs.items()}
    print(_line(row, [t.name for t in systems]), flush=True)
    return row


def _line(row: dict[str, Any], names: list[str]) -> str:
    ms = row["ms"]
    shape = f"batch {row['batch']:2d}" + (f" seq {row['seq']:4d}" if row["seq"] else "")
    ratio = f"  dyn/static {ms['taskloom-dynamic'] / ms['taskloom-static']:.3f}" if "taskloom-static" in ms else ""
    return f"{shape}  " + "  ".join(f"{n} {ms[n]:8.2f}" for n in names) + ratio


def format_sweep(record: dict[str, Any]) -> str:
    """The sweep's summary: each system's geometric mean against taskloom-dynamic, its compiles
    and its compile seconds over the sweep."""
    rows = record["rows"]
    lines = [f"{record['model']}: {len(rows)} shapes, times in ms above; over the sweep:"]
    for name in rows[0]["ms"]:
        ratios = [row["ms"]["taskloom-dynamic"] / row["ms"][name] for row in rows]
        geomean = float(np.exp(np.mean(np.log(ratios))))
        worst = max(row["max_abs_diff"][name] for row in rows)
        compiles, graphs = record["compiles"].get(name), record.get("graphs", {}).get(name)
        lines.append(f"  {name:17s} dynamic/this {geomean:6.3f} (geomean)  compile {record['compile_s'][name]:7.1f} s"
                     + (f"  compiles {compiles}" if compiles is not None else "")
                     + (f" of {graphs} dynamo graphs" if graphs is not None else "") + f"  max |diff| {worst:.1e}")
    return "\n".join(lines)


def run_dynamic(args: argparse.Namespace, peers: tuple[str, ...]) -> int:
    """``taskloom bench model NAME --dynamic``: the sweep, its summary, and the JSON record."""
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    record = sweep(args.name, args.batch, args.seq, peers, args.repeats, args.rounds)
    print(format_sweep(record))
    command = ["taskloom", "bench", "model", args.name, "--dynamic", "--batch", ",".join(map(str, args.batch))]
    command += ["--seq", ",".join(map(str, args.seq))] if args.name in SEQUENCE_MODELS else []
    command += ["--compare", ",".join(peers) or "none", "--repeats", str(args.repeats), "--rounds", str(args.rounds)]
    record["command"] = shlex.join(command)
    if args.json is not None:
        write_json(args.json, record)
    return 0
