"""``taskloom bench model``: the table, the JSON record, the profile, the plot, failing peers.
A tiny CNN stands in for the zoo's models, so these run in seconds."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from taskloom.bench import model as bench_model  # noqa: E402
from taskloom.cli import main  # noqa: E402

ROW_KEYS = {"system", "median_ms", "round_ms", "gflops", "max_abs_diff", "error", "compile_s", "note", "runs"}


def tiny(name: str, batch: int = 1, seq: int = 128, seed: int = 0):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))
    return net.eval(), (torch.randn(batch, 3, 12, 12),)


@pytest.fixture
def tiny_zoo(monkeypatch):
    monkeypatch.setattr(bench_model, "build", tiny)


def test_taskloom_alone_json_profile_and_phases(tiny_zoo, tmp_path, capsys):
    path = tmp_path / "out" / "r.json"
    assert main(["bench", "model", "mobilenet_v2", "--batch", "2", "--compare", "none", "--repeats", "3",
                 "--profile", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "taskloom speed-up" in out and "per-kernel profile" in out
    assert "conv2d" in next(line for line in out.splitlines() if "by anchor:" in line)
    record = json.loads(path.read_text())
    assert record["model"] == "mobilenet_v2" and record["batch"] == 2 and record["seq"] is None
    assert record["command"].startswith("taskloom bench model mobilenet_v2 --batch 2 --compare none")
    [row] = record["rows"]
    assert set(row) == ROW_KEYS and row["system"] == "taskloom" and row["error"] is None
    assert row["max_abs_diff"] < 1e-4 and row["median_ms"] > 0 and row["compile_s"] > 0
    assert record["flop"] == 2 * 2 * 8 * 12 * 12 * 27 + 2 * 2 * 8 * 10  # conv and linear multiply-adds
    t = record["taskloom"]
    assert list(t["phases"]) == list(bench_model.PHASES) and t["graphs"] == 1
    assert abs(sum(t["phases"].values()) - t["compile_s"]) < 1e-6 * max(t["compile_s"], 1)
    profile = record["profile"]
    assert len(profile) == t["kernels"] and abs(sum(k["share"] for k in profile) - 1) < 1e-9
    assert [k["median_ms"] for k in profile] == sorted((k["median_ms"] for k in profile), reverse=True)
    assert any("conv2d" in k["ops"] for k in profile)
    assert {"machine", "versions", "args"} <= set(record) and record["args"]["threads"] >= 1


def test_peers_are_compared_and_failures_reported(tiny_zoo, monkeypatch, tmp_path):
    from taskloom.bench import peers

    real = peers.prepare

    def prepare(system, model, inputs, **kwargs):
        if system == "tvm":
            raise RuntimeError("tvm broke")
        return real(system, model, inputs, **kwargs)
    monkeypatch.setattr(peers, "prepare", prepare)
    path = tmp_path / "r.json"
    assert main(["bench", "model", "resnet50", "--compare", "torch,tvm", "--repeats", "3", "--threads", "1",
                 "--json", str(path)]) == 0
    rows = {r["system"]: r for r in json.loads(path.read_text())["rows"]}
    assert list(rows) == ["taskloom", "torch", "tvm"]
    assert rows["torch"]["error"] is None and rows["torch"]["max_abs_diff"] < 1e-4
    assert rows["tvm"]["error"] == "RuntimeError: tvm broke" and rows["tvm"]["median_ms"] is None


def test_direct_adds_a_row_for_the_compiled_graph(tiny_zoo, tmp_path):
    path = tmp_path / "r.json"
    assert main(["bench", "model", "resnet50", "--compare", "none", "--repeats", "3", "--direct",
                 "--json", str(path)]) == 0
    record = json.loads(path.read_text())
    assert record["args"]["direct"] and record["command"].endswith("--direct --budget 300")
    assert "--rounds 3" in record["command"] and record["rounds"] == 3
    taskloom_row, direct = record["rows"]
    assert direct["system"] == "taskloom-direct" and direct["error"] is None
    assert direct["max_abs_diff"] < 1e-4 and direct["median_ms"] > 0 and "taskloom.compile" in direct["note"]


def test_plot_draws_a_png(tiny_zoo, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "plot.png"
    assert main(["bench", "model", "resnet50", "--compare", "torch", "--repeats", "3", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_usage_errors(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "model", "resnet18"])
    assert "invalid choice: 'resnet18'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "model", "bert", "--compare", "torch,xla"])
    assert "unknown system 'xla'" in capsys.readouterr().err


def test_a_failing_taskloom_compile_is_a_row_and_exit_status_1(tiny_zoo, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("no schedule")
    monkeypatch.setattr(bench_model.TaskloomRun, "__init__", broken)
    assert main(["bench", "model", "resnet50", "--compare", "none", "--repeats", "3"]) == 1
    assert "RuntimeError: no schedule" in capsys.readouterr().out


def test_a_slow_system_gets_fewer_runs_within_the_budget(tiny_zoo, monkeypatch, tmp_path):
    import time
    from taskloom.bench import peers

    def prepare(system, model, inputs, **kwargs):
        def run():
            time.sleep(0.2)
            return model(*inputs).detach().numpy()
        return peers.Prepared(run, 0.0, "sleepy")
    monkeypatch.setattr(peers, "prepare", prepare)
    path = tmp_path / "r.json"
    assert main(["bench", "model", "resnet50", "--compare", "ort", "--repeats", "30", "--budget", "2",
                 "--json", str(path)]) == 0
    rows = {r["system"]: r for r in json.loads(path.read_text())["rows"]}
    assert rows["taskloom"]["runs"] == 30
    assert bench_model.MIN_RUNS <= rows["ort"]["runs"] < 30 and rows["ort"]["median_ms"] >= 200


def test_systems_take_turns_in_rotating_rounds(tiny_zoo, monkeypatch, tmp_path, capsys):
    from taskloom.bench import peers, timing
    order = []

    def prepare(system, model, inputs, **kwargs):
        def run():
            return model(*inputs).detach().numpy()
        run.system = system
        return peers.Prepared(run, 0.0, system)
    real_block = timing.time_block

    def block(fn, repeats, warmup):
        order.append(getattr(fn, "system", "taskloom"))
        return real_block(fn, repeats, warmup)
    monkeypatch.setattr(peers, "prepare", prepare)
    monkeypatch.setattr(bench_model, "time_block", block)
    monkeypatch.setattr(timing, "SETTLE_S", 0.0)
    path = tmp_path / "r.json"
    assert main(["bench", "model", "resnet50", "--compare", "torch,ort", "--repeats", "6", "--rounds", "3",
                 "--json", str(path)]) == 0
    assert order == ["taskloom", "torch", "ort", "torch", "ort", "taskloom", "ort", "taskloom", "torch"]
    rows = json.loads(path.read_text())["rows"]
    assert all(r["runs"] == 6 and len(r["round_ms"]) == 3 for r in rows)
    assert "spread" in capsys.readouterr().out


def test_dynamic_sweeps_one_compile_against_one_per_shape(tiny_zoo, monkeypatch, tmp_path, capsys):
    from taskloom.bench import dynamic
    monkeypatch.setattr(dynamic, "build", tiny)
    monkeypatch.setattr(dynamic, "inputs", lambda name, batch, seq: tiny(name, batch)[1])
    path = tmp_path / "sweep.json"
    assert main(["bench", "model", "resnet50", "--dynamic", "--batch", "1,3", "--compare", "static,torch",
                 "--repeats", "2", "--rounds", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "batch  3  taskloom-dynamic" in out and "dyn/static" in out and "compiles 1" in out
    record = json.loads(path.read_text())
    assert record["command"] == ("taskloom bench model resnet50 --dynamic --batch 1,3 --compare static,torch "
                                 "--repeats 2 --rounds 1")
    assert record["compiles"] == {"taskloom-dynamic": 1, "taskloom-static": 2}
    assert [(r["batch"], r["seq"]) for r in record["rows"]] == [(1, 0), (3, 0)]
    for row in record["rows"]:
        assert set(row["ms"]) == {"taskloom-dynamic", "taskloom-static", "torch"}
        assert max(row["max_abs_diff"].values()) < 1e-4


@pytest.mark.parametrize("argv, message", [
    (["--batch", "1,2"], "argument --batch: one size, or several with --dynamic"),
    (["--compare", "static"], "'static' is a peer of --dynamic"),
    (["--dynamic", "--compare", "tvm"], "argument --dynamic: compares with static, torch, inductor, ort"),
    (["--dynamic", "--profile"], "argument --dynamic"),
    (["--batch", "1,x"], "argument --batch"),
])
def test_dynamic_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(["bench", "model", "bert", *argv])
    assert message in capsys.readouterr().err
