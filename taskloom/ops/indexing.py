"""Indexing by coordinates read from data, beyond the gathers of :mod:`.transform`:
``gather_nd`` (ONNX ``GatherND``, torch's ``x[i, j]``), and the scatters, a copy of a
tensor with entries replaced (or combined) at positions read from an index tensor
(``torch.scatter``, ``scatter_reduce``, ``index_put``; ONNX ``ScatterElements`` and
``ScatterND``). Every coordinate is checked against its own dimension as the kernel reads
it, so ``x[0, 5]`` of a 3x4 ``x`` is an error, not element 5 of the flattened tensor.

Each scatter output element is defined as a reduction over the index tensor: the updates whose
index names this element, combined with the element of ``x`` (the last one wins without a
reduction, as on the CPU in torch; ONNX leaves duplicates undefined). So a scatter is an
ordinary task: every scheduler, target and fusion rule serves it, and every index is
checked as the kernel reads it. The cost is the output's size times the number of
updates that could land on one element, which suits the small scatters of models (masks,
cache rows, position fixes); a scatter of millions of updates into millions of elements
is better written as a gather.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from taskloom.errors import OpError
from taskloom.graph.tensor import Tensor
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir.compute import GridCompute, TensorInput, compute, reduce
from taskloom.ir.index import unravel
from taskloom.ops.base import apply, as_tensor, normalize_axis
from taskloom.ops.transform import _index_arg, _wrap_attr

__all__ = ["gather_nd", "scatter", "scatter_nd", "SCATTER_REDUCTIONS"]

#: reduction -> (the ReduceCompute kind over the hits, how the result meets x's element)
SCATTER_REDUCTIONS: dict[str, tuple[str, Callable[[E.Expr, E.Expr], E.Expr]]] = {
    "add": ("sum", lambda a, b: a + b),
    "mul": ("prod", lambda a, b: a * b),
    "max": ("max", E.maximum),
    "min": ("min", E.minimum),
}
_IDENTITY = {"sum": 0, "prod": 1}


def _grid(op: str, what: str, shape: Sequence[int]) -> None:
    """Updates are numbered with 32-bit indices: at most ``INDEX_MAX`` of them."""
    n = 1
    for d in shape:
        n *= int(d)
    if n > T.INDEX_MAX:
        raise OpError(f"{op}(): {what} names {n:,} updates; a scatter takes at most {T.INDEX_MAX:,} "
                      "(split it into several)")


def _reduction(op: str, reduction: str | None, dtype: T.DataType) -> str | None:
    if reduction in (None, "none"):
        return None
    if reduction not in SCATTER_REDUCTIONS:
        raise OpError(f"{op}(): 'reduce'={reduction!r} is not a scatter reduction; use None, "
                      f"{', '.join(repr(r) for r in SCATTER_REDUCTIONS)}")
    if dtype.is_bool():
        raise OpError(f"{op}(): 'reduce'={reduction!r} needs a numeric 'x', got bool")
    return reduction


def _identity(kind: str, t: T.DataType) -> E.Constant:
    if kind in _IDENTITY:
        return E.Constant(_IDENTITY[kind] if not t.is_float() else float(_IDENTITY[kind]), t)
    return E.Constant(t.min_value() if kind == "max" else t.max_value(), t)


def _combine(name: str, X: TensorInput, U: TensorInput, grid: Sequence[E.Expr], reduction: str | None,
             hit: Callable[[Sequence[E.Expr], Sequence[E.Var]], E.Expr],
             update: Callable[[Sequence[E.Expr], Sequence[E.Var]], tuple[E.Expr, ...]]) -> GridCompute:
    """``out[p]``: ``x[p]`` met with the updates ``U[update(m, p)]`` at every grid point ``m``
    whose index lands on ``p`` (``hit(m, p)``); the last such update without a reduction."""
    if reduction is None:
        def element(*p: E.Var) -> E.Expr:
            def at(*m: E.Var) -> E.Expr:
                linear: E.Expr = m[0]
                for g, k in zip(grid[1:], m[1:]):
                    linear = linear * g + k
                return E.select(hit(m, p), linear, E.Constant(-1, linear.type))
            last = reduce(grid, at, "max")
            # the winner's position (0 when none won: then x's element is taken, and the read
            # of U at position 0 is in bounds and unused)
            m = [E.as_expr(k) for k in unravel(E.maximum(last, 0), grid)]
            return E.select(last >= 0, U[update(m, p)], X[p])
        return compute(name, X.shape, element)
    kind, meet = SCATTER_REDUCTIONS[reduction]

    def combined(*p: E.Var) -> E.Expr:
        hits = reduce(grid, lambda *m: E.select(hit(m, p), U[update(m, p)], _identity(kind, X.dtype)), kind)
        return meet(X[p], hits)
    return compute(name, X.shape, combined)


def scatter(x: Any, axis: int, index: Any, src: Any, reduce: str | None = None, wrap: bool = False) -> Tensor:
    """``x`` with ``out[index[i][j]][j] = src[i][j]`` for ``axis`` 0, and likewise for other
    axes (``torch.scatter``, ONNX ``ScatterElements``): ``index`` (int32 or int64) has the
    rank of ``x``, no larger than ``x`` outside ``axis`` and no larger than ``src``
    anywhere. ``reduce`` ("add", "mul", "max", "min") combines the updates of one position
    with it instead (``torch.scatter_reduce`` with ``include_self=True``). Indices are
    checked as the kernel reads them; with ``wrap``, negative ones count from the end.
    """
    op = "scatter"
    x = as_tensor(op, "x", x)
    src = as_tensor(op, "src", src)
    if x.ndim == 0:
        raise OpError(f"{op}(): 'x' is 0-d; scatter needs at least one dimension")
    ax = normalize_axis(op, axis, x.ndim)
    idx = _index_arg(op, "index", index, None)
    if src.dtype != x.dtype:
        raise OpError(f"{op}(): 'src' is {src.dtype.name} and 'x' is {x.dtype.name}; they must match")
    if not (idx.ndim == src.ndim == x.ndim):
        raise OpError(f"{op}(): 'x', 'index' and 'src' must have one rank, got shapes {x.shape}, {idx.shape} "
                      f"and {src.shape}")
    for d in range(x.ndim):
        if idx.shape[d] > src.shape[d] or (d != ax and idx.shape[d] > x.shape[d]):
            raise OpError(f"{op}(): 'index' of shape {idx.shape} must be no larger than 'src' {src.shape} "
                          f"anywhere and than 'x' {x.shape} outside 'axis'={axis} (dimension {d})")
    red = _reduction(op, reduce, x.dtype)
    _grid(op, "'index'", idx.shape)
    _index_arg(op, "index", idx, x.shape[ax], wrap, not x.is_concrete)
    what = f"{op}(): 'index' (along axis {ax} of 'x')"
    if idx.size == 0:
        return apply(op, [x], ["x"], lambda X: compute(op, X.shape, lambda *p: X[p]), {"axis": ax})[0]

    def build(X: TensorInput, I: TensorInput, U: TensorInput) -> GridCompute:
        # the index positions that can land on p: p itself off the axis (clamped into the
        # index, and excluded by `inside` when past it), any k along it
        def at(m: Sequence[E.Expr], p: Sequence[E.Var]) -> tuple[E.Expr, ...]:
            return tuple(m[0] if d == ax else E.minimum(p[d], I.shape[d] - 1) for d in range(x.ndim))

        def hit(m: Sequence[E.Expr], p: Sequence[E.Var]) -> E.Expr:
            landed = E.eq(E.index_check(I[at(m, p)], X.shape[ax], what, wrap), p[ax])
            for d in range(x.ndim):
                if d != ax and idx.shape[d] != x.shape[d]:
                    landed = E.logical_and(p[d] < I.shape[d], landed)
            return landed
        return _combine(op, X, U, [I.shape[ax]], red, hit, at)
    attrs = {"axis": ax, **({"reduce": red} if red else {}), **_wrap_attr(wrap)}
    return apply(op, [x, idx, src], ["x", "index", "src"], build, attrs)[0]


def scatter_nd(x: Any, indices: Any, updates: Any, reduce: str | None = None, wrap: bool = False) -> Tensor:
    """``x`` with ``out[indices[m]] = updates[m]`` for every position ``m`` of
    ``indices.shape[:-1]`` (ONNX ``ScatterND``; ``x[ids] = v`` with index tensors in torch):
    the last axis of ``indices`` (int32 or int64) holds the first ``q`` coordinates of a
    position of ``x``, and ``updates`` has shape ``indices.shape[:-1] + x.shape[q:]``.
    ``reduce`` and ``wrap`` as for :func:`scatter`.
    """
    op = "scatter_nd"
    x = as_tensor(op, "x", x)
    upd = as_tensor(op, "updates", updates)
    idx = _index_arg(op, "indices", indices, None)
    if idx.ndim == 0:
        raise OpError(f"{op}(): 'indices' is 0-d; its last axis holds coordinates of 'x'")
    q = idx.shape[-1]
    if not 1 <= q <= x.ndim:
        raise OpError(f"{op}(): the last axis of 'indices' {idx.shape} holds {q} coordinates; 'x' of shape "
                      f"{x.shape} takes 1 to {x.ndim}")
    want = (*idx.shape[:-1], *x.shape[q:])
    if tuple(upd.shape) != want:
        raise OpError(f"{op}(): 'updates' must have shape {want} (indices.shape[:-1] + x.shape[{q}:]), "
                      f"got {upd.shape}")
    if upd.dtype != x.dtype:
        raise OpError(f"{op}(): 'updates' is {upd.dtype.name} and 'x' is {x.dtype.name}; they must match")
    red = _reduction(op, reduce, x.dtype)
    _grid(op, "'indices'", idx.shape[:-1])
    if idx.is_concrete and not x.is_concrete and idx.size:  # a traced graph checks constant indices now
        for c in range(q):
            _index_arg(op, f"indices[..., {c}]", idx.numpy()[..., c], x.shape[c], wrap)
    if idx.size == 0:
        return apply(op, [x], ["x"], lambda X: compute(op, X.shape, lambda *p: X[p]), {})[0]
    whats = [f"{op}(): 'indices' (coordinate {c}, along axis {c} of 'x')" for c in range(q)]
    lead = len(idx.shape) - 1

    def build(X: TensorInput, I: TensorInput, U: TensorInput) -> GridCompute:
        def hit(m: Sequence[E.Expr], p: Sequence[E.Var]) -> E.Expr:
            landed: E.Expr | None = None
            for c in range(q):
                coord = E.eq(E.index_check(I[(*m, E.as_expr(c))], X.shape[c], whats[c], wrap), p[c])
                landed = coord if landed is None else E.logical_and(landed, coord)
            assert landed is not None
            return landed

        def at(m: Sequence[E.Expr], p: Sequence[E.Var]) -> tuple[E.Expr, ...]:
            return (*m, *p[q:])
        grid = list(I.shape[:lead]) or [E.as_expr(1)]
        if lead == 0:  # one position: a grid of one point, m = ()
            return _combine(op, X, U, grid, red, lambda m, p: hit((), p), lambda m, p: at((), p))
        return _combine(op, X, U, grid, red, hit, at)
    attrs = {**({"reduce": red} if red else {}), **_wrap_attr(wrap)}
    return apply(op, [x, idx, upd], ["x", "indices", "updates"], build, attrs)[0]


def gather_nd(x: Any, indices: Any, batch_dims: int = 0, wrap: bool = False) -> Tensor:
    """``out[m] = x[indices[m]]`` for every position ``m`` of ``indices.shape[:-1]`` (ONNX
    ``GatherND``): the last axis of ``indices`` (int32 or int64) holds ``q`` coordinates of
    ``x``, so the result has shape ``indices.shape[:-1] + x.shape[batch_dims + q:]``. The
    first ``batch_dims`` axes are shared by ``x`` and ``indices`` (one lookup per batch).
    Each coordinate is checked against its own dimension; ``wrap`` as for :func:`scatter`.
    """
    op = "gather_nd"
    x = as_tensor(op, "x", x)
    idx = _index_arg(op, "indices", indices, None)
    b = int(batch_dims)
    if idx.ndim == 0:
        raise OpError(f"{op}(): 'indices' is 0-d; its last axis holds coordinates of 'x'")
    if not 0 <= b < min(idx.ndim, x.ndim) or tuple(idx.shape[:b]) != tuple(x.shape[:b]):
        raise OpError(f"{op}(): 'batch_dims'={batch_dims} must name leading axes that 'x' {x.shape} and "
                      f"'indices' {idx.shape} share, fewer than either's rank")
    q = idx.shape[-1]
    if not 1 <= q <= x.ndim - b:
        raise OpError(f"{op}(): the last axis of 'indices' {idx.shape} holds {q} coordinates; 'x' of shape "
                      f"{x.shape} takes 1 to {x.ndim - b} after {b} batch axes")
    if idx.is_concrete and not x.is_concrete and idx.size:  # a traced graph checks constant indices now
        for c in range(q):
            _index_arg(op, f"indices[..., {c}]", idx.numpy()[..., c], x.shape[b + c], wrap)
    whats = [f"{op}(): 'indices' (coordinate {c}, along axis {b + c} of 'x')" for c in range(q)]
    lead = idx.ndim - 1

    def build(X: TensorInput, I: TensorInput) -> GridCompute:
        def element(*i: E.Var) -> E.Expr:
            m, rest = i[:lead], i[lead:]
            coords = [E.index_check(I[(*m, E.as_expr(c))], X.shape[b + c], whats[c], wrap) for c in range(q)]
            return X[(*m[:b], *coords, *rest)]
        return compute(op, [*I.shape[:lead], *X.shape[b + q:]], element)
    attrs = {**({"batch_dims": b} if b else {}), **_wrap_attr(wrap)}
    return apply(op, [x, idx], ["x", "indices"], build, attrs)[0]
