"""A small pattern-matching engine for expression rewrite rules.

A rule reads ``pattern -> replacement``: the pattern is an ordinary IR expression in
which :class:`Wild` nodes stand for "any expression" or "any constant", the replacement
is a function of the bound wildcards, and an optional condition may consult the bindings
and the bounds analysis::

    x, c = wild("x"), wild("c", const=True)
    rule("mod-of-small", x % c, lambda m: m.x,
         when=lambda m: m.c.value > 0 and m.in_range(m.x, 0, m.c.value - 1))

Patterns are built with the IR's own operators, so wildcards need a type the IR accepts;
the pseudo-types :data:`INT`, :data:`NUM` and :data:`ANY` say what a wildcard may match
(any integer scalar, any integer or float scalar, anything). A wildcard that occurs twice
must match equal expressions both times. Matching is structural over the dataclass fields
of the nodes; it does not try operand orders, so a commutative rule lists its variants.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Sequence

from taskloom.ir.dtypes import DataType, Type
from taskloom.ir.expr import Binary, Constant, Expr, Unary
from taskloom.ir.node import Node, field_names
from taskloom.ir.arith.bounds import BoundAnalyzer

#: Pseudo-types of wildcards. Their kind only satisfies the IR's checks while a pattern is
#: built; what they match is decided by :func:`type_matches`.
INT = DataType("<int>", "<int>", "int", 0)
NUM = DataType("<num>", "<num>", "float", 0)
ANY = DataType("<any>", "<any>", "int", 0)


def type_matches(pattern_type: Type, t: Type) -> bool:
    """Whether a value of type ``t`` fits where a pattern has type ``pattern_type``."""
    if pattern_type is ANY:
        return True
    if pattern_type is INT:
        return isinstance(t, DataType) and t.is_integer()
    if pattern_type is NUM:
        return isinstance(t, DataType) and (t.is_integer() or t.is_float())
    return pattern_type == t


@dataclass(frozen=True, eq=False, repr=False)
class Wild(Expr):
    """A pattern variable: matches any expression (or, with ``const``, any constant) whose
    type fits ``type``."""

    name: str
    type: Type
    const: bool = False

    def __repr__(self) -> str:
        return f"?{self.name}"


class _AnyField:
    """Matches any value of a field that is not an expression (a label, a flag)."""

    def __repr__(self) -> str:
        return "?field"


#: Stands in a pattern for a non-expression field whose value does not matter.
ANY_FIELD: Any = _AnyField()


def wild(name: str, type: Type = INT, const: bool = False) -> Wild:
    """A wildcard named ``name``; its match is ``m.<name>`` in a rule's functions."""
    return Wild(name, type, const)


class Context(Protocol):
    """What rules may consult besides their bindings: the ranges of expressions, and the
    simplifier itself (to simplify a sub-expression a rule builds)."""

    bounds: BoundAnalyzer

    def simplify(self, e: Expr) -> Expr: ...


