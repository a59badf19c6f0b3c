"""ONNX converters of the neural-network operators: MatMul, Gemm, Conv, MaxPool,
AveragePool, the global pools and the normalizations.

Convolutions and pools are 2-d in taskloom; 1-d ones run as 2-d ones over a unit height.
ONNX pads may be asymmetric and larger than torch allows; a pool that taskloom's own
padding cannot express runs on an explicitly padded input, and an average pool's divisor
is then corrected by a per-position constant computed here.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from taskloom import ops
from taskloom.frontend.onnx_elementwise import cast
from taskloom.frontend.onnx_registry import (OnnxNode, Value, as_numpy, converter, dtype_of, is_const,
                                             normalize_axis, shape_of, taskloom_dtype)
from taskloom.graph.tensor import Tensor
from taskloom.ir import dtypes as T


# ----------------------------------------------------------------------------- matrix products

@converter("MatMul", versions=(1, 13))
def matmul(n: OnnxNode) -> Tensor:
    """MatMul: numpy matmul semantics, batch axes broadcast."""
    return ops.matmul(n.tensor(0), n.tensor(1))


def _transpose2(n: OnnxNode, v: Value) -> Value:
    return as_numpy(v).T.copy() if is_const(v) else ops.transpose(v, 0, 1)


@converter("Gemm", versions=(7, 13))
def gemm(n: OnnxNode) -> Tensor:
    """Gemm: ``alpha * op(A) @ op(B) + beta * C`` as ``linear``, with alpha folded into a
    constant B and a per-column C as the bias."""
    a, b, c = n.required(0, "A"), n.required(1, "B"), n.input(2)
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise n.error(f"inputs A and B must be 2-d, got shapes {shape_of(a)} and {shape_of(b)}")
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if n.flag("transA", 0):
        a = _transpose2(n, a)
    # linear() takes the weight as (N, K): B itself with transB, else its transpose
    w = b if n.flag("transB", 0) else _transpose2(n, b)
    dt = dtype_of(w)
    if alpha != 1.0 and is_const(w):
        w, alpha = (as_numpy(w) * alpha).astype(dt.numpy), 1.0
    n_out = shape_of(w)[0]
    bias = None
    if c is not None and beta != 0.0 and is_const(c) and alpha == 1.0:
        arr = as_numpy(c)
        if arr.size == 1 or arr.shape in ((n_out,), (1, n_out)):
            bias = np.broadcast_to((arr * beta).astype(dt.numpy).reshape(-1), (n_out,)).copy()
            c = None
    y = ops.linear(n.as_tensor(a), n.as_tensor(w), None if bias is None else n.pool.tensor(bias, n.label))
    if alpha != 1.0:
        y = ops.mul(y, alpha)
    if c is not None and beta != 0.0:
        if is_const(c):
            cb = n.pool.tensor((as_numpy(c) * beta).astype(dt.numpy), n.label)
        else:
            cb = c if beta == 1.0 else ops.mul(c, beta)
        y = ops.add(y, cb)
    return y


# ----------------------------------------------------------------------------- windows

def _spatial(n: OnnxNode, x: Tensor, what: str) -> int:
    nd = x.ndim - 2
    if nd not in (1, 2):
        raise n.error(f"{what} over {nd} spatial dimension(s) is not supported (taskloom has 1-d and 2-d; "
                      f"input shape {shape_of(x)})")
    return nd


def _window_pads(n: OnnxNode, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int]) -> list[tuple[int, int]]:
    """(begin, end) padding of each spatial axis from ``auto_pad`` or ``pads``."""
    nd = len(sizes)
    auto = n.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = n.attr("pads") or [0] * (2 * nd)
        if len(pads) != 2 * nd:
            raise n.error(f"'pads'={pads} must hold {2 * nd} values (begins, then ends)")
        return [(int(pads[k]), int(pads[k + nd])) for k in range(nd)]
    if auto not in ("VALID", "SAME_UPPER", "SAME_LOWER"):
        raise n.error(f"'auto_pad'={auto!r} is not valid (valid: NOTSET, VALID, SAME_UPPER, SAME_LOWER)")
    if n.attr("pads") is not None:
        raise n.error(f"'pads' cannot be given with 'auto_pad'={auto!r} (ONNX: one or the other); drop one")
    if auto == "VALID":
        return [(0, 0)] * nd
    out = []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        out.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    return out


def _window_attrs(n: OnnxNode, nd: int, kernel: Sequence[int] | None = None):
    kernel = list(n.attr("kernel_shape") or kernel or [])
    strides = list(n.attr("strides") or [1] * nd)
    dilations = list(n.attr("dilations") or [1] * nd)
    for name, values in (("kernel_shape", kernel), ("strides", strides), ("dilations", dilations)):
        if len(values) != nd or any(int(v) < 1 for v in values):
            raise n.error(f"'{name}'={values} must hold {nd} positive sizes, one per spatial axis")
    return kernel, strides, dilations


def _lift(x: Value, nd: int) -> Value:
    """A 1-d window input (N, C, W) as a 2-d one (N, C, 1, W)."""
    if nd == 2:
        return x
    return as_numpy(x)[:, :, None, :] if is_const(x) else ops.unsqueeze(x, 2)


# ----------------------------------------------------------------------------- convolution

@converter("Conv", versions=(1, 22))
def conv(n: OnnxNode) -> Tensor:
    """Conv: 1-d and 2-d, explicit or automatic (SAME_UPPER/SAME_LOWER/VALID) padding."""
    x = n.tensor(0)
    w = n.required(1, "weight")
    nd = _spatial(n, x, "Conv")
    if len(w.shape) != nd + 2:
        raise n.error(f"input 1 (weight) must be {nd + 2}-d (out_channels, in_channels / group, kernel...) "
                      f"for a {nd}-d convolution, got shape {shape_of(w)}")
    kernel, strides, dilations = _window_attrs(n, nd, shape_of(w)[2:])
    if list(kernel) != list(shape_of(w)[2:]):
        raise n.error(f"'kernel_shape'={kernel} disagrees with the weight's window {list(shape_of(w)[2:])}")
    pads = _window_pads(n, shape_of(x)[2:], kernel, strides, dilations)
    if nd == 1:
        x, w = _lift(x, 1), _lift(w, 1)
        strides, dilations, pads = [1] + strides, [1] + dilations, [(0, 0)] + pads
    bias = n.input(2)
    y = ops.conv2d(x, n.as_tensor(w), None if bias is None else n.as_tensor(bias), stride=tuple(strides),
                   padding=(pads[0][0], pads[0][1], pads[1][0], pads[1][1]), dilation=tuple(dilations),
                   groups=int(n.attr("group", 1)))
    return ops.squeeze(y, 2) if nd == 1 else y


# ----------------------------------------------------------------------------- pooling

def _pool_out(size: int, k: int, s: int, d: int, pad: tuple[int, int], ceil: bool) -> int:
    """ONNX's (and torch's) pooled size; with ceil_mode a last window that would start in
    the end padding is dropped."""
    span = size + pad[0] + pad[1] - ((k - 1) * d + 1)
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + pad[0]:
        out -= 1
    return out


def _counts(out: int, size: int, k: int, s: int, pad: tuple[int, int], include_pad: bool) -> np.ndarray:
    """How many window positions an average divides by, per output position of one axis."""
    lo, hi = (-pad[0], size + pad[1]) if include_pad else (0, size)
    starts = np.arange(out) * s - pad[0]
    return np.minimum(starts + k, hi) - np.maximum(starts, lo)


def _pool(n: OnnxNode, kind: str) -> Tensor:
    x = n.tensor(0)
    nd = _spatial(n, x, n.op_type)
    if kind == "max" and n.wants_output(1):
        raise n.error("the 'Indices' output is not supported")
    kernel, strides, dilations = _window_attrs(n, nd)
    sizes = list(shape_of(x)[2:])
    pads = _window_pads(n, sizes, kernel, strides, dilations)
    ceil = n.flag("ceil_mode", 0)
    include_pad = n.flag("count_include_pad", 0)
    if kind == "avg" and any(d != 1 for d in dilations):
        raise n.error(f"'dilations'={dilations} is not supported for average pooling (only 1)")
    outs = [_pool_out(sz, k, s, d, p, ceil) for sz, k, s, d, p in zip(sizes, kernel, strides, dilations, pads)]
    if nd == 1:
        x = _lift(x, 1)
        kernel, strides, dilations, pads, sizes = [1] + kernel, [1] + strides, [1] + dilations, \
            [(0, 0)] + pads, [1] + sizes
        outs = [1] + outs
    native = all(p[0] == p[1] and p[0] <= k // 2 for p, k in zip(pads, kernel))
    if native:
        pad = tuple(p[0] for p in pads)
        if kind == "max":
            y = ops.max_pool2d(x, tuple(kernel), tuple(strides), pad, tuple(dilations), ceil)
        else:
            y = ops.avg_pool2d(x, tuple(kernel), tuple(strides), pad, ceil, include_pad)
    else:
        # pad explicitly so that exactly the output windows fit, then pool without padding
        pairs: list[int] = []
        for sz, k, s, d, p, o in reversed(list(zip(sizes, kernel, strides, dilations, pads, outs))):
            pairs += [p[0], (o - 1) * s + (k - 1) * d + 1 - sz - p[0]]
        fill = -math.inf if kind == "max" else 0.0
        xp = ops.pad(x, pairs, fill)
        if kind == "max":
            y = ops.max_pool2d(xp, tuple(kernel), tuple(strides), 0, tuple(dilations))
        else:
            y = ops.avg_pool2d(xp, tuple(kernel), tuple(strides), 0)  # the window sum / its size
            counts = [_counts(o, sz, k, s, p, include_pad)
                      for o, sz, k, s, p in zip(outs, sizes, kernel, strides, pads)]
            scale = math.prod(kernel) / np.multiply.outer(counts[0], counts[1])
            y = ops.mul(y, n.pool.tensor(scale.astype(x.dtype.numpy), n.label))
    return ops.squeeze(y, 2) if nd == 1 else y


@converter("MaxPool", versions=(1, 22))
def max_pool(n: OnnxNode) -> Tensor:
    """MaxPool: 1-d and 2-d, any padding and ceil_mode (no Indices output)."""
    return _pool(n, "max")


@converter("AveragePool", versions=(7, 22))
def average_pool(n: OnnxNode) -> Tensor:
    """AveragePool: 1-d and 2-d, any padding, ceil_mode and count_include_pad."""
    return _pool(n, "avg")


def _global_pool(n: OnnxNode, kind: str) -> Tensor:
    x = n.tensor(0)
    if x.ndim == 4:
        return ops.global_avg_pool2d(x) if kind == "mean" else ops.global_max_pool2d(x)
    axes = list(range(2, x.ndim))
    return ops.mean(x, axes, True) if kind == "mean" else ops.max(x, axes, True)


@converter("GlobalAveragePool", versions=(1, 22))
def global_average_pool(n: OnnxNode) -> Tensor:
    """GlobalAveragePool: the mean over the spatial axes, kept as size 1."""
    return _global_pool(n, "mean")


@converter("GlobalMaxPool", versions=(1, 22))
def global_max_pool(n: OnnxNode) -> Tensor:
    """GlobalMaxPool: the maximum over the spatial axes, kept as size 1."""
    return _global_pool(n, "max")


# ----------------------------------------------------------------------------- normalization

def _param(n: OnnxNode, k: int, dt: T.DataType, shape: tuple[int, ...]) -> Tensor | None:
    """A per-channel parameter as a tensor of ``dt`` and exactly ``shape`` (None if absent)."""
    v = n.input(k)
    if v is None:
        return None
    if is_const(v):
        arr = as_numpy(v)
        try:
            arr = np.broadcast_to(arr, shape)
        except ValueError:
            raise n.error(f"input {k} of shape {arr.shape} does not broadcast to {shape}") from None
        return n.pool.tensor(np.ascontiguousarray(arr, dtype=dt.numpy), n.label)
    t = cast(n, v, dt)
    if tuple(t.shape) == shape:
        return t
    if math.prod(shape_of(t)) == math.prod(shape):
        return ops.reshape(t, shape)
    return ops.broadcast_to(t, shape)


def _per_channel(n: OnnxNode, t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A (C,) parameter reshaped to broadcast along axis 1: numpy for constants."""
    if t.is_concrete:
        return n.pool.tensor(t.numpy().reshape(shape), n.label)
    return ops.reshape(t, shape)


