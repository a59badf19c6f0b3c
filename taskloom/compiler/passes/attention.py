"""Attention fusion: the chain a model's attention traces into (a matmul of queries and
keys, a scale, a mask, a softmax over the keys, a matmul with the values) becomes one
:func:`taskloom.ops.attention` node, where the target has a template that computes it in
one pass (the scores never stored).

    matmul(softmax(matmul(q, kᵀ) * c + mask), v)  ->  attention(q, k, v, mask, scale=c)

Between the two matmuls and the softmax the chain may hold reshapes that only regroup the
leading (batch) axes (heads seen as ``(B*H, L, S)`` on one side and ``(B, H, L, S)`` on the
other), multiplications and divisions by a constant scalar, and one addition of a mask
(scaled by the scalars after it). Each link must be read only by the next. The new node is
kept only where a template of the target's kind serves its task; elsewhere the graph stays
as it was.

Two spellings of torch's ``scaled_dot_product_attention`` decomposed are read too: its safe
softmax, ``where(all(x == -inf), 0, softmax(x))`` or, exported to ONNX,
``where(isnan(p), 0, p)`` (a query whose every key is masked gets zeros: the node's
``masked_rows="zero"``; a plain softmax gives NaN there, ``"nan"``), and
its causal mask, a constant that is -inf above the diagonal and 0 elsewhere (the node's
``causal=True``, so a template skips the masked blocks instead of reading the mask). With a
symbolic sequence length the mask is computed from the length (positions compared, as
transformers builds it); it is read as causal when its closed form
(:mod:`taskloom.graph.closed_form`) is that test, for every length.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from taskloom import ops
from taskloom.compiler.passes.dead_nodes import eliminate_dead_nodes
from taskloom.compiler.passes.rewrite import Rewrite, rewrite
from taskloom.graph.closed_form import closed_form
from taskloom.graph.graph import Graph, Node
from taskloom.graph.tensor import Tensor
from taskloom.ir import expr as E
from taskloom.ir.arith import simplify_expr
from taskloom.ir.dtypes import boolean
from taskloom.schedule.select import find_candidate
from taskloom.target.base import Target

_MATMULS = ("matmul", "batch_matmul")


def _producer(t: Tensor) -> Node | None:
    return t.producer[0] if t.producer is not None else None


def _leading_reshape(node: Node) -> bool:
    x, y = node.inputs[0], node.outputs[0]
    return node.op == "reshape" and x.ndim >= 2 and y.ndim >= 2 and tuple(x.shape[-2:]) == tuple(y.shape[-2:])


def _scalar(t: Tensor, floats_only: bool = True) -> float | None:
    """The value of a constant tensor of one element (a float one unless ``floats_only`` is
    False), else None."""
    if not t.is_concrete:
        return None
    a = t.numpy()
    return float(a.reshape(())) if a.size == 1 and (a.dtype.kind == "f" or not floats_only) else None


def _operands(node: Node) -> tuple[Tensor, Tensor, bool, bool]:
    """A matmul's ``(a, b, transpose_a, transpose_b)``."""
    a = node.task.attr
    return node.inputs[0], node.inputs[1], bool(a("transpose_a", False)), bool(a("transpose_b", False))


@dataclass
class _Scores:
    """The first matmul and what lies between it and the softmax: the softmax's input is
    ``product * scale + mask * mask_scale`` (``mask`` broadcast to ``mask_shape``)."""

    product: Node
    scale: float = 1.0
    mask: Tensor | None = None
    mask_scale: float = 1.0
    mask_shape: tuple = ()


def _scores(probs: "_Probabilities", ctx: Rewrite) -> _Scores | None:
    """Walk up from the softmax's input to the first matmul; None where a link does not fit."""
    softmax = probs.softmax
    reader, x = softmax, softmax.inputs[0]
    found = _Scores(softmax)  # product filled in at the matmul
    while True:
        node = _producer(x)
        if node is None:
            return None
        if reader is softmax and probs.test is not None:  # the safe softmax's test reads it too
            if id(x) in ctx._outputs or ctx.uses(x) != 2 or not any(t is x for t in probs.test.inputs):
                return None
        elif not ctx.only_read_by(x, reader):
            return None
        if node.op in _MATMULS:
            found.product = node
            return found
        if _leading_reshape(node):
            reader, x = node, node.inputs[0]
            continue
        if node.op not in ("mul", "div", "add") or len(node.inputs) != 2:
            return None
        a, b = node.inputs
        if node.op == "add":  # one side comes from the matmul, the other is the mask
            if found.mask is not None:
                return None
            up, mask = (a, b) if _on_path(a) else (b, a)
            found.mask, found.mask_scale, found.mask_shape = mask, found.scale, tuple(node.outputs[0].shape)
            reader, x = node, up
            continue
        c, up = (_scalar(b), a) if _scalar(b) is not None or node.op == "div" else (_scalar(a), b)
        if c is None or c == 0 or not math.isfinite(c):
            return None
        found.scale *= 1.0 / c if node.op == "div" else c
        reader, x = node, up


