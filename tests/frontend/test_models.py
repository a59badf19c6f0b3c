"""The five benchmark models (random weights) through ``torch.compile(backend="taskloom")``
and through the ONNX path, against PyTorch eager. Slow: minutes on two cores.

    .venv/bin/pytest tests/frontend/test_models.py -m slow -q
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from taskloom.bench import zoo  # noqa: E402
from taskloom.frontend.torch import Backend  # noqa: E402

pytestmark = pytest.mark.slow


def _build(name: str, batch: int = 1):
    if name in ("bert", "gpt2"):
        pytest.importorskip("transformers")
    return zoo.build(name, batch=batch, seq=128)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    """Within 1e-4 of the output's scale: float32 sums in another order, nothing more."""
    scale = float(np.max(np.abs(want)))
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-4 * scale, (float(np.max(np.abs(got - want))), scale)


@pytest.mark.parametrize("name", zoo.MODELS)
def test_model_through_torch_compile(name):
    model, inputs = _build(name)
    backend = Backend()
    fast = torch.compile(model, backend=backend, dynamic=False)
    with torch.inference_mode():
        want = model(*inputs).numpy()
        got = fast(*inputs).numpy()
    _close(got, want)
    assert len(backend.compiled) == 1  # one graph: no graph breaks, no eager fallback
    kernels = backend.compiled[0].compiled_graph.meta["kernels"]
    assert any(k["schedule"].startswith("matmul_cpu") for k in kernels)


@pytest.mark.parametrize("name", ["resnet50", "bert"])
def test_model_through_onnx(name, tmp_path):
    pytest.importorskip("onnx")
    import taskloom
    model, inputs = _build(name)
    path = tmp_path / f"{name}.onnx"
    torch.onnx.export(model, inputs, str(path), dynamo=True, optimize=True)
    compiled = taskloom.compile(str(path))
    with torch.inference_mode():
        want = model(*inputs).numpy()
    _close(np.asarray(compiled(*[x.numpy() for x in inputs])), want)
