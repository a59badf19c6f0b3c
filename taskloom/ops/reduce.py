"""Reductions and the normalizations built on them: sum, mean, max, min, prod, argmax,
argmin, softmax, log_softmax, layer_norm and batch_norm (inference).

Every operator is one task whose definition is a small DAG of compute and reduce nodes;
softmax, for instance, is a max-reduction, the exponentials of the differences, a
sum-reduction and a scaling, which the scheduler runs row by row when the reduced axis is
the last one. Half-precision inputs are accumulated in float32 and the result is rounded
back to the input's dtype.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from taskloom.errors import OpError
from taskloom.graph.tensor import Tensor
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir.compute import TensorInput, compute, reduce
from taskloom.ir.index import unravel
from taskloom.ops.base import Dim, apply, as_tensor, is_unit, normalize_axes, normalize_axis

__all__ = ["sum", "mean", "max", "min", "prod", "argmax", "argmin", "softmax", "log_softmax",
           "layer_norm", "batch_norm", "cumsum"]

Axis = int | Sequence[int] | None

_HALF = (T.float16, T.bfloat16)


# ----------------------------------------------------------------------------- helpers

def _keepdim(op: str, keepdim: Any, keepdims: Any) -> bool:
    """The ``keepdim`` flag, also given as numpy's ``keepdims``."""
    if keepdims is not None:
        if keepdim not in (False, None) and bool(keepdim) != bool(keepdims):
            raise OpError(f"{op}(): 'keepdim'={keepdim!r} and 'keepdims'={keepdims!r} disagree; give one")
        keepdim = keepdims
    if isinstance(keepdim, np.bool_):
        keepdim = bool(keepdim)
    if not isinstance(keepdim, (bool, int)) or isinstance(keepdim, int) and keepdim not in (0, 1):
        raise OpError(f"{op}(): 'keepdim' must be a bool, got {keepdim!r}")
    return bool(keepdim)


def _float_input(op: str, arg: str, t: Tensor) -> None:
    if not t.dtype.is_float():
        raise OpError(f"{op}(): '{arg}' must be a floating-point tensor (float16, bfloat16, float32 or "
                      f"float64), got {t.dtype.name}")


def _compute_dtype(dt: T.DataType) -> T.DataType:
    """The type arithmetic runs in: float32 for half types, the type itself otherwise."""
    return T.float32 if dt in _HALF else dt


def _eps(op: str, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise OpError(f"{op}(): 'eps' must be a non-negative number, got {eps!r}")
    return float(eps)


def _reduced_shape(shape: Sequence[Dim], axes: Sequence[int], keepdim: bool) -> list[Dim]:
    return [1 if a in axes else d for a, d in enumerate(shape) if keepdim or a not in axes]


def _input_index(ndim: int, axes: Sequence[int], keepdim: bool, out_index: Sequence[E.Expr],
                 red_index: dict[int, Any]) -> tuple[Any, ...]:
    """The input element for output element ``out_index`` and reduced positions ``red_index``
    (axis -> index; axes missing from it are unit and read at 0)."""
    kept = iter(out_index) if not keepdim else None
    idx: list[Any] = []
    for a in range(ndim):
        if a in axes:
            idx.append(red_index.get(a, 0))
        elif keepdim:
            idx.append(out_index[a])
        else:
            idx.append(next(kept))  # type: ignore[arg-type]
    return tuple(idx)


def _reduction(op: str, kind: str, x: Any, axis: Axis, keepdim: Any, keepdims: Any) -> Tensor:
    """``kind`` of ``x`` over ``axis``: the shared definition of sum, mean, max, min and prod."""
    x = as_tensor(op, "x", x)
    keep = _keepdim(op, keepdim, keepdims)
    axis = _plain_axis(op, axis)
    axes = normalize_axes(op, axis, x.ndim) if x.ndim else _scalar_axes(op, axis)
    dt = x.dtype
    if kind == "mean" and not dt.is_float():
        raise OpError(f"{op}(): 'x' must be a floating-point tensor, got {dt.name} (cast it first)")
    if kind in ("max", "min") and any(x.shape[a] == 0 for a in axes):
        raise OpError(f"{op}(): 'x' has size 0 along a reduced axis; {kind} of nothing is undefined")
    if kind in ("sum", "prod") and not dt.is_float():
        acc, out_dt = T.int64, T.int64  # integers and bools sum in int64, as in torch
    elif kind in ("max", "min"):
        acc, out_dt = dt, dt
    else:
        acc, out_dt = _compute_dtype(dt), dt

    def build(X: TensorInput):
        shape = X.shape
        red = [a for a in axes if not is_unit(shape[a])]
        out_shape = _reduced_shape(shape, axes, keep)

        def element(*i: E.Expr) -> E.Expr:
            if not red:
                value = E.cast(X[_input_index(len(shape), axes, keep, i, {})], acc)
            else:
                value = reduce([shape[a] for a in red],
                               lambda *k: E.cast(X[_input_index(len(shape), axes, keep, i, dict(zip(red, k)))],
                                                 acc), kind)
            return E.cast(value, out_dt)
        return compute(op, out_shape, element)
    return apply(op, [x], ["x"], build, {"axis": tuple(axes), "keepdim": keep})[0]


def _plain_axis(op: str, axis: Any) -> Axis:
    """``axis`` as None, an int or a tuple of ints (numpy integers accepted)."""
    def one(a: Any) -> int:
        if isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)):
            raise OpError(f"{op}(): 'axis' must be None, an int or a tuple of ints, got {axis!r}")
        return int(a)
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)):
        return tuple(one(a) for a in axis)
    return one(axis)


