"""``taskloom.bench.timing``: blocks, rounds, and a system that fails while timed."""
from __future__ import annotations

import pytest

from taskloom.bench import timing


@pytest.fixture(autouse=True)
def no_settling(monkeypatch):
    monkeypatch.setattr(timing, "SETTLE_S", 0.0)


def test_rounds_shift_the_order_and_keep_every_block():
    order: list[str] = []
    calls = {name: (lambda name=name: order.append(name)) for name in "abc"}
    times = timing.time_rounds(calls, repeats=2, rounds=3, warmup=1)
    # each block is 1 warm-up and 2 timed calls: the first call of every block shows the order
    assert order[::3] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(len(blocks) == 3 and all(len(b) == 2 and min(b) >= 0 for b in blocks) for blocks in times.values())


def test_a_system_failing_in_a_later_round_leaves_the_others_timed():
    count = {"n": 0}

    def flaky():
        count["n"] += 1
        if count["n"] > 3:
            raise RuntimeError("lost the device")
    times = timing.time_rounds({"flaky": flaky, "fine": lambda: None}, repeats=2, rounds=3, warmup=1)
    assert isinstance(times["flaky"], RuntimeError) and "lost the device" in str(times["flaky"])
    assert len(times["fine"]) == 3


def test_medians_take_every_run_of_every_round_and_raise_a_failure():
    assert timing.medians({"a": [[1.0, 9.0], [2.0, 3.0], [4.0]], "b": [[5.0]]}) == {"a": 3.0, "b": 5.0}
    with pytest.raises(RuntimeError, match="lost the device"):
        timing.medians({"a": [[1.0]], "b": RuntimeError("lost the device")})


def test_bench_row_of_a_system_failing_while_timed(monkeypatch):
    import argparse
    from taskloom.bench import op as bench_op
    from taskloom.target import host_target
    calls = {"n": 0}

    def numpy_call(self):
        def run():
            calls["n"] += 1
            if calls["n"] > 2:
                raise MemoryError("out of memory")
            return self.reference().astype("float32")
        return run
    monkeypatch.setattr(bench_op.MatmulProblem, "numpy_call", numpy_call)
    problem = bench_op.MatmulProblem((5, 4, 3), argparse.Namespace(batch=None))
    result = bench_op.bench_shape(problem, ("numpy",), host_target(), tune=0, repeats=2, rounds=2)
    rows = {r["system"]: r for r in result["rows"]}
    assert rows["numpy"]["error"] == "MemoryError: out of memory" and rows["numpy"]["median_ms"] is None
    assert rows["numpy"]["max_abs_diff"] < 1e-6  # it was checked before it failed
    assert rows["taskloom"]["error"] is None and len(rows["taskloom"]["round_ms"]) == 2
