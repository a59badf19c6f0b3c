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
import json
import math
import time
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
from taskloom.schedule.templates.matmul_cpu import MatmulConfig
from taskloom.schedule.select import find_candidate, schedule_kernel as schedule_with
from taskloom.target.base import Target
from taskloom.tune.model import best_config, candidates, predict, rank
from taskloom.tune.tuner import recorded_config, tune_matmul


def _matmul_cpu_config(found: Candidate, target: Target, tune: int, deadline: float | None) -> Any:
    t = found.tunable
    shape = t.con.hint
    if tune == 0 and t.con.static:
        best = recorded_config(shape, target, workload=t.workload)
        return best if best is not None else best_config(shape, target, t.pack, t.a_stride, t.b_streams)
    if not t.con.timeable:  # symbolic sizes: the model's choice for the representative sizes
        if tune > 0:
            warnings.warn(f"tune={tune}: a kernel with symbolic sizes (its product {t.con.shape}) takes the analytic "
                          f"model's config for {shape}; it is not tuned by measurement", RuntimeWarning,
                          stacklevel=3)
        return best_config(shape, target, t.pack, t.a_stride, t.b_streams)
    return tune_matmul(shape, target, level=tune, kernel=t.kernel, args=t.args, workload=t.workload,
                       pack=t.pack, deadline=deadline, a_stride=t.a_stride, b_streams=t.b_streams)


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
                    weights_stream: bool | str = False) -> Scheduled:
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
                      constants: Mapping[int, np.ndarray] | None = None, weights_stream: bool | str = False,
                      tune: int = 0, deadline: float | None = None) -> tuple[list[Scheduled], list[int]]:
    """The kernels of a ``task`` with symbolic sizes, and which of them serves each sample
    point of its symbols (:mod:`taskloom.compiler.dynamic`): for the CPU matmul template, one
    variant per config chosen over the points (:func:`_point_configs`: the analytic model's,
    or the fastest a point's records hold, measured there at ``tune`` > 0 before
    ``deadline``); for the CPU attention template, one per block shape the points' query
    counts take; for anything else, one kernel for all. Variants after the first are named
    ``<name>_v1``, ``<name>_v2``."""
    from taskloom.compiler.dynamic import choose_variants, evaluate
    found = find_candidate(task, target, constants, weights_stream)
    if found is not None and found.template == "attention_cpu":
        att = found.tunable
        kept, table = choose_variants([choose_attention_cpu(att, target, evaluate((att.L,), p)[0]) for p in points])
        return [found.build(c, name if k == 0 else f"{name}_v{k}") for k, c in enumerate(kept)], table
    if found is not None and found.template == "matmul_mma" and not found.tunable.static:  # type: ignore[attr-defined]
        if tune > 0:
            warnings.warn(f"tune={tune}: the tensor-core template's variants for symbolic sizes take the GPU "
                          "model's configs at the sample points; they are not tuned by measurement",
                          RuntimeWarning, stacklevel=3)
        return _mma_variants(found, target, points, name)
    if found is None or found.template != "matmul_cpu" or found.tunable.con.static:  # type: ignore[attr-defined]
        return [schedule_kernel(task, target, name, tune, deadline, constants, weights_stream)], [0] * len(points)
    t = found.tunable  # type: ignore[attr-defined]
    # past a few thousand rows every size takes the same config, and the model's cost grows with the size
    shapes = [tuple(min(d, LARGEST_SAMPLE) for d in evaluate(t.con.shape, p)) for p in points]
    configs, cost, widest = _point_configs(found, target, points, shapes, tune, deadline)
    kept, table = choose_variants(configs, cost, CPU_VARIANT_GAIN)
    if t.workload.endswith("/prepacked") and len({c.nv for c in kept}) > 1:
        # B is a weight packed in panels as wide as the tile: so that it is packed once, not
        # once per variant, every variant takes one width, the one predicted to lose least
        def at_width(nv: int) -> list[Any]:
            return [c if c.nv == nv else widest(k, nv) for k, c in enumerate(configs)]

        def loss(nv: int) -> float:
            return sum(math.log(cost(k, c) / cost(k, best)) for k, (c, best) in enumerate(zip(at_width(nv), configs)))
        width = min(sorted({c.nv for c in configs}), key=loss)
        kept, table = choose_variants(at_width(width), cost, CPU_VARIANT_GAIN)
    if not isinstance(t.con.shape[1], int):  # a variant serving a few rows computes none past M
        few = {table[k] for k, s in enumerate(shapes) if _few_rows(s, kept[table[k]])}
        kept = [dataclasses.replace(c, exact_rows=True) if v in few else c for v, c in enumerate(kept)]
    return [found.build(c, name if k == 0 else f"{name}_v{k}") for k, c in enumerate(kept)], table


def _few_rows(shape: tuple[int, ...], config: Any) -> bool:
    """Whether a config serving ``shape`` gets a micro-kernel for each count of last rows."""
    return shape[1] <= FEW_ROWS_TILES * config.mr and config.mr > 1


