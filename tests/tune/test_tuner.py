"""The tuner: which configs each level measures, budgets, resuming, records reused, compile
picking them up."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.schedule.templates.matmul_cpu import MatmulConfig
from taskloom.target import host_target
from taskloom.tune import Measurement, Records, budget, config_key, model, tuner
from taskloom.tune.tuner import candidates, matmul_workload, recorded_config, tune_matmul
from taskloom.graph.fusion import fuse_graph
from taskloom.compiler.passes import optimize
from taskloom.schedule.contraction import match_contraction
from taskloom.schedule.cpu import tunable

T = host_target()


def _fake(times):
    """A measurer answering each config with ``times(config)`` seconds, counting calls."""
    calls = []

    def measurer(functions, args, target, *, on_result=None, **kw):
        out = []
        for i, c in enumerate(functions):
            calls.append(c)
            m = Measurement(times(c), None)
            out.append(m)
            if on_result is not None:
                on_result(i, m)
        return out
    measurer.calls = calls
    return measurer


def _passthrough(c):
    return c  # the fake measurer reads the config itself


def _time(c):
    """A made-up landscape with one best config."""
    return 1e-3 * (1 + abs(c.mr - 9) / 10 + abs(c.nv - 3) / 10 + (c.kc < 200) / 20 + (c.pm != 1) / 30)


def test_level2_measures_the_whole_space_level1_a_fifth(tmp_path):
    shape = (1, 128, 768, 768)
    space = candidates(shape, T)
    assert space[0] == model.best_config(shape, T) and len(set(space)) == len(space)
    two = _fake(_time)
    tune_matmul(shape, T, level=2, records=Records(tmp_path / "a.sqlite"), kernel=_passthrough, measurer=two,
                progress=False, finalists=0)
    assert len(two.calls) == len(space)
    one = _fake(_time)
    tune_matmul(shape, T, level=1, records=Records(tmp_path / "b.sqlite"), kernel=_passthrough, measurer=one,
                progress=False, finalists=0)
    assert tuner.MIN_MEASURED <= len(one.calls) <= max(tuner.MIN_MEASURED, len(space) // 5)


def test_a_budget_stops_with_the_best_so_far(tmp_path):
    shape = (1, 128, 768, 768)
    records = Records(tmp_path / "r.sqlite")
    clock = {"now": 0.0}

    def slow(c):
        clock["now"] += 1.0  # each measurement takes a second of the fake clock
        return _time(c)
    fake = _fake(slow)
    import time as _t
    real = _t.monotonic
    try:
        tuner.time.monotonic = lambda: clock["now"]
        best = tune_matmul(shape, T, level=2, records=records, kernel=_passthrough, measurer=fake,
                           progress=False, deadline=20.0)  # no time left to re-time finalists
    finally:
        tuner.time.monotonic = real
    assert 20 <= len(fake.calls) < 20 + tuner.BATCH  # the batch under way when time ran out finishes
    measured = {c: _time(c) for c in fake.calls}
    assert best == min(measured, key=measured.get)


def test_an_interrupted_run_resumes(tmp_path):
    """Records are written as each result comes in: a run killed mid-batch loses nothing, and
    the rerun measures only what is left."""
    shape = (1, 64, 256, 128)
    records = Records(tmp_path / "r.sqlite")

    class Interrupt(Exception):
        pass
    seen = []

    def dies(functions, args, target, *, on_result=None, **kw):
        for i, c in enumerate(functions):
            if len(seen) == 11:
                raise Interrupt
            seen.append(c)
            on_result(i, Measurement(_time(c), None))
    with pytest.raises(Interrupt):
        tune_matmul(shape, T, level=2, records=records, kernel=_passthrough, measurer=dies, progress=False)
    assert len(records.results(matmul_workload(shape), T.key())) == 11
    rest = _fake(_time)
    tune_matmul(shape, T, level=2, records=records, kernel=_passthrough, measurer=rest, progress=False, finalists=0)
    assert not set(rest.calls) & set(seen)
    assert len(rest.calls) + 11 == len(candidates(shape, T))


def test_finalists_are_timed_again_and_keep_their_median(tmp_path):
    """A config that won by one lucky time loses it when the finalists are timed again."""
    shape = (1, 64, 256, 128)
    records = Records(tmp_path / "r.sqlite")
    space = candidates(shape, T)
    lucky = space[5]
    first = {"seen": set()}

    def times(c):
        if c == lucky and c not in first["seen"]:
            first["seen"].add(c)
            return 1e-6  # one lucky measurement
        return _time(c)
    fake = _fake(times)
    best = tune_matmul(shape, T, level=2, records=records, kernel=_passthrough, measurer=fake, progress=False)
    assert len(fake.calls) == len(space) + tuner.RETIME_ROUNDS * 3
    assert best != lucky and _time(best) == min(_time(c) for c in space)
    assert records.results(matmul_workload(shape), T.key())[config_key(lucky.to_dict())][0] == _time(lucky)


def test_budget_strings():
    assert budget.parse_budget("90s") == 90 and budget.parse_budget("2m") == 120
    assert budget.parse_budget("1.5h") == 5400 and budget.parse_budget(30) == 30
    assert budget.parse_budget(None) is None
    for bad in ("soon", "-3m", 0, "2 minutes"):
        with pytest.raises(taskloom.errors.ArgumentError, match="budget"):
            budget.parse_budget(bad)
    with pytest.raises(taskloom.TaskloomError, match="budget"):
        x, y = input((4, 4), name="x"), input((4, 4), name="y")
        taskloom.compile(Graph([x, y], [ops.matmul(x, y)]), tune=1, budget="whenever")


def test_tuning_measures_once_and_records(tmp_path, monkeypatch):
    records = Records(tmp_path / "tune.sqlite")
    shape = (1, 24, 40, 32)
    best = tune_matmul(shape, T, level=1, records=records, progress=False)
    measured = records.results(matmul_workload(shape), T.key())
    assert tuner.MIN_MEASURED <= len(measured) <= len(candidates(shape, T))
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
    Records.default().add(tunable(match_contraction(group.task), T).workload, T.key(), chosen.to_dict(), 1e-6)
    c = taskloom.compile(graph)
    assert c.meta["kernels"][0]["schedule"].startswith(f"matmul_cpu: {chosen}")
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
    assert Records.default().best(tunable(match_contraction(group.task), T).workload, T.key()) is not None
    import torch
    ref = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(X), torch.from_numpy(W), padding=1)).numpy()
    out = c(X)
    np.testing.assert_allclose(out[0] if isinstance(out, (list, tuple)) else out, ref, rtol=1e-4, atol=1e-4)


def test_tuning_a_weight_times_the_kernel_that_takes_its_panels(tmp_path, monkeypatch):
    """A linear layer's B is a weight, packed at compile time: its search measures the kernel
    as the compiled graph runs it, reading the panels, whose shape follows each config, and
    records it under a key of its own (its best config differs from a kernel packing B)."""
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path))
    seen = []
    real = tuner.measure

    def spy(fns, args, target, **kw):
        seen.append((fns, args, kw.get("args_each")))
        return real(fns, args, target, **kw)
    monkeypatch.setattr(tuner, "measure", spy)
    rng = np.random.default_rng(4)
    A, W = rng.standard_normal((20, 36), dtype=np.float32), rng.standard_normal((48, 36), dtype=np.float32)
    x = input((20, 36), name="x")
    graph = Graph([x], [ops.relu(ops.linear(x, taskloom.asarray(W)))])
    c = taskloom.compile(graph, tune=1)
    fns, args, each = seen[0]
    assert args == [] and len(each) == len(fns)
    for fn, specs in zip(fns, each):
        assert fn.attr("prepacked_b") == 1
        nr = specs[1][0][3]
        assert specs == [((720,), "float32"), ((1, -(-48 // nr), 36, nr), "float32"), ((960,), "float32")]
    (group,) = fuse_graph(optimize(graph))
    con = match_contraction(group.task)
    key = tunable(con, T, prepacked_b=1).workload
    assert key == tunable(con, T).workload + "/prepacked"
    assert Records.default().best(key, T.key()) is not None
    out = c(A)
    np.testing.assert_allclose(out[0] if isinstance(out, (list, tuple)) else out, np.maximum(A @ W.T, 0),
                               rtol=1e-4, atol=1e-4)


def test_imported_records_rank_a_task_before_it_is_measured(tmp_path, monkeypatch):
    """Records imported from another run of the same ISA train the ranker that orders a new
    task's first batch: the first configs measured are the learned model's, not the analytic
    order's."""
    pytest.importorskip("lightgbm")
    from pathlib import Path
    from taskloom.tune import cost_model
    records = Records(tmp_path / "r.sqlite")
    records.import_file(Path(__file__).parent / "data" / "records.jsonl.gz")
    (key,) = {r.target for r in records.records()}
    recorded = taskloom.target.CpuTarget("recorded", 2, frozenset(key.split("-")[1:]), 48 * 1024,
                                         2 * 1024 * 1024, 480 * 1024 * 1024)
    seen = []
    real = cost_model.training_set

    def spy(*a, **k):
        data = real(*a, **k)
        seen.append(len(data.groups))
        return data
    monkeypatch.setattr(cost_model, "training_set", spy)
    fake = _fake(_time)
    shape = (1, 96, 512, 640)
    tune_matmul(shape, recorded, level=1, records=records, kernel=_passthrough, measurer=fake, progress=False,
                finalists=0)
    assert seen[0] == 4  # the four shipped tasks, before this one has a record
    analytic = candidates(shape, recorded)[:tuner.BATCH]
    assert fake.calls[:tuner.BATCH] != analytic
