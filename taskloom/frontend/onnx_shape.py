"""ONNX converters of shape and indexing operators: Reshape, Flatten, Transpose, Squeeze,
Unsqueeze, Concat, Split, Slice, Gather, GatherElements, GatherND, ScatterElements, ScatterND, CumSum,
Expand, Tile, Pad, Trilu, Shape,
Size, Constant, ConstantOfShape, Range, Dropout.

``Shape`` and ``Size`` give numpy constants where shapes are static, and the sizes, axes and
pads these operators take must be constants by the time they are converted; where a model
input's dimension is symbolic, the shapes that follow from it are
:class:`~taskloom.frontend.onnx_symbolic.Sizes`, which Reshape, Expand, ConstantOfShape,
Range and Slice take as their shapes and bounds.
"""
from __future__ import annotations

import math
import numpy as np

from taskloom import ops
from taskloom.frontend.onnx_elementwise import zero_of
from taskloom.frontend.onnx_registry import (OnnxNode, Value, as_numpy, converter, dtype_of, is_const,
                                             normalize_axes, normalize_axis, shape_of, taskloom_dtype)
from taskloom.frontend.onnx_symbolic import Sizes, broadcast_shapes, elements
from taskloom.graph.tensor import Tensor
from taskloom.ir import expr as E


# ----------------------------------------------------------------------------- reshapes

@converter("Reshape", versions=(5, 25))
def reshape(n: OnnxNode) -> Tensor:
    """Reshape: 0 copies the input's size there (unless ``allowzero``), -1 is inferred."""
    x = n.tensor(0)
    shape = n.sizes(1, "shape")
    if shape is None:
        raise n.error("input 1 (shape) is required")
    allowzero = n.flag("allowzero", 0)
    shape = [d if isinstance(d, E.Expr) else int(d) for d in shape]
    copied = [k for k, d in enumerate(shape) if isinstance(d, int) and d == 0 and not allowzero and k >= x.ndim]
    if copied:
        raise n.error(f"'shape'={shape} holds 0 at position {copied[0]}, which copies that dimension of the "
                      f"input, but the input is {x.ndim}-d (shape {shape_of(x)}); give the size itself")
    target = [x.shape[k] if isinstance(d, int) and d == 0 and not allowzero else d for k, d in enumerate(shape)]
    if tuple(target) == tuple(x.shape):
        return x
    return ops.reshape(x, target)


