"""Drivers: how a task gets its config, above scheduling and tuning.

Scheduling offers a template's :class:`~taskloom.schedule.registry.Candidate` and builds
whatever config it is handed; tuning measures and ranks. The choice between them lives
here, per template: a tuning record when one exists, a measured search at ``tune`` > 0
(bounded by a deadline from the compile's budget), else the analytic model's top choice,
nothing measured.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from taskloom.errors import ScheduleError
from taskloom.ir import stmt as S
from taskloom.ir.compute import Task
from taskloom.schedule.cuda.matmul import choose_config as choose_simt
from taskloom.schedule.cuda.mma_model import choose as choose_mma
from taskloom.schedule.registry import Candidate, Scheduled
from taskloom.schedule.templates.attention_cpu import choose_config as choose_attention_cpu
from taskloom.schedule.select import find_candidate, schedule_kernel as schedule_with
from taskloom.target.base import Target
from taskloom.tune.model import best_config, candidates, predict, rank
from taskloom.tune.tuner import recorded_config, tune_matmul


def _matmul_cpu_config(found: Candidate, target: Target, tune: int, deadline: float | None) -> Any:
    t = found.tunable
    shape = t.con.hint
    if tune == 0 and t.con.static:
        best = recorded_config(shape, target, workload=t.workload)
        return best if best is not None else best_config(shape, target, t.pack, t.a_stride)
    if not t.con.timeable:  # symbolic sizes: the model's choice for the representative sizes
        if tune > 0:
            warnings.warn(f"tune={tune}: a kernel with symbolic sizes (its product {t.con.shape}) takes the analytic "
                          f"model's config for {shape}; it is not tuned by measurement", RuntimeWarning,
                          stacklevel=3)
        return best_config(shape, target, t.pack, t.a_stride)
    return tune_matmul(shape, target, level=tune, kernel=t.kernel, args=t.args, workload=t.workload,
                       pack=t.pack, deadline=deadline, a_stride=t.a_stride)


def _cuda_config(choose: Callable[[Any, Any], Any]) -> Callable[[Candidate, Target, int, "float | None"], Any]:
    """A CUDA-core template's driver: ``choose(contraction, target)``, nothing measured (a
    tuning level above 0 says so and takes the same choice)."""
    def driver(found: Candidate, target: Target, tune: int, deadline: float | None) -> Any:
        if tune > 0:
            warnings.warn(f"tune={tune}: the CUDA-core matmul template is not tuned by measurement; its "
                          "config is the analytic choice, as at tune=0", RuntimeWarning, stacklevel=3)
        return choose(found.tunable, target)  # type: ignore[attr-defined]
    return driver


def _mma_config(found: Candidate, target: Target, tune: int, deadline: float | None) -> Any:
    """The tensor-core template's driver: at ``tune=0`` this GPU's fastest record, else the
    analytic model's choice; above 0, measured on the GPU the target names
    (:mod:`taskloom.tune.cuda`), where this machine has it."""
    from taskloom.tune.cuda import recorded_mma, tune_mma
    if tune == 0:
        return recorded_mma(found.tunable, target) or choose_mma(found.tunable, target)  # type: ignore[arg-type]
    if not _gpu_runs(target):
        warnings.warn(f"tune={tune}: the tensor-core matmul template is tuned on the GPU it compiles for, and "
                      f"this machine has no GPU that runs {target.key()}; its config is the analytic choice",
                      RuntimeWarning, stacklevel=3)
        return choose_mma(found.tunable, target)  # type: ignore[arg-type]
    return tune_mma(found, target, tune)  # type: ignore[arg-type]


def _gpu_runs(target: Target) -> bool:
    from taskloom.target.cuda import _read_device
    here = _read_device(0)
    return here is not None and target.runs_on(here)  # type: ignore[attr-defined]


#: Per template: (candidate, target, tune level, deadline) -> config.
CONFIG_DRIVERS: dict[str, Callable[[Candidate, Target, int, "float | None"], Any]] = {
    "matmul_cpu": _matmul_cpu_config,
    "matmul_cuda": _cuda_config(lambda con, target: choose_simt(con, target.num_sms)),
    "matmul_mma": _mma_config,
    "attention_cuda": lambda found, target, tune, deadline: None,  # one schedule: nothing to choose
    "attention_cpu": lambda found, target, tune, deadline: choose_attention_cpu(found.tunable, target),
}


def choose_config(found: Candidate, target: Target, tune: int = 0, deadline: float | None = None) -> Any:
    """The config of a template's candidate at tuning level ``tune``; a search stops at
    ``deadline`` (a ``time.monotonic()``)."""
    if found.template not in CONFIG_DRIVERS:
        raise ScheduleError(f"template {found.template!r} has no config driver; "
                            f"drivers exist for {', '.join(sorted(CONFIG_DRIVERS))}")
    return CONFIG_DRIVERS[found.template](found, target, tune, deadline)


def schedule_kernel(task: Task, target: Target, name: str | None = None, tune: int = 0,
                    deadline: float | None = None, constants: Mapping[int, np.ndarray] | None = None,
                    weights_stream: bool = False) -> Scheduled:
    """The kernel of ``task`` on ``target`` with its config chosen at level ``tune``
    (see :func:`taskloom.schedule.select.schedule_kernel` for ``constants`` and
    ``weights_stream``)."""
    return schedule_with(task, target, lambda found: choose_config(found, target, tune, deadline),
                         name, constants, weights_stream)


#: The largest size a symbolic kernel's config is chosen for (each of Bt, M, N, K).
LARGEST_SAMPLE = 4096
#: A variant serving a sample point of at most this many tiles of rows gets a micro-kernel
#: for each count of last rows (``MatmulConfig.exact_rows``): below it, a full last tile's
#: dropped rows cost 6% or more of the FMAs on average; above it, the code is not worth it.
FEW_ROWS_TILES = 8
#: A CPU matmul's variants keep every sample point within this much of the model's own pick
#: there: the model's smaller differences between its top configs did not show when the
#: kernels were timed (bench/results/2026-11-28-dynamic-variants.md).
CPU_VARIANT_GAIN = 0.10


def schedule_variants(task: Task, target: Target, points: Sequence[Mapping[str, int]], name: str,
                      constants: Mapping[int, np.ndarray] | None = None,
                      weights_stream: bool = False) -> tuple[list[Scheduled], list[int]]:
    """The kernels of a ``task`` with symbolic sizes, and which of them serves each sample
    point of its symbols (:mod:`taskloom.compiler.dynamic`): for the CPU matmul template, one
    variant per config the analytic model chooses over the points; for the CPU attention
    template, one per block shape the points' query counts take; for anything else, one
    kernel for all. Variants after the first are named ``<name>_v1``, ``<name>_v2``."""
    from taskloom.compiler.dynamic import choose_variants, evaluate
    found = find_candidate(task, target, constants, weights_stream)
    if found is not None and found.template == "attention_cpu":
        att = found.tunable
        kept, table = choose_variants([choose_attention_cpu(att, target, evaluate((att.L,), p)[0]) for p in points])
        return [found.build(c, name if k == 0 else f"{name}_v{k}") for k, c in enumerate(kept)], table
    if found is not None and found.template == "matmul_mma" and not found.tunable.static:  # type: ignore[attr-defined]
        return _mma_variants(found, target, points, name)
    if found is None or found.template != "matmul_cpu" or found.tunable.con.static:  # type: ignore[attr-defined]
        return [schedule_kernel(task, target, name, 0, None, constants, weights_stream)], [0] * len(points)
    t = found.tunable  # type: ignore[attr-defined]
    # past a few thousand rows every size takes the same config, and the model's cost grows with the size
    shapes = [tuple(min(d, LARGEST_SAMPLE) for d in evaluate(t.con.shape, p)) for p in points]
    configs = [_model_config(shape, target, t.pack, t.a_stride) for shape in shapes]

    def cost(k: int, c: Any) -> float:
        return _predicted(shapes[k], c, target, t.pack, t.a_stride)
    kept, table = choose_variants(configs, cost, CPU_VARIANT_GAIN)
    if t.workload.endswith("/prepacked") and len({c.nv for c in kept}) > 1:
        # B is a weight packed in panels as wide as the tile: so that it is packed once, not
        # once per variant, every variant takes one width, the one predicted to lose least
        def at_width(nv: int) -> list[Any]:
            return [c if c.nv == nv else _model_config(s, target, t.pack, t.a_stride, nv)
                    for c, s in zip(configs, shapes)]

        def loss(nv: int) -> float:
            return sum(math.log(cost(k, c) / cost(k, best)) for k, (c, best) in enumerate(zip(at_width(nv), configs)))
        width = min(sorted({c.nv for c in configs}), key=loss)
        kept, table = choose_variants(at_width(width), cost, CPU_VARIANT_GAIN)
    if not isinstance(t.con.shape[1], int):  # a variant serving a few rows computes none past M
        few = {table[k] for k, s in enumerate(shapes) if s[1] <= FEW_ROWS_TILES * kept[table[k]].mr}
        kept = [dataclasses.replace(c, exact_rows=True) if v in few and c.mr > 1 else c for v, c in enumerate(kept)]
    return [found.build(c, name if k == 0 else f"{name}_v{k}") for k, c in enumerate(kept)], table


def _mma_variants(found: Candidate, target: Target, points: Sequence[Mapping[str, int]],
                  name: str) -> tuple[list[Scheduled], list[int]]:
    """The tensor-core template's variants for a contraction with symbolic rows: the GPU
    model's config at each sample point, those that pay kept (nothing measured)."""
    from taskloom.compiler.dynamic import choose_variants, evaluate
    from taskloom.schedule.cuda.mma_model import Product, cycles, element_bytes
    con = found.tunable
    nbytes = element_bytes(con, target)  # type: ignore[arg-type]
    shapes = [Product(*evaluate(con.shape, p)) for p in points]  # type: ignore[attr-defined]
    kept, table = choose_variants([choose_mma(con, target, at) for at in shapes],  # type: ignore[arg-type]
                                  lambda k, c: cycles(shapes[k], c, target, nbytes))  # type: ignore[arg-type]
    return [found.build(c, name if k == 0 else f"{name}_v{k}") for k, c in enumerate(kept)], table