@converter("BatchNormalization", versions=(7, 15))
def batch_norm(n: OnnxNode) -> Tensor:
    """BatchNormalization in inference mode (the running statistics)."""
    x = n.tensor(0)
    if not int(n.attr("spatial", 1)):
        raise n.error("'spatial'=0 (statistics per channel and position) is not supported")
    if n.flag("training_mode", 0) or any(n.wants_output(k) for k in range(1, 5)):
        raise n.error("training mode (batch statistics, running-stat outputs) is not supported; "
                      "export the model in eval mode")
    if x.ndim < 2:
        raise n.error(f"the input must be at least 2-d (N, C, ...), got shape {shape_of(x)}")
    c = (shape_of(x)[1],)
    scale, bias, mean, var = (_param(n, k, x.dtype, c) for k in (1, 2, 3, 4))
    return ops.batch_norm(x, mean, var, scale, bias, float(n.attr("epsilon", 1e-5)))


@converter("LayerNormalization", versions=(17, 17))
def layer_norm(n: OnnxNode) -> list[Tensor]:
    """LayerNormalization over the axes from ``axis`` on; the Mean and InvStdDev outputs
    where the model reads them."""
    x = n.tensor(0)
    axis = normalize_axis(n, int(n.attr("axis", -1)), x.ndim)
    eps = float(n.attr("epsilon", 1e-5))
    norm_shape = shape_of(x)[axis:]
    scale, bias = _param(n, 1, x.dtype, norm_shape), _param(n, 2, x.dtype, norm_shape)
    outs = [ops.layer_norm(x, norm_shape, scale, bias, eps)]
    if n.wants_output(1) or n.wants_output(2):
        # the statistics, in the stash type (float32 by default)
        st = taskloom_dtype(int(n.attr("stash_type", 1)), f"{n.label}: 'stash_type'")
        xs = x if x.dtype == st else ops.cast(x, st)
        axes = list(range(axis, x.ndim))
        mean = ops.mean(xs, axes, True)
        var = ops.mean(ops.pow(ops.sub(xs, mean), 2.0), axes, True)
        outs += [mean, ops.rsqrt(ops.add(var, eps))]
    return outs


