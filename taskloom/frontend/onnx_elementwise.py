"""ONNX converters of elementwise operators and reductions: arithmetic with numpy
broadcasting, comparisons and logic, activations, casts, softmax, Reduce*, ArgMax/ArgMin.

ONNX gives both operands of arithmetic one type, so no promotion happens here; a constant
operand of one element becomes a Python scalar, which the kernel holds as an immediate
instead of reading a buffer.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from taskloom import ops
from taskloom.frontend.onnx_registry import (OnnxNode, Value, as_numpy, converter, dtype_of, is_const,
                                             normalize_axes, normalize_axis, shape_of, taskloom_dtype)
from taskloom.graph.tensor import Tensor
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E

F64 = T.float64


# ----------------------------------------------------------------------------- helpers

def py_scalar(arr: np.ndarray) -> bool | int | float:
    """The one element of ``arr`` as a Python number of its kind."""
    v = np.asarray(arr).reshape(-1)[0]
    if arr.dtype == np.bool_:
        return bool(v)
    if np.issubdtype(arr.dtype, np.integer):
        return int(v)
    return float(v)


def operand(node: OnnxNode, v: Value, other: Value | None) -> Tensor | bool | int | float:
    """``v`` as an operand next to ``other``: a one-element constant of ``other``'s type and
    no larger rank becomes a Python scalar; other constants become graph constants."""
    if isinstance(v, np.ndarray) or is_const(v):
        arr = as_numpy(v)
        if (other is not None and not is_const(other) and arr.size == 1 and arr.ndim <= len(other.shape)
                and dtype_of(other) == dtype_of(arr)):
            return py_scalar(arr)
        return node.pool.tensor(arr, node.label)
    return v


def operands(node: OnnxNode, i: int = 0, j: int = 1) -> tuple[Any, Any]:
    """Inputs ``i`` and ``j`` as the operands of a binary operator (see :func:`operand`)."""
    a, b = node.input(i), node.input(j)
    if a is None or b is None:
        raise node.error(f"inputs {i} and {j} are required")
    return operand(node, a, b), operand(node, b, a)


def cast(node: OnnxNode, v: Value, dt: T.DataType) -> Tensor | np.ndarray:
    """``v`` as ``dt``: numpy for constants (no kernel), a cast node otherwise."""
    if is_const(v):
        arr = as_numpy(v)
        return arr if T.dtype(arr.dtype) == dt else arr.astype(dt.numpy)
    return ops.cast(v, dt)


def zero_of(dt: T.DataType) -> bool | int | float:
    """Zero as a Python scalar of ``dt``'s kind (so that ``where(mask, x, 0)`` keeps x's type)."""
    return False if dt.is_bool() else 0.0 if dt.is_float() else 0


def _register_all(table: dict[str, tuple[tuple[int, int], Callable[[OnnxNode], Any]]]) -> None:
    for op_type, (versions, fn) in table.items():
        converter(op_type, versions)(fn)


# ----------------------------------------------------------------------------- unary

def _unary(fn: Callable[[Tensor], Tensor]) -> Callable[[OnnxNode], Tensor]:
    return lambda n: fn(n.tensor(0))


_register_all({
    "Relu": ((6, 14), _unary(ops.relu)),
    "Sigmoid": ((6, 13), _unary(ops.sigmoid)),
    "Tanh": ((6, 13), _unary(ops.tanh)),
    "Erf": ((9, 13), _unary(ops.erf)),
    "Exp": ((6, 13), _unary(ops.exp)),
    "Log": ((6, 13), _unary(ops.log)),
    "Sqrt": ((6, 13), _unary(ops.sqrt)),
    "Reciprocal": ((6, 13), _unary(ops.reciprocal)),
    "Neg": ((6, 13), _unary(ops.neg)),
    "Abs": ((6, 13), _unary(ops.abs)),
    "Floor": ((6, 13), _unary(ops.floor)),
    "Ceil": ((6, 13), _unary(ops.ceil)),
    "Not": ((1, 1), _unary(ops.logical_not)),
    "HardSwish": ((14, 22), _unary(ops.hardswish)),
    "Round": ((11, 22), _unary(ops.round)),
    **{name: ((7, 22), _unary(getattr(ops, name.lower()))) for name in ("Sin", "Cos", "Tan", "Asin", "Acos", "Atan")},
    **{name: ((9, 22), _unary(getattr(ops, name.lower()))) for name in ("Sinh", "Cosh", "Asinh", "Acosh", "Atanh")},
    "Identity": ((1, 25), lambda n: n.input(0)),
})


@converter("Gelu", versions=(20, 20))
def gelu(n: OnnxNode) -> Tensor:
    """Gelu (opset 20): exact (erf) or tanh-approximated."""
    approximate = n.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise n.error(f"'approximate'={approximate!r} is not valid (valid: 'none', 'tanh')")
    return ops.gelu(n.tensor(0), approximate)


@converter("LeakyRelu", versions=(6, 16))
def leaky_relu(n: OnnxNode) -> Tensor:
    """LeakyRelu: ``x`` where positive, else ``alpha * x``."""
    return ops.leaky_relu(n.tensor(0), float(n.attr("alpha", 0.01)))


@converter("PRelu", versions=(9, 16))
def prelu(n: OnnxNode) -> Tensor:
    """PRelu: ``x`` where non-negative, else ``slope * x`` with a broadcast slope tensor."""
    x = n.tensor(0)
    slope = operand(n, n.required(1, "slope"), x)
    return ops.where(ops.less(x, zero_of(x.dtype)), ops.mul(x, slope), x)


@converter("Elu", versions=(6, 22))
def elu(n: OnnxNode) -> Tensor:
    """Elu: ``x`` where positive, else ``alpha * (exp(x) - 1)``."""
    x, alpha = n.tensor(0), float(n.attr("alpha", 1.0))
    return ops.where(ops.greater(x, 0.0), x, ops.mul(ops.sub(ops.exp(x), 1.0), alpha))


@converter("Selu", versions=(6, 22))
def selu(n: OnnxNode) -> Tensor:
    """Selu: ``gamma * elu(x, alpha)``."""
    x = n.tensor(0)
    alpha, gamma = float(n.attr("alpha", 1.67326319217681884765625)), float(n.attr("gamma", 1.05070102214813232421875))
    neg = ops.mul(ops.sub(ops.exp(x), 1.0), alpha)
    return ops.mul(ops.where(ops.greater(x, 0.0), x, neg), gamma)


@converter("Celu", versions=(12, 28))
def celu(n: OnnxNode) -> Tensor:
    """Celu: ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    x, alpha = n.tensor(0), float(n.attr("alpha", 1.0))
    neg = ops.mul(ops.sub(ops.exp(ops.div(x, alpha)), 1.0), alpha)
    return ops.add(ops.relu(x), ops.minimum(neg, 0.0))


