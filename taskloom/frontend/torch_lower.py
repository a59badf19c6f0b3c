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
"""
from __future__ import annotations

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


def lower_to_aten(gm: torch.fx.GraphModule, args: Sequence[Any]) -> torch.fx.GraphModule:
    """``gm`` re-traced on ``args`` (real tensors) as a graph of core ATen operators, functional
    (no in-place operators), for inference. Each node's ``meta['val']`` records the shape and
    dtype torch computes for it."""
    functional = torch.func.functionalize(gm, remove="mutations")
    with torch.no_grad():
        return make_fx(functional, decomposition_table=decomposition_table(), tracing_mode="real")(*args)
