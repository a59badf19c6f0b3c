"""Converters of the ATen matrix products, convolution and pooling, the shape and copy
operators, and the operators that make constants shaped like a tensor, to taskloom ops."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from taskloom import ops
from taskloom.errors import FrontendError
from taskloom.frontend.torch_aten import Converter, aten, dtype_of, filled, register, torch_dtype, unavailable
from taskloom.frontend.torch_lower import batched_matmul as _torch_batched_matmul
from taskloom.graph.tensor import Tensor, asarray
from taskloom.ops.base import broadcast_shapes
from taskloom.ir import dtypes as T


# ----------------------------------------------------------------------------- matrix products

def _scaled(x: Any, factor: Any) -> Any:
    return x if factor == 1 else ops.mul(x, factor)


@register(aten.mm, aten.mv, aten.dot)
def mm(a: Tensor, b: Tensor) -> Tensor:
    return ops.matmul(a, b)


@register(_torch_batched_matmul._opoverload)
def batched_matmul(a: Tensor, b: Tensor) -> Tensor:
    return ops.matmul(a, b)


@register(aten.bmm)
def bmm(a: Tensor, b: Tensor) -> Tensor:
    return ops.batch_matmul(a, b)


@register(aten.addmm, aten.addmv)
def addmm(bias: Any, a: Tensor, b: Tensor, beta: Any = 1, alpha: Any = 1) -> Tensor:
    product = _scaled(ops.matmul(a, b), alpha)
    return product if beta == 0 else ops.add(product, _scaled(bias, beta))


@register(aten.baddbmm)
def baddbmm(bias: Any, a: Tensor, b: Tensor, beta: Any = 1, alpha: Any = 1) -> Tensor:
    product = _scaled(ops.batch_matmul(a, b), alpha)
    return product if beta == 0 else ops.add(product, _scaled(bias, beta))


@register(aten.convolution)
def convolution(x: Tensor, weight: Tensor, bias: Any, stride: Sequence[int], padding: Sequence[int],
                dilation: Sequence[int], transposed: bool, output_padding: Sequence[int], groups: int) -> Tensor:
    if transposed:
        raise FrontendError("transposed convolution (ConvTranspose) is not supported")
    spatial = weight.ndim - 2
    if spatial == 2:
        return ops.conv2d(x, weight, bias, tuple(stride), tuple(padding), tuple(dilation), groups)
    if spatial == 1:  # as a 2-d convolution over a height of 1
        out = ops.conv2d(ops.unsqueeze(x, -2), ops.unsqueeze(weight, -2), bias, (1, stride[0]),
                         (0, padding[0]), (1, dilation[0]), groups)
        return ops.squeeze(out, -2)
    raise FrontendError(f"{spatial}-d convolution is not supported (1-d and 2-d are)")


# ----------------------------------------------------------------------------- pooling

def _pair(v: Any) -> Any:
    return None if v is None or (isinstance(v, (list, tuple)) and not v) else tuple(v) if isinstance(v, (list, tuple)) else v


@register(aten.max_pool2d_with_indices)
def max_pool2d_with_indices(x: Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                            ceil_mode: bool = False) -> tuple:
    out = ops.max_pool2d(x, _pair(kernel_size), _pair(stride), _pair(padding), _pair(dilation), ceil_mode)
    return out, unavailable("the indices of max_pool2d_with_indices")


@register(aten.max_pool2d)
def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False) -> Tensor:
    return ops.max_pool2d(x, _pair(kernel_size), _pair(stride), _pair(padding), _pair(dilation), ceil_mode)


@register(aten.avg_pool2d)
def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: Any = None) -> Tensor:
    return ops.avg_pool2d(x, _pair(kernel_size), _pair(stride), _pair(padding), ceil_mode, count_include_pad,
                          divisor_override)


@register(aten._adaptive_avg_pool2d, aten.adaptive_avg_pool2d)
def adaptive_avg_pool2d(x: Tensor, output_size: Any) -> Tensor:
    size = tuple(output_size)
    if size == (1, 1):
        return ops.global_avg_pool2d(x) if x.ndim == 4 else ops.adaptive_avg_pool2d(x, 1)
    return ops.adaptive_avg_pool2d(x, size)


# ----------------------------------------------------------------------------- shapes and copies

def _identity(x: Any, *_: Any, **__: Any) -> Any:
    return x


register(aten.clone, aten.alias, aten.alias_copy, aten.detach, aten.detach_copy, aten.lift_fresh_copy,
         aten.contiguous)(_identity)


@register(aten.view, aten._unsafe_view, aten.reshape, aten.view_copy)
def view(x: Tensor, size: Sequence[int]) -> Tensor:
    return x if tuple(size) == tuple(x.shape) else ops.reshape(x, tuple(size))


@register(aten.permute, aten.permute_copy)
def permute(x: Tensor, dims: Sequence[int]) -> Tensor:
    order = tuple(d % max(x.ndim, 1) for d in dims)
    return x if order == tuple(range(x.ndim)) else ops.permute(x, order)


@register(aten.t, aten.t_copy)
def t(x: Tensor) -> Tensor:
    return x if x.ndim < 2 else ops.transpose(x, 0, 1)


@register(aten.transpose.int, aten.transpose_copy.int)
def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    return ops.transpose(x, dim0, dim1)


@register(aten.expand, aten.expand_copy)
def expand(x: Tensor, size: Sequence[int], implicit: bool = False) -> Tensor:
    same = len(size) == x.ndim and all(s in (-1, d) for s, d in zip(size, x.shape))
    return x if same else ops.expand(x, tuple(size))


@register(aten.unsqueeze, aten.unsqueeze_copy)
def unsqueeze(x: Tensor, dim: int) -> Tensor:
    return ops.unsqueeze(x, dim)


@register(aten.squeeze, aten.squeeze_copy)
def squeeze(x: Tensor, dim: Any = None) -> Tensor:
    if x.ndim == 0:
        return x
    axes = [d % x.ndim for d in ([dim] if isinstance(dim, int) else list(dim or range(x.ndim)))]
    keep = [a for a in axes if x.shape[a] == 1]  # torch ignores named dimensions that are not 1
    return ops.squeeze(x, keep) if keep else x


@register(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(x: Tensor, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> Tensor:
    if not all(isinstance(v, (int, type(None))) for v in (start, end, x.shape[dim])):  # symbolic
        return ops.slice(x, dim, start, end, step)
    whole = range(*slice(start, end, step).indices(int(x.shape[dim]))) == range(int(x.shape[dim]))
    return x if whole else ops.slice(x, dim, start, end, step)


@register(aten.select.int, aten.select_copy.int)
def select(x: Tensor, dim: int, index: int) -> Tensor:
    dim %= x.ndim
    size = x.shape[dim]
    if isinstance(size, int) or index < 0:  # (a non-negative index into a symbolic size stays)
        index = index % size if isinstance(size, int) else size + index
    return ops.squeeze(ops.slice(x, dim, index, index + 1), dim)


@register(aten.cat)
def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    live = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)]  # torch skips legacy empty 1-d
    dt = live[0].dtype
    for t in live[1:]:
        dt = ops.result_type(dt, t.dtype)
    live = [t if t.dtype == dt else ops.cast(t, dt) for t in live]
    return live[0] if len(live) == 1 else ops.concat(live, dim)


@register(aten.split_with_sizes, aten.split_with_sizes_copy, aten.split.sizes)
def split_with_sizes(x: Tensor, split_sizes: Sequence[int], dim: int = 0) -> tuple:
    return tuple(ops.split(x, list(split_sizes), dim))


@register(aten.split.Tensor, aten.split_copy.Tensor)
def split(x: Tensor, split_size: int, dim: int = 0) -> tuple:
    return tuple(ops.split(x, int(split_size), dim))


@register(aten.unbind.int, aten.unbind_copy.int)
def unbind(x: Tensor, dim: int = 0) -> tuple:
    return tuple(ops.squeeze(p, dim) for p in ops.split(x, 1, dim))


@register(aten.index_select)
def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    return ops.index_select(x, dim, index)


@register(aten.gather)
def gather(x: Tensor, dim: int, index: Tensor, sparse_grad: bool = False) -> Tensor:
    return ops.gather(x, dim, index)


@register(aten.embedding)
def embedding(weight: Tensor, indices: Tensor, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    return ops.embedding(indices, weight)


def _coordinates(x: Tensor, indices: Sequence[Any], op: str) -> tuple[Tensor, Tensor, int, list[int] | None]:
    """``(x, coords, first, order)`` for advanced indexing ``x[..., i, j, ...]`` with integer
    index tensors: the index tensors broadcast together and stacked on a last axis, and the
    axis of ``x`` where the indexed axes start; indexed axes that ``:`` separates are moved
    to the front first, and ``order`` is that permutation (None when none was needed)."""
    given = [k for k, i in enumerate(indices) if i is not None]
    if not given or any(indices[k].dtype.is_bool() for k in given):
        raise FrontendError(f"{op}: indexing with a boolean mask is not supported (the result's "
                            "shape depends on the data); use torch.where instead")
    first, order = given[0], None
    if given != list(range(given[0], given[-1] + 1)):  # separated by ':' -> torch puts them first
        order = given + [d for d in range(x.ndim) if d not in given]
        x, first = ops.permute(x, order), 0
    shape = broadcast_shapes(op, *[tuple(indices[k].shape) for k in given])
    columns = [ops.unsqueeze(ops.broadcast_to(ops.cast(indices[k], T.int64), shape), -1) for k in given]
    return x, (columns[0] if len(columns) == 1 else ops.concat(columns, -1)), first, order


def _last_first(t: Tensor, k: int) -> Tensor:
    """``t`` with its last ``k`` axes moved to the front."""
    return t if k == 0 else ops.permute(t, [*range(t.ndim - k, t.ndim), *range(t.ndim - k)])


def _indexed_first(x: Tensor, first: int) -> Tensor:
    """``x`` with its first ``first`` axes moved to the back, so the indexed axes lead."""
    return x if first == 0 else ops.permute(x, [*range(first, x.ndim), *range(first)])


@register(aten.index.Tensor, aten._unsafe_index.Tensor)
def index(x: Tensor, indices: Sequence[Any]) -> Tensor:
    """Advanced indexing ``x[..., i, j, ...]`` with integer index tensors (broadcast together,
    negative entries counting from the end) as one ``gather_nd``, each coordinate checked
    against its own dimension. Boolean masks are refused: their result's shape depends on
    the data."""
    x, coords, first, _ = _coordinates(x, indices, "index.Tensor")
    # (index dims, tail, leading axes) -> torch's (leading axes, index dims, tail)
    return _last_first(ops.gather_nd(_indexed_first(x, first), coords, wrap=True), first)


@register(aten.index_put.default, aten.index_put_.default, aten._unsafe_index_put.default)
def index_put(x: Tensor, indices: Sequence[Any], values: Tensor, accumulate: bool = False) -> Tensor:
    """``x[..., i, j, ...] = values`` (``+=`` with ``accumulate``) as one ``scatter_nd``;
    values broadcast to the indexed shape as torch broadcasts them."""
    x, coords, first, order = _coordinates(x, indices, "index_put")
    moved = _indexed_first(x, first)  # (indexed, tail, leading axes)
    q = coords.shape[-1]
    tail = tuple(moved.shape[q:moved.ndim - first])
    v = ops.cast(values, x.dtype) if values.dtype != x.dtype else values
    # torch's values are shaped (leading axes, index dims, tail); scatter_nd's (index dims, tail, leading)
    v = ops.broadcast_to(v, (*x.shape[:first], *coords.shape[:-1], *tail))
    v = ops.permute(v, [*range(first, v.ndim), *range(first)]) if first else v
    out = _last_first(ops.scatter_nd(moved, coords, v, "add" if accumulate else None, wrap=True), first)
    return out if order is None else ops.permute(out, [order.index(d) for d in range(out.ndim)])


_TORCH_REDUCTIONS = {"sum": "add", "add": "add", "prod": "mul", "multiply": "mul", "amax": "max", "amin": "min"}


@register(aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce,
          aten.scatter_.src, aten.scatter_.value)
def scatter(x: Tensor, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:
    if not isinstance(src, Tensor):
        src = filled(index.shape, src, None, "scatter")
    src = ops.cast(src, x.dtype) if src.dtype != x.dtype else src
    return ops.scatter(x, dim, index, src, _TORCH_REDUCTIONS[reduce] if reduce else None, wrap=True)


@register(aten.scatter_add)
def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return ops.scatter(x, dim, index, src, "add", wrap=True)


@register(aten.scatter_reduce.two)
def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str,
                   include_self: bool = True) -> Tensor:
    if reduce not in _TORCH_REDUCTIONS or not include_self:
        raise FrontendError(f"scatter_reduce: reduce={reduce!r} with include_self={include_self} is not "
                            f"supported (supported: {', '.join(sorted(_TORCH_REDUCTIONS))} with include_self=True)")
    return ops.scatter(x, dim, index, src, _TORCH_REDUCTIONS[reduce], wrap=True)


@register(aten.flip)
def flip(x: Tensor, dims: Sequence[int]) -> Tensor:
    for d in dims:
        n = int(x.shape[d])
        if n > 1:
            x = ops.index_select(x, d, asarray(np.arange(n - 1, -1, -1, dtype=np.int64)))
    return x


@register(aten.constant_pad_nd)
def constant_pad_nd(x: Tensor, pad: Sequence[int], value: Any = 0) -> Tensor:
    return ops.pad(x, list(pad), value)


@register(aten.repeat)
def repeat(x: Tensor, repeats: Sequence[int]) -> Tensor:
    return ops.repeat(x, tuple(repeats))


def _triangle(x: Tensor, diagonal: int, upper: bool) -> Tensor:
    rows, cols = int(x.shape[-2]), int(x.shape[-1])
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    keep = offset >= diagonal if upper else offset <= diagonal
    return ops.where(asarray(keep), x, 0)


@register(aten.tril)
def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(x, diagonal, upper=False)


@register(aten.triu)
def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(x, diagonal, upper=True)


@register(aten.copy)
def copy(dst: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    """The functional form of ``dst.copy_(src)``: ``src`` in ``dst``'s shape and dtype."""
    src = ops.cast(src, dst.dtype)
    return src if tuple(src.shape) == tuple(dst.shape) else ops.expand(src, tuple(dst.shape))