@converter("ThresholdedRelu", versions=(10, 22))
def thresholded_relu(n: OnnxNode) -> Tensor:
    """ThresholdedRelu: ``x`` where above ``alpha``, else 0."""
    x = n.tensor(0)
    return ops.where(ops.greater(x, float(n.attr("alpha", 1.0))), x, 0.0)


@converter("HardSigmoid", versions=(6, 22))
def hard_sigmoid(n: OnnxNode) -> Tensor:
    """HardSigmoid: ``clip(alpha * x + beta, 0, 1)``."""
    x = n.tensor(0)
    alpha, beta = float(n.attr("alpha", 0.2)), float(n.attr("beta", 0.5))
    return ops.clip(ops.add(ops.mul(x, alpha), beta), 0.0, 1.0)


@converter("Softplus", versions=(1, 22))
def softplus(n: OnnxNode) -> Tensor:
    """Softplus: ``log(exp(x) + 1)``."""
    return ops.log(ops.add(ops.exp(n.tensor(0)), 1.0))


@converter("Softsign", versions=(1, 22))
def softsign(n: OnnxNode) -> Tensor:
    """Softsign: ``x / (1 + |x|)``."""
    x = n.tensor(0)
    return ops.div(x, ops.add(ops.abs(x), 1.0))


@converter("Mish", versions=(18, 22))
def mish(n: OnnxNode) -> Tensor:
    """Mish: ``x * tanh(softplus(x))``."""
    x = n.tensor(0)
    return ops.mul(x, ops.tanh(ops.log(ops.add(ops.exp(x), 1.0))))


