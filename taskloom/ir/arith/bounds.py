"""Interval analysis of integer expressions: the range ``[lo, hi]`` an expression can take.

The ranges come from what is known about variables: loop variables range over
``[0, extent)``, ``let`` variables over the range of their value, unsigned values are
non-negative, and callers may give ranges for free variables (a worker index, a symbolic
size). ``None`` stands for an unknown end, so every answer is sound: a rule that needs
``x >= 0`` fires only when the lower end is known and non-negative.

Integer ``//`` and ``%`` follow C (truncation toward zero); :func:`c_div` and
:func:`c_mod` compute them on Python ints.
"""
from __future__ import annotations

from typing import Mapping

from taskloom.ir.dtypes import DataType
from taskloom.ir.expr import Binary, Cast, Constant, Expr, IndexCheck, Select, Unary, Var
from taskloom.ir.node import Node

Bound = int | None
Interval = tuple[Bound, Bound]
UNKNOWN: Interval = (None, None)


def c_div(a: int, b: int) -> int:
    """``a / b`` on ints as C computes it: the quotient truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def c_mod(a: int, b: int) -> int:
    """``a % b`` on ints as C computes it: the remainder has the sign of ``a``."""
    return a - b * c_div(a, b)


def _add(a: Interval, b: Interval) -> Interval:
    lo = None if a[0] is None or b[0] is None else a[0] + b[0]
    hi = None if a[1] is None or b[1] is None else a[1] + b[1]
    return lo, hi


def _neg(a: Interval) -> Interval:
    return (None if a[1] is None else -a[1], None if a[0] is None else -a[0])


def _scale(a: Interval, k: int) -> Interval:
    if k == 0:
        return 0, 0
    lo = None if a[0] is None else a[0] * k
    hi = None if a[1] is None else a[1] * k
    return (lo, hi) if k > 0 else (hi, lo)


def _mul(a: Interval, b: Interval) -> Interval:
    if a[0] is not None and a[0] == a[1]:
        return _scale(b, a[0])
    if b[0] is not None and b[0] == b[1]:
        return _scale(a, b[0])
    if None not in a and None not in b:
        corners = [x * y for x in a for y in b]  # type: ignore[operator]
        return min(corners), max(corners)
    if a[0] is not None and b[0] is not None and a[0] >= 0 and b[0] >= 0:
        return a[0] * b[0], None
    return UNKNOWN


def _div(a: Interval, b: Interval) -> Interval:
    if b[0] is not None and b[0] == b[1]:
        c = b[0]
        if c == 0:
            return UNKNOWN
        # truncating division by a constant is monotone: rising for c > 0, falling for c < 0
        lo = None if a[0] is None else c_div(a[0], c)
        hi = None if a[1] is None else c_div(a[1], c)
        return (lo, hi) if c > 0 else (hi, lo)
    if b[0] is None or b[0] <= 0:
        return UNKNOWN
    if None not in a and b[1] is not None:
        corners = [c_div(x, y) for x in a for y in b]  # type: ignore[arg-type]
        return min(corners), max(corners)
    if a[0] is not None and a[0] >= 0:
        return (0 if b[1] is None else c_div(a[0], b[1])), (None if a[1] is None else c_div(a[1], b[0]))
    return UNKNOWN


def _mod(a: Interval, b: Interval) -> Interval:
    if b[0] is not None and b[0] == b[1] and b[0] != 0 and None not in a:
        m = abs(b[0])
        lo, hi = a
        if lo >= 0 and lo // m == hi // m:  # type: ignore[operator]
            return lo % m, hi % m  # type: ignore[operator]
        if hi <= 0 and (-hi) // m == (-lo) // m:  # type: ignore[operator]
            return -((-lo) % m), -((-hi) % m)  # type: ignore[operator]
    # |a % b| < |b|, and the remainder has the sign of a, so it lies between a and 0
    m = None if None in b else max(abs(b[0]), abs(b[1])) - 1  # type: ignore[arg-type]
    if m is not None and m < 0:
        return UNKNOWN  # the divisor is 0: undefined
    lo = 0 if a[0] is not None and a[0] >= 0 else _max_bound(a[0], None if m is None else -m)
    hi = 0 if a[1] is not None and a[1] <= 0 else _min_bound(a[1], m)
    return lo, hi


def _min_bound(x: Bound, y: Bound) -> Bound:
    """The smaller of two upper ends, where None means unbounded."""
    return y if x is None else x if y is None else min(x, y)


def _max_bound(x: Bound, y: Bound) -> Bound:
    """The larger of two lower ends, where None means unbounded."""
    return y if x is None else x if y is None else max(x, y)


def _min(a: Interval, b: Interval) -> Interval:
    lo = None if a[0] is None or b[0] is None else min(a[0], b[0])
    return lo, _min_bound(a[1], b[1])


def _max(a: Interval, b: Interval) -> Interval:
    hi = None if a[1] is None or b[1] is None else max(a[1], b[1])
    return _max_bound(a[0], b[0]), hi


def _union(a: Interval, b: Interval) -> Interval:
    lo = None if a[0] is None or b[0] is None else min(a[0], b[0])
    hi = None if a[1] is None or b[1] is None else max(a[1], b[1])
    return lo, hi


def _type_range(t: object) -> Interval:
    if isinstance(t, DataType):
        if t.kind == "uint":
            return 0, int(t.max_value())
        if t.is_bool():
            return 0, 1
    return UNKNOWN


_BINARY = {"add": _add, "sub": lambda a, b: _add(a, _neg(b)), "mul": _mul, "div": _div, "mod": _mod,
           "min": _min, "max": _max}


def scope_vars(e: Node) -> tuple[Var, ...]:
    """The variables ``e`` mentions, ordered by name: what its range and its simplified form
    depend on (kept on the node, as its hash is)."""
    vs = e.__dict__.get("_vars")
    if vs is None:
        if isinstance(e, Var):
            vs = (e,)
        else:
            found = {v for c in e.children() for v in scope_vars(c)}
            vs = tuple(sorted(found, key=lambda v: (v.name, str(v.type)))) if len(found) > 1 else tuple(found)
        object.__setattr__(e, "_vars", vs)
    return vs


class BoundAnalyzer:
    """Ranges of integer expressions under scoped facts about variables.

    ``push(v, lo, hi)`` states that ``v`` lies in ``[lo, hi]`` until the matching ``pop(v)``.
    What is known of an expression depends only on the facts about its variables
    (:meth:`facts`): results cached under them stay right when facts about other variables
    come and go (a kernel's loops bind the same names many times over).
    """

    def __init__(self, bounds: Mapping[Var, tuple[int | None, int | None]] | None = None):
        self._facts: dict[Var, list[tuple[Interval, Expr | None]]] = {}
        self._cache: dict[tuple[Expr, tuple], Interval] = {}
        for v, (lo, hi) in (bounds or {}).items():
            self.push(v, lo, hi)

    def push(self, v: Var, lo: Bound, hi: Bound, extent: Expr | None = None) -> None:
        """From now on ``v`` lies in ``[lo, hi]``; ``extent`` names the loop bound when ``v``
        is a loop variable (so ``v < extent`` is known even when the extent is symbolic)."""
        self._facts.setdefault(v, []).append(((lo, hi), extent))

    def pop(self, v: Var) -> None:
        """Forgets the latest fact pushed for ``v``."""
        stack = self._facts[v]
        stack.pop()
        if not stack:
            del self._facts[v]

    def facts(self, e: Expr) -> tuple:
        """The facts in force about each of ``e``'s variables (None where there are none)."""
        facts = self._facts
        return tuple(stack[-1] if (stack := facts.get(v)) else None for v in scope_vars(e))

    def loop_extent(self, v: Var) -> Expr | None:
        """The extent of the loop that binds ``v``, if ``v`` is a loop variable in scope."""
        stack = self._facts.get(v)
        return stack[-1][1] if stack else None

    def bound(self, e: Expr) -> Interval:
        """The range ``(lo, hi)`` of an integer expression; None marks an unknown end."""
        if isinstance(e, Constant):
            return self._bound(e)
        key = (e, self.facts(e))
        hit = self._cache.get(key)
        if hit is None:
            hit = self._bound(e)
            if hit[0] is not None and hit[1] is not None and hit[0] > hit[1]:
                hit = UNKNOWN  # only reachable through an undefined operation
            self._cache[key] = hit
        return hit

    def _bound(self, e: Expr) -> Interval:
        if isinstance(e, Constant):
            v = e.value
            return (int(v), int(v)) if isinstance(v, (int, bool)) else UNKNOWN
        if not (isinstance(e.type, DataType) and (e.type.is_integer() or e.type.is_bool())):
            return UNKNOWN
        if isinstance(e, Var):
            stack = self._facts.get(e)
            known = stack[-1][0] if stack else UNKNOWN
            t = _type_range(e.type)
            return _max_bound(known[0], t[0]), _min_bound(known[1], t[1])
        if isinstance(e, Binary) and e.op in _BINARY:
            return _BINARY[e.op](self.bound(e.a), self.bound(e.b))
        if isinstance(e, Unary) and e.op == "neg":
            return _neg(self.bound(e.a))
        if isinstance(e, Select):
            return _union(self.bound(e.a), self.bound(e.b))
        if isinstance(e, IndexCheck):  # a position inside the dimension, whatever the data held
            hi = self.bound(e.extent)[1]
            return 0, None if hi is None else max(hi - 1, 0)
        if isinstance(e, Cast) and isinstance(e.value.type, DataType) and not e.value.type.is_float():
            inner, t = self.bound(e.value), e.dtype
            fits = None not in inner and t.min_value() <= inner[0] <= inner[1] <= t.max_value()  # type: ignore[operator]
            return inner if fits else _type_range(t)
        return _type_range(e.type)

    def lower(self, e: Expr) -> Bound:
        return self.bound(e)[0]

    def upper(self, e: Expr) -> Bound:
        return self.bound(e)[1]

    def is_nonneg(self, e: Expr) -> bool:
        """Whether ``e >= 0`` is known."""
        lo = self.bound(e)[0]
        return lo is not None and lo >= 0
