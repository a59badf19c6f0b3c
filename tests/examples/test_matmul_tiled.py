"""The tiled-matmul example: one build serves every shape (the sizes are symbols), on both ISAs."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import taskloom
from taskloom.target import get_target, host_target

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "matmul_tiled.py"
spec = importlib.util.spec_from_file_location("matmul_tiled", EXAMPLE)
matmul_tiled = importlib.util.module_from_spec(spec)
spec.loader.exec_module(matmul_tiled)

TARGETS = ["cpu -isa=avx2"] + (["cpu -isa=avx512"] if host_target().has("avx512f") else [])
_built: dict[str, object] = {}


def built(spec_: str):
    if spec_ not in _built:
        target = get_target(spec_)
        _built[spec_] = taskloom.build(matmul_tiled.make_matmul(target), target)["matmul"]
    return _built[spec_]


@pytest.mark.parametrize("spec_", TARGETS)
@settings(max_examples=15, deadline=None)
@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 300))
def test_any_shape_matches_numpy(spec_, m, n, k):
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    A = rng.standard_normal((m, k), dtype=np.float32)
    B = rng.standard_normal((k, n), dtype=np.float32)
    C = np.full((m, n), np.nan, dtype=np.float32)
    built(spec_)(A, B, C)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_prime_sizes_across_k_blocks():
    A = np.random.default_rng(0).standard_normal((131, 1031), dtype=np.float32)
    B = np.random.default_rng(1).standard_normal((1031, 67), dtype=np.float32)
    C = np.empty((131, 67), np.float32)
    built(TARGETS[-1])(A, B, C)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-3)


def test_example_runs_and_reports(capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["matmul_tiled.py", "67", "45", "129", "--repeats", "3"])
    matmul_tiled.main()
    out = capsys.readouterr().out
    assert "matmul 67x45x129 fp32" in out and "taskloom" in out and "numpy" in out and "GFLOP/s" in out
