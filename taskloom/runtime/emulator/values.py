"""The IR's scalar semantics on numpy arrays, as the CUDA code computes them.

A value is an array over threads in its type's *container*: the numpy dtype of the type,
except bfloat16, which numpy lacks and which is held in float32 (every value exactly a
bfloat16; each operation rounds back, as ``tl_f32_to_bf16(a + b)`` does). In memory a
bfloat16 is its 16 bits in a uint16 (:func:`storage`). Integers wrap as the device's do;
integer ``/`` and ``%`` truncate toward zero as in C; float-to-int conversion truncates and
saturates (``cvt.rzi``). Every operation runs in the value's own dtype, never in float64.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from taskloom.ir.dtypes import DataType, Type, VectorType, bf16_from_bits, bf16_round, bf16_to_bits

Array = np.ndarray


def scalar_of(t: Type) -> DataType:
    """The scalar type of a scalar or vector type."""
    return t.base if isinstance(t, VectorType) else t  # type: ignore[return-value]


def container(t: DataType) -> np.dtype:
    """The numpy dtype values of ``t`` are computed in."""
    return np.dtype(np.float32) if t.name == "bfloat16" else t.numpy


def storage(t: DataType) -> np.dtype:
    """The numpy dtype elements of ``t`` are stored in (bfloat16: its bits, as uint16)."""
    return np.dtype(np.uint16) if t.name == "bfloat16" else t.numpy


# ----------------------------------------------------------------------------- bfloat16
# (bf16_round, bf16_to_bits and bf16_from_bits live with the types: the graph holds bfloat16
# constants as their bits too)

def to_value(stored: Array, t: DataType) -> Array:
    """Elements read from memory as values."""
    return bf16_from_bits(stored) if t.name == "bfloat16" else stored


def to_stored(value: Array, t: DataType) -> Array:
    """Values as the elements memory holds."""
    return bf16_to_bits(value) if t.name == "bfloat16" else value


# ----------------------------------------------------------------------------- constants and casts

def wrap_int(v: int, t: DataType) -> int:
    """``v`` wrapped to the width of integer type ``t``."""
    bits = 8 * t.nbytes
    v &= (1 << bits) - 1
    return v - (1 << bits) if t.kind == "int" and v >= 1 << (bits - 1) else v


def constant(value: int | float | bool, t: DataType, lanes: int = 0) -> Array:
    """A uniform value: shape (1,), or (1, lanes) for a vector."""
    if t.is_integer():
        out = np.array([wrap_int(int(value), t)], dtype=t.numpy)
    elif t.is_bool():
        out = np.array([bool(value)])
    elif t.name == "bfloat16":
        out = bf16_round(np.array([value], dtype=np.float32))
    else:
        out = np.array([value], dtype=np.float64).astype(t.numpy)
    return np.repeat(out[:, None], lanes, axis=1) if lanes else out


def _float_to_int(x: Array, dst: DataType) -> Array:
    """C's conversion as CUDA's ``cvt.rzi`` does it: truncate, saturate, NaN to 0."""
    info = np.iinfo(dst.numpy)
    v = np.trunc(x.astype(np.float64))  # exact for every float type the IR has
    v = np.clip(np.where(np.isnan(v), 0.0, v), float(info.min), float(info.max))
    if dst.nbytes < 8:
        return v.astype(dst.numpy)
    top = v >= 2.0 ** 63  # int64's maximum is no float64: it rounded up to 2**63
    return np.where(top, info.max, np.where(top, 0.0, v).astype(np.int64))


def cast(x: Array, src: DataType, dst: DataType) -> Array:
    """``(dst)x`` with C's rules (to bfloat16 through float, as the CUDA code does)."""
    if src == dst:
        return x
    if dst.is_bool():
        return x != 0
    if dst.name == "bfloat16":
        return bf16_round(x.astype(np.float32))
    if dst.is_float():
        return x.astype(dst.numpy)
    if src.is_float():
        return _float_to_int(x, dst)
    return x.astype(dst.numpy)  # int and bool to int: wraps


# ----------------------------------------------------------------------------- operators

