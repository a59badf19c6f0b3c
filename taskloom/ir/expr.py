"""Expressions of the tensor-program IR.

Expressions are immutable and typed at construction; a malformed one raises
:class:`~taskloom.errors.IRError` where it is built. Python operators build expressions
(``i * 4 + j``, ``x < n``); ``==`` stays structural equality, so comparisons for equality
are built with :func:`eq` / :func:`ne`.

Integer ``//`` and ``%`` follow C: they truncate toward zero. Index arithmetic is
non-negative, where this is the same as Python's floor division.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence, Union

from taskloom.errors import IRError
from taskloom.ir import dtypes
from taskloom.ir.dtypes import (DataType, PointerType, TensorType, Type, VectorType, boolean,
                                element_type, index_type, promote)
from taskloom.ir.node import Node

ExprLike = Union["Expr", int, float, bool]


class Expr(Node):
    """Base of all expressions. Every expression has a ``type``."""

    __slots__ = ()
    type: Type

    def __repr__(self) -> str:
        from taskloom.ir.printer import astext
        return astext(self)

    def __bool__(self) -> bool:
        raise IRError(f"the IR expression `{self!r}` has no Python truth value; build an If "
                      "statement or a select() instead")

    # arithmetic
    def __add__(self, o: ExprLike) -> Expr: return binary("add", self, o)
    def __radd__(self, o: ExprLike) -> Expr: return binary("add", o, self)
    def __sub__(self, o: ExprLike) -> Expr: return binary("sub", self, o)
    def __rsub__(self, o: ExprLike) -> Expr: return binary("sub", o, self)
    def __mul__(self, o: ExprLike) -> Expr: return binary("mul", self, o)
    def __rmul__(self, o: ExprLike) -> Expr: return binary("mul", o, self)
    def __truediv__(self, o: ExprLike) -> Expr: return true_div(self, o)
    def __rtruediv__(self, o: ExprLike) -> Expr: return true_div(o, self)
    def __floordiv__(self, o: ExprLike) -> Expr: return int_div(self, o)
    def __rfloordiv__(self, o: ExprLike) -> Expr: return int_div(o, self)
    def __mod__(self, o: ExprLike) -> Expr: return binary("mod", self, o)
    def __rmod__(self, o: ExprLike) -> Expr: return binary("mod", o, self)
    def __neg__(self) -> Expr: return unary("neg", self)
    # bitwise
    def __and__(self, o: ExprLike) -> Expr: return binary("bitand", self, o)
    def __rand__(self, o: ExprLike) -> Expr: return binary("bitand", o, self)
    def __or__(self, o: ExprLike) -> Expr: return binary("bitor", self, o)
    def __ror__(self, o: ExprLike) -> Expr: return binary("bitor", o, self)
    def __xor__(self, o: ExprLike) -> Expr: return binary("bitxor", self, o)
    def __rxor__(self, o: ExprLike) -> Expr: return binary("bitxor", o, self)
    def __lshift__(self, o: ExprLike) -> Expr: return binary("shl", self, o)
    def __rshift__(self, o: ExprLike) -> Expr: return binary("shr", self, o)
    def __invert__(self) -> Expr: return unary("bitnot", self)
    # comparisons (== is structural equality; use eq()/ne())
    def __lt__(self, o: ExprLike) -> Expr: return binary("lt", self, o)
    def __le__(self, o: ExprLike) -> Expr: return binary("le", self, o)
    def __gt__(self, o: ExprLike) -> Expr: return binary("lt", o, self)
    def __ge__(self, o: ExprLike) -> Expr: return binary("le", o, self)

    __hash__ = Node.__hash__
    __eq__ = Node.__eq__

    def __getitem__(self, idx: Any) -> Expr:
        """``A[i, j]``: the element of a tensor or pointer."""
        items = idx if isinstance(idx, tuple) else (idx,)
        return TensorElement(self, tuple(as_expr(i) for i in items))


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A named variable. Equality is by name and type, so names must be unique in a scope."""

    name: str
    type: Type

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise IRError(f"variable name {self.name!r} is not an identifier")


