"""``torch.compile(model, backend="taskloom")`` for a CUDA target: in the SIMT emulator on
CPU tensors everywhere (a conv net and a transformer block against eager torch), and on
the GPU's own tensors under ``-m cuda``."""
from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn as nn

from torch._dynamo.exc import BackendCompilerFailed

from taskloom.errors import FrontendError
from taskloom.frontend.torch import unwrap_error

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
EMULATED = {"target": "cuda:sm_90", "device": "emulator"}


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2)
        self.fc = nn.Linear(8 * 3 * 3, 5)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(self.conv2(x))
        return torch.softmax(self.fc(torch.flatten(x, 1)), dim=-1)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["convnet", "encoder"])
def test_a_model_compiled_for_cuda_matches_eager_in_the_emulator(name):
    if name == "convnet":
        model, x = ConvNet().eval(), torch.randn(2, 3, 16, 16)
        with torch.no_grad():  # batch-norm statistics worth folding
            model.bn1.running_mean.uniform_(-0.5, 0.5)
            model.bn1.running_var.uniform_(0.5, 1.5)
    else:
        model = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
        x = torch.randn(1, 8, 32)
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend="taskloom", options=EMULATED)(x)
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_the_emulator_needs_a_cuda_target():
    for options, message in (({"device": "emulator"}, "needs a CUDA target"),
                             ({"device": "gpu"}, "option 'device'='gpu' is not valid")):
        torch._dynamo.reset()
        with pytest.raises(BackendCompilerFailed, match=message) as info:
            torch.compile(nn.ReLU(), backend="taskloom", options=options)(torch.randn(3))
        assert isinstance(unwrap_error(info.value), FrontendError)


def test_cuda_inputs_take_tf32_where_torch_allows_it():
    from taskloom.frontend.torch import gpu_target
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert gpu_target() == "cuda"
        torch.set_float32_matmul_precision("high")
        assert gpu_target() == "cuda -tf32"
    finally:
        torch.set_float32_matmul_precision(before)


def test_an_input_off_the_cpu_converts_by_its_shape_and_dtype():
    # CUDA inputs reach the converter as they are; the meta device stands in for the GPU here
    from taskloom.frontend.torch_convert import convert
    from taskloom.frontend.torch_lower import lower_to_aten
    gm = torch.fx.symbolic_trace(lambda x, w: torch.relu(x @ w))
    x, w = torch.randn(2, 4, device="meta"), torch.randn(4, 3)
    graph = convert(lower_to_aten(gm, (x, w)), (x, w), [True, False], ["x", "w"]).graph
    assert [(t.name, t.shape) for t in graph.inputs] == [("x", (2, 4))]


@pytest.mark.cuda
def test_cuda_tensors_compile_for_the_gpu_they_are_on():
    from taskloom.frontend.torch import Backend
    model = ConvNet().eval().cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    backend = Backend()
    with torch.no_grad():
        got = torch.compile(model, backend=backend)(x)
        want = model(x)
    assert got.is_cuda
    assert backend.fallbacks == [] and len(backend.compiled) == 1  # compiled, not eager
    assert backend.compiled[0].compiled_graph.device == "cuda"
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_taskloom_compile_takes_a_torch_model_for_cuda(tmp_path):
    import taskloom
    model, x = ConvNet().eval(), torch.randn(1, 3, 16, 16)
    compiled = taskloom.compile(model, (x,), target="cuda:sm_80", device="emulator")
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(compiled(x), want, rtol=1e-4, atol=1e-5)
    compiled.save(tmp_path / "convnet.tlm")
    torch.testing.assert_close(taskloom.load(tmp_path / "convnet.tlm", device="emulator")(x), want,
                               rtol=1e-4, atol=1e-5)


def test_a_transformer_compiled_once_with_dynamic_sizes_serves_each_length():
    """float16 on tensor cores and the attention template, symbolic sequence and batch: one
    compile (no per-shape fallback), then lengths it was not traced at."""
    from taskloom.frontend.torch import Backend
    model = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).eval().half()
    backend = Backend(target="cuda:sm_80", device="emulator")
    fn = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch, seq in ((2, 8), (3, 5), (2, 13)):  # (a size of 1 dynamo specializes)
            x = torch.randn(batch, seq, 64, dtype=torch.float16)
            want = model.float()(x.float())
            model.half()
            torch.testing.assert_close(fn(x).float(), want, rtol=2e-2, atol=2e-2)
    [compiled] = backend.compiled
    assert not compiled.per_shape and compiled.compiled_graph.meta["dynamic"]["symbols"]
    schedules = " ".join(k["schedule"] for k in compiled.compiled_graph.meta["kernels"])
    assert "attention_cuda" in schedules and "matmul_mma" in schedules


def test_dynamos_graph_for_a_batch_of_1_runs_the_cuda_library():
    """Through torch.compile itself dynamo specializes a batch of 1 (a graph of its own); that
    graph is the first one at a batch of 1, so it runs the first one's CUDA library."""
    from taskloom.frontend.torch import Backend

    class Scores(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 16)

        def forward(self, x):
            return self.proj(x).softmax(-1)

    model = Scores().eval()
    backend = Backend(target="cuda:sm_80", device="emulator")
    fn = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for batch, seq in ((3, 5), (1, 5), (1, 9)):
            x = torch.randn(batch, seq, 16)
            torch.testing.assert_close(fn(x), model(x), rtol=1e-5, atol=1e-6)
    first, at_1 = backend.compiled
    assert at_1.reuses is first and at_1.compiled_graph is first.compiled_graph
