"""Measuring candidates: good ones get a time; a build failure, a crash or a hang costs
only its own candidate."""
import shutil
import subprocess
import sys

import pytest

from taskloom.backend import build as build_module
from taskloom.errors import CompileError, TaskloomError
from taskloom.ir import f32, i64
from taskloom.script import kernel
from taskloom.target import CpuTarget
from taskloom.tune import Measurement, measure

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

N = 1024
ARGS = [((N,), "float32")] * 3
TARGET = CpuTarget.host()


@kernel
def add(A: f32[N], B: f32[N], C: f32[N]):
    for i in range(N):
        C[i] = A[i] + B[i]


@kernel
def mul(A: f32[N], B: f32[N], C: f32[N]):
    for i in parallel(N):
        C[i] = A[i] * B[i]


@kernel
def crash(A: f32[N], B: f32[N], C: f32[N]):
    for i in range(N):
        "2**46 floats past any user-space address: non-canonical, so always a fault"
        C[cast(i, i64) + 70368744177664] = A[i]


@kernel
def hang(A: f32[N], B: f32[N], C: f32[N]):
    for i in range(2147483647):
        for j in range(2147483647):
            C[0] = C[0] + A[j % N]


@kernel
def broken(A: f32[N], B: f32[N], C: f32[N]):
    for i in range(N):
        C[i] = A[i]


@kernel
def wrong_shape(A: f32[N], B: f32[N], C: f32[N + 1]):
    for i in range(N):
        C[i] = A[i]


@pytest.fixture
def failing_compiler(monkeypatch):
    """The C compiler fails on the kernel named 'broken'."""
    real = build_module.compile_shared_library

    def compile_shared_library(source, target, *, name="module", **kwargs):
        if name == "broken":
            raise CompileError("gcc failed to compile 'broken' (exit 1)", "/tmp/broken.c", "error: nope")
        return real(source, target, name=name, **kwargs)

    monkeypatch.setattr(build_module, "compile_shared_library", compile_shared_library)


def _assert_timed(m):
    assert m.error is None and m.ok and 0 < m.seconds < 0.1


def test_good_candidates_get_a_time():
    results = measure([add, mul], ARGS, TARGET, repeats=3, progress=False)
    assert len(results) == 2
    for m in results:
        _assert_timed(m)
    assert measure([], ARGS, TARGET, progress=False) == []


def test_build_failures_cost_only_their_candidate(failing_compiler):
    results = measure([add, broken, wrong_shape, mul], ARGS, TARGET, repeats=3, progress=False)
    _assert_timed(results[0])
    assert results[1] == Measurement(None, "build: gcc failed to compile 'broken' (exit 1)")
    assert results[2].seconds is None and results[2].error.startswith("signature: parameter 'C'")
    _assert_timed(results[3])


def test_each_candidate_may_take_its_own_arguments():
    """Weight panels shaped by each candidate's config: ``args_each`` gives every function its
    parameters, checked against its signature, and the worker calls each with its own."""
    each = [ARGS, [((N,), "float32")] * 2 + [((N + 1,), "float32")], ARGS]
    results = measure([add, wrong_shape, mul], [], TARGET, repeats=3, progress=False, args_each=each)
    for m in results:
        _assert_timed(m)
    wrong = measure([wrong_shape], [], TARGET, repeats=3, progress=False, args_each=[ARGS])
    assert wrong[0].error.startswith("signature: parameter 'C'")
    with pytest.raises(TaskloomError, match="args_each describes 1"):
        measure([add, mul], [], TARGET, progress=False, args_each=[ARGS])


def test_a_crash_costs_only_its_candidate():
    results = measure([add, crash, mul, crash], ARGS, TARGET, repeats=3, progress=False)
    _assert_timed(results[0])
    _assert_timed(results[2])
    for m in (results[1], results[3]):
        assert m.seconds is None and m.error in ("crashed: SIGSEGV", "crashed: SIGBUS")


def test_a_hang_is_killed_after_the_timeout():
    results = measure([hang, add, hang, mul], ARGS, TARGET, timeout_s=1, repeats=3, progress=False)
    assert results[0] == results[2] == Measurement(None, "timeout after 1s")
    _assert_timed(results[1])
    _assert_timed(results[3])


def test_progress_bar_on_stderr(capsys):
    pytest.importorskip("tqdm")
    measure([add], ARGS, TARGET, repeats=1, progress="matmul 64x64")
    captured = capsys.readouterr()
    assert "matmul 64x64" in captured.err and "2/2" in captured.err and captured.out == ""
    measure([add], ARGS, TARGET, repeats=1, progress=False)
    assert capsys.readouterr().err == ""


def test_progress_without_tqdm_prints_each_tenth(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm now fails
    measure([add, mul], ARGS, TARGET, repeats=1, progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["tuning: 20% (1/4)", "tuning: 50% (2/4)", "tuning: 70% (3/4)", "tuning: 100% (4/4)"]


def test_bad_arguments_are_rejected():
    with pytest.raises(TaskloomError, match="shape"):
        measure([add], [((N, -1), "float32")], TARGET, progress=False)
    with pytest.raises(TaskloomError, match="dtype"):
        measure([add], [((N,), "float128")], TARGET, progress=False)
    with pytest.raises(TaskloomError, match="timeout_s"):
        measure([add], ARGS, TARGET, timeout_s=0, progress=False)
    with pytest.raises(TaskloomError, match="repeats"):
        measure([add], ARGS, TARGET, repeats=0, progress=False)
    with pytest.raises(TaskloomError, match="min_seconds"):
        measure([add], ARGS, TARGET, min_seconds=-1, progress=False)


def test_fast_kernels_are_timed_for_min_seconds_and_at_most_max_calls():
    """At least ``repeats`` calls; more until they add up to ``min_seconds``; never more
    than MAX_CALLS, however fast the call."""
    import time
    from taskloom.tune import _worker
    calls = []

    def slow(*_):  # about a millisecond a call
        calls.append(1)
        time.sleep(0.001)

    _worker._time(slow, [], repeats=3, min_seconds=0.03)
    timed = len(calls) - _worker.WARMUPS
    assert 3 < timed <= 31  # 30 ms of calls of at least 1 ms each, not just 3 calls
    calls.clear()
    _worker._time(slow, [], repeats=5, min_seconds=0.0)
    assert len(calls) == 5 + _worker.WARMUPS
    calls.clear()
    _worker._time(lambda *_: calls.append(1), [], repeats=1, min_seconds=1e9)
    assert len(calls) == _worker.MAX_CALLS + _worker.WARMUPS


def test_the_worker_does_not_import_torch():
    done = subprocess.run([sys.executable, "-c", "import sys, taskloom.tune._worker; print('torch' in sys.modules)"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