@dataclass(frozen=True, eq=False, repr=False)
class Constant(Expr):
    """A literal of a scalar type; the value is normalised to int, float or bool."""

    value: int | float | bool
    type: DataType

    def __post_init__(self) -> None:
        if not isinstance(self.type, DataType):
            raise IRError(f"a constant must have a scalar type, got {self.type!r}")
        v = self.value
        if self.type.is_float():
            v = float(v)
        elif self.type.is_bool():
            v = bool(v)
        else:
            if isinstance(v, float) and not v.is_integer():
                raise IRError(f"constant {v} is not an integer, so it cannot have type {self.type!r}")
            v = int(v)
        object.__setattr__(self, "value", v)

    def _fields(self) -> tuple[Any, ...]:
        # floats compare by their text, so that nan equals nan and -0.0 differs from 0.0
        return (repr(self.value) if isinstance(self.value, float) else self.value, self.type)


ARITH_OPS = ("add", "sub", "mul", "div", "mod", "min", "max")
BIT_OPS = ("bitand", "bitor", "bitxor", "shl", "shr")
COMPARE_OPS = ("lt", "le", "eq", "ne")
LOGIC_OPS = ("and", "or")
BINARY_OPS = ARITH_OPS + BIT_OPS + COMPARE_OPS + LOGIC_OPS
UNARY_OPS = ("neg", "not", "bitnot")


def _lanes(t: Type) -> int:
    return t.lanes if isinstance(t, VectorType) else 1


def _scalar(t: Type) -> DataType:
    if isinstance(t, VectorType):
        return t.base
    if isinstance(t, DataType):
        return t
    raise IRError(f"expected a scalar or vector value, got a value of type {t!r}")


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    """``a op b`` for op in :data:`BINARY_OPS`; both operands have the same type."""

    op: str
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        if self.op not in BINARY_OPS:
            raise IRError(f"unknown binary operator {self.op!r}")
        ta, tb = self.a.type, self.b.type
        if ta != tb:
            raise IRError(f"operands of {self.op} have different types {ta!r} and {tb!r}; "
                          "cast one of them")
        s = _scalar(ta)
        if self.op in BIT_OPS + ("mod",) and not s.is_integer() and not (self.op == "mod" and s.is_float()):
            raise IRError(f"{self.op} needs integer operands, got {ta!r}")
        if self.op in LOGIC_OPS and not s.is_bool():
            raise IRError(f"{self.op} needs bool operands, got {ta!r}")
        if self.op in COMPARE_OPS:
            t: Type = boolean if _lanes(ta) == 1 else VectorType(boolean, _lanes(ta))
        else:
            t = ta
        object.__setattr__(self, "type", t)


@dataclass(frozen=True, eq=False, repr=False)
class Unary(Expr):
    """``op a`` for op in :data:`UNARY_OPS`."""

    op: str
    a: Expr

    def __post_init__(self) -> None:
        if self.op not in UNARY_OPS:
            raise IRError(f"unknown unary operator {self.op!r}")
        s = _scalar(self.a.type)
        if self.op == "not" and not s.is_bool():
            raise IRError(f"`not` needs a bool operand, got {self.a.type!r}")
        if self.op == "bitnot" and not s.is_integer():
            raise IRError(f"`~` needs an integer operand, got {self.a.type!r}")
        object.__setattr__(self, "type", self.a.type)


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    """Converts a scalar (or each lane of a vector) to ``dtype``."""

    value: Expr
    dtype: DataType

    def __post_init__(self) -> None:
        t = self.value.type
        _scalar(t)
        object.__setattr__(self, "type", self.dtype if _lanes(t) == 1 else VectorType(self.dtype, _lanes(t)))


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """``a`` where ``cond`` holds, else ``b`` (both are evaluated)."""

    cond: Expr
    a: Expr
    b: Expr

    def __post_init__(self) -> None:
        if _scalar(self.cond.type) != boolean:
            raise IRError(f"select() needs a bool condition, got {self.cond.type!r}")
        if self.a.type != self.b.type:
            raise IRError(f"select() branches have types {self.a.type!r} and {self.b.type!r}")
        object.__setattr__(self, "type", self.a.type)


