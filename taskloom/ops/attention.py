"""Scaled dot-product attention as one operator, so that a template can compute it in one
pass over blocks of keys (the scores never stored) where the target has one.

Its task spells the computation out in three nodes a template reads by name:
``attention_scores[..., i, j] = f(sum_e q[..., i, e] * k[..., j, e])`` (``f`` scales, adds
or applies the mask, and masks the causal upper triangle), ``attention_max`` and
``attention_sum`` (each row's maximum and sum of ``exp(score - max)``), and the output
``attention[..., i, e] = sum_j exp(score - max) * v[..., j, e] / sum``.
Where no template serves it, the rule-based schedulers compute it from this definition.
"""
from __future__ import annotations

import math
from typing import Any

from taskloom.errors import OpError
from taskloom.graph.tensor import Tensor
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir.compute import compute, reduce
from taskloom.ops.base import apply, as_tensor, broadcast_index, broadcast_shapes
from taskloom.schedule.attention import MAX, OUT, SCORES, SUM

__all__ = ["attention"]



def _check(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> None:
    op = "attention"
    for arg, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim < 2:
            raise OpError(f"{op}(): '{arg}' must have at least 2 axes (..., length, features), got shape {tuple(t.shape)}")
        if t.dtype not in (T.float64, T.float32, T.float16, T.bfloat16):
            raise OpError(f"{op}(): '{arg}' must be float64, float32, float16 or bfloat16, got {t.dtype.name}")
        if t.dtype != q.dtype:
            raise OpError(f"{op}(): '{arg}' is {t.dtype.name} but 'q' is {q.dtype.name}; they must match")
    if k.shape[-1] != q.shape[-1]:
        raise OpError(f"{op}(): 'q' has {q.shape[-1]} features and 'k' {k.shape[-1]}; they must be equal")
    if v.shape[-2] != k.shape[-2]:
        raise OpError(f"{op}(): 'k' has {k.shape[-2]} keys and 'v' {v.shape[-2]}; they must be equal")
    if mask is not None and mask.dtype not in (T.boolean, q.dtype, T.float32):
        raise OpError(f"{op}(): 'mask' must be bool (True keeps a score) or float (added to the scores), "
                      f"got {mask.dtype.name}")


#: What a query whose every score is masked gets: zeros (torch's scaled_dot_product_attention)
#: or NaN (a softmax of only -inf, as an attention written out with ``softmax`` computes).
MASKED_ROWS = ("zero", "nan")


def attention(q: Any, k: Any, v: Any, mask: Any = None, scale: float | None = None, causal: bool = False,
              masked_rows: str = "zero") -> Tensor:
    """``softmax(q kᵀ * scale + mask) v`` over the last two axes, as
    ``torch.nn.functional.scaled_dot_product_attention``: ``q`` (..., L, E), ``k`` (..., S, E),
    ``v`` (..., S, Ev), the leading axes broadcast; ``mask`` broadcasts to (..., L, S), bool
    (True keeps a score) or float (added); ``scale`` defaults to ``1 / sqrt(E)``; ``causal``
    masks key ``j`` for query ``i`` when ``j > i``. Scores and sums are float32 for 16-bit
    inputs (float64 for float64 ones). A query whose every score is masked gets zeros, as
    torch's does (``masked_rows="zero"``), or NaN (``"nan"``: what ``softmax`` of the scores
    written out gives, for graphs that spell attention so)."""
    op = OUT
    q = as_tensor(op, "q", q)
    k, v = as_tensor(op, "k", k, like=q), as_tensor(op, "v", v, like=q)
    m = None if mask is None else as_tensor(op, "mask", mask, like=q)
    _check(q, k, v, m)
    if not isinstance(causal, bool):
        raise OpError(f"{op}(): 'causal' must be True or False, got {causal!r}")
    if masked_rows not in MASKED_ROWS:
        raise OpError(f"{op}(): 'masked_rows' must be 'zero' or 'nan', got {masked_rows!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(int(q.shape[-1]))
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise OpError(f"{op}(): 'scale' must be a finite number, got {scale!r}")
    batch = broadcast_shapes(op, q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if m is not None:
        broadcast_shapes(op, (*batch, q.shape[-2], k.shape[-2]), m.shape)

    def build(Q, K, V, *M):
        nb, L, S = len(batch), Q.shape[-2], K.shape[-2]
        f32 = T.float64 if Q.dtype == T.float64 else T.float32  # (the accumulation type)

        def at(t, b, *rest):
            return t[(*broadcast_index(t.shape[:-2], nb, b), *rest)]

        def score(*idx):
            b, i, j = idx[:nb], idx[nb], idx[nb + 1]
            qk = reduce([Q.shape[-1]], lambda e: E.cast(at(Q, b, i, e), f32) * E.cast(at(K, b, j, e), f32), "sum")
            s = qk * float(scale)
            if M:
                mk = M[0][broadcast_index(M[0].shape, nb + 2, idx)]
                s = E.select(mk, s, -math.inf) if M[0].dtype == T.boolean else s + E.cast(mk, f32)
            return E.select(j <= i, s, -math.inf) if causal else s
        scores = compute(SCORES, (*batch, L, S), score)
        mx = compute(MAX, (*batch, L), lambda *r: reduce([S], lambda j: scores[(*r, j)], "max"))
        zero = masked_rows == "zero"

        def top(r):  # a row of only -inf subtracts 0 where it gets zeros: exp(-inf - 0) is 0, not NaN
            return E.select(mx[r] == -math.inf, E.const(0.0, f32), mx[r]) if zero else mx[r]
        total = compute(SUM, (*batch, L), lambda *r: reduce([S], lambda j: E.call("exp", scores[(*r, j)] - top(r)), "sum"))

        def out(*idx):
            b, i, e = idx[:nb], idx[nb], idx[nb + 1]
            weighted = reduce([S], lambda j: E.call("exp", scores[(*b, i, j)] - top((*b, i)))
                              * E.cast(at(V, b, j, e), f32), "sum")
            # a row's sum is at least 1 (its maximum's term) unless every score is masked
            return E.cast(weighted / (E.maximum(total[(*b, i)], E.const(1.0, f32)) if zero else total[(*b, i)]), Q.dtype)
        return compute(op, (*batch, L, V.shape[-1]), out)
    inputs, names = [q, k, v] + ([m] if m is not None else []), ["q", "k", "v"] + (["mask"] if m is not None else [])
    return apply(op, inputs, names, build, {"scale": float(scale), "causal": causal, "masked_rows": masked_rows})[0]
