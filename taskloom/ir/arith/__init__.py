"""Integer and index arithmetic of the IR: interval bounds with C division
(:mod:`~taskloom.ir.arith.bounds`), the sum-of-products normal form
(:mod:`~taskloom.ir.arith.linear`), the pattern-rewrite engine
(:mod:`~taskloom.ir.arith.rewrite_rules`) and the rule table
(:mod:`~taskloom.ir.arith.simplify_rules`) behind :func:`simplify_expr`.

It sits inside ``ir`` so that compute definitions (comparing index maps) and the passes of
``transforms`` share one simplifier.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from taskloom.errors import TransformError
from taskloom.ir.arith.bounds import BoundAnalyzer, c_div, c_mod
from taskloom.ir.arith.simplify_rules import RULES
from taskloom.ir.expr import Constant, Expr, Var
from taskloom.ir.node import field_names

__all__ = ["BoundAnalyzer", "ExprSimplifier", "RULES", "analyzer", "c_div", "c_mod", "simplify_expr"]


#: Rewrites of one node before the simplifier gives up; a correct table never comes close.
_MAX_REWRITES = 100


class ExprSimplifier:
    """Simplifies expressions bottom-up with :data:`RULES`, under the ranges known to
    ``bounds``; results are cached under the facts known about their variables."""

    def __init__(self, bounds: BoundAnalyzer):
        self.bounds = bounds
        self._memo: dict[tuple[Expr, tuple], Expr] = {}

    def simplify(self, e: Expr) -> Expr:
        if isinstance(e, (Var, Constant)):
            return e
        key = (e, self.bounds.facts(e))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._rewrite(e)
            if not isinstance(hit, (Var, Constant)):
                self._memo.setdefault((hit, self.bounds.facts(hit)), hit)
        return hit

    def _rewrite(self, e: Expr) -> Expr:
        fired: list[str] = []
        for _ in range(_MAX_REWRITES):
            e = self._children(e)
            if isinstance(e, (Var, Constant)):
                return e
            r = RULES.rewrite(e, self)
            if r is None:
                return e
            e, name = r
            fired.append(name)
        raise TransformError(f"simplifying `{e}` did not settle after {_MAX_REWRITES} rewrites; "
                             f"the last rules were {fired[-6:]}, which undo each other")

    def _children(self, e: Expr) -> Expr:
        changes = {}
        for name in field_names(type(e)):
            old = getattr(e, name)
            if isinstance(old, Expr):
                new: Any = self.simplify(old)
            elif isinstance(old, tuple) and any(isinstance(v, Expr) for v in old):
                new = tuple(self.simplify(v) if isinstance(v, Expr) else v for v in old)
                new = old if all(a is b for a, b in zip(new, old)) else new
            else:
                continue
            if new is not old:
                changes[name] = new
        return dataclasses.replace(e, **changes) if changes else e  # type: ignore[type-var]


def analyzer(bounds: Mapping[Var, tuple[int, int]] | None) -> BoundAnalyzer:
    """A bounds analysis knowing ``bounds`` (inclusive ranges per variable), checked."""
    for v, rng in (bounds or {}).items():
        if not isinstance(v, Var):
            raise TransformError(f"bounds are given per variable, but {v!r} is a {type(v).__name__}")
        lo, hi = rng
        if lo is not None and hi is not None and lo > hi:
            raise TransformError(f"the bounds [{lo}, {hi}] given for '{v.name}' are empty; "
                                 "give (lo, hi) with lo <= hi, both inclusive")
    return BoundAnalyzer(bounds)


def simplify_expr(e: Expr, bounds: Mapping[Var, tuple[int, int]] | None = None) -> Expr:
    """Simplifies an expression, knowing that each variable ``v`` in ``bounds`` lies in the
    inclusive range ``bounds[v] = (lo, hi)`` (either end may be None).

    Used on index arithmetic, where ranges turn ``(w // 32) % 8`` into ``w // 32`` for a
    worker ``w < 256``; without a range, a rewrite that would need one is not made.
    """
    return ExprSimplifier(analyzer(bounds)).simplify(e)


