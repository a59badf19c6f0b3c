"""Per-operator fallback of the torch frontend: an operator taskloom cannot convert runs in
PyTorch between compiled, fused parts, in one compiled callable; the fallbacks are listed
(``taskloom.torch.fallbacks``) and summed up in one warning line; ``fallback=False`` raises.
Also the restrides (``as_strided``) that become views, and those that fall back.

The unsupported operator is ``torch.special.bessel_j0`` (its converter, should one be added,
is taken out for these tests).
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import taskloom
from taskloom.errors import FrontendError
from taskloom.frontend import torch_aten
from taskloom.frontend.torch import Backend, FallbackWarning, fallbacks
from taskloom.frontend.torch_fallback import Fallback, summary
from taskloom.frontend.torch_lower import dense_restride

aten = torch.ops.aten
TOL = dict(rtol=1e-4, atol=1e-5)
BESSEL = "aten.special_bessel_j0.default"


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch):
    torch_aten.lookup(aten.relu.default)  # (loads the converters)
    for key in (aten.special_bessel_j0, aten.special_bessel_j0.default):
        monkeypatch.delitem(torch_aten.REGISTRY, key, raising=False)
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


class Middle(nn.Module):
    """Two fused regions with an unsupported operator between them."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(12, 24), nn.Linear(24, 5)

    def forward(self, x):
        h = torch.special.bessel_j0(torch.relu(self.fc1(x)))
        return torch.softmax(self.fc2(h), dim=-1)


def compiled_ops(fn) -> list[list[list[str]]]:
    """The operators of each kernel of each compiled part of a CompiledFunction."""
    return [[k["ops"] for k in g.meta["kernels"]] for g in fn.compiled_graphs]


