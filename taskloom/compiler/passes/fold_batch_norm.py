"""Batch-norm folding: an inference batch_norm right after a conv2d or a linear layer is an
affine map per output channel, so it is folded into that layer's weight and bias.

    batch_norm(conv2d(x, W, b), mean, var, gamma, beta, eps)
      == conv2d(x, W * s[o], (b - mean) * s + beta)      with s = gamma / sqrt(var + eps)

Applies when the layer's output is read by the batch_norm alone (and is no graph output),
the layer's weight and bias and the batch_norm's statistics and parameters are all
constants, and the batch_norm's channel axis (axis 1) is the layer's output-channel axis:
a 4-d (N, C, H, W) conv2d output, or a 2-d (N, C) linear output. The folded parameters are
computed in float64 and rounded once to the layer's dtype.
"""
from __future__ import annotations

import numpy as np

from taskloom import ops
from taskloom.graph.graph import Graph, Node
from taskloom.compiler.passes.rewrite import Rewrite, rewrite
from taskloom.graph.tensor import Tensor, asarray

_LAYERS = {"conv2d": 4, "linear": 2}  # layer -> rank of the output whose axis 1 is its channel


def named_inputs(node: Node, inputs: list[Tensor]) -> dict[str, Tensor]:
    """The node's inputs by the names of its task's placeholders (x, weight, bias, ...)."""
    return {p.name: t for p, t in zip(node.task.inputs, inputs)}


def _f64(t: Tensor) -> np.ndarray:
    return t.numpy().astype(np.float64)


def _fold(node: Node, inputs: list[Tensor], ctx: Rewrite) -> list[Tensor] | None:
    if node.op != "batch_norm":
        return None
    y = node.inputs[0]
    layer = y.producer[0] if y.producer is not None else None
    if layer is None or _LAYERS.get(layer.op) != len(y.shape) or not ctx.only_read_by(y, node) \
            or layer.task.attr("layout", "NCHW") != "NCHW":  # an NHWC conv's channels are not axis 1
        return None
    bn = named_inputs(node, inputs)
    lp = named_inputs(layer, [ctx.new(t) for t in layer.inputs])
    params = [t for k, t in (*bn.items(), *lp.items()) if k != "x"]
    if not all(t.is_concrete for t in params):
        return None
    dt = lp["weight"].dtype
    w = _f64(lp["weight"])
    scale = 1.0 / np.sqrt(_f64(bn["running_var"]) + float(node.task.attr("eps")))
    if "weight" in bn:
        scale = scale * _f64(bn["weight"])
    bias = (_f64(lp["bias"]) if "bias" in lp else 0.0) - _f64(bn["running_mean"])
    bias = bias * scale + (_f64(bn["bias"]) if "bias" in bn else 0.0)
    w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    new_w, new_b = asarray(w.astype(dt.numpy)), asarray(bias.astype(dt.numpy))
    if layer.op == "linear":
        return [ops.linear(lp["x"], new_w, new_b)]
    a = layer.task.attr
    return [ops.conv2d(lp["x"], new_w, new_b, stride=a("stride"), padding=a("padding"),
                       dilation=a("dilation"), groups=a("groups"))]


def fold_batch_norm(graph: Graph) -> Graph:
    """``graph`` with each batch_norm that follows a conv2d or linear layer folded into the
    layer's weight and bias (see the module docstring for when it applies)."""
    return rewrite(graph, _fold)
