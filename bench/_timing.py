"""Timing helpers shared by the benchmarks: medians of many runs, systems measured in
separate blocks (so one OpenMP runtime's spinning threads do not steal the cores of the
next), machine and version facts for the record."""
from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Callable


def median_ms(fn: Callable[[], object], repeats: int = 30, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    time.sleep(0.2)  # let this system's worker threads go idle before the next is timed
    return statistics.median(times) * 1e3


def machine() -> dict:
    from taskloom.target import host_target
    t = host_target()
    return {"cpu": t.name, "cores": t.num_cores, "isa": sorted(t.isa), "l1d": t.l1d_bytes,
            "l2": t.l2_bytes, "l3": t.l3_bytes, "platform": platform.platform(),
            "python": platform.python_version(), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default")}


def versions() -> dict:
    import numpy
    out = {"numpy": numpy.__version__}
    try:
        import torch
        out["torch"] = torch.__version__
    except ImportError:
        pass
    import taskloom
    from taskloom.backend.compiler import compiler_version
    out["taskloom"] = taskloom.__version__
    out["cc"] = compiler_version()
    return out
