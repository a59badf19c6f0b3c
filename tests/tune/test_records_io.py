"""Tuning records out and in: export, import, the Record view, and ``taskloom records``."""
import gzip
import json
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from taskloom.cli import main
from taskloom.errors import LoadError, TaskloomError
from taskloom.tune.records import EXPORT_FORMAT, RECORD_FIELDS, Record, Records
from taskloom.tune.records_cli import short_target

AVX2 = "x86_64-sse4_2-avx-avx2-fma"
AVX512 = "x86_64-sse4_2-avx-avx2-fma-avx512f-avx512bw-avx512vl-avx512dq-avx512_bf16"


def _cfg(mr, nv, kc):
    """A whole matmul config (records of matmul_cpu workloads are checked against its fields)."""
    return {"mr": mr, "nv": nv, "kc": kc, "mc": 64, "nc": 1024, "pm": 1, "pn": 1}


@pytest.fixture
def source(tmp_path):
    """A database with two matmuls and a conv on two targets, one failure among them."""
    records = Records(tmp_path / "source.sqlite")
    records.add("matmul_cpu/1x64x64x64", AVX2, _cfg(4, 2, 256), 2e-3)
    records.add("matmul_cpu/1x64x64x64", AVX2, _cfg(6, 2, 256), 1e-3)
    records.add("matmul_cpu/1x64x64x64", AVX2, _cfg(5, 2, 256), None, "build: gcc failed")
    records.add("matmul_cpu/1x64x64x64", AVX512, _cfg(4, 4, 128), 5e-4)
    records.add("matmul_cpu/2x32x32x32", AVX2, _cfg(2, 1, 64), 3e-5)
    records.add("conv2d_cpu/1x3x32x32", AVX2, {"mr": 4, "nv": 2, "kc": 27}, 7e-4)
    return records


def _rows(records):
    """Everything a database holds, created time included, in a comparable form."""
    with sqlite3.connect(records.path) as db:
        return sorted(db.execute("SELECT workload, target, config, seconds, error, created FROM records"))


def _lines(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f]


def _write(path, header, *records):
    path.write_text("".join(json.dumps(obj) + "\n" for obj in (header, *records)))
    return path


def _header(count, **extra):
    return {"format": EXPORT_FORMAT, "version": 1, "exported": "2026-01-01T00:00:00+00:00",
            "count": count, **extra}


def _record(**changes):
    return {"workload": "conv2d_cpu/1x8x8x8", "target": AVX2, "config": {"mr": 1}, "seconds": 1e-3,
            "error": None, "created": 1.7e9, **changes}


# --- the Record view, counts and workloads ---------------------------------------------

def test_records_are_ordered_by_created_and_filtered(source):
    all_records = source.records()
    assert len(all_records) == source.count() == 6
    assert [r.created for r in all_records] == sorted(r.created for r in all_records)
    first = all_records[0]
    assert first == Record("matmul_cpu/1x64x64x64", AVX2, _cfg(4, 2, 256), 2e-3, None,
                           first.created)
    assert first.ok and not all_records[2].ok and all_records[2].error == "build: gcc failed"
    with pytest.raises(TypeError):
        hash(first)
    assert {r.workload for r in source.records("matmul_cpu/*")} == {"matmul_cpu/1x64x64x64",
                                                                      "matmul_cpu/2x32x32x32"}
    assert len(source.records("matmul_cpu/*", AVX2)) == 4 and source.count("matmul_cpu/*", AVX2) == 4
    assert len(source.records("*")) == 6 and source.records("matmul") == []
    assert [r.target for r in source.records(target=AVX512)] == [AVX512]


def test_prefix_filter_takes_underscore_and_percent_literally(tmp_path):
    records = Records(tmp_path / "db.sqlite")
    records.add("a_b/1", AVX2, {}, 1.0)
    records.add("axb/1", AVX2, {}, 1.0)
    records.add("a%b/1", AVX2, {}, 1.0)
    assert [r.workload for r in records.records("a_b*")] == ["a_b/1"]
    assert [r.workload for r in records.records("a%*")] == ["a%b/1"]


def test_workloads_and_best_seconds(source):
    assert source.workloads() == [("conv2d_cpu/1x3x32x32", AVX2, 1), ("matmul_cpu/1x64x64x64", AVX2, 3),
                                  ("matmul_cpu/1x64x64x64", AVX512, 1), ("matmul_cpu/2x32x32x32", AVX2, 1)]
    assert source.workloads(AVX512) == [("matmul_cpu/1x64x64x64", AVX512, 1)]
    assert source.best_seconds("matmul_cpu/1x64x64x64", AVX2) == 1e-3
    assert source.best_seconds("matmul_cpu/1x64x64x64", "other") is None
    with pytest.raises(TaskloomError, match="workload"):
        source.records("")