def _check_indices(what: str, tensor: Expr, indices: tuple[Expr, ...]) -> None:
    t = tensor.type
    if isinstance(t, TensorType):
        if len(indices) != t.ndim:
            raise IRError(f"{what} of tensor {_name(tensor)} with {len(indices)} indices; "
                          f"it has {t.ndim} dimensions {t!r}")
    elif isinstance(t, PointerType):
        if len(indices) != 1:
            raise IRError(f"{what} of pointer {_name(tensor)} needs exactly one index")
    else:
        raise IRError(f"{what}: {_name(tensor)} of type {t!r} is not a tensor or pointer")
    for i in indices:
        if not (isinstance(i.type, DataType) and i.type.is_integer()):
            raise IRError(f"{what} of {_name(tensor)}: index {i!r} has type {i.type!r}, not an integer")


def _check_count(what: str, count: Expr | None) -> None:
    if count is not None and not (isinstance(count.type, DataType) and count.type.is_integer()):
        raise IRError(f"{what}: the lane count {count!r} has type {count.type!r}, not an integer")


def _name(e: Expr) -> str:
    return f"'{e.name}'" if isinstance(e, Var) else repr(e)


@dataclass(frozen=True, eq=False, repr=False)
class TensorElement(Expr):
    """``A[i, j]``: one element of a tensor (or of a pointer, with one index)."""

    tensor: Expr
    indices: tuple[Expr, ...]

    def __post_init__(self) -> None:
        _check_indices("element access", self.tensor, self.indices)
        object.__setattr__(self, "type", element_type(self.tensor.type))


@dataclass(frozen=True, eq=False, repr=False)
class VectorLoad(Expr):
    """``lanes`` consecutive elements starting at ``A[i, j]`` along the last axis, or with
    ``stride`` > 1 every ``stride``-th one (a gather: pooling and convolutions with strides).

    With ``count`` only the first ``count`` lanes are read and the rest are zero, so a
    loop tail never reads past the end of a row.
    """

    tensor: Expr
    indices: tuple[Expr, ...]
    lanes: int
    count: Expr | None = None
    stride: int = 1

    def __post_init__(self) -> None:
        _check_indices("vector load", self.tensor, self.indices)
        et = element_type(self.tensor.type)
        if not isinstance(et, DataType):
            raise IRError(f"vector load from {_name(self.tensor)} whose elements are {et!r}")
        _check_count("vector load", self.count)
        if not isinstance(self.stride, int) or self.stride < 1:
            raise IRError(f"vector load from {_name(self.tensor)}: stride must be a positive int, got {self.stride!r}")
        object.__setattr__(self, "type", dtypes.vec(et, self.lanes))


