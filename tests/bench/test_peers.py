"""The peers of ``taskloom bench model``: each runs a small model to eager torch's outputs."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from taskloom.bench import peers
from taskloom.errors import ArgumentError

NEEDS = {"ort": ("onnxruntime", "onnx", "onnxscript"), "tvm": ("tvm",)}


class Small(torch.nn.Module):
    """A conv, a relu and a linear layer; returns two outputs, so the first must be picked."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.fc = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Linear(8 * 6 * 6, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.fc(torch.relu(self.conv(x)).flatten(1))
        return y, y.sum()


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    model, inputs = Small().eval(), (torch.randn(2, 3, 6, 6),)
    with torch.inference_mode():
        return model, inputs, model(*inputs)[0].numpy()


@pytest.mark.parametrize("system", peers.PEERS)
def test_peer_matches_eager(system, small, tmp_path, capfd):
    for module in NEEDS.get(system, ()):
        pytest.importorskip(module)
    model, inputs, expected = small
    prepared = peers.prepare(system, model, inputs, threads=1, workdir=tmp_path)
    out = prepared.run()
    assert out.dtype == np.float32 and out.shape == expected.shape
    assert np.abs(out - expected).max() < 1e-4
    np.testing.assert_array_equal(prepared.run(), out)  # fixed inputs, same answer
    assert prepared.compile_s >= 0 and prepared.note
    assert capfd.readouterr().out == ""  # exporters' and compilers' chatter goes to the log


def test_ort_falls_back_to_legacy_exporter(small, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    export = torch.onnx.export

    def no_dynamo(*args, dynamo: bool, **kwargs):
        if dynamo:
            raise RuntimeError("unsupported")
        return export(*args, dynamo=False, **kwargs)
    monkeypatch.setattr(torch.onnx, "export", no_dynamo)
    model, inputs, expected = small
    prepared = peers.prepare("ort", model, inputs, threads=1, workdir=tmp_path)
    assert "dynamo=False (dynamo=True failed: RuntimeError)" in prepared.note
    assert np.abs(prepared.run() - expected).max() < 1e-4


@pytest.mark.slow
def test_tvm_tuned(small, tmp_path):
    pytest.importorskip("tvm")
    model, inputs, expected = small
    prepared = peers.prepare("tvm", model, inputs, threads=1, workdir=tmp_path, tvm_trials=1)
    assert "MetaSchedule 1 trials/task" in prepared.note
    assert (tmp_path / "tvm_tuning" / "database_tuning_record.json").stat().st_size > 0
    assert np.abs(prepared.run() - expected).max() < 1e-4


def test_inductor_config_does_not_leak(small, tmp_path):
    from torch._inductor import config
    before = config.freezing
    model, inputs, _ = small
    prepared = peers.prepare("inductor", model, inputs, threads=1, workdir=tmp_path)
    assert "freezing" in prepared.note and config.freezing == before


def test_unknown_system(small, tmp_path):
    model, inputs, _ = small
    with pytest.raises(ArgumentError, match=r"unknown system 'tensorrt' \(known: torch, inductor, ort, tvm\)"):
        peers.prepare("tensorrt", model, inputs, threads=1, workdir=tmp_path)


def test_tvm_missing_says_not_installed(small, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tvm", None)  # makes `import tvm` fail
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    model, inputs, _ = small
    with pytest.raises(ArgumentError, match="not installed"):
        peers.prepare("tvm", model, inputs, threads=1, workdir=tmp_path)


def test_versions():
    versions = peers.peer_versions()
    assert versions["torch"] == torch.__version__ and "onnxruntime" in versions
    assert all(isinstance(v, str) and v for v in versions.values())
