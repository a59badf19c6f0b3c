"""Drivers: how a task gets its config, above scheduling and tuning.

Scheduling offers a template's :class:`~taskloom.schedule.registry.Candidate` and builds
whatever config it is handed; tuning measures and ranks. The choice between them lives
here, per template: a tuning record when one exists, a measured search at ``tune`` > 0
(bounded by a deadline from the compile's budget), else the analytic model's top choice,
nothing measured.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

import numpy as np

from taskloom.errors import ScheduleError
from taskloom.ir import stmt as S
from taskloom.ir.compute import Task
from taskloom.schedule.cuda.matmul import choose_config as choose_simt
from taskloom.schedule.cuda.mma_model import choose as choose_mma
from taskloom.schedule.registry import Candidate, Scheduled
from taskloom.schedule.select import schedule_kernel as schedule_with
from taskloom.target.base import Target
from taskloom.tune.model import best_config
from taskloom.tune.tuner import recorded_config, tune_matmul


def _matmul_cpu_config(found: Candidate, target: Target, tune: int, deadline: float | None) -> Any:
    t = found.tunable
    shape = t.con.shape
    if tune == 0:
        best = recorded_config(shape, target, workload=t.workload)
        return best if best is not None else best_config(shape, target, t.pack, t.a_stride)
    return tune_matmul(shape, target, level=tune, kernel=t.kernel, args=t.args, workload=t.workload,
                       pack=t.pack, deadline=deadline, a_stride=t.a_stride)


def _cuda_config(choose: Callable[[Any, Any], Any]) -> Callable[[Candidate, Target, int, "float | None"], Any]:
    """A CUDA template's driver: ``choose(contraction, target)``, nothing measured. Nothing
    is measured on the GPU yet: a tuning level above 0 says so and takes the same choice."""
    def driver(found: Candidate, target: Target, tune: int, deadline: float | None) -> Any:
        if tune > 0:
            warnings.warn(f"tune={tune}: the CUDA matmul templates are not tuned by measurement yet; the "
                          f"config of {found.template} is the analytic choice, as at tune=0",
                          RuntimeWarning, stacklevel=3)
        return choose(found.tunable, target)  # type: ignore[attr-defined]
    return driver


#: Per template: (candidate, target, tune level, deadline) -> config.
CONFIG_DRIVERS: dict[str, Callable[[Candidate, Target, int, "float | None"], Any]] = {
    "matmul_cpu": _matmul_cpu_config,
    "matmul_cuda": _cuda_config(lambda con, target: choose_simt(con, target.num_sms)),
    "matmul_mma": _cuda_config(choose_mma),
    "attention_cuda": lambda found, target, tune, deadline: None,  # one schedule: nothing to choose
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


def schedule(task: Task, target: Target, name: str | None = None, tune: int = 0,
             deadline: float | None = None) -> S.Function:
    """The scheduled program of ``task``: its parameters are the task's inputs, then its outputs."""
    return schedule_kernel(task, target, name, tune, deadline).fn