def _point_configs(found: Candidate, target: Target, points: Sequence[Mapping[str, int]],
                   shapes: list[tuple[int, ...]], tune: int, deadline: float | None
                   ) -> tuple[list[Any], Callable[[int, Any], float], Callable[[int, int], Any]]:
    """For a symbolic matmul's sample ``points`` (sized ``shapes``, capped): the config at
    each, a config's seconds there, and a point's best config ``nv`` vectors wide.

    Each point's shape has a record key of its own (:func:`point_workload`). At ``tune`` > 0
    the points are tuned there first (:func:`_tune_points`), the kernel that will run timed
    with its sizes bound (:func:`~taskloom.compiler.dynamic.bind_sizes`). A point with
    records takes the fastest (so a later ``tune=0`` compile reuses them, measuring
    nothing), and a config's seconds there are the measured ones, or the model's scaled by
    how the point's fastest measured against its prediction; a point without records takes
    the analytic model's choice."""
    from taskloom.tune.records import Records
    t = found.tunable  # type: ignore[attr-defined]
    keys = [point_workload(t.workload, s) for s in shapes]
    records, tkey = Records.default(), target.key()
    if tune > 0:
        _tune_points(t, target, points, shapes, keys, records, tune, deadline)
    found_now = records.results_of(keys, tkey)
    timed = [{MatmulConfig.from_dict(json.loads(c)): s for c, (s, _) in found_now[key].items() if s is not None}
             for key in keys]
    configs = [min(timed[k], key=timed[k].get) if timed[k]
               else _model_config(s, target, t.pack, t.a_stride, None, t.b_streams) for k, s in enumerate(shapes)]

    def predicted(k: int, c: Any) -> float:
        return _predicted(shapes[k], c, target, t.pack, t.a_stride, t.b_streams)

    def cost(k: int, c: Any) -> float:
        if c in timed[k]:
            return timed[k][c]
        return predicted(k, c) * (timed[k][configs[k]] / predicted(k, configs[k]) if timed[k] else 1.0)

    def widest(k: int, nv: int) -> Any:
        wide = [c for c in timed[k] if c.nv == nv]
        if wide:
            return min(wide, key=timed[k].get)
        return _model_config(shapes[k], target, t.pack, t.a_stride, nv, t.b_streams)
    return configs, cost, widest


def _tune_points(t: Any, target: Target, points: Sequence[Mapping[str, int]], shapes: list[tuple[int, ...]],
                 keys: list[str], records: Any, tune: int, deadline: float | None) -> None:
    """Tunes a symbolic matmul (its :class:`~taskloom.schedule.cpu.Tunable` ``t``) at each
    record key's first point whose symbols give its shape exactly (a capped shape may have
    none), sharing out the time left before ``deadline``; results go to ``records``."""
    from taskloom.compiler.dynamic import bind_sizes, evaluate
    exact: dict[str, int] = {}
    for k, p in enumerate(points):
        if evaluate(t.con.shape, p) == shapes[k]:
            exact.setdefault(keys[k], k)
    for i, k in enumerate(exact.values()):
        share = None if deadline is None else time.monotonic() + (deadline - time.monotonic()) / (len(exact) - i)

        def kernel(c: Any, k: int = k) -> S.Function:
            return bind_sizes(t.kernel(dataclasses.replace(c, exact_rows=_few_rows(shapes[k], c))), points[k])

        def args(c: Any, k: int = k) -> list[tuple[tuple[int, ...], str]]:
            return [(p.type.static_shape(), p.type.dtype.name) for p in kernel(c, k).tensor_params]
        tune_matmul(shapes[k], target, level=tune, records=records, kernel=kernel, args=args, workload=keys[k],
                    pack=t.pack, deadline=share, a_stride=t.a_stride, b_streams=t.b_streams)


def point_workload(workload: str, shape: tuple[int, ...]) -> str:
    """The record key of a symbolic matmul's ``workload`` at a sample point of ``shape``:
    the shape written where a static product's key has its own
    (``matmul_cpu/1x64x768x768/packcopy+copy/<digest>``; the digest, of the symbolic
    expressions, keeps it apart from a static product's)."""
    parts = workload.split("/")
    return "/".join([parts[0], "x".join(str(d) for d in shape), *parts[2:]])


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
                  nv: int | None = None, b_streams: bool = False) -> Any:
    """The analytic model's config for a shape (a dynamic graph asks for many, often again);
    with ``nv``, its best among the configs whose tiles are ``nv`` vectors wide (only those
    ranked: the model's time for the others was most of a dynamic compile's choosing)."""
    if nv is None:
        return best_config(shape, target, pack, a_stride, b_streams)
    wide = [c for c in candidates(shape, target) if c.nv == nv]
    ranked = rank(shape, target, wide, pack=pack, a_stride=a_stride, b_streams=b_streams) if wide else []
    return ranked[0][0] if ranked else best_config(shape, target, pack, a_stride, b_streams)


@functools.lru_cache(maxsize=16384)
def _predicted(shape: tuple[int, ...], config: Any, target: Target, pack: tuple[float, float], a_stride: int,
               b_streams: bool = False) -> float:
    """The analytic model's seconds for ``config`` at ``shape``."""
    return predict(shape, config, target, pack=pack, a_stride=a_stride, b_streams=b_streams).seconds


def schedule(task: Task, target: Target, name: str | None = None, tune: int = 0,
             deadline: float | None = None) -> S.Function:
    """The scheduled program of ``task``: its parameters are the task's inputs, then its outputs."""
    return schedule_kernel(task, target, name, tune, deadline).fn
