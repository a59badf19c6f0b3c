"""Shape and data-movement operators: reshapes, transposes, broadcasts, concatenation and
slicing, gathers, padding, tiling, and the tensor factories (arange, full, zeros, ones).

Every definition is a pure index map, kept as simple as the operator allows so that its
class reads off exactly: reshapes, squeezes and transposes index their input by the output
axes directly or through the contiguous groups of dimensions they split or merge
(bijective); slices are affine, pads and concatenations select between in-range reads and
constants (injective). Reads inside a select are clamped into the input, because both
branches of a select may be evaluated.
"""
from __future__ import annotations

import builtins
import math
import operator
from collections import Counter
from typing import Any, Callable, Sequence

import numpy as np

from taskloom.errors import IndexOutOfRange, OpError
from taskloom.graph.tensor import Tensor
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir.compute import GridCompute, TensorInput, compute
from taskloom.ir.index import is_zero, prod, row_major_offset, unravel
from taskloom.ops.base import apply, as_tensor, is_unit, normalize_axes, normalize_axis

__all__ = ["reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "expand",
           "broadcast_to", "concat", "split", "slice", "gather", "index_select", "embedding", "pad",
           "tile", "repeat", "arange", "full", "zeros", "ones"]

Dim = int | E.Expr
INDEX_DTYPES = (T.int32, T.int64)


# ----------------------------------------------------------------------------- helpers

def _int(op: str, arg: str, v: Any) -> int:
    if isinstance(v, (bool, np.bool_)):
        raise OpError(f"{op}(): '{arg}' must hold ints, got {v!r}")
    try:
        return operator.index(v)
    except TypeError:
        raise OpError(f"{op}(): '{arg}' must hold ints, got {v!r} ({type(v).__name__})") from None


def _ints(op: str, arg: str, v: Any) -> tuple[int, ...]:
    """An int or a sequence of ints as a tuple."""
    if isinstance(v, Tensor) or isinstance(v, np.ndarray) and v.ndim == 0:
        v = np.asarray(v).tolist()
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(_int(op, arg, x) for x in v)
    return (_int(op, arg, v),)


def _dims(op: str, arg: str, v: Any) -> tuple[Dim, ...]:
    """A sequence of ints and symbolic sizes (expressions, kept as they are) as a tuple."""
    if isinstance(v, (list, tuple)) and any(isinstance(x, E.Expr) for x in v):
        return tuple(x if isinstance(x, E.Expr) else _int(op, arg, x) for x in v)
    return _ints(op, arg, v)


def _same_dim(a: Dim, b: Dim) -> bool:
    """Whether two sizes are known to be equal: equal ints, or the same expression."""
    if isinstance(a, E.Expr) or isinstance(b, E.Expr):
        return E.as_expr(a) == E.as_expr(b)
    return a == b


def _sizes(op: str, arg: str, shape: Any) -> tuple[int, ...]:
    """A target shape of non-negative sizes."""
    out = _ints(op, arg, shape)
    for d in out:
        if d < 0:
            raise OpError(f"{op}(): '{arg}'={tuple(shape) if not isinstance(shape, int) else shape} has "
                          f"the negative size {d} (sizes must be >= 0)")
    return out


def _dtype(op: str, dtype: Any) -> T.DataType:
    try:
        return T.dtype(dtype)
    except Exception:
        raise OpError(f"{op}(): 'dtype'={dtype!r} is not a known data type (e.g. float32, float16, "
                      "int32, int64, bool)") from None


def _scalar(op: str, arg: str, value: Any, dtype: T.DataType) -> E.Constant:
    """``value`` as a constant of ``dtype`` (numpy's conversion: floats truncate toward zero)."""
    if hasattr(value, "item") and np.ndim(value) == 0:
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise OpError(f"{op}(): '{arg}' must be a Python number, got {value!r}")
    if dtype.is_bool():
        return E.Constant(bool(value), dtype)
    if dtype.is_float():
        return E.Constant(float(value), dtype)
    if isinstance(value, float) and not math.isfinite(value):
        raise OpError(f"{op}(): '{arg}'={value} cannot be held by {dtype.name}")
    v = int(value)
    if not dtype.min_value() <= v <= dtype.max_value():
        raise OpError(f"{op}(): '{arg}'={value} is out of the range of {dtype.name} "
                      f"({dtype.min_value()}..{dtype.max_value()})")
    return E.Constant(v, dtype)


def _index_arg(op: str, arg: str, t: Any, extent: int | None, wrap: bool = False,
               tracing: bool = True) -> Tensor:
    """An index tensor (int32 or int64) for a dimension of ``extent``. Its values are checked
    here when a traced graph holds them as a constant; indices that arrive at run time
    (eager data, a model's inputs) are checked by the kernel as it reads them."""
    t = as_tensor(op, arg, t)
    if t.dtype not in INDEX_DTYPES:
        raise OpError(f"{op}(): '{arg}' must be an int32 or int64 tensor, got {t.dtype.name}")
    if extent is None:
        return t
    if extent == 0 and t.size:
        raise OpError(f"{op}(): '{arg}' holds {t.size} indices into an empty dimension (size 0)")
    if tracing and t.is_concrete and t.numpy().size:
        low = -extent if wrap else 0
        lo, hi = int(t.numpy().min()), int(t.numpy().max())
        if lo < low or hi >= extent:
            raise IndexOutOfRange(f"{op}(): '{arg}' holds the index {lo if lo < low else hi}, out of range for a "
                                  f"dimension of size {extent} (valid indices: {low}..{extent - 1})")
    return t


