"""Mutation fuzzing of the ONNX frontend (the engine: ``onnx_fuzz.py``): every mutant of a
few small valid models either compiles and agrees with onnxruntime, or raises a
TaskloomError; never another exception, a crash or a hang.

A short batch runs by default; a long one under ``-m slow``. Both run again on the CUDA
path (compiled for sm_90, every kernel run in the SIMT emulator) where nvcc is installed:

    .venv/bin/python -m pytest tests/frontend/test_onnx_fuzz.py -m slow -q

A failure names each bad mutant by number; ``onnx_fuzz.mutant(seed, i)`` rebuilds it and
``onnx_fuzz.check_mutant(seed, i)`` replays it in the test process.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from taskloom.onnx import from_onnx  # noqa: E402
from tests.frontend import onnx_fuzz  # noqa: E402
from tests.frontend.onnx_fuzz import SEEDS, describe, mutant, run_fuzz  # noqa: E402

SHORT, LONG = 80, 1000
SHORT_CUDA, LONG_CUDA = 30, 300


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_models_are_valid_and_match_onnxruntime(name):
    model = SEEDS[name]()
    onnx.checker.check_model(model, full_check=True)
    feeds = onnx_fuzz._inputs(model, 0)
    want = onnx_fuzz._ort(model.SerializeToString(), feeds)
    assert not isinstance(want, str), want
    got = from_onnx(model)(*feeds.values())
    np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-5)


def test_mutants_are_reproducible():
    assert mutant(7, 3) == mutant(7, 3)
    assert len({mutant(7, i)[2] for i in range(20)}) > 15


def test_short_fuzz_run():
    report = run_fuzz(seed=0, count=SHORT)
    counts = report.counts()
    assert len(report.results) == SHORT
    assert counts["match"] >= SHORT // 10 and counts["taskloom_error"] >= SHORT // 10, describe(report)
    assert not report.failures(), describe(report)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("count", [pytest.param(SHORT_CUDA, id="short"),
                                   pytest.param(LONG_CUDA, id="long", marks=pytest.mark.slow)])
def test_fuzz_run_on_the_cuda_path(monkeypatch, count):
    """The same mutants compiled for CUDA and run in the SIMT emulator."""
    monkeypatch.setenv("ONNX_FUZZ_TARGET", "cuda:sm_90")
    report = run_fuzz(seed=3, count=count)
    assert report.counts()["match"] >= count // 10, describe(report)
    assert not report.failures(), describe(report)


@pytest.mark.slow
def test_long_fuzz_run():
    report = run_fuzz(seed=1, count=LONG)
    print(describe(report))
    assert len(report.results) == LONG
    assert not report.failures(), describe(report)


def test_the_harness_records_crashes_and_hangs_and_goes_on(monkeypatch):
    monkeypatch.setenv("ONNX_FUZZ_FAULTS", "1:crash,3:hang")
    report = run_fuzz(seed=0, count=5, timeout_s=8)
    outcomes = [(r["i"], r["outcome"]) for r in report.results]
    assert [i for i, _ in outcomes] == [0, 1, 2, 3, 4]
    assert dict(outcomes)[1] == "crash" and dict(outcomes)[3] == "hang"
    assert "worker exited with -11" in report.results[1]["detail"]
    assert {o for i, o in outcomes if i not in (1, 3)} <= {"match", "taskloom_error", "accepted_ort_refused"}
