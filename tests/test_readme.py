"""The README's kernel example runs as written."""
from __future__ import annotations

import pathlib
import re

import numpy as np


def test_readme_kernel_example_runs(capsys, tmp_path):
    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README has no python example"
    # run it from a real file: the kernel parser reads a kernel's source from its file
    path = tmp_path / "readme_example.py"
    path.write_text(blocks[0])
    ns: dict = {"__name__": "readme_example"}
    exec(compile(blocks[0], str(path), "exec"), ns)
    np.testing.assert_array_equal(ns["y"], np.arange(9, dtype=np.float32) * 2)
    out = capsys.readouterr().out
    assert "def scale(N: i32, x: f32[N], y: f32[N]):" in out and "void scale(" in out