@converter("Flatten", versions=(1, 25))
def flatten(n: OnnxNode) -> Tensor:
    """Flatten: a 2-d result, the dimensions before ``axis`` by those from it on."""
    x = n.tensor(0)
    shape = shape_of(x)
    axis = int(n.attr("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise n.error(f"'axis'={axis} is out of range for a {len(shape)}-d input (valid: {-len(shape)}..{len(shape)})")
    if axis < 0:
        axis += len(shape)
    target = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    return x if target == shape else ops.reshape(x, target)


@converter("Squeeze", versions=(1, 25))
def squeeze(n: OnnxNode) -> Tensor:
    """Squeeze: axes as an attribute before version 13, an optional input from it on."""
    x = n.tensor(0)
    axes = n.attr("axes") if n.version < 13 else n.ints(1, "axes")
    return ops.squeeze(x, None if axes is None else list(axes))


@converter("Unsqueeze", versions=(1, 25))
def unsqueeze(n: OnnxNode) -> Tensor:
    """Unsqueeze: axes as an attribute before version 13, an input from it on."""
    x = n.tensor(0)
    axes = n.attr("axes") if n.version < 13 else n.ints(1, "axes")
    if not axes:
        raise n.error("'axes' is required")
    return ops.unsqueeze(x, list(axes))


@converter("Transpose", versions=(1, 25))
def transpose(n: OnnxNode) -> Tensor:
    """Transpose: ``perm`` (default: the dimensions reversed)."""
    x = n.tensor(0)
    perm = n.attr("perm") or list(reversed(range(x.ndim)))
    if list(perm) == list(range(x.ndim)):
        return x
    return ops.permute(x, list(perm))


@converter("Expand", versions=(8, 13))
def expand(n: OnnxNode) -> Tensor:
    """Expand: numpy broadcasting of the input and ``shape`` (either may hold the 1s)."""
    x = n.tensor(0)
    shape = n.sizes(1, "shape") or []
    target = broadcast_shapes(shape_of(x), shape, n.label)
    return x if target == shape_of(x) else ops.broadcast_to(x, target)


@converter("Tile", versions=(6, 13))
def tile(n: OnnxNode) -> Tensor:
    """Tile: the input repeated ``repeats[k]`` times along each dimension."""
    x = n.tensor(0)
    reps = n.ints(1, "repeats")
    if reps is None or len(reps) != x.ndim:
        raise n.error(f"'repeats' must hold one count per dimension of the {x.ndim}-d input, got {reps}")
    return x if all(r == 1 for r in reps) else ops.tile(x, reps)


# ----------------------------------------------------------------------------- concat, split, slice

@converter("Concat", versions=(4, 13))
def concat(n: OnnxNode) -> Tensor:
    """Concat along ``axis``."""
    values = [v for v in n.inputs if v is not None]
    if not values:
        raise n.error("needs at least one input")
    axis = normalize_axis(n, int(n.required_attr("axis")), len(values[0].shape))
    if len(values) == 1:
        return n.as_tensor(values[0])
    return ops.concat([n.as_tensor(v) for v in values], axis)


@converter("Split", versions=(2, 18))
def split(n: OnnxNode) -> list[Tensor]:
    """Split: sizes from the ``split`` attribute (before 13) or input (from 13), else equal
    parts, or ``num_outputs`` parts of ceil(size / count) (version 18)."""
    x = n.tensor(0)
    axis = normalize_axis(n, int(n.attr("axis", 0)), x.ndim)
    size = x.shape[axis]
    sizes = n.attr("split") if n.version < 13 else n.ints(1, "split")
    if not sizes:
        count = int(n.attr("num_outputs", 0)) or len(n.outputs)
        if count < 1:
            raise n.error(f"'num_outputs'={count} must be positive")
        if n.attr("num_outputs") is not None:
            step = -(-size // count)  # every piece ceil(size / count) long, the last shorter
            sizes = [min(step, size - k * step) for k in range(count)]
        elif size % count:
            raise n.error(f"cannot split dimension {axis} of size {size} into {count} equal parts; give 'split'")
        else:
            sizes = [size // count] * count
    if len(sizes) != len(n.outputs):
        raise n.error(f"'split' gives {len(sizes)} pieces but the node has {len(n.outputs)} outputs")
    return ops.split(x, list(sizes), axis)


def index_tensor(n: OnnxNode, positions: np.ndarray) -> Tensor:
    """Constant positions as an index tensor: int32, the type of the kernels' own index
    arithmetic (int64 where a position needs it)."""
    big = positions.size and int(np.abs(positions).max()) >= 2**31
    return n.pool.tensor(positions.astype(np.int64 if big else np.int32), n.label)


def gather_block(n: OnnxNode, x: Tensor, picks: dict[int, np.ndarray]) -> Tensor:
    """``x`` at the positions ``picks[axis]`` along each axis in ``picks`` (all others kept),
    as one index_select over the merged span of those axes."""
    shape = shape_of(x)
    first, last = min(picks), max(picks)
    grids = [picks.get(a, np.arange(shape[a])) for a in range(first, last + 1)]
    block = shape[first:last + 1]
    flat = np.ravel_multi_index(np.meshgrid(*grids, indexing="ij"), block).reshape(-1)
    merged = x if first == last else ops.reshape(x, shape[:first] + (math.prod(block),) + shape[last + 1:])
    y = ops.index_select(merged, first, index_tensor(n, flat))
    target = shape[:first] + tuple(len(g) for g in grids) + shape[last + 1:]
    return y if tuple(y.shape) == target else ops.reshape(y, target)


@converter("Slice", versions=(10, 13))
def slice_(n: OnnxNode) -> Tensor:
    """Slice: forward steps become slices; any backward step gathers the positions instead."""
    x = n.tensor(0)
    starts, ends = n.sizes(1, "starts"), n.sizes(2, "ends")
    if starts is None or ends is None or len(starts) != len(ends):
        raise n.error(f"'starts' ({starts}) and 'ends' ({ends}) must be given, one of each per sliced axis")
    axes = n.ints(3, "axes") or list(range(len(starts)))
    steps = n.ints(4, "steps") or [1] * len(starts)
    if len(axes) != len(starts) or len(steps) != len(starts):
        raise n.error(f"'starts' holds {len(starts)} values, so 'axes' ({axes}) and 'steps' ({steps}) must "
                      "hold as many")
    if len(set(normalize_axes(n, axes, x.ndim))) != len(axes):
        raise n.error(f"'axes'={axes} names an axis twice")
    bounds = list(zip(starts, ends, normalize_axes(n, axes, x.ndim), steps))
    if any(isinstance(v, E.Expr) for s, e, a, _ in bounds for v in (s, e, x.shape[a])):
        return _symbolic_slice(n, x, bounds)
    picks: dict[int, range] = {}
    for start, end, axis, step in bounds:
        if step == 0:
            raise n.error("'steps' must not hold 0")
        picked = range(*slice(start, end, step).indices(x.shape[axis]))
        if not (step == 1 and len(picked) == x.shape[axis]):
            picks[axis] = picked
    if any(r.step < 0 for r in picks.values()):  # backwards: gather the positions
        return gather_block(n, x, {a: np.array(r, dtype=np.int64) for a, r in picks.items()})
    y = x
    for axis, r in picks.items():
        y = ops.slice(y, axis, r.start, r.stop, r.step)
    return y


def _symbolic_slice(n: OnnxNode, x: Tensor, bounds: list) -> Tensor:
    """Slice where a bound or a sliced size is symbolic: forward steps only (the bounds are
    taken to lie within the sizes, as an exporter's shape arithmetic makes them)."""
    y = x
    for start, end, axis, step in bounds:
        if step <= 0:
            raise n.error(f"'steps'={step} on the symbolic size {x.shape[axis]}: only forward steps are supported")
        if not (isinstance(start, int) and start == 0 and isinstance(end, int) and end >= 2 ** 62 and step == 1):
            y = ops.slice(y, axis, start, end, step)
    return y


# ----------------------------------------------------------------------------- gathers

def _indices(n: OnnxNode, k: int, extent: int) -> Tensor | np.ndarray:
    """Index input ``k`` with negative entries counted from the end of an axis of ``extent``."""
    idx = n.required(k, "indices")
    if not dtype_of(idx).is_integer():
        raise n.error(f"input {k} (indices) must hold integers, got {dtype_of(idx).name}")
    if is_const(idx):
        arr = as_numpy(idx)
        return np.where(arr < 0, arr + extent, arr).astype(arr.dtype)
    return ops.where(ops.less(idx, 0), ops.add(idx, extent), idx)


@converter("Gather", versions=(1, 13))
def gather(n: OnnxNode) -> Tensor:
    """Gather (numpy.take): constant indices become a slice or an index_select, indices from
    the model an embedding lookup (2-d data, axis 0) or an index_select."""
    x = n.tensor(0)
    axis = normalize_axis(n, int(n.attr("axis", 0)), x.ndim)
    shape = shape_of(x)
    idx = _indices(n, 1, shape[axis])
    out_shape = shape[:axis] + tuple(idx.shape) + shape[axis + 1:]
    if isinstance(idx, np.ndarray):
        flat = idx.reshape(-1)
        if flat.size == 1:  # one position: a slice, without an index buffer
            y = ops.slice(x, axis, int(flat[0]), int(flat[0]) + 1)
            return ops.reshape(y, out_shape)
        y = ops.index_select(x, axis, index_tensor(n, flat))
        return y if tuple(y.shape) == out_shape else ops.reshape(y, out_shape)
    if axis == 0 and x.ndim == 2:
        return ops.embedding(idx, x)
    flat_t = idx if idx.ndim == 1 else ops.reshape(idx, (-1,))
    y = ops.index_select(x, axis, flat_t)
    return y if tuple(y.shape) == out_shape else ops.reshape(y, out_shape)


@converter("GatherElements", versions=(11, 13))
def gather_elements(n: OnnxNode) -> Tensor:
    """GatherElements: torch.gather semantics, negative indices counted from the end."""
    x = n.tensor(0)
    axis = normalize_axis(n, int(n.attr("axis", 0)), x.ndim)
    idx = _indices(n, 1, shape_of(x)[axis])
    return ops.gather(x, axis, index_tensor(n, idx) if isinstance(idx, np.ndarray) else idx)


def _index_input(n: OnnxNode, k: int) -> Tensor:
    """Index input ``k`` as a tensor, negative entries left for the op to count from the end."""
    idx = n.required(k, "indices")
    if not dtype_of(idx).is_integer():
        raise n.error(f"input {k} (indices) must hold integers, got {dtype_of(idx).name}")
    return index_tensor(n, as_numpy(idx)) if is_const(idx) else idx


@converter("GatherND", versions=(11, 13))
def gather_nd(n: OnnxNode) -> Tensor:
    """GatherND: each coordinate checked against its own axis, negative ones from the end."""
    return ops.gather_nd(n.tensor(0), _index_input(n, 1), int(n.attr("batch_dims", 0)), wrap=True)


#: ONNX's scatter reductions -> taskloom's, with the version that brought each
_SCATTER_REDUCTIONS = {"none": (None, 11), "add": ("add", 16), "mul": ("mul", 16), "max": ("max", 18),
                       "min": ("min", 18)}


def _scatter_reduction(n: OnnxNode) -> str | None:
    name = n.attr("reduction", "none")
    found = _SCATTER_REDUCTIONS.get(name)
    if found is None or n.version < found[1]:
        known = [r for r, (_, v) in _SCATTER_REDUCTIONS.items() if n.version >= v]
        raise n.error(f"'reduction'={name!r} is not one of {', '.join(known)} (at version {n.version})")
    return found[0]


@converter("ScatterElements", versions=(11, 18))
def scatter_elements(n: OnnxNode) -> Tensor:
    """ScatterElements: torch.scatter (and scatter_reduce with the reduction), negative
    indices counted from the end."""
    x = n.tensor(0)
    axis = normalize_axis(n, int(n.attr("axis", 0)), x.ndim)
    return ops.scatter(x, axis, _index_input(n, 1), n.tensor(2), _scatter_reduction(n), wrap=True)


@converter("ScatterND", versions=(11, 18))
def scatter_nd(n: OnnxNode) -> Tensor:
    """ScatterND: updates written (or combined) at coordinates from the last axis of indices."""
    return ops.scatter_nd(n.tensor(0), _index_input(n, 1), n.tensor(2), _scatter_reduction(n), wrap=True)


@converter("CumSum", versions=(11, 14))
def cumsum(n: OnnxNode) -> Tensor:
    """CumSum: running sums along the axis its second input holds (a constant), with the
    ``exclusive`` and ``reverse`` attributes; the result keeps the input's type."""
    x = n.tensor(0)
    axis = n.ints(1, "axis")
    if axis is None or len(axis) != 1:
        raise n.error(f"input 1 (axis) must hold one integer, got {axis}")
    out = ops.cumsum(x, axis[0], bool(n.attr("exclusive", 0)), bool(n.attr("reverse", 0)))
    return out if out.dtype == x.dtype else ops.cast(out, x.dtype)


# ----------------------------------------------------------------------------- pad, trilu

def _pad_indices(mode: str, size: int, before: int, after: int) -> np.ndarray:
    """Source positions of an axis padded by ``before``/``after`` in a non-constant mode."""
    p = np.arange(-before, size + after)
    if mode == "edge":
        return np.clip(p, 0, size - 1)
    if mode == "wrap":
        return np.mod(p, size)
    if size == 1:
        return np.zeros_like(p)
    period = 2 * (size - 1)  # reflect: mirror at both ends without repeating the edge
    q = np.mod(p, period)
    return np.where(q >= size, period - q, q)


@converter("Pad", versions=(11, 25))
def pad(n: OnnxNode) -> Tensor:
    """Pad: constant mode with ``ops.pad``; reflect, edge and wrap as one gather of the
    source positions, computed here."""
    x = n.tensor(0)
    mode = n.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap") or (mode == "wrap" and n.version < 19):
        raise n.error(f"'mode'={mode!r} is not supported (supported: constant, reflect, edge, and wrap from version 19)")
    pads = n.ints(1, "pads") or []
    axes = normalize_axes(n, n.ints(3, "axes") or range(x.ndim), x.ndim)
    if len(pads) != 2 * len(axes):
        raise n.error(f"'pads' must hold {2 * len(axes)} values (begins, then ends), got {len(pads)}")
    before, after = [0] * x.ndim, [0] * x.ndim
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[k + len(axes)]
        if x.shape[a] + before[a] + after[a] < 0:
            raise n.error(f"'pads' {before[a]} and {after[a]} crop axis {a} of size {x.shape[a]} by more "
                          "than its size")
    if mode == "constant":
        value = n.scalar(2, "constant_value") if n.has(2) else 0
        pairs: list[int] = []
        for a in reversed(range(x.ndim)):
            pairs += [before[a], after[a]]
        return ops.pad(x, pairs, 0 if value is None else value) if any(pairs) else x
    picks = {}
    for a in range(x.ndim):
        if before[a] or after[a]:
            if x.shape[a] == 0:
                raise n.error(f"mode {mode!r} cannot pad the empty dimension {a}")
            picks[a] = _pad_indices(mode, x.shape[a], before[a], after[a])
    return gather_block(n, x, picks) if picks else x


@converter("Trilu", versions=(14, 14))
def trilu(n: OnnxNode) -> Tensor:
    """Trilu: the upper (or lower) triangle of the last two axes from diagonal ``k``; a
    constant mask selects it."""
    x = n.tensor(0)
    if x.ndim < 2:
        raise n.error(f"the input must be at least 2-d, got shape {shape_of(x)}")
    k = n.scalar(1, "k") if n.has(1) else 0
    rows, cols = shape_of(x)[-2:]
    ones = np.ones((rows, cols), dtype=bool)
    mask = np.triu(ones, k) if n.flag("upper", 1) else np.tril(ones, k)
    return ops.where(n.pool.tensor(mask, n.label), x, zero_of(x.dtype))


# ----------------------------------------------------------------------------- constants

@converter("Shape", versions=(1, 25))
def shape(n: OnnxNode) -> np.ndarray:
    """Shape: the static shape as a constant (``start``/``end`` from version 15)."""
    dims = list(shape_of(n.input(0)))
    start, end = n.attr("start", 0), n.attr("end")
    return np.array(dims[start:end], dtype=np.int64)


@converter("Size", versions=(1, 25))
def size(n: OnnxNode) -> np.ndarray:
    """Size: the static element count as a constant."""
    return np.array(math.prod(shape_of(n.input(0))), dtype=np.int64)


@converter("Constant", versions=(1, 25))
def constant(n: OnnxNode) -> np.ndarray:
    """Constant: the tensor of its one value attribute."""
    for key, dtype in (("value", None), ("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        v = n.attr(key)
        if v is not None:
            return np.asarray(v) if dtype is None else np.asarray(v, dtype=dtype)
    given = ", ".join(n.attrs) or "none"
    raise n.error(f"holds no tensor taskloom can use (attributes: {given}; strings and sparse tensors are "
                  "not supported)")


@converter("ConstantOfShape", versions=(9, 25))
def constant_of_shape(n: OnnxNode) -> np.ndarray:
    """ConstantOfShape: a constant filled with ``value`` (default float32 0)."""
    dims = n.sizes(0, "shape") or []
    if any(isinstance(d, int) and d < 0 for d in dims):
        raise n.error(f"input 0 (shape) must hold non-negative sizes, got {dims}")
    value = n.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if any(isinstance(d, E.Expr) for d in dims):  # a symbolic size: the value broadcast, in the graph
        return ops.broadcast_to(n.as_tensor(np.array(fill[0], dtype=fill.dtype)), dims)
    return np.full(dims, fill[0], dtype=fill.dtype)


@converter("EyeLike", versions=(9, 22))
def eye_like(n: OnnxNode) -> np.ndarray:
    """EyeLike: ones on diagonal ``k`` of a constant of the input's 2-d shape."""
    shape = shape_of(n.required(0))
    if len(shape) != 2:
        raise n.error(f"the input must be 2-d, got shape {shape}")
    rows, cols = shape
    code = n.attr("dtype")
    dt = dtype_of(n.input(0)) if code is None else taskloom_dtype(code, f"{n.label}: 'dtype'")
    return np.eye(rows, cols, int(n.attr("k", 0)), dtype=dt.numpy)


@converter("Range", versions=(11, 27))
def range_(n: OnnxNode) -> np.ndarray:
    """Range: only with constant inputs (the node folds; this asks for them otherwise)."""
    if isinstance(n.input(1), Sizes):  # up to a symbolic size: recorded in the graph
        start, delta = n.scalar(0, "start"), n.scalar(2, "delta")
        [limit] = elements(n.input(1)).reshape(-1)
        return ops.arange(start, limit, delta, dtype=dtype_of(n.required(0)))
    # the output's size depends on the values, so they must be known (then the node folds)
    start, limit, delta = (n.const(k, what) for k, what in enumerate(("start", "limit", "delta")))
    if start is None or limit is None or delta is None:
        raise n.error("inputs 0, 1 and 2 (start, limit, delta) are required")
    if not delta.any():
        raise n.error("input 2 (delta) must not be 0")
    return np.arange(start, limit, delta).astype(np.asarray(start).dtype)


@converter("Dropout", versions=(7, 22))
def dropout(n: OnnxNode) -> list[Value]:
    """Dropout at inference: the identity, and an all-true mask where the model reads it."""
    x = n.input(0)
    training = n.scalar(2, "training_mode") if n.has(2) else False
    ratio = n.scalar(1, "ratio") if n.has(1) else n.attr("ratio", 0.5)
    if training and ratio:
        raise n.error("training_mode=True drops values at random; taskloom runs inference only "
                      "(export the model in eval mode)")
    outs: list[Value] = [x]
    if n.wants_output(1):
        outs.append(np.ones(shape_of(x), dtype=bool))
    return outs

