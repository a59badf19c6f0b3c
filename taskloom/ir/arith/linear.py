"""The normal form of integer sums: ``k1 * t1 + k2 * t2 + ... + c``.

The terms ``t`` are the parts of a sum that are not sums themselves (variables, ``//``,
``%``, ``min``, loads, products of two non-constant factors); the coefficients ``k`` and
the constant ``c`` are ints. Bringing sums to this form collects like terms
(``i*4 + j + i*8 -> i*12 + j``), cancels (``x - x -> 0``), folds constants and moves them
to the right. Terms keep the order in which they first appear, so the result reads like
the source: positive terms first, then the subtracted ones, the constant last.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from taskloom.ir.dtypes import DataType
from taskloom.ir.expr import Binary, Constant, Expr, Unary


@dataclass
class Linear:
    """``sum(k * t for t, k in terms.items()) + const`` over the integer type ``dtype``."""

    dtype: DataType
    terms: dict[Expr, int] = field(default_factory=dict)
    const: int = 0

    def add(self, other: "Linear", k: int = 1) -> "Linear":
        """``self + k * other``, in place."""
        for t, c in other.terms.items():
            self.add_term(t, c * k)
        self.const += other.const * k
        return self

    def add_term(self, t: Expr, k: int) -> None:
        c = self.terms.get(t, 0) + k
        if c == 0:
            self.terms.pop(t, None)
        else:
            self.terms[t] = c

    def scaled(self, k: int) -> "Linear":
        return Linear(self.dtype).add(self, k)

    def is_const(self) -> bool:
        return not self.terms

    def single(self) -> tuple[Expr, int] | None:
        """``(t, k)`` when the form is exactly ``k * t``."""
        if len(self.terms) == 1 and self.const == 0:
            return next(iter(self.terms.items()))
        return None

    def to_expr(self) -> Expr:
        """The form written back as an expression."""
        def term(t: Expr, k: int) -> Expr:
            return t if k == 1 else Binary("mul", t, Constant(k, self.dtype))

        pos = [(t, k) for t, k in self.terms.items() if k > 0]
        neg = [(t, -k) for t, k in self.terms.items() if k < 0]
        out: Expr | None = None
        for t, k in pos:
            out = term(t, k) if out is None else Binary("add", out, term(t, k))
        if out is None and self.const > 0 and neg:
            out = Constant(self.const, self.dtype)  # 4 - i rather than -i + 4
            const = 0
        else:
            const = self.const
        for t, k in neg:
            out = Unary("neg", term(t, k)) if out is None else Binary("sub", out, term(t, k))
        if out is None:
            return Constant(const, self.dtype)
        if const > 0:
            out = Binary("add", out, Constant(const, self.dtype))
        elif const < 0:
            out = Binary("sub", out, Constant(-const, self.dtype))
        return out


def is_int(e: Expr) -> bool:
    return isinstance(e.type, DataType) and e.type.is_integer()


def linear_form(e: Expr) -> Linear:
    """The normal form of an integer expression (its operands should be simplified already:
    the form looks through ``+``, ``-``, negation and multiplication only)."""
    assert isinstance(e.type, DataType)
    out = Linear(e.type)
    if isinstance(e, Constant):
        out.const = int(e.value)
    elif isinstance(e, Binary) and e.op in ("add", "sub"):
        out.add(linear_form(e.a)).add(linear_form(e.b), 1 if e.op == "add" else -1)
    elif isinstance(e, Unary) and e.op == "neg":
        out.add(linear_form(e.a), -1)
    elif isinstance(e, Binary) and e.op == "mul":
        a, b = linear_form(e.a), linear_form(e.b)
        if a.is_const():
            out.add(b, a.const)
        elif b.is_const():
            out.add(a, b.const)
        else:
            sa, sb = a.single(), b.single()
            if sa is not None and sb is not None:  # (i*4) * j -> (i*j) * 4
                out.add_term(_product(sa[0], sb[0]), sa[1] * sb[1])
            elif sa is not None:  # (i*2) * (j - 1) -> (i*(j - 1)) * 2: the coefficient stays outside,
                out.add_term(_product(sa[0], b.to_expr()), sa[1])  # or the form would not be a fixed point
            elif sb is not None:
                out.add_term(_product(a.to_expr(), sb[0]), sb[1])
            else:
                out.add_term(_product(a.to_expr(), b.to_expr()), 1)
    else:
        out.add_term(e, 1)
    return out


def _factors(e: Expr) -> list[Expr]:
    if isinstance(e, Binary) and e.op == "mul":
        return _factors(e.a) + _factors(e.b)
    return [e]


def _product(a: Expr, b: Expr) -> Expr:
    """``a * b`` with its factors in a canonical order, so ``B * S`` and ``S * B`` are one term."""
    factors = sorted(_factors(a) + _factors(b), key=repr)
    out = factors[0]
    for f in factors[1:]:
        out = Binary("mul", out, f)
    return out


def _div_mod_parts(t: Expr, op: str) -> tuple[Expr, int] | None:
    """``(x, c)`` when ``t`` is ``x // c`` (or ``x % c``) with a constant ``c > 0``."""
    if isinstance(t, Binary) and t.op == op and isinstance(t.b, Constant) and t.b.value > 0:
        return t.a, int(t.b.value)
    return None


