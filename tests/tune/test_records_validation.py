"""Tuning records hold only configs their template can build: import refuses others with
their line, ``add`` refuses them, and a bad record already in a database is skipped with a
warning, so a compile falls back to the other records or the analytic model."""
import json
import sqlite3
import time

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.cli import main
from taskloom.compiler.passes import optimize
from taskloom.errors import LoadError, TaskloomError
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.schedule.contraction import match_contraction
from taskloom.schedule.cpu import tunable
from taskloom.target import host_target
from taskloom.tune.records import EXPORT_FORMAT, RecordWarning, Records, config_problem
from taskloom.tune.tuner import recorded_config

AVX2 = "x86_64-sse4_2-avx-avx2-fma"
AVX512 = "x86_64-sse4_2-avx-avx2-fma-avx512f-avx512bw-avx512vl-avx512dq"
W = "matmul_cpu/1x8x8x8"
GOOD = {"mr": 4, "nv": 2, "kc": 64, "mc": 64, "nc": 1024, "pm": 1, "pn": 1}


def _bad(**changes):
    return {**GOOD, **changes}


def _insert(records, workload, target, config, seconds):
    """A record written behind the API's back (an older taskloom, a hand edit)."""
    with sqlite3.connect(records.path) as db:
        db.execute("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?)",
                   (workload, target, json.dumps(config, sort_keys=True, separators=(",", ":")), seconds, None,
                    time.time()))


def _export_file(path, *records):
    header = {"format": EXPORT_FORMAT, "version": 1, "exported": "2026-01-01T00:00:00+00:00", "count": len(records)}
    lines = [header] + [{"workload": w, "target": t, "config": c, "seconds": 1e-3, "error": None, "created": 1.7e9}
                        for w, t, c in records]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("config, message", [
    (_bad(mr=0), "mr=0: every field of a matmul config must be a positive integer"),
    (_bad(kc=-16), "kc=-16"),
    (_bad(pm=True), "pm=True"),
    (_bad(nc=1024.0), "nc=1024.0"),
    (_bad(mc="64"), "mc='64'"),
    ({"mr": 4, "nv": 2}, "missing kc, mc, nc, pm, pn"),
    (_bad(extra=1), "unknown extra"),
    (_bad(mr=8, nv=4), "8x4-vector register tile needs 37 vector registers; target x86_64-sse4_2-avx-avx2-fma has 16"),
])
def test_config_problem_names_the_field(config, message):
    assert message in config_problem(W, AVX2, config)


def test_valid_configs_and_unchecked_templates_pass():
    assert config_problem(W, AVX2, GOOD) is None
    assert config_problem(W + "/packcopy+copy/abc/prepacked", AVX512, _bad(mr=8, nv=3)) is None
    assert config_problem("conv2d_cpu/1x3x8x8", AVX2, {"anything": 0}) is None
    assert config_problem(W, "riscv-v", GOOD) is None  # registers unknown: the fields are still checked
    assert "mr=0" in config_problem(W, "riscv-v", _bad(mr=0))


def test_import_refuses_a_bad_config_with_its_line(tmp_path):
    path = _export_file(tmp_path / "in.jsonl", (W, AVX2, GOOD), (W, AVX2, _bad(kc=32)), (W, AVX2, _bad(mr=0)))
    here = Records(tmp_path / "here.sqlite")
    with pytest.raises(LoadError, match=r"in\.jsonl:4: 'config' .* is not a config of matmul_cpu that taskloom "
                                        r"can build: mr=0.*nothing was imported"):
        here.import_file(path)
    assert here.count() == 0


def test_cli_import_refuses_a_bad_config(tmp_path, capsys):
    path = _export_file(tmp_path / "in.jsonl", (W, AVX2, _bad(mr=0)))
    assert main(["records", "import", str(path), "--records", str(tmp_path / "db.sqlite")]) == 1
    err = capsys.readouterr().err
    assert "in.jsonl:2:" in err and "mr=0" in err
    assert Records(tmp_path / "db.sqlite").count() == 0


def test_add_refuses_a_bad_config(tmp_path):
    with pytest.raises(TaskloomError, match="cannot record config .*mr=0"):
        Records(tmp_path / "db.sqlite").add(W, AVX2, _bad(mr=0), 1e-3)


def test_a_bad_record_in_the_database_is_skipped_with_a_warning(tmp_path):
    records = Records(tmp_path / "db.sqlite")
    records.add(W, AVX2, GOOD, 2e-3)
    _insert(records, W, AVX2, _bad(mr=0), 1e-3)       # faster, but not buildable
    _insert(records, W, AVX2, {"mr": 4}, 5e-4)
    with pytest.warns(RecordWarning) as caught:
        assert records.best(W, AVX2) == GOOD
    assert ["missing nv" in str(w.message) for w in caught] == [True, False]
    assert "mr=0: every field" in str(caught[1].message) and str(records.path) in str(caught[1].message)
    with pytest.warns(RecordWarning):
        assert records.best_seconds(W, AVX2) == 2e-3
    with pytest.warns(RecordWarning):
        assert list(records.results(W, AVX2).values()) == [(2e-3, None)]
    with pytest.warns(RecordWarning):
        assert [r.config for r in records.records()] == [GOOD]
    with pytest.warns(RecordWarning):
        assert records.export(tmp_path / "out.jsonl") == 1  # the file imports elsewhere
    assert Records(tmp_path / "fresh.sqlite").import_file(tmp_path / "out.jsonl") == (1, 0)


def test_only_bad_records_give_no_recorded_config(tmp_path):
    records = Records(tmp_path / "db.sqlite")
    target = host_target()
    shape = (1, 8, 8, 8)
    _insert(records, W, target.key(), _bad(mr=0), 1e-3)
    with pytest.warns(RecordWarning):
        assert recorded_config(shape, target, records) is None  # the analytic model decides


def test_a_compile_survives_a_bad_record_of_its_workload(tmp_path, monkeypatch):
    """The symptom: ``mr=0`` recorded for a matmul made every compile of it divide by zero."""
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path))
    target = host_target()
    x, y = input((6, 12), name="x"), input((12, 10), name="y")
    graph = Graph([x, y], [ops.matmul(x, y)])
    (group,) = fuse_graph(optimize(graph))
    workload = tunable(match_contraction(group.task), target).workload
    _insert(Records.default(), workload, target.key(), _bad(mr=0), 1e-9)
    with pytest.warns(RecordWarning, match="mr=0"):
        compiled = taskloom.compile(graph)
    a = np.arange(72, dtype=np.float32).reshape(6, 12) / 10
    b = np.ones((12, 10), np.float32)
    out = compiled(a, b)
    np.testing.assert_allclose(out[0] if isinstance(out, (list, tuple)) else out, a @ b, rtol=1e-5)
