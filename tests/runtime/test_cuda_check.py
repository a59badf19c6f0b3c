"""Each kernel of a CUDA graph checked by itself (taskloom.runtime.cuda_check): a kernel that
leaves part of its output unwritten, or reads memory no one wrote, is named; the emulator
runs the checks here, the GPU under ``-m cuda``."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.runtime.cuda_check import check_kernels, format_checks
from taskloom.script import parse_source

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
rng = np.random.default_rng(0)


def compiled(device: str = "emulator"):
    x = input((5, 37), "float32", name="x")
    h = ops.relu(x) * 2.0
    graph = Graph([x], [ops.softmax(ops.matmul(h, ops.transpose(h, 0, 1)), axis=-1)])
    return taskloom.compile(graph, target="cuda:sm_90", device=device)


def edited(model, old: str, new: str):
    """``model`` with its first kernel's IR edited (``old`` replaced by ``new``)."""
    name, fn = next(iter(model._kernels.items()))
    text = next(t for t in model.meta["kernel_ir"] if f"def {name}(" in t)
    assert old in text, text
    model._kernels[name] = parse_source(text.replace(old, new))
    return model, name


def test_the_kernels_of_a_correct_graph_pass_and_the_outputs_are_right():
    model = compiled()
    x = rng.standard_normal((5, 37)).astype(np.float32)
    checks = check_kernels(model, x)
    assert len(checks) == len(model.meta["calls"]) >= 2 and all(c.ok for c in checks), format_checks(checks)
    assert "ok" in format_checks(checks).splitlines()[0]


def test_a_kernel_that_leaves_elements_unwritten_is_named():
    model, name = edited(compiled(), "if i < 25:", "if i < 20:")
    checks = check_kernels(model, rng.standard_normal((5, 37)).astype(np.float32))
    first = checks[0]
    assert first.kernel == name and first.unwritten == {"matmul": 5} and not first.unstable
    assert "matmul: 5 elements unwritten" in format_checks(checks).splitlines()[0]


def test_a_kernel_that_reads_its_output_before_writing_it_is_unstable():
    model, name = edited(compiled(), "matmul[i] = sum_acc", "matmul[i] = matmul[i] * 0.0 + sum_acc")
    first = check_kernels(model, rng.standard_normal((5, 37)).astype(np.float32))[0]
    assert first.kernel == name and first.unstable == {"matmul": 25} and not first.unwritten


def test_each_call_against_the_emulator_names_the_kernel_that_differs(monkeypatch):
    from taskloom.runtime import cuda_check
    x = rng.standard_normal((5, 37)).astype(np.float32)
    checks = check_kernels(compiled(), x, emulate=True)
    assert all(c.ok and set(c.emulator_diff.values()) == {0.0} for c in checks)
    launch = cuda_check._HostMemory.launch

    def off_by_one(self, fn, argv):  # a "device" whose softmax adds 1 to its first element
        launch(self, fn, argv)
        if "softmax" in fn.name:
            argv[-1].reshape(-1)[0] += 1.0
    monkeypatch.setattr(cuda_check._HostMemory, "launch", off_by_one)
    checks = check_kernels(compiled(), x, emulate=True)
    assert [c.kernel for c in checks if not c.ok] == [checks[-1].kernel]
    assert "from the emulator" in format_checks(checks).splitlines()[-1]


@pytest.mark.cuda
def test_on_the_gpu_the_kernels_of_a_correct_graph_pass():
    torch = pytest.importorskip("torch")
    model = compiled("cuda")
    checks = check_kernels(model, torch.randn(5, 37, device="cuda"), emulate=True)
    assert all(c.ok and max(c.emulator_diff.values()) < 1e-5 for c in checks), format_checks(checks)
