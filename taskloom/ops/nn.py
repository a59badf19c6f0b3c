"""Neural-network operators: matrix products, 2-D convolution and 2-D pooling.

Every operator here is defined as a reduction: ``matmul`` sums ``a[..., i, k] * b[..., k, j]``
over ``k``; ``conv2d`` sums ``padded_input * weight`` over (input channel of the group, kernel
row, kernel column); the pools reduce over their window. Padding is never materialized: a
read of the padded input is a ``select`` on the input coordinates (the element inside the
input, the pad value outside). Layout is NCHW (an unbatched CHW input is accepted too), and
shapes, output sizes and the ``ceil_mode`` rule follow torch.

Half-precision inputs (float16, bfloat16) are accumulated in float32 and the result is
rounded once at the end, as torch does on the CPU.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from taskloom.errors import OpError
from taskloom.graph.tensor import Tensor
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir.compute import compute, reduce
from taskloom.ops.base import apply, as_tensor, broadcast_index, is_unit

__all__ = ["matmul", "batch_matmul", "linear", "conv2d", "max_pool2d", "avg_pool2d",
           "adaptive_avg_pool2d", "global_avg_pool2d", "global_max_pool2d"]

Dim = Any  # an int or a symbolic expression


# ----------------------------------------------------------------------------- helpers

def _acc_type(dt: T.DataType) -> T.DataType:
    """The type sums are accumulated in: float32 for half-precision floats, else ``dt``."""
    return T.float32 if dt.is_float() and dt.nbytes < 4 else dt


def _check_numeric(op: str, arg: str, t: Tensor, float_only: bool = False) -> None:
    ok = t.dtype.is_float() if float_only else (t.dtype.is_float() or t.dtype.is_integer())
    if not ok:
        want = "a floating-point dtype" if float_only else "a numeric dtype (float or int)"
        raise OpError(f"{op}(): '{arg}' has dtype {t.dtype.name}; expected {want}")


def _check_same_dtype(op: str, arg: str, t: Tensor, ref: Tensor, ref_arg: str) -> None:
    if t.dtype != ref.dtype:
        raise OpError(f"{op}(): '{arg}' has dtype {t.dtype.name} but '{ref_arg}' has {ref.dtype.name}; "
                      f"cast one of them so both have the same dtype")


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _ints(op: str, arg: str, v: Any, n: int, minimum: int) -> tuple[int, ...]:
    """``v`` (an int, or a sequence of ``n`` ints) as ``n`` ints, each at least ``minimum``."""
    items = [v] * n if _is_int(v) else list(v) if isinstance(v, (tuple, list)) else None
    if items is None or len(items) != n or not all(_is_int(x) for x in items):
        raise OpError(f"{op}(): '{arg}' must be an int or a sequence of {n} ints, got {v!r}")
    out = tuple(int(x) for x in items)
    if any(x < minimum for x in out):
        raise OpError(f"{op}(): '{arg}'={v!r} must be >= {minimum}")
    return out


def _spatial_input(op: str, x: Any, layout: str = "NCHW") -> Tensor:
    """An NCHW (or unbatched CHW) input; NHWC (or HWC) with ``layout="NHWC"``."""
    x = as_tensor(op, "x", x)
    if x.ndim not in (3, 4):
        dims = "(N, H, W, C) or 3-d (H, W, C)" if layout == "NHWC" else "(N, C, H, W) or 3-d (C, H, W)"
        raise OpError(f"{op}(): 'x' must be 4-d {dims}, got shape {tuple(x.shape)}")
    return x


def _min(a: Dim, b: Dim) -> Dim:
    return min(a, b) if isinstance(a, int) and isinstance(b, int) else E.minimum(a, b)


def _max(a: Dim, b: Dim) -> Dim:
    return max(a, b) if isinstance(a, int) and isinstance(b, int) else E.maximum(a, b)


def _window_index(out: E.Expr, stride: int, pad: int, k: E.Expr, dilation: int) -> E.Expr:
    """``out * stride - pad + k * dilation``: the input coordinate a window element reads."""
    idx = out * stride if stride != 1 else out
    if pad:
        idx = idx - pad
    return idx + (k * dilation if dilation != 1 else k)


def window_element(X: Any, index: Callable[[E.Expr, E.Expr], tuple], oy: E.Expr, ox: E.Expr, ky: E.Expr,
                   kx: E.Expr, size: tuple[Dim, Dim], stride: tuple[int, int],
                   padding: tuple[int, int, int, int], dilation: tuple[int, int], acc: T.DataType) -> E.Expr:
    """What a convolution's window element ``(ky, kx)`` of output pixel ``(oy, ox)`` reads of
    ``X`` (``index(iy, ix)``: its whole index at input pixel ``(iy, ix)``) as ``acc``; zero
    in the padding (``(top, bottom, left, right)``) around the input's ``size``."""
    (sh, sw), (pt, pb, pl, pr), (dh, dw), (h, w) = stride, padding, dilation, size
    iy, ix = _window_index(oy, sh, pt, ky, dh), _window_index(ox, sw, pl, kx, dw)
    inside = ([0 <= iy] if pt else []) + ([iy < h] if pb else []) + ([0 <= ix] if pl else []) + ([ix < w] if pr else [])
    v = E.cast(X[index(iy, ix)], acc)
    return E.select(E.logical_and(*inside), v, E.const(0.0, acc)) if inside else v


