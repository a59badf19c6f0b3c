"""Measuring candidate kernels: each built into its own library, all timed in a worker.

Builds run on a thread pool (the C compiler runs in subprocesses, so threads suffice).
Timing happens in a separate process, :mod:`taskloom.tune._worker`, so a candidate that
crashes or hangs costs only its own measurement: the dead or killed worker is replaced
by a fresh one that goes on with the candidates after it. Every candidate gets a
:class:`Measurement`, in the order given; a failing candidate is a measurement with an
error, never an exception (only a worker that cannot start at all raises).
"""
from __future__ import annotations

import json
import math
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from taskloom.backend.build import BuiltLibrary, build_library
from taskloom.errors import TargetError, TaskloomError
from taskloom.ir.stmt import Function
from taskloom.runtime.dlpack import DTYPE_NAMES
from taskloom.target.base import Target
from taskloom.target.cpu import host_target

WORKER_MODULE = "taskloom.tune._worker"
#: Timed calls of a candidate go on until they add up to this many seconds: ten calls of a
#: 0.2 ms kernel fit in one scheduler hiccup, and a median of them was seen 30-60% off.
MIN_SECONDS = 0.05
#: How long a fresh worker may take to import numpy and create the arguments, beyond ``timeout_s``.
STARTUP_GRACE_S = 60.0


@dataclass(frozen=True)
class Measurement:
    """One candidate's result: the median seconds per call, or None and why."""

    seconds: float | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the candidate was measured."""
        return self.seconds is not None


def measure(functions: Sequence[Function], args: Sequence[tuple[tuple[int, ...], str]], target: Target,
            *, timeout_s: float = 10.0, repeats: int = 10, min_seconds: float = MIN_SECONDS,
            progress: bool | str = True,
            on_result: Callable[[int, Measurement], None] | None = None,
            args_each: Sequence[Sequence[tuple[tuple[int, ...], str]]] | None = None) -> list[Measurement]:
    """Build and time each of ``functions`` (candidate kernels with one parameter list).

    ``args`` describes every parameter, in order, as (shape, dtype name); all must be
    tensors. ``args_each`` instead gives each function its own (weight panels whose shape
    follows the candidate's config). Inputs are random floats (integers and bools zero), outputs zeroed. Each
    candidate runs twice to warm up, then at least ``repeats`` timed calls, and more until
    they add up to ``min_seconds``, give its median. A
    candidate that fails to build, crashes the worker, or runs longer than ``timeout_s``
    (warm-up and repeats together) gets an error instead of a time. ``progress`` shows a
    bar on stderr (tqdm when installed) described by the string given, or "tuning".
    ``on_result(index, measurement)`` is called as each candidate's result is known (so a
    caller can record it before the others finish).
    """
    specs = _arg_specs(args)
    functions = list(functions)
    if args_each is not None and len(args_each) != len(functions):
        raise TaskloomError(f"args_each describes {len(args_each)} functions' parameters, but {len(functions)} "
                            "functions are given")
    each = [_arg_specs(a) for a in args_each] if args_each is not None else None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise TaskloomError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise TaskloomError(f"repeats must be a positive integer, got {repeats!r}")
    if isinstance(min_seconds, bool) or not isinstance(min_seconds, (int, float)) \
            or not math.isfinite(min_seconds) or min_seconds < 0:
        raise TaskloomError(f"min_seconds must be a non-negative number of seconds, got {min_seconds!r}")
    if getattr(target, "kind", None) != "cpu":
        raise TargetError(f"measure() needs a CPU target, got {type(target).__name__}")
    if not target.runs_on_host():  # type: ignore[attr-defined]
        raise TargetError(f"cannot measure kernels built for {target.key()} on this machine "
                          f"({host_target().key()}); measure for a target the host can run")
    results = _Results(len(functions), on_result)
    bar = Progress(2 * len(functions), progress if isinstance(progress, str) else "tuning", bool(progress))
    try:
        pending: list[_Candidate] = []
        for index, built in enumerate(_build_all(functions, target, bar)):
            mine = each[index] if each is not None else specs
            error = built if isinstance(built, str) else _signature_error(built.signatures[0], mine)
            if error is not None:
                results[index] = Measurement(None, error)
                bar.update()  # nothing to measure
            else:
                assert isinstance(built, BuiltLibrary)
                sig = built.signatures[0]
                pending.append(_Candidate(index, str(built.lib_path), sig["symbol"],
                                          [bool(p["written"]) for p in sig["params"]],
                                          mine if each is not None else None, bool(sig.get("status"))))
        _measure_all(pending, specs, repeats, min_seconds, timeout_s, results, bar)
    finally:
        bar.close()
    return [r if r is not None else Measurement(None, "not measured") for r in results]


def side_by_side(functions: Sequence[Function], args: Sequence[tuple[tuple[int, ...], str]], target: Target,
                 rounds: int, *, measurer: Callable[..., list[Measurement]] | None = None,
                 args_each: Sequence[Sequence[tuple[tuple[int, ...], str]]] | None = None,
                 **options: Any) -> list[list[float]]:
    """The seconds of each of ``functions`` in ``rounds`` runs that time them all, side by
    side; each round starts with the next function, so none is always timed first (the
    first kernel of a run meets colder caches and clocks). Failed runs give no time.
    ``measurer`` stands in for :func:`measure`; ``args_each`` and ``options`` go to it."""
    times: list[list[float]] = [[] for _ in functions]
    n = len(functions)
    for r in range(rounds):
        order = [(r + i) % n for i in range(n)]
        if args_each is not None:
            options["args_each"] = [args_each[i] for i in order]
        for i, m in zip(order, (measurer or measure)([functions[i] for i in order], args, target, progress=False,
                                                      **options)):
            if m.ok:
                times[i].append(m.seconds)
    return times


class _Results(list):
    """The measurements by candidate, telling ``on_result`` of each as it is set."""

    def __init__(self, n: int, on_result: Callable[[int, Measurement], None] | None):
        super().__init__([None] * n)
        self.on_result = on_result

    def __setitem__(self, index, value) -> None:  # type: ignore[override]
        super().__setitem__(index, value)
        if self.on_result is not None and value is not None:
            self.on_result(index, value)


# -- arguments and builds ----------------------------------------------------------------

def _arg_specs(args: Sequence[tuple[tuple[int, ...], str]]) -> list[dict[str, Any]]:
    """``args`` checked and in the worker's JSON form."""
    specs = []
    for position, arg in enumerate(args):
        try:
            shape, dtype = arg
            shape = tuple(shape)
        except (TypeError, ValueError):
            raise TaskloomError(f"argument {position}: expected (shape, dtype name), got {arg!r}") from None
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise TaskloomError(f"argument {position}: a shape is a tuple of non-negative ints, got {shape!r}")
        if dtype not in DTYPE_NAMES:
            raise TaskloomError(f"argument {position}: unknown dtype {dtype!r}; use one of {', '.join(DTYPE_NAMES)}")
        specs.append({"shape": list(shape), "dtype": dtype})
    return specs


