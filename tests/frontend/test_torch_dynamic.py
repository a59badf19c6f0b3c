"""torch.compile(dynamic=True) with the taskloom backend: dynamo's symbolic sizes become one
compiled graph that serves every batch and sequence length its guards let through."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import taskloom.torch as tt  # noqa: E402


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
    assert low == 2 and high <= 2 ** 31 - 1


def test_sizes_dynamo_specializes_compile_their_own_graph():
    """Dynamo specializes a size of 1: that call is a second (static) graph, not a wrong answer."""
    model = Attention().eval()
    compiled = tt.compile(model, dynamic=True, fallback=False)
    with torch.no_grad():
        for b, t in [(2, 6), (1, 6), (3, 9)]:
            x, mask = torch.randn(b, t, 32), torch.ones(b, t)
            torch.testing.assert_close(compiled(x, mask), model(x, mask), rtol=1e-4, atol=1e-5)
    assert len(compiled.taskloom_backend.compiled) == 2


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