@converter("Sign", versions=(9, 13))
def sign(n: OnnxNode) -> Tensor:
    """Sign: -1, 0 or 1 in the input's type."""
    x = n.tensor(0)
    z = zero_of(x.dtype)
    return ops.sub(ops.cast(ops.greater(x, z), x.dtype), ops.cast(ops.less(x, z), x.dtype))


@converter("Clip", versions=(6, 13))
def clip(n: OnnxNode) -> Tensor:
    """Clip: bounds as attributes before version 11, as optional inputs from it on."""
    x = n.tensor(0)
    if n.version < 11:
        lo, hi = n.attr("min"), n.attr("max")
    else:
        lo = None if n.input(1) is None else operand(n, n.input(1), x)
        hi = None if n.input(2) is None else operand(n, n.input(2), x)
    if lo is None and hi is None:
        return x
    return ops.clip(x, lo, hi)


# ----------------------------------------------------------------------------- binary

def _binary(fn: Callable[[Any, Any], Tensor]) -> Callable[[OnnxNode], Tensor]:
    return lambda n: fn(*operands(n))


_register_all({
    "Add": ((7, 14), _binary(ops.add)),
    "Sub": ((7, 14), _binary(ops.sub)),
    "Mul": ((7, 14), _binary(ops.mul)),
    "Equal": ((7, 19), _binary(ops.equal)),
    "Less": ((9, 13), _binary(ops.less)),
    "Greater": ((9, 13), _binary(ops.greater)),
    "LessOrEqual": ((12, 16), _binary(ops.less_equal)),
    "GreaterOrEqual": ((12, 16), _binary(ops.greater_equal)),
    "And": ((7, 7), _binary(ops.logical_and)),
    "Or": ((7, 7), _binary(ops.logical_or)),
    "Xor": ((7, 7), _binary(ops.logical_xor)),
})


@converter("Div", versions=(7, 14))
def div(n: OnnxNode) -> Tensor:
    """Div: true division for floats; integers truncate toward zero, as ONNX's integer Div."""
    a, b = operands(n)
    dt = dtype_of(n.input(0))
    if dt.is_float():
        return ops.div(a, b)
    # integers: the quotient truncated toward zero, computed exactly in float64 (up to 2**53)
    q = ops.div(n.as_tensor(cast(n, n.input(0), F64)), n.as_tensor(cast(n, n.input(1), F64)))
    return ops.cast(q, dt)


@converter("Pow", versions=(7, 15))
def pow_(n: OnnxNode) -> Tensor:
    """Pow: the result has the base's type; a constant scalar exponent becomes a Python number
    (so 2, 3, 0.5 become multiplications and square roots)."""
    base, exponent = n.required(0, "base"), n.required(1, "exponent")
    bt = dtype_of(base)
    x = n.as_tensor(base)
    if is_const(exponent) and as_numpy(exponent).size == 1 and as_numpy(exponent).ndim <= len(base.shape):
        e = float(py_scalar(as_numpy(exponent)))
        if bt.is_float():
            return ops.pow(x, e)  # 2, 3, 0.5, -1 ... become multiplications, sqrt, reciprocals
        if e.is_integer() and e >= 0:
            return ops.pow(x, int(e))
    if bt.is_float():
        return ops.pow(x, n.as_tensor(cast(n, exponent, bt)))
    y = ops.pow(ops.cast(x, F64), n.as_tensor(cast(n, exponent, F64)))
    return ops.cast(y, bt)


def _trunc(q: Tensor) -> Tensor:
    return ops.where(ops.less(q, 0.0), ops.ceil(q), ops.floor(q))


@converter("Mod", versions=(10, 28))
def mod(n: OnnxNode) -> Tensor:
    """Mod: ``fmod=1`` takes the dividend's sign (C fmod), ``fmod=0`` the divisor's (Python %)."""
    dt = dtype_of(n.required(0))
    n.required(1)
    fmod = n.flag("fmod", 0)  # 1: the sign of the dividend (C's fmod); 0: of the divisor (Python's %)
    a = n.as_tensor(cast(n, n.input(0), F64))
    b = n.as_tensor(cast(n, n.input(1), F64))
    q = ops.div(a, b)
    q = _trunc(q) if fmod else ops.floor(q)
    return ops.cast(ops.sub(a, ops.mul(q, b)), dt)


