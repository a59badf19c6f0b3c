"""``taskloom.Tensor``: an n-d array with a dtype and a (possibly symbolic) shape.

A concrete tensor holds its data (a C-contiguous numpy array); applying an operator to
concrete tensors runs it at once (eager mode). Symbolic tensors, whose shapes may name
symbols such as ``batch``, are what graphs are traced with.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from taskloom.errors import OpError
from taskloom.ir import dtypes as T
from taskloom.ir.expr import Expr


class Tensor:
    """An n-d array: ``shape`` (ints, or expressions for symbolic tensors), ``dtype`` and,
    for a concrete tensor, its data."""

    __slots__ = ("shape", "dtype", "_data", "producer", "name")

    def __init__(self, shape: Sequence[int | Expr], dtype: T.DataType, data: np.ndarray | None = None,
                 producer: Any = None, name: str | None = None):
        if data is not None and data.dtype != (dtype.numpy or np.uint16):  # (bfloat16: its bits)
            raise OpError(f"a {dtype.name} tensor cannot hold {data.dtype} data")
        self.shape = tuple(shape)
        self.dtype = dtype
        self._data = data
        self.producer = producer  # (graph node, output index) for a traced tensor
        self.name = name          # graph inputs and constants carry a name

    # ----------------------------------------------------------------- properties
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int | Expr:
        out: Any = 1
        for d in self.shape:
            out = out * d
        return out

    @property
    def is_concrete(self) -> bool:
        return self._data is not None

    def numpy(self) -> np.ndarray:
        """The data as a numpy array (shared, not copied)."""
        if self._data is None:
            raise OpError(f"a symbolic tensor of shape {self.shape} has no data")
        return self._data

    def torch(self) -> Any:
        """The data as a torch tensor sharing memory (DLPack; no copy)."""
        import torch
        return torch.from_dlpack(self.numpy())

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.numpy()
        return a.astype(dtype) if dtype is not None else a

    def __repr__(self) -> str:
        head = f"Tensor(shape={self.shape}, dtype={self.dtype.name})"
        return head if self._data is None else f"{head}\n{self._data!r}"

    def __len__(self) -> int:
        if not self.shape or not isinstance(self.shape[0], int):
            raise TypeError("len() of a 0-d or symbolic tensor")
        return self.shape[0]


def asarray(data: Any, dtype: T.DataType | str | None = None) -> Tensor:
    """A concrete tensor from array-like data (numpy arrays are used without copying when
    already C-contiguous and of the dtype asked for; torch tensors go through DLPack)."""
    if isinstance(data, Tensor):
        return data if dtype is None or T.dtype(dtype) == data.dtype else asarray(data.numpy(), dtype)
    if hasattr(data, "__dlpack__") and not isinstance(data, np.ndarray):
        return from_torch(data) if dtype is None else asarray(from_torch(data).numpy(), dtype)
    want = None if dtype is None else T.dtype(dtype)
    if want is not None and want.numpy is None:
        raise OpError(f"asarray(): dtype {want.name} has no numpy representation yet; use float32 or float16")
    arr = np.asarray(data, dtype=None if want is None else want.numpy)
    if arr.dtype == np.float64 and want is None and not isinstance(data, np.ndarray):
        arr = arr.astype(np.float32)  # Python floats default to float32, as in torch
    if arr.dtype == np.int64 and want is None and not isinstance(data, np.ndarray):
        arr = arr.astype(np.int64)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)  # (np.ascontiguousarray would also turn 0-d into 1-d)
    try:
        dt = T.dtype(arr.dtype)
    except Exception:
        raise OpError(f"asarray(): numpy dtype {arr.dtype} is not supported") from None
    return Tensor(arr.shape, dt, arr)


def from_torch(tensor: Any) -> Tensor:
    """A concrete tensor sharing memory with a CPU torch tensor (DLPack; no copy)."""
    if getattr(tensor, "requires_grad", False):
        tensor = tensor.detach()
    if hasattr(tensor, "is_contiguous") and not tensor.is_contiguous():
        raise OpError("from_torch(): the tensor is not contiguous; call .contiguous() first (that copies)")
    arr = np.from_dlpack(tensor)
    return Tensor(arr.shape, T.dtype(arr.dtype), arr)


def input(shape: Sequence[int], dtype: T.DataType | str = "float32", name: str | None = None) -> Tensor:  # noqa: A001
    """A graph input: a tensor with a shape and a dtype but no data. Operators applied to it
    record a graph instead of running (see :class:`taskloom.graph.Graph`)."""
    dims = tuple(shape)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise OpError(f"input(): 'shape' must hold sizes >= 0, got {tuple(shape)}")
    return Tensor(tuple(int(d) for d in dims), T.dtype(dtype), name=name)


def symbol(name: str) -> Expr:
    """A symbolic dimension, e.g. ``Tensor((symbol('batch'), 768), f32)``."""
    from taskloom.ir.expr import var
    return var(name)