@register(aten.native_dropout)
def native_dropout(x: Tensor, p: float, train: Any) -> tuple:
    if train and p > 0:
        raise FrontendError("dropout in training mode is not supported: call model.eval() before compiling")
    return x, (lambda: asarray(np.ones(tuple(x.shape), np.bool_)))


# ----------------------------------------------------------------------------- constants shaped like a tensor

def _like(fill: Any) -> Converter:
    def convert(x: Tensor, *args: Any, dtype: Any = None, **_: Any) -> Tensor:
        value = args[0] if fill is None else fill
        return filled(x.shape, value, dtype if dtype is not None else torch_dtype(x.dtype), "full_like")
    return convert


register(aten.full_like)(_like(None))
register(aten.zeros_like, aten.empty_like)(_like(0))
register(aten.ones_like)(_like(1))


def _new(fill: Any) -> Converter:
    def convert(x: Tensor, size: Sequence[int], *args: Any, dtype: Any = None, **_: Any) -> Tensor:
        value = args[0] if fill is None else fill
        return filled(size, value, dtype if dtype is not None else torch_dtype(x.dtype), "new_full")
    return convert


register(aten.new_full)(_new(None))
register(aten.new_zeros, aten.new_empty, aten.new_empty_strided)(_new(0))
register(aten.new_ones)(_new(1))


@register(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(*args: Any, dtype: Any = None, **_: Any) -> Tensor:
    """An arange up to a symbolic size (one with constant bounds is folded by torch)."""
    return ops.arange(*args, dtype=dtype_of(dtype) if dtype is not None else None)


@register(aten.fill.Scalar, aten.fill.Tensor)
def fill(x: Tensor, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return ops.expand(ops.cast(value, x.dtype), tuple(x.shape))
    return filled(x.shape, value, torch_dtype(x.dtype), "fill")


@register(aten.sym_size.int)
def sym_size(x: Tensor, dim: int) -> int:
    return int(x.shape[dim])


@register(aten.sym_numel)
def sym_numel(x: Tensor) -> int:
    return math.prod(int(d) for d in x.shape)


@register(aten._assert_tensor_metadata, aten._assert_async, aten._assert_scalar)
def assert_metadata(*_: Any, **__: Any) -> None:
    return None
