"""The peers ``taskloom bench model`` times taskloom against, each preparing and running a torch
model on the CPU the way its own documentation recommends for inference:

    p = prepare("ort", model, inputs, threads=2, workdir=Path("/tmp/w"))
    p.run()            # one inference on ``inputs``: the first output, float32 numpy
    p.compile_s, p.note

- ``torch``: eager under ``torch.inference_mode()``.
- ``inductor``: ``torch.compile`` (default mode) with inductor's ``freezing``, which PyTorch's
  CPU guides ask for in inference (weights become constants: folded, and prepacked for oneDNN).
- ``ort``: ``torch.onnx.export`` (the dynamo exporter, the legacy one where that fails) run by an
  onnxruntime ``InferenceSession``: CPU provider, ``ORT_ENABLE_ALL``, ``threads`` intra-op.
- ``tvm``: Apache TVM's Relax flow: ``torch.export`` -> ``from_exported_program`` -> the
  ``static_shape_tuning`` pipeline (MetaSchedule, ``tvm_trials`` per task) -> ``tvm.compile``
  for this CPU -> ``relax.VirtualMachine``. With no trials the kernels keep TVM's default
  schedules, which run on one core; tuning is slow on a small machine (ResNet-50's 28 tasks
  take about 20 minutes at 8 trials each on two cores, hours to converge).

Exporters and compilers are noisy; their output goes to ``workdir/<system>.log`` instead.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from taskloom.errors import ArgumentError

PEERS = ("torch", "inductor", "ort", "tvm")
#: What ``peer_versions`` reports, by the distribution that provides it.
_DISTS = {"torch": "torch", "onnxruntime": "onnxruntime", "onnx": "onnx", "onnxscript": "onnxscript",
          "tvm": "apache-tvm", "tvm-ffi": "apache-tvm-ffi", "transformers": "transformers"}


@dataclass
class Prepared:
    """A model ready to run on one peer: ``run()`` is one inference on the fixed inputs."""
    run: Callable[[], np.ndarray]
    compile_s: float
    note: str = ""


def prepare(system: str, model: Any, inputs: tuple, *, threads: int, workdir: Path,
            tvm_trials: int = 0) -> Prepared:
    """Prepare ``model`` (an eval-mode torch module) to run on ``inputs`` with ``system``, one of
    ``PEERS``, on ``threads`` CPU threads; files (ONNX model, tuning logs, exporter output) go
    under ``workdir`` (a fresh one makes inductor's compile a cold one). ``tvm_trials`` is the
    MetaSchedule trials per task for ``tvm``; 0 compiles without tuning."""
    if system not in PEERS:
        raise ArgumentError(f"bench peer: unknown system {system!r} (known: {', '.join(PEERS)})")
    if tvm_trials < 0:
        raise ArgumentError(f"bench peer tvm: trials per task must be at least 0, not {tvm_trials}")
    import torch
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(threads)
    if system == "torch":
        return Prepared(_eager(model, inputs), 0.0, f"eager, inference_mode, {threads} threads")
    with _quiet(workdir / f"{system}.log"):
        if system == "inductor":
            return _inductor(model, inputs, threads, workdir)
        if system == "ort":
            return _ort(model, inputs, threads, workdir)
        return _tvm(model, inputs, threads, workdir, tvm_trials)


def peer_versions() -> dict[str, str]:
    """Versions of the peer systems and what feeds them, for the benchmark's record; installed
    ones only (read from package metadata, so nothing is imported)."""
    out = {}
    for name, dist in _DISTS.items():
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(dist)
    return out


def first_output(out: Any) -> np.ndarray:
    """The first output of a torch, onnxruntime or TVM call (a tensor, or a sequence or mapping
    of them) as a float32 numpy array."""
    while isinstance(out, (Sequence, Mapping)):
        out = next(iter(out.values())) if isinstance(out, Mapping) else out[0]
    return np.asarray(out if isinstance(out, np.ndarray) else out.numpy(), dtype=np.float32)


def _eager(fn: Callable[..., Any], inputs: tuple) -> Callable[[], np.ndarray]:
    import torch

    def run() -> np.ndarray:
        with torch.inference_mode():
            return first_output(fn(*inputs))
    return run


def _inductor(model: Any, inputs: tuple, threads: int, workdir: Path) -> Prepared:
    import torch
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
    # options, unlike torch._inductor.config, stay with this compiled module (recompiles included)
    run = _eager(torch.compile(model, options={"freezing": True}), inputs)
    t0 = time.perf_counter()
    with temporary_cache_dir(str(workdir / "inductor-cache")):  # a cold compile, not last run's cache
        run()
    return Prepared(run, time.perf_counter() - t0, f"torch.compile(mode=default), freezing, "
                    f"inference_mode, {threads} threads, cold inductor cache")


def _ort(model: Any, inputs: tuple, threads: int, workdir: Path) -> Prepared:
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ArgumentError("bench peer ort: onnxruntime is not installed (pip install 'taskloom[onnx]')") from exc
    import torch
    path = workdir / "model.onnx"
    t0 = time.perf_counter()
    try:
        with torch.inference_mode():
            torch.onnx.export(model, inputs, path, dynamo=True, verbose=False)
        how = "dynamo=True"
    except Exception as exc:  # the legacy TorchScript exporter covers what dynamo cannot
        how = f"dynamo=False (dynamo=True failed: {type(exc).__name__})"
        with torch.no_grad():
            torch.onnx.export(model, inputs, path, dynamo=False)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
    compile_s = time.perf_counter() - t0
    return Prepared(lambda: first_output(session.run(None, feeds)), compile_s,
                    f"torch.onnx.export({how}), onnxruntime {ort.__version__} CPUExecutionProvider, "
                    f"ORT_ENABLE_ALL, intra_op_num_threads={threads}")


def _tvm(model: Any, inputs: tuple, threads: int, workdir: Path, trials: int) -> Prepared:
    os.environ["TVM_NUM_THREADS"] = str(threads)  # read when TVM's thread pool starts
    try:
        import tvm
        from tvm import relax
        from tvm.relax.frontend.torch import from_exported_program
    except ImportError as exc:
        raise ArgumentError("bench peer tvm: Apache TVM is not installed (pip install 'taskloom[tvm]'; "
                            "'taskloom[tvm-tune]' to tune with --tvm-trials)") from exc
    import torch
    tvm.get_global_func("runtime.config_threadpool")(1, threads)  # in case the pool already started
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    target = tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": threads})
    t0 = time.perf_counter()
    with torch.no_grad():
        mod = from_exported_program(torch.export.export(model, inputs))
    # trials=0 leaves the MetaSchedule database empty: every kernel keeps its default schedule
    mod = relax.get_pipeline("static_shape_tuning", target=target, total_trials=trials * 10_000,
                             max_trials_per_task=max(trials, 1), work_dir=str(workdir / "tvm_tuning"))(mod)
    vm = relax.VirtualMachine(tvm.compile(mod, target=target), tvm.cpu())
    args = [tvm.runtime.tensor(x.numpy()) for x in inputs]
    compile_s = time.perf_counter() - t0
    tuned = f"MetaSchedule {trials} trials/task" if trials else "untuned (default schedules, 1 core)"
    return Prepared(lambda: first_output(vm["main"](*args)), compile_s,
                    f"tvm {tvm.__version__} relax: torch.export, from_exported_program, "
                    f"static_shape_tuning pipeline, {tuned}, tvm.compile llvm -mcpu={cpu}, "
                    f"VirtualMachine, TVM_NUM_THREADS={threads}")


@contextlib.contextmanager
def _quiet(log: Path) -> Iterator[None]:
    """Send what is written to stdout and stderr, C++ libraries' output included, to ``log``
    and silence Python warnings, for the block."""
    sys.stdout.flush(), sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "a") as f, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        os.dup2(f.fileno(), 1), os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
