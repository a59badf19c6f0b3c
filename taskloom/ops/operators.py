"""Python's operators on :class:`~taskloom.graph.Tensor` (``a + b``, ``a @ b``, ``-a``,
``a.reshape(...)``), installed here so that ``graph`` never imports the operators above it."""
from __future__ import annotations

from typing import Any, Callable

from taskloom.graph.tensor import Tensor
from taskloom.ops import elementwise, nn, transform


def _binary(fn: Callable[[Any, Any], Tensor], swap: bool = False) -> Callable[[Tensor, Any], Tensor]:
    def method(self: Tensor, other: Any) -> Tensor:
        return fn(other, self) if swap else fn(self, other)
    method.__name__ = f"__r{fn.__name__}__" if swap else f"__{fn.__name__}__"
    return method


def _reshape(self: Tensor, *shape: Any) -> Tensor:
    """``x.reshape(2, 3)`` or ``x.reshape((2, 3))``."""
    return transform.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)


def install() -> None:
    """Give :class:`Tensor` its arithmetic, comparison and matmul operators, and ``reshape``."""
    for dunder, fn in (("add", elementwise.add), ("sub", elementwise.sub), ("mul", elementwise.mul),
                       ("truediv", elementwise.div), ("pow", elementwise.pow)):
        setattr(Tensor, f"__{dunder}__", _binary(fn))
        setattr(Tensor, f"__r{dunder}__", _binary(fn, swap=True))
    for dunder, fn in (("lt", elementwise.less), ("le", elementwise.less_equal),
                       ("gt", elementwise.greater), ("ge", elementwise.greater_equal), ("matmul", nn.matmul)):
        setattr(Tensor, f"__{dunder}__", _binary(fn))
    Tensor.__neg__ = lambda self: elementwise.neg(self)  # type: ignore[method-assign]
    Tensor.reshape = _reshape  # type: ignore[attr-defined]


install()