def recombine_div_mod(form: Linear, simplify: Callable[[Expr], Expr]) -> bool:
    """Rewrites, in place, the pairs that C's identity ``(x / c) * c + x % c == x`` joins:

    - ``k*c * (x // c) + k * (x % c)  ->  k * x``, also when the second term equals
      ``x % c`` only after simplification (``(w % 32) // 8 * 8 + w % 8 -> w % 32``);
    - ``k*c * ((x // c) % d) + k * (x % c)  ->  k * (x % (c*d))``;
    - ``k * x - k*c * (x // c)  ->  k * (x % c)``.

    These hold for every sign of ``x`` (truncating ``//`` and ``%`` nest like floored ones:
    ``(x // c) // d == x // (c*d)``), so no bounds are needed. Returns whether the form changed.
    """
    if _recombine_symbolic(form):
        return True
    for t, kt in list(form.terms.items()):
        outer = _div_mod_parts(t, "mod")
        inner, d = (outer[0], outer[1]) if outer and _div_mod_parts(outer[0], "div") else (t, None)
        parts = _div_mod_parts(inner, "div")
        if parts is None or kt % parts[1] != 0 or (d is not None and parts[1] * d > form.dtype.max_value()):
            continue
        x, c = parts
        k = kt // c
        rem = simplify(Binary("mod", x, Constant(c, form.dtype)))
        if form.terms.get(rem) == k:
            whole = x if d is None else simplify(Binary("mod", x, Constant(c * d, form.dtype)))
            form.add_term(t, -kt)
            form.add_term(rem, -k)
            form.add(linear_form(whole), k)
            return True
        if d is not None:
            continue
        # -k * x, term by term, next to k*c * (x // c): their sum is -k * (x % c)
        xs = linear_form(x)
        if xs.terms and all(form.terms.get(u, 0) == -ku * k for u, ku in xs.terms.items()):
            form.add_term(t, -kt)
            form.add(xs, k)  # cancels the terms of -k * x, and adds k times x's constant
            form.add_term(rem, -k)
            return True
    return False


def _recombine_symbolic(form: Linear) -> bool:
    """``k * ((x // m) * m) + k * (x % m) -> k * x`` for a divisor ``m`` that is not a constant
    (a symbolic dimension): the same identity, matched on the product term as a whole."""
    for t, kt in list(form.terms.items()):
        if not (isinstance(t, Binary) and t.op == "mul"):
            continue
        for div, m in ((t.a, t.b), (t.b, t.a)):
            if isinstance(div, Binary) and div.op == "div" and div.b == m and not isinstance(m, Constant):
                rem = Binary("mod", div.a, m)
                if form.terms.get(rem) == kt:
                    form.add_term(t, -kt)
                    form.add_term(rem, -kt)
                    form.add(linear_form(div.a), kt)
                    return True
    return False
