"""The tuner: which configs each level measures, records reused, compile picking them up."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, default_config, matmul_space
from taskloom.target import host_target
from taskloom.tune import Records, tuner
from taskloom.tune.tuner import candidates, matmul_workload, neighbours, recorded_config, tune_matmul

T = host_target()


def test_levels_pick_the_default_then_more():
    shape = (1, 128, 768, 768)
    one, two = candidates(shape, T, 1), candidates(shape, T, 2)
    assert one[0] == two[0] == default_config(shape, T)
    assert 5 <= len(one) <= 40
    assert len(two) >= len(matmul_space(T)) and len(two) <= 201
    assert len(set(one)) == len(one) and len(set(two)) == len(two)
    assert all(c.mr * c.nv + c.nv + 1 <= T.num_vector_registers for c in one)


def test_neighbours_move_one_knob_one_step():
    space = matmul_space(T)
    base = space[len(space) // 2]
    for n in neighbours(base, space):
        changed = {k for k, v in n.to_dict().items() if base.to_dict()[k] != v}
        assert changed and (changed <= {"mr", "nv"} or changed <= {"pm", "pn"} or len(changed) == 1)


def test_tuning_measures_once_and_records(tmp_path, monkeypatch):
    records = Records(tmp_path / "tune.sqlite")
    shape = (1, 24, 40, 32)
    best = tune_matmul(shape, T, level=1, records=records, progress=False)
    measured = records.results(matmul_workload(shape), T.key())
    assert len(measured) == len(candidates(shape, T, 1))
    assert any(seconds is not None for seconds, _ in measured.values())
    assert recorded_config(shape, T, records) == best

    def fail(*a, **k):
        raise AssertionError("measured again")
    monkeypatch.setattr(tuner, "measure", fail)
    assert tune_matmul(shape, T, level=1, records=records, progress=False) == best


def test_compile_uses_a_recorded_config(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path))
    shape = (1, 20, 48, 36)
    chosen = MatmulConfig(4, 2, 16, 8, 32, 1, T.num_cores)
    Records.default().add(matmul_workload(shape), T.key(), chosen.to_dict(), 1e-6)
    x, y = input((20, 36), name="x"), input((36, 48), name="y")
    c = taskloom.compile(Graph([x, y], [ops.matmul(x, y)]))
    assert c.meta["kernels"][0]["schedule"] == f"matmul_cpu: {chosen}"
    a, b = np.ones((20, 36), np.float32), np.ones((36, 48), np.float32)
    np.testing.assert_allclose(c(a, b)[0] if isinstance(c(a, b), (list, tuple)) else c(a, b), a @ b)


def test_bad_level_is_an_error():
    with pytest.raises(taskloom.TaskloomError, match="tune"):
        x, y = input((4, 4), name="x"), input((4, 4), name="y")
        taskloom.compile(Graph([x, y], [ops.matmul(x, y)]), tune=3)
