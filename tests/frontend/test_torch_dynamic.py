"""torch.compile(dynamic=True) with the taskloom backend: dynamo's symbolic sizes become one
compiled graph that serves every batch and sequence length its guards let through."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import taskloom.torch as tt  # noqa: E402
from taskloom.frontend.torch import PerShapeWarning  # noqa: E402


class Attention(torch.nn.Module):
    """A small transformer block: symbolic batch and sequence reach views, a position table
    sliced to the sequence, a mask, softmax and layer norm with a float epsilon."""

    def __init__(self, d: int = 32, heads: int = 4, positions: int = 64):
        super().__init__()
        self.heads, self.eps = heads, 1e-5
        self.qkv, self.out = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)
        self.register_buffer("position", torch.randn(1, positions, d) * 0.1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        x = x + self.position[:, :t]
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5 + (1 - mask[:, None, None, :]) * -1e4
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        return torch.nn.functional.layer_norm(x + self.out(y), (d,), self.norm.weight, self.norm.bias, self.eps)


def _programs(compiled) -> int:
    return sum(len(fn._programs) for fn in compiled.taskloom_backend.compiled)


def test_one_graph_serves_every_batch_and_sequence():
    torch.manual_seed(0)
    model = Attention().eval()
    compiled = tt.compile(model, dynamic=True, fallback=False)
    with torch.no_grad():
        for b, t in [(2, 5), (3, 17), (2, 64), (5, 2), (4, 33)]:
            x, mask = torch.randn(b, t, 32), (torch.rand(b, t) > 0.2).float()
            torch.testing.assert_close(compiled(x, mask), model(x, mask), rtol=1e-4, atol=1e-5)
    assert _programs(compiled) == 1  # one taskloom compile for all five shapes
    (graph,) = compiled.taskloom_backend.compiled[0].compiled_graphs
    assert set(graph.symbols) == {str(s) for s in graph.symbols}  # named as dynamo names them
    low, high = next(iter(graph.symbols.values()))
    assert low <= 2 and high <= 2 ** 31 - 1


def test_a_size_of_1_is_symbolic_unless_the_code_branches_on_it():
    """Traced size-obliviously, a batch of 1 runs the one graph; a model whose code branches
    on a size of 1 gets a second graph there (dynamo's guard fixes that size), not a wrong
    answer and not a compile per shape."""
    model = Attention().eval()
    compiled = tt.compile(model, dynamic=True, fallback=False)
    with torch.no_grad():
        for b, t in [(2, 6), (1, 6), (3, 9)]:
            x, mask = torch.randn(b, t, 32), torch.ones(b, t)
            torch.testing.assert_close(compiled(x, mask), model(x, mask), rtol=1e-4, atol=1e-5)
    assert len(compiled.taskloom_backend.compiled) == 1

    class Branches(Attention):
        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            y = super().forward(x, mask)
            return y * 2 if x.shape[0] == 1 else y.view(x.shape[0], -1, 32) + 1
    model = Branches().eval()
    compiled = tt.compile(model, dynamic=True, fallback=False)
    with torch.no_grad():
        for b, t in [(2, 6), (1, 6), (1, 11), (3, 9)]:
            x, mask = torch.randn(b, t, 32), torch.ones(b, t)
            torch.testing.assert_close(compiled(x, mask), model(x, mask), rtol=1e-4, atol=1e-5)
    assert [fn.symbolic for fn in compiled.taskloom_backend.compiled] == [True, True]  # a batch of 1: its own
    assert _programs(compiled) == 2


def test_static_compiles_are_unchanged():
    model = Attention().eval()
    compiled = tt.compile(model, fallback=False)  # dynamic=False: each shape its own graph
    with torch.no_grad():
        x, mask = torch.randn(2, 7, 32), torch.ones(2, 7)
        torch.testing.assert_close(compiled(x, mask), model(x, mask), rtol=1e-4, atol=1e-5)
    (graph,) = compiled.taskloom_backend.compiled[0].compiled_graphs
    assert graph.symbols == {}


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_transformers_models_compile_once_for_every_shape(family):
    """transformers' BERT and GPT-2 (one small layer): their attention masks (built from
    aranges to the sequence length and advanced indexing), position tables sliced to the
    sequence and module floats dynamo passes as tensors all stay symbolic."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if family == "bert":
        model = transformers.BertModel(transformers.BertConfig(
            num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64)).eval()
    else:
        model = transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, use_cache=False)).eval()
    compiled = tt.compile(model, dynamic=True, fallback=False)
    with torch.no_grad():
        for b, t in [(2, 7), (3, 16), (2, 40)]:
            ids = torch.randint(0, 1000, (b, t))
            kwargs = {"attention_mask": (torch.rand(b, t) > 0.2).long()} if family == "bert" else {}
            got = compiled(input_ids=ids, **kwargs).last_hidden_state
            torch.testing.assert_close(got, model(input_ids=ids, **kwargs).last_hidden_state, rtol=1e-4, atol=1e-4)
    assert _programs(compiled) == 1
    # the attention (torch's SDPA, decomposed with symbolic sizes) is one kernel for every length
    schedules = [k["schedule"] for fn in compiled.taskloom_backend.compiled
                 for k in fn.compiled_graph.meta["kernels"]]
    assert sum(s.startswith("attention_cpu") for s in schedules) == 1, schedules


