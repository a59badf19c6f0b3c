"""Timing helpers shared by ``taskloom bench`` and the scripts under ``bench/``: medians of
many runs, systems measured in separate blocks (so one OpenMP runtime's spinning threads do
not steal the cores of the next), machine and version facts for the record."""
from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Any, Callable

#: Seconds to wait before and after timing a system, for other thread pools to go idle.
SETTLE_S = 0.3


def median_ms(fn: Callable[[], object], repeats: int = 30, warmup: int = 3) -> float:
    """The median wall time of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones, in ms.

    Sleeps first and last: a thread pool that just ran (a BLAS computing a reference, the
    system timed before) spins for a while, stealing the cores of whatever runs next."""
    time.sleep(SETTLE_S)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    time.sleep(SETTLE_S)
    return statistics.median(times) * 1e3


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