def _symbols(placeholders: Sequence[TensorInput], tensors: Sequence[Tensor]) -> dict[int, Dim]:
    """Concrete size -> the placeholder dimension standing for it (a symbol for sizes > 1)."""
    out: dict[int, Dim] = {}
    for p, t in zip(placeholders, tensors):
        for d, n in zip(p.shape, t.shape):
            if not isinstance(d, E.Constant) and isinstance(n, int):  # (a traced symbol stands for itself)
                out.setdefault(n, d)
    return out


def _clamp(i: Dim, lo_needed: bool, hi: Dim | None) -> Dim:
    """``i`` clamped to ``[0, hi]`` where a bound can be crossed."""
    if lo_needed:
        i = E.maximum(i, 0)
    if hi is not None:
        i = E.minimum(i, hi)
    return i


# ----------------------------------------------------------------------------- reshapes

def _factors(d: Dim) -> tuple[int, Counter]:
    """A dimension as an integer coefficient times a product of symbolic factors."""
    if isinstance(d, int):
        return d, Counter()
    if isinstance(d, E.Constant):
        return int(d.value), Counter()
    if isinstance(d, E.Binary) and d.op == "mul":
        ca, fa = _factors(d.a)
        cb, fb = _factors(d.b)
        return ca * cb, fa + fb
    return 1, Counter({d: 1})


def _product_key(dims: Sequence[Dim]) -> tuple[int, Counter]:
    c, f = 1, Counter()
    for d in dims:
        cd, fd = _factors(d)
        c, f = c * cd, f + fd
    return c, f


def reshape_groups(src: Sequence[Dim], dst: Sequence[Dim]) -> list[tuple[list[int], list[int]]]:
    """The contiguous groups of non-unit dimensions a reshape of ``src`` to ``dst`` maps onto
    each other: pairs ``(source axes, target axes)`` of equal products, as fine as possible.

    Dimensions may be ints or symbolic; where symbolic products cannot be ordered, the
    remaining dimensions form one group. The products of ``src`` and ``dst`` must be equal.
    """
    a = [k for k, d in enumerate(src) if not is_unit(d)]
    b = [k for k, d in enumerate(dst) if not is_unit(d)]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        ga, gb = [a[i]], [b[j]]
        i, j = i + 1, j + 1
        while True:
            (ca, fa), (cb, fb) = _product_key([src[k] for k in ga]), _product_key([dst[k] for k in gb])
            if ca == cb and fa == fb:
                break
            grow_a = (fa == fb and ca < cb) or (fa != fb and not fa - fb and ca <= cb and cb % ca == 0)
            grow_b = (fa == fb and cb < ca) or (fa != fb and not fb - fa and cb <= ca and ca % cb == 0)
            if grow_a and i < len(a):
                ga.append(a[i])
                i += 1
            elif grow_b and j < len(b):
                gb.append(b[j])
                j += 1
            else:  # not comparable: the rest is one group
                ga += a[i:]
                gb += b[j:]
                i, j = len(a), len(b)
                break
        groups.append((ga, gb))
    if i < len(a) or j < len(b):
        raise OpError(f"reshape(): cannot reshape {tuple(src)} into {tuple(dst)}: the sizes differ")
    return groups


def reshape_compute(name: str, X: TensorInput | GridCompute, shape: Sequence[Dim],
                    groups: Sequence[tuple[list[int], list[int]]] | None = None) -> GridCompute:
    """The definition of a reshape of ``X`` into ``shape`` (same number of elements).

    Each group of source axes that ``groups`` pairs with target axes is indexed from those
    target axes alone: one to one directly, a split by the row-major offset of its target
    axes (``[S, 768] -> [S, 12, 64]`` reads ``X[s, h*64 + d]``), a merge by unravelling its
    one target axis. Unit source axes read 0. Without ``groups`` they are derived from the
    dimensions themselves (see :func:`reshape_groups`).
    """
    src = tuple(X.shape)
    groups = reshape_groups(src, shape) if groups is None else groups

    def fn(*idx: E.Expr) -> E.Expr:
        in_idx: list[Dim] = [0] * len(src)
        for ga, gb in groups:
            if len(ga) == 1 and len(gb) == 1:
                in_idx[ga[0]] = idx[gb[0]]
                continue
            offset = row_major_offset([idx[k] for k in gb], [shape[k] for k in gb])
            for k, v in zip(ga, unravel(offset, [src[k] for k in ga])):
                in_idx[k] = v
        return X[tuple(in_idx)]
    return compute(name, shape, fn)


def _reshape_apply(op: str, x: Tensor, target: Sequence[int], attrs: dict[str, Any]) -> Tensor:
    """Runs a reshape of ``x`` to the concrete ``target`` shape (sizes already checked)."""
    target = tuple(target)
    empty = 0 in x.shape or 0 in target
    groups = [] if empty else reshape_groups(x.shape, target)
    # A group that splits one source axis into several target axes needs their sizes as
    # ints (they are not products of the input's symbols), and so does an empty tensor;
    # otherwise every target size is a product of the input's own dimensions.
    static = empty or any(len(gb) > 1 for _, gb in groups)

    def build(X: TensorInput) -> GridCompute:
        shape: list[Dim] = list(target)
        if not static:
            for ga, gb in groups:
                shape[gb[0]] = prod([X.shape[k] for k in ga])
        if empty:
            zero = E.cast(E.const(0), X.dtype)
            return compute(op, shape, lambda *i: zero)
        return reshape_compute(op, X, shape, groups)
    return apply(op, [x], ["x"], build, attrs, static_dims=static)[0]