# --- export and import ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["out.jsonl", "out.jsonl.gz"])
def test_round_trip_into_a_fresh_database(source, tmp_path, name):
    path = tmp_path / name
    assert source.export(path) == 6
    if name.endswith(".gz"):
        assert path.read_bytes()[:2] == b"\x1f\x8b"
    else:
        assert path.read_text().startswith('{"format":"taskloom-records"')
    header, *lines = _lines(path)
    assert header["format"] == EXPORT_FORMAT and header["version"] == 1 and header["count"] == 6
    assert isinstance(header["exported"], str) and "T" in header["exported"]
    assert all(list(line) == list(RECORD_FIELDS) and isinstance(line["config"], dict) for line in lines)
    fresh = Records(tmp_path / "fresh.sqlite")
    assert fresh.import_file(path) == (6, 0)
    assert _rows(fresh) == _rows(source)
    assert fresh.records() == source.records()
    assert fresh.best("matmul_cpu/1x64x64x64", AVX2) == _cfg(6, 2, 256)
    assert fresh.import_file(path) == (0, 6) and _rows(fresh) == _rows(source)
    assert not list(tmp_path.glob(".*.tmp"))


def test_gzip_is_told_by_content_not_name(source, tmp_path):
    source.export(tmp_path / "a.jsonl.gz")
    (tmp_path / "renamed.jsonl").write_bytes((tmp_path / "a.jsonl.gz").read_bytes())
    assert Records(tmp_path / "fresh.sqlite").import_file(tmp_path / "renamed.jsonl") == (6, 0)


def test_export_filters_by_workload_prefix_and_target(source, tmp_path):
    assert source.export(tmp_path / "m.jsonl", workload="matmul_cpu/*") == 5
    assert {line["workload"] for line in _lines(tmp_path / "m.jsonl")[1:]} == {
        "matmul_cpu/1x64x64x64", "matmul_cpu/2x32x32x32"}
    assert source.export(tmp_path / "m2.jsonl", workload="matmul_cpu/*", target=AVX2) == 4
    assert source.export(tmp_path / "one.jsonl", workload="conv2d_cpu/1x3x32x32") == 1
    assert source.export(tmp_path / "none.jsonl", workload="nothing/*") == 0
    assert _lines(tmp_path / "none.jsonl")[0]["count"] == 0
    assert Records(tmp_path / "fresh.sqlite").import_file(tmp_path / "none.jsonl") == (0, 0)


def test_export_to_a_missing_folder_says_so(source, tmp_path):
    with pytest.raises(TaskloomError, match="cannot write the tuning records to .*nowhere"):
        source.export(tmp_path / "nowhere" / "out.jsonl")


def test_present_records_are_kept_unless_replace(source, tmp_path):
    path = tmp_path / "out.jsonl"
    source.export(path)
    here = Records(tmp_path / "here.sqlite")
    here.add("matmul_cpu/1x64x64x64", AVX2, _cfg(4, 2, 256), 9e-3)   # a success, kept
    here.add("matmul_cpu/1x64x64x64", AVX2, _cfg(6, 2, 256), None, "timeout")  # a failure
    here.add("matmul_cpu/1x64x64x64", AVX2, _cfg(5, 2, 256), 4e-3)  # imported one failed
    assert here.import_file(path) == (4, 2)
    results = {json.loads(k)["mr"]: v for k, v in here.results("matmul_cpu/1x64x64x64", AVX2).items()}
    assert results == {4: (9e-3, None), 6: (1e-3, None), 5: (4e-3, None)}
    assert here.count() == 6

    assert here.import_file(path, replace=True) == (6, 0)
    assert _rows(here) == _rows(source)


def test_a_failure_never_replaces_a_failure_without_replace(tmp_path):
    here = Records(tmp_path / "here.sqlite")
    here.add("w", AVX2, {"mr": 1}, None, "crashed here")
    path = _write(tmp_path / "in.jsonl", _header(1), _record(workload="w", config={"mr": 1}, seconds=None,
                                                                 error="timeout there"))
    assert here.import_file(path) == (0, 1)
    assert here.results("w", AVX2) == {'{"mr":1}': (None, "crashed here")}
    assert here.import_file(path, replace=True) == (1, 0)
    assert here.results("w", AVX2) == {'{"mr":1}': (None, "timeout there")}


