"""Recognizing :func:`taskloom.ops.attention` in a (fused) task, so an attention template
can serve it: the task read as

    out[(b*L + i)*Ev + e] = epilogue(o = sum_j p(b, i, j) v(b, j, e) / sum_j p(b, i, j))
    (the sum taken as at least 1 where a query whose every key is masked gets zeros)
    p(b, i, j) = exp(score(b, i, j, acc = sum_d q(b, i, d) k(b, j, d)) - max_j score)

with the batch axes flattened into ``b``. What the group computes around the operator comes
along as expressions, as for a contraction: the factors ``q``, ``k``, ``v`` with their
prologues inlined (a head split's reshape and permute), ``score`` (the scale, the mask and
the causal test applied to ``acc``) and the ``epilogue`` (the output element in terms of
``o``, the normalized float32 result; a head merge's permute moves where it is stored).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

from taskloom.ir import expr as E
from taskloom.ir.arith import simplify_expr
from taskloom.ir.compute import GridCompute, ReduceCompute, Task, inline
from taskloom.ir.dtypes import DataType, bfloat16, float16, float32, index_type
from taskloom.ir.functor import collect, substitute
from taskloom.ir.index import unravel
from taskloom.schedule.contraction import _dims, _InlineExcept, _Replace, _static, _strip_casts
from taskloom.schedule.contraction import _product as _size_product


Dim = Union[int, E.Expr]

#: The names of the operator's nodes this reads it by (:func:`taskloom.ops.attention` builds them).
SCORES, MAX, SUM, OUT = "attention_scores", "attention_max", "attention_sum", "attention"


@dataclass(frozen=True)
class Attention:
    """A task read as attention (see the module docstring). The head sizes ``D`` and ``Ev``
    are static; ``batch``, ``L`` and ``S`` may be expressions of the task's symbols."""

    task: Task
    batch: Dim
    L: Dim
    S: Dim
    D: int
    Ev: int
    vb: E.Var
    vi: E.Var
    vj: E.Var
    vd: E.Var
    ve: E.Var
    acc: E.Var
    o: E.Var
    q: E.Expr          # of vb, vi, vd
    k: E.Expr          # of vb, vj, vd
    v: E.Expr          # of vb, vj, ve
    score: E.Expr      # of vb, vi, vj, acc (float32)
    epilogue: E.Expr   # of vb, vi, ve, o
    output: GridCompute
    causal: bool = False  # score is -inf wherever j > i (a template may skip those keys)
    # a query whose every score is masked gets zeros: a template divides by max(sum, 1) (a
    # row's sum is at least 1 otherwise) and subtracts 0 from -inf scores, not -inf
    masked_zero: bool = False


def _node(task: Task, name: str) -> GridCompute | None:
    found = [n for n in task.computes() if n.name == name]
    return found[0] if len(found) == 1 else None


def _product(value: E.Expr) -> tuple[E.Expr, E.Expr] | None:
    body = _strip_casts(value)
    if isinstance(body, E.Binary) and body.op == "mul":
        return _strip_casts(body.a), _strip_casts(body.b)
    return None


