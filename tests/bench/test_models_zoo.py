"""``bench/models_zoo.py``: the table and the JSON record of fake rows, the relative
difference, the fallback grouping, and the row of a model that fails to build."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "models_zoo.py"


@pytest.fixture(scope="module")
def zoo():
    spec = importlib.util.spec_from_file_location("models_zoo", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(model, **kw):
    row = {"model": model, "type": model, "params": 1_234_567, "compile_s": 3.25, "fallbacks": {},
           "fallback_nodes": 0, "max_rel_diff": 2e-7, "eager_ms": 4.0, "taskloom_ms": 2.0,
           "eager_round_ms": [4.0], "taskloom_round_ms": [2.0], "speedup": 2.0, "error": None}
    return {**row, **kw}


def test_table_rows_geomean_and_failures(zoo):
    rows = [_row("bert"),
            _row("swin", fallbacks={"aten.as_strided_.default": 2, "aten.cumsum.default": 1}, fallback_nodes=3,
                 speedup=0.5, eager_ms=1.0),
            _row("whisper-encoder", params=None, compile_s=None, fallbacks={}, fallback_nodes=None,
                 max_rel_diff=None, eager_ms=None, taskloom_ms=None, speedup=None, error="build: ValueError: x")]
    text = zoo.table(rows)
    lines = text.splitlines()
    assert lines[0].startswith("| model | params | compile s | fell back (ops) |")
    assert lines[2] == "| bert | 1.23M | 3.2 | 0 | 2.0e-07 | 4.00 | 2.00 | 2.00x |"
    assert "| 3 (as_strided_ x2, cumsum) |" in lines[3] and lines[3].endswith("| 0.50x |")
    assert lines[4] == "| whisper-encoder | - | - | - | - | - | - | - |"
    assert "Geometric mean speedup (eager ms / taskloom ms): 1.00x over 2 models" in text
    assert "- whisper-encoder: build: ValueError: x" in text


def test_record_is_json(zoo, tmp_path):
    from taskloom.bench.timing import write_json
    rec = zoo.record([_row("bert")], {"rounds": 5}, "python bench/models_zoo.py --models bert", with_host=False)
    path = tmp_path / "zoo.json"
    write_json(str(path), rec)
    back = json.loads(path.read_text())
    assert back["geomean_speedup"] == pytest.approx(2.0) and back["rows"][0]["model"] == "bert"


def test_rel_diff_and_fallback_counts(zoo):
    want = torch.tensor([[1.0, -4.0], [2.0, 0.5]])
    assert zoo.max_rel_diff(want + torch.tensor([[0.0, 0.4], [0.0, 0.0]]), want) == pytest.approx(0.1)
    assert zoo.max_rel_diff(torch.zeros(3), torch.zeros(3)) == 0.0
    assert zoo.max_rel_diff(torch.zeros(3), torch.zeros(2)) == float("inf")

    class F:
        def __init__(self, op):
            self.op = op

    counts = zoo.fallback_counts([F("aten.cumsum.default"), F("graph"), F("aten.cumsum.default")])
    assert counts == {"aten.cumsum.default": 2, "graph": 1}


def test_a_model_that_fails_to_build_is_a_row(zoo, monkeypatch):
    monkeypatch.setitem(zoo.FAMILIES, "broken", ("no-such-model-type", {}, "text", ""))
    row = zoo.run_model("broken", seq=8, rounds=1, repeats=1)
    assert row["error"].startswith("build: ") and row["speedup"] is None
    assert zoo.fallback_text(row) == "-"


def test_every_family_is_a_known_model_type(zoo):
    transformers = pytest.importorskip("transformers")
    for name, (model_type, _, kind, part) in zoo.FAMILIES.items():
        assert model_type in transformers.CONFIG_MAPPING, name
        assert kind in ("text", "image", "audio", "mel") and part in ("", "encoder")


def test_the_onnx_runtime_table(zoo):
    rows = [_row("bert", ort_ms=3.0, ort_rel_diff=1e-7, vs_ort=1.5, onnx_ms=1.5, onnx_rel_diff=3e-7, onnx_vs_ort=2.0),
            _row("vit", ort_ms=1.0, ort_rel_diff=2e-6, vs_ort=0.5, onnx_error="OnnxError: op"),
            _row("swin", ort_ms=None, vs_ort=None, ort_error="ExportError: no")]
    text = zoo.table(rows)
    assert "| bert | 3.00 | 1.0e-07 | 1.50x | 1.50 | 3.0e-07 | 2.00x |" in text
    assert "| vit | 1.00 | 2.0e-06 | 0.50x | - | - | - |" in text
    assert "Geometric mean against ONNX Runtime: 0.87x over 2 models" in text
    assert "Geometric mean of the ONNX path against ONNX Runtime: 2.00x over 1 models" in text
    assert "- swin: ExportError: no" in text and "- vit: OnnxError: op" in text
    assert "ONNX Runtime" not in zoo.table([_row("bert")])  # no comparison asked, no table
