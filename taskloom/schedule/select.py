"""Choosing how a task is scheduled: the first template of the target's kind that serves
it (:mod:`taskloom.schedule.registry`), else the kind's rule-based scheduler.

Scheduling never chooses a template's config itself: the caller passes ``choose``, which
maps the template's :class:`~taskloom.schedule.registry.Candidate` to a config (the drivers in :mod:`taskloom.compiler.drivers`
read records, ask the analytic model or tune). What each target kind offers lives in its
own module (:mod:`taskloom.schedule.cpu`).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

import numpy as np

from taskloom.ir import stmt as S
from taskloom.ir.compute import Task
from taskloom.schedule.registry import Candidate, Scheduled, rules_for, templates_for
from taskloom.target.base import Target

#: A template's candidate -> the config to build it with.
ChooseConfig = Callable[[Candidate], Any]


def find_candidate(task: Task, target: Target, constants: Mapping[int, np.ndarray] | None = None,
                   weights_stream: bool | str = False) -> Candidate | None:
    """The first registered template of ``target``'s kind that serves ``task``, or None."""
    for _name, finder in templates_for(target.kind):
        found = finder(task, target, constants, weights_stream)
        if found is not None:
            return found
    return None


def schedule_kernel(task: Task, target: Target, choose: ChooseConfig, name: str | None = None,
                    constants: Mapping[int, np.ndarray] | None = None,
                    weights_stream: bool | str = False) -> Scheduled:
    """The scheduled kernel of ``task`` for ``target``; a template's config is ``choose(candidate)``.

    ``constants`` (by input position) says which task inputs are constants, so a template
    may pack them now; ``weights_stream`` says the graph's weights outgrow the caches
    (``"memory"``: the L3 too)."""
    found = find_candidate(task, target, constants, weights_stream)
    if found is not None:
        return found.build(choose(found), name or task.name)
    fn = _by_rules(task, target)
    return Scheduled(fn.renamed(name or fn.name), tuple(range(len(task.inputs))))


@functools.lru_cache(maxsize=256)
def _by_rules(task: Task, target: Target) -> S.Function:
    """``task``'s kernel from the rules of ``target``'s kind. Kept: a deep model asks for the
    same one once per layer (tasks compare by structure)."""
    return rules_for(target.kind)(task, target, None)


def schedule(task: Task, target: Target, choose: ChooseConfig, name: str | None = None) -> S.Function:
    """The scheduled program of ``task``; its parameters are the task's inputs, then its outputs."""
    return schedule_kernel(task, target, choose, name).fn
