"""The registry of ONNX operator converters, and what a converter is given.

A converter turns one ONNX node into taskloom operators. It is registered for an operator
type and the range of that operator's *versions* it implements (the ``since_version`` of
the ONNX schema a model's opset resolves to: in an opset-17 model ``ReduceMean`` is
version 13, in an opset-18 model version 18, where ``axes`` moved from an attribute to an
input). Adding an operator is one decorated function::

    @converter("Relu", versions=(6, 14))
    def relu(node: OnnxNode) -> Value:
        return ops.relu(node.tensor(0))

Values are numpy arrays where they are known while converting (initializers, ``Constant``
nodes, and everything computed from them and from static shapes, such as the
``Shape -> Gather -> Concat -> Reshape`` chains exporters emit) and data-less taskloom
tensors otherwise. A converter may return either kind; concrete taskloom tensors count as
constants. This module does not import ``onnx``: converters see attributes as plain
Python values and tensors as numpy arrays.

A converter reads what it needs through :class:`OnnxNode` (``required``, ``tensor``,
``ints``, ``flag``, ``required_attr``...), whose errors name the node and say what would be
right; anything else a converter raises is still reported against its node.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, Union

import numpy as np

from taskloom.errors import FrontendError
from taskloom.frontend.onnx_symbolic import Sizes, elements
from taskloom.graph.tensor import Tensor, asarray
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir.printer import expr_text

Value = Union[np.ndarray, Tensor, Sizes]

#: ONNX ``TensorProto.DataType`` codes of the element types taskloom has.
ONNX_DTYPES: dict[int, str] = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64",
                               9: "bool", 10: "float16", 11: "float64", 16: "bfloat16"}
ONNX_DTYPE_NAMES: dict[int, str] = {
    0: "undefined", 1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64", 14: "complex64",
    15: "complex128", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
    20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1"}


def taskloom_dtype(code: int, where: str) -> T.DataType:
    """The taskloom dtype of an ONNX element type code; an error names ``where`` it was met."""
    name = ONNX_DTYPES.get(int(code))
    if name is None:
        got = ONNX_DTYPE_NAMES.get(int(code), f"code {code}")
        known = ", ".join(ONNX_DTYPE_NAMES[c] for c in ONNX_DTYPES)
        raise FrontendError(f"{where}: element type {got} is not supported (supported: {known})")
    return T.dtype(name)


@dataclass(frozen=True)
class Converter:
    """Converts nodes of ``op_type`` whose operator version lies in ``versions`` (inclusive)."""

    op_type: str
    versions: tuple[int, int]
    fn: Callable[["OnnxNode"], Any]

    def supports(self, version: int) -> bool:
        """Whether operator version ``version`` is one this converter implements."""
        return self.versions[0] <= version <= self.versions[1]


#: op type -> its converter. Extend it with :func:`converter`.
REGISTRY: dict[str, Converter] = {}


def converter(op_type: str, versions: tuple[int, int]) -> Callable[[Callable], Callable]:
    """Registers the decorated function as the converter of ``op_type`` for the operator
    versions ``versions`` = (first, last), inclusive."""
    lo, hi = versions
    if not 1 <= lo <= hi:
        raise ValueError(f"converter({op_type!r}): versions {versions} must be (first, last) with 1 <= first <= last")

    def register(fn: Callable) -> Callable:
        REGISTRY[op_type] = Converter(op_type, (lo, hi), fn)
        return fn
    return register


class ConstantPool:
    """numpy constants as graph constants: each array becomes one taskloom tensor, however
    many nodes read it."""

    def __init__(self) -> None:
        self._tensors: dict[int, tuple[np.ndarray, Tensor]] = {}

    def tensor(self, arr: np.ndarray, where: str) -> Tensor:
        """The graph constant holding ``arr`` (one per array); ``where`` names the node for errors."""
        hit = self._tensors.get(id(arr))
        if hit is not None:
            return hit[1]
        try:
            T.dtype(arr.dtype)
        except Exception:
            raise FrontendError(f"{where}: a constant of numpy dtype {arr.dtype} cannot become a taskloom "
                                "tensor (supported: float16/32/64, int8/16/32/64, uint8, bool)") from None
        t = asarray(arr if arr.flags.c_contiguous else arr.copy())  # (ascontiguousarray makes 0-d 1-d)
        self._tensors[id(arr)] = (arr, t)
        return t


def is_const(v: Any) -> bool:
    """Whether a value is known at conversion time (a numpy array or a concrete tensor)."""
    return isinstance(v, np.ndarray) or (isinstance(v, Tensor) and v.is_concrete)


def as_numpy(v: Any) -> np.ndarray:
    """A constant value as a numpy array."""
    return v if isinstance(v, np.ndarray) else np.asarray(v.numpy())


def dtype_of(v: Value) -> T.DataType:
    """The taskloom dtype of a value."""
    return v.dtype if isinstance(v, Tensor) else T.dtype(v.dtype)


def shape_of(v: Value) -> tuple[Any, ...]:
    """The shape of a value: ints, and expressions where a size is symbolic."""
    return tuple(d if isinstance(d, E.Expr) else int(d) for d in v.shape)


def static_shape(n: "OnnxNode", v: Value, what: str = "the input") -> tuple[int, ...]:
    """The shape of a value as ints; an error naming the node where a size is symbolic."""
    shape = shape_of(v)
    if any(isinstance(d, E.Expr) for d in shape):
        raise n.error(f"{what} has the symbolic shape {shape_text(shape)}, and this operator needs static sizes "
                      "here; fix the model's symbolic sizes with input_shapes")
    return shape  # type: ignore[return-value]


def shape_text(shape: Sequence[Any]) -> str:
    return "(" + ", ".join(expr_text(d) if isinstance(d, E.Expr) else str(d) for d in shape) + ")"


@dataclass
class OnnxNode:
    """One ONNX node as its converter sees it: operator version, inputs (None where an
    optional input is left out), attributes as Python values, and how many outputs the
    model reads."""

    op_type: str
    label: str                         # how messages name the node
    version: int                       # the operator version (schema since_version)
    inputs: list[Value | None]
    attrs: dict[str, Any]
    outputs: list[str]                 # output names ("" where an optional output is not wanted)
    pool: ConstantPool = field(repr=False, default_factory=ConstantPool)

    # ------------------------------------------------------------------ messages
    def error(self, message: str) -> FrontendError:
        """An error naming this node."""
        return FrontendError(f"{self.label}: {message}")

    # ------------------------------------------------------------------ attributes
    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute ``name``, or ``default`` where the node does not set it."""
        return self.attrs.get(name, default)

    def flag(self, name: str, default: int) -> bool:
        """A 0-or-1 attribute (``keepdims``, ``transA``...) as a bool; other values are errors."""
        v = self.attrs.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int) or v not in (0, 1):
            raise self.error(f"'{name}'={v!r} must be 0 or 1")
        return bool(v)

    def wants_output(self, k: int) -> bool:
        """Whether the model reads output ``k``."""
        return k < len(self.outputs) and self.outputs[k] != ""

    # ------------------------------------------------------------------ inputs
    def input(self, k: int) -> Value | None:
        """Input ``k``, or None where it is left out."""
        return self.inputs[k] if k < len(self.inputs) else None

    def has(self, k: int) -> bool:
        """Whether optional input ``k`` is given."""
        return self.input(k) is not None

    def required(self, k: int, what: str = "") -> Value:
        """Input ``k``; an error naming it (as ``what``) where it is left out."""
        v = self.input(k)
        if v is None:
            raise self.error(f"input {k}{f' ({what})' if what else ''} is required")
        return v

    def required_attr(self, name: str) -> Any:
        """Attribute ``name``; an error where the node does not set it."""
        v = self.attrs.get(name)
        if v is None:
            raise self.error(f"attribute '{name}' is required")
        return v

    def tensor(self, k: int) -> Tensor:
        """Input ``k`` as a taskloom tensor (constants become graph constants)."""
        return self.as_tensor(self.required(k))

    def as_tensor(self, v: Value) -> Tensor:
        """A value as a taskloom tensor (a numpy constant becomes a graph constant)."""
        if isinstance(v, Sizes):
            raise self.error(f"reads the symbolic sizes {v.text()} as data, which only shape arithmetic and the "
                             "operators that take a shape may; fix the model's symbolic sizes with input_shapes")
        return v if isinstance(v, Tensor) else self.pool.tensor(v, self.label)

    def const(self, k: int, what: str) -> np.ndarray | None:
        """Input ``k`` as a numpy array; None where it is left out. It must be known while
        converting: shapes, axes and pads decide the operator's definition."""
        v = self.input(k)
        if v is None:
            return None
        if isinstance(v, Sizes):
            raise self.error(f"input {k} ({what}) holds the symbolic sizes {v.text()}, and this operator needs it "
                             "constant; fix the model's symbolic sizes with input_shapes")
        if not is_const(v):
            err = self.error(f"input {k} ({what}) must be a constant known at conversion time (an initializer, "
                             "a Constant, or computed from static shapes), but it depends on a model input")
            err.needs_constant = v  # type: ignore[attr-defined]  # the converter tells which inputs to fix
            raise err
        return as_numpy(v)

    def ints(self, k: int, what: str) -> list[int] | None:
        """A constant 1-d integer input (sizes, axes, pads) as a list of ints (None where it
        is left out)."""
        arr = self.const(k, what)
        if arr is None:
            return None
        arr = np.asarray(arr)
        if arr.ndim > 1 or not np.issubdtype(arr.dtype, np.integer):
            raise self.error(f"input {k} ({what}) must be a 1-d tensor of integers, got {arr.dtype} of shape "
                             f"{arr.shape}")
        return [int(x) for x in arr.reshape(-1)]

    def sizes(self, k: int, what: str) -> list[Any] | None:
        """A 1-d integer input that may hold symbolic sizes (a shape, a bound) as a list of
        ints and expressions (None where it is left out)."""
        v = self.input(k)
        if not isinstance(v, Sizes):
            return self.ints(k, what)
        if v.ndim > 1:
            raise self.error(f"input {k} ({what}) must be 1-d, got the shape {v.shape}")
        return list(elements(v).reshape(-1))

    def scalar(self, k: int, what: str) -> Any:
        """A constant one-element input as a Python number (None where it is left out)."""
        arr = self.const(k, what)
        if arr is None:
            return None
        if arr.size != 1:
            raise self.error(f"input {k} ({what}) must hold one value, got shape {arr.shape}")
        return arr.reshape(-1)[0].item()


def normalize_axis(node: OnnxNode, axis: int, ndim: int, arg: str = "axis") -> int:
    """``axis`` in ``[0, ndim)``; negative axes count from the end."""
    if not -ndim <= axis < max(ndim, 1):
        raise node.error(f"'{arg}'={axis} is out of range for a {ndim}-d input")
    return axis % ndim if ndim else 0


def normalize_axes(node: OnnxNode, axes: Sequence[int], ndim: int, arg: str = "axes") -> list[int]:
    """Each of ``axes`` in ``[0, ndim)``."""
    return [normalize_axis(node, int(a), ndim, arg) for a in axes]