class Match:
    """The result of a successful match: the wildcards' bindings as attributes, the matched
    node as ``node``, and helpers over the bounds analysis."""

    def __init__(self, node: Expr, bindings: dict[str, Expr], ctx: Context):
        self.node, self.bindings, self.ctx = node, bindings, ctx

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["bindings"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def bounds(self) -> BoundAnalyzer:
        return self.ctx.bounds

    def in_range(self, e: Expr, lo: int | None, hi: int | None) -> bool:
        """Whether ``lo <= e <= hi`` is known (None leaves that end open)."""
        blo, bhi = self.ctx.bounds.bound(e)
        return (lo is None or (blo is not None and blo >= lo)) and \
               (hi is None or (bhi is not None and bhi <= hi))

    def simplify(self, e: Expr) -> Expr:
        return self.ctx.simplify(e)


def match(pattern: Any, value: Any, bindings: dict[str, Expr]) -> bool:
    """Matches ``value`` against ``pattern``, adding to ``bindings``; on failure the bindings
    may hold partial results and must be discarded."""
    if pattern is ANY_FIELD:
        return True
    if isinstance(pattern, Wild):
        if not isinstance(value, Expr) or not type_matches(pattern.type, value.type):
            return False
        if pattern.const and not isinstance(value, Constant):
            return False
        bound = bindings.get(pattern.name)
        if bound is not None:
            return bound == value
        bindings[pattern.name] = value
        return True
    if isinstance(pattern, Constant):
        if not (isinstance(value, Constant) and type_matches(pattern.type, value.type)):
            return False
        if isinstance(value.value, float):  # -0.0 is not 0.0 here: x - (-0.0) is not always x
            return repr(value.value) == repr(float(pattern.value))
        return value.value == pattern.value
    if isinstance(pattern, Node):
        if type(pattern) is not type(value):
            return False
        return all(match(getattr(pattern, name), getattr(value, name), bindings)
                   for name in field_names(type(pattern)))
    if isinstance(pattern, tuple):
        return (isinstance(value, tuple) and len(pattern) == len(value)
                and all(match(p, v, bindings) for p, v in zip(pattern, value)))
    if isinstance(pattern, Type):
        return isinstance(value, Type) and type_matches(pattern, value)
    return pattern == value


Builder = Callable[[Match], "Expr | None"]
Condition = Callable[[Match], bool]


@dataclass(frozen=True, repr=False)
class Rule:
    """``patterns -> build(match)`` where ``when(match)`` holds. ``build`` may return None
    to decline (when what it computes shows there is nothing to gain)."""

    name: str
    patterns: tuple[Expr, ...]
    build: Builder
    when: Condition | None = None

    def __repr__(self) -> str:
        return f"<rule {self.name}>"

    def apply(self, e: Expr, ctx: Context) -> Expr | None:
        for p in self.patterns:
            bindings: dict[str, Expr] = {}
            if not match(p, e, bindings):
                continue
            m = Match(e, bindings, ctx)
            if self.when is not None and not self.when(m):
                continue
            out = self.build(m)
            if out is not None and out != e:
                return out
        return None


def rule(name: str, patterns: Expr | Sequence[Expr], build: Builder, when: Condition | None = None) -> Rule:
    """A rule; ``patterns`` is one pattern or several alternatives (operand orders)."""
    ps = tuple(patterns) if isinstance(patterns, (list, tuple)) else (patterns,)
    return Rule(name, ps, build, when)


def _key(e: Expr) -> tuple[str, str | None] | None:
    """Rules are indexed by the class and operator of their pattern's root."""
    if isinstance(e, Wild):
        return None
    return type(e).__name__, e.op if isinstance(e, (Binary, Unary)) else None


class RuleTable:
    """An ordered list of rules, indexed by the root of their patterns; the first rule that
    rewrites a node wins."""

    def __init__(self, rules: Iterable[Rule]):
        self.rules = list(rules)
        self._by_key: dict[Any, list[tuple[int, Rule]]] = {}
        for i, r in enumerate(self.rules):
            for k in {_key(p) for p in r.patterns}:
                self._by_key.setdefault(k, []).append((i, r))
        self._lookup: dict[Any, list[Rule]] = {}

    def candidates(self, e: Expr) -> list[Rule]:
        """The rules whose patterns could match ``e``, in table order."""
        k = _key(e)
        hit = self._lookup.get(k)
        if hit is None:
            both = self._by_key.get(k, []) + (self._by_key.get(None, []) if k is not None else [])
            hit = self._lookup[k] = [r for _, r in sorted(both, key=lambda ir: ir[0])]
        return hit

    def rewrite(self, e: Expr, ctx: Context) -> tuple[Expr, str] | None:
        """The first rewrite of ``e`` at its root, with the name of the rule that made it."""
        for r in self.candidates(e):
            out = r.apply(e, ctx)
            if out is not None:
                return out, r.name
        return None
