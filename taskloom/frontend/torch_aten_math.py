"""Converters of the elementwise ATen operators, the reductions (softmax included) and the
normalizations (layer, batch and group norm) to taskloom ops."""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from taskloom import ops
from taskloom.errors import FrontendError
from taskloom.frontend.torch_aten import Converter, aten, as_dtype, register
from taskloom.graph.tensor import Tensor, asarray
from taskloom.ir import dtypes as T


# ----------------------------------------------------------------------------- helpers

def _dims(dim: Any, ndim: int) -> list[int] | None:
    """A reduction's ``dim`` argument as a list; None or [] mean every axis, as in ATen."""
    if dim is None:
        return None
    items = [dim] if isinstance(dim, int) else list(dim)
    return None if not items else items


def _axes(dim: Any, ndim: int) -> list[int]:
    """The reduced axes, normalized to ``[0, ndim)``."""
    d = _dims(dim, ndim)
    return list(range(ndim)) if d is None else sorted(a % max(ndim, 1) for a in d)


def _count(x: Tensor, axes: Sequence[int]) -> int:
    return math.prod(int(x.shape[a]) for a in axes) if x.ndim else 1


# ----------------------------------------------------------------------------- elementwise

_UNARY: dict[Any, Callable[[Any], Tensor]] = {
    aten.relu: ops.relu, aten.tanh: ops.tanh, aten.sigmoid: ops.sigmoid, aten.silu: ops.silu,
    aten.exp: ops.exp, aten.log: ops.log, aten.sqrt: ops.sqrt, aten.rsqrt: ops.rsqrt, aten.erf: ops.erf,
    aten.neg: ops.neg, aten.abs: ops.abs, aten.reciprocal: ops.reciprocal, aten.floor: ops.floor,
    aten.ceil: ops.ceil, aten.hardswish: ops.hardswish, aten.hardsigmoid: ops.hardsigmoid,
    aten.relu6: ops.relu6, aten.logical_not: ops.logical_not,
    aten.sin: ops.sin, aten.cos: ops.cos, aten.tan: ops.tan, aten.asin: ops.asin, aten.acos: ops.acos,
    aten.atan: ops.atan, aten.sinh: ops.sinh, aten.cosh: ops.cosh, aten.asinh: ops.asinh, aten.acosh: ops.acosh,
    aten.atanh: ops.atanh, aten.log10: ops.log10, aten.round.default: ops.round,
}
for _target, _fn in _UNARY.items():
    register(_target)((lambda f: lambda x: f(x))(_fn))

_BINARY: dict[Any, Callable[[Any, Any], Tensor]] = {
    aten.mul: ops.mul, aten.atan2: ops.atan2, aten.maximum: ops.maximum, aten.minimum: ops.minimum,
    aten.eq: ops.equal, aten.ne: ops.not_equal, aten.lt: ops.less, aten.le: ops.less_equal,
    aten.gt: ops.greater, aten.ge: ops.greater_equal, aten.logical_and: ops.logical_and,
    aten.logical_or: ops.logical_or, aten.logical_xor: ops.logical_xor,
}
for _target, _fn in _BINARY.items():
    register(_target)((lambda f: lambda a, b: f(a, b))(_fn))


@register(aten.gelu)
def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return ops.gelu(x, approximate)


@register(aten.hardtanh)
def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    if min_val == 0 and max_val == 6:
        return ops.relu6(x)
    return ops.clip(x, min_val, max_val)


@register(aten.leaky_relu)
def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return ops.leaky_relu(x, float(negative_slope))


