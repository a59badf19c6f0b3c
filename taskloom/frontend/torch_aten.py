"""The registry of converters from core ATen operators to taskloom ops, which the torch
frontend reads, and the helpers converters share. The converters themselves live in
:mod:`~taskloom.frontend.torch_aten_math` (elementwise, reductions, normalization) and
:mod:`~taskloom.frontend.torch_aten_nn` (matrix products, convolution, pooling, shapes,
constants); :func:`lookup` loads them on first use.

Each converter takes the operator's arguments as the ATen schema orders them, with tensors
already turned into taskloom tensors (symbolic ones inside a traced graph, concrete ones for
constants), and returns a tensor, or a tuple for operators with several results. A tuple
entry may be a function of no arguments: it is called only if the graph reads that result
(the statistics of ``native_layer_norm``, the indices of ``max_pool2d_with_indices``).
Adding an operator is one decorated function::

    @register(aten.hardshrink)
    def hardshrink(x, lambd=0.5):
        return ops.where(ops.greater(ops.abs(x), lambd), x, 0.0)

A key is an overload (``aten.add.Tensor``: just that one) or a packet (``aten.add``: every
overload without its own entry). Result types need not be exact: the frontend casts each
result to the dtype torch recorded for it and checks its shape.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from taskloom import ops
from taskloom.errors import FrontendError
from taskloom.graph.tensor import Tensor, asarray
from taskloom.ir import dtypes as T

aten = torch.ops.aten
Converter = Callable[..., Any]

#: ATen overload or overload packet -> converter.
REGISTRY: dict[Any, Converter] = {}


def register(*targets: Any) -> Callable[[Converter], Converter]:
    """Registers the decorated function as the converter of every target (an ATen overload
    such as ``aten.add.Tensor``, or a packet such as ``aten.add`` for all its overloads)."""
    def deco(fn: Converter) -> Converter:
        for t in targets:
            REGISTRY[t] = fn
        return fn
    return deco


def lookup(target: Any) -> Converter | None:
    """The converter of an fx call target: its overload's entry, else its packet's; an
    in-place operator (``clamp_min_``) uses its functional form's converter."""
    _load_converters()
    fn = REGISTRY.get(target)
    if fn is None and isinstance(target, torch._ops.OpOverload):
        fn = REGISTRY.get(target.overloadpacket)
        functional = functional_form(target)
        if fn is None and functional is not None:
            fn = lookup(functional)
    return fn


def functional_form(target: Any) -> Any:
    """``aten.x.overload`` for an in-place ``aten.x_.overload`` (which torch's decompositions
    may leave in a functionalized graph); None for anything else."""
    if not isinstance(target, torch._ops.OpOverload) or not target._opname.endswith("_") \
            or not target._schema.is_mutable:
        return None
    packet = getattr(torch.ops.aten, target._opname[:-1], None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


def _load_converters() -> None:
    from taskloom.frontend import torch_aten_math, torch_aten_nn  # noqa: F401 - they register themselves


def op_name(target: Any) -> str:
    """A readable name for an fx call target: ``aten.cumsum.default``."""
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


# ----------------------------------------------------------------------------- helpers

def dtype_of(torch_dtype: Any) -> T.DataType:
    """The taskloom dtype of a torch dtype; FrontendError for the ones taskloom lacks."""
    name = str(torch_dtype).replace("torch.", "")
    try:
        return T.dtype(name)
    except Exception:
        raise FrontendError(f"torch dtype {torch_dtype} has no taskloom equivalent "
                            f"(supported: {', '.join(t.name for t in T.SCALAR_TYPES)})") from None


def _numpy_dtype(dt: T.DataType, op: str) -> Any:
    if dt.numpy is None:
        raise FrontendError(f"{op}: a constant of dtype {dt.name} cannot be made here (numpy has no {dt.name})")
    return dt.numpy


def filled(shape: Sequence[int], value: Any, dtype: Any, op: str) -> Tensor:
    """A concrete tensor of ``shape`` filled with ``value`` (a graph constant) of the torch
    ``dtype`` (None: torch's default for the value)."""
    dt = dtype_of(dtype) if dtype is not None else (T.float32 if isinstance(value, float) else
                                                    T.boolean if isinstance(value, bool) else T.int64)
    if not all(isinstance(d, int) for d in shape):  # a symbolic size: the value broadcast, per call
        return ops.expand(asarray(np.array(value, dtype=_numpy_dtype(dt, op))), tuple(shape))
    return asarray(np.full(tuple(int(d) for d in shape), value, dtype=_numpy_dtype(dt, op)))


def unavailable(what: str) -> Callable[[], Any]:
    """A lazy result that taskloom does not compute: reading it raises FrontendError."""
    def fail() -> Any:
        raise FrontendError(f"{what} is read by the graph, but taskloom does not compute it")
    return fail


def as_dtype(x: Tensor, dtype: Any) -> Tensor:
    """``x`` cast to the torch ``dtype`` given to an operator (None: unchanged)."""
    return x if dtype is None else ops.cast(x, dtype_of(dtype))


def torch_dtype(dt: T.DataType) -> Any:
    """The torch dtype of a taskloom dtype."""
    return getattr(torch, "bool" if dt.is_bool() else dt.name)