def test_recompiles_at_a_length_of_1_trace_as_dynamo_does():
    """transformers' GPT-2 with torch's SDPA: a sequence of 1 takes other code (graphs of its
    own), after which dynamo makes dimensions dynamic that changed between calls, among them
    the attention mask's heads, of size 1. Traced size-obliviously, that mask could not
    broadcast and a later call at a new length failed in dynamo; only the first call is
    traced that way, and every call computes what the model does."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, use_cache=False)).eval()
    compiled = tt.compile(model, dynamic=True, fallback=False)
    with torch.no_grad():
        for b, t in [(3, 7), (1, 7), (2, 1), (1, 1), (8, 33), (3, 1)]:
            ids = torch.randint(0, 1000, (b, t))
            torch.testing.assert_close(compiled(input_ids=ids).last_hidden_state,
                                       model(input_ids=ids).last_hidden_state, rtol=1e-4, atol=1e-4)
    # a batch of 1 and a length of 1 are guards of code before the backend (transformers'
    # mask code, torch's own decompositions), which dynamo keeps: four graphs, not one a call,
    # each of them the first at those sizes, run by its library: one compile
    graphs = compiled.taskloom_backend.compiled
    assert len(graphs) <= 4
    assert [fn.reuses is None for fn in graphs] == [True] + [False] * (len(graphs) - 1)


class Products(torch.nn.Module):
    """Attention's two batched products and one whose batch broadcasts."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 8, 8))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (q @ k.transpose(-1, -2)).softmax(-1) @ v + torch.matmul(q[:1], self.w)