@converter("Where", versions=(9, 16))
def where(n: OnnxNode) -> Tensor:
    """Where: ``a`` where ``cond`` holds, else ``b``, all three broadcast."""
    cond = n.required(0, "condition")
    a, b = operands(n, 1, 2)
    c = cond if not is_const(cond) else n.pool.tensor(as_numpy(cond), n.label)
    return ops.where(c, a, b)


def _variadic(fn: Callable[[Any, Any], Tensor], mean: bool = False) -> Callable[[OnnxNode], Value]:
    def convert(n: OnnxNode) -> Value:
        values = [v for v in n.inputs if v is not None]
        if not values:
            raise n.error("needs at least one input")
        # start from a traced input, so that every operator reads one
        values.sort(key=is_const)
        acc: Value = values[0]
        for v in values[1:]:
            acc = fn(acc, operand(n, v, acc))
        if mean and len(values) > 1:
            acc = ops.div(acc, float(len(values)))
        return acc
    return convert


_register_all({
    "Max": ((8, 13), _variadic(ops.maximum)),
    "Min": ((8, 13), _variadic(ops.minimum)),
    "Sum": ((8, 13), _variadic(ops.add)),
    "Mean": ((8, 13), _variadic(ops.add, mean=True)),
})


# ----------------------------------------------------------------------------- casts

@converter("Cast", versions=(6, 28))
def cast_(n: OnnxNode) -> Value:
    """Cast to the element type of the ``to`` attribute (constants are cast in numpy)."""
    dt = taskloom_dtype(n.required_attr("to"), f"{n.label}: 'to'")
    return cast(n, n.required(0), dt)


@converter("CastLike", versions=(15, 25))
def cast_like(n: OnnxNode) -> Value:
    """CastLike: cast to the element type of input 1."""
    return cast(n, n.required(0), dtype_of(n.required(1, "target_type")))


# ----------------------------------------------------------------------------- softmax

def _softmax(fn: Callable[[Tensor, int], Tensor]) -> Callable[[OnnxNode], Tensor]:
    def convert(n: OnnxNode) -> Tensor:
        x = n.tensor(0)
        if n.version >= 13:
            return fn(x, normalize_axis(n, int(n.attr("axis", -1)), x.ndim))
        # before version 13 the input is seen as 2-d: [:axis] flattened by [axis:] flattened
        axis = normalize_axis(n, int(n.attr("axis", 1)), x.ndim)
        rows = math.prod(shape_of(x)[:axis])
        y = fn(ops.reshape(x, (rows, -1)), -1)
        return ops.reshape(y, shape_of(x))
    return convert


_register_all({
    "Softmax": ((1, 13), _softmax(ops.softmax)),
    "LogSoftmax": ((1, 13), _softmax(ops.log_softmax)),
})


# ----------------------------------------------------------------------------- reductions

def reduce_axes(n: OnnxNode, x: Tensor, axes_input_since: int) -> list[int] | None:
    """The reduced axes: an attribute before version ``axes_input_since``, an input from it
    on. None means every axis; ``noop_with_empty_axes`` turns an empty list into no axis."""
    axes = n.attr("axes") if n.version < axes_input_since else n.ints(1, "axes")
    if not axes:
        return [] if n.flag("noop_with_empty_axes", 0) else None
    return sorted(set(normalize_axes(n, axes, x.ndim)))


#: The value of each reduction over an empty set.
_EMPTY = {"sum": 0, "prod": 1, "l1": 0, "l2": 0, "sumsquare": 0, "mean": np.nan, "max": -np.inf, "min": np.inf,
          "logsum": -np.inf, "logsumexp": -np.inf}


