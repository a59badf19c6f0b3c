"""Lowering dynamo's graph to core ATen operators with torch's own decompositions.

Dynamo hands a backend an fx graph of torch-level calls (``torch.nn.functional.linear``,
tensor methods, ...). Instead of mapping each of those, the graph is re-traced with
``make_fx`` under ``torch.no_grad()``: functionalized (in-place operators become their
functional forms) and decomposed by ``torch._decomp.core_aten_decompositions()``, so that
what remains is the small, stable core ATen operator set (``aten.addmm``,
``aten.convolution``, ``aten._softmax``, ...), which :mod:`taskloom.frontend.torch_aten`
maps.

Two fused inference kernels that torch does not decompose are decomposed here: the fast
paths ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention`` take in eval mode under
``no_grad`` (``aten._transformer_encoder_layer_fwd`` and
``aten._native_multi_head_attention``), written with torch functions that decompose further.
They cover calls without a mask; with a mask the operator stays and is reported as unsupported.

A ``matmul`` of two operands of three or more dimensions (attention's two products) is traced
as one ``taskloom::matmul`` node (:func:`batched_products_whole`) rather than decomposed:
torch's decomposition is reshapes around a ``bmm`` that taskloom's ``matmul`` does not need,
and with symbolic sizes it is a large share of the trace's time.

A restride (``aten.as_strided`` or ``as_strided_``, as in the pooler of Swin) of a contiguous
input that reads a dense block of it -- its strides those of a contiguous tensor, up to an
order of the dimensions -- is rewritten as the view, slice and permute it amounts to
(:func:`restrides_as_views`); any other restride stays, for the fallback to run in PyTorch.
"""
from __future__ import annotations

import operator
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch._decomp import core_aten_decompositions, get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


def _multi_head_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, embed_dim: int,
                          num_head: int, qkv_weight: torch.Tensor, qkv_bias: torch.Tensor,
                          proj_weight: torch.Tensor, proj_bias: torch.Tensor, mask: Any = None,
                          need_weights: bool = True, average_attn_weights: bool = True,
                          mask_type: Any = None) -> Any:
    """``aten._native_multi_head_attention`` for batch-first (B, L, E) inputs without a mask."""
    if mask is not None:
        return NotImplemented
    batch, length, _ = query.shape
    source = key.shape[1]
    head = embed_dim // num_head
    wq, wk, wv = qkv_weight.split(embed_dim, 0)
    bq, bk, bv = qkv_bias.split(embed_dim, 0)
    q = F.linear(query, wq, bq).view(batch, length, num_head, head).transpose(1, 2)
    k = F.linear(key, wk, bk).view(batch, source, num_head, head).transpose(1, 2)
    v = F.linear(value, wv, bv).view(batch, source, num_head, head).transpose(1, 2)
    weights = torch.softmax((q * head ** -0.5) @ k.transpose(-2, -1), -1)
    out = (weights @ v).transpose(1, 2).reshape(batch, length, embed_dim)
    out = F.linear(out, proj_weight, proj_bias)
    if not need_weights:
        return out, query.new_empty((0,))
    return out, (weights.mean(1) if average_attn_weights else weights)


def _transformer_encoder_layer(src: torch.Tensor, embed_dim: int, num_heads: int, qkv_weight: torch.Tensor,
                               qkv_bias: torch.Tensor, proj_weight: torch.Tensor, proj_bias: torch.Tensor,
                               use_gelu: bool, norm_first: bool, eps: float,
                               norm_weight_1: torch.Tensor, norm_bias_1: torch.Tensor,
                               norm_weight_2: torch.Tensor, norm_bias_2: torch.Tensor,
                               ffn_weight_1: torch.Tensor, ffn_bias_1: torch.Tensor,
                               ffn_weight_2: torch.Tensor, ffn_bias_2: torch.Tensor,
                               mask: Any = None, mask_type: Any = None) -> Any:
    """``aten._transformer_encoder_layer_fwd`` (nn.TransformerEncoderLayer's fast path) without a mask."""
    if mask is not None:
        return NotImplemented

    def norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (embed_dim,), w, b, eps)
    x = norm(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = _multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                              need_weights=False)[0] + src
    if not norm_first:
        x = norm(x, norm_weight_1, norm_bias_1)
    residual = x
    if norm_first:
        x = norm(x, norm_weight_2, norm_bias_2)
    hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
    hidden = F.gelu(hidden) if use_gelu else F.relu(hidden)
    x = F.linear(hidden, ffn_weight_2, ffn_bias_2) + residual
    return norm(x, norm_weight_2, norm_bias_2) if not norm_first else x


#: Decompositions of fused torch kernels that torch's own table leaves alone.
FAST_PATH_DECOMPOSITIONS = {
    aten._native_multi_head_attention.default: _multi_head_attention,
    aten._transformer_encoder_layer_fwd.default: _transformer_encoder_layer,
}


#: Operators outside torch's core set that torch nevertheless knows how to decompose.
EXTRA_TORCH_DECOMPOSITIONS = [aten.upsample_bilinear2d, aten.upsample_nearest2d, aten.roll]


def decomposition_table() -> dict[Any, Any]:
    """torch's core ATen decompositions, its decompositions of
    :data:`EXTRA_TORCH_DECOMPOSITIONS`, and :data:`FAST_PATH_DECOMPOSITIONS`."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(EXTRA_TORCH_DECOMPOSITIONS))
    table.update(FAST_PATH_DECOMPOSITIONS)
    return table


@torch.library.custom_op("taskloom::matmul", mutates_args=())
def batched_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.matmul`` of operands of three or more dimensions, kept whole through the trace."""
    return torch.matmul(a, b)