def _build_all(functions: list[Function], target: Target, bar: Progress) -> list[BuiltLibrary | str]:
    """Each function built into its own library, or the error that stopped it."""
    jobs = max(1, min(target.num_cores or os.cpu_count() or 1, len(functions)))  # type: ignore[attr-defined]
    built: list[BuiltLibrary | str] = ["build: not built"] * len(functions)
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="taskloom-tune-build") as pool:
        futures = {pool.submit(build_library, fn, target): index for index, fn in enumerate(functions)}
        for future in as_completed(futures):
            try:
                built[futures[future]] = future.result()
            except TaskloomError as exc:
                built[futures[future]] = f"build: {_first_line(str(exc))}"
            except Exception as exc:  # a candidate the pipeline chokes on is one bad candidate
                built[futures[future]] = f"build: {type(exc).__name__}: {_first_line(str(exc))}"
            bar.update()
    return built


def _signature_error(sig: dict[str, Any], specs: list[dict[str, Any]]) -> str | None:
    """Why a built kernel cannot take ``specs``, or None when it can."""
    params = sig["params"]
    if len(params) != len(specs):
        return (f"signature: kernel {sig['name']!r} takes {len(params)} parameters, "
                f"but {len(specs)} arguments are described")
    for p, spec in zip(params, specs):
        if p["kind"] != "tensor" or p["dtype"] != spec["dtype"] or p["shape"] != spec["shape"]:
            have = f"{p['dtype']}{p['shape']}" if p["kind"] == "tensor" else f"a {p['dtype']} {p['kind']}"
            return (f"signature: parameter {p['name']!r} of kernel {sig['name']!r} is {have}, "
                    f"but its argument is {spec['dtype']}{spec['shape']}")
    return None


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