def _pool_out_size(size: Dim, k: int, s: int, p: int, d: int, ceil_mode: bool) -> Dim:
    """torch's pooled size: the windows that fit, rounded down (or up with ``ceil_mode``, but
    then a last window must start inside the input or its left padding).

    With ``ceil_mode`` the size is ``min(ceil((size + 2p - span) / s), floor((size + p - 1) / s)) + 1``
    (torch drops the rounded-up window that starts at or past ``size + p``, which removes
    at most one window when padding is at most half the kernel, as is checked); since
    ``floor((size + c) / s)`` grows with ``c``, the min moves onto the constant offsets and
    the size stays a plain integer expression of ``size``.
    """
    span = d * (k - 1) + 1
    offset = 2 * p - span
    if ceil_mode:
        offset = min(offset + s - 1, p - 1)
    return (size + offset) // s + 1


# ----------------------------------------------------------------------------- matrix products

def matmul(a: Any, b: Any) -> Tensor:
    """Matrix product with numpy/torch ``matmul`` semantics.

    Both 2-d or more: the last two axes multiply (``(..., M, K) @ (..., K, N) -> (..., M, N)``)
    and the leading (batch) axes broadcast. A 1-d ``a`` acts as a row vector and a 1-d
    ``b`` as a column vector, whose axis is then dropped from the result, so two 1-d
    operands give their dot product as a 0-d tensor. Both operands must have the same
    numeric dtype. Example: ``matmul(ones((2, 1, 3, 4)), ones((5, 4, 6))).shape == (2, 5, 3, 6)``.
    """
    op = "matmul"
    if not isinstance(a, Tensor) and isinstance(b, Tensor):
        a = as_tensor(op, "a", a, like=b)
    a = as_tensor(op, "a", a)
    b = as_tensor(op, "b", b, like=a)
    for arg, t in (("a", a), ("b", b)):
        if t.ndim == 0:
            raise OpError(f"{op}(): '{arg}' is 0-d; matmul needs at least 1-d operands (use mul for scalars)")
        _check_numeric(op, arg, t)
    _check_same_dtype(op, "b", b, a, "a")
    ka = a.shape[-1]
    kb = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if ka != kb:
        where = "its only axis" if b.ndim == 1 else "axis -2"
        raise OpError(f"{op}(): inner dimensions differ: 'a' {tuple(a.shape)} has {ka} along its last axis "
                      f"but 'b' {tuple(b.shape)} has {kb} along {where}; they must be equal")
    _batch_shape(op, a.shape[:-2], b.shape[:-2])

    def build(A, B):
        a_row, b_col = len(A.shape) == 1, len(B.shape) == 1
        a_batch = () if a_row else tuple(A.shape[:-2])
        b_batch = () if b_col else tuple(B.shape[:-2])
        batch = _batch_shape(op, a_batch, b_batch)
        nb = len(batch)
        shape = [*batch] + ([] if a_row else [A.shape[-2]]) + ([] if b_col else [B.shape[-1]])
        acc = _acc_type(A.dtype)

        def fn(*idx):
            bidx = idx[:nb]
            i = None if a_row else idx[nb]
            j = None if b_col else idx[-1]

            def term(k):
                x = A[k] if a_row else A[(*broadcast_index(a_batch, nb, bidx), i, k)]
                y = B[k] if b_col else B[(*broadcast_index(b_batch, nb, bidx), k, j)]
                return E.cast(x, acc) * E.cast(y, acc)
            return E.cast(reduce([A.shape[-1]], term, "sum"), A.dtype)
        return compute(op, shape, fn)
    return apply(op, [a, b], ["a", "b"], build)[0]


