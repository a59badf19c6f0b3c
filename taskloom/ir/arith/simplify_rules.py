"""The rule table of the index simplifier (:mod:`taskloom.transforms.simplify`).

Each rule is a small ``pattern -> replacement`` rewrite of one node (see
:mod:`taskloom.ir.arith.rewrite_rules`); the table is tried in order and the first rule
that fires wins. Every rewrite is exact under C semantics (``//`` and ``%`` truncate toward
zero, integers do not overflow); a rule that needs a value's sign or size asks the bounds
analysis and does nothing when the answer is unknown. Float rules keep IEEE results
bit for bit: no reassociation, ``x + 0.0`` and ``x * 0.0`` stay.
"""
from __future__ import annotations

import math

import numpy as np

from taskloom.ir.dtypes import DataType, boolean
from taskloom.ir.expr import (COMPARE_OPS, Binary, Cast, Constant, Expr, IndexCheck, Select, Unary, Var, cast, eq,
                              logical_and, logical_not, logical_or, maximum, minimum, ne, select)
from taskloom.ir.arith.bounds import c_div, c_mod
from taskloom.ir.arith.linear import Linear, linear_form, recombine_div_mod
from taskloom.ir.arith.rewrite_rules import ANY, ANY_FIELD, NUM, Match, RuleTable, rule, wild

# ----------------------------------------------------------------------------- folding

_FLOAT_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
_INT_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
            "min": min, "max": max, "bitand": lambda a, b: a & b, "bitor": lambda a, b: a | b,
            "bitxor": lambda a, b: a ^ b}
_COMPARE = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "eq": lambda a, b: a == b,
            "ne": lambda a, b: a != b}


def _fits(v: int, t: DataType) -> bool:
    return t.min_value() <= v <= t.max_value()


def fold_binary(op: str, a: Constant, b: Constant) -> Expr | None:
    """``a op b`` on constants as the generated C computes it, or None when it cannot be
    folded (a division by zero, a result outside the type)."""
    x, y, t = a.value, b.value, a.type
    if op in COMPARE_OPS:
        return Constant(_COMPARE[op](x, y), boolean)
    if t.is_bool():
        return Constant(x and y if op == "and" else x or y, t) if op in ("and", "or") else None
    if t.is_float():
        if op in _FLOAT_OPS and t.numpy is not None and not (op == "div" and y == 0):
            with np.errstate(all="ignore"):  # the result is rounded to the constants' own type
                return Constant(float(_FLOAT_OPS[op](t.numpy.type(x), t.numpy.type(y))), t)
        if op == "mod" and y != 0:
            return Constant(math.fmod(x, y), t)
        # C's fmin/fmax may pick either of NaN and a number, or of 0.0 and -0.0
        if op in ("min", "max") and not (math.isnan(x) or math.isnan(y) or x == y == 0.0):
            return Constant(min(x, y) if op == "min" else max(x, y), t)
        return None
    if op in ("div", "mod"):
        v = None if y == 0 else c_div(x, y) if op == "div" else c_mod(x, y)
    elif op in ("shl", "shr"):
        v = None if x < 0 or not 0 <= y < 8 * t.nbytes else x << y if op == "shl" else x >> y
    else:
        v = _INT_OPS[op](x, y)
    # a result outside the type would wrap at run time; leave such an operation alone
    return Constant(v, t) if v is not None and _fits(v, t) else None


def _fold(m: Match) -> Expr | None:
    """Computes an operation whose operands are all constants."""
    e = m.node
    if isinstance(e, Binary) and isinstance(e.a, Constant) and isinstance(e.b, Constant):
        return fold_binary(e.op, e.a, e.b)
    if isinstance(e, Unary) and isinstance(e.a, Constant):
        x, t = e.a.value, e.a.type
        if e.op == "not":
            return Constant(not x, t)
        v = -x if e.op == "neg" else ~x
        return Constant(v, t) if t.is_float() or _fits(v, t) else None
    if isinstance(e, Cast) and isinstance(e.value, Constant):
        out = cast(e.value, e.dtype)
        if not isinstance(out, Constant) or (e.dtype.is_float() and e.dtype.numpy is None):
            return None
        if e.dtype.is_float():  # round to the target's precision
            return Constant(float(e.dtype.numpy.type(out.value)), e.dtype)
        return out
    return None


