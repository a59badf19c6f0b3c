"""On the GPU (``-m cuda``): the kernels the emulator checks on every machine, launched on
the device to the same answers. Each rule-scheduled operator, every config of the
tensor-core spaces (float16, bfloat16, tf32, and Hopper's wgmma) on odd shapes and both
factor layouts, odd
products through rows padded to 16 bytes, linears split along K, fused attention, the
16-byte elementwise kernels, and a transformer's row kernels in 16 bits against the emulator. Each case runs through :func:`launch`, which
takes ``device="emulator"`` too, so the harness itself is checked without a GPU."""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.compiler.passes.split_k import split_k
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.runtime.emulator.mma import tf32
from taskloom.schedule.cuda.attention import attention_kernel
from taskloom.schedule.cuda.matmul_mma import mma_candidate
from taskloom.schedule.cuda.mma_model import space, wgmma_space
from taskloom.schedule.attention import match_attention
from taskloom.target import CudaTarget
from tests.schedule.test_cuda_rules import CASES

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")]
rng = np.random.default_rng(7)
#: configs of a space per test: the space is split so that parallel workers share its builds
CHUNKS = 6


def on(device: str) -> tuple[CudaTarget, str]:
    """The target and torch device of ``device``: this GPU, or an H100's preset emulated."""
    return (CudaTarget.device(), "cuda") if device == "cuda" else (CudaTarget.from_arch("sm_90a"), "cpu")


def launch(module, name: str, args: list, device: str) -> None:
    """Runs kernel ``name`` on torch tensors (written in place) and waits for it."""
    module[name](*args)
    if device == "cuda":
        torch.cuda.synchronize()


@pytest.mark.parametrize("name, graph, reference", CASES, ids=[c[0] for c in CASES])
def test_each_rule_scheduled_operator(name, graph, reference, device="cuda"):
    target, where = on(device)
    inputs = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in graph.inputs]
    compiled = taskloom.compile(graph, target=target, device=device)
    got = compiled(*[torch.from_numpy(x).to(where) for x in inputs] if device == "cuda" else inputs)
    got = got[0] if isinstance(got, (list, tuple)) else got
    got = got.cpu().numpy() if hasattr(got, "cpu") else np.asarray(got)
    np.testing.assert_allclose(got, reference(inputs), rtol=2e-5, atol=2e-5)


def _product(M: int, K: int, N: int, a_k_inner: bool, b_k_inner: bool, dtype: str, batch: int = 1):
    """relu(A B) with A read [m][k] or transposed and B [k][n] or transposed: the graph and
    its two inputs' shapes."""
    a_shape = (batch, M, K) if a_k_inner else (batch, K, M)
    b_shape = (batch, N, K) if b_k_inner else (batch, K, N)
    ai, bi = input(a_shape, dtype, name="a"), input(b_shape, dtype, name="b")
    A = ai if a_k_inner else ops.transpose(ai, 1, 2)
    B = ops.transpose(bi, 1, 2) if b_k_inner else bi
    return Graph([ai, bi], [ops.relu(ops.matmul(A, B))])


def _space_case(dtype: str, chunk: int, device: str, layouts: tuple[bool, bool], shape=(2, 77, 91, 133),
                wgmma: bool = False):
    """Every CHUNKS-th config of ``dtype``'s space (``wgmma``: of the Hopper template's) from
    ``chunk`` on, in one build, each on one odd batched product, against torch in float64."""
    base, where = on(device)
    target = dataclasses.replace(base, tf32=dtype == "float32")
    batch, M, K, N = shape
    graph = _product(M, K, N, *layouts, dtype, batch)
    [group] = fuse_graph(graph)
    found = mma_candidate(group.task, target)
    assert found is not None, "the template should take this product"
    configs = (wgmma_space(target.shared_memory_per_block) if wgmma else space(4 if dtype == "float32" else 2))
    configs = configs[chunk::CHUNKS]
    fns = [found.build(c, f"mm{k}").fn for k, c in enumerate(configs)]
    module = taskloom.build(fns, target=target, device=device)
    t = getattr(torch, dtype)
    a, b = (torch.randn(tuple(int(d) for d in x.shape), dtype=torch.float32).to(t) for x in graph.inputs)
    if dtype == "float32":  # the tensor cores see tf32 factors
        a, b = torch.from_numpy(tf32(a.numpy())), torch.from_numpy(tf32(b.numpy()))
    A = a if layouts[0] else a.transpose(1, 2)
    B = b.transpose(1, 2) if layouts[1] else b
    want = torch.relu(A.double() @ B.double())
    by_name = {"a": a.to(where), "b": b.to(where)}
    for k, c in enumerate(configs):
        out = torch.full((batch, M, N), float("nan"), dtype=t, device=where)
        launch(module, f"mm{k}", [by_name[x.name] for x in group.inputs] + [out], device)
        tol = dict(rtol=2e-2, atol=1e-1) if dtype == "bfloat16" else dict(rtol=5e-3, atol=5e-2)
        torch.testing.assert_close(out.double().cpu(), want, **tol, msg=lambda m: f"config {c}: {m}")


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_every_float16_config_on_an_odd_product(chunk, device="cuda"):
    _space_case("float16", chunk, device, (True, False))


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_every_tf32_config_on_an_odd_product(chunk, device="cuda"):
    _space_case("float32", chunk, device, (True, chunk % 2 == 0))


