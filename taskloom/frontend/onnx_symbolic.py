"""Symbolic sizes through an ONNX model's shape arithmetic.

A model exported with dynamic axes computes its reshape targets, its ``Expand`` shapes and
its ``Range`` ends from ``Shape(x)`` at run time: ``Shape -> Gather -> Unsqueeze -> Concat
-> Reshape``. With static shapes those fold to constants; with symbolic ones (an input's
``batch`` and ``sequence``) they fold here instead, to :class:`Sizes`: small integer
tensors whose elements are ints or expressions of the symbols. Such a value is known at
conversion time up to the symbols, so the operators that read a shape (Reshape, Expand,
ConstantOfShape, Range, Slice) take it as their target, and the graph keeps the sizes
symbolic.

:func:`evaluate` computes the operators of shape arithmetic on them -- Shape, Size,
Gather, Slice, Concat, Unsqueeze, Squeeze, Reshape, Identity, Cast to an integer type,
Add, Sub, Mul, Div, Mod, Neg, Abs, Equal, Less, Greater (and ``OrEqual``), Not, And, Or,
Where, Min, Max, ReduceProd -- element by element.
A comparison is decided where the sizes' ranges decide it (a symbol is at least 1: it
never equals -1); one they do not decide is an error that names the node, as is any other
operator reading symbolic sizes as data.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from taskloom.errors import FrontendError
from taskloom.ir import expr as E
from taskloom.ir.arith import simplify_expr
from taskloom.ir.arith.bounds import BoundAnalyzer
from taskloom.ir.printer import expr_text

Size = Any  # int | E.Expr


@dataclass(frozen=True, eq=False)
class Sizes:
    """An integer tensor known up to the model's symbolic sizes: ``values`` is a numpy object
    array of ints and expressions, ``dtype`` the ONNX element type it stands for."""

    values: np.ndarray
    dtype: np.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    @property
    def ndim(self) -> int:
        return self.values.ndim

    def text(self) -> str:
        return "[" + ", ".join(expr_text(v) if isinstance(v, E.Expr) else str(v) for v in self.values.reshape(-1)) + "]"


def _clean(v: Any) -> Size:
    """An element as an int where it is one, else a simplified expression."""
    if isinstance(v, E.Expr):
        v = simplify_expr(v)
        return int(v.value) if isinstance(v, E.Constant) else v
    return int(v) if isinstance(v, (int, np.integer, bool, np.bool_)) else v


def sizes(values: Any, dtype: Any = np.int64) -> "Sizes | np.ndarray":
    """``values`` as :class:`Sizes`, or as a plain numpy array when every element is a number."""
    arr = np.empty(np.shape(values), dtype=object)
    flat = [_clean(v) for v in np.asarray(values, dtype=object).reshape(-1)]
    arr.reshape(-1)[:] = flat
    if all(not isinstance(v, E.Expr) for v in flat):
        return arr.astype(dtype)
    return Sizes(arr, np.dtype(dtype))


def is_sizes(v: Any) -> bool:
    return isinstance(v, Sizes)


def elements(v: Any) -> np.ndarray:
    """A Sizes or numpy value as an object array of ints (bools) and expressions."""
    return v.values if isinstance(v, Sizes) else np.asarray(v).astype(object)


# ----------------------------------------------------------------------------- deciding

def _bounds_of(e: E.Expr) -> tuple[Any, Any]:
    analyzer = BoundAnalyzer({v: (1, None) for v in E.free_vars(e)})
    return analyzer.lower(e), analyzer.upper(e)


def _compare(a: Size, b: Size, op: str, where: str) -> bool:
    """``a op b`` for sizes, decided by their difference's range; an error where it is not."""
    if not isinstance(a, E.Expr) and not isinstance(b, E.Expr):
        return bool({"eq": operator.eq, "lt": operator.lt, "le": operator.le}[op](a, b))
    diff = simplify_expr(E.as_expr(a) - b)
    lo, hi = _bounds_of(diff)
    if op == "eq":
        if isinstance(diff, E.Constant):
            return int(diff.value) == 0
        if (lo is not None and lo > 0) or (hi is not None and hi < 0):
            return False
    elif op == "lt":
        if hi is not None and hi < 0:
            return True
        if lo is not None and lo >= 0:
            return False
    else:  # le
        if hi is not None and hi <= 0:
            return True
        if lo is not None and lo > 0:
            return False
    show = lambda x: expr_text(x) if isinstance(x, E.Expr) else str(x)  # noqa: E731
    raise FrontendError(f"{where}: cannot decide whether {show(a)} {dict(eq='==', lt='<', le='<=')[op]} {show(b)} "
                        "for every value of the model's symbolic sizes; fix them with input_shapes")


def _extreme(a: Size, b: Size, larger: bool, where: str) -> Size:
    a_first = not _compare(a, b, "lt", where) if larger else _compare(a, b, "le", where)
    return a if a_first else b


