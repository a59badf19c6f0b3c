"""The README's examples run as written."""
from __future__ import annotations

import pathlib
import re

import numpy as np


def _blocks() -> list[str]:
    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 4, "README lost an example"
    return blocks


def _run(code: str, path: pathlib.Path) -> dict:
    # run it from a real file: the kernel parser reads a kernel's source from its file
    path.write_text(code)
    ns: dict = {"__name__": "readme_example"}
    exec(compile(code, str(path), "exec"), ns)
    return ns


def test_readme_kernel_example_runs(capsys, tmp_path):
    ns = _run(_blocks()[0], tmp_path / "kernel_example.py")
    np.testing.assert_array_equal(ns["y"], np.arange(9, dtype=np.float32) * 2)
    out = capsys.readouterr().out
    assert "def scale(N: i32, x: f32[N], y: f32[N]):" in out and "void scale(" in out


def test_readme_eager_example_runs(tmp_path):
    ns = _run(_blocks()[1], tmp_path / "eager_example.py")
    np.testing.assert_allclose(ns["y"].numpy().sum(axis=-1), 1.0, rtol=1e-5)


def test_readme_graph_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # it saves model.tlm in the working directory
    ns = _run(_blocks()[2], tmp_path / "graph_example.py")
    np.testing.assert_allclose(ns["out"].sum(axis=-1), 1.0, rtol=1e-5)
    x = np.ones((4, 16), np.float32)
    np.testing.assert_array_equal(ns["same"](x), ns["model"](x))


def test_readme_torch_example_runs(tmp_path):
    _run(_blocks()[3], tmp_path / "torch_example.py")  # it asserts its own result


def test_readme_gpu_example_runs_in_the_emulator(tmp_path, capsys):
    import shutil
    if shutil.which("nvcc") is None:
        import pytest
        pytest.skip("nvcc is not installed")
    ns = _run(_blocks()[5], tmp_path / "gpu_example.py")
    np.testing.assert_array_equal(ns["y"], np.arange(1000, dtype=np.float32) * 2)
    assert 'extern "C" __global__ void __launch_bounds__(256) scale(' in capsys.readouterr().out