@converter("InstanceNormalization", versions=(6, 22))
def instance_norm(n: OnnxNode) -> Tensor:
    """InstanceNormalization: each (sample, channel) normalized over its spatial axes."""
    x = n.tensor(0)
    if x.ndim < 3:
        raise n.error(f"the input must be (N, C, spatial...), got shape {shape_of(x)}")
    c = shape_of(x)[1]
    per_channel = (c,) + (1,) * (x.ndim - 2)
    scale = _param(n, 1, x.dtype, (c,))
    bias = _param(n, 2, x.dtype, (c,))
    axes = list(range(2, x.ndim))
    centered = ops.sub(x, ops.mean(x, axes, True))
    var = ops.mean(ops.pow(centered, 2.0), axes, True)
    y = ops.mul(centered, ops.rsqrt(ops.add(var, float(n.attr("epsilon", 1e-5)))))
    return ops.add(ops.mul(y, _per_channel(n, scale, per_channel)), _per_channel(n, bias, per_channel))


@converter("RMSNormalization", versions=(23, 23))
def rms_norm(n: OnnxNode) -> Tensor:
    """RMSNormalization (opset 23): ``x / sqrt(mean(x**2) + epsilon) * scale``."""
    x = n.tensor(0)
    axis = normalize_axis(n, int(n.attr("axis", -1)), x.ndim)
    st = taskloom_dtype(int(n.attr("stash_type", 1)), f"{n.label}: 'stash_type'")
    xs = x if x.dtype == st else ops.cast(x, st)
    mean_square = ops.mean(ops.pow(xs, 2.0), list(range(axis, x.ndim)), True)
    y = ops.mul(xs, ops.rsqrt(ops.add(mean_square, float(n.attr("epsilon", 1e-5)))))
    y = y if y.dtype == x.dtype else ops.cast(y, x.dtype)
    scale = n.required(1, "scale")
    return ops.mul(y, n.as_tensor(cast(n, scale, x.dtype)))


