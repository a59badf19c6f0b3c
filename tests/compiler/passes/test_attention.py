"""Attention fusion: the traced chain (matmul, scale, mask, softmax, matmul, with the head
reshapes between) becomes one attention node where a template serves it, and computes what
the chain computed; elsewhere the graph is left as it was."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.compiler.passes import optimize
from taskloom.compiler.passes.attention import fuse_attention
from taskloom.graph import Graph, input
from taskloom.ir import expr as E
from taskloom.target import CpuTarget, get_target
from tests.compiler.passes.helpers import ops_of

B, L, H, D = 2, 40, 3, 32
rng = np.random.default_rng(0)
CUDA = get_target("cuda:sm_80")


def traced(dtype="float16", mask_first=False, softmax_out=False) -> Graph:
    """Self-attention as a model traces it: heads split into (B*H, L, D), scores seen as
    (B, H, L, L) around the scale, mask and softmax."""
    x = input((B, L, H * D), dtype, name="x")
    mask = input((B, 1, 1, L), dtype, name="mask")
    w = [taskloom.asarray((rng.standard_normal((H * D, H * D)) * 0.1).astype(dtype)) for _ in range(3)]

    def split(t):
        return ops.reshape(ops.permute(ops.reshape(t, (B, L, H, D)), (0, 2, 1, 3)), (B * H, L, D))
    q, k, v = (split(ops.matmul(x, wi)) for wi in w)
    s = ops.reshape(ops.batch_matmul(q, ops.transpose(k, 1, 2)), (B, H, L, L))
    root = taskloom.asarray(np.array(np.sqrt(D), dtype))
    s = ops.div(ops.add(s, mask), root) if mask_first else ops.add(ops.div(s, root), mask)
    p = ops.softmax(s, axis=-1)
    o = ops.batch_matmul(ops.reshape(p, (B * H, L, L)), v)
    out = ops.reshape(ops.permute(ops.reshape(o, (B, H, L, D)), (0, 2, 1, 3)), (B, L, H * D))
    return Graph([x, mask], [out, p] if softmax_out else [out])


def feeds(dtype="float16"):
    return (rng.standard_normal((B, L, H * D)).astype(dtype),
            np.where(rng.random((B, 1, 1, L)) < 0.2, -1e4, 0).astype(dtype))


def test_the_chain_becomes_one_attention_node():
    before = optimize(traced())
    after = fuse_attention(before, CUDA)
    assert "softmax" in ops_of(before) and ops_of(before).count("batch_matmul") == 2
    assert ops_of(after).count("attention") == 1 and "softmax" not in ops_of(after)
    assert "batch_matmul" not in ops_of(after)


def test_left_alone_where_no_template_serves_it():
    graph = optimize(traced())
    assert fuse_attention(graph, CpuTarget.host()) is graph  # the CPU template takes float32
    graph32 = optimize(traced("float32"))
    assert fuse_attention(graph32, CUDA) is graph32  # the CUDA template takes 16-bit inputs
    shared = optimize(traced(softmax_out=True))
    assert fuse_attention(shared, CUDA) is shared  # the probabilities are read elsewhere too


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("mask_first", [False, True])
def test_the_fused_model_computes_what_the_chain_did(mask_first):
    graph = traced(mask_first=mask_first)
    x, mask = feeds()
    want = taskloom.compile(graph)(x, mask)
    compiled = taskloom.compile(graph, target="cuda:sm_80", device="emulator")
    np.testing.assert_allclose(compiled(x, mask).astype(np.float32), want.astype(np.float32), rtol=5e-3, atol=5e-3)
    assert sum("attention_cuda" in text for text in compiled.meta["kernel_ir"]) == 1


def sdpa_spelling(causal=False, all_test=True, onnx=False) -> Graph:
    """torch's scaled_dot_product_attention as its decomposition leaves it: the scale split
    over q and k, a constant causal mask added, and the safe softmax
    ``where(all(x == -inf), 0, softmax(x))`` (``all`` spelled with ``not``, ``sum`` and ``>``)."""
    q, k, v = (input((1, H, L, D), "float32", name=n) for n in "qkv")
    c = taskloom.asarray(np.array(D ** -0.25, "float32"))
    s = ops.reshape(ops.batch_matmul(ops.reshape(ops.mul(q, c), (H, L, D)),
                                     ops.reshape(ops.mul(ops.permute(k, (0, 1, 3, 2)), c), (H, D, L))), (1, H, L, L))
    if causal:
        s = ops.add(s, taskloom.asarray(np.triu(np.full((L, L), -np.inf, "float32"), 1)))
    if onnx:  # as its ONNX export spells the safe softmax: where(isnan(p), 0, p)
        p = ops.softmax(s, axis=3)
        p = ops.where(ops.unary("isnan", p, lambda v: E.ne(v, v)), taskloom.asarray(np.array(0, "float32")), p)
        out = ops.reshape(ops.batch_matmul(ops.reshape(p, (H, L, L)), ops.reshape(v, (H, L, D))), (1, H, L, D))
        return Graph([q, k, v], [out])
    hit = ops.equal(s, taskloom.asarray(np.array(-np.inf, "float32")))
    if all_test:
        none_free = ops.logical_not(ops.greater(ops.sum(ops.cast(ops.not_equal(ops.logical_not(hit), taskloom.asarray(
            np.array(0, "int64"))), "int32"), axis=3, keepdim=True), taskloom.asarray(np.array(0, "int64"))))
    else:  # "any score is -inf": not the safe softmax's test
        none_free = ops.greater(ops.sum(ops.cast(hit, "int32"), axis=3, keepdim=True), taskloom.asarray(np.array(0, "int64")))
    p = ops.where(none_free, taskloom.asarray(np.zeros((1, H, L, L), "float32")), ops.softmax(s, axis=3))
    out = ops.reshape(ops.batch_matmul(ops.reshape(p, (H, L, L)), ops.reshape(v, (H, L, D))), (1, H, L, D))
    return Graph([q, k, v], [out])


@pytest.mark.parametrize("causal, onnx", [(False, False), (True, False), (True, True)])
def test_torch_sdpa_spelling_becomes_one_node(causal, onnx):
    graph = optimize(sdpa_spelling(causal, onnx=onnx))
    after = fuse_attention(graph, CpuTarget.host())
    assert ops_of(after).count("attention") == 1
    assert not {"softmax", "where", "equal", "isnan", "sum", "add"} & set(ops_of(after))  # the mask: the causal flag
    [node] = [n for n in after.nodes if n.op == "attention"]
    assert node.task.attr("masked_rows") == "zero" and node.task.attr("causal") is causal
    feeds = [rng.standard_normal((1, H, L, D)).astype("float32") for _ in range(3)]
    np.testing.assert_allclose(taskloom.compile(sdpa_spelling(causal, onnx=onnx))(*feeds),
                               taskloom.compile(sdpa_spelling(causal, onnx=onnx), optimize=False)(*feeds),
                               rtol=1e-5, atol=1e-5)


def test_other_tests_and_masks_are_not_read_as_torchs():
    graph = optimize(sdpa_spelling(all_test=False))
    assert fuse_attention(graph, CpuTarget.host()) is graph  # "any -inf" is not "all -inf"
    q, k, v = (input((1, H, L, D), "float32", name=n) for n in "qkv")
    near = np.triu(np.full((L, L), -1e4, "float32"), 1)  # a large negative mask is a mask, not the causal flag
    s = ops.add(ops.batch_matmul(ops.reshape(q, (H, L, D)), ops.reshape(ops.permute(k, (0, 1, 3, 2)), (H, D, L))),
                taskloom.asarray(near))
    out = ops.batch_matmul(ops.softmax(s, axis=2), ops.reshape(v, (H, L, D)))
    after = fuse_attention(optimize(Graph([q, k, v], [out])), CpuTarget.host())
    [node] = [n for n in after.nodes if n.op == "attention"]
    assert node.task.attr("causal") is False and node.task.attr("masked_rows") == "nan" and len(node.inputs) == 4


def symbolic_sdpa(mask_of) -> Graph:
    """Attention over a symbolic batch and sequence, the mask added to the scores built from
    the sequence length by ``mask_of(batch, seq)`` (a (batch, seq, seq) float tensor)."""
    from taskloom.graph.tensor import Tensor, symbol
    from taskloom.ir.dtypes import float32
    batch, seq = symbol("batch"), symbol("seq")
    q, k, v = (Tensor((batch, H, seq, D), float32, name=n) for n in "qkv")
    s = ops.batch_matmul(ops.reshape(q, (batch * H, seq, D)), ops.transpose(ops.reshape(k, (batch * H, seq, D)), 1, 2))
    s = ops.add(ops.reshape(s, (batch, H, seq, seq)), ops.unsqueeze(mask_of(batch, seq), 1))
    p = ops.reshape(ops.softmax(s, axis=-1), (batch * H, seq, seq))
    return Graph([q, k, v], [ops.reshape(ops.batch_matmul(p, ops.reshape(v, (batch * H, seq, D))), (batch, H, seq, D))])


def test_a_mask_built_from_the_length_is_read_as_causal():
    from tests.graph.test_closed_form import causal_mask

    def strict(batch, seq):  # the key strictly before the query: not the causal test
        pos = ops.arange(seq)
        return ops.broadcast_to(ops.where(ops.less(ops.unsqueeze(pos, 0), ops.unsqueeze(pos, 1)), np.float32(0),
                                          np.float32(-np.inf)), (batch, seq, seq))
    [node] = [n for n in fuse_attention(optimize(symbolic_sdpa(causal_mask)), CpuTarget.host()).nodes
              if n.op == "attention"]
    assert node.task.attr("causal") is True and len(node.inputs) == 3  # no mask read
    [node] = [n for n in fuse_attention(optimize(symbolic_sdpa(strict)), CpuTarget.host()).nodes if n.op == "attention"]
    assert node.task.attr("causal") is False and len(node.inputs) == 4
    fused = taskloom.compile(symbolic_sdpa(causal_mask), dynamic={"batch": (1, 4), "seq": (1, 64)})
    chain = taskloom.compile(symbolic_sdpa(causal_mask), dynamic={"batch": (1, 4), "seq": (1, 64)}, optimize=False)
    for b, n in ((1, 1), (2, 19)):
        feeds = [rng.standard_normal((b, H, n, D)).astype("float32") for _ in range(3)]
        np.testing.assert_allclose(fused(*feeds), chain(*feeds), rtol=1e-5, atol=1e-5)
