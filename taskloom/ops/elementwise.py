"""Elementwise operators: unary functions and binary operators with numpy broadcasting."""
from __future__ import annotations

from typing import Any, Callable

from taskloom.graph.tensor import Tensor
from taskloom.ir import expr as E
from taskloom.ir.compute import compute
from taskloom.ops.base import apply, as_tensor, broadcast_index, broadcast_shapes

__all__ = ["unary", "binary", "relu", "exp", "add", "sub", "mul"]


def unary(op: str, x: Any, fn: Callable[[E.Expr], Any], attrs: dict | None = None) -> Tensor:
    """``out[i] = fn(x[i])``."""
    x = as_tensor(op, "x", x)

    def build(X):
        return compute(op, X.shape, lambda *i: fn(X[i]))
    return apply(op, [x], ["x"], build, attrs)[0]


def binary(op: str, a: Any, b: Any, fn: Callable[[E.Expr, E.Expr], Any]) -> Tensor:
    """``out[i] = fn(a[i'], b[i''])`` with numpy broadcasting of ``a`` and ``b``."""
    if not isinstance(a, Tensor) and isinstance(b, Tensor):
        a = as_tensor(op, "a", a, like=b)
    a = as_tensor(op, "a", a)
    b = as_tensor(op, "b", b, like=a)
    broadcast_shapes(op, a.shape, b.shape)  # checks the concrete shapes

    def build(A, B):
        shape = broadcast_shapes(op, A.shape, B.shape)
        n = len(shape)
        return compute(op, shape, lambda *i: fn(A[broadcast_index(A.shape, n, i)],
                                                B[broadcast_index(B.shape, n, i)]))
    return apply(op, [a, b], ["a", "b"], build)[0]


def relu(x: Any) -> Tensor:
    return unary("relu", x, lambda v: E.maximum(v, 0))


def exp(x: Any) -> Tensor:
    return unary("exp", x, lambda v: E.call("exp", v))


def add(a: Any, b: Any) -> Tensor:
    return binary("add", a, b, lambda x, y: x + y)


def sub(a: Any, b: Any) -> Tensor:
    return binary("sub", a, b, lambda x, y: x - y)


def mul(a: Any, b: Any) -> Tensor:
    return binary("mul", a, b, lambda x, y: x * y)
