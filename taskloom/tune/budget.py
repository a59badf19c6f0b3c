"""A time budget for a compile's tuning, parsed from what a user writes (``"2m"``, ``90``).

A leaf: the compiler and the frontends check a budget before any work without importing
the tuner.
"""
from __future__ import annotations

import math
import re
import time

from taskloom.errors import ArgumentError


class Budget:
    """A time budget for a whole compile's tuning: ``Budget("2m")``, ``Budget(90)``.

    >>> b = Budget("90s"); b.deadline(tasks_left=3)  # now + 30 s
    """

    def __init__(self, spec: str | float | int | None):
        self.total_s = parse_budget(spec)
        self.started = time.monotonic()

    def left(self) -> float:
        """Seconds left; infinite without a budget."""
        return math.inf if self.total_s is None else max(0.0, self.total_s - (time.monotonic() - self.started))

    def deadline(self, tasks_left: int = 1) -> float:
        """The ``time.monotonic()`` by which the next task should stop: an even share of
        what is left among ``tasks_left`` tasks (time a task does not use rolls over)."""
        return time.monotonic() + self.left() / max(1, tasks_left)


def parse_budget(spec: str | float | int | None) -> float | None:
    """Seconds from ``"90s"``, ``"2m"``, ``"1.5h"`` or a number of seconds; None is no budget."""
    if spec is None:
        return None
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        seconds = float(spec)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*", str(spec))
        if not m:
            raise ArgumentError(f"budget={spec!r} is not a duration; use seconds or a string such as "
                                f"'90s', '2m' or '1h'")
        seconds = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ArgumentError(f"budget={spec!r} must be a positive duration")
    return seconds