@pytest.mark.parametrize("dynamic", [True, False])
def test_batched_products_reach_taskloom_whole(dynamic):
    """A ``matmul`` of operands of three or more dimensions is traced as one node, not torch's
    reshapes around a ``bmm``, and taskloom computes what torch does at every size, with no
    compile per shape: a sequence of 1 is a graph of its own (dynamo's guard), whose product
    ``q[:1] @ w`` is static but reads a ``q`` of symbolic batch (not a kernel to time)."""
    from taskloom.frontend.torch_lower import lower_to_aten
    traced = []

    def backend(gm, example_inputs):
        traced.append(lower_to_aten(gm, example_inputs, symbolic=dynamic))
        return gm.forward

    torch._dynamo.reset()
    model = Products().eval()
    torch.compile(model, backend=backend, dynamic=dynamic)(*(torch.randn(2, 3, 5, 8) for _ in range(3)))
    targets = [str(n.target) for n in traced[0].graph.nodes if n.op == "call_function"]
    assert targets.count("taskloom.matmul.default") == 3 and not any("bmm" in t for t in targets), targets

    compiled = tt.compile(model, dynamic=dynamic, fallback=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", PerShapeWarning)
        for b, t in [(2, 5), (3, 9), (4, 1)]:
            q, k, v = (torch.randn(b, 3, t, 8) for _ in range(3))
            torch.testing.assert_close(compiled(q, k, v), model(q, k, v), rtol=1e-4, atol=1e-5)
    assert all(fn.symbolic == dynamic for fn in compiled.taskloom_backend.compiled)


class SmallCNN(torch.nn.Module):
    """Convolutions, batch norm, pooling and a classifier: what a batch-dynamic CNN needs."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 5)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(image).mean((2, 3)))


def test_compile_with_named_dimensions_serves_every_size(tmp_path):
    """``taskloom.compile(model, inputs, dynamic=...)``: one compiled graph, the symbols named
    as given, sizes of 1 included, a call outside a range an error naming the input."""
    import taskloom
    from taskloom.errors import ArgumentError
    torch.manual_seed(0)
    model = Attention().eval()
    example = (torch.randn(1, 5, 32), torch.ones(1, 5))
    graph = taskloom.compile(model, example,
                             dynamic={"x": {0: "batch", 1: ("seq", 2, 64)}, "mask": {0: "batch", 1: "seq"}})
    assert graph.symbols == {"batch": (1, 2 ** 31 - 1), "seq": (2, 64)}
    assert [i["shape"] for i in graph.inputs] == [["batch", "seq", 32], ["batch", "seq"]]
    with torch.no_grad():
        for b, t in [(1, 2), (3, 17), (2, 64), (1, 9)]:
            x, mask = torch.randn(b, t, 32), (torch.rand(b, t) > 0.2).float()
            torch.testing.assert_close(torch.as_tensor(graph(x, mask)), model(x, mask), rtol=1e-4, atol=1e-5)
    with pytest.raises(ArgumentError, match="input 'x' dimension 1 is seq=65; .* from 2 to 64"):
        graph(torch.randn(1, 65, 32), torch.ones(1, 65))
    with pytest.raises(ArgumentError, match="seq=6, but input 'x' dimension 1 gave seq=5"):
        graph(torch.randn(1, 5, 32), torch.ones(1, 6))
    graph.save(tmp_path / "attention.tlm")
    loaded = taskloom.load(tmp_path / "attention.tlm")
    x, mask = torch.randn(4, 11, 32), torch.ones(4, 11)
    assert loaded.symbols == graph.symbols
    torch.testing.assert_close(torch.as_tensor(loaded(x, mask)), model(x, mask), rtol=1e-4, atol=1e-5)


def test_cnn_with_symbolic_batch_is_one_graph_past_sixteen():
    """A symbolic batch through convolutions: one graph for 1 to 20 (torch's own choice of
    convolution code at a batch of 16 does not split it)."""
    import taskloom
    torch.manual_seed(0)
    model = SmallCNN().eval()
    graph = taskloom.compile(model, (torch.randn(2, 3, 12, 12),), dynamic={0: {0: "n"}})
    assert graph.symbols == {"n": (1, 2 ** 31 - 1)}
    with torch.no_grad():
        for n in (1, 5, 16, 20):
            x = torch.randn(n, 3, 12, 12)
            torch.testing.assert_close(torch.as_tensor(graph(x)), model(x), rtol=1e-4, atol=1e-5)


class Branches(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.shape[0] > 4 else x + 1


@pytest.mark.parametrize("dynamic, match", [
    ({"y": {0: "n"}}, "names input 'y', which the model does not take .*'x'"),
    ({"x": {2: "n"}}, "dimension 2 of input 'x', which has 2 dimensions"),
    ({"x": {0: ("n", 0, 8)}}, "must be a name, 'batch', or a name and a range"),
    ({"x": {0: ("n", 4, 8)}}, "has 3 in dimension 0, outside the range 4 to 8"),
    ({"x": {0: 7}}, "must be a name"),
    ({"x": {0: ("n", 1, 8), 1: ("n", 1, 4)}}, "gives 'n' two ranges"),
])
def test_compile_dynamic_argument_errors(dynamic, match):
    import taskloom
    from taskloom.errors import ArgumentError
    with pytest.raises(ArgumentError, match=match):
        taskloom.compile(Branches(), (torch.randn(3, 2),), dynamic=dynamic)


def test_compile_dynamic_refuses_what_the_model_fixes():
    """A model whose code branches on a size cannot serve the whole range from one graph: an
    error saying what the code requires, never a graph wrong on the other branch."""
    import taskloom
    from taskloom.errors import FrontendError
    with pytest.raises(FrontendError, match=r"requires input 'x' dimension 0 <= 4"):
        taskloom.compile(Branches(), (torch.randn(3, 2),), dynamic={"x": {0: "n"}})
    graph = taskloom.compile(Branches(), (torch.randn(3, 2),), dynamic={"x": {0: ("n", 1, 4)}})
    x = torch.randn(4, 2)
    torch.testing.assert_close(torch.as_tensor(graph(x)), x + 1)


def test_symbolic_image_sizes_compile_per_shape_with_a_warning():
    """dynamic=True makes a CNN's height and width symbolic, which its convolutions cannot be:
    each shape compiles its own program (one warning says so), never eager PyTorch."""
    torch.manual_seed(0)
    model = SmallCNN().eval()
    compiled = tt.compile(model, dynamic=True, fallback=False)
    with torch.no_grad(), pytest.warns(tt.PerShapeWarning, match="height and width of 'x'"):
        for n, size in [(2, 12), (3, 16)]:
            x = torch.randn(n, 3, size, size)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert _programs(compiled) == 2
    assert all(fn.per_shape for fn in compiled.taskloom_backend.compiled)


def test_a_symbol_a_guard_fixed_reads_as_its_value():
    """Dynamo's size expressions with a symbol fixed by a guard (a sequence of 1 the code
    branched on) fold to ints; with the symbol free they stay expressions."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv
    from taskloom.frontend.torch_symbolic import _sympy
    s = sympy.Symbol("s70", integer=True, positive=True)
    assert _sympy(sympy.Min(512, s), {"s70": 1}) == 1
    assert _sympy(FloorDiv(12, s), {"s70": 1}) == 12
    assert _sympy(FloorDiv(12 * s, 4) + 1, {"s70": 2}) == 7
    assert not isinstance(_sympy(sympy.Min(512, s), {}), int)


def test_module_floats_through_torch_compile_itself():
    """Through ``torch.compile(backend=Backend(), dynamic=True)`` dynamo passes a module's
    float (the epsilon) as a tensor each call; taskloom inlines its value, one program for
    every shape. (``taskloom.torch.compile`` has dynamo keep such floats as constants.)"""
    torch.manual_seed(0)
    model, backend = Attention().eval(), tt.Backend(fallback=False)
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for b, t in [(2, 5), (3, 9), (4, 17)]:
            x, mask = torch.randn(b, t, 32), torch.ones(b, t)
            torch.testing.assert_close(compiled(x, mask), model(x, mask), rtol=1e-4, atol=1e-5)
    assert [bool(fn._scalars_at) for fn in backend.compiled] == [True]
    assert sum(len(fn._programs) for fn in backend.compiled) == 1