def reshape(x: Any, shape: int | Sequence[int]) -> Tensor:
    """``x`` with a new shape holding the same elements in row-major order (numpy/torch
    ``reshape``). One size may be -1: it is inferred from the others. Example:
    ``reshape(x_6x4, (2, -1, 4))`` has shape ``(2, 3, 4)``.
    """
    op = "reshape"
    x = as_tensor(op, "x", x)
    if any(isinstance(d, E.Expr) for d in (*x.shape, *(shape if isinstance(shape, (list, tuple)) else ()))):
        dims = _symbolic_target(op, x.shape, shape)
        return _reshape_apply(op, x, dims, {"shape": dims})
    dims = _ints(op, "shape", shape)
    if sum(d == -1 for d in dims) > 1:
        raise OpError(f"{op}(): 'shape'={dims} has more than one -1 (at most one size can be inferred)")
    for d in dims:
        if d < -1:
            raise OpError(f"{op}(): 'shape'={dims} has the negative size {d} (sizes are >= 0, or -1 once)")
    total = math.prod(x.shape)
    known = math.prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0:
            raise OpError(f"{op}(): 'shape'={dims} has a -1 next to a size 0, so the -1 is ambiguous")
        if total % known:
            raise OpError(f"{op}(): cannot reshape a tensor of shape {x.shape} ({total} elements) into "
                          f"'shape'={dims}: {total} is not a multiple of {known}")
        dims = tuple(total // known if d == -1 else d for d in dims)
    elif known != total:
        raise OpError(f"{op}(): cannot reshape a tensor of shape {x.shape} ({total} elements) into "
                      f"'shape'={dims} ({known} elements)")
    return _reshape_apply(op, x, dims, {"shape": dims})


def _symbolic_target(op: str, src: Sequence[Dim], shape: Sequence[Any]) -> tuple[Dim, ...]:
    """A reshape's target where sizes are symbolic (a traced graph with symbolic dimensions):
    ints and expressions, one -1 inferred where the products' symbolic factors allow."""
    dims = [d if isinstance(d, E.Expr) else _int(op, "shape", d) for d in shape]
    free = [k for k, d in enumerate(dims) if isinstance(d, int) and d == -1]
    if len(free) > 1 or any(isinstance(d, int) and d < -1 for d in dims):
        raise OpError(f"{op}(): 'shape'={tuple(dims)} must hold sizes >= 0 and at most one -1")
    (tc, tf), (kc, kf) = _product_key(src), _product_key([d for k, d in enumerate(dims) if k not in free])
    if free:
        if kc == 0 or tc % kc or kf - tf:
            raise OpError(f"{op}(): cannot infer the -1 of 'shape'={tuple(dims)} from the shape {tuple(src)}")
        rest: Dim = tc // kc
        for factor, n in (tf - kf).items():
            for _ in range(n):
                rest = rest * factor
        dims[free[0]] = rest
    elif (tc, tf) != (kc, kf):
        raise OpError(f"{op}(): cannot reshape a tensor of shape {tuple(src)} into 'shape'={tuple(dims)}: the "
                      "numbers of elements differ (or cannot be shown equal for symbolic sizes)")
    return tuple(dims)


def flatten(x: Any, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """``x`` with the dimensions ``start_dim..end_dim`` (inclusive) merged into one
    (``torch.flatten``); a 0-d tensor becomes 1-d. Example: ``flatten(x_2x3x4, 1)`` has
    shape ``(2, 12)``.
    """
    op = "flatten"
    x = as_tensor(op, "x", x)
    if x.ndim == 0:
        for arg, v in (("start_dim", start_dim), ("end_dim", end_dim)):
            normalize_axis(op, v, 1, arg)
        return _reshape_apply(op, x, (1,), {"start_dim": 0, "end_dim": 0})
    s = normalize_axis(op, start_dim, x.ndim, "start_dim")
    e = normalize_axis(op, end_dim, x.ndim, "end_dim")
    if s > e:
        raise OpError(f"{op}(): 'start_dim'={start_dim} comes after 'end_dim'={end_dim} "
                      f"in a {x.ndim}-d tensor")
    target = (*x.shape[:s], math.prod(x.shape[s:e + 1]), *x.shape[e + 1:])
    return _reshape_apply(op, x, target, {"start_dim": s, "end_dim": e})


def squeeze(x: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    """``x`` without the size-1 dimensions listed in ``axis`` (default: all of them), as
    ``numpy.squeeze``: naming a dimension whose size is not 1 is an error.
    """
    op = "squeeze"
    x = as_tensor(op, "x", x)
    if x.ndim == 0:
        normalize_axes(op, axis, 1)  # a 0-d tensor squeezes to itself; only check the axis
        axes: list[int] = []
    elif axis is None:
        axes = [k for k, d in enumerate(x.shape) if d == 1]
    else:
        axes = normalize_axes(op, axis, x.ndim)
        for k in axes:
            if x.shape[k] != 1:
                raise OpError(f"{op}(): 'axis'={axis} names dimension {k} of size {x.shape[k]}; only "
                              f"dimensions of size 1 can be squeezed (shape {x.shape})")
    target = tuple(d for k, d in enumerate(x.shape) if k not in axes)
    return _reshape_apply(op, x, target, {"axis": tuple(axes)})


def unsqueeze(x: Any, axis: int | Sequence[int]) -> Tensor:
    """``x`` with new size-1 dimensions inserted so that they sit at ``axis`` (an int or
    several) of the result (``torch.unsqueeze``, ``numpy.expand_dims``). Example:
    ``unsqueeze(x_3x4, -1)`` has shape ``(3, 4, 1)``.
    """
    op = "unsqueeze"
    x = as_tensor(op, "x", x)
    items = _ints(op, "axis", axis)
    nd = x.ndim + len(items)
    axes = normalize_axes(op, list(items), nd)
    it = iter(x.shape)
    target = tuple(1 if k in axes else next(it) for k in range(nd))
    return _reshape_apply(op, x, target, {"axis": tuple(axes)})


# ----------------------------------------------------------------------------- permutations

def permute_compute(name: str, X: TensorInput | GridCompute, dims: Sequence[int]) -> GridCompute:
    """``out[i_0, ..., i_n] = X[j]`` with ``j[dims[k]] = i_k``."""
    def fn(*idx: E.Expr) -> E.Expr:
        in_idx: list[Any] = [None] * len(dims)
        for k, d in enumerate(dims):
            in_idx[d] = idx[k]
        return X[tuple(in_idx)]
    return compute(name, [X.shape[d] for d in dims], fn)


def permute(x: Any, dims: Sequence[int]) -> Tensor:
    """``x`` with its dimensions reordered: dimension ``k`` of the result is dimension
    ``dims[k]`` of ``x`` (``torch.permute``, ``numpy.transpose`` with axes). Example:
    ``permute(x_2x3x4, (2, 0, 1))`` has shape ``(4, 2, 3)``.
    """
    op = "permute"
    x = as_tensor(op, "x", x)
    items = _ints(op, "dims", dims)
    if len(items) != x.ndim:
        raise OpError(f"{op}(): 'dims'={items} has {len(items)} entries for a {x.ndim}-d tensor "
                      f"(a permutation of 0..{x.ndim - 1} is needed)")
    norm = tuple(normalize_axis(op, d, x.ndim, "dims") for d in items)
    if len(set(norm)) != len(norm):
        raise OpError(f"{op}(): 'dims'={items} repeats a dimension (a permutation of 0..{x.ndim - 1} is needed)")
    return apply(op, [x], ["x"], lambda X: permute_compute(op, X, norm), {"dims": norm})[0]


def transpose(x: Any, dim0: int, dim1: int) -> Tensor:
    """``x`` with dimensions ``dim0`` and ``dim1`` swapped (``torch.transpose``). Example:
    ``transpose(x_2x3x4, 0, -1)`` has shape ``(4, 3, 2)``.
    """
    op = "transpose"
    x = as_tensor(op, "x", x)
    nd = max(x.ndim, 1)
    a, b = normalize_axis(op, dim0, nd, "dim0"), normalize_axis(op, dim1, nd, "dim1")
    perm = list(range(x.ndim))
    if x.ndim:
        perm[a], perm[b] = perm[b], perm[a]
    return apply(op, [x], ["x"], lambda X: permute_compute(op, X, perm), {"dims": tuple(perm)})[0]


# ----------------------------------------------------------------------------- broadcasts

def _broadcast_apply(op: str, x: Tensor, target: tuple[int, ...]) -> Tensor:
    lead = len(target) - x.ndim

    def build(X: TensorInput) -> GridCompute:
        sym = _symbols([X], [x])
        shape = [X.shape[k - lead] if k >= lead and x.shape[k - lead] == d else sym.get(d, d)
                 for k, d in enumerate(target)]
        return compute(op, shape, lambda *i: X[tuple(0 if is_unit(X.shape[k]) else i[lead + k]
                                                     for k in range(x.ndim))])
    return apply(op, [x], ["x"], build, {"shape": target},
                 trace=any(isinstance(d, E.Expr) for d in target))[0]


def expand(x: Any, shape: Sequence[int]) -> Tensor:
    """``x`` broadcast to ``shape`` as ``torch.Tensor.expand``: a size of -1 keeps that
    dimension, only size-1 dimensions grow, and new dimensions may be added in front.
    Example: ``expand(x_3x1, (2, -1, 5))`` has shape ``(2, 3, 5)``.
    """
    op = "expand"
    x = as_tensor(op, "x", x)
    dims = _dims(op, "shape", shape)
    if len(dims) < x.ndim:
        raise OpError(f"{op}(): 'shape'={dims} has fewer dimensions than the {x.ndim}-d tensor {x.shape}")
    lead = len(dims) - x.ndim
    target: list[Dim] = []
    for k, d in enumerate(dims):
        if isinstance(d, E.Expr):  # a symbolic size: a new dimension, a unit one grown, or the same
            if k >= lead and not is_unit(x.shape[k - lead]) and not _same_dim(x.shape[k - lead], d):
                raise OpError(f"{op}(): cannot expand dimension {k - lead} of size {x.shape[k - lead]} to {d} "
                              f"in 'shape'={dims} (only size-1 dimensions grow; shape {x.shape})")
            target.append(d)
            continue
        if d < -1 or (d == -1 and k < lead):
            raise OpError(f"{op}(): 'shape'={dims} has the size {d} at dimension {k} (sizes are >= 0; "
                          "-1 keeps an existing dimension)")
        if k >= lead:
            n = x.shape[k - lead]
            if d == -1:
                d = n
            elif not is_unit(n) and not _same_dim(n, d):
                raise OpError(f"{op}(): cannot expand dimension {k - lead} of size {n} to {d} in "
                              f"'shape'={dims} (only size-1 dimensions grow; shape {x.shape})")
        target.append(d)
    return _broadcast_apply(op, x, tuple(target))


def broadcast_to(x: Any, shape: Sequence[int]) -> Tensor:
    """``x`` broadcast to ``shape`` by numpy's rules (``numpy.broadcast_to``): dimensions are
    matched from the right, and each must equal the target or be 1.
    """
    op = "broadcast_to"
    x = as_tensor(op, "x", x)
    target = _dims(op, "shape", shape)
    if any(isinstance(d, int) and d < 0 for d in target):
        raise OpError(f"{op}(): 'shape'={target} has a negative size (sizes must be >= 0)")
    if len(target) < x.ndim:
        raise OpError(f"{op}(): 'shape'={target} has fewer dimensions than the {x.ndim}-d tensor {x.shape}")
    lead = len(target) - x.ndim
    for k, n in enumerate(x.shape):
        if not is_unit(n) and not _same_dim(n, target[lead + k]):
            raise OpError(f"{op}(): a tensor of shape {x.shape} cannot be broadcast to 'shape'={target} "
                          f"(dimension {k} is {n}, the target {target[lead + k]})")
    return _broadcast_apply(op, x, target)


# ----------------------------------------------------------------------------- concat / split / slice

def concat(tensors: Sequence[Any], axis: int = 0) -> Tensor:
    """The tensors joined along ``axis`` (``numpy.concatenate``, ``torch.cat``); they need
    the same dtype and the same sizes in every other dimension. Example:
    ``concat([a_2x3, b_4x3])`` has shape ``(6, 3)``.
    """
    op = "concat"
    if isinstance(tensors, (Tensor, np.ndarray)) or not isinstance(tensors, Sequence) or not tensors:
        raise OpError(f"{op}(): 'tensors' must be a non-empty list of tensors, got {type(tensors).__name__}")
    xs = [as_tensor(op, "tensors", t) for t in tensors]
    first = xs[0]
    if first.ndim == 0:
        raise OpError(f"{op}(): 'tensors' holds a 0-d tensor; 0-d tensors cannot be concatenated")
    ax = normalize_axis(op, axis, first.ndim)
    for k, t in enumerate(xs[1:], 1):
        if t.dtype != first.dtype:
            raise OpError(f"{op}(): 'tensors' mixes dtypes: tensor 0 is {first.dtype.name} and tensor {k} "
                          f"is {t.dtype.name} (cast them to one dtype first)")
        if t.ndim != first.ndim or any(a != b for d, (a, b) in enumerate(zip(t.shape, first.shape)) if d != ax):
            raise OpError(f"{op}(): 'tensors' shapes {first.shape} (tensor 0) and {t.shape} (tensor {k}) "
                          f"differ outside 'axis'={axis}")
    names = [f"x{k}" for k in range(len(xs))]
    empty = any(d == 0 for d in first.shape[:ax] + first.shape[ax + 1:])

    def build(*X: TensorInput) -> GridCompute:
        nd = first.ndim
        parts: list[tuple[TensorInput, Dim, Dim]] = []  # (input, first and end position along axis)
        total: Dim = 0
        for P, t in zip(X, xs):
            if not is_zero(t.shape[ax]):  # an input empty along the axis contributes nothing
                end = P.shape[ax] if isinstance(total, int) and total == 0 else total + P.shape[ax]
                parts.append((P, total, end))
                total = end
        shape = [total if d == ax else s for d, s in enumerate(X[0].shape)]

        def fn(*i: E.Expr) -> E.Expr:
            if empty or not parts:
                return E.cast(E.const(0), first.dtype)
            value: E.Expr | None = None
            for k in reversed(range(len(parts))):
                P, begin, end = parts[k]
                last = k == len(parts) - 1
                pos = _clamp(i[ax] - begin if k else i[ax], k > 0, None if last else P.shape[ax] - 1)
                read = P[tuple(pos if d == ax else i[d] for d in range(nd))]
                value = read if value is None else E.select(i[ax] < end, read, value)
            assert value is not None
            return value
        return compute(op, shape, fn)
    return apply(op, xs, names, build, {"axis": ax})[0]


def _strided_read(X: TensorInput, ax: int, start: int, step: int) -> Callable[..., E.Expr]:
    """``i -> X[..., start + i*step, ...]`` along ``ax``."""
    def fn(*i: E.Expr) -> E.Expr:
        pos: E.Expr = i[ax] * step if step != 1 else i[ax]
        if start:
            pos = pos + start
        return X[tuple(pos if d == ax else i[d] for d in range(len(i)))]
    return fn


def _slices(op: str, x: Tensor, ax: int, pieces: list[tuple[int, int, int]]) -> list[Tensor]:
    """The pieces ``(start, length, step)`` of ``x`` along ``ax``, all in one task; empty
    pieces are made directly (the executor skips a task with an empty output)."""
    out: list[Tensor | None] = [None] * len(pieces)
    live = [k for k, (_, n, _) in enumerate(pieces)
            if (isinstance(n, E.Expr) or n > 0) and not any(is_zero(d) for d in x.shape)]
    for k, (_, n, _) in enumerate(pieces):
        if k not in live:
            shape = tuple(n if d == ax else s for d, s in enumerate(x.shape))
            out[k] = Tensor(shape, x.dtype, np.empty(shape, dtype=x.dtype.numpy))
    if live:
        def build(X: TensorInput) -> list[GridCompute]:
            outs = []
            for k in live:
                start, n, step = pieces[k]
                shape = list(X.shape)
                if not (start == 0 and step == 1 and n == x.shape[ax]):
                    shape[ax] = n
                name = op if len(pieces) == 1 else f"{op}{k}"
                outs.append(compute(name, shape, _strided_read(X, ax, start, step)))
            return outs
        attrs = {"axis": ax, "pieces": tuple(pieces[k] for k in live)}
        symbolic = any(isinstance(d, E.Expr) for k in live for d in pieces[k][:2])  # a traced graph's size
        for k, t in zip(live, apply(op, [x], ["x"], build, attrs, trace=symbolic)):
            out[k] = t
    return out  # type: ignore[return-value]


def split(x: Any, split_size_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """``x`` cut along ``axis`` into a list of tensors (``torch.split``): an int gives pieces
    of that size (the last may be smaller), a list gives the size of each piece (they must
    add up to the size of ``axis``). Example: ``split(x_7x2, 3)`` gives shapes
    ``(3, 2), (3, 2), (1, 2)``.
    """
    op = "split"
    x = as_tensor(op, "x", x)
    if x.ndim == 0:
        raise OpError(f"{op}(): 'x' is 0-d; only tensors with at least one dimension can be split")
    ax = normalize_axis(op, axis, x.ndim)
    n = x.shape[ax]
    arg = "split_size_or_sections"
    if isinstance(split_size_or_sections, (list, tuple)):
        sizes = list(_ints(op, arg, split_size_or_sections))
        if any(s < 0 for s in sizes):
            raise OpError(f"{op}(): '{arg}'={sizes} has a negative size")
        if sum(sizes) != n:
            raise OpError(f"{op}(): '{arg}'={sizes} adds up to {sum(sizes)}, but dimension {ax} has size {n}")
    else:
        size = _int(op, arg, split_size_or_sections)
        if size <= 0 and not (size == 0 and n == 0):
            raise OpError(f"{op}(): '{arg}'={size} must be a positive piece size")
        sizes = [min(size, n - s) for s in range(0, n, size)] if n else [0]
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    return _slices(op, x, ax, [(s, m, 1) for s, m in zip(starts, sizes)])


def slice(x: Any, axis: int, start: int | None, stop: int | None, step: int = 1) -> Tensor:
    """The elements ``start:stop:step`` of ``x`` along ``axis``, with Python's rules for
    negative and out-of-range bounds (``x[..., start:stop:step]``); ``step`` must be
    positive. Example: ``slice(x_10, 0, -4, None, 2)`` keeps elements 6 and 8.
    """
    op = "slice"
    x = as_tensor(op, "x", x)
    if x.ndim == 0:
        raise OpError(f"{op}(): 'x' is 0-d; only tensors with at least one dimension can be sliced")
    ax = normalize_axis(op, axis, x.ndim)
    if any(isinstance(v, E.Expr) for v in (start, stop, x.shape[ax])):
        return _slices(op, x, ax, [_symbolic_piece(op, x.shape[ax], start, stop, step)])[0]
    b = [None if v is None else _int(op, name, v) for name, v in (("start", start), ("stop", stop))]
    st = _int(op, "step", step)
    if st <= 0:
        raise OpError(f"{op}(): 'step'={st} must be positive")
    r = range(*builtins.slice(b[0], b[1], st).indices(x.shape[ax]))
    return _slices(op, x, ax, [(r.start if len(r) else 0, len(r), st)])[0]


def _symbolic_piece(op: str, size: Dim, start: Any, stop: Any, step: Any) -> tuple[Dim, Dim, int]:
    """``(start, length, step)`` of a slice where a bound or the size is symbolic: negative
    ints count from the end, and the bounds are taken to lie inside the size (what the
    tracer's guards hold for a graph with symbolic sizes)."""
    st = _int(op, "step", step)
    if st <= 0:
        raise OpError(f"{op}(): 'step'={st} must be positive")

    def bound(v: Any, default: Dim) -> Dim:
        if v is None:
            return default
        if isinstance(v, E.Expr):
            return v
        v = _int(op, "bound", v)
        if v < 0:
            return size + v if isinstance(size, E.Expr) else max(size + v, 0)
        return size if isinstance(size, int) and v > size else (size if v >= 2 ** 62 else v)
    b, e = bound(start, 0), bound(stop, size)
    length = E.cdiv(E.as_expr(e) - b, st) if st != 1 else (e if isinstance(b, int) and b == 0 else E.as_expr(e) - b)
    return b, length, st


# ----------------------------------------------------------------------------- gathers

def gather(x: Any, axis: int, index: Any, wrap: bool = False) -> Tensor:
    """``out[i][j][k] = x[index[i][j][k]][j][k]`` for ``axis`` 0, and likewise for other
    axes (``torch.gather``): ``index`` (int32 or int64) has the rank of ``x``, is no larger
    than ``x`` outside ``axis``, and gives the shape of the result. Indices are checked as
    the kernel reads them (:class:`~taskloom.errors.IndexOutOfRange`); with ``wrap``,
    negative ones count from the end (``-1`` is the last), as in numpy and ONNX.
    """
    op = "gather"
    x = as_tensor(op, "x", x)
    if x.ndim == 0:
        raise OpError(f"{op}(): 'x' is 0-d; gather needs at least one dimension")
    ax = normalize_axis(op, axis, x.ndim)
    idx = _index_arg(op, "index", index, None)
    if idx.ndim != x.ndim:
        raise OpError(f"{op}(): 'index' has {idx.ndim} dimensions, 'x' has {x.ndim}; they must be equal")
    for d, (a, b) in enumerate(zip(idx.shape, x.shape)):
        if d != ax and a > b:
            raise OpError(f"{op}(): 'index' of shape {idx.shape} is larger than 'x' of shape {x.shape} "
                          f"in dimension {d} (only 'axis'={axis} may be larger)")
    _index_arg(op, "index", idx, x.shape[ax], wrap, not x.is_concrete)
    what = f"{op}(): 'index' (along axis {ax} of 'x')"

    def build(X: TensorInput, I: TensorInput) -> GridCompute:
        def element(*i: E.Var) -> E.Expr:
            pos = E.index_check(I[i], X.shape[ax], what, wrap)
            return X[tuple(pos if d == ax else i[d] for d in range(x.ndim))]
        return compute(op, I.shape, element)
    return apply(op, [x, idx], ["x", "index"], build, {"axis": ax, **_wrap_attr(wrap)})[0]


def index_select(x: Any, axis: int, index: Any, wrap: bool = False) -> Tensor:
    """The entries of ``x`` at positions ``index`` (a 1-d int32 or int64 tensor) along
    ``axis`` (``torch.index_select``, ``numpy.take`` with an axis). Example:
    ``index_select(x_5x3, 0, [4, 0])`` has rows 4 and 0. Indices are checked and ``wrap``
    counts negative ones from the end, as for :func:`gather`.
    """
    op = "index_select"
    x = as_tensor(op, "x", x)
    if x.ndim == 0:
        raise OpError(f"{op}(): 'x' is 0-d; index_select needs at least one dimension")
    ax = normalize_axis(op, axis, x.ndim)
    idx = _index_arg(op, "index", index, x.shape[ax], wrap, not x.is_concrete)
    if idx.ndim != 1:
        raise OpError(f"{op}(): 'index' must be 1-d, got shape {idx.shape}")
    what = f"{op}(): 'index' (along axis {ax} of 'x')"

    def build(X: TensorInput, I: TensorInput) -> GridCompute:
        shape = [I.shape[0] if d == ax else s for d, s in enumerate(X.shape)]

        def element(*i: E.Var) -> E.Expr:
            pos = E.index_check(I[i[ax]], X.shape[ax], what, wrap)
            return X[tuple(pos if d == ax else i[d] for d in range(x.ndim))]
        return compute(op, shape, element)
    return apply(op, [x, idx], ["x", "index"], build, {"axis": ax, **_wrap_attr(wrap)})[0]


def embedding(indices: Any, weight: Any, wrap: bool = False) -> Tensor:
    """Rows of the table ``weight`` (``[num, dim]``) picked by ``indices`` (int32 or int64,
    any shape): the result has shape ``indices.shape + (dim,)``
    (``torch.nn.functional.embedding``). Indices are checked and ``wrap`` counts negative
    ones from the end, as for :func:`gather`.
    """
    op = "embedding"
    w = as_tensor(op, "weight", weight)
    if w.ndim != 2:
        raise OpError(f"{op}(): 'weight' must be 2-d ([num_embeddings, dim]), got shape {w.shape}")
    idx = _index_arg(op, "indices", indices, w.shape[0], wrap, not w.is_concrete)
    nd = idx.ndim
    what = f"{op}(): 'indices' (rows of 'weight')"

    def build(I: TensorInput, W: TensorInput) -> GridCompute:
        return compute(op, [*I.shape, W.shape[1]],
                       lambda *i: W[E.index_check(I[tuple(i[:nd])], W.shape[0], what, wrap), i[nd]])
    return apply(op, [idx, w], ["indices", "weight"], build, _wrap_attr(wrap))[0]


def _wrap_attr(wrap: bool) -> dict[str, bool]:
    return {"wrap": True} if wrap else {}


# ----------------------------------------------------------------------------- pad / tile

def pad_widths(pads: Sequence[int], ndim: int) -> tuple[list[int], list[int]]:
    """:func:`pad`'s ``(before, after)`` pairs, listed from the last axis, as two lists in
    axis order (0 for an axis not listed)."""
    before, after = [0] * ndim, [0] * ndim
    for k in range(len(pads) // 2):
        before[ndim - 1 - k], after[ndim - 1 - k] = pads[2 * k], pads[2 * k + 1]
    return before, after


def pad(x: Any, pads: Sequence[int], value: float = 0.0) -> Tensor:
    """``x`` padded with ``value`` (``torch.nn.functional.pad`` in constant mode): ``pads``
    lists ``(before, after)`` pairs starting from the last dimension, so ``(1, 2)`` adds one
    column in front and two behind, and ``(1, 1, 0, 3)`` also adds three rows at the bottom.
    Negative pads crop.
    """
    op = "pad"
    x = as_tensor(op, "x", x)
    items = _ints(op, "pads", pads)
    if len(items) % 2 or len(items) > 2 * x.ndim:
        raise OpError(f"{op}(): 'pads'={items} must hold (before, after) pairs for at most {x.ndim} "
                      f"dimension(s): an even count up to {2 * x.ndim}")
    before, after = pad_widths(items, x.ndim)
    for d, (n, b, a) in enumerate(zip(x.shape, before, after)):
        if isinstance(n, int) and n + b + a < 0:  # (a symbolic size is not cropped here)
            raise OpError(f"{op}(): 'pads'={items} crops dimension {d} of size {n} to the "
                          f"negative size {n + b + a}")
    fill = _scalar(op, "value", value, x.dtype)
    empty = any(isinstance(n, int) and n == 0 for n in x.shape)

    def build(X: TensorInput) -> GridCompute:
        shape = [s + (b + a) if b + a else s for s, b, a in zip(X.shape, before, after)]

        def fn(*i: E.Expr) -> E.Expr:
            if empty:
                return fill
            conds: list[E.Expr] = []
            idx: list[Dim] = []
            for d in range(x.ndim):
                n, b, a = X.shape[d], before[d], after[d]
                if is_unit(n) and (b > 0 or a > 0):
                    conds.append(E.eq(i[d], b))  # the one element of a padded unit dimension
                    idx.append(0)
                    continue
                pos = i[d] - b if b else i[d]
                if b > 0:
                    conds.append(b <= i[d])
                if a > 0:
                    conds.append(i[d] < n + b if b else i[d] < n)
                idx.append(_clamp(pos, b > 0, n - 1 if a > 0 else None))
            read = X[tuple(idx)]
            return E.select(E.logical_and(*conds), read, fill) if conds else read
        return compute(op, shape, fn)
    return apply(op, [x], ["x"], build, {"pads": items, "value": fill.value})[0]


def _tile_apply(op: str, x: Tensor, reps: tuple[int, ...]) -> Tensor:
    lead = len(reps) - x.ndim

    def build(X: TensorInput) -> GridCompute:
        shape: list[Dim] = list(reps[:lead])
        for k, (n, r) in enumerate(zip(X.shape, reps[lead:])):
            shape.append(0 if r == 0 else n if r == 1 else r if is_unit(n) else n * r)

        def fn(*i: E.Expr) -> E.Expr:
            idx = []
            for k, (n, r) in enumerate(zip(X.shape, reps[lead:])):
                j = i[lead + k]
                idx.append(0 if is_unit(n) else j if r == 1 else j % n)
            return X[tuple(idx)]
        return compute(op, shape, fn)
    return apply(op, [x], ["x"], build, {"reps": reps})[0]


def tile(x: Any, reps: int | Sequence[int]) -> Tensor:
    """``x`` repeated ``reps[k]`` times along each dimension (``numpy.tile``): a shorter
    ``reps`` is padded with 1s in front, a longer one gives ``x`` new leading dimensions.
    Example: ``tile(x_2x3, 2)`` has shape ``(2, 6)``.
    """
    op = "tile"
    x = as_tensor(op, "x", x)
    r = _ints(op, "reps", reps)
    if any(v < 0 for v in r):
        raise OpError(f"{op}(): 'reps'={r} has a negative count")
    r = (1,) * (x.ndim - len(r)) + r
    return _tile_apply(op, x, r)


def repeat(x: Any, repeats: int | Sequence[int]) -> Tensor:
    """``x`` repeated ``repeats[k]`` times along each dimension (``torch.Tensor.repeat``):
    ``repeats`` has at least as many entries as ``x`` has dimensions, and extra ones add
    leading dimensions. Example: ``repeat(x_2x3, (2, 1, 2))`` has shape ``(2, 2, 6)``.
    """
    op = "repeat"
    x = as_tensor(op, "x", x)
    r = _ints(op, "repeats", repeats)
    if len(r) < x.ndim:
        raise OpError(f"{op}(): 'repeats'={r} has {len(r)} entries, fewer than the {x.ndim} dimensions of x")
    if any(v < 0 for v in r):
        raise OpError(f"{op}(): 'repeats'={r} has a negative count")
    return _tile_apply(op, x, r)


# ----------------------------------------------------------------------------- factories

def arange(start: float, stop: float | None = None, step: float = 1, dtype: Any = None) -> Tensor:
    """``start, start + step, ...`` up to but excluding ``stop`` (``numpy.arange``); with one
    argument it counts from 0. Without ``dtype`` the result is int64 when every argument is
    an int, else float32. Element ``i`` is ``start + i*step`` computed in double precision
    (in int64 for integer results).
    """
    op = "arange"
    if isinstance(stop if stop is not None else start, E.Expr):
        return _symbolic_arange(op, start, stop, step, dtype)
    vals = []
    for arg, v in (("start", start), ("stop", stop), ("step", step)):
        if v is None and arg == "stop":
            continue
        if hasattr(v, "item") and np.ndim(v) == 0:
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise OpError(f"{op}(): '{arg}' must be a Python number, got {v!r}")
        if not math.isfinite(v):
            raise OpError(f"{op}(): '{arg}'={v} must be finite")
        vals.append(v)
    start, stop, step = vals if len(vals) == 3 else (0, *vals)
    if step == 0:
        raise OpError(f"{op}(): 'step' must not be 0")
    all_int = all(isinstance(v, int) for v in vals)
    dt = (T.int64 if all_int else T.float32) if dtype is None else _dtype(op, dtype)
    n = len(range(start, stop, step)) if all_int else max(0, math.ceil((stop - start) / step))
    if dt.is_integer() and all_int:
        for v in (start, start + (n - 1) * step if n else start):
            if not dt.min_value() <= v <= dt.max_value():
                raise OpError(f"{op}(): the value {v} does not fit {dt.name}")

    def build() -> GridCompute:
        if dt.is_integer() and all_int:
            return compute(op, [n], lambda i: E.cast(E.cast(i, T.int64) * E.Constant(step, T.int64)
                                                     + E.Constant(start, T.int64), dt))
        return compute(op, [n], lambda i: E.cast(E.cast(i, T.float64) * E.Constant(float(step), T.float64)
                                                 + E.Constant(float(start), T.float64), dt))
    return apply(op, [], [], build, {"start": start, "step": step, "n": n})[0]


def _symbolic_arange(op: str, start: Any, stop: Any, step: Any, dtype: Any) -> Tensor:
    """``arange`` up to a symbolic size (a traced graph's sequence length): integer steps,
    recorded in the graph, since its length is known only per call."""
    start, stop = (0, start) if stop is None else (start, stop)
    if not all(isinstance(v, int) for v in (start, step)) or step <= 0:
        raise OpError(f"{op}(): with the symbolic end {stop}, 'start' and 'step' must be ints and 'step' > 0, "
                      f"got start={start!r}, step={step!r}")
    dt = T.int64 if dtype is None else _dtype(op, dtype)
    n = E.cdiv(E.as_expr(stop) - start, step) if step != 1 or start else stop

    def build() -> GridCompute:
        return compute(op, [n], lambda i: E.cast(E.cast(i, T.int64) * E.Constant(step, T.int64)
                                                 + E.Constant(start, T.int64), dt))
    return apply(op, [], [], build, {"start": start, "step": step}, trace=True)[0]


def _full(op: str, shape: Any, value: Any, dtype: Any) -> Tensor:
    dims = _sizes(op, "shape", shape)
    dt = _dtype(op, dtype)
    c = _scalar(op, "value", value, dt)
    return apply(op, [], [], lambda: compute(op, dims, lambda *i: c), {"shape": dims, "value": c.value})[0]


def full(shape: int | Sequence[int], value: float, dtype: Any = T.float32) -> Tensor:
    """A tensor of ``shape`` with every element ``value`` converted to ``dtype``
    (``numpy.full``; floats become integers by truncation).
    """
    return _full("full", shape, value, dtype)


def zeros(shape: int | Sequence[int], dtype: Any = T.float32) -> Tensor:
    """A tensor of ``shape`` filled with zeros of ``dtype`` (``numpy.zeros``)."""
    return _full("zeros", shape, 0, dtype)


def ones(shape: int | Sequence[int], dtype: Any = T.float32) -> Tensor:
    """A tensor of ``shape`` filled with ones of ``dtype`` (``numpy.ones``)."""
    return _full("ones", shape, 1, dtype)