def _on_path(t: Tensor) -> bool:
    """Whether ``t`` is made by a link the chain may hold (so it leads to the matmul)."""
    node = _producer(t)
    return node is not None and (node.op in (*_MATMULS, "mul", "div") or _leading_reshape(node))


@dataclass
class _Probabilities:
    """The softmax a chain's second matmul reads; whether a query whose every key is masked
    gets zeros (a safe softmax), and for torch's spelling of one the node of its test that
    reads the scores too."""

    softmax: Node
    masked_zero: bool = False
    test: Node | None = None


def _softmax_above(node: Node, ctx: Rewrite) -> _Probabilities | None:
    """The softmax whose probabilities ``node`` (a matmul) reads as its ``a`` operand through
    leading-axis reshapes, or through a safe softmax's ``where``, each link read only by the
    next; None where there is none."""
    a, _, transpose_a, _ = _operands(node)
    if transpose_a:
        return None
    reader, x = node, a
    while True:
        producer = _producer(x)
        if producer is None or not ctx.only_read_by(x, reader):
            return None
        if producer.op == "softmax":
            return _Probabilities(producer)
        if producer.op == "where":
            return _safe_softmax(producer, ctx)
        if not _leading_reshape(producer):
            return None
        reader, x = producer, producer.inputs[0]


def _safe_softmax(where: Node, ctx: Rewrite) -> _Probabilities | None:
    """A softmax that gives a row of only -inf zeros, as torch spells it,
    ``where(all(x == -inf, last axis), 0, softmax(x))``, or as its ONNX export does,
    ``where(isnan(p), 0, p)`` with ``p = softmax(x)`` (which also zeroes the NaN that NaN
    scores give; the fused kernel keeps those NaN); None for any other ``where``."""
    cond, zeros, p = where.inputs
    softmax = _producer(p)
    if softmax is None or softmax.op != "softmax" or not _zeros(zeros) \
            or tuple(where.outputs[0].shape) != tuple(p.shape) or id(p) in ctx._outputs:
        return None
    nan_test = _producer(cond)
    if nan_test is not None and nan_test.op == "isnan" and nan_test.inputs[0] is p:
        return _Probabilities(softmax, masked_zero=True) if ctx.uses(p) == 2 else None
    test = _all_minus_inf(cond, softmax.inputs[0])
    return _Probabilities(softmax, True, test) if test is not None and ctx.only_read_by(p, where) else None


def _zeros(t: Tensor) -> bool:
    """Whether ``t`` is zeros: a constant, or a constant expanded (to a symbolic shape)."""
    node = _producer(t)
    if not t.is_concrete and node is not None and node.op in ("expand", "broadcast_to"):
        t = node.inputs[0]
    return t.is_concrete and not np.any(t.numpy() != 0)


def _all_minus_inf(cond: Tensor, x: Tensor) -> Node | None:
    """The node comparing ``x`` with -inf when ``cond`` is the test that every element of a
    row of ``x`` is -inf, spelled as torch decomposes ``all``: ``not(sum(cast(y)) > 0)`` with
    ``y = not(x == -inf)`` (casts and ``!= 0`` of a boolean are the boolean itself); else None."""
    def through(t: Tensor, nots: int = 0) -> tuple[Tensor, int]:
        node = _producer(t)
        while node is not None and (node.op in ("logical_not", "cast") or (
                node.op == "not_equal" and _scalar(node.inputs[1], False) == 0 and node.inputs[0].dtype == boolean)):
            nots += node.op == "logical_not"
            t = node.inputs[0]
            node = _producer(t)
        return t, nots
    t, outer = through(cond)
    greater = _producer(t)
    if greater is None or greater.op != "greater" or _scalar(greater.inputs[1], False) != 0:
        return None
    total = _producer(greater.inputs[0])
    if total is None or total.op != "sum" or tuple(total.task.attr("axis", ())) not in ((x.ndim - 1,), (-1,)):
        return None
    t, inner = through(total.inputs[0])
    equal = _producer(t)
    if equal is None or equal.op != "equal" or equal.inputs[0] is not x or _scalar(equal.inputs[1], False) != -math.inf:
        return None
    return equal if outer % 2 == 1 and inner % 2 == 1 else None


