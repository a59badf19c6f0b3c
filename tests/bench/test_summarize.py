"""``taskloom.bench.summarize``: the tables of ``bench op`` and ``bench model`` JSON files."""
from __future__ import annotations

import json

import pytest

from taskloom.bench import summarize


def op_file(tmp_path, name: str = "matmul.json") -> str:
    rows = lambda tl, ort: [{"system": "taskloom", "gflops": tl}, {"system": "ort", "gflops": ort}]  # noqa: E731
    doc = {"command": "taskloom bench op matmul --shape 4,4,4 --shape 8,8,8",
           "results": [{"shape": [4, 4, 4], "rows": rows(200.0, 100.0)},
                       {"shape": [8, 8, 8], "rows": rows(100.0, 200.0)},
                       {"shape": [9, 9, 9], "rows": rows(150.0, None)}]}  # ORT failed on this one
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def model_file(tmp_path, model: str, taskloom_ms: float, ort_ms: float | None) -> str:
    doc = {"model": model, "batch": 1, "rows": [
        {"system": "taskloom", "median_ms": taskloom_ms, "compile_s": 2.5, "error": None},
        {"system": "ort", "median_ms": ort_ms, "compile_s": None, "error": None if ort_ms else "InternalError: no"}]}
    path = tmp_path / f"{model}-b1.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_op_table_ratios_and_geometric_mean(tmp_path):
    lines = summarize.op_table(op_file(tmp_path)).splitlines()
    assert lines[0] == "### matmul.json"
    assert lines[2] == "`taskloom bench op matmul --shape 4,4,4 --shape 8,8,8`"
    assert lines[4] == "| shape | taskloom GFLOP/s | ort GFLOP/s | taskloom / ort |"
    assert lines[6:] == ["| 4,4,4 | 200.0 | 100.0 | 2.00x |",
                         "| 8,8,8 | 100.0 | 200.0 | 0.50x |",
                         "| 9,9,9 | 150.0 | error | — |",
                         "| **geometric mean** |  |  | **1.00x** |"]  # of 2x and 0.5x; the failed row is left out


def test_model_table_speedups_errors_and_compile_time(tmp_path):
    paths = [model_file(tmp_path, "resnet50", 10.0, 20.0), model_file(tmp_path, "gpt2", 40.0, None)]
    lines = summarize.model_table(paths).splitlines()
    assert lines[0] == "| model | batch | taskloom ms | ort ms | vs ort | taskloom compile s |"
    assert lines[2] == "| resnet50 | 1 | 10.0 | 20.0 | 2.00x | 2.5 |"
    assert lines[3] == "| gpt2 | 1 | 40.0 | error | - | 2.5 |"
    assert lines[4] == "| geomean | |  |  | 2.00x | |"
    assert lines[-2:] == ["Errors:", "- gpt2 batch 1, ort: InternalError: no"]


def test_command_line(tmp_path, capsys):
    path = op_file(tmp_path)
    assert summarize.main(["ops", path, path]) == 0
    assert capsys.readouterr().out.count("### matmul.json") == 2
    with pytest.raises(SystemExit):
        summarize.main(["ops", path, "--plot", str(tmp_path / "x.png")])


def test_models_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    paths = [model_file(tmp_path, "resnet50", 10.0, 20.0), model_file(tmp_path, "bert", 40.0, 30.0)]
    out = tmp_path / "all.png"
    assert summarize.main(["models", paths[0], "--plot", str(out), paths[1]]) == 0  # --plot between the files
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "| bert | 1 | 40.0 | 30.0 | 0.75x | 2.5 |" in capsys.readouterr().out