@register(aten.elu)
def elu(x: Tensor, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> Tensor:
    neg = ops.mul(ops.sub(ops.exp(ops.mul(x, float(input_scale))), 1.0), float(alpha * scale))
    return ops.where(ops.greater(x, 0.0), ops.mul(x, float(scale)), neg)


@register(aten.clamp, aten.clip)
def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - ATen's names
    return ops.clip(x, min, max)


@register(aten.clamp_min)
def clamp_min(x: Tensor, min: Any) -> Tensor:  # noqa: A002
    return ops.clip(x, min, None)


@register(aten.clamp_max)
def clamp_max(x: Tensor, max: Any) -> Tensor:  # noqa: A002
    return ops.clip(x, None, max)


@register(aten.add)
def add(a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ops.add(a, b if alpha == 1 else ops.mul(b, alpha))


@register(aten.sub)
def sub(a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ops.sub(a, b if alpha == 1 else ops.mul(b, alpha))


@register(aten.rsub)
def rsub(a: Any, b: Any, alpha: Any = 1) -> Tensor:
    return ops.sub(b, a if alpha == 1 else ops.mul(a, alpha))


@register(aten.div)
def div(a: Any, b: Any, rounding_mode: str | None = None) -> Tensor:
    if rounding_mode is None:
        return ops.div(a, b)
    a, b, back = _through_float64(a, b)
    q = ops.div(a, b)
    if rounding_mode == "floor":
        q = ops.floor(q)
    elif rounding_mode == "trunc":
        q = ops.where(ops.less(q, 0.0), ops.ceil(q), ops.floor(q))
    else:
        raise FrontendError(f"div: rounding_mode={rounding_mode!r} is not one of None, 'trunc', 'floor'")
    return ops.cast(q, back) if back is not None else q


def _through_float64(a: Any, b: Any) -> tuple[Any, Any, T.DataType | None]:
    """Integer operands as float64 (exact below 2**53) and the integer type to return to."""
    if any(isinstance(t, Tensor) and t.dtype.is_float() for t in (a, b)) or \
            any(isinstance(t, float) for t in (a, b)):
        return a, b, None
    out = next(t.dtype for t in (a, b) if isinstance(t, Tensor))
    return tuple(ops.cast(t, T.float64) if isinstance(t, Tensor) else float(t) for t in (a, b)) + (out,)  # type: ignore


@register(aten.remainder)
def remainder(a: Any, b: Any) -> Tensor:
    """Python's ``a % b``: the result takes the sign of ``b``."""
    a, b, back = _through_float64(a, b)
    r = ops.sub(a, ops.mul(ops.where(ops.less(ops.div(a, b), 0.0), ops.ceil(ops.div(a, b)),
                                     ops.floor(ops.div(a, b))), b))
    fix = ops.logical_and(ops.not_equal(r, 0.0), ops.not_equal(ops.less(r, 0.0), ops.less(b, 0.0)))
    r = ops.where(fix, ops.add(r, b), r)
    return ops.cast(r, back) if back is not None else r


@register(aten.fmod)
def fmod(a: Any, b: Any) -> Tensor:
    """C's ``fmod``: the result takes the sign of ``a``."""
    a, b, back = _through_float64(a, b)
    q = ops.div(a, b)
    r = ops.sub(a, ops.mul(ops.where(ops.less(q, 0.0), ops.ceil(q), ops.floor(q)), b))
    return ops.cast(r, back) if back is not None else r


@register(aten.pow)
def pow_(a: Any, b: Any) -> Tensor:
    return ops.pow(a, b)


@register(aten.bitwise_not)
def bitwise_not(x: Tensor) -> Tensor:
    if not x.dtype.is_bool():
        raise FrontendError(f"bitwise_not of a {x.dtype.name} tensor is not supported (only bool)")
    return ops.logical_not(x)


def _bitwise(name: str, fn: Callable[[Any, Any], Tensor]) -> Converter:
    def convert(a: Any, b: Any) -> Tensor:
        for t in (a, b):
            if isinstance(t, Tensor) and not t.dtype.is_bool():
                raise FrontendError(f"{name} of a {t.dtype.name} tensor is not supported (only bool)")
        return fn(a, b)
    return convert


register(aten.bitwise_and)(_bitwise("bitwise_and", ops.logical_and))
register(aten.bitwise_or)(_bitwise("bitwise_or", ops.logical_or))
register(aten.bitwise_xor)(_bitwise("bitwise_xor", ops.logical_xor))


@register(aten.isnan)
def isnan(x: Tensor) -> Tensor:
    return ops.not_equal(x, x)


@register(aten.isinf)
def isinf(x: Tensor) -> Tensor:
    return ops.equal(ops.abs(x), math.inf)


@register(aten.log1p)
def log1p(x: Tensor) -> Tensor:
    """``log(1 + x)``, accurate for tiny ``x`` too: ``log(u) * x / (u - 1)`` with ``u = 1 + x``
    cancels the rounding of ``u`` (Goldberg's formula)."""
    u = ops.add(x, 1.0)
    return ops.where(ops.equal(u, 1.0), x, ops.div(ops.mul(ops.log(u), x), ops.sub(u, 1.0)))


@register(aten.expm1)
def expm1(x: Tensor) -> Tensor:
    """``exp(x) - 1``, accurate for tiny ``x`` too: ``(u - 1) * x / log(u)`` with ``u = exp(x)``."""
    u = ops.exp(x)
    small = ops.div(ops.mul(ops.sub(u, 1.0), x), ops.log(u))
    return ops.where(ops.equal(u, 1.0), x, ops.where(ops.less(ops.abs(x), 0.5), small, ops.sub(u, 1.0)))


@register(aten.log2)
def log2(x: Tensor) -> Tensor:
    return ops.mul(ops.log(x), 1.0 / math.log(2.0))


@register(aten.exp2)
def exp2(x: Tensor) -> Tensor:
    return ops.exp(ops.mul(x, math.log(2.0)))


@register(aten.trunc)
def trunc(x: Tensor) -> Tensor:
    return ops.where(ops.less(x, 0), ops.ceil(x), ops.floor(x)) if x.dtype.is_float() else x


@register(aten.sign)
def sign(x: Tensor) -> Tensor:
    return ops.cast(ops.sub(ops.cast(ops.greater(x, 0), x.dtype), ops.cast(ops.less(x, 0), x.dtype)), x.dtype)


@register(aten.where)
def where(cond: Any, a: Any, b: Any) -> Tensor:
    return ops.where(cond, a, b)


@register(aten.masked_fill)
def masked_fill(x: Tensor, mask: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        value = ops.cast(value, x.dtype)
    return ops.where(mask, value, x)


@register(aten._to_copy)
def to_copy(x: Tensor, dtype: Any = None, **_: Any) -> Tensor:
    return as_dtype(x, dtype)


# ----------------------------------------------------------------------------- reductions

def _reduction(fn: Callable[..., Tensor]) -> Converter:
    def convert(x: Tensor, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
        x = as_dtype(x, dtype)
        return fn(x, _dims(dim, x.ndim), keepdim=bool(keepdim))
    return convert


register(aten.sum)(_reduction(ops.sum))
register(aten.mean)(_reduction(ops.mean))
register(aten.amax)(_reduction(ops.max))
register(aten.amin)(_reduction(ops.min))


@register(aten.prod)
def prod(x: Tensor, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    return ops.prod(as_dtype(x, dtype), dim, keepdim=bool(keepdim))


def _max_min(values: Callable[..., Tensor], index: Callable[..., Tensor]) -> Converter:
    def convert(x: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
        if dim is None:  # max.default: the value of the whole tensor
            return values(x)
        return (values(x, dim, keepdim=keepdim), lambda: index(x, dim, keepdim=keepdim))
    return convert


register(aten.max.default, aten.max.dim)(_max_min(ops.max, ops.argmax))
register(aten.min.default, aten.min.dim)(_max_min(ops.min, ops.argmin))
register(aten.max.other)(lambda a, b: ops.maximum(a, b))
register(aten.min.other)(lambda a, b: ops.minimum(a, b))


@register(aten.argmax)
def argmax(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return ops.argmax(x, dim, keepdim=keepdim)


@register(aten.argmin)
def argmin(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    return ops.argmin(x, dim, keepdim=keepdim)


@register(aten.any)
def any_(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return ops.greater(ops.sum(ops.cast(ops.not_equal(x, 0), T.int32), _dims(dim, x.ndim), keepdim=keepdim), 0)


@register(aten.all)
def all_(x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    return ops.logical_not(any_(ops.logical_not(x), dim, keepdim))


def _var(x: Tensor, dim: Any, correction: Any, keepdim: bool) -> tuple[Tensor, Tensor]:
    """(variance, mean) over ``dim`` with ``correction`` (Bessel's by default)."""
    axes = _axes(dim, x.ndim)
    c = 1 if correction is None else correction
    m = ops.mean(x, axes, keepdim=True)
    d = ops.sub(x, m)
    var = ops.div(ops.sum(ops.mul(d, d), axes, keepdim=keepdim), float(max(_count(x, axes) - c, 0)))
    return var, (m if keepdim else ops.squeeze(m, axes) if x.ndim else m)


@register(aten.var.correction)
def var(x: Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Tensor:
    return _var(x, dim, correction, keepdim)[0]


@register(aten.var_mean.correction)
def var_mean(x: Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> tuple:
    return _var(x, dim, correction, keepdim)


@register(aten.std.correction)
def std(x: Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Tensor:
    return ops.sqrt(_var(x, dim, correction, keepdim)[0])


@register(aten.linalg_vector_norm)
def vector_norm(x: Tensor, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
                dtype: Any = None) -> Tensor:
    x = ops.abs(as_dtype(x, dtype))
    axes = _dims(dim, x.ndim)
    if ord == math.inf:
        return ops.max(x, axes, keepdim=keepdim)
    if ord == -math.inf:
        return ops.min(x, axes, keepdim=keepdim)
    if ord == 0:
        return ops.sum(ops.cast(ops.not_equal(x, 0), x.dtype), axes, keepdim=keepdim)
    if ord == 1:
        return ops.sum(x, axes, keepdim=keepdim)
    if ord == 2:
        return ops.sqrt(ops.sum(ops.mul(x, x), axes, keepdim=keepdim))
    return ops.pow(ops.sum(ops.pow(x, float(ord)), axes, keepdim=keepdim), 1.0 / float(ord))


@register(aten.cumsum)
def cumsum(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    return ops.cumsum(as_dtype(x, dtype), dim)


@register(aten._softmax, aten.softmax.int)
def softmax(x: Tensor, dim: int, half_to_float: Any = False) -> Tensor:
    if half_to_float is True:
        x = ops.cast(x, T.float32)
    elif half_to_float not in (False, None):  # softmax.int: a dtype
        x = as_dtype(x, half_to_float)
    return ops.softmax(x, dim)


@register(aten._log_softmax, aten.log_softmax.int)
def log_softmax(x: Tensor, dim: int, half_to_float: Any = False) -> Tensor:
    if half_to_float is True:
        x = ops.cast(x, T.float32)
    elif half_to_float not in (False, None):
        x = as_dtype(x, half_to_float)
    return ops.log_softmax(x, dim)


@register(aten._safe_softmax)
def safe_softmax(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    """Softmax whose rows that are -inf everywhere give 0 instead of nan."""
    x = as_dtype(x, dtype)
    live = any_(ops.not_equal(x, -math.inf), dim, True)
    return ops.where(live, ops.softmax(x, dim), 0.0)


@register(aten.logsumexp)
def logsumexp(x: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    axes = _axes(dim, x.ndim)
    m = ops.max(x, axes, keepdim=True)
    m = ops.where(ops.equal(ops.abs(m), math.inf), 0.0, m)  # all -inf (or inf) rows: no shift
    s = ops.add(ops.log(ops.sum(ops.exp(ops.sub(x, m)), axes, keepdim=True)), m)
    return s if keepdim else ops.squeeze(s, axes)


# ----------------------------------------------------------------------------- normalization

@register(aten.native_layer_norm)
def native_layer_norm(x: Tensor, normalized_shape: Sequence[int], weight: Any, bias: Any, eps: float) -> tuple:
    ns = tuple(normalized_shape)
    out = ops.layer_norm(x, ns, weight, bias, eps)
    axes = list(range(x.ndim - len(ns), x.ndim))

    def mean() -> Tensor:
        return ops.mean(x, axes, keepdim=True)

    def rstd() -> Tensor:
        var, _ = _var(x, axes, 0, True)
        return ops.rsqrt(ops.add(var, float(eps)))
    return out, mean, rstd


def _batch_norm(x: Tensor, weight: Any, bias: Any, mean: Any, var: Any, training: bool, eps: float) -> tuple:
    if training or mean is None or var is None:
        raise FrontendError("batch norm in training mode (batch statistics) is not supported: "
                            "call model.eval() before compiling")
    empty = lambda: asarray(np.zeros((0,), np.float32))  # noqa: E731 - torch returns empty statistics
    return ops.batch_norm(x, mean, var, weight, bias, eps), empty, empty


@register(aten.native_batch_norm, aten._native_batch_norm_legit.default)
def native_batch_norm(x: Tensor, weight: Any, bias: Any, running_mean: Any, running_var: Any,
                      training: bool, momentum: float, eps: float) -> tuple:
    return _batch_norm(x, weight, bias, running_mean, running_var, training, eps)


@register(aten._native_batch_norm_legit_no_training)
def batch_norm_no_training(x: Tensor, weight: Any, bias: Any, running_mean: Tensor, running_var: Tensor,
                           momentum: float, eps: float) -> tuple:
    return _batch_norm(x, weight, bias, running_mean, running_var, False, eps)


@register(aten.native_group_norm)
def native_group_norm(x: Tensor, weight: Any, bias: Any, n: int, c: int, hw: int, group: int, eps: float) -> tuple:
    grouped = ops.reshape(x, (int(n), int(group), -1))
    var, mean = _var(grouped, [2], 0, True)
    rstd = ops.rsqrt(ops.add(var, float(eps)))
    out = ops.reshape(ops.mul(ops.sub(grouped, mean), rstd), tuple(x.shape))
    per_channel = (1, int(c)) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = ops.mul(out, ops.reshape(weight, per_channel))
    if bias is not None:
        out = ops.add(out, ops.reshape(bias, per_channel))
    return out, (lambda: ops.squeeze(mean, 2)), (lambda: ops.squeeze(rstd, 2))


