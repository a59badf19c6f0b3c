"""``taskloom bench op``: tables, the JSON record, failing peers, usage errors."""
from __future__ import annotations

import argparse
import importlib.util
import json

import numpy as np
import pytest
import torch

from taskloom.bench import op as bench_op
from taskloom.cli import main

PEERS = ",".join(["numpy", "torch"] + (["ort"] if importlib.util.find_spec("onnxruntime")
                                        and importlib.util.find_spec("onnx") else []))
ROW_KEYS = {"system", "median_ms", "gflops", "max_abs_diff", "error", "round_ms"}


def bench(tmp_path, *argv: str, rounds: int = 1) -> dict:
    path = tmp_path / "out" / "bench.json"
    assert main(["bench", "op", *argv, "--repeats", "3", "--rounds", str(rounds), "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_matmul_json_record(tmp_path, capsys):
    record = bench(tmp_path, "matmul", "--shape", "17,9,5", "--compare", PEERS, rounds=2)
    out = capsys.readouterr().out
    assert "GFLOP/s" in out and "taskloom compile:" in out and "median of 2 rounds of 3 runs" in out
    assert record["op"] == "matmul" and record["shape"] == [17, 9, 5]
    assert record["command"] == (f"taskloom bench op matmul --shape 17,9,5 --compare {PEERS} "
                                 f"--repeats 3 --rounds 2 --json {tmp_path / 'out' / 'bench.json'}")
    assert record["args"] == {"batch": None, "compare": PEERS.split(","), "tune": 0, "repeats": 3, "rounds": 2,
                              "target": None}
    assert record["flop"] == 2 * 17 * 9 * 5 and record["dims"] == {"B": 1, "M": 17, "N": 9, "K": 5}
    assert [r["system"] for r in record["rows"]] == ["taskloom", *PEERS.split(",")]
    for r in record["rows"]:
        assert set(r) == ROW_KEYS
        assert r["error"] is None, r
        assert r["median_ms"] > 0 and r["gflops"] == pytest.approx(record["flop"] / r["median_ms"] / 1e6)
        assert r["max_abs_diff"] < 1e-4
        assert len(r["round_ms"]) == 2 and min(r["round_ms"]) <= r["median_ms"] <= max(r["round_ms"])
    assert record["taskloom"]["compile_s"] > 0 and record["taskloom"]["tune"] == 0
    assert record["results"] == [{k: record[k] for k in ("shape", "dims", "flop", "rows", "taskloom")}]
    assert {"cpu", "cores", "isa", "l1d", "l2", "l3", "platform"} <= set(record["machine"])
    assert {"taskloom", "numpy", "torch"} <= set(record["versions"])


def test_several_shapes_batched(tmp_path):
    record = bench(tmp_path, "matmul", "--shape", "17,9,5", "--shape", "4,3,2", "--batch", "2", "--compare", "numpy")
    assert "rows" not in record  # several shapes: only the list
    assert [r["shape"] for r in record["results"]] == [[17, 9, 5], [4, 3, 2]]
    second = record["results"][1]
    assert second["flop"] == 2 * 2 * 4 * 3 * 2
    assert [r["system"] for r in second["rows"]] == ["taskloom", "numpy"]
    assert all(r["max_abs_diff"] < 1e-4 for res in record["results"] for r in res["rows"])


def test_conv2d_strided_grouped(tmp_path):
    peers = PEERS.replace("numpy,", "")
    record = bench(tmp_path, "conv2d", "--shape", "2,4,9,7,6,3,3", "--stride", "2", "--pad", "1",
                   "--groups", "2", "--compare", peers)
    assert record["dims"]["OH"] == 5 and record["dims"]["OW"] == 4
    assert record["flop"] == 2 * 2 * 6 * 5 * 4 * 2 * 3 * 3
    assert record["args"]["stride"] == 2 and record["args"]["groups"] == 2
    assert [r["system"] for r in record["rows"]] == ["taskloom", *peers.split(",")]
    assert all(r["error"] is None and r["max_abs_diff"] < 1e-4 for r in record["rows"])


def test_conv2d_nhwc_layout_is_checked_in_nchw(tmp_path):
    record = bench(tmp_path, "conv2d", "--shape", "1,16,8,8,32,3,3", "--pad", "1", "--layout", "NHWC",
                   "--compare", "torch")
    assert record["args"]["layout"] == "NHWC"
    assert all(r["error"] is None and r["max_abs_diff"] < 1e-3 for r in record["rows"])


def test_conv2d_reference_matches_torch():
    args = argparse.Namespace(stride=2, pad=1, groups=3, layout="NCHW")
    problem = bench_op.Conv2dProblem((2, 6, 11, 8, 9, 3, 2), args)
    x, w = (torch.from_numpy(problem.arrays[k]).double() for k in ("x", "w"))
    want = torch.nn.functional.conv2d(x, w, stride=2, padding=1, groups=3).numpy()
    np.testing.assert_allclose(problem.reference(), want, rtol=1e-12, atol=1e-12)


def test_missing_and_failing_peers_fill_error(tmp_path, monkeypatch):
    monkeypatch.setitem(bench_op.PEER_MODULES, "ort", ("taskloom_no_such_module",))

    def broken(self, torch):
        raise RuntimeError("boom")
    monkeypatch.setattr(bench_op.MatmulProblem, "torch_call", broken)
    record = bench(tmp_path, "matmul", "--shape", "5,4,3", "--compare", "torch,ort,numpy")
    rows = {r["system"]: r for r in record["rows"]}
    assert rows["ort"]["error"] == "not installed" and rows["ort"]["median_ms"] is None
    assert rows["torch"]["error"] == "RuntimeError: boom" and rows["torch"]["gflops"] is None
    assert rows["numpy"]["error"] is None and rows["taskloom"]["error"] is None


@pytest.mark.parametrize("argv, message", [
    (["matmul", "--shape", "17,9"], "argument --shape: expected M,N,K"),
    (["matmul", "--shape", "17,x,5"], "argument --shape: expected M,N,K"),
    (["matmul", "--shape=0,4,4"], "argument --shape: expected M,N,K"),
    (["conv2d", "--shape", "1,3,8,8,4,3"], "argument --shape: expected N,C,H,W,OC,KH,KW"),
    (["matmul", "--shape", "4,4,4", "--compare", "numpy,tvm"], "unknown system 'tvm'"),
    (["conv2d", "--shape", "1,3,8,8,4,3,3", "--compare", "numpy"], "numpy has no conv2d"),
    (["conv2d", "--shape", "1,3,8,8,4,3,3", "--groups", "2"], "--groups 2 must divide C=3"),
    (["conv2d", "--shape", "1,3,2,2,4,3,3"], "does not fit"),
    (["matmul", "--shape", "4,4,4", "--target", "gpu"], "argument --target"),
    (["matmul", "--shape", "4,4,4", "--repeats", "0"], "argument --repeats"),
])
def test_usage_errors_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(["bench", "op", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