def _scalar_axes(op: str, axis: Axis) -> list[int]:
    """A 0-d tensor reduces over nothing; axis 0 or -1 (or None) name its one implicit
    axis, as in torch."""
    items = [] if axis is None else [axis] if isinstance(axis, int) else list(axis)
    for a in items:
        if isinstance(a, bool) or not isinstance(a, int) or a not in (-1, 0):
            raise OpError(f"{op}(): 'axis'={a!r} is out of range for a 0-d tensor (valid: -1..0)")
    return []


# ----------------------------------------------------------------------------- reductions

def sum(x: Any, axis: Axis = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:  # noqa: A001
    """Sum of ``x`` over ``axis`` (an int, a tuple of ints, or None for every axis; negative
    axes count from the end); reduced axes are dropped, or kept as size 1 with ``keepdim``
    (numpy's ``keepdims`` is accepted too). Integer and bool inputs sum to int64 as in torch;
    float16 accumulates in float32. Example: ``sum(asarray([[1., 2.], [3., 4.]]), axis=0)``
    is ``[4., 6.]``."""
    return _reduction("sum", "sum", x, axis, keepdim, keepdims)


def cumsum(x: Any, axis: int, exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Running sums of ``x`` along ``axis`` (``torch.cumsum``, ONNX ``CumSum``):
    ``out[i] = x[0] + ... + x[i]``; ``exclusive`` leaves ``x[i]`` out, ``reverse`` sums from
    the end. Integer and bool inputs sum to int64 as in torch; float16 accumulates in float32.
    Each element is a sum over the axis with the positions past it masked, so a scan of
    ``n`` elements costs ``n * n`` additions: meant for the short axes models scan (token
    positions, masks)."""
    op = "cumsum"
    x = as_tensor(op, "x", x)
    if x.ndim == 0:  # one element: axis 0 or -1 names it, as in torch
        normalize_axis(op, axis, 1)
        from taskloom.ops.transform import reshape
        return reshape(cumsum(reshape(x, (1,)), 0, exclusive, reverse), ())
    ax = normalize_axis(op, axis, x.ndim)
    acc = T.int64 if not x.dtype.is_float() else _compute_dtype(x.dtype)
    out_dt = T.int64 if not x.dtype.is_float() else x.dtype

    def build(X: TensorInput):
        n = X.shape[ax]

        def element(*i: E.Expr) -> E.Expr:
            def term(k: E.Expr) -> E.Expr:
                inside = (k > i[ax] if exclusive else k >= i[ax]) if reverse else \
                    (k < i[ax] if exclusive else k <= i[ax])
                value = E.cast(X[tuple(k if d == ax else i[d] for d in range(len(i)))], acc)
                return E.select(inside, value, E.Constant(0 if not acc.is_float() else 0.0, acc))
            return E.cast(reduce([n], term, "sum"), out_dt)
        return compute(op, X.shape, element)
    attrs = {"axis": ax, **({"exclusive": True} if exclusive else {}), **({"reverse": True} if reverse else {})}
    return apply(op, [x], ["x"], build, attrs)[0]


def mean(x: Any, axis: Axis = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:
    """Arithmetic mean of a floating-point ``x`` over ``axis`` (int, tuple or None for all),
    with ``keepdim`` (alias ``keepdims``) as in :func:`sum`; float16 accumulates in float32.
    Example: ``mean(asarray([[1., 2.], [3., 4.]]), axis=-1)`` is ``[1.5, 3.5]``."""
    return _reduction("mean", "mean", x, axis, keepdim, keepdims)


def max(x: Any, axis: Axis = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:  # noqa: A001
    """Largest element of ``x`` over ``axis`` (int, tuple or None for all), with ``keepdim``
    (alias ``keepdims``) as in :func:`sum`. Only the values are returned (numpy's ``amax``);
    :func:`argmax` gives the positions. Reducing an axis of size 0 is an error."""
    return _reduction("max", "max", x, axis, keepdim, keepdims)


def min(x: Any, axis: Axis = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:  # noqa: A001
    """Smallest element of ``x`` over ``axis`` (int, tuple or None for all), with ``keepdim``
    (alias ``keepdims``) as in :func:`sum`. Only the values are returned (numpy's ``amin``);
    :func:`argmin` gives the positions. Reducing an axis of size 0 is an error."""
    return _reduction("min", "min", x, axis, keepdim, keepdims)


def prod(x: Any, axis: Axis = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:
    """Product of the elements of ``x`` over ``axis`` (int, tuple or None for all), with
    ``keepdim`` (alias ``keepdims``) as in :func:`sum`; integer and bool inputs give int64.
    Example: ``prod(asarray([[1., 2.], [3., 4.]]), axis=1)`` is ``[2., 12.]``."""
    return _reduction("prod", "prod", x, axis, keepdim, keepdims)


def _arg_reduction(op: str, x: Any, axis: int | None, keepdim: Any, keepdims: Any) -> Tensor:
    x = as_tensor(op, "x", x)
    keep = _keepdim(op, keepdim, keepdims)
    if isinstance(axis, (tuple, list)):
        raise OpError(f"{op}(): 'axis' must be an int or None (one axis), got {axis!r}")
    axis = _plain_axis(op, axis)  # type: ignore[assignment]
    if x.ndim == 0:
        _scalar_axes(op, axis)
        ax: int | None = None
    else:
        ax = None if axis is None else normalize_axis(op, axis, x.ndim)
    if (x.size if ax is None else x.shape[ax]) == 0:
        raise OpError(f"{op}(): 'x' has size 0 along the reduced axis; {op} of nothing is undefined")
    kind = op

    def build(X: TensorInput):
        shape = X.shape
        nd = len(shape)
        if nd == 0:
            return compute(op, [], lambda: E.Constant(0, T.int64))
        if ax is None:
            total = _product(shape)
            out_shape: list[Dim] = [1] * nd if keep else []
            return compute(op, out_shape, lambda *i: reduce([total], lambda k: X[tuple(unravel(k, shape))], kind))
        out_shape = _reduced_shape(shape, [ax], keep)
        return compute(op, out_shape, lambda *i: reduce(
            [shape[ax]], lambda k: X[_input_index(nd, [ax], keep, i, {ax: k})], kind))
    return apply(op, [x], ["x"], build, {"axis": ax, "keepdim": keep})[0]


def _product(dims: Sequence[Dim]) -> Any:
    out: Any = 1
    for d in dims:
        if not is_unit(d):
            out = d if isinstance(out, int) and out == 1 else out * d
    return out


def argmax(x: Any, axis: int | None = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:
    """Index of the largest element of ``x`` along ``axis`` (an int; None searches the
    flattened tensor), as int64 like torch; ties give the first index. With ``keepdim``
    (alias ``keepdims``) the searched axis stays as size 1 (every axis, when ``axis`` is
    None). Example: ``argmax(asarray([[1., 5.], [7., 7.]]), axis=1)`` is ``[1, 0]``."""
    return _arg_reduction("argmax", x, axis, keepdim, keepdims)


def argmin(x: Any, axis: int | None = None, keepdim: bool = False, *, keepdims: bool | None = None) -> Tensor:
    """Index of the smallest element of ``x`` along ``axis`` (an int; None searches the
    flattened tensor), as int64; ties give the first index. ``keepdim`` (alias
    ``keepdims``) as in :func:`argmax`."""
    return _arg_reduction("argmin", x, axis, keepdim, keepdims)


# ----------------------------------------------------------------------------- softmax

def _softmax_like(op: str, x: Any, axis: int, log: bool) -> Tensor:
    x = as_tensor(op, "x", x)
    _float_input(op, "x", x)
    if isinstance(axis, np.integer):
        axis = int(axis)
    if x.ndim == 0:
        _scalar_axes(op, axis)
    ax = normalize_axis(op, axis, x.ndim) if x.ndim else None
    dt = x.dtype
    cd = _compute_dtype(dt)

    def build(X: TensorInput):
        shape = X.shape
        if ax is None:  # a 0-d tensor: softmax is 1, log_softmax 0
            return compute(op, [], lambda: E.cast(E.cast(X[()], cd) * 0 + (0 if log else 1), dt))
        n = shape[ax]
        rows = [d for a, d in enumerate(shape) if a != ax]

        def at(r: Sequence[E.Expr], k: Any) -> E.Expr:
            """Element ``k`` along the axis of row ``r`` (indices of the other axes)."""
            return E.cast(X[(*r[:ax], k, *r[ax:])], cd)

        def row(i: Sequence[E.Expr]) -> tuple[E.Expr, ...]:
            return (*i[:ax], *i[ax + 1:])

        # stage 1: the row maximum, subtracted so that exp never overflows
        mx = compute(f"{op}_max", rows, lambda *r: reduce([n], lambda k: at(r, k), "max"))
        if log:
            # stage 2: log(sum(exp(x - max))) of each row; the output subtracts the max first,
            # so that a large max does not swallow the digits of the logarithm
            lse = compute(f"{op}_logsum", rows, lambda *r: E.call(
                "log", reduce([n], lambda k: E.call("exp", at(r, k) - mx[r]), "sum")))
            return compute(op, shape, lambda *i: E.cast(E.cast(X[i], cd) - mx[row(i)] - lse[row(i)], dt))
        # stage 2: the exponentials (kept per row: read by the sum and by the output)
        ex = compute(f"{op}_exp", shape, lambda *i: E.call("exp", E.cast(X[i], cd) - mx[row(i)]))
        # stage 3: one over the sum of each row
        inv = compute(f"{op}_inv", rows, lambda *r: 1.0 / reduce([n], lambda k: ex[(*r[:ax], k, *r[ax:])], "sum"))
        return compute(op, shape, lambda *i: E.cast(ex[i] * inv[row(i)], dt))
    return apply(op, [x], ["x"], build, {"axis": ax})[0]


def softmax(x: Any, axis: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis`` (any axis; negative counts from the end) of a
    floating-point ``x``, computed stably as ``exp(x - max)``; float16 runs in float32.
    Example: ``softmax(asarray([[0., 0.]]))`` is ``[[0.5, 0.5]]``."""
    return _softmax_like("softmax", x, axis, log=False)


def log_softmax(x: Any, axis: int = -1) -> Tensor:
    """``x - log(sum(exp(x)))`` along ``axis`` (any axis) of a floating-point ``x``, computed
    stably as ``x - max - log(sum(exp(x - max)))``; float16 runs in float32.
    Example: ``log_softmax(asarray([0., 0.]))`` is ``[-0.693, -0.693]``."""
    return _softmax_like("log_softmax", x, axis, log=True)


# ----------------------------------------------------------------------------- normalization

def _optional_param(op: str, arg: str, p: Any, shape: tuple[int, ...], like: Tensor) -> Tensor | None:
    """A weight/bias/statistics tensor of exactly ``shape`` and a float dtype, or None."""
    if p is None:
        return None
    t = as_tensor(op, arg, p, like=like)
    _float_input(op, arg, t)
    if tuple(t.shape) != tuple(shape):
        raise OpError(f"{op}(): '{arg}' has shape {tuple(t.shape)}; expected {tuple(shape)}")
    return t


def layer_norm(x: Any, normalized_shape: int | Sequence[int], weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Tensor:
    """Layer normalization over the trailing dimensions ``normalized_shape`` of ``x`` (an int
    or a tuple that must equal the last dims of ``x``): ``(x - mean) / sqrt(var + eps)``
    with the biased variance, then ``* weight + bias`` when given (each of shape
    ``normalized_shape``), as ``torch.nn.functional.layer_norm``. Example:
    ``layer_norm(x, x.shape[-1:], w, b)`` normalizes each row of a (tokens, hidden) tensor."""
    op = "layer_norm"
    x = as_tensor(op, "x", x)
    _float_input(op, "x", x)
    if isinstance(normalized_shape, bool):
        raise OpError(f"{op}(): 'normalized_shape' must be an int or a tuple of ints, got {normalized_shape!r}")
    ns_items = [normalized_shape] if isinstance(normalized_shape, (int, np.integer)) else normalized_shape
    if not isinstance(ns_items, (tuple, list)) or not all(
            isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in ns_items):
        raise OpError(f"{op}(): 'normalized_shape' must be an int or a tuple of ints, "
                      f"got {normalized_shape!r}")
    ns = tuple(int(d) for d in ns_items)
    if not ns or any(d < 0 for d in ns):
        raise OpError(f"{op}(): 'normalized_shape' must be a non-empty tuple of sizes >= 0, got {ns}")
    if len(ns) > x.ndim or tuple(x.shape[x.ndim - len(ns):]) != ns:
        raise OpError(f"{op}(): 'normalized_shape'={ns} does not match the trailing dimensions of "
                      f"'x' of shape {tuple(x.shape)}")
    w = _optional_param(op, "weight", weight, ns, x)
    b = _optional_param(op, "bias", bias, ns, x)
    e = _eps(op, eps)
    dt = x.dtype
    cd = _compute_dtype(dt)
    nd, d = x.ndim, len(ns)
    inputs = [t for t in (x, w, b) if t is not None]
    names = [n for n, t in (("x", x), ("weight", w), ("bias", b)) if t is not None]

    def build(X: TensorInput, *params: TensorInput):
        P = dict(zip(names[1:], params))
        shape = X.shape
        lead, norm = list(shape[:nd - d]), list(shape[nd - d:])

        def xv(i: Sequence[Any]) -> E.Expr:
            return E.cast(X[tuple(i)], cd)

        # The moments of each row in one pass over it: sums of d = x - x0 and of d*d, with x0
        # the row's first element. Shifting by a value of the row keeps the cancellation in
        # E[d*d] - E[d]^2 small (the shifted-data algorithm for the variance).
        first = (0,) * d

        def dev(r: Sequence[Any], k: Sequence[Any]) -> E.Expr:
            return xv((*r, *k)) - xv((*r, *first))
        m1 = compute(f"{op}_shifted_mean", lead, lambda *r: reduce(norm, lambda *k: dev(r, k), "mean"))
        rstd = compute(f"{op}_rstd", lead, lambda *r: 1.0 / E.call("sqrt", E.maximum(
            reduce(norm, lambda *k: dev(r, k) * dev(r, k), "mean") - m1[r] * m1[r], 0.0) + e))

        def out(*i: E.Expr) -> E.Expr:
            r = i[:nd - d]
            v = (xv(i) - xv((*r, *first)) - m1[r]) * rstd[r]
            if "weight" in P:
                v = v * E.cast(P["weight"][i[nd - d:]], cd)
            if "bias" in P:
                v = v + E.cast(P["bias"][i[nd - d:]], cd)
            return E.cast(v, dt)
        return compute(op, shape, out)
    return apply(op, inputs, names, build, {"normalized_dims": d, "eps": e})[0]


def batch_norm(x: Any, running_mean: Any, running_var: Any, weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Tensor:
    """Batch normalization in inference mode: ``(x - running_mean) / sqrt(running_var + eps)
    * weight + bias`` with the per-channel statistics and parameters (each of shape (C,))
    broadcast along axis 1 of an N-d ``x`` (N, C, ...), e.g. NCHW images or (N, C)
    features; ``weight`` and ``bias`` are optional, as in
    ``torch.nn.functional.batch_norm(..., training=False)``."""
    op = "batch_norm"
    x = as_tensor(op, "x", x)
    _float_input(op, "x", x)
    if x.ndim < 2:
        raise OpError(f"{op}(): 'x' must have at least 2 dimensions (N, C, ...), got shape {tuple(x.shape)}")
    c = (x.shape[1],)
    stats = [_optional_param(op, "running_mean", running_mean, c, x),
             _optional_param(op, "running_var", running_var, c, x)]
    if stats[0] is None or stats[1] is None:
        raise OpError(f"{op}(): 'running_mean' and 'running_var' are required in inference mode")
    w = _optional_param(op, "weight", weight, c, x)
    b = _optional_param(op, "bias", bias, c, x)
    e = _eps(op, eps)
    dt = x.dtype
    cd = _compute_dtype(dt)
    given = [("x", x), ("running_mean", stats[0]), ("running_var", stats[1]), ("weight", w), ("bias", b)]
    inputs = [t for _, t in given if t is not None]
    names = [n for n, t in given if t is not None]

    def build(*ph: TensorInput):
        P = dict(zip(names, ph))
        X = P["x"]

        def ch(name: str, i: Sequence[E.Expr]) -> E.Expr:
            return E.cast(P[name][(i[1],) if not is_unit(X.shape[1]) else (0,)], cd)

        def out(*i: E.Expr) -> E.Expr:
            scale = 1.0 / E.call("sqrt", ch("running_var", i) + e)
            if "weight" in P:
                scale = scale * ch("weight", i)
            v = (E.cast(X[i], cd) - ch("running_mean", i)) * scale
            if "bias" in P:
                v = v + ch("bias", i)
            return E.cast(v, dt)
        return compute(op, X.shape, out)
    return apply(op, inputs, names, build, {"eps": e})[0]