# ----------------------------------------------------------------------------- the operators

def _binary(fn: Callable[[Size, Size], Any]) -> Callable[..., Any]:
    def run(ins: list[Any], attrs: dict, where: str) -> Any:
        a, b = (elements(v) for v in ins[:2])
        out = np.frompyfunc(lambda x, y: fn(x, y, where), 2, 1)(a, b)  # type: ignore[call-arg]
        return sizes(out, _dtype(ins))
    return run


def _dtype(ins: list[Any]) -> np.dtype:
    for v in ins:
        if isinstance(v, Sizes):
            return v.dtype
    return np.asarray(ins[0]).dtype


def _div(a: Size, b: Size, where: str) -> Size:
    if isinstance(b, E.Expr) or b == 0:
        raise FrontendError(f"{where}: divides by {b}; a size divides only by a nonzero constant")
    if not isinstance(a, E.Expr):
        return int(a / b) if b else 0  # (ONNX integer division truncates, as C's)
    if b < 0:
        return -(a // -b)
    return a // b  # (symbolic sizes are positive: truncation and floor agree)


def _mod(a: Size, b: Size, where: str) -> Size:
    if isinstance(b, E.Expr) or b <= 0:
        raise FrontendError(f"{where}: takes the remainder by {b}; a size's only by a positive constant")
    return a % b


def _compare_op(op: str, swap: bool = False, negate: bool = False) -> Callable[..., Any]:
    def run(ins: list[Any], attrs: dict, where: str) -> np.ndarray:
        a, b = (elements(v) for v in ins[:2])
        if swap:
            a, b = b, a
        decide = np.frompyfunc(lambda x, y: _compare(x, y, op, where) != negate, 2, 1)
        return np.asarray(decide(a, b), dtype=bool)
    return run


def _logical(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def run(ins: list[Any], attrs: dict, where: str) -> np.ndarray:
        return fn(*(np.asarray(v, dtype=bool) for v in ins))
    return run


def _where(ins: list[Any], attrs: dict, where: str) -> Any:
    cond = ins[0]
    if isinstance(cond, Sizes):
        raise FrontendError(f"{where}: its condition holds symbolic sizes, not booleans")
    a, b = (elements(v) for v in ins[1:3])
    return sizes(np.where(np.asarray(cond, dtype=bool), a, b), _dtype(ins[1:]))


def _extremes(larger: bool) -> Callable[..., Any]:
    def run(ins: list[Any], attrs: dict, where: str) -> Any:
        out = elements(ins[0])
        for v in ins[1:]:
            out = np.frompyfunc(lambda x, y: _extreme(x, y, larger, where), 2, 1)(out, elements(v))
        return sizes(out, _dtype(ins))
    return run


def _shape(ins: list[Any], attrs: dict, where: str) -> Any:
    dims = list(ins[0].shape)
    start, end = attrs.get("start", 0), attrs.get("end")
    return sizes(dims[start:end])


def _size(ins: list[Any], attrs: dict, where: str) -> Any:
    return sizes(math.prod(ins[0].shape, start=E.as_expr(1)) if any(isinstance(d, E.Expr) for d in ins[0].shape)
                 else math.prod(ins[0].shape))


def _ints(v: Any, where: str, what: str) -> list[int]:
    if isinstance(v, Sizes):
        raise FrontendError(f"{where}: its {what} must be constant, got the symbolic sizes {v.text()}")
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _gather(ins: list[Any], attrs: dict, where: str) -> Any:
    idx = np.asarray(_ints(ins[1], where, "indices")).reshape(np.shape(ins[1]))
    data = elements(ins[0])
    axis = attrs.get("axis", 0)
    return sizes(np.take(data, np.where(idx < 0, idx + data.shape[axis], idx), axis=axis), _dtype(ins))


def _slice(ins: list[Any], attrs: dict, where: str) -> Any:
    data = elements(ins[0])
    starts, ends = _ints(ins[1], where, "starts"), _ints(ins[2], where, "ends")
    axes = _ints(ins[3], where, "axes") if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = _ints(ins[4], where, "steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    index: list[Any] = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a] = slice(s, e, st)
    return sizes(data[tuple(index)], _dtype(ins))


def _concat(ins: list[Any], attrs: dict, where: str) -> Any:
    return sizes(np.concatenate([elements(v) for v in ins if v is not None], axis=attrs.get("axis", 0)), _dtype(ins))


def _axes(ins: list[Any], attrs: dict, where: str) -> list[int] | None:
    if len(ins) > 1 and ins[1] is not None:
        return _ints(ins[1], where, "axes")
    return attrs.get("axes")


def _unsqueeze(ins: list[Any], attrs: dict, where: str) -> Any:
    data = elements(ins[0])
    axes = _axes(ins, attrs, where) or []
    return sizes(np.expand_dims(data, tuple(a % (data.ndim + len(axes)) for a in axes)), _dtype(ins))


def _squeeze(ins: list[Any], attrs: dict, where: str) -> Any:
    data = elements(ins[0])
    axes = _axes(ins, attrs, where)
    return sizes(np.squeeze(data, None if axes is None else tuple(a % data.ndim for a in axes)), _dtype(ins))


def _reshape(ins: list[Any], attrs: dict, where: str) -> Any:
    data = elements(ins[0])
    shape = [data.shape[k] if d == 0 and not attrs.get("allowzero", 0) else d
             for k, d in enumerate(_ints(ins[1], where, "shape"))]
    return sizes(data.reshape(shape), _dtype(ins))


def _cast(ins: list[Any], attrs: dict, where: str) -> Any:
    from taskloom.frontend.onnx_registry import ONNX_DTYPES
    to = ONNX_DTYPES.get(int(attrs.get("to", 0)), "")
    if not to.startswith(("int", "uint")):
        raise FrontendError(f"{where}: casts the symbolic sizes {ins[0].text()} to {to or 'a type'} other than "
                            "an integer; only integer shape arithmetic is symbolic")
    return sizes(elements(ins[0]), np.dtype(to))


def _reduce_prod(ins: list[Any], attrs: dict, where: str) -> Any:
    data = elements(ins[0])
    if data.ndim != 1 or attrs.get("keepdims", 1) and attrs.get("axes") not in (None, [0]):
        raise FrontendError(f"{where}: only the product of a 1-d vector of symbolic sizes is supported")
    product: Size = 1
    for v in data:
        product = product * v
    return sizes([product] if attrs.get("keepdims", 1) else product, _dtype(ins))


#: ONNX operator -> (inputs, attributes, the node's label) -> its output.
OPERATORS: dict[str, Callable[[list[Any], dict, str], Any]] = {
    "Shape": _shape, "Size": _size, "Gather": _gather, "Slice": _slice, "Concat": _concat,
    "Unsqueeze": _unsqueeze, "Squeeze": _squeeze, "Reshape": _reshape, "Cast": _cast,
    "Identity": lambda ins, attrs, where: ins[0], "ReduceProd": _reduce_prod,
    "Add": _binary(lambda a, b, w: a + b), "Sub": _binary(lambda a, b, w: a - b),
    "Mul": _binary(lambda a, b, w: a * b), "Div": _binary(_div), "Mod": _binary(_mod),
    "Neg": lambda ins, attrs, where: sizes(-elements(ins[0]), _dtype(ins)),
    "Abs": lambda ins, attrs, where: sizes(np.frompyfunc(
        lambda x: x if isinstance(x, E.Expr) or x >= 0 else -x, 1, 1)(elements(ins[0])), _dtype(ins)),
    "Equal": _compare_op("eq"), "Less": _compare_op("lt"), "LessOrEqual": _compare_op("le"),
    "Greater": _compare_op("lt", swap=True), "GreaterOrEqual": _compare_op("le", swap=True),
    "Not": _logical(np.logical_not), "And": _logical(np.logical_and), "Or": _logical(np.logical_or),
    "Where": _where, "Max": _extremes(True), "Min": _extremes(False),
}


#: Operators whose first input is the data the others only index or shape: shape arithmetic
#: only when that input is symbolic sizes.
DATA_FIRST = frozenset({"Gather", "Slice", "Unsqueeze", "Squeeze", "Reshape", "Cast", "Identity", "ReduceProd",
                        "Neg", "Abs"})


def evaluate(op_type: str, ins: list[Any], attrs: dict[str, Any], where: str) -> list[Any] | None:
    """The outputs of a shape-arithmetic node whose inputs are constants and :class:`Sizes`
    (``Shape`` and ``Size`` also of a tensor with symbolic dimensions), or None for an
    operator that is not shape arithmetic (its converter then decides)."""
    fn = OPERATORS.get(op_type)
    if fn is None:
        return None
    return [fn(ins, attrs, where)]


def broadcast_shapes(a: Any, b: Any, where: str) -> tuple[Any, ...]:
    """numpy's broadcast of two shapes of ints and expressions: a 1 takes the other size; two
    other sizes must be equal (for every value of the symbols)."""
    a, b = list(a), list(b)
    out: list[Any] = []
    for k in range(1, max(len(a), len(b)) + 1):
        x = a[-k] if k <= len(a) else 1
        y = b[-k] if k <= len(b) else 1
        if isinstance(y, int) and y == 1:
            out.append(x)
        elif isinstance(x, int) and x == 1:
            out.append(y)
        elif _compare(x, y, "eq", where):
            out.append(x)
        else:
            raise FrontendError(f"{where}: the shapes {tuple(a)} and {tuple(b)} do not broadcast")
    return tuple(reversed(out))


def has_symbolic_shape(v: Any) -> bool:
    """Whether ``v`` (a tensor) has a dimension that is an expression."""
    return any(isinstance(d, E.Expr) for d in getattr(v, "shape", ()))
