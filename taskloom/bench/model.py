"""``taskloom bench model``: a whole model compiled by taskloom, timed against PyTorch eager,
``torch.compile`` (inductor), ONNX Runtime and Apache TVM in one run.

    taskloom bench model NAME [--batch B] [--seq S] [--compare torch,inductor,ort,tvm]
        [--tune 0|1|2] [--threads T] [--repeats 30] [--rounds 3] [--target SPEC] [--profile]
        [--tvm-trials N] [--budget SECONDS] [--direct] [--json FILE] [--plot FILE]
    taskloom bench model NAME --dynamic --batch 1,4 [--seq 16,64,128] [--compare static,torch,inductor,ort]

``--dynamic`` sweeps the sizes with one dynamic compile against a static compile per shape
and the peers (:mod:`taskloom.bench.dynamic`).

NAME is one of resnet50, inception_v3, mobilenet_v2, bert, gpt2, mlp (:mod:`taskloom.bench.zoo`:
random weights, no downloads). taskloom runs the way users run it, ``torch.compile(model,
backend=taskloom)``; each peer runs as its own documentation recommends
(:mod:`taskloom.bench.peers`). Every system gets the same model and inputs, is checked
against PyTorch eager (``max_abs_diff`` of the first output); then all of them are timed in
``--rounds`` rounds, each system in a block of its own per round (``--repeats`` runs spread
over the rounds, after warm-up) and the order shifted by one each round, so that a slow spell
of the shared machine falls on every system alike (see :mod:`taskloom.bench.timing`). A row
gives the median of all its runs and the spread of its round medians. A system so slow that
``--repeats`` runs would take more than ``--budget`` seconds is timed fewer times, and its row
says how many. A system that fails is reported with its error in its row; the others still run.

``--direct`` adds a row, ``taskloom-direct``: the model compiled by ``taskloom.compile(model,
inputs)`` and called as one compiled graph. torch.compile checks its guards on every call,
which costs tens of microseconds, as much as a small model's kernels.

``--profile`` prints the time of each fused taskloom kernel and its share of the total,
measured inside the native launcher. ``--plot FILE`` draws the latencies as a bar chart
(needs matplotlib).

``--json FILE`` writes::

    {"model", "batch", "seq", "flop", "command", "args": {...},
     "rounds", "rows": [{"system", "median_ms", "round_ms", "gflops", "max_abs_diff", "error", "compile_s",
                         "note", "runs"}, ...],
     "taskloom": {"compile_s", "phases": {"frontend", "passes", "fusion", "schedule", "codegen", "cc"},
                  "graphs", "kernels", "arena_bytes", "tune", "target"},
     "profile": [{"name", "ops", "schedule", "median_ms", "share"}, ...] (with --profile),
     "machine": {...}, "versions": {...}}

``flop`` counts multiply-adds as two (torch's FLOP counter, convolutions and matmuls only);
GFLOP/s is that over the median time.
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
from typing import Any

import numpy as np

from taskloom.bench.op import cell, compare_type, error_text, positive_int, sizes, target_argument
from taskloom.bench import peers as peers_module
from taskloom.bench.peers import first_output
from taskloom.bench.timing import machine, time_block, versions, write_json
from taskloom.bench.dynamic import PEERS as DYNAMIC_PEERS, run_dynamic
from taskloom.bench.zoo import MODELS, SEQUENCE_MODELS, build, input_text
from taskloom.errors import TaskloomError
from taskloom.target import Target

PEERS = ("torch", "inductor", "ort", "tvm")
WARMUP = 3
#: Timed runs of a system too slow for --repeats within --budget.
MIN_RUNS = 3
PHASES = ("frontend", "passes", "fusion", "schedule", "codegen", "cc")


class TaskloomRun:
    """The model compiled by taskloom through ``torch.compile``: a callable on the example
    inputs, its compile time split into phases, and the compiled graphs it made."""

    def __init__(self, model: Any, inputs: tuple[Any, ...], target: Target, tune: int, threads: int):
        import torch
        from taskloom.frontend.torch import Backend
        self.backend = Backend(target=target, tune=tune)
        compiled = torch.compile(model, backend=self.backend, dynamic=False)
        started = time.perf_counter()
        with torch.inference_mode():
            compiled(*inputs)
        self.compile_s = time.perf_counter() - started
        self.graphs = [g for f in self.backend.compiled for g in f.compiled_graphs]
        for g in self.graphs:
            g.set_num_threads(threads)
        self.model, self.inputs = compiled, inputs

    def __call__(self) -> np.ndarray:
        import torch
        with torch.inference_mode():
            return first_output(self.model(*self.inputs))

    def phases(self) -> dict[str, float]:
        """Seconds per compile phase, summed over the graphs dynamo captured; "frontend" is the
        rest (dynamo's capture, lowering to ATen, conversion)."""
        out = {p: sum(g.meta["timings"].get(p, 0.0) for g in self.graphs) for p in PHASES[1:]}
        out["frontend"] = max(self.compile_s - sum(out.values()), 0.0)
        return {p: out[p] for p in PHASES}

    def profile(self, repeats: int) -> list[dict[str, Any]]:
        """Each fused kernel's median time over ``repeats`` calls of the whole model, with its
        share of the kernels' total, slowest first."""
        with contextlib.ExitStack() as stack:
            per_graph = [stack.enter_context(g.profiling()) for g in self.graphs]
            for _ in range(repeats):
                self()
        kernels = [k for graph in per_graph for k in graph]
        total = sum(k["median_ms"] for k in kernels) or 1.0
        for k in kernels:
            k["share"] = k["median_ms"] / total
        return sorted(kernels, key=lambda k: -k["median_ms"])


def count_flop(model: Any, inputs: tuple[Any, ...]) -> int | None:
    """Multiply-adds times two of one inference, from torch's FLOP counter (None if it fails)."""
    try:
        import torch
        from torch.utils.flop_counter import FlopCounterMode
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            model(*inputs)
        return int(counter.get_total_flops())
    except Exception:  # the counter is a convenience; the latencies do not depend on it
        return None


def _row(system: str) -> dict[str, Any]:
    return {"system": system, "median_ms": None, "gflops": None, "max_abs_diff": None, "error": None,
            "compile_s": None, "note": "", "runs": 0, "round_ms": []}


def _check(row: dict[str, Any], run: Any, reference: np.ndarray, repeats: int, budget_s: float) -> None:
    """Check ``run``'s output against the reference into ``row``, and set how many runs it
    gets: ``repeats``, fewer (at least MIN_RUNS) when that would take longer than ``budget_s``
    (an untuned peer can take a minute per inference)."""
    started = time.perf_counter()
    out = run()
    once = time.perf_counter() - started
    if out.shape != reference.shape:
        raise TaskloomError(f"output shape {out.shape}, expected {reference.shape}")
    row["max_abs_diff"] = float(np.max(np.abs(out - reference))) if out.size else 0.0
    row["runs"] = repeats
    if once * (repeats + WARMUP) > budget_s:
        row["runs"] = max(MIN_RUNS, min(repeats, int(budget_s / once) - 1))


def _time_in_rounds(ready: dict[str, tuple[dict[str, Any], Any]], rounds: int, repeats: int,
                    flop: int | None, threads: int) -> None:
    """Time every ready system in ``rounds`` rounds, each system a block of its own per round
    and the order shifted by one each round, so that a slow spell of the machine falls on all
    of them alike; a row gets the median of all its runs and each round's median."""
    import torch
    names = list(ready)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        live = [n for n in names if ready[n][0]["error"] is None]
        shift = r % max(len(live), 1)
        for name in live[shift:] + live[:shift]:
            row, run = ready[name]
            block = max(1, -(-row["runs"] // rounds))  # the runs spread over the rounds
            torch.set_num_threads(threads)  # a peer may have changed it
            try:
                ms = time_block(run, block, WARMUP if row["runs"] == repeats else 1)  # a slow one: 1
            except Exception as exc:  # a benchmark reports a failing system and goes on
                row["error"] = error_text(exc)
                continue
            times[name] += ms
            row["round_ms"].append(statistics.median(ms))
    for name in names:
        row = ready[name][0]
        if row["error"] is None and times[name]:
            row["runs"], row["median_ms"] = len(times[name]), statistics.median(times[name])
            row["gflops"] = flop / row["median_ms"] / 1e6 if flop else None


def _taskloom_row(model: Any, inputs: tuple[Any, ...], target: Target, tune: int, threads: int,
                  record: dict[str, Any], profile: bool, repeats: int) -> tuple[dict[str, Any], Any]:
    """taskloom through ``torch.compile``, compiled; its facts go into ``record``."""
    row, run = _row("taskloom"), None
    try:
        run = TaskloomRun(model, inputs, target, tune, threads)
        row["compile_s"], row["note"] = run.compile_s, f"torch.compile(backend=taskloom), tune {tune}"
        kernels = [k for g in run.graphs for k in g.meta["kernels"]]
        record["taskloom"] = {"compile_s": run.compile_s, "phases": run.phases(), "graphs": len(run.graphs),
                              "kernels": len(kernels), "arena_bytes": sum(g.arena_bytes for g in run.graphs),
                              "tune": tune, "target": target.key()}
        if profile:
            record["profile"] = run.profile(repeats)
    except Exception as exc:  # a benchmark reports a failing system and goes on with the others
        row["error"] = error_text(exc)
    return row, run


def bench_model(name: str, batch: int, seq: int, peers: tuple[str, ...], target: Target, tune: int,
                threads: int, repeats: int, profile: bool = False, tvm_trials: int = 0,
                budget_s: float = 300.0, direct: bool = False, rounds: int = 3) -> dict[str, Any]:
    """Builds ``name``, compiles it with taskloom and ``peers``, checks each against eager
    PyTorch, then times them all in ``rounds`` rotating rounds; the JSON record minus the
    command. With ``direct``, a second taskloom row times the model compiled by
    ``taskloom.compile(model, inputs)`` and called as one compiled graph, without
    torch.compile's guards."""
    import torch
    torch.set_num_threads(threads)
    model, inputs = build(name, batch, seq)
    with torch.inference_mode():
        reference = first_output(model(*inputs))
    flop = count_flop(model, inputs)
    record: dict[str, Any] = {"model": name, "batch": batch, "seq": seq if name in SEQUENCE_MODELS else None,
                              "flop": flop, "rows": [], "taskloom": None, "rounds": rounds}
    systems = [_taskloom_row(model, inputs, target, tune, threads, record, profile, repeats)]
    if direct:
        systems.append(_direct_row(model, inputs, target, tune, threads))
    with tempfile.TemporaryDirectory(prefix="taskloom-bench-") as workdir:
        for system in peers:
            row, run = _row(system), None
            try:
                prepared = peers_module.prepare(system, model, inputs, threads=threads, workdir=Path(workdir),
                                                tvm_trials=tvm_trials)
                row["compile_s"], row["note"], run = prepared.compile_s, prepared.note, prepared.run
            except Exception as exc:
                row["error"] = error_text(exc)
            systems.append((row, run))
            torch.set_num_threads(threads)  # a peer may have changed it
        for row, run in systems:
            if row["error"] is None:
                try:
                    _check(row, run, reference, repeats, budget_s)
                except Exception as exc:
                    row["error"] = error_text(exc)
        _time_in_rounds({row["system"]: (row, run) for row, run in systems}, rounds, repeats, flop, threads)
    record["rows"] = [row for row, _ in systems]
    return record


def _direct_row(model: Any, inputs: tuple[Any, ...], target: Target, tune: int,
                threads: int) -> tuple[dict[str, Any], Any]:
    """The row of ``taskloom-direct``: the model as one compiled graph called with the inputs,
    which skips what torch.compile does on every call (its guards cost tens of microseconds,
    more after a call that sweeps the caches)."""
    import torch
    from taskloom.frontend.torch import compile_module
    row = _row("taskloom-direct")
    try:
        started = time.perf_counter()
        graph = compile_module(model, inputs, target=target, tune=tune)
        graph.set_num_threads(threads)
        row["compile_s"] = time.perf_counter() - started
        row["note"] = f"taskloom.compile(model, inputs), called directly, tune {tune}"
    except Exception as exc:
        row["error"] = error_text(exc)
        return row, None

    def run() -> np.ndarray:
        with torch.inference_mode():
            return first_output(graph(*inputs))
    return row, run


# -- printing -----------------------------------------------------------------------------


def spread(row: dict[str, Any]) -> float | None:
    """How far a row's round medians lie apart, as a share of its median (None for one round)."""
    rounds = row.get("round_ms") or []
    if len(rounds) < 2 or not row["median_ms"]:
        return None
    return (max(rounds) - min(rounds)) / row["median_ms"]


def format_record(record: dict[str, Any], repeats: int, threads: int) -> str:
    """The table of one model: one line per system, then taskloom's compile phases."""
    what = f"{record['model']} batch {record['batch']}, {input_text(record['model'], record['seq'])}"
    flop = f"{record['flop'] / 1e9:.2f} GFLOP" if record["flop"] else "FLOP count unknown"
    rounds = record.get("rounds", 1)
    lines = [f"{what}: {flop}, float32, median of {repeats} runs in {rounds} rotating round{'s' if rounds > 1 else ''}, "
             f"{threads} thread{'s' if threads > 1 else ''}",
             f"  {'system':9s} {'median ms':>10s} {'spread':>7s} {'GFLOP/s':>8s} {'taskloom speed-up':>17s} "
             f"{'compile s':>9s} {'max abs diff':>12s}  error / how it ran"]
    base = record["rows"][0]["median_ms"]
    for r in record["rows"]:
        speedup = r["median_ms"] / base if r["median_ms"] and base else None
        ms_spec = ".2f" if (r["median_ms"] or 0) >= 1 else ".4f"  # a small model's 0.03 ms keeps its digits
        cells = [cell(r["median_ms"], ms_spec, 10), cell(spread(r), ".0%", 7), cell(r["gflops"], ".1f", 8),
                 cell(speedup, ".2f", 16) + ("x" if speedup is not None else " "), cell(r["compile_s"], ".1f", 9),
                 cell(r["max_abs_diff"], ".2e", 12)]
        few = f"[{r['runs']} runs] " if r.get("runs") and r["runs"] < repeats else ""
        lines.append(f"  {r['system']:9s} {' '.join(cells)}  {r['error'] or few + r['note']}".rstrip())
    t = record["taskloom"]
    if t is not None:
        phases = ", ".join(f"{p} {s:.1f}" for p, s in t["phases"].items())
        lines.append(f"  taskloom: {t['kernels']} kernels in {t['graphs']} graph(s), arena "
                     f"{t['arena_bytes'] / 2**20:.1f} MiB; compile {t['compile_s']:.1f} s ({phases})")
    return "\n".join(lines)


def format_profile(kernels: list[dict[str, Any]], top: int = 20) -> str:
    """The slowest ``top`` kernels with their share, the rest summed, then the time by anchor op."""
    total = sum(k["median_ms"] for k in kernels)
    lines = [f"per-kernel profile of taskloom: {total:.2f} ms in {len(kernels)} kernels (median per kernel)",
             f"  {'ms':>8s} {'share':>6s}  kernel: fused ops  [schedule]"]
    for k in kernels[:top]:
        lines.append(f"  {k['median_ms']:8.3f} {k['share']:6.1%}  {k['name']}: {' + '.join(k['ops'])}"
                     f"  [{k['schedule']}]")
    if len(kernels) > top:
        rest = kernels[top:]
        lines.append(f"  {sum(k['median_ms'] for k in rest):8.3f} {sum(k['share'] for k in rest):6.1%}  "
                     f"... {len(rest)} more kernels")
    by_op: dict[str, float] = {}
    for k in kernels:  # a fused kernel counts under its anchor, or its first op
        by_op[k["anchor"]] = by_op.get(k["anchor"], 0.0) + k["median_ms"]
    lines.append("  by anchor: " + ", ".join(f"{op} {ms:.2f} ms ({ms / (total or 1):.0%})"
                                             for op, ms in sorted(by_op.items(), key=lambda i: -i[1])))
    return "\n".join(lines)


def plot_record(record: dict[str, Any], path: Path) -> None:
    """A bar chart of each system's median latency (failed systems marked), to ``path``."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise TaskloomError("--plot needs matplotlib (pip install 'taskloom[models]')") from exc
    rows = record["rows"]
    names = [r["system"] for r in rows]
    values = [r["median_ms"] or 0.0 for r in rows]
    fig, ax = plt.subplots(figsize=(1.4 * len(rows) + 2, 3.6))
    bars = ax.bar(names, values, color=["#2b6cb0" if n == "taskloom" else "#a0aec0" for n in names])
    for bar, r in zip(bars, rows):
        label = "failed" if r["median_ms"] is None else f"{r['median_ms']:.1f}"
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=9)
    ax.set_ylabel("median latency, ms (lower is better)")
    seq = "" if record["seq"] is None else f", seq {record['seq']}"
    ax.set_title(f"{record['model']}, batch {record['batch']}{seq}, float32, CPU")
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- the command --------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """``taskloom bench model NAME``: measure, print the table (and profile), write JSON/plot."""
    if args.dynamic:
        peers = DYNAMIC_PEERS if args.compare is None else args.compare
        if set(peers) - set(DYNAMIC_PEERS) or args.target or args.tune or args.profile or args.direct or args.plot:
            args.model_parser.error(f"argument --dynamic: compares with {', '.join(DYNAMIC_PEERS)} on this machine "
                                    "at tune 0 (no --target, --tune, --profile, --direct or --plot)")
        return run_dynamic(args, peers)
    for flag in ("batch", "seq"):
        if len(getattr(args, flag)) != 1:
            args.model_parser.error(f"argument --{flag}: one size, or several with --dynamic")
        setattr(args, flag, getattr(args, flag)[0])
    if args.compare is not None and "static" in args.compare:
        args.model_parser.error("argument --compare: 'static' is a peer of --dynamic")
    target = target_argument(args.model_parser, args.target)
    if target.kind == "cuda":
        return _run_on_gpu(args)
    if args.dtype != "float32":
        args.model_parser.error("argument --dtype: the CPU benchmark runs float32; other dtypes are for --target cuda")
    threads = args.threads or target.num_cores
    peers = PEERS if args.compare is None else args.compare
    if "tvm" in peers:  # TVM reads its thread count once, when its runtime loads
        os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    print(f"target: {args.target or 'this machine'} ({target.key()})", flush=True)
    record = bench_model(args.name, args.batch, args.seq, peers, target, args.tune, threads, args.repeats,
                         profile=args.profile, tvm_trials=args.tvm_trials, budget_s=args.budget,
                         direct=args.direct, rounds=args.rounds)
    print(format_record(record, args.repeats, threads))
    if args.profile and "profile" in record:
        print(format_profile(record["profile"]))
    command = ["taskloom", "bench", "model", args.name, "--batch", str(args.batch)]
    command += ["--seq", str(args.seq)] if args.name in SEQUENCE_MODELS else []
    command += ["--compare", ",".join(peers) or "none", "--tune", str(args.tune), "--threads", str(threads),
                "--repeats", str(args.repeats), "--rounds", str(args.rounds)]
    command += ["--target", args.target] if args.target else []
    command += ["--profile"] if args.profile else []
    command += ["--direct"] if args.direct else []
    command += ["--tvm-trials", str(args.tvm_trials)] if args.tvm_trials else []
    command += ["--budget", f"{args.budget:g}"]
    record = {**record, "command": shlex.join(command),
              "args": {"compare": list(peers), "tune": args.tune, "threads": threads, "repeats": args.repeats, "rounds": args.rounds,
                       "target": args.target, "tvm_trials": args.tvm_trials, "budget_s": args.budget,
                       "direct": args.direct},
              "machine": machine(), "versions": {**versions(), **peers_module.peer_versions()}}
    if args.plot is not None:
        plot_record(record, Path(args.plot))
        print(f"wrote {args.plot}")
    if args.json is not None:
        write_json(args.json, record)
    return 0 if record["rows"][0]["error"] is None else 1


def _run_on_gpu(args: argparse.Namespace) -> int:
    """``taskloom bench model NAME --target cuda``: eager, inductor, CUDA graphs and taskloom."""
    from taskloom.bench.gpu import bench_model as bench_on_gpu
    from taskloom.bench.gpu import format_rows
    record = bench_on_gpu(args.name, args.batch, args.seq, args.dtype, args.repeats, args.rounds)
    print(format_rows(f"{args.name} batch {args.batch} ({args.dtype}) on {record['gpu']['name']}", record["rows"]))
    command = ["taskloom", "bench", "model", args.name, "--batch", str(args.batch), "--seq", str(args.seq),
               "--dtype", args.dtype, "--repeats", str(args.repeats), "--rounds", str(args.rounds),
               "--target", args.target]
    record = {**record, "command": shlex.join(command), "versions": versions()}
    if args.json is not None:
        write_json(args.json, record)
    return 0 if record["rows"][0]["error"] is None else 1


def add_model_command(kinds: argparse._SubParsersAction) -> None:
    """Register ``model NAME`` under ``taskloom bench``."""
    sub = kinds.add_parser("model", help="time a whole model: taskloom against PyTorch, inductor, ORT and TVM",
                           description=__doc__.split("\n\n")[0].replace("``", ""),
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           epilog=__doc__[__doc__.index("``--json FILE`` writes"):].replace("``", ""))
    sub.add_argument("name", choices=MODELS, metavar="NAME", help=f"one of {', '.join(MODELS)}")
    sub.add_argument("--batch", type=sizes, default=[1], metavar="B",
                     help="batch size (default 1); with --dynamic, comma-separated sizes to sweep")
    sub.add_argument("--seq", type=sizes, default=[128], metavar="S",
                     help="sequence length of bert and gpt2 (default 128); with --dynamic, comma-separated")
    sub.add_argument("--dynamic", action="store_true",
                     help="one dynamic compile over every --batch and --seq, against a static compile per "
                          "shape and the peers (taskloom.bench.dynamic; peers: static,torch,inductor,ort)")
    sub.add_argument("--compare", type=compare_type("model", PEERS + DYNAMIC_PEERS), default=None,
                     metavar=",".join(PEERS),
                     help=f"the peers to time, comma-separated, or 'none' (default: {','.join(PEERS)})")
    sub.add_argument("--tune", type=int, choices=(0, 1, 2), default=0, metavar="LEVEL",
                     help="taskloom's tuning level: 0, 1 or 2 (default 0)")
    sub.add_argument("--threads", type=positive_int, default=None, metavar="T",
                     help="threads of every system (default: the target's cores)")
    sub.add_argument("--repeats", type=positive_int, default=30, metavar="R",
                     help=f"timed runs per system, after {WARMUP} warm-ups (default 30)")
    sub.add_argument("--rounds", type=positive_int, default=3, metavar="N",
                     help="rounds the systems take turns in; --repeats runs spread over them (default 3)")
    sub.add_argument("--target", default=None, metavar="SPEC",
                     help="taskloom's target, e.g. 'cpu -isa=avx2' (default: this machine)")
    sub.add_argument("--tvm-trials", type=lambda t: int(t) if t.isdigit() else positive_int(t), default=0,
                     metavar="N", help="MetaSchedule trials per task for TVM (default 0: TVM's default "
                                       "schedules, no tuning)")
    sub.add_argument("--budget", type=float, default=300.0, metavar="SECONDS",
                     help=f"timing budget per system: a system slower than that for --repeats runs gets "
                          f"fewer (at least {MIN_RUNS}; its row says how many) (default 300)")
    sub.add_argument("--profile", action="store_true",
                     help="also print each fused taskloom kernel's time and share")
    sub.add_argument("--direct", action="store_true",
                     help="also time the model compiled by taskloom.compile(model, inputs) and called "
                          "directly, without torch.compile's per-call guards (row taskloom-direct)")
    sub.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32",
                     help="the model's element type (default float32; others with --target cuda)")
    sub.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
    sub.add_argument("--plot", default=None, metavar="FILE", help="also draw the latencies as a PNG bar chart")
    sub.set_defaults(func=run, model_parser=sub)
