"""The CPU attention template: one kernel per attention, read through the fused head split
and merge, to torch's answer (padding, full and bool masks, causal, ragged blocks, head
sizes that leave tiles short, fully masked rows), on both vector widths; the scores go
through ``score()`` as vectors where the mask allows, lane by lane where it does not."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.backend.codegen_x86 import codegen_x86
from taskloom.graph.fusion import fuse_graph
from taskloom.ir import stmt as S
from taskloom.schedule.attention import match_attention
from taskloom.schedule.templates.attention_cpu import AttentionConfig, attention_kernel, choose_config
from taskloom.target import CpuTarget, get_target
from taskloom.transforms import lower

torch = pytest.importorskip("torch")
rng = np.random.default_rng(0)
AVX2 = get_target("cpu -isa=avx2")


def heads(t):
    return ops.permute(t, (0, 2, 1, 3))  # (B, L, H, D) -> (B, H, L, D), fused as a prologue


def attention_graph(B, L, S, H, D, Ev=None, mask=None, causal=False, masked_rows="zero"):
    """q, k, v as (B, n, H, D) inputs, the heads merged back after: (graph, input names)."""
    Ev = Ev or D
    ins = [input((B, n, H, d), "float32", name=x) for x, n, d in zip("qkv", (L, S, S), (D, D, Ev))]
    shapes = {"pad": (B, 1, 1, S), "full": (B, H, L, S), "bool": (L, S)}
    m = input(shapes[mask], "bool" if mask == "bool" else "float32", name="mask") if mask else None
    out = ops.attention(*(heads(t) for t in ins), mask=m, causal=causal, masked_rows=masked_rows)
    out = ops.reshape(heads(out), (B, L, H * Ev))  # the heads merged (a kernel of its own)
    return Graph([*ins, m] if m is not None else ins, [out])


def data(B, L, S, H, D, Ev=None, mask=None):
    Ev = Ev or D
    arrays = {x: rng.standard_normal((B, n, H, d)).astype(np.float32) for x, n, d in zip("qkv", (L, S, S), (D, D, Ev))}
    if mask == "pad":
        # (the first key never masked: a row with every key masked is its own test, since a
        # plain softmax gives it NaN where torch's attention gives zeros)
        arrays["mask"] = np.where(rng.random((B, 1, 1, S)) < 0.3, -np.inf, 0).astype(np.float32)
        arrays["mask"][..., 0] = 0
    elif mask == "full":
        arrays["mask"] = rng.standard_normal((B, H, L, S)).astype(np.float32)
    elif mask == "bool":
        arrays["mask"] = rng.random((L, S)) < 0.7
    return arrays


def sdpa(arrays, B, L, H, causal):
    q, k, v = (torch.from_numpy(arrays[x]).permute(0, 2, 1, 3) for x in "qkv")
    m = torch.from_numpy(arrays["mask"]) if "mask" in arrays else None
    if causal and m is not None:  # (torch takes one or the other)
        above = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
        m, causal = (m & ~above if m.dtype == torch.bool else m.masked_fill(above, -torch.inf)), False
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal)
    return out.permute(0, 2, 1, 3).reshape(B, L, -1).numpy()


def check(B, L, S, H, D, Ev=None, mask=None, causal=False, target=None):
    graph = attention_graph(B, L, S, H, D, Ev, mask, causal)
    compiled = taskloom.compile(graph, target=target)
    kernels = [k["schedule"] for k in compiled.meta["kernels"]]
    assert sum(k.startswith("attention_cpu") for k in kernels) == 1, kernels
    arrays = data(B, L, S, H, D, Ev, mask)
    got = compiled(*(arrays[t.name] for t in graph.inputs))
    np.testing.assert_allclose(got, sdpa(arrays, B, L, H, causal), rtol=2e-5, atol=2e-5)
    return compiled


@pytest.mark.parametrize("B, L, S, H, D, Ev, mask, causal", [
    (1, 64, 64, 1, 64, None, None, False),
    (2, 37, 45, 3, 64, None, "pad", False),   # ragged query and key blocks, a padding mask
    (1, 70, 130, 2, 32, None, None, True),    # causal over three key blocks
    (1, 50, 90, 2, 24, 20, "full", True),     # a mask along the queries: scores lane by lane
    (1, 7, 7, 2, 5, 13, "bool", False),       # tiny: one vector of queries, short value tiles
])
@pytest.mark.parametrize("isa", ["host", "avx2"])
def test_matches_torch(B, L, S, H, D, Ev, mask, causal, isa):
    check(B, L, S, H, D, Ev, mask, causal, target=AVX2 if isa == "avx2" else None)


@settings(max_examples=4, deadline=None)
@given(L=st.integers(1, 80), S=st.integers(1, 150), D=st.integers(1, 40), causal=st.booleans(),
       mask=st.sampled_from([None, "pad", "full"]))
def test_any_sizes(L, S, D, causal, mask):
    check(1, L, S, 2, D, mask=mask, causal=causal)


def test_fully_masked_rows_give_zeros_or_nan():
    B, L, S, H, D = 1, 20, 30, 1, 16
    arrays = data(B, L, S, H, D)
    full = np.zeros((B, H, L, S), np.float32)
    full[..., 3, :] = -np.inf  # query 3 sees no key
    arrays["mask"] = full
    for rows in ("zero", "nan"):
        graph = attention_graph(B, L, S, H, D, mask="full", masked_rows=rows)
        got = taskloom.compile(graph)(*(arrays[t.name] for t in graph.inputs))
        want = sdpa(arrays, B, L, H, False)
        assert (np.all(got[:, 3] == 0) if rows == "zero" else np.all(np.isnan(got[:, 3])))
        np.testing.assert_allclose(np.delete(got, 3, axis=1), np.delete(want, 3, axis=1), rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(want[:, 3], 0)  # (torch gives zeros there)


def _kernel(mask, config=None, target=AVX2):
    graph = attention_graph(1, 40, 40, 2, 16, mask=mask)
    [group] = [g for g in fuse_graph(graph) if "attention" in g.ops]
    att = match_attention(group.task)
    return att, attention_kernel(att, config or choose_config(att, target), target, "att")


def test_scores_vectorize_unless_the_mask_varies_along_the_queries():
    def source(mask):
        return codegen_x86(S.Module((lower(_kernel(mask)[1]),)), AVX2)
    assert "lane by lane" not in source("pad") and "lane by lane" in source("full")


def test_config_fits_the_registers():
    att = match_attention(next(g for g in fuse_graph(attention_graph(1, 5, 300, 1, 64)) if "attention" in g.ops).task)
    assert choose_config(att, AVX2) == AttentionConfig(qv=1, jr=4, er=4, bk=64)
    big = CpuTarget.host().with_isa("avx512") if "avx512f" in CpuTarget.host().isa else None
    if big is not None:
        assert choose_config(att, big).jr == 8
    with pytest.raises(taskloom.errors.ScheduleError, match="vector registers"):
        attention_kernel(att, AttentionConfig(qv=2, jr=8, er=8, bk=64), AVX2, "att")


@pytest.mark.parametrize("mask, causal", [("pad", False), (None, True)])
def test_symbolic_lengths_one_kernel_for_every_size(mask, causal):
    """Batch and sequence as symbols: the traced chain still becomes one attention kernel,
    which serves every size; a padding mask sized by the sequence."""
    from taskloom.graph.tensor import Tensor, symbol
    from taskloom.ir.dtypes import float32
    B, L, H, D = symbol("batch"), symbol("seq"), 2, 16
    q, k, v = (Tensor((B, L, H, D), float32, name=n) for n in "qkv")
    m = Tensor((B, 1, 1, L), float32, name="mask")

    def split(t):
        return ops.reshape(heads(t), (B * H, L, D))
    s = ops.reshape(ops.batch_matmul(split(q), ops.transpose(split(k), 1, 2)), (B, H, L, L))
    s = ops.mul(s, taskloom.asarray(np.array(D ** -0.5, "float32")))
    s = ops.add(s, m) if mask else s
    p = ops.softmax(s, axis=-1)
    out = ops.batch_matmul(ops.reshape(p, (B * H, L, L)), split(v))
    graph = Graph([q, k, v, m] if mask else [q, k, v], [ops.reshape(out, (B, H, L, D))])
    if causal:  # a causal mask built from the symbolic sequence, as dynamo traces it
        i = ops.arange(L)
        above = ops.greater(ops.unsqueeze(i, 0), ops.unsqueeze(i, 1))
        s2 = ops.where(above, taskloom.asarray(np.array(-np.inf, "float32")), s)
        p = ops.softmax(s2, axis=-1)
        out = ops.batch_matmul(ops.reshape(p, (B * H, L, L)), split(v))
        graph = Graph([q, k, v], [ops.reshape(out, (B, H, L, D))])
    compiled = taskloom.compile(graph, dynamic={"batch": (1, 4), "seq": (1, 100)})
    assert sum(k["schedule"].startswith("attention_cpu") for k in compiled.meta["kernels"]) == (0 if causal else 1)
    if not causal:  # a block of one vector of queries up to 8 (sample points 1 and 8), two past
        assert [sorted(set(t)) for t in compiled.meta["dynamic"]["variants"] if len(set(t)) > 1] == [[0, 1]]
    for b, n in ((1, 1), (2, 37), (3, 100), (2, 7), (1, 20)):  # (20: the one-vector variant, two blocks)
        arrays = data(b, n, n, H, D, mask=mask)
        got = compiled(*(arrays[t.name] for t in graph.inputs))
        want = sdpa(arrays, b, n, H, causal).reshape(b, n, H, D).transpose(0, 2, 1, 3)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
