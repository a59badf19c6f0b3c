"""The measuring worker: times built kernels in a process of its own.

``python -m taskloom.tune._worker`` reads one JSON job on stdin::

    {"args": [{"shape": [1024], "dtype": "float32"}, ...],
     "repeats": 10, "min_seconds": 0.05,
     "candidates": [{"index": 3, "library": "/.../lib.so", "symbol": "add",
                     "written": [false, false, true]}, ...]}

It creates the arguments once (64-byte aligned; floats random, integers and bools zero),
then for each candidate in order zeroes the arguments the candidate writes, loads its
library, runs it twice to warm up, then times calls under ``time.perf_counter``: at least
``repeats``, and more until they add up to ``min_seconds`` (at most ``MAX_CALLS``), and
prints one JSON line, flushed at once: ``{"index": 3, "seconds": <median>}``, or
``{"index": 3, "error": "..."}`` when the library cannot be loaded. A line
``{"ready": true}`` comes first, once the arguments exist.

A kernel that crashes takes the worker with it and one that hangs is killed; the parent
(:mod:`taskloom.tune.measure`) sees which candidate was running by the lines so far. This
module needs only numpy and the standard library; torch is never imported.
"""
from __future__ import annotations

import ctypes
import json
import statistics
import sys
import time
from typing import Any

import numpy as np

from taskloom.runtime.aligned import aligned_empty

WARMUPS = 2
#: The most timed calls of one candidate, however fast it is.
MAX_CALLS = 1000
ALIGNMENT = 64
_SEED = 0


def _aligned_zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    out = aligned_empty(shape, dtype, ALIGNMENT)
    out.fill(0)
    return out


def _storage_dtype(name: str) -> np.dtype:
    """The numpy dtype that holds elements of ``name`` (bfloat16 travels as its 16 bits)."""
    return np.dtype(np.uint16) if name == "bfloat16" else np.dtype(name)


def _fill(array: np.ndarray, dtype: str, position: int) -> None:
    """Give an input its values: random normal floats (the same each time), zero otherwise."""
    if dtype in ("float64", "float32", "float16", "bfloat16"):
        rng = np.random.default_rng([_SEED, position])
        values = rng.standard_normal(array.shape, dtype=np.float64 if dtype == "float64" else np.float32)
        if dtype == "bfloat16":
            array[...] = (values.view(np.uint32) >> 16).astype(np.uint16)
        else:
            array[...] = values
    else:
        array[...] = 0


class _Arguments:
    """The arrays every candidate is called with, refreshed between candidates."""

    def __init__(self, specs: list[dict[str, Any]]):
        self.dtypes = [spec["dtype"] for spec in specs]
        self.arrays = [_aligned_zeros(tuple(spec["shape"]), _storage_dtype(spec["dtype"])) for spec in specs]
        self.pointers = [ctypes.c_void_p(a.ctypes.data) for a in self.arrays]
        for position, array in enumerate(self.arrays):
            _fill(array, self.dtypes[position], position)
        self._written: set[int] = set()  # positions holding some earlier candidate's output

    def prepare(self, written: list[bool]) -> None:
        """Outputs of the next candidate zeroed, inputs an earlier one overwrote restored."""
        for position, array in enumerate(self.arrays):
            if written[position]:
                array[...] = 0
                self._written.add(position)
            elif position in self._written:
                _fill(array, self.dtypes[position], position)
                self._written.discard(position)


def _time(function: Any, pointers: list[ctypes.c_void_p], repeats: int, min_seconds: float = 0.0) -> float:
    """Median seconds of one call. A fast kernel's few calls would all fall in the same
    millisecond, at the mercy of one interruption, so calls go on until ``min_seconds``."""
    for _ in range(WARMUPS):
        function(*pointers)
    times: list[float] = []
    total = 0.0
    while len(times) < repeats or (total < min_seconds and len(times) < MAX_CALLS):
        start = time.perf_counter()
        function(*pointers)
        times.append(time.perf_counter() - start)
        total += times[-1]
    return statistics.median(times)


def _emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> int:
    job = json.load(sys.stdin)
    shared = _Arguments(job["args"])
    own: dict[str, _Arguments] = {}  # candidates whose parameters differ (panels shaped by their config)
    repeats, min_seconds = int(job["repeats"]), float(job["min_seconds"])
    status = np.zeros(4, np.int64)  # tl_status
    _emit({"ready": True})
    for candidate in job["candidates"]:
        index = candidate["index"]
        arguments = shared
        if candidate.get("args") is not None:
            key = json.dumps(candidate["args"])
            arguments = own.get(key) or own.setdefault(key, _Arguments(candidate["args"]))
        try:
            function = ctypes.CDLL(candidate["library"])[candidate["symbol"]]
        except (OSError, AttributeError) as exc:
            _emit({"index": index, "error": f"load: {exc}"})
            continue
        function.restype = None
        # a kernel with run-time checks reports to a status, its last argument (what random
        # indices make it report does not matter here)
        pointers = arguments.pointers + ([ctypes.c_void_p(status.ctypes.data)] if candidate.get("status") else [])
        function.argtypes = [ctypes.c_void_p] * len(pointers)
        arguments.prepare(candidate["written"])
        _emit({"index": index, "seconds": _time(function, pointers, repeats, min_seconds)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
