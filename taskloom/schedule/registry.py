"""Which schedulers serve a task, per target kind.

Two kinds of scheduler register here, each under a target kind (``"cpu"``, ``"cuda"``):

- a **template** serves the tasks it recognizes (a contraction, an attention, ...): given a
  task it answers with a :class:`Candidate`, what tuning needs (its space, its fused kernel
  per config) and how to build the kernel of a chosen config; or None when it does not
  serve the task. Templates are asked in the order they registered.
- the **rules** serve every task no template took (the rule-based scheduler of the kind).

:mod:`taskloom.schedule.select` dispatches through this table; a target kind's own modules
(``schedule/cpu.py``) fill it when :mod:`taskloom.schedule` is imported.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from taskloom.errors import ScheduleError
from taskloom.ir import stmt as S
from taskloom.ir.compute import Task


@dataclass(frozen=True, eq=False)
class Scheduled:
    """A scheduled kernel and what its parameters before the outputs take, in order: the
    position of one of the task's inputs, or an array made at compile time (a weight's
    prepacked panels)."""

    fn: S.Function
    inputs: tuple[int | np.ndarray, ...]


@dataclass(frozen=True, eq=False)
class Candidate:
    """A template's offer to serve one task: ``tunable`` is what a driver reads to choose a
    config (records key, space, the fused kernel to time), ``build(config, name)`` the
    kernel a graph runs with that config."""

    template: str
    tunable: Any
    build: Callable[[Any, str], Scheduled]


#: (task, target, constants by input position or None, weights_stream) -> Candidate | None
TemplateFinder = Callable[[Task, Any, "Mapping[int, np.ndarray] | None", bool], "Candidate | None"]
#: (task, target, name) -> the rule-based schedule
RuleScheduler = Callable[[Task, Any, "str | None"], S.Function]

_TEMPLATES: dict[str, list[tuple[str, TemplateFinder]]] = {}
_RULES: dict[str, RuleScheduler] = {}


def register_template(kind: str, name: str, finder: TemplateFinder) -> None:
    """Offer template ``name`` for tasks on targets of ``kind``; registering a name again replaces it."""
    entries = [(n, f) for n, f in _TEMPLATES.get(kind, []) if n != name]
    _TEMPLATES[kind] = [*entries, (name, finder)]


def register_rules(kind: str, scheduler: RuleScheduler) -> None:
    """The rule-based scheduler of targets of ``kind``."""
    _RULES[kind] = scheduler


def templates_for(kind: str) -> list[tuple[str, TemplateFinder]]:
    """The templates of a target kind, in the order they are asked."""
    return list(_TEMPLATES.get(kind, []))


def rules_for(kind: str) -> RuleScheduler:
    """The rule-based scheduler of a target kind; an error names the kinds that have one."""
    if kind not in _RULES:
        raise ScheduleError(f"no scheduler serves targets of kind {kind!r}; kinds with one: "
                            f"{', '.join(sorted(_RULES)) or 'none'}")
    return _RULES[kind]