def test_a_corrupt_line_changes_nothing_and_is_named(source, tmp_path):
    path = tmp_path / "out.jsonl"
    source.export(path)
    lines = path.read_text().splitlines(keepends=True)
    lines[4] = lines[4][: len(lines[4]) // 2] + "\n"
    path.write_text("".join(lines))
    here = Records(tmp_path / "here.sqlite")
    here.add("keep/me", AVX2, {"mr": 1}, 1.0)
    before = _rows(here)
    with pytest.raises(LoadError, match=r"out\.jsonl:5: not valid JSON .*nothing was imported"):
        here.import_file(path)
    assert _rows(here) == before


@pytest.mark.parametrize("change, message", [
    ({"seconds": -1.0}, "'seconds' must be a finite non-negative number or null, got -1.0"),
    ({"seconds": "fast"}, "'seconds' must be"),
    ({"seconds": True}, "'seconds' must be"),
    ({"error": 3}, "'error' must be a string or null"),
    ({"workload": ""}, "'workload' must be a non-empty string"),
    ({"target": None}, "'target' must be a non-empty string"),
    ({"config": [1, 2]}, "'config' must be a JSON object"),
    ({"created": "yesterday"}, "'created' must be a time"),
    ({"extra": 1}, "unknown extra: a record has exactly the fields workload, target, config"),
    ({"format": EXPORT_FORMAT}, "a second header"),
])
def test_bad_fields_are_named_with_their_line(tmp_path, change, message):
    path = _write(tmp_path / "in.jsonl", _header(3), _record(config={"i": 0}), _record(config={"i": 1}),
                  _record(**{"config": {"i": 2}, **change}))
    here = Records(tmp_path / "here.sqlite")
    with pytest.raises(LoadError) as info:
        here.import_file(path)
    assert f"in.jsonl:4: {message}" in str(info.value)
    assert here.count() == 0


def test_missing_fields_nan_and_non_objects(tmp_path):
    here = Records(tmp_path / "here.sqlite")
    record = _record()
    del record["created"]
    for body, message in [(json.dumps(record), "missing created"),
                          (json.dumps(_record()).replace("0.001", "NaN"), "NaN is not a JSON number"),
                          ("[1, 2]", "expected a JSON object, got list"),
                          ("\xff", "not valid JSON")]:
        path = tmp_path / "in.jsonl"
        path.write_text(json.dumps(_header(1)) + "\n\n" + body + "\n")
        with pytest.raises(LoadError, match=rf"in\.jsonl:3: .*{message}"):
            here.import_file(path)
    path.write_bytes(json.dumps(_header(1)).encode() + b"\n" + b'{"a": "\xff"}\n')
    with pytest.raises(LoadError, match=r"in\.jsonl:2: not UTF-8 text"):
        here.import_file(path)
    assert here.count() == 0


@pytest.mark.parametrize("header, message", [
    ({"workload": "w"}, "1: not a taskloom records export: the first line must be a header"),
    (_header(1, format="other"), "got format 'other'"),
    (_header(1, version=2), "format version 2 by a newer taskloom; this one reads version 1"),
    (_header(1, version="1"), "version must be a positive integer"),
    (_header(-1), "'count' must be a non-negative integer, got -1"),
    (_header(1, exported=5), "'exported' must be an ISO time string"),
    (_header(2), "the header says 2 records but the file holds 1"),
    (_header(0), "the header says 0 records but the file holds 1"),
])
def test_header_checks(tmp_path, header, message):
    path = _write(tmp_path / "in.jsonl", header, _record())
    here = Records(tmp_path / "here.sqlite")
    with pytest.raises(LoadError, match="in.jsonl") as info:
        here.import_file(path)
    assert message in str(info.value)
    assert here.count() == 0


def test_unreadable_files(tmp_path):
    here = Records(tmp_path / "here.sqlite")
    with pytest.raises(LoadError, match="no such file"):
        here.import_file(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(LoadError, match="empty.jsonl: the file is empty; .*header line"):
        here.import_file(tmp_path / "empty.jsonl")
    good = gzip.compress(json.dumps(_header(0)).encode() + b"\n")
    (tmp_path / "cut.jsonl.gz").write_bytes(good[:-6])
    with pytest.raises(LoadError, match="cut.jsonl.gz: a corrupt or truncated gzip file"):
        here.import_file(tmp_path / "cut.jsonl.gz")


_json_leaf = st.none() | st.booleans() | st.integers(-2**53, 2**53) \
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
_configs = st.dictionaries(st.text(max_size=6), st.recursive(
    _json_leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6), max_size=5)
_results = st.tuples(st.floats(min_value=0, max_value=1e3, allow_nan=False), st.none()) \
    | st.tuples(st.none() | st.floats(min_value=0, max_value=1.0), st.text(max_size=20))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["conv2d_cpu/a", "conv2d_cpu/b", "conv/c"]),  # configs unchecked
                          st.sampled_from([AVX2, AVX512]), _configs, _results), max_size=8),
       st.booleans())