def _reduction(kind: str, axes_input_since: int = 18) -> Callable[[OnnxNode], Value]:
    def convert(n: OnnxNode) -> Value:
        x = n.tensor(0)
        axes = reduce_axes(n, x, axes_input_since)
        if axes == []:
            return x
        keep = n.flag("keepdims", 1)
        dt = x.dtype
        shape = shape_of(x)
        if any(shape[a] == 0 for a in (range(x.ndim) if axes is None else axes)):
            # a reduction over nothing does not read the input: its identity element
            out = [1 if axes is None or a in axes else d for a, d in enumerate(shape)
                   if keep or not (axes is None or a in axes)]
            fill = _EMPTY[kind]
            if kind in ("max", "min") and not dt.is_float():  # the type's own extremes
                lo, hi = (False, True) if dt.is_bool() else (np.iinfo(dt.numpy).min, np.iinfo(dt.numpy).max)
                fill = lo if kind == "max" else hi
            return np.full(out, fill, dtype=dt.numpy)
        if kind == "mean":
            return ops.mean(x, axes, keep)
        if kind in ("max", "min"):
            return getattr(ops, kind)(x, axes, keep)
        if kind == "logsumexp":
            m = ops.max(x, axes, True)
            s = ops.log(ops.sum(ops.exp(ops.sub(x, m)), axes, True))
            y = ops.add(s, m)
            return y if keep else ops.squeeze(y, axes)
        square = 2.0 if dt.is_float() else 2
        body = {"sum": x, "prod": x, "l1": None, "l2": None, "sumsquare": None, "logsum": x}[kind]
        if kind == "l1":
            body = ops.abs(x)
        elif kind in ("l2", "sumsquare"):
            body = ops.pow(x, square)
        y = (ops.prod if kind == "prod" else ops.sum)(body, axes, keep)
        if kind == "l2":
            y = ops.sqrt(y)
        elif kind == "logsum":
            y = ops.log(y)
        return y if y.dtype == dt else ops.cast(y, dt)
    return convert


_register_all({
    "ReduceSum": ((1, 13), _reduction("sum", axes_input_since=13)),
    "ReduceMean": ((1, 18), _reduction("mean")),
    "ReduceMax": ((1, 20), _reduction("max")),
    "ReduceMin": ((1, 20), _reduction("min")),
    "ReduceProd": ((1, 18), _reduction("prod")),
    "ReduceL1": ((1, 18), _reduction("l1")),
    "ReduceL2": ((1, 18), _reduction("l2")),
    "ReduceSumSquare": ((1, 18), _reduction("sumsquare")),
    "ReduceLogSum": ((1, 28), _reduction("logsum")),
    "ReduceLogSumExp": ((1, 28), _reduction("logsumexp")),
})


def _arg_reduction(fn: Callable[..., Tensor]) -> Callable[[OnnxNode], Tensor]:
    def convert(n: OnnxNode) -> Tensor:
        x = n.tensor(0)
        axis = normalize_axis(n, int(n.attr("axis", 0)), x.ndim)
        keep = n.flag("keepdims", 1)
        if not n.flag("select_last_index", 0):
            return fn(x, axis, keep)
        # the last of equal extremes: search the reversed axis, then count back from the end
        size = shape_of(x)[axis]
        rev = ops.index_select(x, axis, n.pool.tensor(np.arange(size - 1, -1, -1, dtype=np.int32), n.label))
        return ops.sub(size - 1, fn(rev, axis, keep))
    return convert


_register_all({
    "ArgMax": ((1, 13), _arg_reduction(ops.argmax)),
    "ArgMin": ((1, 13), _arg_reduction(ops.argmin)),
})


@converter("Swish", versions=(24, 24))
def swish(n: OnnxNode) -> Tensor:
    """Swish (opset 24): ``x * sigmoid(alpha * x)``."""
    x, alpha = n.tensor(0), float(n.attr("alpha", 1.0))
    return ops.silu(x) if alpha == 1.0 else ops.mul(x, ops.sigmoid(ops.mul(x, alpha)))


@converter("IsNaN", versions=(9, 20))
def isnan(n: OnnxNode) -> Tensor:
    """IsNaN: whether each element is NaN."""
    return ops.unary("isnan", n.tensor(0), lambda v: E.ne(v, v))  # NaN is the one value unequal to itself


@converter("IsInf", versions=(10, 20))
def isinf(n: OnnxNode) -> Tensor:
    """IsInf: whether each element is +inf (``detect_positive``) or -inf (``detect_negative``)."""
    pos, neg = int(n.flag("detect_positive", 1)), int(n.flag("detect_negative", 1))
    x = n.tensor(0)

    def test(v: E.Expr) -> E.Expr:
        checks = ([E.eq(v, E.const(math.inf, v.type))] if pos else []) + \
                 ([E.eq(v, E.const(-math.inf, v.type))] if neg else [])
        return E.logical_or(*checks) if len(checks) > 1 else checks[0]
    if not pos and not neg:
        return ops.unary("isinf", x, lambda v: E.const(False, T.boolean))
    return ops.unary("isinf", x, test, {"detect_positive": pos, "detect_negative": neg})
