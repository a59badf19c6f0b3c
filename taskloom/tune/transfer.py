"""How one machine's tuning records serve another: for each workload both tuned, the first
one's best config timed on the second against the second's own best, and how alike the two
rank the configs both measured.

A compile at ``tune=0`` takes a record of its own target only (records are keyed by the
GPU's name, or the CPU's ISA): a user who imports an H100's records onto an H200 wants to
know, before keying them to the H200, what that would cost. ``taskloom records transfer``
prints this report.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from taskloom.tune.cost_model import spearman
from taskloom.tune.records import Records


@dataclass(frozen=True)
class Transfer:
    """One workload tuned on both targets: ``ratio`` is the second target's time of the
    first's best config over its own best (1.0: the same pick; None: never timed there),
    ``spearman`` the rank correlation of the configs both timed (None below 3)."""

    workload: str
    source_best_s: float
    target_best_s: float
    ratio: float | None
    common: int
    spearman: float | None


def transfer(records: Records, source: str, target: str, workload: str | None = None) -> list[Transfer]:
    """Every workload (or those ``workload`` selects, a trailing ``*`` a prefix) with a
    successful record on both ``source`` and ``target``, in workload order."""
    on_target = {w for w, t, _ in records.workloads(target) if t == target}
    out = []
    for w, t, _ in records.workloads(source):
        if t != source or w not in on_target or not _selected(w, workload):
            continue
        mine, theirs = _times(records, w, source), _times(records, w, target)
        if not mine or not theirs:
            continue
        pick = min(mine, key=mine.__getitem__)
        common = sorted(set(mine) & set(theirs))
        ratio = theirs[pick] / min(theirs.values()) if pick in theirs else None
        out.append(Transfer(w, min(mine.values()), min(theirs.values()), ratio, len(common),
                            spearman([mine[c] for c in common], [theirs[c] for c in common])))
    return out


def summary(rows: Sequence[Transfer]) -> str:
    """One line: the geometric mean and worst of the ratios, and how many picks carried over."""
    ratios = [r.ratio for r in rows if r.ratio is not None]
    if not ratios:
        return f"{len(rows)} workload(s) tuned on both; no first-target pick was timed on the second"
    geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    same = sum(1 for x in ratios if x <= 1.0)
    return (f"{len(rows)} workload(s) tuned on both: the first's picks run {geomean:.3f}x the second's best in "
            f"geometric mean (worst {max(ratios):.3f}x); {same} of {len(ratios)} are the second's best"
            + (f"; {len(rows) - len(ratios)} never timed there" if len(ratios) < len(rows) else ""))


def _times(records: Records, workload: str, target: str) -> dict[str, float]:
    """Each config that ran ``workload`` on ``target``: its seconds."""
    return {key: s for key, (s, error) in records.results(workload, target).items() if s is not None}


def _selected(workload: str, pattern: str | None) -> bool:
    if pattern is None:
        return True
    return workload.startswith(pattern[:-1]) if pattern.endswith("*") else workload == pattern


__all__ = ["Transfer", "summary", "transfer"]
