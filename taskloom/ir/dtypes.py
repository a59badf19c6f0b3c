"""Data types of the tensor-program IR: scalars, vectors, pointers and tensors.

A tensor type's shape is a tuple of expressions, so a dimension may be a symbol
(`M`, `batch`) as well as an int.

    >>> f32[128, 64]            # a tensor type
    f32[128, 64]
    >>> vec(f32, 16)            # a 16-lane vector register
    f32x16
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from taskloom.errors import IRError

if TYPE_CHECKING:
    from taskloom.ir.expr import Expr


class Type:
    """Base of every IR type."""

    def is_scalar(self) -> bool:
        return isinstance(self, DataType)

    def is_vector(self) -> bool:
        return isinstance(self, VectorType)

    def is_tensor(self) -> bool:
        return isinstance(self, TensorType)

    def is_pointer(self) -> bool:
        return isinstance(self, PointerType)

    def __getitem__(self, shape: Any) -> TensorType:
        """``f32[M, N]`` is the tensor type of M x N float32 elements (``f32x16[4]`` of 4 vectors)."""
        from taskloom.ir.expr import as_expr
        if not isinstance(self, (DataType, VectorType)):
            raise IRError(f"{self!r} cannot be the element type of a tensor")
        dims = shape if isinstance(shape, tuple) else (shape,)
        return TensorType(self, tuple(as_expr(d) for d in dims))


@dataclass(frozen=True)
class DataType(Type):
    """A scalar type. ``kind`` is one of 'float', 'int', 'uint', 'bool'."""

    name: str
    short: str
    kind: str
    nbytes: int

    def __repr__(self) -> str:
        return self.short

    def is_float(self) -> bool:
        return self.kind == "float"

    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def numpy(self) -> np.dtype | None:
        """The numpy dtype with the same bits, or None (bfloat16 has none)."""
        return _NUMPY.get(self.name)

    def min_value(self) -> float | int:
        if self.is_float():
            return -float("inf")
        if self.is_bool():
            return False
        return int(np.iinfo(self.numpy).min)

    def max_value(self) -> float | int:
        if self.is_float():
            return float("inf")
        if self.is_bool():
            return True
        return int(np.iinfo(self.numpy).max)


float64 = DataType("float64", "f64", "float", 8)
float32 = DataType("float32", "f32", "float", 4)
float16 = DataType("float16", "f16", "float", 2)
bfloat16 = DataType("bfloat16", "bf16", "float", 2)
int64 = DataType("int64", "i64", "int", 8)
int32 = DataType("int32", "i32", "int", 4)
int16 = DataType("int16", "i16", "int", 2)
int8 = DataType("int8", "i8", "int", 1)
uint8 = DataType("uint8", "u8", "uint", 1)
boolean = DataType("bool", "boolean", "bool", 1)

f64, f32, f16, bf16 = float64, float32, float16, bfloat16
i64, i32, i16, i8, u8 = int64, int32, int16, int8, uint8

SCALAR_TYPES: tuple[DataType, ...] = (float64, float32, float16, bfloat16, int64, int32, int16,
                                      int8, uint8, boolean)
_BY_NAME = {t.name: t for t in SCALAR_TYPES} | {t.short: t for t in SCALAR_TYPES}
_NUMPY = {t.name: np.dtype(t.name if t.name != "bool" else np.bool_)
          for t in SCALAR_TYPES if t.name != "bfloat16"}

# Order used to promote mixed operands: bool < ints < floats, wider wins.
_RANK = {boolean: 0, uint8: 1, int8: 2, int16: 3, int32: 4, int64: 5, float16: 6, bfloat16: 7,
         float32: 8, float64: 9}

#: The type of loop variables and index arithmetic wherever every index fits it (the
#: fastest); :data:`wide_index_type` where a tensor may have more than :data:`INDEX_MAX`
#: elements (see :func:`index_type_for`).
index_type = int32
wide_index_type = int64
INDEX_MAX = 2 ** 31 - 1


# bfloat16 has no numpy type: its values are held as their 16 bits in a uint16

def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), NaN kept a NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000
    nan = np.isnan(x)
    if nan.any():
        rounded = np.where(nan, (bits & 0x80000000) | 0x7FC00000, rounded)
    return rounded.astype(np.uint32).view(np.float32)


def bf16_from_bits(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) as the float32 values they hold."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def bf16_to_bits(x: np.ndarray) -> np.ndarray:
    """float32 values as the bits (uint16) of their nearest bfloat16."""
    return (bf16_round(x).view(np.uint32) >> 16).astype(np.uint16)


def index_type_for(count: int | None) -> DataType:
    """The index type that holds every position below ``count`` (None: not known, so wide)."""
    return index_type if count is not None and count <= INDEX_MAX else wide_index_type


def dtype(name: str | DataType | np.dtype | type) -> DataType:
    """Look up a scalar type by name ('float32', 'f32'), numpy dtype or DataType."""
    if isinstance(name, DataType):
        return name
    if not isinstance(name, str):
        name = np.dtype(name).name
    try:
        return _BY_NAME[name]
    except KeyError:
        raise IRError(f"unknown data type {name!r}; known: "
                      f"{', '.join(t.name for t in SCALAR_TYPES)}") from None


def promote(a: DataType, b: DataType) -> DataType:
    """The type both operands of a binary operation are converted to."""
    return a if _RANK[a] >= _RANK[b] else b


@dataclass(frozen=True)
class VectorType(Type):
    """``lanes`` elements of a scalar type held in one vector register."""

    base: DataType
    lanes: int

    def __repr__(self) -> str:
        return f"{self.base.short}x{self.lanes}"

    @property
    def nbytes(self) -> int:
        return self.base.nbytes * self.lanes


def vec(base: DataType, lanes: int) -> VectorType:
    """The vector type of ``lanes`` elements of ``base``: ``vec(f32, 16)`` is f32x16."""
    if lanes < 2:
        raise IRError(f"a vector needs at least 2 lanes, got {lanes}")
    return VectorType(base, lanes)


f32x4, f32x8, f32x16 = vec(float32, 4), vec(float32, 8), vec(float32, 16)


@dataclass(frozen=True)
class PointerType(Type):
    """A raw pointer to elements of ``base`` (a scalar or vector type)."""

    base: DataType | VectorType

    def __repr__(self) -> str:
        return f"ptr({self.base!r})"


def ptr(base: DataType | VectorType) -> PointerType:
    return PointerType(base)


@dataclass(frozen=True)
class TensorType(Type):
    """A dense row-major tensor of ``dtype`` (scalar or vector) with a possibly symbolic shape."""

    dtype: DataType | VectorType
    shape: tuple["Expr", ...]

    def __repr__(self) -> str:
        return f"{self.dtype!r}[{', '.join(map(repr, self.shape))}]"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def static_shape(self) -> tuple[int, ...] | None:
        """The shape as ints, or None if any dimension is symbolic."""
        from taskloom.ir.expr import Constant
        if all(isinstance(d, Constant) for d in self.shape):
            return tuple(int(d.value) for d in self.shape)
        return None


def element_type(t: Type) -> DataType | VectorType:
    """What one element of a tensor or pointer holds."""
    if isinstance(t, TensorType):
        return t.dtype
    if isinstance(t, PointerType):
        return t.base
    raise IRError(f"type {t!r} has no elements")
