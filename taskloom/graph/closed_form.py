"""The value of a tensor computed from no input data, as one expression of its indices.

A graph with symbolic sizes computes some tensors from the sizes alone: positions as an
``arange`` to the sequence length, the masks built from them. Their values are known at
compile time, but not as an array; :func:`closed_form` gives each element as an
expression of the element's indices and the graph's symbols, from the operators' own
definitions inlined into each other and simplified. A pass then reads what such a tensor
is (a causal mask, say) from the expression, for every size at once.

Integers are read as mathematical integers: the integer types are merged into int64 and
casts between them dropped, so that ``cast(i, i64) - cast(i - 1, i64)`` is 1 (index and
position arithmetic stays far from any overflow). Where the simplifier leaves a select on
a bound of one variable (``i < 1``), each side is simplified again knowing which side of
the bound the variable lies on, and the select goes when both sides agree.
"""
from __future__ import annotations

import itertools
from typing import Mapping

import numpy as np

from taskloom.graph.tensor import Tensor
from taskloom.ir import expr as E
from taskloom.ir.arith import simplify_expr
from taskloom.ir.compute import ReduceCompute, inline
from taskloom.ir.dtypes import DataType, int64
from taskloom.ir.functor import Rewriter, collect, substitute

#: A tensor's element as an expression of these int64 variables, one per dimension.
Form = tuple[tuple[E.Var, ...], E.Expr]
Bounds = dict[E.Var, tuple["int | None", "int | None"]]

#: The largest closed form kept, in expression nodes: past it the tensor counts as data.
MAX_NODES = 2000
#: How many nested selects a simplification splits on.
MAX_SPLITS = 4


def closed_form(t: Tensor, memo: dict[int, Form | None] | None = None) -> Form | None:
    """``t``'s element at indices ``axes`` as ``(axes, value)``, when ``t`` is computed from
    constants and the symbols alone (None otherwise, or when the expression grows past
    :data:`MAX_NODES`). A constant has a form only when all its elements are equal.
    ``memo`` keeps the forms of a graph's tensors between calls."""
    memo = {} if memo is None else memo
    if id(t) not in memo:
        memo[id(t)] = _form(t, memo)
    return memo[id(t)]


def _form(t: Tensor, memo: dict[int, Form | None]) -> Form | None:
    axes = tuple(E.Var(f"i{k}", int64) for k in range(t.ndim))
    if t.is_concrete:
        a = t.numpy()
        if a.size == 0 or not np.all(a == a.flat[0]):
            return None
        return axes, _erase(E.Constant(a.flat[0].item(), t.dtype))
    if t.producer is None:
        return None  # an input: data
    node, k = t.producer
    inputs = [closed_form(x, memo) for x in node.inputs]
    if any(f is None for f in inputs):
        return None
    out = node.task.outputs[k]
    reads = {ti: f for ti, f in zip(node.task.inputs, inputs)}
    value = _Instantiate(reads).visit(_fresh(_erase(inline(out.value))))
    own = [_erase(a) for a in out.axes]
    value = substitute(value, dict(zip(own, axes)))
    extents = {a: _erase(d) for a, d in zip(axes, out.shape)}
    value = simplify_cases(value, _bounds(extents), extents)
    if collect(value, E.TensorElement) or _size(value) > MAX_NODES:
        return None
    return axes, value


class _Instantiate(Rewriter):
    """A task's reads of its inputs replaced by the inputs' forms at the indices read."""

    def __init__(self, forms: Mapping[E.Expr, Form]):
        self.forms = forms

    def visit_TensorElement(self, e: E.TensorElement) -> E.Expr:
        e = self.generic_visit(e)
        form = self.forms.get(e.tensor)
        if form is None:
            return e
        axes, value = form
        return substitute(_fresh(value), dict(zip(axes, e.indices)))


def _fresh(e: E.Expr) -> E.Expr:
    """``e`` with each reduction's axes renamed apart (``r0``, ``r1``...), so that a form
    inlined into another (a running sum of a running sum) never captures the indices it is
    read at, nor a reduction the output's axes (``i0``...)."""
    class Rename(Rewriter):
        def visit_ReduceCompute(self, r: ReduceCompute) -> E.Expr:
            axes = tuple(E.Var(f"r{next(_names)}", a.type) for a in r.axes)
            return ReduceCompute(r.shape, axes, self.visit(substitute(r.value, dict(zip(r.axes, axes)))), r.kind)
    return Rename().visit(e) if collect(e, ReduceCompute) else e


_names = itertools.count()


def _erase(e: E.Expr) -> E.Expr:
    """``e`` with every integer type int64 and the casts between integer types dropped."""
    return _Erase().visit(e)