def test_an_unsupported_operator_runs_in_pytorch_between_compiled_parts():
    model, x = Middle().eval(), torch.randn(3, 12)
    fast = taskloom.torch.compile(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fast(x)
    torch.testing.assert_close(out, model(x), **TOL)
    lines = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert lines == [f"taskloom: 1 of 5 nodes run in PyTorch: {BESSEL} (unsupported op)"], lines
    assert fallbacks(fast) == [Fallback(BESSEL, "special_bessel_j0", "unsupported op")]
    (fn,) = fast.taskloom_backend.compiled
    assert fn.compiled_graph is None and fn.fallbacks == fallbacks(fast)
    first, second = compiled_ops(fn)  # the parts before and after it, each fused
    assert any({"matmul", "relu"} <= set(kernel) for kernel in first), first
    assert any("matmul" in kernel for kernel in second) and any("softmax" in kernel for kernel in second), second
    y = torch.randn(7, 12)
    with pytest.warns(FallbackWarning, match="1 of 5"):  # a new shape compiles again, falling back the same way
        torch.testing.assert_close(fast(y), model(y), **TOL)
    with torch.no_grad():
        model.fc2.weight.mul_(-1.0)
    with pytest.warns(FallbackWarning, match="1 of 5"):  # and so do changed weights
        torch.testing.assert_close(fast(x), model(x), **TOL)


class Recorder(TorchDispatchMode):
    """The ATen operators PyTorch runs while it is active."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_pytorch_runs_only_the_fallen_back_operator():
    def f(x, w):
        return torch.softmax(torch.special.bessel_j0(torch.relu(x @ w)) @ w.t(), -1)
    backend = Backend()
    x, w = torch.randn(4, 6), torch.randn(6, 6)
    with pytest.warns(FallbackWarning, match="1 of"):
        torch.compile(f, backend=backend)(x, w)
    (fn,) = backend.compiled
    with Recorder() as seen:
        out = fn(x, w)  # the compiled callable itself: dynamo runs eagerly under a dispatch mode
    torch.testing.assert_close(out[0] if isinstance(out, tuple) else out, f(x, w), **TOL)
    computed = [op for op in seen.ops if not op.startswith("aten.empty")]  # (the compiled parts' outputs)
    assert computed == [BESSEL], seen.ops
    assert [op for part in compiled_ops(fn) for kernel in part for op in kernel].count("matmul") == 2


def test_fallback_false_raises_the_error_listing_the_operators():
    with pytest.raises(FrontendError, match=r"aten\.special_bessel_j0\.default \(1 use\)(.|\n)*fallback=True"):
        taskloom.torch.compile(Middle().eval(), fallback=False)(torch.randn(3, 12))
    with pytest.raises(FrontendError, match="was not made by taskloom.torch.compile"):
        fallbacks(Middle())


def test_chains_of_fallbacks_make_as_few_parts_as_dependencies_allow():
    def f(x):
        a = torch.special.bessel_j0(x * 2.0) + 1.0       # level 1
        b = torch.special.bessel_j0(x - 1.0)             # level 1 too: runs beside a
        c = torch.special.bessel_j0(a * b) * 3.0          # level 2
        return c, x + 1.0, b  # results of every kind: compiled, fallen back
    backend = Backend()
    x = torch.randn(5)
    with pytest.warns(FallbackWarning, match=rf"3 of 9 nodes run in PyTorch: {BESSEL} x3 \(unsupported op\)"):
        out = torch.compile(f, backend=backend)(x)
    for got, want in zip(out, f(x)):
        torch.testing.assert_close(got, want, **TOL)
    assert len(backend.compiled[0].compiled_graphs) == 3  # before, between and after the two levels
    assert [b.node for b in backend.fallbacks] == ["special_bessel_j0", "special_bessel_j0_1", "special_bessel_j0_2"]


def test_a_node_its_converter_refuses_falls_back_with_the_reason():
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.ConvTranspose2d(3, 2, 3), nn.ReLU()).eval()
    x = torch.randn(1, 2, 6, 6)
    fast = taskloom.torch.compile(model)
    with pytest.warns(FallbackWarning, match=r"1 of 4 nodes .*aten\.convolution\.default \(transposed convolution"):
        out = fast(x)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), **TOL)
    (refused,) = fallbacks(fast)
    assert refused.op == "aten.convolution.default" and "transposed" in refused.reason


def test_an_unsupported_operator_with_several_results_and_an_in_place_update():
    def f(x):
        y = x * 2.0
        y.add_(1.0)  # later readers of y read the update
        values, indices = torch.topk(torch.special.bessel_j0(y), 2, -1)
        return values * y[..., :2], indices
    x = torch.randn(3, 6)
    fast = taskloom.torch.compile(f)
    with pytest.warns(FallbackWarning):
        values, indices = fast(x)
    want_values, want_indices = f(x)
    torch.testing.assert_close(values, want_values, **TOL)
    assert torch.equal(indices, want_indices)
    ops = {b.op for b in fallbacks(fast)}
    assert BESSEL in ops and len(ops) <= 2  # (topk too, while it has no converter)


class Pooler(nn.Module):
    """Swin's pooler: its average pooling leaves a restride (``as_strided_``) that keeps the shape."""

    def __init__(self):
        super().__init__()
        self.norm, self.pool, self.head = nn.LayerNorm(8), nn.AdaptiveAvgPool1d(1), nn.Linear(8, 3)

    def forward(self, x):
        return self.head(torch.flatten(self.pool(self.norm(x).transpose(1, 2)), 1))


def test_a_restride_that_keeps_the_shape_compiles_without_fallback():
    model, x = Pooler().eval(), torch.randn(2, 6, 8)
    backend = Backend(fallback=False)
    torch.testing.assert_close(torch.compile(model, backend=backend)(x), model(x), **TOL)
    targets = {str(n.target) for n in backend.compiled[0].aten_graph.graph.nodes}
    assert not any("as_strided" in t for t in targets), targets


@pytest.mark.parametrize("size, stride, offset, want", [
    ((2, 3, 4), (12, 4, 1), None, (0, [2, 3, 4], [0, 1, 2])),       # the same layout
    ((1, 24, 1), (99, 1, 7), None, (0, [1, 24, 1], [0, 1, 2])),     # sizes of 1: any stride
    ((4, 3, 2), (1, 4, 12), None, (0, [2, 3, 4], [2, 1, 0])),       # a permutation
    ((2, 5), (5, 1), 3, (3, [2, 5], [0, 1])),                       # a block from an offset
    ((3, 3), (1, 1), None, None),                                   # overlapping windows
    ((2, 12), (12, 1), 1, None),                                    # past the end
])
def test_dense_restride_reads_a_block_of_a_contiguous_input(size, stride, offset, want):
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(2, 3, 4)
    node = graph.call_function(aten.as_strided.default, (x, list(size), list(stride), offset))
    assert dense_restride(node) == want
    x.meta["val"] = torch.empty(4, 3, 2).transpose(0, 2)  # not contiguous: its storage is another order
    assert dense_restride(node) is None


def test_a_restride_that_is_no_view_falls_back_and_matches_eager():
    def windows(x):
        y = torch.relu(x * 2.0)
        return y.as_strided((5, 4), (2, 1)).sum(-1) + 1.0  # overlapping windows of y
    x = torch.randn(12)
    fast = taskloom.torch.compile(windows)
    with pytest.warns(FallbackWarning, match=r"aten\.as_strided\.default \(unsupported op\)"):
        torch.testing.assert_close(fast(x), windows(x), **TOL)

    def of_a_view(x):  # the view it restrides runs in PyTorch with it: it reads the storage
        return torch.relu(x * 2.0).t().as_strided((3, 3), (1, 2)) + 1.0
    x = torch.randn(4, 4)
    fast = taskloom.torch.compile(of_a_view)
    with pytest.warns(FallbackWarning, match=r"2 of \d+ nodes"):
        torch.testing.assert_close(fast(x), of_a_view(x), **TOL)
    assert [b.op for b in fallbacks(fast)] == ["aten.permute.default", "aten.as_strided.default"]


def test_summary_counts_each_operator_and_reason_once():
    line = summary([Fallback("aten.a", "a", "unsupported op"), Fallback("aten.b", "b", "why\nmore"),
                    Fallback("aten.a", "a_1", "unsupported op")], 431)
    assert line == "taskloom: 3 of 431 nodes run in PyTorch: aten.a x2 (unsupported op), aten.b (why)"
    assert "\n" not in line


def test_readers_of_a_tensor_updated_in_place_read_the_update_across_parts():
    """An in-place node a decomposition left (``relu_``): the PyTorch call after it reads the update."""
    from taskloom.compiler.graph_compiler import compile_graph
    from taskloom.frontend.torch_fallback import split
    graph = torch.fx.Graph()

    def add(target, *args):
        node = graph.call_function(target, args) if target else graph.placeholder("x")
        node.meta["val"] = torch.empty(4)
        return node
    x = add(None)
    y = add(aten.mul.Tensor, x, 2.0)
    add(aten.relu_.default, y)
    z = add(aten.add.Tensor, add(aten.special_bessel_j0.default, y), y)
    graph.output((z,))
    gm = torch.fx.GraphModule(nn.Module(), graph)
    t = torch.randn(4)
    want = gm(t)
    program, fell, total = split(gm, [t], [True], ["x"], compile_graph)
    torch.testing.assert_close(program([t])[0], want[0], **TOL)
    assert [f.op for f in fell] == [BESSEL] and total == 4


def test_two_compiles_of_one_model_keep_their_own_lists():
    """dynamo's wrapper hands attribute writes to the model: each compile keeps its backend
    on the wrapper itself, so a second compile does not take over the first one's list."""
    model = nn.Linear(3, 2).eval()
    strict, lenient = taskloom.torch.compile(model, fallback=False), taskloom.torch.compile(model)
    assert strict.taskloom_backend is not lenient.taskloom_backend
    assert not hasattr(model, "taskloom_backend")