def match_attention(task: Task) -> Attention | None:
    """``task`` read as attention, or None (not the operator's task, or symbolic head sizes)."""
    scores, out_anchor = _node(task, SCORES), _node(task, OUT)
    if scores is None or out_anchor is None or len(task.outputs) != 1 or _node(task, MAX) is None \
            or _node(task, SUM) is None:
        return None
    out = task.outputs[0]
    dims, o_dims, out_dims = _dims(scores.shape), _dims(out_anchor.shape), _dims(out.shape)
    red = collect(scores.value, ReduceCompute)
    wred = [r for r in collect(out_anchor.value, ReduceCompute) if r.kind == "sum"]  # type: ignore[attr-defined]
    if len(red) != 1 or len(wred) != 1 or _static(red[0].shape) is None or not isinstance(o_dims[-1], int) \
            or red[0].type != float32:  # type: ignore[attr-defined]  (float64 attention sums in float64)
        return None
    nb = len(dims) - 2
    vb, vi, vj, vd, ve = (E.Var(n, index_type) for n in ("b", "i", "j", "d", "e"))
    acc, o = E.Var("acc", float32), E.Var("o", float32)
    batch = _size_product(dims[:nb])
    flat = unravel(vb, dims[:nb]) if nb else []
    # the scores: q and k are the factors of the sum over d; the rest is the score's function
    qk = _product(inline(red[0].value))  # type: ignore[attr-defined]
    if qk is None:
        return None
    sub = {**dict(zip(scores.axes[:nb], flat)), scores.axes[nb]: vi, scores.axes[nb + 1]: vj, red[0].axes[0]: vd}  # type: ignore[attr-defined]
    x, y = (substitute(f, sub) for f in qk)
    if vj in E.free_vars(x):
        x, y = y, x
    if vj in E.free_vars(x) or vi in E.free_vars(y):
        return None
    score = substitute(inline(_Replace(red[0], acc).visit(scores.value)), sub)
    # the values: the factor of the weighted sum that does not read the scores
    pv = _product(wred[0].value)  # type: ignore[attr-defined]
    if pv is None:
        return None
    v_factor = next((f for f in pv if not _reads(f, scores)), None)
    if v_factor is None:
        return None
    osub = {**dict(zip(out_anchor.axes[:nb], flat)), out_anchor.axes[nb]: vi, out_anchor.axes[nb + 1]: ve,
            wred[0].axes[0]: vj}  # type: ignore[attr-defined]
    v = substitute(inline(v_factor), osub)
    division = [d for d in collect(out_anchor.value, E.Binary) if d.op == "div" and d.a is wred[0]]  # type: ignore[attr-defined]
    if len(division) != 1:
        return None
    r_value = substitute(_Replace(division[0], o).visit(out_anchor.value), osub)
    L, S, D, Ev = dims[nb], dims[nb + 1], _static(red[0].shape)[0], o_dims[nb + 1]  # type: ignore[attr-defined,index]
    if out is out_anchor:
        epilogue = r_value
    else:
        index = unravel((vb * L + vi) * Ev + ve, out_dims)
        epilogue = substitute(_InlineExcept(out_anchor, r_value).visit(out.value), dict(zip(out.axes, index)))
    last = lambda n: n - 1 if isinstance(n, int) else None  # noqa: E731
    bounds = {vb: (0, last(batch)), vi: (0, last(L)), vj: (0, last(S)), vd: (0, D - 1), ve: (0, Ev - 1),
              **{v: (1, None) for v in task.symbols()}}
    s = lambda e: simplify_expr(e, bounds)  # noqa: E731
    score = s(score)
    divisor = division[0].b  # type: ignore[attr-defined]
    masked_zero = isinstance(divisor, E.Binary) and divisor.op == "max"
    return Attention(task, batch, L, S, D, Ev, vb, vi, vj, vd, ve, acc, o, s(x), s(y), s(v), score,
                     s(epilogue), out, _is_causal(score, vi, vj), masked_zero)


def _is_causal(score: E.Expr, vi: E.Var, vj: E.Var) -> bool:
    """Whether ``score`` is ``select(j <= i, ..., -inf)``, as the operator's causal test
    builds it: the keys after the query never count."""
    if not isinstance(score, E.Select):
        return False
    c, masked = score.cond, score.b
    return isinstance(masked, E.Constant) and masked.value == -math.inf and isinstance(c, E.Binary) \
        and c.op == "le" and c.a == vj and c.b == vi


def _reads(e: E.Expr, node: GridCompute) -> bool:
    return any(r.tensor is node for r in collect(e, E.TensorElement))  # type: ignore[attr-defined]


def half_type(att: Attention) -> DataType | None:
    """The 16-bit type ``q``, ``k`` and ``v`` read, or None when they read anything else."""
    types = {r.type for f in (att.q, att.k, att.v) for r in collect(f, E.TensorElement)}  # type: ignore[attr-defined]
    return types.pop() if len(types) == 1 and types <= {float16, bfloat16} else None
