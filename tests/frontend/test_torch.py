"""The PyTorch frontend: ``torch.compile(model, backend="taskloom")`` on small models, checked
against eager torch; the fusion it leads to; unsupported operators (one error listing all,
with fallback=False, or per-operator fallback by default); options, new shapes and changed weights; save/load; and a
few grouped functions that cover the converter registry.

Models are tiny (a handful of channels, sequence 8, hidden 32) so each compiles in about a
second; kernels are cached for the whole session.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.exc import BackendCompilerFailed

import taskloom
from taskloom.errors import FrontendError
from taskloom.frontend import torch_aten
from taskloom.frontend.torch import Backend, CompiledFunction, FallbackWarning, Options
from taskloom.frontend.torch_lower import FAST_PATH_DECOMPOSITIONS

aten = torch.ops.aten
TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()  # each test compiles its own graphs (and stays under dynamo's recompile limit)
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


def compiled_with(model, *args, **options):
    """(output, the Backend) for ``model(*args)`` compiled through a taskloom Backend."""
    backend = Backend(**options)
    out = torch.compile(model, backend=backend)(*args)
    return out, backend


def kernels(backend: Backend) -> list[list[str]]:
    """The operators of each kernel of the (single) graph the backend compiled."""
    (fn,) = backend.compiled
    return [k["ops"] for k in fn.compiled_graph.meta["kernels"]]


# ----------------------------------------------------------------------------- models

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(12, 24), nn.Linear(24, 5)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.relu(self.fc1(x))), dim=-1)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.pool, self.gap = nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 5)
        with torch.no_grad():  # statistics that are not the identity
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(self.gap(x), 1))


class Attention(nn.Module):
    """Multi-head self-attention written out, with an optional causal mask."""

    def __init__(self, hidden: int, heads: int, seq: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        if self.causal:
            att = att.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class EncoderBlock(nn.Module):
    """Post-norm transformer encoder block: attention, residual, layer norm, GELU MLP."""

    def __init__(self, hidden=32, heads=2, seq=8):
        super().__init__()
        self.attn = Attention(hidden, heads, seq, causal=False)
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class GPT2Block(nn.Module):
    """Pre-norm decoder block with a causal mask and the tanh GELU, as in GPT-2."""

    def __init__(self, hidden=32, heads=2, seq=8):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads, seq, causal=True)
        self.fc, self.proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


# ----------------------------------------------------------------------------- the four models

def test_mlp_through_the_installed_backend():
    model = MLP().eval()
    x = torch.randn(4, 12)
    out = torch.compile(model, backend="taskloom")(x)
    assert type(out) is torch.Tensor and out.dtype == torch.float32
    torch.testing.assert_close(out, model(x), **TOL)


def test_cnn_matches_and_fuses_conv_bn_relu():
    model = CNN().eval()
    x = torch.randn(2, 3, 10, 10)
    out, backend = compiled_with(model, x)
    torch.testing.assert_close(out, model(x), **TOL)
    ks = kernels(backend)
    # conv, batch norm (fused, or folded into the weights) and relu: one kernel
    conv = [k for k in ks if "conv2d" in k]
    assert len(conv) == 1 and "relu" in conv[0], ks
    assert not any(k == ["batch_norm"] or k == ["relu"] for k in ks), ks
    # the classifier's bias is added inside its matmul
    assert any("matmul" in k and "add" in k for k in ks), ks


def test_transformer_encoder_block_matches_and_fuses_bias_adds():
    model = EncoderBlock().eval()
    x = torch.randn(2, 8, 32)
    out, backend = compiled_with(model, x)
    torch.testing.assert_close(out, model(x), **TOL)
    ks = kernels(backend)
    # four linear layers: each bias add runs in its matmul's kernel; no kernel is a lone add of a bias
    assert sum("matmul" in k and "add" in k for k in ks) == 4, ks
    assert len(ks) < len(backend.compiled[0].graph.nodes), ks
    # the elementwise ops disappear into the matmuls: GELU and both residual adds run in them
    elementwise = {"gelu", "add", "mul"}
    assert all("matmul" in k or "batch_matmul" in k for k in ks if elementwise & set(k)), ks
    assert any("gelu" in k and "matmul" in k for k in ks), ks
    assert sum(k.count("add") == 2 and "matmul" in k for k in ks) == 2, ks  # bias + residual


@pytest.mark.parametrize("no_grad", [False, True], ids=["autograd-path", "fast-path"])
def test_nn_transformer_encoder_layer(no_grad):
    # under no_grad, eval mode takes torch's fused fast path (aten._transformer_encoder_layer_fwd)
    layer = nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, activation="gelu", batch_first=True).eval()

    def run(x):
        with torch.set_grad_enabled(not no_grad):
            return layer(x)
    x = torch.randn(2, 8, 32)
    out, backend = compiled_with(run, x)
    torch.testing.assert_close(out, run(x), **TOL)
    targets = {str(n.target) for n in backend.compiled[0].gm.graph.nodes}
    assert any("_transformer_encoder_layer_fwd" in t for t in targets) == no_grad, targets


def test_gpt2_block_with_causal_mask():
    model = GPT2Block().eval()
    x = torch.randn(2, 8, 32)
    out = torch.compile(model, backend="taskloom")(x)
    torch.testing.assert_close(out, model(x), **TOL)


def test_fast_path_decompositions_match_torch_kernels():
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    q, kv = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    common = (16, 2, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias, None)
    mine = FAST_PATH_DECOMPOSITIONS[aten._native_multi_head_attention.default]
    with torch.no_grad():
        for need, average in [(True, True), (True, False), (False, True)]:
            want = aten._native_multi_head_attention(q, kv, kv, *common, need, average)
            got = mine(q, kv, kv, *common, need, average)
            torch.testing.assert_close(got[0], want[0], **TOL)
            if need:
                torch.testing.assert_close(got[1], want[1], **TOL)
        assert mine(q, kv, kv, *common[:-1], torch.zeros(5, 5, dtype=torch.bool)) is NotImplemented
        for norm_first in (False, True):
            layer = nn.TransformerEncoderLayer(16, 2, 24, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
            a = layer.self_attn
            args = (q, 16, 2, a.in_proj_weight, a.in_proj_bias, a.out_proj.weight, a.out_proj.bias, False,
                    norm_first, layer.norm1.eps, layer.norm1.weight, layer.norm1.bias, layer.norm2.weight,
                    layer.norm2.bias, layer.linear1.weight, layer.linear1.bias, layer.linear2.weight,
                    layer.linear2.bias)
            torch.testing.assert_close(FAST_PATH_DECOMPOSITIONS[aten._transformer_encoder_layer_fwd.default](*args),
                                       aten._transformer_encoder_layer_fwd(*args), **TOL)


# ----------------------------------------------------------------------------- unsupported operators

class Unsupported(nn.Module):
    def forward(self, x):
        top = torch.topk(x, 2, -1).values.sum(-1, keepdim=True)
        return torch.lgamma(x) + torch.lgamma(2 * x) + torch.sort(x, -1).values + top + torch.erfc(x).relu()


def test_every_unsupported_operator_is_listed_in_one_error():
    with pytest.raises(BackendCompilerFailed) as info:
        torch.compile(Unsupported(), backend="taskloom", options={"fallback": False})(torch.randn(3, 4))
    error = info.value.inner_exception
    assert isinstance(error, FrontendError)
    text = str(error)
    for line in ("aten.lgamma.default (2 uses)", "aten.sort.default (1 use)", "aten.topk.default (1 use)",
                 "aten.erfc.default (1 use)"):
        assert line in text, text
    assert "aten.relu" not in text and "aten.add" not in text and "aten.mul" not in text  # supported: not listed
    assert "fallback=True" in text


def test_fallback_is_the_default_and_warns_naming_the_operators():
    model = Unsupported()
    x = torch.randn(3, 4)
    with pytest.warns(FallbackWarning, match=r"5 of \d+ nodes run in PyTorch: aten\.topk\.default \(unsupported op\), "
                                             r"aten\.lgamma\.default x2 \(unsupported op\).*aten\.erfc"):
        out = taskloom.torch.compile(model)(x)
    torch.testing.assert_close(out, model(x))


def test_converter_errors_name_the_node():
    conv = nn.ConvTranspose2d(2, 2, 3).eval()
    strict = {"fallback": False}
    with pytest.raises(BackendCompilerFailed) as info:
        torch.compile(conv, backend="taskloom", options=strict)(torch.randn(1, 2, 5, 5))
    text = str(info.value.inner_exception)
    assert "aten.convolution.default" in text and "transposed convolution" in text, text

    def add_one_in_place(x):
        x.add_(1.0)
        return x * 2
    with pytest.raises(BackendCompilerFailed, match=r"updates the graph input 'x' in place"):
        torch.compile(add_one_in_place, backend="taskloom", options=strict)(torch.randn(4))


def test_registry_is_what_the_frontend_reads(monkeypatch):
    assert torch_aten.lookup(aten.relu.default) is not None  # (loads the converters)
    monkeypatch.setitem(torch_aten.REGISTRY, aten.relu, lambda x: taskloom.ops.relu6(x))
    x = torch.randn(64) * 10
    out, _ = compiled_with(torch.relu, x)
    torch.testing.assert_close(out, F.relu6(x))  # the replaced converter ran
    assert torch_aten.lookup(aten.relu.default) is torch_aten.REGISTRY[aten.relu]
    assert torch_aten.lookup(aten.lgamma.default) is None


# ----------------------------------------------------------------------------- options, shapes, weights

def test_options_reach_the_backend():
    model = MLP().eval()
    x = torch.randn(3, 12)
    out, backend = compiled_with(model, x, target="cpu -isa=avx2")
    torch.testing.assert_close(out, model(x), **TOL)
    isa = backend.compiled[0].compiled_graph.meta["target"]["isa"]
    assert "avx2" in isa and "avx512f" not in isa, isa
    out = torch.compile(model, backend="taskloom", options={"tune": 0, "fallback": False})(x)
    torch.testing.assert_close(out, model(x), **TOL)
    assert Options.parse({"tune": 1}, defaults=Options(fallback=True)) == Options(tune=1, fallback=True)
    assert Options.parse(None, mode="max-autotune").tune == 2
    with pytest.raises(FrontendError, match="unknown option.*'tunes'"):
        Options.parse({"tunes": 1})
    with pytest.raises(FrontendError, match="'tune'=5"):
        taskloom.torch.compile(model, tune=5)
    torch.testing.assert_close(taskloom.torch.compile(model, tune=0)(x), model(x), **TOL)
    assert Options.parse({"tune": 1, "budget": "2m"}).budget == "2m"
    with pytest.raises(FrontendError, match="'budget'.*'90s'"):
        Options.parse({"budget": "a while"})
    with pytest.raises(FrontendError, match="budget"):
        taskloom.torch.compile(model, tune=1, budget=-5)


def test_a_budget_bounds_tuning_through_torch_compile(tmp_path, monkeypatch):
    """With no time to spare, tune=1 measures at most a batch per kernel (none once the budget
    is gone: the analytic pick stands) and still compiles right."""
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path))
    from taskloom.tune import tuner
    batches = []
    real = tuner.measure

    def counting(fns, *a, **k):
        batches.append(len(fns))
        return real(fns, *a, **k)
    monkeypatch.setattr(tuner, "measure", counting)
    model = MLP().eval()
    x = torch.randn(16, 12)
    out = torch.compile(model, backend="taskloom", options={"tune": 1, "budget": 0.001})(x)
    torch.testing.assert_close(out, model(x), **TOL)
    assert len(batches) <= 2 and all(b <= tuner.BATCH for b in batches)  # MLP: two linear layers


def test_new_shapes_and_changed_weights_compile_again():
    model = MLP().eval()
    fast = torch.compile(model, backend="taskloom")
    for batch in (2, 5, 7):  # dynamo marks the batch dynamic after the second; each size compiles
        x = torch.randn(batch, 12)
        torch.testing.assert_close(fast(x), model(x), **TOL)
    with torch.no_grad():
        model.fc1.weight.mul_(-2.0)  # an in-place change: the frozen constant is stale
    torch.testing.assert_close(fast(x), model(x), **TOL)
    x_t = torch.randn(12, 3).t()  # a non-contiguous input
    torch.testing.assert_close(fast(x_t), model(x_t), **TOL)


def test_save_and_load_round_trip(tmp_path):
    model = GPT2Block().eval()
    x = torch.randn(1, 8, 32)
    out, backend = compiled_with(model, x)
    (fn,) = backend.compiled
    assert isinstance(fn, CompiledFunction)
    fn.compiled_graph.save(tmp_path / "gpt2_block.tl")
    loaded = taskloom.load(tmp_path / "gpt2_block.tl")
    torch.testing.assert_close(torch.from_numpy(loaded(x.numpy())), model(x), **TOL)


def test_import_taskloom_does_not_import_torch():
    code = ("import sys, taskloom; assert 'torch' not in sys.modules; "
            "m = taskloom.torch; assert 'torch' in sys.modules and m.__name__ == 'taskloom.torch'")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert "taskloom" in torch._dynamo.list_backends()


# ----------------------------------------------------------------------------- converter coverage

def _unary(x):
    return (torch.tanh(x) + torch.sigmoid(x) + F.silu(x) + torch.exp(x) + torch.log(x.abs() + 1) + x.abs().sqrt()
            + torch.rsqrt(x.abs() + 1) + torch.erf(x) + torch.reciprocal(x + 10) + torch.floor(x) + torch.ceil(x)
            + F.hardswish(x) + F.hardsigmoid(x) + F.relu6(x) + F.gelu(x) + F.leaky_relu(x, 0.2) + F.elu(x)
            + F.hardtanh(x, -0.5, 0.5) - x)


def _binary(x, y):
    return (x + y * 2 - y / 3, x.sub(y, alpha=2), 1 - x, x ** 2, x.abs().pow(y), torch.maximum(x, y),
            x.clamp(-0.5, 0.5), x.clamp(min=0.1), torch.where(x > y, x, y), x.masked_fill(x < 0, -1.0),
            torch.div(x, 0.7, rounding_mode="floor"), torch.div(x, y, rounding_mode="trunc"), x % 0.3,
            (x > y) & (x >= 0) | ~(x < y) ^ (x <= 0.5), x == y, torch.isinf(x / 0), torch.sign(x),
            # a 0-d tensor does not widen a tensor's type (float16 stays float16)
            x.half() * torch.tensor(2.0), torch.where(x > 0, x.half(), torch.tensor(0.0)))


def _more_math(x):
    halves = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49, 2.51])
    return (torch.log1p(x * 1e-6), torch.expm1(x * 1e-6), torch.expm1(x), torch.log2(x.abs() + 1), torch.exp2(x),
            torch.trunc(x * 3), torch.round(halves), torch.round(x * 3), F.softplus(x), F.mish(x), F.celu(x),
            x.cumsum(1), x.flip(0, 2), x.norm(dim=-1), torch.linalg.vector_norm(x, 1, (0, 2)),
            F.cosine_similarity(x, x.flip(0), dim=-1), F.normalize(x, dim=1))


def _reductions(x):
    return (x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.mean(-1), x.amax(1), x.amin((0, 1)),
            x.max(1).values, x.max(1).indices, x.argmin(), x.prod(1), (x > 0).any(1), (x > 0).all(),
            x.var(1), x.std(-1, keepdim=True), torch.var_mean(x, 2, correction=0), x.logsumexp(-1),
            F.softmax(x, 0), F.log_softmax(x, -1))


def _shapes(x, i):
    return (x.reshape(-1), x.permute(2, 0, 1), x.transpose(0, 2), x[:, 1:4:2], x[1], x[..., -1],
            x[:, :1].squeeze(1), torch.cat([x, 2 * x], 1), torch.stack([x, x]), x.split([3, 4], 2),
            x.unbind(0), x.expand(2, 3, 5, 7), x.repeat(1, 2, 1), F.pad(x, (1, 2, 0, 1), value=0.5),
            x.tril(), x.triu(1), torch.index_select(x, 1, i[0]), torch.gather(x, 1, i[..., None].expand(3, 4, 7)),
            x[:, i[0]], x[i[:, 0] % 3], i.float() + 1, (x > 0).int(), x.half().float(), i // 2, i % 3,
            torch.zeros_like(x) + x, torch.arange(7) * x, x.new_ones(2, 3))


def _nn(img, w):
    return (F.conv2d(img, w, torch.ones(6), stride=2, padding=1), F.conv2d(img, w[:4, :1], groups=4, dilation=2),
            F.conv1d(img[:, :, 0], w[:5, :, 0], padding=1), F.max_pool2d(img, 3, 2, 1),
            F.max_pool2d(img, 2, ceil_mode=True), F.avg_pool2d(img, 3, 2, 1, count_include_pad=False),
            F.adaptive_avg_pool2d(img, (3, 2)), F.group_norm(img, 2, torch.ones(4), torch.zeros(4)),
            F.layer_norm(img, (9, 9)), torch.bmm(img[0], img[1].transpose(1, 2)), img[0, 0] @ img[1, 1],
            torch.baddbmm(img[0], img[0], img[1], beta=0.5, alpha=2),
            F.scaled_dot_product_attention(img, img * 2, img + 1, is_causal=True),
            F.interpolate(img, scale_factor=2, mode="bilinear"))


@pytest.mark.parametrize("fn, make_args", [
    (_unary, lambda: (torch.randn(3, 5, 7),)),
    (_binary, lambda: (torch.randn(3, 5, 7), torch.randn(3, 5, 7))),
    (_reductions, lambda: (torch.randn(3, 5, 7),)),
    (_more_math, lambda: (torch.randn(3, 5, 7),)),
    (_shapes, lambda: (torch.randn(3, 5, 7), torch.randint(0, 5, (3, 4)))),
    (_nn, lambda: (torch.randn(2, 4, 9, 9), torch.randn(6, 4, 3, 3))),
], ids=["unary", "binary", "reductions", "more-math", "shapes", "nn"])
def test_converters_match_torch(fn, make_args):
    args = make_args()
    got, backend = compiled_with(fn, *args)
    want = fn(*args)
    assert backend.compiled and backend.compiled[0].compiled_graph is not None
    got_leaves, want_leaves = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for k, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, equal_nan=True, msg=lambda m: f"output {k}: {m}")


def test_taskloom_compile_takes_a_module_and_example_inputs(tmp_path):
    import taskloom
    from taskloom.errors import ArgumentError
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)).eval()
    x = torch.randn(4, 6)
    compiled = taskloom.compile(model, (x,))
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    compiled.save(tmp_path / "m.tlm")
    np.testing.assert_allclose(taskloom.load(tmp_path / "m.tlm")(x.numpy()), model(x).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(ArgumentError, match="example_inputs"):
        taskloom.compile(model)
    with pytest.raises(ArgumentError, match="already compiled"):
        taskloom.compile(compiled)


def test_compile_takes_modules_defined_inside_taskloom():
    """taskloom.compile reads a torch module as one even when its class lives in a taskloom
    package (the benchmark zoo's models do)."""
    class Small(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2.0
    Small.__module__ = "taskloom.bench.zoo"
    x = torch.randn(4, 8)
    out = taskloom.compile(Small(), (x,))(x.numpy())
    np.testing.assert_allclose(out[0] if isinstance(out, (list, tuple)) else out, (torch.relu(x) * 2).numpy())


def test_many_models_of_one_class_compile_in_one_process():
    """Each capture adds an entry to the cache of the class's forward until the model is
    collected; a ninth live model must not hit dynamo's recompile limit."""
    kept = []
    for i in range(10):
        model = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
        x = torch.randn(2, 4)
        compiled = taskloom.compile(model, (x,))
        kept.append((model, compiled))
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


def test_the_torch_frontend_imports_by_its_public_name():
    code = ("import sys, taskloom\n"
            "assert 'torch' not in sys.modules  # import taskloom never imports torch\n"
            "import taskloom.torch\n"
            "from taskloom.torch import compile\n"
            "assert taskloom.torch.compile is compile and taskloom.torch.register\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("mask", [None, "causal", "float", "bool"])
def test_scaled_dot_product_attention_is_one_kernel(mask):
    """torch's SDPA, decomposed into matmuls and its safe softmax, runs as taskloom's fused
    attention; a query whose every key is masked gets zeros, as in torch."""
    q, k, v = (torch.randn(2, 3, 20, 16) for _ in range(3))
    m = {None: None, "causal": None, "float": torch.randn(2, 1, 20, 20),
         "bool": torch.rand(20, 20) < 0.6}[mask]
    if mask == "float":
        m[:, :, 4] = -torch.inf  # query 4 sees no key
    if mask == "bool":
        m[4] = False

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=mask == "causal")
    out, backend = compiled_with(attend, q, k, v)
    torch.testing.assert_close(out, attend(q, k, v), **TOL)
    assert sum(k == ["attention"] or "attention" in k for k in kernels(backend)) == 1, kernels(backend)
    if mask in ("float", "bool"):
        assert torch.all(out[:, :, 4] == 0)
