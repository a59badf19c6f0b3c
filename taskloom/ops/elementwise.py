"""Elementwise operators: unary functions, binary operators with numpy broadcasting,
comparisons, logical operators, ``where`` and ``cast``.

Type rules follow torch within the types the IR has:

- Tensor with tensor: the operands meet at a common type -- bool < integers < floats, and
  within a category the wider type (``int32 + float32 -> float32``, ``float16 + float32 ->
  float32``, ``uint8 + int8 -> int16``, ``float16 + bfloat16 -> float32``).
- A Python scalar takes the tensor's type (``float16 tensor * 0.5`` stays float16), except
  that a float scalar with an integer or bool tensor gives float32, and an int scalar with
  a bool tensor gives int64.
- True division (``div``) and the transcendental functions (exp, log, sqrt, rsqrt, erf,
  sigmoid, tanh, reciprocal) and the smooth activations (gelu, silu, leaky_relu, hardswish,
  hardsigmoid) give float32 for integer and bool inputs.
- Comparisons and logical operators give bool. Logical operators take any type and read a
  non-bool value as ``value != 0``, as numpy does.

Functions with several steps (gelu, silu, hardswish, ...) compute float16 and bfloat16
inputs in float32 and round once at the end, as torch does on the CPU.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from taskloom.errors import OpError
from taskloom.graph.tensor import Tensor
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir.compute import compute
from taskloom.ops.base import apply, as_tensor, broadcast_index, broadcast_shapes

__all__ = [
    "unary", "binary", "result_type",
    # unary
    "relu", "relu6", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt",
    "erf", "abs", "neg", "clip", "hardswish", "hardsigmoid", "reciprocal", "floor", "ceil", "round",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log10", "atan2",
    # binary
    "add", "sub", "mul", "div", "pow", "maximum", "minimum",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_not", "logical_xor",
    "where", "cast",
]

_Fn1 = Callable[[E.Expr], Any]
_Fn2 = Callable[[E.Expr, E.Expr], Any]
_LOW_FLOATS = (T.float16, T.bfloat16)


# ----------------------------------------------------------------------------- type rules

def result_type(a: T.DataType, b: T.DataType) -> T.DataType:
    """The common type of two tensor operands (torch's promotion within the IR's types)."""
    if a == b:
        return a
    if a.is_float() and b.is_float():
        if {a, b} == {T.float16, T.bfloat16}:
            return T.float32
        return a if a.nbytes >= b.nbytes else b
    if a.is_float() or b.is_float():
        return a if a.is_float() else b
    if a.is_bool() or b.is_bool():
        return b if a.is_bool() else a
    if a.kind == b.kind:
        return a if a.nbytes >= b.nbytes else b
    signed, unsigned = (a, b) if a.kind == "int" else (b, a)
    if signed.nbytes > unsigned.nbytes:
        return signed
    return {1: T.int16, 2: T.int32}.get(unsigned.nbytes, T.int64)


def _float_type(t: T.DataType) -> T.DataType:
    """The type a float-valued function of a ``t`` gives: ``t`` itself if float, else float32."""
    return t if t.is_float() else T.float32


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float))


def _scalar_tensor(x: bool | int | float, dt: T.DataType) -> Tensor:
    """A 0-d concrete tensor holding ``x`` as ``dt`` (a bfloat16 as its bits)."""
    if dt.numpy is None:
        return Tensor((), dt, T.bf16_to_bits(np.array([x], np.float32)).reshape(()))
    return Tensor((), dt, np.array(x, dtype=dt.numpy))


def _scalar_like(op: str, arg: str, x: bool | int | float, like: Tensor) -> Tensor:
    """A Python scalar as a 0-d tensor of the type it takes next to ``like``."""
    dt = like.dtype
    if isinstance(x, float) and not dt.is_float():
        dt = T.float32
    elif not isinstance(x, bool) and isinstance(x, int):
        if dt.is_bool():
            dt = T.int64
        if dt.is_integer() and not dt.min_value() <= x <= dt.max_value():
            raise OpError(f"{op}(): '{arg}'={x} does not fit the {dt.name} of the other operand "
                          f"(valid: {dt.min_value()}..{dt.max_value()}); cast the tensor first")
    try:
        return _scalar_tensor(x, dt)
    except OverflowError:
        raise OpError(f"{op}(): '{arg}'={x} is too large for {dt.name}") from None


def _tensors(op: str, args: Sequence[Any], names: Sequence[str]) -> list[Tensor]:
    """The operands as tensors: Python scalars take the type of the first tensor operand."""
    like = next((a for a in args if isinstance(a, Tensor)), None)
    if like is None:
        # no tensor among them: the first non-scalar (array-like) sets the type, else the first scalar
        first = next((k for k, a in enumerate(args) if not _is_scalar(a)), 0)
        like = as_tensor(op, names[first], args[first])
    out = []
    for a, n in zip(args, names):
        if isinstance(a, Tensor):
            out.append(a)
        elif _is_scalar(a):
            out.append(_scalar_like(op, n, a, like))
        else:
            out.append(as_tensor(op, n, a))
    return out


def _check_broadcast(op: str, tensors: Sequence[Tensor], names: Sequence[str]) -> None:
    """numpy broadcasting of the concrete shapes; an error names the arguments and the axis."""
    nd = max(t.ndim for t in tensors)
    for k in range(-nd, 0):
        sizes = {n: t.shape[k] for t, n in zip(tensors, names) if t.ndim >= -k and t.shape[k] != 1}
        if len(set(sizes.values())) > 1:
            shapes = " and ".join(f"'{n}' of shape {tuple(t.shape)}" for t, n in zip(tensors, names))
            got = ", ".join(f"'{n}' has {d}" for n, d in sizes.items())
            raise OpError(f"{op}(): {shapes} cannot be broadcast together: at dimension {k} {got}; "
                          "each dimension, aligned from the right, must be equal or 1")


def _elementwise(op: str, tensors: Sequence[Tensor], names: Sequence[str],
                 fn: Callable[..., Any], attrs: dict | None = None) -> Tensor:
    """``out[i] = fn(t0[i'], t1[i''], ...)`` with numpy broadcasting of every operand."""
    _check_broadcast(op, tensors, names)

    def build(*placeholders):
        shape = broadcast_shapes(op, *(p.shape for p in placeholders))
        n = len(shape)
        return compute("out", shape, lambda *i: fn(*(p[broadcast_index(p.shape, n, i)] for p in placeholders)))
    return apply(op, list(tensors), list(names), build, attrs)[0]


# ----------------------------------------------------------------------------- helpers

def unary(op: str, x: Any, fn: _Fn1, attrs: dict | None = None, *, kind: str = "same") -> Tensor:
    """``out[i] = fn(x[i])``.

    ``kind`` says which type ``fn`` sees: ``"same"`` the input's; ``"float"`` the input's if
    it is a float, else float32; ``"f32"`` like ``"float"``, but float16 and bfloat16 are
    computed in float32 and the result rounded back once.
    """
    if kind not in ("same", "float", "f32"):
        raise OpError(f"{op}(): unary kind {kind!r} is not one of 'same', 'float', 'f32'")
    x = as_tensor(op, "x", x)
    src = x.dtype
    work = src if kind == "same" else _float_type(src)
    if kind == "f32" and work in _LOW_FLOATS:
        work = T.float32
    out = src if kind == "same" else _float_type(src)

    def f(v: E.Expr) -> Any:
        r = E.as_expr(fn(E.cast(v, work)), work)
        return r if kind == "same" else E.cast(r, out)
    return _elementwise(op, [x], ["x"], f, attrs)


def binary(op: str, a: Any, b: Any, fn: _Fn2, attrs: dict | None = None, *, kind: str = "same") -> Tensor:
    """``out[i] = fn(a[i'], b[i''])`` with numpy broadcasting of ``a`` and ``b``.

    The operands reach ``fn`` converted to one type: with ``kind="same"`` their common type
    (:func:`result_type`); ``"float"`` that type if it is a float, else float32 (true
    division); ``"bool"`` each operand as bool (``value != 0`` for non-bool operands).
    """
    if kind not in ("same", "float", "bool"):
        raise OpError(f"{op}(): binary kind {kind!r} is not one of 'same', 'float', 'bool'")
    ta, tb = _tensors(op, [a, b], ["a", "b"])
    common = result_type(ta.dtype, tb.dtype)
    if kind == "float":
        common = _float_type(common)

    def convert(v: E.Expr) -> E.Expr:
        if kind == "bool":
            return v if v.type == T.boolean else E.ne(v, 0)
        return E.cast(v, common)
    return _elementwise(op, [ta, tb], ["a", "b"], lambda u, v: fn(convert(u), convert(v)), attrs)


def _number(op: str, arg: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise OpError(f"{op}(): '{arg}' must be a real number, got {v!r}")
    return v


# ----------------------------------------------------------------------------- unary

def relu(x: Any) -> Tensor:
    """``max(x, 0)`` elementwise; keeps the input's type. ``relu([-1., 2.]) -> [0., 2.]``."""
    return unary("relu", x, lambda v: E.maximum(v, 0))


def relu6(x: Any) -> Tensor:
    """``min(max(x, 0), 6)`` elementwise (torch.nn.functional.relu6); keeps the input's type."""
    return unary("relu6", x, lambda v: E.minimum(E.maximum(v, 0), 6))


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Tensor:
    """``x`` where ``x > 0``, else ``negative_slope * x`` (torch.nn.functional.leaky_relu).
    Integer inputs give float32. ``leaky_relu([-2., 3.], 0.1) -> [-0.2, 3.]``."""
    s = float(_number("leaky_relu", "negative_slope", negative_slope))
    return unary("leaky_relu", x, lambda v: E.select(v > 0, v, v * s),
                 {"negative_slope": s}, kind="f32")


def gelu(x: Any, approximate: str = "none") -> Tensor:
    """The Gaussian error linear unit, as torch.nn.functional.gelu: with
    ``approximate='none'`` ``0.5 * x * (1 + erf(x / sqrt(2)))``; with ``'tanh'``
    ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))``. Integer inputs give float32."""
    if approximate not in ("none", "tanh"):
        raise OpError(f"gelu(): 'approximate'={approximate!r} is not valid (valid: 'none', 'tanh')")
    if approximate == "none":
        def fn(v):
            return v * 0.5 * (1.0 + E.call("erf", v * (1.0 / math.sqrt(2.0))))
    else:
        beta = math.sqrt(2.0 / math.pi)

        def fn(v):
            inner = beta * (v + 0.044715 * (v * v * v))
            return 0.5 * v * (1.0 + E.call("tanh", inner))
    return unary("gelu", x, fn, {"approximate": approximate}, kind="f32")


def silu(x: Any) -> Tensor:
    """``x * sigmoid(x)`` elementwise (torch.nn.functional.silu, also called swish).
    Integer inputs give float32."""
    return unary("silu", x, lambda v: v * E.call("sigmoid", v), kind="f32")


def sigmoid(x: Any) -> Tensor:
    """``1 / (1 + exp(-x))`` elementwise. Integer inputs give float32."""
    return unary("sigmoid", x, lambda v: E.call("sigmoid", v), kind="float")


def tanh(x: Any) -> Tensor:
    """The hyperbolic tangent elementwise. Integer inputs give float32."""
    return unary("tanh", x, lambda v: E.call("tanh", v), kind="float")


def _math(name: str, doc: str) -> Any:
    def op(x: Any) -> Tensor:
        return unary(name, x, lambda v: E.call(name, v), kind="float")
    op.__name__, op.__doc__ = name, f"{doc} elementwise (C's {name}). Integer inputs give float32."
    return op


sin, cos, tan = _math("sin", "The sine"), _math("cos", "The cosine"), _math("tan", "The tangent")
asin, acos, atan = _math("asin", "The arcsine"), _math("acos", "The arccosine"), _math("atan", "The arctangent")
sinh, cosh = _math("sinh", "The hyperbolic sine"), _math("cosh", "The hyperbolic cosine")
asinh, acosh, atanh = (_math("asinh", "The inverse hyperbolic sine"), _math("acosh", "The inverse hyperbolic cosine"),
                       _math("atanh", "The inverse hyperbolic tangent"))
log10 = _math("log10", "The base-10 logarithm")


def round(x: Any) -> Tensor:  # noqa: A001
    """The nearest integer elementwise, halves to even (``torch.round``, ONNX ``Round``,
    ``numpy.rint``); integers are unchanged."""
    t = as_tensor("round", "x", x)
    if not t.dtype.is_float():
        return t
    return unary("round", t, lambda v: E.call("round", v), kind="float")


def atan2(a: Any, b: Any) -> Tensor:
    """The angle of the point ``(b, a)`` elementwise, in ``[-pi, pi]`` (``torch.atan2``)."""
    return binary("atan2", a, b, lambda x, y: E.call("atan2", x, y), kind="float")


def exp(x: Any) -> Tensor:
    """``e**x`` elementwise. Integer inputs give float32."""
    return unary("exp", x, lambda v: E.call("exp", v), kind="float")


def log(x: Any) -> Tensor:
    """The natural logarithm elementwise (``-inf`` at 0, nan below). Integer inputs give float32."""
    return unary("log", x, lambda v: E.call("log", v), kind="float")


def sqrt(x: Any) -> Tensor:
    """The square root elementwise (nan for negative inputs). Integer inputs give float32."""
    return unary("sqrt", x, lambda v: E.call("sqrt", v), kind="float")


def rsqrt(x: Any) -> Tensor:
    """``1 / sqrt(x)`` elementwise (torch.rsqrt). Integer inputs give float32."""
    return unary("rsqrt", x, lambda v: E.call("rsqrt", v), kind="float")


def erf(x: Any) -> Tensor:
    """The Gauss error function elementwise. Integer inputs give float32."""
    return unary("erf", x, lambda v: E.call("erf", v), kind="float")


def abs(x: Any) -> Tensor:  # noqa: A001 - numpy's name
    """``|x|`` elementwise; keeps the input's type (bool stays bool)."""
    t = as_tensor("abs", "x", x)
    if t.dtype.is_bool() or t.dtype.kind == "uint":
        return unary("abs", t, lambda v: v)
    return unary("abs", t, lambda v: E.call("abs", v))


def neg(x: Any) -> Tensor:
    """``-x`` elementwise; keeps the input's type. Bool tensors are refused (use logical_not)."""
    t = as_tensor("neg", "x", x)
    if t.dtype.is_bool():
        raise OpError("neg(): 'x' is a bool tensor, which cannot be negated; use logical_not()")
    return unary("neg", t, lambda v: -v)


def _bound(op: str, arg: str, v: Any) -> Any:
    if v is None or isinstance(v, Tensor) or isinstance(v, np.ndarray):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise OpError(f"{op}(): '{arg}' must be None, a real number or a tensor, got {v!r}")
    return v


def clip(x: Any, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - numpy's names
    """``min(max(x, min), max)`` elementwise (numpy.clip, torch.clamp); either bound may be
    None (but not both), a number or a tensor that broadcasts with ``x``. Where ``min > max``
    the result is ``max``, as in torch. A float bound on an integer tensor gives float32."""
    lo, hi = _bound("clip", "min", min), _bound("clip", "max", max)
    if lo is None and hi is None:
        raise OpError("clip(): 'min' and 'max' are both None; give at least one bound")
    args = [x] + [v for v in (lo, hi) if v is not None]
    names = ["x"] + [n for n, v in (("min", lo), ("max", hi)) if v is not None]
    ts = _tensors("clip", args, names)
    common = ts[0].dtype
    for t in ts[1:]:
        common = result_type(common, t.dtype)

    def fn(*vals):
        v, rest = E.cast(vals[0], common), [E.cast(u, common) for u in vals[1:]]
        if lo is not None:
            v = E.maximum(v, rest.pop(0))
        if hi is not None:
            v = E.minimum(v, rest.pop(0))
        return v
    return _elementwise("clip", ts, names, fn)


def hardswish(x: Any) -> Tensor:
    """``x * relu6(x + 3) / 6`` elementwise (torch.nn.functional.hardswish).
    Integer inputs give float32."""
    return unary("hardswish", x, lambda v: v * E.minimum(E.maximum(v + 3.0, 0.0), 6.0) / 6.0, kind="f32")


def hardsigmoid(x: Any) -> Tensor:
    """``relu6(x + 3) / 6`` elementwise (torch.nn.functional.hardsigmoid).
    Integer inputs give float32."""
    return unary("hardsigmoid", x, lambda v: E.minimum(E.maximum(v + 3.0, 0.0), 6.0) / 6.0, kind="f32")


def reciprocal(x: Any) -> Tensor:
    """``1 / x`` elementwise. Integer inputs give float32."""
    return unary("reciprocal", x, lambda v: 1.0 / v, kind="float")


def floor(x: Any) -> Tensor:
    """The largest integer not above ``x``, elementwise; keeps the type (integers unchanged)."""
    t = as_tensor("floor", "x", x)
    return unary("floor", t, (lambda v: E.call("floor", v)) if t.dtype.is_float() else (lambda v: v))


def ceil(x: Any) -> Tensor:
    """The smallest integer not below ``x``, elementwise; keeps the type (integers unchanged)."""
    t = as_tensor("ceil", "x", x)
    return unary("ceil", t, (lambda v: E.call("ceil", v)) if t.dtype.is_float() else (lambda v: v))


# ----------------------------------------------------------------------------- binary

def add(a: Any, b: Any) -> Tensor:
    """``a + b`` with numpy broadcasting. ``add(x, 1.0)``, ``add(2, x)`` and ``x + y`` all work."""
    return binary("add", a, b, lambda x, y: x + y)


def sub(a: Any, b: Any) -> Tensor:
    """``a - b`` with numpy broadcasting; bool operands are refused (use logical_xor)."""
    _refuse_bools("sub", a, b, "use logical_xor()")
    return binary("sub", a, b, lambda x, y: x - y)


def mul(a: Any, b: Any) -> Tensor:
    """``a * b`` with numpy broadcasting."""
    return binary("mul", a, b, lambda x, y: x * y)


def div(a: Any, b: Any) -> Tensor:
    """True division ``a / b`` with numpy broadcasting; integer operands give float32, as in
    torch (``div([1, 2], 2) -> [0.5, 1.]``). Division by zero gives inf or nan."""
    return binary("div", a, b, lambda x, y: x / y, kind="float")


def _refuse_bools(op: str, a: Any, b: Any, hint: str) -> None:
    for v, n in ((a, "a"), (b, "b")):
        if isinstance(v, Tensor) and v.dtype.is_bool():
            raise OpError(f"{op}(): '{n}' is a bool tensor, which {op}() does not take; {hint}")


#: Exponents torch computes without pow (and so do we): each is a few vector instructions.
_POW_SPECIAL: dict[float, _Fn1] = {
    2.0: lambda v: v * v,
    3.0: lambda v: v * v * v,
    0.5: lambda v: E.call("sqrt", v),
    -0.5: lambda v: E.call("rsqrt", v),
    -1.0: lambda v: 1.0 / v,
    -2.0: lambda v: 1.0 / (v * v),
}


def pow(a: Any, b: Any) -> Tensor:  # noqa: A001 - numpy's name
    """``a ** b`` with numpy broadcasting and torch's types (integers stay integers, a float
    scalar exponent of an integer tensor gives float32). Exponents 2, 3, 0.5, -0.5, -1 and -2
    given as Python scalars use multiplication, sqrt and rsqrt, as torch does. Integer powers
    are computed in float64 and truncated, so they are exact up to 2**53; an integer tensor to
    a negative Python-int power is refused (a negative tensor exponent of an integer tensor
    truncates toward zero, e.g. ``2 ** -1 -> 0``)."""
    if isinstance(a, Tensor) and _is_scalar(b) and not isinstance(b, bool):
        if isinstance(b, int) and b < 0 and not a.dtype.is_float():
            raise OpError(f"pow(): 'b'={b} is negative and 'a' is an integer tensor ({a.dtype.name}); "
                          "integers to negative integer powers are not allowed; cast 'a' to float first")
        fn = _POW_SPECIAL.get(float(b))
        out = a.dtype if isinstance(b, int) or a.dtype.is_float() else T.float32
        if fn is not None and (out.is_float() or float(b) in (2.0, 3.0)):
            if out.is_bool():
                out = T.int64
            return unary("pow", a, lambda v: fn(E.cast(v, out)), {"exponent": float(b)})
    ta, tb = _tensors("pow", [a, b], ["a", "b"])
    common = result_type(ta.dtype, tb.dtype)
    if common.is_bool():
        common = T.int64
    if common.is_float():
        return binary("pow", ta, tb, lambda x, y: E.call("pow", E.cast(x, common), E.cast(y, common)))
    # integers: through float64, which holds every int32 (and int64 up to 2**53) exactly
    return binary("pow", ta, tb, lambda x, y: E.cast(
        E.call("pow", E.cast(x, T.float64), E.cast(y, T.float64)), common))


def maximum(a: Any, b: Any) -> Tensor:
    """The larger of ``a`` and ``b`` elementwise, with numpy broadcasting (nan operands are
    not propagated reliably: compare with isnan first if they matter)."""
    return binary("maximum", a, b, E.maximum)


def minimum(a: Any, b: Any) -> Tensor:
    """The smaller of ``a`` and ``b`` elementwise, with numpy broadcasting (see :func:`maximum`
    for nan)."""
    return binary("minimum", a, b, E.minimum)


# ----------------------------------------------------------------------------- comparisons

def equal(a: Any, b: Any) -> Tensor:
    """``a == b`` elementwise as a bool tensor, with numpy broadcasting (torch.eq, numpy.equal)."""
    return binary("equal", a, b, E.eq)


def not_equal(a: Any, b: Any) -> Tensor:
    """``a != b`` elementwise as a bool tensor, with numpy broadcasting."""
    return binary("not_equal", a, b, E.ne)


def less(a: Any, b: Any) -> Tensor:
    """``a < b`` elementwise as a bool tensor, with numpy broadcasting."""
    return binary("less", a, b, lambda x, y: x < y)


def less_equal(a: Any, b: Any) -> Tensor:
    """``a <= b`` elementwise as a bool tensor, with numpy broadcasting."""
    return binary("less_equal", a, b, lambda x, y: x <= y)


def greater(a: Any, b: Any) -> Tensor:
    """``a > b`` elementwise as a bool tensor, with numpy broadcasting."""
    return binary("greater", a, b, lambda x, y: x > y)


def greater_equal(a: Any, b: Any) -> Tensor:
    """``a >= b`` elementwise as a bool tensor, with numpy broadcasting."""
    return binary("greater_equal", a, b, lambda x, y: x >= y)


# ----------------------------------------------------------------------------- logical

def logical_and(a: Any, b: Any) -> Tensor:
    """``a and b`` elementwise as a bool tensor; non-bool operands count as ``value != 0``
    (numpy.logical_and)."""
    return binary("logical_and", a, b, E.logical_and, kind="bool")


def logical_or(a: Any, b: Any) -> Tensor:
    """``a or b`` elementwise as a bool tensor; non-bool operands count as ``value != 0``."""
    return binary("logical_or", a, b, E.logical_or, kind="bool")


def logical_xor(a: Any, b: Any) -> Tensor:
    """Exactly one of ``a`` and ``b`` elementwise, as a bool tensor; non-bool operands count
    as ``value != 0``."""
    return binary("logical_xor", a, b, E.ne, kind="bool")


def logical_not(x: Any) -> Tensor:
    """``not x`` elementwise as a bool tensor; a non-bool ``x`` counts as ``x != 0``
    (``logical_not([0., 2.]) -> [True, False]``)."""
    t = as_tensor("logical_not", "x", x)
    return _elementwise("logical_not", [t], ["x"],
                        lambda v: E.logical_not(v) if v.type == T.boolean else E.eq(v, 0))


# ----------------------------------------------------------------------------- where, cast

def where(cond: Any, a: Any, b: Any) -> Tensor:
    """``a`` where ``cond`` holds, else ``b``, with numpy broadcasting of all three. ``cond``
    may be of any type (non-bool counts as ``cond != 0``, as in numpy); ``a`` and ``b`` meet
    at their common type, a Python scalar taking the other's type
    (``where(x > 0, x, 0.0)``)."""
    if isinstance(cond, Tensor) or not _is_scalar(cond):
        c = as_tensor("where", "cond", cond)
    else:
        c = _scalar_tensor(bool(cond), T.boolean)
    ta, tb = _tensors("where", [a, b], ["a", "b"])
    common = result_type(ta.dtype, tb.dtype)

    def fn(cv, av, bv):
        test = cv if cv.type == T.boolean else E.ne(cv, 0)
        return E.select(test, E.cast(av, common), E.cast(bv, common))
    return _elementwise("where", [c, ta, tb], ["cond", "a", "b"], fn)


def _dtype_arg(op: str, dtype: Any) -> T.DataType:
    name = dtype
    if not isinstance(dtype, (str, T.DataType)) and str(dtype).startswith("torch."):
        name = str(dtype)[len("torch."):]  # a torch dtype, by its name
    try:
        dt = T.dtype(name)
    except Exception:
        known = ", ".join(t.name for t in T.SCALAR_TYPES)
        raise OpError(f"{op}(): 'dtype'={dtype!r} is not a data type taskloom knows (valid: {known})") from None
    if dt.numpy is None:
        raise OpError(f"{op}(): 'dtype'={dt.name} cannot hold eager results yet (numpy has no {dt.name}); "
                      "use float32 or float16")
    return dt


def cast(x: Any, dtype: T.DataType | str | Any) -> Tensor:
    """``x`` converted to ``dtype`` (a taskloom dtype, a name such as ``'float16'`` or
    ``'f16'``, a numpy or torch dtype). Floats become integers by truncation toward zero
    (values outside the target's range are undefined, as in C); anything becomes bool as
    ``x != 0``. Casting to the type ``x`` already has returns ``x`` itself."""
    t = as_tensor("cast", "x", x)
    dt = _dtype_arg("cast", dtype)
    if dt == t.dtype:
        return t
    return _elementwise("cast", [t], ["x"],
                        lambda v: E.ne(v, 0) if dt.is_bool() and not v.type.is_bool() else E.cast(v, dt),
                        {"dtype": dt.name})