@converter("Attention", versions=(23, 24))
def attention(n: OnnxNode) -> Tensor:
    """Attention (opset 23): ``softmax(q kᵀ * scale + mask) v`` as one ``ops.attention``, for
    4-d (batch, heads, length, head size) or 3-d (batch, length, heads * head size) inputs,
    with grouped keys and values (fewer key heads than query heads) repeated per group.
    Past keys and values, softcap and the extra outputs are refused with the node named."""
    q, k, v = n.tensor(0), n.tensor(1), n.tensor(2)
    for k_, what in ((4, "past_key"), (5, "past_value"), (6, "nonpad_kv_seqlen")):
        if n.has(k_):
            raise n.error(f"input {k_} ({what}) is not supported; export the model without a cache")
    if any(n.wants_output(o) for o in (1, 2, 3)):
        raise n.error("only output 0 (Y) is supported, not present_key, present_value or qk_matmul_output")
    if float(n.attr("softcap", 0.0)) != 0.0:
        raise n.error(f"'softcap'={n.attr('softcap')} is not supported (only 0)")
    three_d = q.ndim == 3
    if three_d:
        heads, kv_heads = n.attr("q_num_heads"), n.attr("kv_num_heads")
        if not heads or not kv_heads:
            raise n.error("3-d inputs need the attributes 'q_num_heads' and 'kv_num_heads'")
        split = lambda t, h: ops.permute(ops.reshape(t, (t.shape[0], t.shape[1], h, -1)), (0, 2, 1, 3))  # noqa: E731
        q, k, v = split(q, heads), split(k, kv_heads), split(v, kv_heads)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise n.error(f"q, k and v must be 3-d or 4-d alike, got shapes {q.shape}, {k.shape}, {v.shape}")
    k, v = _repeat_heads(n, k, q.shape[1]), _repeat_heads(n, v, q.shape[1])
    mask = n.input(3)
    mask = None if mask is None else n.as_tensor(mask)
    y = ops.attention(q, k, v, mask=mask, scale=n.attr("scale"), causal=bool(n.attr("is_causal", 0)),
                      masked_rows="zero")  # (a query with no key left gets zeros, as ONNX's reference says)
    if three_d:
        y = ops.reshape(ops.permute(y, (0, 2, 1, 3)), (y.shape[0], y.shape[2], -1))
    return y


def _repeat_heads(n: OnnxNode, t: Tensor, heads: Any) -> Tensor:
    """Keys or values of ``t.shape[1]`` heads for ``heads`` query heads: each repeated for its
    group of query heads (grouped-query attention)."""
    kv = t.shape[1]
    if kv == heads:
        return t
    if not isinstance(kv, int) or not isinstance(heads, int) or heads % kv:
        raise n.error(f"{heads} query heads cannot share {kv} key and value heads (their number must divide)")
    b, _, s, d = t.shape
    grown = ops.broadcast_to(ops.reshape(t, (b, kv, 1, s, d)), (b, kv, heads // kv, s, d))
    return ops.reshape(grown, (b, heads, s, d))
