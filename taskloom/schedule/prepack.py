"""Weights packed once, when a model is compiled: the B operand of a contraction that reads
only constants (a linear layer's weight, an NHWC convolution's filter, a matmul by a
constant matrix) is computed and laid out in the template's panels ahead of time, so the
kernel reads them in place instead of packing them on every call.

B's expression (its prologue: a transpose, a reshape, a cast) is evaluated with numpy over
the constant arrays, by :func:`evaluate` -- an interpreter for the index arithmetic, casts
and selects prologues are made of. Anything else leaves B to the kernel's own packing.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from taskloom.ir import expr as E
from taskloom.ir.compute import TensorInput
from taskloom.ir.functor import collect
from taskloom.schedule.contraction import Contraction


class NotEvaluable(Exception):
    """An expression :func:`evaluate` has no rule for."""


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero, as C (and the IR) do."""
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum,
    "lt": np.less, "le": np.less_equal, "eq": np.equal, "ne": np.not_equal,
    "and": np.logical_and, "or": np.logical_or,
}


def evaluate(e: E.Expr, env: Mapping[E.Var, np.ndarray], arrays: Mapping[TensorInput, np.ndarray]) -> np.ndarray:
    """``e`` at every point of the index arrays ``env`` (numpy-broadcast), reading
    ``arrays`` for the task's inputs. Reads are clamped into their tensor (a select's untaken
    branch may index outside it; its values are never used)."""
    def ev(x: E.Expr) -> np.ndarray:
        if isinstance(x, E.Var):
            if x not in env:
                raise NotEvaluable(f"free variable {x.name}")
            return env[x]
        if isinstance(x, E.Constant):
            return np.asarray(x.value, dtype=x.type.numpy)
        if isinstance(x, E.TensorElement) and isinstance(x.tensor, TensorInput) and x.tensor in arrays:
            data = arrays[x.tensor]
            idx = tuple(np.clip(ev(i), 0, n - 1) for i, n in zip(x.indices, data.shape))
            return data[idx]
        if isinstance(x, E.Binary):
            a, b = ev(x.a), ev(x.b)
            if x.op in _BINARY:
                return _BINARY[x.op](a, b)
            if x.op == "div":
                return _trunc_div(a, b) if x.type.is_integer() else a / b
            if x.op == "mod" and x.type.is_integer():
                return a - _trunc_div(a, b) * b
            raise NotEvaluable(f"operator {x.op}")
        if isinstance(x, E.Unary) and x.op in ("neg", "not"):
            return np.negative(ev(x.a)) if x.op == "neg" else np.logical_not(ev(x.a))
        if isinstance(x, E.Cast):
            return ev(x.value).astype(x.dtype.numpy)
        if isinstance(x, E.Select):
            return np.where(ev(x.cond), ev(x.a), ev(x.b))
        raise NotEvaluable(type(x).__name__)
    return ev(e)


def constant_b(con: Contraction, constants: Mapping[int, np.ndarray]) -> np.ndarray | None:
    """B of ``con`` as a ``[PB, K, N]`` float32 array when it reads only the task inputs
    ``constants`` holds (by position), else None. ``PB`` is 1 when B is the same for every
    batch, else the batch."""
    reads = set(collect(con.b, TensorInput))
    positions = {t: k for k, t in enumerate(con.task.inputs)}
    if not reads or any(positions.get(t) not in constants for t in reads):  # type: ignore[arg-type]
        return None
    shared = con.vb not in E.free_vars(con.b)
    pb = 1 if shared else con.batch
    arrays = {t: np.asarray(constants[positions[t]]) for t in reads}
    value = _read_where_it_lies(con, arrays)
    if value is None:  # element by element, over index grids
        b, k, n = np.ix_(np.arange(pb), np.arange(con.K), np.arange(con.N))
        try:
            value = evaluate(con.b, {con.vb: b, con.vk: k, con.vn: n}, arrays)
        except NotEvaluable:
            return None
    return np.ascontiguousarray(np.broadcast_to(value, (pb, con.K, con.N)), dtype=np.float32)


def _read_where_it_lies(con: Contraction, arrays: Mapping[TensorInput, np.ndarray]) -> np.ndarray | None:
    """B as a view of the one constant it reads when it reads ``W[k, n]``, ``W[n, k]`` or
    ``W[b, k, n]`` (in any order of the axes) whole; else None, for :func:`evaluate`. A
    model's weights are hundreds of MB: a gather of each element would copy them into new
    pages once more before they are packed."""
    x = con.b
    if not isinstance(x, E.TensorElement) or x.tensor not in arrays:
        return None
    data, axes = arrays[x.tensor], list(x.indices)
    extents = {con.vb: con.batch, con.vk: con.K, con.vn: con.N}
    if data.ndim != len(axes) or len(set(axes)) != len(axes) or \
            not all(a in extents and extents[a] == n for a, n in zip(axes, data.shape)):
        return None  # (a slice, a broadcast or an index computed: read point by point)
    if con.vb not in axes:
        data, axes = data[None], [con.vb, *axes]
    if con.vk not in axes or con.vn not in axes:
        return None
    return data.transpose([axes.index(a) for a in (con.vb, con.vk, con.vn)])
