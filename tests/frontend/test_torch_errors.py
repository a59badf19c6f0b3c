"""Errors of the PyTorch frontend are taskloom errors: ``taskloom.torch.compile`` (with
``fallback=False``; by default unsupported operators run in PyTorch) and
``taskloom.compile`` raise them out of dynamo's ``BackendCompilerFailed`` (chained as the
cause); a converter's own fault becomes a FrontendError naming the ATen node."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch._dynamo.exc import BackendCompilerFailed

import taskloom
from taskloom.errors import FrontendError, TaskloomError
from taskloom.frontend import torch_aten
from taskloom.frontend.torch import unwrap_error

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Unsupported(nn.Module):
    def forward(self, x):
        return torch.lgamma(x) + 1.0


def _lgamma_plus_one(x):
    return torch.lgamma(x) + 1.0


def test_compile_of_a_module_raises_the_taskloom_error_with_dynamo_chained():
    fast = taskloom.torch.compile(Unsupported(), fallback=False)
    assert isinstance(fast, nn.Module)  # still dynamo's OptimizedModule
    with pytest.raises(FrontendError, match=r"aten\.lgamma\.default \(1 use\)") as info:
        fast(torch.randn(3, 4))
    cause = info.value.__cause__
    assert isinstance(cause, BackendCompilerFailed) and cause.inner_exception is info.value
    assert cause.__context__ is None and info.value.dynamo_error is cause  # no cycle between the two


def test_compile_of_a_function_raises_the_taskloom_error():
    fast = taskloom.torch.compile(_lgamma_plus_one, fallback=False)
    assert fast.__name__ == "_lgamma_plus_one"
    with pytest.raises(TaskloomError, match="aten.lgamma"):
        fast(torch.randn(5))


def test_successful_calls_pass_through_the_wrapper():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU()).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(taskloom.torch.compile(model)(x), model(x), rtol=1e-4, atol=1e-5)


def test_taskloom_compile_of_a_module_raises_the_taskloom_error():
    with pytest.raises(FrontendError, match="aten.lgamma") as info:
        taskloom.compile(Unsupported(), (torch.randn(2, 3),))
    assert isinstance(info.value.__cause__, BackendCompilerFailed)


def test_plain_torch_compile_keeps_dynamos_error_and_unwrap_error_reads_it():
    with pytest.raises(BackendCompilerFailed) as info:
        torch.compile(Unsupported(), backend="taskloom", options={"fallback": False})(torch.randn(3))
    inner = unwrap_error(info.value)
    assert isinstance(inner, FrontendError) and inner.__cause__ is info.value
    other = ValueError("not dynamo's")
    assert unwrap_error(other) is other


def test_a_converter_fault_is_a_frontend_error_naming_the_node(monkeypatch):
    assert torch_aten.lookup(aten.relu.default) is not None  # (loads the converters)

    def broken(x):
        return {}["missing"]
    monkeypatch.setitem(torch_aten.REGISTRY, aten.relu, broken)
    with pytest.raises(FrontendError, match=r"aten\.relu\.default \(node 'relu'\).*KeyError") as info:
        taskloom.torch.compile(torch.relu, fallback=False)(torch.randn(4))
    assert isinstance(info.value.__cause__, KeyError)  # the fault itself; dynamo's error beside it
    assert isinstance(info.value.dynamo_error, BackendCompilerFailed)