@batched_matmul.register_fake
def _batched_matmul_shape(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return a.new_empty((*batch, a.shape[-2], b.shape[-1]))


MATMULS = (torch.matmul, operator.matmul, torch.Tensor.matmul)


def batched_products_whole(gm: torch.fx.GraphModule) -> None:
    """Rewrites in place each ``torch.matmul`` (or ``@``) of two operands of three or more
    dimensions into :func:`batched_matmul`, which the trace records as one node. torch's own
    decomposition of it reshapes to a ``bmm`` through broadcast checks that cost tens of
    milliseconds a product on symbolic sizes (attention's two products a layer), and
    taskloom's ``matmul`` takes the batched product as it is."""
    changed = False
    for node in gm.graph.nodes:
        is_call = node.op == "call_function" and node.target in MATMULS \
            or node.op == "call_method" and node.target == "matmul"
        if not is_call or len(node.args) != 2 or node.kwargs:
            continue
        values = [a.meta.get("example_value") if isinstance(a, torch.fx.Node) else None for a in node.args]
        if all(isinstance(v, torch.Tensor) and v.dim() >= 3 for v in values) \
                and values[0].dtype == values[1].dtype:
            node.op, node.target = "call_function", torch.ops.taskloom.matmul.default
            changed = True
    if changed:
        gm.recompile()


def lower_to_aten(gm: torch.fx.GraphModule, args: Sequence[Any], symbolic: bool = False) -> torch.fx.GraphModule:
    """``gm`` re-traced on ``args`` (real tensors) as a graph of core ATen operators, functional
    (no in-place operators), for inference. Each node's ``meta['val']`` records the shape and
    dtype torch computes for it.

    ``symbolic``: traced instead on dynamo's fake inputs, in its shape environment, so that
    sizes stay SymInts (:mod:`~taskloom.frontend.torch_symbolic`); not functionalized, which
    would specialize them (the converter applies in-place operators to later readers)."""
    batched_products_whole(gm)
    if symbolic:
        from taskloom.frontend.torch_symbolic import traced_inputs
        with torch.no_grad(), traced_inputs(gm, args) as inputs:
            lowered = make_fx(gm, decomposition_table=decomposition_table(), tracing_mode="symbolic")(*inputs)
    else:
        functional = torch.func.functionalize(gm, remove="mutations")
        with torch.no_grad():
            lowered = make_fx(functional, decomposition_table=decomposition_table(), tracing_mode="real")(*args)
    restrides_as_views(lowered)
    return lowered


RESTRIDES = (aten.as_strided.default, aten.as_strided_.default)


def dense_restride(node: torch.fx.Node) -> tuple[int, list[int], list[int]] | None:
    """For an ``as_strided`` node over a contiguous input whose result is a dense block of that
    input: (the block's offset, the block's shape in memory order, the permutation of that
    shape giving the result); None for any other restride."""
    x, size, stride = node.args[0], node.args[1], node.args[2]
    offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    xv = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(xv, torch.Tensor) or not xv.is_contiguous() \
            or not all(isinstance(v, int) and v >= 0 for v in (*size, *stride)) or 0 in size \
            or xv.numel() == 0:
        return None
    start = 0 if offset is None else offset - xv.storage_offset()
    # the dimensions of more than one element, outermost (largest stride) first, must tile a block
    order = sorted((d for d in range(len(size)) if size[d] > 1), key=lambda d: -stride[d])
    numel = 1
    for d in reversed(order):
        if stride[d] != numel:
            return None
        numel *= size[d]
    if not 0 <= start <= xv.numel() - numel:
        return None
    if order == sorted(order):  # already row-major: a reshape
        return start, list(size), list(range(len(size)))
    memory = order + [d for d in range(len(size)) if size[d] == 1]
    return start, [size[d] for d in memory], [memory.index(d) for d in range(len(size))]


def restrides_as_views(gm: torch.fx.GraphModule) -> None:
    """Rewrites in place every restride that :func:`dense_restride` reads as a block of its
    contiguous input into ``view``, ``slice`` and ``permute`` nodes. After an in-place
    ``as_strided_``, later readers of its input read the rewritten view."""
    graph, changed = gm.graph, False
    position = {n: k for k, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        plan = dense_restride(node) if node.op == "call_function" and node.target in RESTRIDES else None
        if plan is None:
            continue
        x, (start, shape, perm) = node.args[0], plan
        with graph.inserting_before(node):
            view = _block_view(graph, x, start, shape, perm)
        view.meta = dict(node.meta)
        node.replace_all_uses_with(view)
        if node.target is aten.as_strided_.default:
            for user in [u for u in x.users if position.get(u, -1) > position[node]]:
                user.replace_input_with(x, view)
        graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()


def _block_view(graph: torch.fx.Graph, x: torch.fx.Node, start: int, shape: list[int],
                perm: list[int]) -> torch.fx.Node:
    """The nodes reading ``shape`` elements of contiguous ``x`` from ``start`` on, permuted by ``perm``."""
    xv = x.meta["val"]
    numel = 1
    for s in shape:
        numel *= s

    def add(target: Any, args: tuple, out_shape: list[int]) -> torch.fx.Node:
        node = graph.call_function(target, args)
        node.meta["val"] = torch.empty(out_shape, dtype=xv.dtype, device="meta")
        return node
    if start != 0 or numel != xv.numel():
        x = add(aten.view.default, (x, [xv.numel()]), [xv.numel()])
        x = add(aten.slice.Tensor, (x, 0, start, start + numel), [numel])
    out = add(aten.view.default, (x, shape), shape)
    if perm != list(range(len(perm))):
        out = add(aten.permute.default, (out, perm), [shape[p] for p in perm])
    return out