class _Erase(Rewriter):
    def visit_Var(self, v: E.Var) -> E.Expr:
        return E.Var(v.name, int64) if _integer(v.type) else v

    def visit_Constant(self, c: E.Constant) -> E.Expr:
        return E.Constant(c.value, int64) if _integer(c.type) else c

    def visit_Cast(self, c: E.Cast) -> E.Expr:
        value = self.visit(c.value)
        if _integer(c.dtype) and _integer(value.type):
            return value
        return E.cast(value, int64 if _integer(c.dtype) else c.dtype)


def _integer(t: object) -> bool:
    return isinstance(t, DataType) and t.is_integer() and t.name != "bool"


def _bounds(extents: Mapping[E.Var, E.Expr]) -> Bounds:
    """Each index in ``[0, extent - 1]`` (the top known when the extent is a constant)."""
    return {v: (0, int(d.value) - 1 if isinstance(d, E.Constant) else None) for v, d in extents.items()}


def simplify_cases(e: E.Expr, bounds: Bounds, extents: Mapping[E.Var, E.Expr] = {}, splits: int = MAX_SPLITS
                   ) -> E.Expr:
    """``e`` simplified under ``bounds`` (inclusive ranges) and ``extents`` (``v`` indexes a
    dimension of that size): index checks that always pass dropped, sums of zero folded,
    and selects on one variable's bound split on (see the module)."""
    pinned = {v: E.Constant(lo, v.type) for v, (lo, hi) in bounds.items() if lo is not None and lo == hi}
    e = simplify_expr(_Fold(bounds, extents, splits).visit(substitute(e, pinned) if pinned else e), bounds)
    if splits == 0:
        return e
    found = _split_point(e, bounds)
    if found is None:
        return e
    select, v, (yes, no) = found
    sides = []
    for arm, (lo, hi) in ((select.a, yes), (select.b, no)):
        if lo is not None and hi is not None and lo > hi:
            continue  # the variable never lies on this side
        sides.append(simplify_cases(_replace(e, select, arm), {**bounds, v: (lo, hi)}, extents, splits - 1))
    return sides[0] if len(sides) == 1 or sides[0] == sides[1] else e


class _Fold(Rewriter):
    """The rules :func:`simplify_expr` lacks, each needing the ranges of indices."""

    def __init__(self, bounds: Bounds, extents: Mapping[E.Var, E.Expr], splits: int):
        self.bounds, self.extents, self.splits = bounds, extents, splits

    def visit_IndexCheck(self, c: E.IndexCheck) -> E.Expr:
        c = self.generic_visit(c)
        value = simplify_expr(c.value, self.bounds)
        lo = self.bounds.get(value, (None, None))[0] if isinstance(value, E.Var) else None
        if isinstance(value, E.Var) and lo is not None and lo >= 0 and self.extents.get(value) == c.extent:
            return value  # an index of a dimension of this extent: in range
        if isinstance(value, E.Constant) and isinstance(c.extent, E.Constant) \
                and 0 <= value.value < c.extent.value:
            return value
        return c

    def visit_ReduceCompute(self, r: ReduceCompute) -> E.Expr:
        extents = dict(zip(r.axes, r.shape))  # (erased: the axes are int64 already)
        body = simplify_cases(r.value, {**self.bounds, **_bounds(extents)}, {**self.extents, **extents}, self.splits)
        if isinstance(body, E.Constant) and r.kind == "sum" and body.value == 0:
            return body  # (over any extent, none included)
        return ReduceCompute(r.shape, r.axes, body, r.kind)


def _split_point(e: E.Expr, bounds: Bounds) -> tuple[E.Select, E.Var, tuple[tuple, tuple]] | None:
    """The first select in ``e`` whose condition bounds a variable of ``bounds`` by a
    constant, the variable, and its ranges where the condition holds and where not."""
    for s in collect(e, E.Select):
        c = s.cond
        if not (isinstance(c, E.Binary) and c.op in ("lt", "le")):
            continue
        if isinstance(c.a, E.Var) and isinstance(c.b, E.Constant) and c.a in bounds:
            v, k = c.a, int(c.b.value) - (c.op == "lt")  # v <= k
            lo, hi = bounds[v]
            return s, v, ((lo, k if hi is None else min(hi, k)), (k + 1 if lo is None else max(lo, k + 1), hi))
        if isinstance(c.b, E.Var) and isinstance(c.a, E.Constant) and c.b in bounds:
            v, k = c.b, int(c.a.value) + (c.op == "lt")  # v >= k
            lo, hi = bounds[v]
            return s, v, ((k if lo is None else max(lo, k), hi), (lo, k - 1 if hi is None else min(hi, k - 1)))
    return None


def _replace(e: E.Expr, old: E.Expr, new: E.Expr) -> E.Expr:
    class Swap(Rewriter):
        def visit(self, node: object) -> object:
            return new if node == old else super().visit(node)
    return Swap().visit(e)


def _size(e: E.Expr) -> int:
    return 1 + sum(_size(c) for c in e.children() if isinstance(c, E.Expr))