def c_div(a: Array, b: Array) -> Array:
    """Integer division truncating toward zero (C), not flooring (Python)."""
    q = np.floor_divide(a, b)
    if b.shape == (1,) and b[0] > 0 and (a.size == 0 or a.min() >= 0):
        return q
    inexact = np.fmod(a, b) != 0
    return q + (inexact & ((a < 0) != (b < 0))).astype(q.dtype)


_INT_OPS: dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": c_div, "mod": np.fmod,
    "min": np.minimum, "max": np.maximum, "bitand": np.bitwise_and, "bitor": np.bitwise_or,
    "bitxor": np.bitwise_xor, "shl": np.left_shift, "shr": np.right_shift,
}
_FLOAT_OPS: dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "mod": np.fmod,
    "min": np.fmin, "max": np.fmax,  # fminf/fmaxf: a NaN operand yields the other
}
_COMPARE_OPS = {"lt": np.less, "le": np.less_equal, "eq": np.equal, "ne": np.not_equal}
_BOOL_OPS = {"and": np.logical_and, "or": np.logical_or, "eq": np.equal, "ne": np.not_equal,
             "bitand": np.logical_and, "bitor": np.logical_or, "bitxor": np.not_equal,
             "min": np.logical_and, "max": np.logical_or}


def binary_op(op: str, t: DataType) -> Callable[[Array, Array], Array]:
    """The numpy function computing ``a op b`` on operands of type ``t``."""
    if t.is_bool():
        return _BOOL_OPS.get(op) or _COMPARE_OPS[op]
    if op in _COMPARE_OPS:
        return _COMPARE_OPS[op]
    if t.is_integer():
        return _INT_OPS[op]
    f = _FLOAT_OPS[op]
    if t.name == "bfloat16":  # computed in float32, rounded back
        return lambda a, b: bf16_round(f(a, b))
    return f


def unary_op(op: str, t: DataType) -> Callable[[Array], Array]:
    if op == "not":
        return np.logical_not
    if op == "bitnot":
        return np.invert
    return np.negative  # exact for bfloat16 too: it flips the sign bit


# ----------------------------------------------------------------------------- primitives

def _erf(x: Array) -> Array:
    # numpy has no erf: math.erf per element, correctly rounded to the value's dtype
    return np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64).astype(x.dtype)


def _rsqrt(x: Array) -> Array:
    return np.reciprocal(np.sqrt(x))


def _sigmoid(x: Array) -> Array:
    one = np.ones(1, dtype=x.dtype)
    return np.divide(one, one + np.exp(np.negative(x)))


def _fma(a: Array, b: Array, c: Array) -> Array:
    # float32 products are exact in float64, so only the final sum rounds twice
    if a.dtype == np.float64:
        return a * b + c
    wide = np.float64 if a.dtype == np.float32 else np.float32
    return (a.astype(wide) * b + c).astype(a.dtype)


def tf32_round(x: Array) -> Array:
    """float32 rounded to tf32 (10 bits of mantissa), to nearest, ties away from zero: the
    magnitude's bits plus half a tf32 unit, cut; infinities and NaNs kept."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    return np.where(finite, rounded, bits).astype(np.uint32).view(np.float32)


MATH: dict[str, Callable[..., Array]] = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "sqrt": np.sqrt, "rsqrt": _rsqrt, "tanh": np.tanh, "erf": _erf,
    "floor": np.floor, "ceil": np.ceil, "sin": np.sin, "cos": np.cos, "sigmoid": _sigmoid,
    "abs": np.abs, "pow": np.power, "fma": _fma, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "log10": np.log10, "round": np.rint, "atan2": np.arctan2, "tf32_round": tf32_round,
}
REDUCE = {"reduce_add": np.add, "reduce_max": np.fmax, "reduce_min": np.fmin}


def math_op(name: str, t: DataType) -> Callable[..., Array]:
    """The function computing primitive ``name`` on arguments of type ``t``."""
    if name in REDUCE:
        f = REDUCE[name] if t.is_float() else {"reduce_add": np.add, "reduce_max": np.maximum,
                                                "reduce_min": np.minimum}[name]
        red = lambda v: f.reduce(v, axis=-1)  # noqa: E731
        return (lambda v: bf16_round(red(v))) if t.name == "bfloat16" else red
    f = MATH[name]
    if t.name == "bfloat16":
        return lambda *args: bf16_round(f(*args))
    return f
