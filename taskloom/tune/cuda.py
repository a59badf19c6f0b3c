"""Tuning the GPU's tensor-core matmul template by measurement.

``tune=2`` times every config of the template's space on the GPU, ``tune=1`` the best
``LEVEL_1`` by the analytic model, re-ranked by a model learned from this architecture's
records where there are any (:mod:`taskloom.tune.cuda_ranker`); the configs of one
contraction are built into one library (one nvcc run) and each kernel is timed on random
inputs. Every time lands in the tuning records
(:mod:`taskloom.tune.records`) under the GPU's name as well as its architecture
(``cuda-sm_90a/NVIDIA H100 80GB HBM3``): an H100's times are not an H200's. At ``tune=0`` a
compile takes the fastest recorded config of its contraction on this GPU, else the model's.

A config's time is that of ``LAUNCHES`` back-to-back launches captured in one CUDA graph,
replayed and timed with CUDA events, divided: on a host whose launches take longer than a
small kernel runs, timing launches one by one would time the host.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from taskloom.errors import TaskloomError
from taskloom.ir import stmt as S
from taskloom.schedule.cuda.matmul_mma import factor_type, read_layouts
from taskloom.schedule.cuda.mma_model import (TensorCoreConfig, config_from_dict, element_bytes, rank, sizes,
                                              target_space)
from taskloom.schedule.registry import Candidate
from taskloom.target.cuda import CudaTarget
from taskloom.tune.cuda_ranker import learned_order
from taskloom.tune.records import Records

#: configs ``tune=1`` measures: the model's best
LEVEL_1 = 8
#: launches a config's timing captures in one CUDA graph, and replays of it timed
LAUNCHES, REPLAYS = 10, 5

#: (kernels, target) -> seconds per call of each kernel, or the exception that stopped it
Timer = Callable[[Sequence[S.Function], CudaTarget], "list[float | Exception]"]


def records_target(target: CudaTarget) -> str:
    """The records' target of a GPU: its key and its name."""
    return f"{target.key()}/{target.name}"


def mma_workload(con: Any, target: CudaTarget) -> str:
    """The records' workload of a contraction on the template: its sizes, factor type and
    the layouts its factors are read in."""
    dtype = factor_type(con, target.tf32)
    name = dtype.name if dtype is not None else "none"
    return f"matmul_mma/{con.batch}x{con.M}x{con.N}x{con.K}/{name}/{read_layouts(con, element_bytes(con, target))}"


def recorded_mma(con: Any, target: CudaTarget, records: Records | None = None) -> TensorCoreConfig | None:
    """The fastest recorded config of ``con`` on this GPU, if it was tuned here before."""
    try:
        best = (records or Records.default()).best(mma_workload(con, target), records_target(target))
    except Exception:  # an unreadable database must not stop a compile
        return None
    return None if best is None else config_from_dict(best)


def ranked_configs(con: Any, target: CudaTarget, level: int,
                   records: Records | None = None) -> tuple[list[TensorCoreConfig], str]:
    """The configs ``level`` measures, and how they were chosen: at 2 the whole space, at 1
    the first ``LEVEL_1`` in the analytic model's order (``tune=0``'s pick first), re-ranked
    by the learned ranker where this architecture has records to train it
    (:mod:`taskloom.tune.cuda_ranker`)."""
    nbytes = element_bytes(con, target)
    configs = sorted(target_space(target, nbytes), key=lambda c: rank(con, c, target, nbytes))
    if level != 1:
        return configs, "the whole space"
    learned = learned_order(sizes(con), configs, target, nbytes, records or Records.default())
    if learned is None:
        return configs[:LEVEL_1], "the analytic model's best"
    order, gpus = learned
    return order[:LEVEL_1], f"the best by the analytic model and a ranker trained on {', '.join(gpus)}'s records"


def space_kernels(found: Candidate, configs: Sequence[TensorCoreConfig]) -> list[S.Function]:
    """One kernel per config, named ``config<k>``."""
    return [found.build(c, f"config{k}").fn for k, c in enumerate(configs)]


def tune_mma(found: Candidate, target: CudaTarget, level: int, records: Records | None = None,
             timer: Timer | None = None, progress: bool = True) -> TensorCoreConfig:
    """Measures ``level``'s configs of ``found`` on the GPU, records every time, and returns
    the fastest (the model's choice when none ran)."""
    con = found.tunable
    records = records or Records.default()
    configs, chosen = ranked_configs(con, target, level, records)
    started = time.perf_counter()
    times = (timer or time_on_gpu)(space_kernels(found, configs), target)
    workload, where = mma_workload(con, target), records_target(target)
    for c, t in zip(configs, times):
        failed = isinstance(t, Exception)
        records.add(workload, where, c.to_dict(), None if failed else t,
                    f"{type(t).__name__}: {t}" if failed else None)
    ran = [(t, c) for c, t in zip(configs, times) if not isinstance(t, Exception)]
    if progress:
        best = f"{min(t for t, _ in ran) * 1e6:.1f} us" if ran else "none ran"
        print(f"taskloom: tuned {workload} on {target.name}: {len(configs)} configs ({chosen}) in "
              f"{time.perf_counter() - started:.1f} s, fastest {best}", flush=True)
    return min(ran, key=lambda tc: tc[0])[1] if ran else configs[0]


def time_on_gpu(fns: Sequence[S.Function], target: CudaTarget) -> list[float | Exception]:
    """Seconds per call of each kernel on this machine's GPU, on random inputs."""
    import torch

    from taskloom.backend.build import build_cuda_library
    from taskloom.runtime.cuda_module import CudaModule
    module = CudaModule(build_cuda_library(list(fns), target, name="tune"), "cuda")
    out: list[float | Exception] = []
    for fn in fns:
        try:
            out.append(_time_kernel(torch, module[fn.name]))
        except Exception as exc:  # a config that fails to launch is recorded as failed
            out.append(exc)
    return out


def _time_kernel(torch: Any, kernel: Any) -> float:
    args = [_random(torch, p) for p in kernel.params]
    kernel(*args)  # once outside the graph: a launch error surfaces here
    graph = None
    if not kernel.checks:  # reading a status back cannot be captured
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(LAUNCHES):
                kernel(*args)
    run = graph.replay if graph is not None else (lambda: [kernel(*args) for _ in range(LAUNCHES)])
    run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / (REPLAYS * LAUNCHES)


def _random(torch: Any, p: Any) -> Any:
    if p.kind == "scalar" or p.shape is None or not all(isinstance(d, int) for d in p.shape):
        raise TaskloomError(f"parameter '{p.name}' is not a tensor of static shape; the tuner times static kernels")
    dtype = getattr(torch, p.dtype)
    if dtype.is_floating_point:
        return torch.randn(p.shape, device="cuda").to(dtype)
    return torch.zeros(p.shape, device="cuda", dtype=dtype)  # index 0 is in range of any table


__all__ = ["tune_mma", "recorded_mma", "mma_workload", "records_target", "ranked_configs", "space_kernels",
           "time_on_gpu", "LEVEL_1"]