# ----------------------------------------------------------------------------- rule helpers

def _c(m: Match, name: str = "c") -> int:
    return int(m.bindings[name].value)


def _zero(m: Match) -> Expr:
    return Constant(0, m.node.type)


def _canonical_sum(m: Match) -> Expr | None:
    form = linear_form(m.node)
    while recombine_div_mod(form, m.simplify):
        pass
    if not all(_fits(v, form.dtype) for v in (form.const, *form.terms.values())):
        return None  # a folded constant would wrap: leave the operations to the program
    return form.to_expr()


def _same_quotient(m: Match) -> int | None:
    """``x // c`` when it is one value over the whole range of ``x``."""
    c = _c(m)
    lo, hi = m.bounds.bound(m.x)
    if c == 0 or lo is None or hi is None:
        return None
    q = c_div(lo, c)
    return q if q == c_div(hi, c) else None


def _split(m: Match, op: str) -> Expr | None:
    """``(c*q + r) // c -> q + r // c`` and ``(c*q + r) % c -> r % c``, for ``c > 0``.

    ``q`` gathers the terms whose coefficients ``c`` divides. Both need ``c*q + r >= 0`` and
    ``r >= 0``: then C's truncation is floor division and the split is exact. When ``r`` is
    0 the division is exact and needs no bounds.
    """
    c = _c(m)
    if c <= 0:
        return None
    form = linear_form(m.x)
    q, r = Linear(form.dtype), Linear(form.dtype)
    for t, k in form.terms.items():
        if k % c == 0:
            q.add_term(t, k // c)
        else:
            r.add_term(t, k)
    q.const, r.const = divmod(form.const, c)
    if q.is_const() and q.const == 0:
        return None
    if r.is_const() and r.const == 0:
        return q.to_expr() if op == "div" else Constant(0, form.dtype)
    rest = r.to_expr()
    if not (m.bounds.is_nonneg(m.x) and m.bounds.is_nonneg(rest)):
        return None
    if op == "div":
        return Binary("add", q.to_expr(), Binary("div", rest, m.c))
    return Binary("mod", rest, m.c)


def _drop_low(m: Match, op: str) -> Expr | None:
    """``(a*q + r) // c -> q // (c/a)`` and ``(a*q + r) % c -> (q % (c/a)) * a + r`` when
    ``a`` divides ``c``, ``0 <= r < a`` and ``a*q + r >= 0``: the low part ``r`` cannot carry
    into the quotient (``(x0*12 + x1) // 36 -> x0 // 3`` for ``x1`` in ``[0, 12)``)."""
    c = _c(m)
    if c <= 1 or not m.bounds.is_nonneg(m.x):
        return None
    form = linear_form(m.x)
    for a in sorted((d for d in range(2, c) if c % d == 0), reverse=True):
        q, r = Linear(form.dtype), Linear(form.dtype)
        for t, k in form.terms.items():
            (q.add_term(t, k // a) if k % a == 0 else r.add_term(t, k))
        q.const, r.const = divmod(form.const, a)
        if q.is_const():
            continue
        lo, hi = m.bounds.bound(r.to_expr())
        if lo is None or hi is None or lo < 0 or hi >= a:
            continue
        k = Constant(c // a, form.dtype)
        if op == "div":
            return Binary("div", q.to_expr(), k)
        return Binary("add", Binary("mul", Binary("mod", q.to_expr(), k), Constant(a, form.dtype)), r.to_expr())
    return None


def _difference(m: Match) -> tuple[int | None, int | None]:
    """The range of ``x - y``, after simplification (so that shared terms cancel)."""
    return m.bounds.bound(m.simplify(Binary("sub", m.x, m.y)))


_DECIDE = {  # op -> (known true, known false), from the range (lo, hi) of x - y
    "lt": (lambda lo, hi: hi is not None and hi < 0, lambda lo, hi: lo is not None and lo >= 0),
    "le": (lambda lo, hi: hi is not None and hi <= 0, lambda lo, hi: lo is not None and lo > 0),
    "eq": (lambda lo, hi: lo == hi == 0, lambda lo, hi: (hi is not None and hi < 0) or (lo is not None and lo > 0)),
}
_DECIDE["ne"] = (_DECIDE["eq"][1], _DECIDE["eq"][0])


def _compare_by_bounds(m: Match) -> Expr | None:
    lo, hi = _difference(m)
    yes, no = _DECIDE[m.node.op]
    return Constant(True, boolean) if yes(lo, hi) else Constant(False, boolean) if no(lo, hi) else None


def _min_max_by_bounds(m: Match) -> Expr | None:
    lo, hi = _difference(m)
    x_smaller = hi is not None and hi <= 0
    y_smaller = lo is not None and lo >= 0
    if m.node.op == "min":
        return m.x if x_smaller else m.y if y_smaller else None
    return m.y if x_smaller else m.x if y_smaller else None


def _index_in_range(m: Match) -> bool:
    """Whether an index check cannot fail: its value lies in ``[0, extent)`` for every extent."""
    lo = m.bounds.lower(m.node.extent)
    return lo is not None and m.in_range(m.x, 0, lo - 1)


def _is_loop_bound(m: Match) -> bool:
    return isinstance(m.x, Var) and m.bounds.loop_extent(m.x) == m.y


# ----------------------------------------------------------------------------- the rule table

x, y = wild("x"), wild("y")                                   # integer expressions
c, c1, c2 = wild("c", const=True), wild("c1", const=True), wild("c2", const=True)
nx = wild("x", NUM)                                           # integer or float
ax, ay, ac = wild("x", ANY), wild("y", ANY), wild("c", ANY, const=True)
bx = wild("x", boolean)
cond = wild("cond", boolean)
TRUE, FALSE = Constant(True, boolean), Constant(False, boolean)

RULES = RuleTable([
    rule("fold", wild("e", ANY), _fold),
    # identities (x + 0.0 is kept: -0.0 + 0.0 is +0.0)
    rule("add-zero", [x + 0, 0 + x], lambda m: m.x),
    rule("sub-zero", nx - 0, lambda m: m.x),
    rule("mul-one", [nx * 1, 1 * nx], lambda m: m.x),
    rule("mul-zero", [x * 0, 0 * x], _zero),
    rule("div-one", Binary("div", nx, Constant(1, NUM)), lambda m: m.x),
    rule("mod-one", x % c, _zero, when=lambda m: abs(_c(m)) == 1),
    rule("neg-neg", -(-nx), lambda m: m.x),
    rule("constant-right", [Binary(op, ac, ax) for op in ("add", "mul", "eq", "ne")]
         + [minimum(c, x), maximum(c, x)],
         lambda m: Binary(m.node.op, m.x, m.c), when=lambda m: not isinstance(m.x, Constant)),
    rule("canonical-sum", [x + y, x - y, x * y, -x], _canonical_sum),
    # division and remainder by constants
    rule("div-in-one-block", x // c, lambda m: Constant(_same_quotient(m), m.x.type),
         when=lambda m: _same_quotient(m) is not None),
    rule("mod-in-one-block", x % c,
         lambda m: m.simplify(m.x - _same_quotient(m) * _c(m)),
         when=lambda m: _same_quotient(m) is not None),
    rule("div-div", (x // c1) // c2, lambda m: m.x // (_c(m, "c1") * _c(m, "c2")),
         when=lambda m: _c(m, "c1") > 0 and _c(m, "c2") > 0 and _fits(_c(m, "c1") * _c(m, "c2"), m.x.type)),
    rule("div-of-multiple", (x * c1) // c2, lambda m: m.x * c_div(_c(m, "c1"), _c(m, "c2")),
         when=lambda m: _c(m, "c2") != 0 and c_mod(_c(m, "c1"), _c(m, "c2")) == 0),
    rule("div-of-factor", (x * c1) // c2, lambda m: m.x // (_c(m, "c2") // _c(m, "c1")),
         when=lambda m: _c(m, "c1") > 0 and _c(m, "c2") > 0 and _c(m, "c2") % _c(m, "c1") == 0),
    rule("mod-of-multiple", (x * c1) % c2, _zero,
         when=lambda m: _c(m, "c2") != 0 and c_mod(_c(m, "c1"), _c(m, "c2")) == 0),
    # C's remainder has the sign of x and |x % c| = |x| mod |c|, so the signs of c1, c2 do not matter
    rule("mod-mod", (x % c1) % c2, lambda m: m.x % m.c2,
         when=lambda m: _c(m, "c2") != 0 and _c(m, "c1") % _c(m, "c2") == 0),
    # a symbolic divisor scaled by a constant: for x >= 0 and y >= 1, both truncations are floors
    # and nest (``(x0*768 + x1) // (s*768) -> x0 // s`` for ``x1`` in ``[0, 768)``)
    rule("div-by-scaled-symbol", x // (y * c), lambda m: (m.x // m.c) // m.y,
         when=lambda m: _c(m) > 0 and not isinstance(m.y, Constant) and m.bounds.is_nonneg(m.x)
         and (m.bounds.lower(m.y) or 0) >= 1),
    rule("div-split-sum", x // c, lambda m: _split(m, "div")),
    rule("mod-split-sum", x % c, lambda m: _split(m, "mod")),
    rule("div-drop-low", x // c, lambda m: _drop_low(m, "div")),
    rule("mod-drop-low", x % c, lambda m: _drop_low(m, "mod")),
    # min and max
    rule("min-same", minimum(ax, ax), lambda m: m.x),
    rule("max-same", maximum(ax, ax), lambda m: m.x),
    rule("min-min", minimum(minimum(x, c1), c2), lambda m: minimum(m.x, min(_c(m, "c1"), _c(m, "c2")))),
    rule("max-max", maximum(maximum(x, c1), c2), lambda m: maximum(m.x, max(_c(m, "c1"), _c(m, "c2")))),
    rule("min-max-by-bounds", [minimum(x, y), maximum(x, y)], _min_max_by_bounds),
    # comparisons (of integers: a float may be NaN, which is not equal to itself)
    rule("lt-self", x < x, lambda m: FALSE),
    rule("le-eq-self", [x <= x, eq(x, x)], lambda m: TRUE),
    rule("ne-self", ne(x, x), lambda m: FALSE),
    rule("loop-var-below-extent", x < y, lambda m: TRUE, when=_is_loop_bound),
    rule("compare-by-bounds", [x < y, x <= y, eq(x, y), ne(x, y)], _compare_by_bounds),
    # logic
    rule("and-true", [logical_and(bx, True), logical_and(True, bx)], lambda m: m.x),
    rule("and-false", [logical_and(bx, False), logical_and(False, bx)], lambda m: FALSE),
    rule("or-false", [logical_or(bx, False), logical_or(False, bx)], lambda m: m.x),
    rule("or-true", [logical_or(bx, True), logical_or(True, bx)], lambda m: TRUE),
    rule("and-same", logical_and(bx, bx), lambda m: m.x),
    rule("or-same", logical_or(bx, bx), lambda m: m.x),
    rule("not-not", logical_not(logical_not(bx)), lambda m: m.x),
    rule("not-lt", logical_not(x < y), lambda m: m.y <= m.x),
    rule("not-le", logical_not(x <= y), lambda m: m.y < m.x),
    rule("not-eq", logical_not(eq(ax, ay)), lambda m: ne(m.x, m.y)),
    rule("not-ne", logical_not(ne(ax, ay)), lambda m: eq(m.x, m.y)),
    # select and cast
    rule("select-true", Select(TRUE, ax, ay), lambda m: m.x),
    rule("select-false", Select(FALSE, ax, ay), lambda m: m.y),
    rule("select-same", Select(cond, ax, ax), lambda m: m.x),
    rule("select-not", Select(logical_not(cond), ax, ay), lambda m: select(m.cond, m.y, m.x)),
    rule("cast-to-own-type", Cast(ax, ANY), lambda m: m.x, when=lambda m: m.x.type == m.node.dtype),
    # an index check that cannot fail (a constant, a small unsigned type) is the index itself
    rule("index-in-range", IndexCheck(x, y, ANY_FIELD, ANY_FIELD), lambda m: cast(m.x, m.node.type),
         when=_index_in_range),
])
