"""The interior of a row: where the bounds checks of padded reads all pass.

Padding, convolution and pooling read ``select(0 <= x + kx - p and x + kx - p < W, X[..], pad)``.
Along the innermost output axis ``x`` such a condition holds on one contiguous range for
every value of the reduction axes (``kx``). Inside that range the select is just its first
branch, and the row vectorizes; only the few edge positions keep the checks.

Only conditions that are affine in ``x`` (``s * x + ...``: strided reads have ``s`` > 1) are
used; anything else leaves the row as it is.
"""
from __future__ import annotations

from typing import Any

from taskloom.ir import expr as E
from taskloom.ir.compute import ReduceCompute
from taskloom.ir.functor import Rewriter
from taskloom.ir.arith.linear import linear_form
from taskloom.ir.arith import simplify_expr

Ranges = dict[E.Var, E.Expr]  # a reduction axis -> its extent


def _conjuncts(c: E.Expr) -> list[E.Expr]:
    if isinstance(c, E.Binary) and c.op == "and":
        return _conjuncts(c.a) + _conjuncts(c.b)
    return [c]


def _extremes(form: Any, ranges: Ranges) -> tuple[E.Expr, E.Expr] | None:
    """Symbolic min and max of a linear form whose range variables lie in ``[0, extent)``."""
    lo: E.Expr = E.Constant(form.const, form.dtype)
    hi: E.Expr = lo
    for t, k in form.terms.items():
        if isinstance(t, E.Var) and t in ranges:
            top = (ranges[t] - 1) * k
            lo, hi = (lo, hi + top) if k > 0 else (lo + top, hi)
        elif E.free_vars(t) & set(ranges):
            return None  # a product of range variables: not affine
        else:
            lo, hi = lo + t * k, hi + t * k
    return lo, hi


def _bound(atom: E.Expr, j: E.Var, ranges: Ranges) -> tuple[str, E.Expr] | None:
    """('lo', b) for ``j >= b`` or ('hi', b) for ``j < b``: where ``atom`` holds for every value
    of the range variables."""
    if not (isinstance(atom, E.Binary) and atom.op in ("lt", "le") and atom.a.type == E.dtypes.int32):
        return None
    need = 1 if atom.op == "lt" else 0               # atom is  b - a >= need
    form = linear_form(simplify_expr(atom.b - atom.a))
    coef = form.terms.pop(j, 0)
    if not isinstance(coef, int) or coef == 0:
        return None
    ext = _extremes(form, ranges)
    if ext is None:
        return None
    least = ext[0]                                   # the condition must hold for the worst case
    k = abs(coef)
    if coef > 0:                                     # k*j + rest >= need  <=>  j >= ceil((need - rest) / k)
        return "lo", simplify_expr(need - least if k == 1 else E.cdiv(need - least, k))
    # rest - k*j >= need  <=>  j < floor((rest - need) / k) + 1 = floor((rest - need + k) / k); the
    # division truncates, which differs from floor only below zero, where the caller clamps to 0
    return "hi", simplify_expr(least - need + 1 if k == 1 else (least - need + k) // k)


class _Replace(Rewriter):
    def __init__(self, table: dict[E.Select, E.Expr]):
        self.table = table

    def visit_Select(self, e: E.Select) -> E.Expr:
        if e in self.table:
            return self.visit(self.table[e])
        return self.generic_visit(e)


def interior(value: E.Expr, j: E.Var) -> tuple[E.Expr | None, E.Expr | None, E.Expr] | None:
    """``(lo, hi, inner)``: for ``lo <= j < hi`` (None: unbounded on that side) every select
    whose condition mentions ``j`` has its ``j``-conditions true, and ``inner`` is ``value``
    with those conditions dropped. None when no select can be simplified this way."""
    found: list[tuple[E.Select, Ranges]] = []

    def walk(e: E.Expr, ranges: Ranges) -> None:
        if isinstance(e, ReduceCompute):
            ranges = {**ranges, **dict(zip(e.axes, e.shape))}
        if isinstance(e, E.Select) and j in E.free_vars(e.cond):
            found.append((e, ranges))
        for c in e.children():
            if isinstance(c, E.Expr):
                walk(c, ranges)

    walk(value, {})
    if not found:
        return None
    lows: list[E.Expr] = []
    highs: list[E.Expr] = []
    table: dict[E.Select, E.Expr] = {}
    for sel, ranges in found:
        keep = []
        for atom in _conjuncts(sel.cond):
            if j not in E.free_vars(atom):
                keep.append(atom)
                continue
            b = _bound(atom, j, ranges)
            if b is None:
                return None
            (lows if b[0] == "lo" else highs).append(b[1])
        table[sel] = sel.a if not keep else E.Select(E.logical_and(*keep), sel.a, sel.b)
    lo = _fold(E.maximum, lows)
    hi = _fold(E.minimum, highs)
    return lo, hi, _Replace(table).visit(value)


def _fold(fn: Any, xs: list[E.Expr]) -> E.Expr | None:
    if not xs:
        return None
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return simplify_expr(out)
