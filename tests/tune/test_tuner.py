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
from taskloom.graph.fusion import fuse_graph
from taskloom.graph.passes import optimize
from taskloom.schedule.contraction import match_contraction
from taskloom.schedule.select import workload_key

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
    chosen = MatmulConfig(4, 2, 16, 8, 32, 1, T.num_cores)
    x, y = input((20, 36), name="x"), input((36, 48), name="y")
    graph = Graph([x, y], [ops.matmul(x, y)])
    (group,) = fuse_graph(optimize(graph))
    Records.default().add(workload_key(match_contraction(group.task)), T.key(), chosen.to_dict(), 1e-6)
    c = taskloom.compile(graph)
    assert c.meta["kernels"][0]["schedule"] == f"matmul_cpu: {chosen}"
    a, b = np.ones((20, 36), np.float32), np.ones((36, 48), np.float32)
    np.testing.assert_allclose(c(a, b)[0] if isinstance(c(a, b), (list, tuple)) else c(a, b), a @ b)


def test_bad_level_is_an_error():
    with pytest.raises(taskloom.TaskloomError, match="tune"):
        x, y = input((4, 4), name="x"), input((4, 4), name="y")
        taskloom.compile(Graph([x, y], [ops.matmul(x, y)]), tune=3)


def test_tuning_a_fused_group_times_the_fused_kernel(tmp_path, monkeypatch):
    """A conv's level-1 search measures the kernel with its img2col window and epilogue,
    under its own record key, and the compiled graph still matches."""
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path))
    seen = []
    real = tuner.measure

    def spy(fns, args, target, **kw):
        seen.append((fns[0], args))
        return real(fns, args, target, **kw)
    monkeypatch.setattr(tuner, "measure", spy)
    rng = np.random.default_rng(3)
    X, W = rng.standard_normal((1, 4, 9, 9), dtype=np.float32), rng.standard_normal((8, 4, 3, 3), dtype=np.float32)
    x = input((1, 4, 9, 9), name="img")
    graph = Graph([x], [ops.relu(ops.conv2d(x, taskloom.asarray(W), padding=1))])
    c = taskloom.compile(graph, tune=1)
    fn, args = seen[0]
    assert [p.name for p in fn.params] == ["x", "weight", "out"] and args[0] == ((324,), "float32")
    (group,) = fuse_graph(optimize(graph))
    assert Records.default().best(workload_key(match_contraction(group.task)), T.key()) is not None
    import torch
    ref = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(X), torch.from_numpy(W), padding=1)).numpy()
    out = c(X)
    np.testing.assert_allclose(out[0] if isinstance(out, (list, tuple)) else out, ref, rtol=1e-4, atol=1e-4)