def _causal(mask: Tensor, scale: float, shape: tuple, forms: dict) -> bool:
    """Whether ``mask * scale`` broadcast to ``shape`` (..., L, S) is a causal mask: -inf (or
    float32's lowest, which ``exp`` takes to 0 as well) for ``j > i``, 0 elsewhere; a
    constant, or computed from the symbols alone (read from its :func:`closed_form`)."""
    if scale <= 0 or mask.ndim < 2 or not all(_same_size((d,), (s,)) for d, s in zip(mask.shape[-2:], shape[-2:])):
        return False
    lowest = np.finfo(np.float32).min
    if not mask.is_concrete:
        form = closed_form(mask, forms) if mask.dtype.is_float() else None
        if form is None:
            return False
        (*_, i, j), value = form
        return isinstance(value, E.Select) and value.cond == E.Binary("le", j, i) \
            and E.is_const(value.a, 0) and isinstance(value.b, E.Constant) and value.b.value <= lowest
    m = mask.numpy()
    L, S = m.shape[-2:]
    above = np.triu(np.ones((L, S), bool), 1)
    return bool(np.all(m[..., ~above] == 0) and np.all(m[..., above] <= lowest))


def _rule(target: Target):
    forms: dict = {}  # the closed forms of the graph's tensors, as masks ask for them

    def rule(node: Node, inputs: list[Tensor], ctx: Rewrite) -> list[Tensor] | None:
        if node.op not in _MATMULS:
            return None
        probs = _softmax_above(node, ctx)
        softmax = probs.softmax if probs is not None else None
        if softmax is None or softmax.task.attr("axis") not in (-1, softmax.outputs[0].ndim - 1):
            return None
        scores = _scores(probs, ctx)  # type: ignore[arg-type]
        if scores is None:
            return None
        out = _attention(scores, node, ctx, "zero" if probs.masked_zero else "nan", forms)  # type: ignore[union-attr]
        if out is None or find_candidate(_producer(out).task, target) is None:  # type: ignore[union-attr]
            return None
        return [ops.reshape(out, tuple(node.outputs[0].shape))]
    return rule


def _attention(scores: _Scores, second: Node, ctx: Rewrite, masked_rows: str, forms: dict) -> Tensor | None:
    """The attention node standing for the chain, in the first matmul's batch axes."""
    q, kt, ta, tb = _operands(scores.product)
    q, kt = ctx.new(q), ctx.new(kt)
    if q.ndim < 2 or kt.ndim < 2:
        return None
    q = ops.transpose(q, -1, -2) if ta else q
    k = kt if tb else ops.transpose(kt, -1, -2)
    space = tuple(scores.product.outputs[0].shape)  # (..., L, S)
    _, v, _, tv = _operands(second)
    v = ctx.new(v)
    v = ops.transpose(v, -1, -2) if tv else v
    if v.ndim < 2 or not _same_size(v.shape[:-2], space[:-2]):
        return None
    v = ops.reshape(v, (*space[:-2], *v.shape[-2:]))
    mask, causal = None, False
    if scores.mask is not None and _causal(scores.mask, scores.mask_scale, scores.mask_shape, forms):
        causal = True
    elif scores.mask is not None:
        mask = ops.broadcast_to(ctx.new(scores.mask), scores.mask_shape)
        mask = ops.reshape(mask, space)
        if scores.mask_scale != 1.0:
            mask = ops.mul(mask, scores.mask_scale)
    if q.dtype != k.dtype or q.dtype != v.dtype:
        return None
    return ops.attention(q, k, v, mask=mask, scale=scores.scale, causal=causal, masked_rows=masked_rows)


def _same_size(a: tuple, b: tuple) -> bool:
    """Whether two lists of sizes (ints or expressions of symbols) hold as many elements."""
    diff = simplify_expr(E.as_expr(math.prod(a, start=E.as_expr(1))) - math.prod(b, start=E.as_expr(1)))
    return isinstance(diff, E.Constant) and diff.value == 0


def fuse_attention(graph: Graph, target: Target) -> Graph:
    """``graph`` with each attention chain one :func:`~taskloom.ops.attention` node where a
    template of ``target``'s kind serves it (see the module docstring)."""
    out = rewrite(graph, _rule(target))
    return out if out is graph else eliminate_dead_nodes(out)
