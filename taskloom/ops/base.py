"""How an operator is applied: its definition is built over placeholders for its inputs,
then run at once on concrete tensors (eager mode).

Eager placeholders are symbolic: every dimension larger than 1 becomes a symbol (equal
sizes share one), so one compiled kernel serves every shape with the same pattern of unit
dimensions, and each new shape costs no compile. Argument checks run on the concrete
shapes first, each raising :class:`~taskloom.errors.OpError` that names the operator and
the argument.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from taskloom.errors import OpError
from taskloom.graph.eager import run_eager
from taskloom.graph.graph import record
from taskloom.graph.tensor import Tensor, asarray
from taskloom.ir import dtypes as T
from taskloom.ir.compute import GridCompute, Task, TensorInput, tensor_input
from taskloom.ir.expr import Expr, var
from taskloom.ir.index import is_unit

Dim = int | Expr


def as_tensor(op: str, arg: str, x: Any, like: Tensor | None = None) -> Tensor:
    """``x`` as a tensor; Python scalars take the dtype of ``like`` (a float32 default)."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (bool, int, float)) and like is not None:
        dt = like.dtype if not (isinstance(x, float) and not like.dtype.is_float()) else T.float32
        return asarray(x, dt)
    try:
        return asarray(x)
    except Exception as e:
        raise OpError(f"{op}(): argument '{arg}' is not a tensor or array-like ({type(x).__name__}: {e})") from None


def normalize_axis(op: str, axis: int, ndim: int, arg: str = "axis") -> int:
    """``axis`` in ``[0, ndim)``; negative axes count from the end."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise OpError(f"{op}(): '{arg}' must be an int, got {axis!r}")
    axis = int(axis)
    if ndim == 0 and axis in (0, -1):
        return 0  # a 0-d tensor accepts axis 0 or -1, as in torch
    if not -ndim <= axis < max(ndim, 1):
        raise OpError(f"{op}(): '{arg}'={axis} is out of range for a {ndim}-d tensor "
                      f"(valid: {-ndim}..{max(ndim - 1, 0)})")
    return axis % ndim if ndim else 0


def normalize_axes(op: str, axes: Any, ndim: int, arg: str = "axis") -> list[int]:
    """A sorted list of distinct axes; None means every axis."""
    if axes is None:
        return list(range(ndim))
    if isinstance(axes, (int, np.integer)):
        items = [axes]
    elif isinstance(axes, (list, tuple)):
        items = list(axes)
    else:
        raise OpError(f"{op}(): '{arg}' must be an int, a sequence of ints or None, got {axes!r}")
    out = sorted({normalize_axis(op, a, ndim, arg) for a in items})
    if len(out) != len(items):
        raise OpError(f"{op}(): '{arg}' repeats an axis: {axes}")
    return out


def broadcast_shapes(op: str, *shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    """numpy broadcasting of ``shapes``; an error names the operator and both shapes."""
    nd = max(len(s) for s in shapes)
    out: list[Dim] = []
    for k in range(nd):
        dims = [s[len(s) - nd + k] for s in shapes if len(s) - nd + k >= 0]
        big = [d for d in dims if not is_unit(d)]
        d0 = big[0] if big else 1
        for d in big[1:]:
            if d != d0:
                raise OpError(f"{op}(): shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be "
                              f"broadcast together (dimension {k - nd} is {d0} and {d})")
        out.append(d0)
    return tuple(out)


def broadcast_index(shape: Sequence[Dim], out_ndim: int, index: Sequence[Expr]) -> tuple[Any, ...]:
    """The element of a tensor of ``shape`` that broadcasting sends to output ``index``."""
    lead = out_ndim - len(shape)
    return tuple(0 if is_unit(d) else index[lead + k] for k, d in enumerate(shape))


def _placeholders(inputs: Sequence[Tensor], names: Sequence[str]) -> list[TensorInput]:
    """Symbolic inputs for eager execution: sizes > 1 become symbols, equal sizes one symbol."""
    symbols: dict[int, Expr] = {}
    out = []
    for t, name in zip(inputs, names):
        dims: list[Dim] = []
        for d in t.shape:
            if isinstance(d, int) and d > 1:
                if d not in symbols:  # a size past int32 is an int64 symbol
                    symbols[d] = var(f"n{len(symbols)}", T.index_type_for(d))
                dims.append(symbols[d])
            else:
                dims.append(d)
        out.append(tensor_input(name, t.dtype, dims))
    return out


#: The most bytes one tensor may take: 2**47 (128 TiB), the address space of an x86-64
#: process. Kernels index a tensor past 2**31 - 1 elements with 64-bit integers, so any size
#: below this works where the memory is there; past it, no machine could hold the tensor.
MAX_BYTES = 2 ** 47


def check_size(op: str, what: str, shape: Sequence[Any], dtype: T.DataType | None = None) -> None:
    """:class:`OpError` when a tensor of ``shape`` (of ``dtype``, bytes by default) would take
    more than :data:`MAX_BYTES`."""
    n = 1
    for d in shape:
        n *= int(d)
    nbytes = n * (dtype.nbytes if dtype is not None else 1)
    if nbytes > MAX_BYTES:
        raise OpError(f"{op}(): {what} of shape {tuple(int(d) for d in shape)} has {n:,} elements "
                      f"({nbytes:,} bytes); a tensor may take at most {MAX_BYTES:,} bytes (128 TiB, "
                      "the address space of a process): split the work into smaller tensors")


def apply(op: str, inputs: Sequence[Tensor], names: Sequence[str],
          build: Callable[..., GridCompute | Sequence[GridCompute]],
          attrs: dict[str, Any] | None = None, static_dims: bool = False, trace: bool = False) -> list[Tensor]:
    """Applies an operator: ``build(*placeholders)`` gives its output computes.

    ``static_dims`` keeps the input sizes as ints, for operators whose definition depends
    on a size itself (a reshape's target, a slice's bounds resolved against a size).
    ``trace`` records the operator in the graph being traced even without traced inputs
    (a tensor whose size is a symbol of that graph).
    """
    tracing = trace or not all(t.is_concrete for t in inputs)
    for t, n in zip(inputs, names):
        if all(isinstance(d, int) for d in t.shape):
            check_size(op, f"'{n}'", t.shape, t.dtype)
    # a traced graph is specialized to its shapes; eager kernels serve every shape
    placeholders = ([tensor_input(n, t.dtype, t.shape) for t, n in zip(inputs, names)]
                    if static_dims or tracing else _placeholders(inputs, names))
    outs = build(*placeholders)
    outs = [outs] if isinstance(outs, GridCompute) else list(outs)
    task = Task(op, placeholders, outs, attrs or {})
    if tracing:
        results = record(task, inputs)
        for k, r in enumerate(results):
            if all(isinstance(d, int) for d in r.shape):
                check_size(op, "its result" if len(results) == 1 else f"result {k}", r.shape, r.dtype)
        return results
    return run_eager(task, inputs)