def test_random_records_round_trip(entries, zipped):
    with tempfile.TemporaryDirectory() as folder:
        source, fresh = Records(Path(folder) / "a.sqlite"), Records(Path(folder) / "b.sqlite")
        for workload, target, config, (seconds, error) in entries:
            source.add(workload, target, config, seconds, error)
        path = Path(folder) / ("out.jsonl.gz" if zipped else "out.jsonl")
        n = source.export(path)
        assert n == source.count() and fresh.import_file(path) == (n, 0)
        assert _rows(fresh) == _rows(source)
        assert fresh.records() == source.records()


# --- the command line ----------------------------------------------------------------

def test_short_target():
    assert short_target(AVX2) == "x86_64-avx2"
    assert short_target(AVX512) == "x86_64-avx512+bf16"
    assert short_target("x86_64-sse4_2-avx") == "x86_64-sse4_2+avx"
    assert short_target("x86_64-avx2") == "x86_64-avx2" and short_target("cuda") == "cuda"


def test_cli_export_import_list(source, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out.jsonl.gz"
    assert main(["records", "export", str(out), "--workload", "matmul_cpu/*", "--target", "x86_64-avx2",
                 "--records", str(source.path)]) == 0
    assert capsys.readouterr().out == f"exported 4 records to {out}\n"

    default = Records.default()
    assert main(["records", "import", str(out)]) == 0
    assert capsys.readouterr().out == f"imported 4 records (0 already present) from {out} into {default.path}\n"
    assert default.count() == 4
    assert main(["records", "import", str(out)]) == 0
    assert "imported 0 records (4 already present)" in capsys.readouterr().out
    assert main(["records", "import", str(out), "--replace"]) == 0
    assert "imported 4 records (0 already present)" in capsys.readouterr().out

    assert main(["records", "list", "--records", str(source.path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["workload", "target", "records", "best"]
    assert lines[1].split() == ["conv2d_cpu/1x3x32x32", "x86_64-avx2", "1", "0.7", "ms"]
    assert lines[2].split() == ["matmul_cpu/1x64x64x64", "x86_64-avx2", "3", "1", "ms"]
    assert lines[3].split() == ["matmul_cpu/1x64x64x64", "x86_64-avx512+bf16", "1", "0.5", "ms"]
    assert lines[4].split() == ["matmul_cpu/2x32x32x32", "x86_64-avx2", "1", "0.03", "ms"]
    assert lines[5] == f"6 records of 4 workload(s) in {source.path}"
    assert main(["records", "list", "--target", AVX512, "--records", str(source.path)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_cli_list_marks_workloads_where_every_config_failed(tmp_path, capsys):
    db = Records(tmp_path / "db.sqlite")
    db.add("w", AVX2, {"mr": 1}, None, "crashed")
    assert main(["records", "list", "--records", str(db.path)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["w", "x86_64-avx2", "1", "failed"]
    empty = Records(tmp_path / "empty.sqlite")
    assert main(["records", "list", "--records", str(empty.path)]) == 0
    assert capsys.readouterr().out == f"no tuning records in {empty.path}\n"


def test_cli_errors_name_the_file(source, tmp_path, capsys):
    bad = _write(tmp_path / "bad.jsonl", _header(1), _record(seconds=-2))
    assert main(["records", "import", str(bad), "--records", str(tmp_path / "new.sqlite")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("taskloom: error: ") and "bad.jsonl:2: 'seconds' must be" in err
    assert Records(tmp_path / "new.sqlite").count() == 0

    assert main(["records", "list", "--records", str(tmp_path / "typo.sqlite")]) == 1
    assert "no tuning records at" in capsys.readouterr().err and not (tmp_path / "typo.sqlite").exists()

    assert main(["records", "export", str(tmp_path / "x.jsonl"), "--target", "x86_64-sse4_2",
                 "--records", str(source.path)]) == 1
    err = capsys.readouterr().err
    assert "no records for target 'x86_64-sse4_2'" in err and f"x86_64-avx2 ({AVX2})" in err

    assert main(["records", "export", str(tmp_path / "x.jsonl"), "--workload", "nothing/*",
                 "--records", str(source.path)]) == 1
    assert "no records of workload 'nothing/*'" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()
