"""Timing helpers shared by ``taskloom bench`` and the scripts under ``bench/``: medians of
many runs, systems measured in separate blocks (so one OpenMP runtime's spinning threads do
not steal the cores of the next) and in rounds (so they meet the same noise), machine and
version facts for the record."""
from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Any, Callable

#: Seconds to wait before and after timing a system, for other thread pools to go idle.
SETTLE_S = 0.3


def time_block(fn: Callable[[], object], repeats: int = 30, warmup: int = 3) -> list[float]:
    """The wall times of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones, in ms.

    Sleeps first and last: a thread pool that just ran (a BLAS computing a reference, the
    system timed before) spins for a while, stealing the cores of whatever runs next."""
    time.sleep(SETTLE_S)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    time.sleep(SETTLE_S)
    return times


def median_ms(fn: Callable[[], object], repeats: int = 30, warmup: int = 3) -> float:
    """The median of :func:`time_block`'s times, in ms."""
    return statistics.median(time_block(fn, repeats, warmup))


def time_rounds(calls: dict[str, Callable[[], object]], repeats: int = 30, rounds: int = 3,
                warmup: int = 3, block: Callable[[Callable[[], object], int, int], list[float]] | None = None
                ) -> dict[str, list[list[float]] | Exception]:
    """Each system's times (ms), one list per round: in every round each system is timed in
    a block of its own (:func:`time_block`), the order shifted by one each round. A system
    whose call raises is timed no more and maps to its exception; the others go on.

    On a shared machine the slow spells (a neighbour's job, a frequency drop) last longer
    than one block: timed once each, one system can meet a spell the other missed, and the
    ratio between them moves by tens of percent from run to run. Spread over rounds, every
    system meets the same weather, and the median of all its runs is the figure to compare.

    >>> times = time_rounds({"a": f, "b": g}, repeats=30, rounds=3)   # times["a"]: 3 lists of 30

    ``block(fn, repeats, warmup)`` times one block (default :func:`time_block`, wall time).
    """
    block = block or time_block
    out: dict[str, list[list[float]] | Exception] = {name: [] for name in calls}
    for r in range(rounds):
        live = [name for name in calls if not isinstance(out[name], Exception)]
        shift = r % max(len(live), 1)
        for name in live[shift:] + live[:shift]:
            try:
                out[name].append(block(calls[name], repeats, warmup))  # type: ignore[union-attr]
            except Exception as exc:  # the caller reports it with the system
                out[name] = exc
    return out


def medians(times: dict[str, list[list[float]] | Exception]) -> dict[str, float]:
    """Each system's median over all its runs in :func:`time_rounds`' ``times`` (ms); a
    system whose call failed raises its exception here."""
    out = {}
    for name, rounds in times.items():
        if isinstance(rounds, Exception):
            raise rounds
        out[name] = statistics.median(t for r in rounds for t in r)
    return out


def write_json(path_text: str, record: dict[str, Any]) -> None:
    """``record`` as indented JSON at ``path_text`` (its directory made), and a line saying so."""
    import json
    from pathlib import Path
    path = Path(path_text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


def machine() -> dict[str, Any]:
    """The host: CPU name, usable cores, ISA flags, cache sizes (bytes), platform."""
    from taskloom.target import host_target
    t = host_target()
    return {"cpu": t.name, "cores": t.num_cores, "isa": sorted(t.isa), "l1d": t.l1d_bytes,
            "l2": t.l2_bytes, "l3": t.l3_bytes, "platform": platform.platform(),
            "python": platform.python_version(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default")}


def versions() -> dict[str, str]:
    """Versions of taskloom, the C compiler, numpy and, where importable, torch and onnxruntime."""
    import numpy
    out = {"numpy": numpy.__version__}
    for name in ("torch", "onnxruntime"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            pass
    import taskloom
    from taskloom.backend.compiler import compiler_version
    out["taskloom"] = taskloom.__version__
    out["cc"] = compiler_version()
    return out