@dataclass(frozen=True, eq=False, repr=False)
class Broadcast(Expr):
    """A vector whose ``lanes`` lanes all hold the scalar ``value``."""

    value: Expr
    lanes: int

    def __post_init__(self) -> None:
        if not isinstance(self.value.type, DataType):
            raise IRError(f"broadcast() needs a scalar, got {self.value.type!r}")
        object.__setattr__(self, "type", dtypes.vec(self.value.type, self.lanes))


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A call of a primitive (``exp``, ``fma``, ``reduce_add``...); see :mod:`taskloom.ir.primitives`."""

    func: str
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        from taskloom.ir.primitives import lookup_primitive
        prim = lookup_primitive(self.func)
        object.__setattr__(self, "type", prim.result_type(self.args))


@dataclass(frozen=True, eq=False, repr=False)
class IndexCheck(Expr):
    """``value``, an index read from data, as a position along a dimension of ``extent``,
    checked when the kernel runs. A value in ``[0, extent)`` is the position; with ``wrap``
    one in ``[-extent, 0)`` counts from the end (``-k`` is ``extent - k``). Any other value
    is reported to the kernel's caller as a failure of the check ``what`` (the operator
    and its argument, e.g. ``"embedding(): 'indices'"``) and reads position 0 instead, so
    no load leaves its tensor. The type is the extent's: a position fits where sizes do.
    """

    value: Expr
    extent: Expr
    what: str
    wrap: bool = False

    def __post_init__(self) -> None:
        for name, x in (("value", self.value), ("extent", self.extent)):
            if not (isinstance(x.type, DataType) and x.type.is_integer()):
                raise IRError(f"index check {self.what!r}: the {name} `{x!r}` has type {x.type!r}, not an integer")
        object.__setattr__(self, "type", self.extent.type)


def index_check(value: ExprLike, extent: ExprLike, what: str, wrap: bool = False) -> IndexCheck:
    """The position ``value`` names along a dimension of ``extent``, checked at run time
    (see :class:`IndexCheck`)."""
    return IndexCheck(as_expr(value), as_expr(extent), what, wrap)


# ----------------------------------------------------------------------------- builders

def const(value: int | float | bool, type: DataType | str | None = None) -> Constant:
    """A constant; without a type, bool -> bool, int -> int32 (int64 past its range), float
    -> float32."""
    if type is None:
        type = boolean if isinstance(value, bool) else _int_type(value) if isinstance(value, int) \
            else dtypes.float32
    return Constant(value, dtypes.dtype(type) if isinstance(type, str) else type)


def _int_type(v: int) -> DataType:
    return index_type if -2 ** 31 <= v < 2 ** 31 else dtypes.int64


def as_expr(v: Any, like: Type | None = None) -> Expr:
    """Turn a Python scalar into a constant (of the scalar type of ``like`` when given)."""
    if isinstance(v, Expr):
        return v
    if hasattr(v, "item") and hasattr(v, "dtype"):  # numpy scalar
        v = v.item()
    if isinstance(v, (bool, int, float)):
        if like is not None:
            s = _scalar(like)
            if isinstance(v, float) and not s.is_float():
                return const(v)
            if like == index_type and not isinstance(v, bool) and isinstance(v, int) and _int_type(v) != s:
                return const(v)  # a size past int32 next to an index: promoted to int64, not wrapped
            c = Constant(v, s)
            return Broadcast(c, like.lanes) if isinstance(like, VectorType) else c
        return const(v)
    raise IRError(f"cannot use {v!r} of Python type {type(v).__name__} as an IR expression")


def var(name: str, type: Type | str = index_type) -> Var:
    """A variable: ``var('i')`` is an int32 index, ``var('x', f32)`` a float."""
    return Var(name, dtypes.dtype(type) if isinstance(type, str) else type)


def cast(value: ExprLike, dtype: DataType | str) -> Expr:
    """``value`` converted to ``dtype``; a constant is converted at once, a no-op cast vanishes."""
    dt = dtypes.dtype(dtype)
    e = as_expr(value)
    if e.type == dt or isinstance(e.type, VectorType) and e.type.base == dt:
        return e
    if isinstance(e, Constant):
        v = e.value
        if not dt.is_integer():
            return Constant(v, dt)
        if not (isinstance(v, float) and not math.isfinite(v)):
            # as C converts: truncate toward zero, then wrap to the width of the type
            bits = 8 * dt.nbytes
            v = math.trunc(v) & ((1 << bits) - 1)
            return Constant(v - (1 << bits) if dt.kind == "int" and v >= 1 << (bits - 1) else v, dt)
    return Cast(e, dt)


def _unify(a: ExprLike, b: ExprLike) -> tuple[Expr, Expr]:
    """Bring two operands to one type: Python literals take the other side's type, mixed
    scalar types promote, a scalar meets a vector by broadcast."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        return as_expr(a), as_expr(b)
    if not isinstance(a, Expr):
        a = as_expr(a, b.type)  # type: ignore[union-attr]
    if not isinstance(b, Expr):
        b = as_expr(b, a.type)
    ta, tb = a.type, b.type
    if ta == tb:
        return a, b
    sa, sb = _scalar(ta), _scalar(tb)
    if sa != sb:
        p = promote(sa, sb)
        a, b = cast(a, p), cast(b, p)
        ta, tb = a.type, b.type
    la, lb = _lanes(ta), _lanes(tb)
    if la != lb:
        if la == 1:
            a = Broadcast(a, lb)
        elif lb == 1:
            b = Broadcast(b, la)
        else:
            raise IRError(f"vector operands of different widths: {ta!r} and {tb!r}")
    return a, b