@pytest.mark.parametrize("layouts", [(True, True), (False, False), (False, True)])
def test_factor_layouts_in_bfloat16_and_float16(layouts, device="cuda"):
    _space_case("bfloat16", 0, device, layouts, shape=(1, 130, 70, 40))
    _space_case("float16", 1, device, layouts, shape=(1, 40, 136, 72))


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_every_wgmma_config_on_an_odd_product(chunk, device="cuda"):
    if not on(device)[0].has_wgmma():
        pytest.skip("wgmma is Hopper's (sm_90a)")
    _space_case("float16", chunk, device, (True, False), shape=(2, 77, 200, 133), wgmma=True)


@pytest.mark.parametrize("layouts", [(True, True), (False, False), (False, True)])
def test_wgmma_factor_layouts_in_bfloat16(layouts, device="cuda"):
    if not on(device)[0].has_wgmma():
        pytest.skip("wgmma is Hopper's (sm_90a)")
    _space_case("bfloat16", 0, device, layouts, shape=(1, 130, 70, 72), wgmma=True)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_odd_products_through_rows_padded_to_16_bytes(dtype, device="cuda"):
    base, where = on(device)
    target = dataclasses.replace(base, tf32=dtype == "float32")
    a, b = input((2, 259, 261), dtype, name="a"), input((2, 261, 263), dtype, name="b")
    w = taskloom.asarray(np.random.default_rng(1).standard_normal((128, 261)).astype(dtype))
    compiled = taskloom.compile(Graph([a, b], [ops.matmul(a, b), ops.linear(a, w)]), target=target, device=device)
    assert [k["ops"] for k in compiled.meta["kernels"]][:2] == [["pad"], ["pad"]]
    x, y = (torch.randn(2, 259, 261).to(getattr(torch, dtype)), torch.randn(2, 261, 263).to(getattr(torch, dtype)))
    if dtype == "float32":
        x, y = torch.from_numpy(tf32(x.numpy())), torch.from_numpy(tf32(y.numpy()))
    got = compiled(x.to(where), y.to(where)) if device == "cuda" else compiled(x.numpy(), y.numpy())
    want = (x.double() @ y.double(), x.double() @ torch.from_numpy(w.numpy()).double().T)
    for g, e in zip(got, want):
        torch.testing.assert_close(torch.as_tensor(g).cpu().double(), e, rtol=5e-3, atol=6e-2)


@pytest.mark.parametrize("parts", [2, 8])
def test_a_linear_split_along_k(parts, device="cuda"):
    target, where = on(device)
    x = input((1, 128, 1024), "float16", name="x")
    w = torch.randn(96, 1024, dtype=torch.float16)
    b = torch.randn(96, dtype=torch.float16)
    graph = split_k(Graph([x], [ops.relu(ops.linear(x, taskloom.asarray(w.numpy()), taskloom.asarray(b.numpy())))]),
                    target, parts=parts)
    assert "split_k_partials" in [n.op for n in graph.nodes]
    compiled = taskloom.compile(graph, target=target, device=device)
    xs = torch.randn(1, 128, 1024, dtype=torch.float16)
    got = compiled(xs.to(where)) if device == "cuda" else compiled(xs.numpy())
    want = torch.relu(xs.double() @ w.double().T + b.double())
    torch.testing.assert_close(torch.as_tensor(got).cpu().double(), want, rtol=5e-3, atol=5e-2)


