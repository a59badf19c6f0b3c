"""``taskloom bench op/model --target cuda``: a clear error where no GPU is, the CPU's
float32-only rule, and on a GPU (``-m cuda``) real tables of all four systems."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")


def taskloom_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from taskloom.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=600)


def test_without_a_gpu_the_cuda_benchmarks_say_so():
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    for args in (["bench", "op", "matmul", "--shape", "64,64,64", "--target", "cuda:sm_90"],
                 ["bench", "model", "mlp", "--target", "cuda:sm_90"]):
        run = taskloom_cli(*args)
        assert run.returncode != 0 and "time on an NVIDIA GPU" in run.stderr, run.stderr


def test_other_dtypes_are_for_the_gpu():
    run = taskloom_cli("bench", "op", "matmul", "--shape", "8,8,8", "--dtype", "float16")
    assert run.returncode == 2 and "other dtypes are for --target cuda" in run.stderr


@pytest.mark.cuda
def test_a_matmul_and_a_model_on_the_gpu(tmp_path):
    run = taskloom_cli("bench", "op", "matmul", "--shape", "256,256,256", "--target", "cuda", "--repeats", "5",
                       "--rounds", "2", "--json", str(tmp_path / "mm.json"))
    assert run.returncode == 0, run.stderr
    record = json.loads((tmp_path / "mm.json").read_text())
    rows = {r["system"]: r for r in record["results"][0]["rows"]}
    assert set(rows) == {"taskloom", "torch", "inductor", "cudagraphs"} and rows["taskloom"]["error"] is None
    run = taskloom_cli("bench", "model", "mlp", "--target", "cuda", "--repeats", "5", "--rounds", "1")
    assert run.returncode == 0, run.stdout + run.stderr