def _batch_shape(op: str, sa: Sequence[Dim], sb: Sequence[Dim]) -> tuple[Dim, ...]:
    """The broadcast of the batch axes of ``a`` and ``b``; an error names both operands."""
    nd = max(len(sa), len(sb))
    out: list[Dim] = []
    for k in range(nd):
        da = sa[len(sa) - nd + k] if len(sa) - nd + k >= 0 else 1
        db = sb[len(sb) - nd + k] if len(sb) - nd + k >= 0 else 1
        if is_unit(da):
            out.append(db)
        elif is_unit(db) or da == db:
            out.append(da)
        else:
            raise OpError(f"{op}(): the batch axes of 'a' {tuple(sa)} and 'b' {tuple(sb)} cannot be broadcast "
                          f"together (batch axis {k - nd} is {da} and {db}; each must be equal or 1)")
    return tuple(out)


def batch_matmul(a: Any, b: Any, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
    """Batched matrix product of 3-d operands: ``out[n] = op(a[n]) @ op(b[n])``.

    ``a`` is (B, M, K), or (B, K, M) with ``transpose_a``; ``b`` is (B, K, N), or (B, N, K)
    with ``transpose_b``; the result is (B, M, N). A batch size of 1 broadcasts against the
    other operand's. Both operands must have the same numeric dtype. Example: attention
    scores are ``batch_matmul(q, k, transpose_b=True)`` for q, k of shape (B, S, D).
    """
    op = "batch_matmul"
    a = as_tensor(op, "a", a)
    b = as_tensor(op, "b", b, like=a)
    for arg, t in (("a", a), ("b", b)):
        if t.ndim != 3:
            raise OpError(f"{op}(): '{arg}' must be 3-d (batch, rows, columns), got shape {tuple(t.shape)}")
        _check_numeric(op, arg, t)
    for arg, v in (("transpose_a", transpose_a), ("transpose_b", transpose_b)):
        if not isinstance(v, bool):
            raise OpError(f"{op}(): '{arg}' must be a bool, got {v!r}")
    _check_same_dtype(op, "b", b, a, "a")
    ka = a.shape[1] if transpose_a else a.shape[2]
    kb = b.shape[2] if transpose_b else b.shape[1]
    if ka != kb:
        raise OpError(f"{op}(): inner dimensions differ: 'a' {tuple(a.shape)} gives K={ka} "
                      f"(transpose_a={transpose_a}) but 'b' {tuple(b.shape)} gives K={kb} "
                      f"(transpose_b={transpose_b}); they must be equal")
    _batch_shape(op, a.shape[:1], b.shape[:1])

    def build(A, B):
        (batch,) = _batch_shape(op, A.shape[:1], B.shape[:1])
        m = A.shape[2] if transpose_a else A.shape[1]
        n = B.shape[1] if transpose_b else B.shape[2]
        k_ext = A.shape[1] if transpose_a else A.shape[2]
        acc = _acc_type(A.dtype)
        ba = (lambda p: 0) if is_unit(A.shape[0]) else (lambda p: p)
        bb = (lambda p: 0) if is_unit(B.shape[0]) else (lambda p: p)

        def fn(p, i, j):
            def term(k):
                x = A[ba(p), k, i] if transpose_a else A[ba(p), i, k]
                y = B[bb(p), j, k] if transpose_b else B[bb(p), k, j]
                return E.cast(x, acc) * E.cast(y, acc)
            return E.cast(reduce([k_ext], term, "sum"), A.dtype)
        return compute(op, [batch, m, n], fn)
    return apply(op, [a, b], ["a", "b"], build,
                 {"transpose_a": transpose_a, "transpose_b": transpose_b})[0]


def linear(x: Any, weight: Any, bias: Any = None) -> Tensor:
    """Affine map as in torch: ``out = x @ weight.T + bias``.

    ``x`` is (..., in_features) with any leading axes (or 1-d), ``weight`` is
    (out_features, in_features) and ``bias``, if given, (out_features,); the result is
    (..., out_features). All operands share one numeric dtype. Example: ``linear(x, w, b)``
    for x (8, 768), w (3072, 768), b (3072,) gives (8, 3072).
    """
    op = "linear"
    x = as_tensor(op, "x", x)
    weight = as_tensor(op, "weight", weight, like=x)
    if x.ndim < 1:
        raise OpError(f"{op}(): 'x' must be at least 1-d (..., in_features), got a 0-d tensor")
    if weight.ndim != 2:
        raise OpError(f"{op}(): 'weight' must be 2-d (out_features, in_features), got shape {tuple(weight.shape)}")
    _check_numeric(op, "x", x)
    _check_same_dtype(op, "weight", weight, x, "x")
    if weight.shape[1] != x.shape[-1]:
        raise OpError(f"{op}(): 'weight' {tuple(weight.shape)} takes {weight.shape[1]} input features but 'x' "
                      f"{tuple(x.shape)} has {x.shape[-1]} along its last axis; they must be equal")
    inputs, names = [x, weight], ["x", "weight"]
    if bias is not None:
        bias = as_tensor(op, "bias", bias, like=x)
        _check_same_dtype(op, "bias", bias, x, "x")
        if tuple(bias.shape) != (weight.shape[0],):
            raise OpError(f"{op}(): 'bias' must have shape ({weight.shape[0]},) (out_features), "
                          f"got {tuple(bias.shape)}")
        inputs.append(bias)
        names.append("bias")

    def build(X, W, Bias=None):
        lead = tuple(X.shape[:-1])
        acc = _acc_type(X.dtype)

        def fn(*idx):
            *ls, o = idx
            s = reduce([X.shape[-1]], lambda k: E.cast(X[(*ls, k)], acc) * E.cast(W[o, k], acc), "sum")
            if Bias is not None:
                s = s + E.cast(Bias[o], acc)
            return E.cast(s, X.dtype)
        return compute(op, [*lead, W.shape[0]], fn)
    return apply(op, inputs, names, build)[0]


# ----------------------------------------------------------------------------- layouts

#: The spatial layouts convolutions and pooling take: channels before the rows (NCHW, as
#: torch and ONNX) or after the columns (NHWC: a pixel's channels are contiguous, so a
#: convolution's window packs by vectors of channels and pooling vectorizes over channels).
LAYOUTS = ("NCHW", "NHWC")


def _layout_arg(op: str, layout: Any) -> str:
    if layout not in LAYOUTS:
        raise OpError(f"{op}(): 'layout'={layout!r} is not a layout; use one of {LAYOUTS}")
    return layout


def _spatial_dims(X: Any, layout: str) -> tuple[list, Dim, Dim]:
    """(leading dims without the channel's position, H, W) of a placeholder in ``layout``."""
    if layout == "NHWC":
        *lead, H, W, C = X.shape
        return [*lead, C], H, W
    *lead, H, W = X.shape
    return lead, H, W


def _at(lead: Sequence[E.Expr], iy: E.Expr, ix: E.Expr, layout: str) -> tuple:
    """The index of pixel (iy, ix) of channel ``lead[-1]`` (batch before it) in ``layout``."""
    return (*lead, iy, ix) if layout == "NCHW" else (*lead[:-1], iy, ix, lead[-1])


def _spatial_compute(op: str, lead_shape: list, oh: Dim, ow: Dim, fn: Callable, layout: str):
    """The (convolved or pooled) tensor in ``layout``; ``fn(lead, oy, ox)`` gives an
    element, ``lead`` being the batch and channel indices."""
    if layout == "NHWC":
        return compute(op, [*lead_shape[:-1], oh, ow, lead_shape[-1]],
                       lambda *i: fn((*i[:-3], i[-1]), i[-3], i[-2]))
    return compute(op, [*lead_shape, oh, ow], lambda *i: fn(i[:-2], i[-2], i[-1]))


def _layout_attrs(attrs: dict, layout: str) -> dict:
    """NCHW operators keep the attributes (and so the record keys) they always had."""
    return attrs if layout == "NCHW" else {**attrs, "layout": layout}


# ----------------------------------------------------------------------------- convolution

def _conv_padding(op: str, padding: Any, kernel: tuple[int, int], dilation: tuple[int, int],
                  stride: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) from an int, a pair (rows, columns), a 4-tuple, or a string."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding == "same":
            if stride != (1, 1):
                raise OpError(f"{op}(): 'padding'='same' needs stride 1, got stride {stride}")
            out = []
            for k, d in zip(kernel, dilation):
                total = d * (k - 1)
                out += [total // 2, total - total // 2]  # the odd pixel goes to the bottom/right, as torch
            return tuple(out)  # type: ignore[return-value]
        raise OpError(f"{op}(): 'padding'={padding!r} is not a padding; use an int, a pair, "
                      "a 4-tuple (top, bottom, left, right), 'valid' or 'same'")
    if isinstance(padding, (tuple, list)) and len(padding) == 4:
        return _ints(op, "padding", padding, 4, 0)  # type: ignore[return-value]
    ph, pw = _ints(op, "padding", padding, 2, 0)
    return (ph, ph, pw, pw)


def conv2d(x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1, layout: str = "NCHW") -> Tensor:
    """2-D convolution (cross-correlation, as torch) of an NCHW (or NHWC) input.

    ``x`` is (N, C, H, W) or unbatched (C, H, W); ``weight`` is (O, C // groups, KH, KW);
    ``bias`` (O,). ``stride`` and ``dilation`` are an int or a pair (rows, columns);
    ``padding`` is an int, a pair (rows, columns) padded on both sides, an asymmetric
    4-tuple in the order **(top, bottom, left, right)** (note: ``torch.nn.functional.pad``
    orders it (left, right, top, bottom)), or 'valid' / 'same'. ``groups`` splits the
    channels: output channel ``o`` sees input channels of group ``o // (O // groups)``;
    ``groups == C`` with ``O == C`` is a depthwise convolution. Padding reads as zero.
    Example: ``conv2d(x, w, padding=1)`` for x (1, 64, 56, 56), w (64, 64, 3, 3) gives
    (1, 64, 56, 56).

    With ``layout="NHWC"`` the input is (N, H, W, C) or (H, W, C), the weight
    (KH, KW, C // groups, O) and the result (N, OH, OW, O): the layout the graph compiler
    picks for the CPU (:mod:`taskloom.compiler.passes.layout`), where the sum runs over a
    pixel's contiguous channels.
    """
    op = "conv2d"
    layout = _layout_arg(op, layout)
    nhwc = layout == "NHWC"
    x = _spatial_input(op, x, layout)
    weight = as_tensor(op, "weight", weight, like=x)
    _check_numeric(op, "x", x, float_only=True)
    _check_same_dtype(op, "weight", weight, x, "x")
    w_layout = "(KH, KW, in_channels / groups, out_channels)" if nhwc else "(out_channels, in_channels / groups, KH, KW)"
    if weight.ndim != 4:
        raise OpError(f"{op}(): 'weight' must be 4-d {w_layout}, got shape {tuple(weight.shape)}")
    if not _is_int(groups) or groups < 1:
        raise OpError(f"{op}(): 'groups' must be a positive int, got {groups!r}")
    groups = int(groups)
    sh, sw = _ints(op, "stride", stride, 2, 1)
    dh, dw = _ints(op, "dilation", dilation, 2, 1)
    if nhwc:
        h, w, c_in = x.shape[-3:]
        kh, kw, c_per_group, c_out = weight.shape
    else:
        c_in, h, w = x.shape[-3:]
        c_out, c_per_group, kh, kw = weight.shape
    if c_in % groups:
        raise OpError(f"{op}(): 'groups'={groups} does not divide the {c_in} input channels of 'x' "
                      f"{tuple(x.shape)}")
    if c_out % groups:
        raise OpError(f"{op}(): 'groups'={groups} does not divide the {c_out} output channels of 'weight' "
                      f"{tuple(weight.shape)}")
    if c_per_group * groups != c_in:
        raise OpError(f"{op}(): 'weight' {tuple(weight.shape)} takes {c_per_group} input channels per group, "
                      f"but 'x' has {c_in} channels in {groups} group(s): expected {c_in // groups}")
    if kh < 1 or kw < 1:
        raise OpError(f"{op}(): 'weight' has an empty kernel {kh}x{kw}")
    if isinstance(h, E.Expr) or isinstance(w, E.Expr):
        raise OpError(f"{op}(): the height and width of 'x' {tuple(x.shape)} must be fixed sizes (only its "
                      "batch may be symbolic): compile for the image size the model takes")
    pt, pb, pl, pr = _conv_padding(op, padding, (kh, kw), (dh, dw), (sh, sw))
    for axis, size, lo, hi, k, d in (("height", h, pt, pb, kh, dh), ("width", w, pl, pr, kw, dw)):
        if d * (k - 1) + 1 > size + lo + hi:
            raise OpError(f"{op}(): the kernel of 'weight' spans {d * (k - 1) + 1} along the {axis} "
                          f"(size {k}, dilation {d}), more than the padded input ({size} + {lo} + {hi}); "
                          "use a smaller kernel or dilation, or more padding")
    inputs, names = [x, weight], ["x", "weight"]
    if bias is not None:
        bias = as_tensor(op, "bias", bias, like=x)
        _check_same_dtype(op, "bias", bias, x, "x")
        if tuple(bias.shape) != (c_out,):
            raise OpError(f"{op}(): 'bias' must have shape ({c_out},) (out_channels), got {tuple(bias.shape)}")
        inputs.append(bias)
        names.append("bias")
    batched = x.ndim == 4

    def build(X, W, Bias=None):
        _, H, Wd = _spatial_dims(X, layout)
        if nhwc:
            KH, KW, Cg, O = W.shape
        else:
            O, Cg, KH, KW = W.shape
        oh = (H + (pt + pb) - ((KH - 1) * dh + 1)) // sh + 1
        ow = (Wd + (pl + pr) - ((KW - 1) * dw + 1)) // sw + 1
        acc = _acc_type(X.dtype)

        def value(lead, o, oy, ox, group=None):
            if group is None:
                group = 0 if groups == 1 else o // (O // groups)
            first = group * Cg  # the first input channel of o's group

            def term(c, ky, kx):
                ci = c if groups == 1 else first + c
                v = window_element(X, lambda iy, ix: _at((*lead, ci), iy, ix, layout), oy, ox, ky, kx, (H, Wd),
                                   (sh, sw), (pt, pb, pl, pr), (dh, dw), acc)
                return v * E.cast(W[(ky, kx, c, o) if nhwc else (o, c, ky, kx)], acc)
            if nhwc:  # the channel innermost: the sum walks a pixel's contiguous channels
                s = reduce([KH, KW, Cg], lambda ky, kx, c: term(c, ky, kx), "sum")
            else:
                s = reduce([Cg, KH, KW], term, "sum")
            if Bias is not None:
                s = s + E.cast(Bias[o], acc)
            return E.cast(s, X.dtype)
        lead_shape = [X.shape[0]] if batched else []
        per_group = c_out // groups  # a Python int, whatever symbols the eager placeholders hold
        if groups > 1 and per_group > 1 and not nhwc:
            # a batch of matmuls, one a group: computed over (batch, group, channel of the
            # group, y, x), which the matmul template reads as a batched contraction, and
            # read back as (batch, channel, y, x) by a reshape that fuses as its epilogue
            nb = len(lead_shape)
            grouped = compute(f"{op}_groups", [*lead_shape, groups, per_group, oh, ow],
                              lambda *i: value(i[:nb], i[nb] * per_group + i[nb + 1], i[-2], i[-1], i[nb]))
            return compute(op, [*lead_shape, O, oh, ow],
                           lambda *i: grouped[(*i[:nb], i[nb] // per_group, i[nb] % per_group, i[-2], i[-1])])
        return _spatial_compute(op, [*lead_shape, O], oh, ow,
                                lambda lead, oy, ox: value(lead[:-1], lead[-1], oy, ox), layout)
    attrs = {"stride": (sh, sw), "padding": (pt, pb, pl, pr), "dilation": (dh, dw), "groups": groups}
    return apply(op, inputs, names, build, _layout_attrs(attrs, layout))[0]


# ----------------------------------------------------------------------------- pooling

def _pool_args(op: str, x: Tensor, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
               ceil_mode: bool, layout: str = "NCHW") -> tuple[tuple[int, int], ...]:
    """Validated (kernel, stride, padding, dilation) pairs; the output must not be empty."""
    k = _ints(op, "kernel_size", kernel_size, 2, 1)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) \
        else _ints(op, "stride", stride, 2, 1)
    p = _ints(op, "padding", padding, 2, 0)
    d = _ints(op, "dilation", dilation, 2, 1)
    if not isinstance(ceil_mode, bool):
        raise OpError(f"{op}(): 'ceil_mode' must be a bool, got {ceil_mode!r}")
    for pi, ki in zip(p, k):
        if pi > ki // 2:
            raise OpError(f"{op}(): 'padding'={padding!r} must be at most half of 'kernel_size'="
                          f"{kernel_size!r} (each padding <= kernel // 2)")
    hw = x.shape[-3:-1] if layout == "NHWC" else x.shape[-2:]
    for axis, size, ki, si, pi, di in zip(("height", "width"), hw, k, s, p, d):
        out = _pool_out_size(size, ki, si, pi, di, ceil_mode)
        if out < 1:
            raise OpError(f"{op}(): the window of 'kernel_size'={kernel_size!r} (dilation {di}, padding {pi}) "
                          f"does not fit the {axis} {size} of 'x' {tuple(x.shape)}; the output would be empty")
    return k, s, p, d  # type: ignore[return-value]


def _inside(coords: Sequence[tuple[E.Expr, Dim, bool, bool]]) -> list[E.Expr]:
    """Bounds checks of window coordinates: (coordinate, size, may be below 0, may pass the end)."""
    out: list[E.Expr] = []
    for c, size, low, high in coords:
        if low:
            out.append(0 <= c)
        if high:
            out.append(c < size)
    return out


def max_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, layout: str = "NCHW") -> Tensor:
    """2-D max pooling of an NCHW (or CHW) input, with torch semantics.

    ``kernel_size``, ``stride`` (default: the kernel size), ``padding`` (symmetric, at most
    half the kernel) and ``dilation`` are an int or a pair (rows, columns). Padding never
    wins the max. With ``ceil_mode`` the output size rounds up, but a last window must
    start inside the input or its left/top padding. Example: ``max_pool2d(x, 3, 2, 1)``
    halves a 112x112 map to 56x56. ``layout="NHWC"`` pools an (N, H, W, C) input.
    """
    op = "max_pool2d"
    layout = _layout_arg(op, layout)
    x = _spatial_input(op, x, layout)
    _check_numeric(op, "x", x, float_only=True)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _pool_args(op, x, kernel_size, stride, padding, dilation,
                                                        ceil_mode, layout)

    def build(X):
        lead_shape, H, W = _spatial_dims(X, layout)
        oh = _pool_out_size(H, kh, sh, ph, dh, ceil_mode)
        ow = _pool_out_size(W, kw, sw, pw, dw, ceil_mode)
        lowest = E.const(-float("inf"), X.dtype)

        def fn(lead, oy, ox):
            def elem(ky, kx):
                iy = _window_index(oy, sh, ph, ky, dh)
                ix = _window_index(ox, sw, pw, kx, dw)
                v = X[_at(lead, iy, ix, layout)]
                inside = _inside([(iy, H, ph > 0, ph > 0 or ceil_mode), (ix, W, pw > 0, pw > 0 or ceil_mode)])
                return E.select(E.logical_and(*inside), v, lowest) if inside else v
            return reduce([kh, kw], elem, "max")
        return _spatial_compute(op, lead_shape, oh, ow, fn, layout)
    return apply(op, [x], ["x"], build, _layout_attrs({"kernel_size": (kh, kw), "stride": (sh, sw), "padding": (ph, pw),
                                                       "dilation": (dh, dw), "ceil_mode": ceil_mode}, layout))[0]


def avg_pool2d(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None,
               layout: str = "NCHW") -> Tensor:
    """2-D average pooling of an NCHW (or CHW) input, with torch semantics.

    ``kernel_size``, ``stride`` (default: the kernel size) and ``padding`` (symmetric, at
    most half the kernel) are an int or a pair. Padding reads as zero; the divisor counts
    the window clipped to the padded input (``count_include_pad=True``) or to the input
    itself (``False``), and ``divisor_override`` replaces it. ``ceil_mode`` rounds the output
    size up, keeping only windows that start inside the input or its left/top padding.
    Example: ``avg_pool2d(x, 2)`` halves each spatial size. ``layout="NHWC"`` pools an
    (N, H, W, C) input.
    """
    op = "avg_pool2d"
    layout = _layout_arg(op, layout)
    x = _spatial_input(op, x, layout)
    _check_numeric(op, "x", x, float_only=True)
    (kh, kw), (sh, sw), (ph, pw), _ = _pool_args(op, x, kernel_size, stride, padding, 1, ceil_mode,
                                                 layout)
    if not isinstance(count_include_pad, bool):
        raise OpError(f"{op}(): 'count_include_pad' must be a bool, got {count_include_pad!r}")
    if divisor_override is not None and (not _is_int(divisor_override) or divisor_override < 1):
        raise OpError(f"{op}(): 'divisor_override' must be a positive int or None, got {divisor_override!r}")

    def build(X):
        lead_shape, H, W = _spatial_dims(X, layout)
        oh = _pool_out_size(H, kh, sh, ph, 1, ceil_mode)
        ow = _pool_out_size(W, kw, sw, pw, 1, ceil_mode)
        acc = _acc_type(X.dtype)

        def extent(o: E.Expr, size: Dim, k: int, s: int, p: int) -> Dim:
            """How many window positions the divisor counts along one axis."""
            if count_include_pad and not ceil_mode:
                return k  # every window lies inside the padded input
            start = o * s - p
            end = _min(start + k, size + p)
            if not count_include_pad:
                start, end = (_max(start, 0) if p else start), _min(end, size)
            return end - start

        def fn(lead, oy, ox):
            def elem(ky, kx):
                iy = _window_index(oy, sh, ph, ky, 1)
                ix = _window_index(ox, sw, pw, kx, 1)
                v = E.cast(X[_at(lead, iy, ix, layout)], acc)
                inside = _inside([(iy, H, ph > 0, ph > 0 or ceil_mode), (ix, W, pw > 0, pw > 0 or ceil_mode)])
                return E.select(E.logical_and(*inside), v, E.const(0.0, acc)) if inside else v
            total = reduce([kh, kw], elem, "sum")
            if divisor_override is not None:
                count: Any = int(divisor_override)
            else:
                count = extent(oy, H, kh, sh, ph) * extent(ox, W, kw, sw, pw)
            div = E.const(float(count), acc) if isinstance(count, int) else E.cast(count, acc)
            return E.cast(total / div, X.dtype)
        return _spatial_compute(op, lead_shape, oh, ow, fn, layout)
    return apply(op, [x], ["x"], build, _layout_attrs({
        "kernel_size": (kh, kw), "stride": (sh, sw), "padding": (ph, pw), "ceil_mode": ceil_mode,
        "count_include_pad": count_include_pad, "divisor_override": divisor_override}, layout))[0]


def adaptive_avg_pool2d(x: Any, output_size: Any) -> Tensor:
    """2-D adaptive average pooling of an NCHW (or CHW) input to ``output_size``, as torch.

    ``output_size`` is an int or a pair (rows, columns); None in a pair keeps that input
    size. Output row ``i`` of ``out_h`` averages input rows ``floor(i * H / out_h)`` up to
    (excluding) ``ceil((i + 1) * H / out_h)``, and likewise for columns, so windows may
    differ in size and overlap. Example: ``adaptive_avg_pool2d(x, 1)`` is global average pooling.
    """
    op = "adaptive_avg_pool2d"
    x = _spatial_input(op, x)
    _check_numeric(op, "x", x, float_only=True)
    items = [output_size] * 2 if _is_int(output_size) or output_size is None else \
        list(output_size) if isinstance(output_size, (tuple, list)) else None
    if items is None or len(items) != 2 or not all(i is None or _is_int(i) for i in items):
        raise OpError(f"{op}(): 'output_size' must be an int or a pair of ints (or None), got {output_size!r}")
    if any(i is not None and i < 1 for i in items):
        raise OpError(f"{op}(): 'output_size'={output_size!r} must be positive")
    sizes = tuple(None if i is None else int(i) for i in items)

    def build(X):
        *lead_shape, H, W = X.shape
        oh = H if sizes[0] is None else sizes[0]
        ow = W if sizes[1] is None else sizes[1]
        acc = _acc_type(X.dtype)

        def bounds(o: E.Expr, size: Dim, out: Dim) -> tuple[E.Expr, E.Expr]:
            """[start, end) of the window of output position ``o``: floor and ceil of o * size / out."""
            return (o * size) // out, ((o + 1) * size + out - 1) // out

        def fn(*idx):
            *lead, oy, ox = idx
            y0, y1 = bounds(oy, H, oh)
            x0, x1 = bounds(ox, W, ow)
            mean = reduce([y1 - y0, x1 - x0], lambda ky, kx: E.cast(X[(*lead, y0 + ky, x0 + kx)], acc), "mean")
            return E.cast(mean, X.dtype)
        return compute(op, [*lead_shape, oh, ow], fn)
    return apply(op, [x], ["x"], build, {"output_size": sizes})[0]


def _global_pool(op: str, x: Any, kind: str) -> Tensor:
    x = _spatial_input(op, x)
    _check_numeric(op, "x", x, float_only=True)

    def build(X):
        *lead_shape, H, W = X.shape
        acc = _acc_type(X.dtype) if kind == "mean" else X.dtype

        def fn(*idx):
            lead = idx[:-2]
            r = reduce([H, W], lambda ky, kx: E.cast(X[(*lead, ky, kx)], acc), kind)
            return E.cast(r, X.dtype)
        return compute(op, [*lead_shape, 1, 1], fn)
    return apply(op, [x], ["x"], build)[0]


def global_avg_pool2d(x: Any) -> Tensor:
    """The mean over the spatial axes of an NCHW (or CHW) input, keeping them as size 1:
    (N, C, H, W) -> (N, C, 1, 1)."""
    return _global_pool("global_avg_pool2d", x, "mean")


def global_max_pool2d(x: Any) -> Tensor:
    """The maximum over the spatial axes of an NCHW (or CHW) input, keeping them as size 1:
    (N, C, H, W) -> (N, C, 1, 1)."""
    return _global_pool("global_max_pool2d", x, "max")
