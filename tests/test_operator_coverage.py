"""``taskloom ops``: the operators each frontend converts, and the README's lists of those
it does not, which must be what the command says for the versions the README names."""
from __future__ import annotations

import pathlib
import re

import pytest

from taskloom.cli import main
from taskloom.cli.ops import onnx_coverage, torch_coverage

README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()


def _listed(title: str) -> tuple[int, int, set[str]]:
    """(converted, total, names) of the README's paragraph starting with ``title``."""
    found = re.search(rf"\*\*{title}: (\d+) of (\d+) [^*]*\*\*.*?The \d+ that do not: (.*?)\.\n", README, re.S)
    assert found, f"README has no coverage paragraph for {title}"
    names = {n.strip() for n in found.group(3).replace("\n", " ").split(",")}
    return int(found.group(1)), int(found.group(2)), names


def _versions_named(package: str) -> str:
    return re.search(rf"{package} (\d+\.\d+\.\d+)", README.split("## Operator coverage")[1]).group(1)


def test_onnx_list_is_what_the_command_says():
    onnx = pytest.importorskip("onnx")
    if onnx.__version__ != _versions_named("onnx"):
        pytest.skip(f"the README's list is for onnx {_versions_named('onnx')}, this is {onnx.__version__}")
    converted, missing = onnx_coverage()
    assert _listed("ONNX") == (len(converted), len(converted) + len(missing), set(missing))


def test_torch_list_is_what_the_command_says():
    torch = pytest.importorskip("torch")
    if not torch.__version__.startswith(_versions_named("torch")):
        pytest.skip(f"the README's list is for torch {_versions_named('torch')}, this is {torch.__version__}")
    converted, missing = torch_coverage()
    assert _listed("PyTorch") == (len(converted), len(converted) + len(missing),
                                  {m.removeprefix("aten.") for m in missing})


def test_the_command_prints_counts_and_names(capsys):
    pytest.importorskip("onnx")
    assert main(["ops", "onnx", "--missing"]) == 0
    out = capsys.readouterr().out
    assert re.match(r"\d+ of \d+ ONNX operators \(default domain\) convert; \d+ do not\n", out)
    assert "  NonZero\n" in out and "  MatMul\n" not in out
    assert main(["ops", "onnx"]) == 0 and "  MatMul\n" in capsys.readouterr().out