@pytest.mark.parametrize("B, L, S, H, D, mask, causal", [
    (1, 64, 64, 1, 64, False, False),
    (2, 37, 45, 3, 64, True, False),
    (1, 70, 130, 2, 32, False, True),
    (1, 50, 90, 2, 128, True, True),
    (2, 128, 128, 12, 64, True, False),  # BERT-base's heads at sequence 128
])
def test_fused_attention(B, L, S, H, D, mask, causal, device="cuda"):
    target, where = on(device)
    names = ("q", "k", "v")
    ins = [input((B, n, H, D), "float16", name=x) for x, n in zip(names, (L, S, S))]
    m = input((B, 1, 1, S), "float32", name="mask")
    heads = [ops.permute(t, (0, 2, 1, 3)) for t in ins]
    graph = Graph([*ins, m] if mask else ins, [ops.attention(*heads, mask=m if mask else None, causal=causal)])
    [group] = [g for g in fuse_graph(graph) if "attention" in g.ops]
    module = taskloom.build(attention_kernel(match_attention(group.task), "att"), target=target, device=device)
    data = {x: torch.randn(B, n, H, D, dtype=torch.float16) for x, n in zip(names, (L, S, S))}
    data["mask"] = torch.where(torch.rand(B, 1, 1, S) < 0.2, -1e4, 0.0)
    got = torch.full((B, H, L, D), float("nan"), dtype=torch.float16, device=where)
    launch(module, "att", [data[t.name].to(where) for t in group.inputs] + [got], device)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(data[x].float().permute(0, 2, 1, 3) for x in names), attn_mask=data["mask"] if mask else None,
        is_causal=causal)
    torch.testing.assert_close(got.float().cpu(), want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_sixteen_byte_elementwise_kernels(dtype, device="cuda"):
    target, where = on(device)
    x, b = input((64, 768), dtype, name="x"), input((768,), dtype, name="b")
    compiled = taskloom.compile(Graph([x, b], [ops.gelu(x + b)]), target=target, device=device)
    xs = torch.randn(64, 768).to(getattr(torch, dtype)), torch.randn(768).to(getattr(torch, dtype))
    got = compiled(*[v.to(where) for v in xs]) if device == "cuda" else compiled(*[v.numpy() for v in xs])
    got = torch.as_tensor(got[0] if isinstance(got, (list, tuple)) else got).cpu().float()
    want = torch.nn.functional.gelu((xs[0] + xs[1]).float())
    torch.testing.assert_close(got, want, rtol=2e-3 if dtype == "float16" else 1e-5, atol=2e-3)


def _row_kernels(dtype: str) -> tuple[Graph, list[np.ndarray]]:
    """A transformer's kernels that are not products, in 16 bits at BERT-base's sizes: the
    embeddings summed and layer-normed, a masked softmax over 12 heads, a bias and GELU
    (weights are inputs too: a bfloat16 constant has no numpy array)."""
    shapes = {"ids": (1, 128), "table": (1000, 768), "pos": (128, 768), "gamma": (768,), "beta": (768,),
              "scores": (1, 12, 128, 128), "mask": (1, 1, 1, 128), "x": (1, 128, 3072), "bias": (3072,)}
    t = {n: input(shape, "int64" if n == "ids" else dtype, name=n) for n, shape in shapes.items()}
    normed = ops.layer_norm(ops.embedding(t["ids"], t["table"]) + t["pos"], (768,), t["gamma"], t["beta"], eps=1e-12)
    probs = ops.softmax(t["scores"] * 0.125 + t["mask"], axis=-1)
    graph = Graph(list(t.values()), [normed, probs, ops.gelu(t["x"] + t["bias"])])
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n, shape in shapes.items()}
    feeds["ids"] = rng.integers(0, 1000, (1, 128)).astype(np.int64)
    feeds["scores"] *= 4
    feeds["mask"] = np.where(rng.random((1, 1, 1, 128)) < 0.2, -1e4, 0.0).astype(np.float32)
    return graph, list(feeds.values())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_transformer_s_row_kernels_in_16_bits_match_the_emulator(dtype, device="cuda"):
    # these kernels had run on the GPU in float32 only; the same library runs on the device and
    # in the emulator, whose answers must agree (up to the last bit of exp, erf and rsqrt)
    target, where = on(device)
    graph, feeds = _row_kernels(dtype)
    tdtype = getattr(torch, dtype)
    ins = [torch.from_numpy(f) if k == 0 else torch.from_numpy(f).to(tdtype) for k, f in enumerate(feeds)]
    compiled = taskloom.compile(graph, target=target, device=device)
    emulated = taskloom.compile(graph, target=target, device="emulator")
    got = compiled(*[t.to(where) for t in ins])
    want = emulated(*ins)
    ids, table, pos, gamma, beta, scores, mask, x, bias = (t.float() for t in ins)
    F = torch.nn.functional
    exact = (F.layer_norm(table[ins[0]] + pos, (768,), gamma, beta, eps=1e-12),
             torch.softmax(scores * 0.125 + mask, dim=-1), F.gelu(x + bias))
    for g, w, e in zip(got, want, exact):
        torch.testing.assert_close(torch.as_tensor(g).cpu().float(), torch.as_tensor(w).float(), rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(torch.as_tensor(w).float(), e, rtol=5e-2, atol=5e-2)