# -- the worker ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Candidate:
    """A built candidate as the worker's job lists it."""

    index: int
    library: str
    symbol: str
    written: list[bool]
    args: list[dict[str, Any]] | None = None  # its own parameters, else the job's
    status: bool = False  # it takes a status last, for its run-time checks


def _measure_all(pending: list[_Candidate], specs: list[dict[str, Any]], repeats: int, min_seconds: float,
                 timeout_s: float,
                 results: list[Measurement | None], bar: Progress) -> None:
    """Time every candidate of ``pending``, a fresh worker after each one that fails it."""
    todo = deque(pending)
    while todo:
        worker = _Worker({"args": specs, "repeats": repeats, "min_seconds": min_seconds,
                          "candidates": [asdict(c) for c in todo]})
        try:
            message = worker.next_message(timeout_s + STARTUP_GRACE_S)
            if not (isinstance(message, dict) and message.get("ready")):
                what = "did not start in time" if message is _TIMEOUT else worker.exit_description()
                raise TaskloomError(f"the measuring worker ({sys.executable} -m {WORKER_MODULE}) "
                                    f"failed before measuring anything: {what}")
            while todo:
                current = todo[0]
                message = worker.next_message(timeout_s)
                if message is _TIMEOUT:
                    results[current.index] = Measurement(None, f"timeout after {timeout_s:g}s")
                elif message is None:
                    results[current.index] = Measurement(None, f"crashed: {worker.exit_description()}")
                elif message.get("index") != current.index:
                    raise TaskloomError(f"the measuring worker answered for candidate {message.get('index')!r} "
                                        f"while candidate {current.index} was running")
                elif message.get("seconds") is not None:
                    results[current.index] = Measurement(float(message["seconds"]), None)
                else:
                    results[current.index] = Measurement(None, str(message.get("error", "no result")))
                todo.popleft()
                bar.update()
                if message is _TIMEOUT or message is None:
                    break  # this worker is gone or must go; a fresh one takes the rest
        finally:
            worker.stop()


class _Timeout:
    def __repr__(self) -> str:
        return "<timeout>"


_TIMEOUT = _Timeout()


class _Worker:
    """A running worker, its stdout forwarded line by line to a queue by a reader thread."""

    def __init__(self, job: dict[str, Any]):
        self._stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, env=_worker_env(), text=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="taskloom-tune-worker-reader", daemon=True)
        self._reader.start()
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(job))
            self.process.stdin.close()
        except OSError:  # it died already; next_message reports how
            pass

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self._lines.put(line)
        self._lines.put(None)

    def next_message(self, timeout_s: float) -> dict[str, Any] | None | _Timeout:
        """The next JSON message; None once the worker's output ended; _TIMEOUT if none came in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return _TIMEOUT
            if line is None:
                self._lines.put(None)  # stays ended for later calls
                return None
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not ours: something a kernel printed
            if isinstance(message, dict):
                return message

    def exit_description(self) -> str:
        """How the worker ended: the signal that killed it, or its exit code and last words."""
        try:
            code = self.process.wait(timeout=STARTUP_GRACE_S)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if code < 0:
            try:
                return signal.Signals(-code).name
            except ValueError:
                return f"signal {-code}"
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return f"exit code {code}" + (f" ({lines[-1].strip()})" if lines else "")

    def stop(self) -> None:
        """Kill the worker if it still runs and release its files."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._reader.join(timeout=5.0)  # the pipe ends with the process; the reader closes it
        self._stderr.close()


def _worker_env() -> dict[str, str]:
    """This environment, with the taskloom this process runs first on the module path."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


# -- progress -----------------------------------------------------------------------------

class Progress:
    """A tqdm bar on stderr, or without tqdm a line at each tenth; nothing when disabled.
    ``postfix`` shows a short status after the bar (the best time so far)."""

    def __init__(self, total: int, desc: str, enabled: bool):
        self.total, self.desc, self.done = total, desc, 0
        self.enabled = enabled and total > 0
        self._bar: Any = None
        self._tenths = 0
        if self.enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self._bar = tqdm(total=total, desc=desc, file=sys.stderr, unit="step")

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        tenths = self.done * 10 // self.total
        if tenths > self._tenths:
            self._tenths = tenths
            print(f"{self.desc}: {tenths * 10}% ({self.done}/{self.total})", file=sys.stderr, flush=True)

    def postfix(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