@functools.lru_cache(maxsize=4096)
def _model_config(shape: tuple[int, ...], target: Target, pack: tuple[float, float], a_stride: int,
                  nv: int | None = None) -> Any:
    """The analytic model's config for a shape (a dynamic graph asks for many, often again);
    with ``nv``, its best among the configs whose tiles are ``nv`` vectors wide (only those
    ranked: the model's time for the others was most of a dynamic compile's choosing)."""
    if nv is None:
        return best_config(shape, target, pack, a_stride)
    wide = [c for c in candidates(shape, target) if c.nv == nv]
    ranked = rank(shape, target, wide, pack=pack, a_stride=a_stride) if wide else []
    return ranked[0][0] if ranked else best_config(shape, target, pack, a_stride)


@functools.lru_cache(maxsize=16384)
def _predicted(shape: tuple[int, ...], config: Any, target: Target, pack: tuple[float, float], a_stride: int) -> float:
    """The analytic model's seconds for ``config`` at ``shape``."""
    return predict(shape, config, target, pack=pack, a_stride=a_stride).seconds


def schedule(task: Task, target: Target, name: str | None = None, tune: int = 0,
             deadline: float | None = None) -> S.Function:
    """The scheduled program of ``task``: its parameters are the task's inputs, then its outputs."""
    return schedule_kernel(task, target, name, tune, deadline).fn
