"""Primitive functions callable from the IR (``exp(x)``, ``fma(a, b, c)``, ``reduce_add(v)``).

A primitive declares its arity and how its result type follows from its arguments;
each backend says how to emit it. New primitives register here, so the script parser
and the printer know them without change.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from taskloom.errors import IRError
from taskloom.ir.dtypes import DataType, Type, VectorType

if TYPE_CHECKING:
    from taskloom.ir.expr import Expr


@dataclass(frozen=True)
class Primitive:
    name: str
    arity: int
    type_rule: Callable[[tuple["Expr", ...]], Type]
    doc: str = ""

    def result_type(self, args: tuple["Expr", ...]) -> Type:
        if len(args) != self.arity:
            raise IRError(f"{self.name}() takes {self.arity} argument(s), got {len(args)}")
        return self.type_rule(args)


_REGISTRY: dict[str, Primitive] = {}


def register_primitive(p: Primitive) -> Primitive:
    """Add a primitive to the registry (a name may be registered once)."""
    if p.name in _REGISTRY:
        raise IRError(f"primitive {p.name!r} is already registered")
    _REGISTRY[p.name] = p
    return p


def lookup_primitive(name: str) -> Primitive:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise IRError(f"unknown primitive {name!r}; known: {', '.join(sorted(_REGISTRY))}") from None


def is_primitive(name: str) -> bool:
    return name in _REGISTRY


def primitive_names() -> list[str]:
    return sorted(_REGISTRY)


def _same_type(name: str, float_only: bool):
    """Every argument has the first argument's type, which is the result type; with
    ``float_only`` that type must be a float scalar or vector."""
    def rule(args: tuple["Expr", ...]) -> Type:
        t = args[0].type
        base = t.base if isinstance(t, VectorType) else t
        if float_only and not (isinstance(base, DataType) and base.is_float()):
            raise IRError(f"{name}() needs float arguments, got {t!r}")
        for a in args[1:]:
            if a.type != t:
                raise IRError(f"{name}() arguments have types {t!r} and {a.type!r}; they must match")
        return t
    return rule


def _vector_reduce(name: str):
    def rule(args: tuple["Expr", ...]) -> Type:
        t = args[0].type
        if not isinstance(t, VectorType):
            raise IRError(f"{name}() reduces a vector to a scalar, got {t!r}")
        return t.base
    return rule


for _n in ("exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "erf", "floor", "ceil", "sin", "cos", "sigmoid",
           "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log10", "round"):
    register_primitive(Primitive(_n, 1, _same_type(_n, True), f"elementwise {_n}"))
register_primitive(Primitive("atan2", 2, _same_type("atan2", True), "the angle of the point (b, a)"))
register_primitive(Primitive("abs", 1, _same_type("abs", False), "absolute value"))
register_primitive(Primitive("pow", 2, _same_type("pow", True), "a to the power b"))
register_primitive(Primitive("fma", 3, _same_type("fma", True), "a * b + c, fused (one rounding)"))
for _n in ("reduce_add", "reduce_max", "reduce_min"):
    register_primitive(Primitive(_n, 1, _vector_reduce(_n), "horizontal reduction of a vector"))
