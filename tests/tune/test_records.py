"""Tuning records: adding, replacing, the best config, sharing one file between processes."""
import json
import multiprocessing
import sqlite3

import pytest

from taskloom.errors import TaskloomError
from taskloom.tune import Records, config_key

CPU = "x86_64-avx2"


@pytest.fixture
def records(tmp_path):
    return Records(tmp_path / "tune.sqlite")


def test_config_key_is_canonical_json():
    assert config_key({"b": 2, "a": [1, 2]}) == config_key({"a": (1, 2), "b": 2}) == '{"a":[1,2],"b":2}'
    with pytest.raises(TaskloomError, match="JSON"):
        config_key({"a": object()})
    with pytest.raises(TaskloomError, match="dict"):
        config_key([1, 2])


def test_add_best_and_results(records):
    assert records.best("matmul", CPU) is None and records.results("matmul", CPU) == {}
    records.add("matmul", CPU, {"mr": 4, "kc": 256}, 2e-3)
    records.add("matmul", CPU, {"mr": 8, "kc": 256}, 1e-3)
    records.add("matmul", CPU, {"mr": 6, "kc": 128}, None, "timeout after 10s")
    records.add("matmul", "x86_64-other", {"mr": 2}, 1e-6)
    records.add("conv", CPU, {"mr": 2}, 1e-6)
    assert records.best("matmul", CPU) == {"mr": 8, "kc": 256}
    assert records.results("matmul", CPU) == {
        config_key({"mr": 4, "kc": 256}): (2e-3, None),
        config_key({"mr": 8, "kc": 256}): (1e-3, None),
        config_key({"mr": 6, "kc": 128}): (None, "timeout after 10s"),
    }


def test_results_of_several_workloads_at_once(records):
    records.add("matmul", CPU, {"mr": 4}, 2e-3)
    records.add("matmul", "x86_64-other", {"mr": 2}, 1e-6)
    records.add("conv", CPU, {"mr": 6}, None, "timeout after 10s")
    assert records.results_of(["matmul", "conv", "absent", "matmul"], CPU) == {
        "matmul": records.results("matmul", CPU), "conv": records.results("conv", CPU), "absent": {}}
    assert records.results_of([], CPU) == {}


def test_adding_again_replaces(records):
    records.add("matmul", CPU, {"mr": 8}, 1e-3)
    records.add("matmul", CPU, {"mr": 4}, 2e-3)
    records.add("matmul", CPU, {"mr": 8}, None, "crashed: SIGSEGV")
    assert records.results("matmul", CPU)[config_key({"mr": 8})] == (None, "crashed: SIGSEGV")
    assert records.best("matmul", CPU) == {"mr": 4}
    records.add("matmul", CPU, {"mr": 8}, 5e-4)
    assert records.best("matmul", CPU) == {"mr": 8} and len(records.results("matmul", CPU)) == 2


def test_best_ignores_failed_records(records):
    records.add("matmul", CPU, {"mr": 1}, None, "build: gcc failed")
    records.add("matmul", CPU, {"mr": 2}, 0.0, "crashed: SIGSEGV")  # an error wins over a time
    assert records.best("matmul", CPU) is None
    records.add("matmul", CPU, {"mr": 3}, 4e-3)
    assert records.best("matmul", CPU) == {"mr": 3}


def test_rejects_bad_values(records):
    for seconds in (-1.0, float("nan"), float("inf"), "1", True):
        with pytest.raises(TaskloomError, match="seconds"):
            records.add("matmul", CPU, {"mr": 1}, seconds)
    with pytest.raises(TaskloomError, match="workload"):
        records.add("", CPU, {"mr": 1}, 1.0)
    with pytest.raises(TaskloomError, match="JSON"):
        records.add("matmul", CPU, {"f": float("nan")}, 1.0)


def test_two_objects_on_one_file_see_each_others_writes(tmp_path):
    a, b = Records(tmp_path / "shared.sqlite"), Records(str(tmp_path / "shared.sqlite"))
    a.add("matmul", CPU, {"mr": 4}, 2e-3)
    assert b.best("matmul", CPU) == {"mr": 4}
    b.add("matmul", CPU, {"mr": 8}, 1e-3)
    assert a.best("matmul", CPU) == {"mr": 8} and len(a.results("matmul", CPU)) == 2


def _add_many(path, worker):
    records = Records(path)
    for i in range(20):
        records.add("matmul", CPU, {"worker": worker, "i": i}, 1e-3 + worker * 1e-4 + i * 1e-6)


def test_several_processes_write_at_once(tmp_path):
    path = tmp_path / "shared.sqlite"
    Records(path)
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_add_many, args=(path, w)) for w in range(3)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(30)
        assert p.exitcode == 0
    records = Records(path)
    assert len(records.results("matmul", CPU)) == 60
    assert records.best("matmul", CPU) == {"worker": 0, "i": 0}


def test_file_layout_and_wal_mode(records):
    records.add("matmul", CPU, {"b": 1, "a": 2}, 1.5)
    with sqlite3.connect(records.path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        (workload, target, config, seconds, error, created), = db.execute("SELECT * FROM records").fetchall()
    assert (workload, target, seconds, error) == ("matmul", CPU, 1.5, None) and created > 0
    assert config == '{"a":2,"b":1}' and json.loads(config) == {"a": 2, "b": 1}


def test_default_path_follows_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "cache"))
    records = Records.default()
    assert records.path == tmp_path / "cache" / "tune.sqlite" and records.path.is_file()
    assert Records().path == records.path
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "other"))
    assert Records.default().path == tmp_path / "other" / "tune.sqlite"