def binary(op: str, a: ExprLike, b: ExprLike) -> Expr:
    """``a op b`` after bringing both operands to one type (see :func:`_unify`)."""
    x, y = _unify(a, b)
    return Binary(op, x, y)


def unary(op: str, a: ExprLike) -> Expr:
    """``op a``; negating, negating logically or inverting a constant gives a constant."""
    x = as_expr(a)
    u = Unary(op, x)  # checks the operand's type
    if isinstance(x, Constant):
        v = x.value
        return Constant(-v if op == "neg" else (not v) if op == "not" else ~v, x.type)
    return u


def true_div(a: ExprLike, b: ExprLike) -> Expr:
    x, y = _unify(a, b)
    if not _scalar(x.type).is_float():
        raise IRError(f"`/` on integers ({x!r} / {y!r}) is ambiguous; use `//` for integer division")
    return Binary("div", x, y)


def int_div(a: ExprLike, b: ExprLike) -> Expr:
    x, y = _unify(a, b)
    if not _scalar(x.type).is_integer():
        raise IRError(f"`//` needs integers, got {x.type!r}; use `/` for floats")
    return Binary("div", x, y)


def eq(a: ExprLike, b: ExprLike) -> Expr:
    return binary("eq", a, b)


def ne(a: ExprLike, b: ExprLike) -> Expr:
    return binary("ne", a, b)


def logical_and(*xs: ExprLike) -> Expr:
    out = as_expr(xs[0])
    for x in xs[1:]:
        out = binary("and", out, x)
    return out


def logical_or(*xs: ExprLike) -> Expr:
    out = as_expr(xs[0])
    for x in xs[1:]:
        out = binary("or", out, x)
    return out


def logical_not(a: ExprLike) -> Expr:
    return unary("not", a)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("min", a, b)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return binary("max", a, b)


def select(cond: ExprLike, a: ExprLike, b: ExprLike) -> Expr:
    x, y = _unify(a, b)
    return Select(as_expr(cond), x, y)


def broadcast(value: ExprLike, lanes: int) -> Expr:
    return Broadcast(as_expr(value), lanes)


def vload(element: TensorElement, lanes: int, count: ExprLike | None = None, stride: int = 1) -> VectorLoad:
    """The vector of ``lanes`` elements starting at ``element`` (``A[i, j]``), every
    ``stride``-th along the last axis."""
    if not isinstance(element, TensorElement):
        raise IRError(f"vload() takes an element access like A[i, j], got {element!r}")
    return VectorLoad(element.tensor, element.indices, lanes, None if count is None else as_expr(count), stride)


def call(func: str, *args: ExprLike) -> Call:
    """A call of the primitive ``func``; Python literals take the first expression's type."""
    like = next((a.type for a in args if isinstance(a, Expr)), None)
    return Call(func, tuple(as_expr(a, like) for a in args))


def cdiv(a: ExprLike, b: ExprLike) -> Expr | int:
    """Ceiling division of non-negative integers: the number of ``b``-tiles covering ``a``."""
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return int_div(binary("add", a, b - 1 if isinstance(b, int) else binary("sub", b, 1)), b)


def is_const(e: Any, value: int | float | None = None) -> bool:
    """Whether ``e`` is a constant (with the given value, if one is given)."""
    return isinstance(e, Constant) and (value is None or e.value == value)


def free_vars(e: Node) -> set[Var]:
    """Every variable an expression mentions."""
    out: set[Var] = set()
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Var):
            out.add(n)
        stack.extend(n.children())
    return out


def index_tuple(xs: Sequence[ExprLike]) -> tuple[Expr, ...]:
    return tuple(as_expr(x) for x in xs)
