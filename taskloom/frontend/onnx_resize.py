"""ONNX converters of Resize and Upsample, nearest and (bi)linear: each resized axis is a
gather of constant source positions (nearest) or a blend of two gathers by constant weights
(linear), so a 4-d image resize is two such steps that fusion runs together. Sizes are
static; the positions follow the node's coordinate transformation and nearest rounding.
Cubic interpolation and antialiasing are refused with the node named.
"""
from __future__ import annotations

import numpy as np

from taskloom import ops
from taskloom.frontend.onnx_registry import OnnxNode, converter, normalize_axes, static_shape
from taskloom.frontend.onnx_shape import index_tensor
from taskloom.graph.tensor import Tensor

_COORDINATES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nearest",
                "half_pixel_symmetric")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coordinates(mode: str, n_in: int, n_out: int, scale: float) -> np.ndarray:
    """Where each output position of one axis falls in the input (ONNX's
    ``coordinate_transformation_mode``), in float32 as ONNX Runtime computes it (a position
    such as 1.5 / 0.6 - 0.5 then falls just below 2, which decides a floor)."""
    x = np.arange(n_out, dtype=np.float32)
    scale, n_in, n_out = np.float32(scale), np.float32(n_in), np.float32(n_out)  # type: ignore[assignment]
    if mode == "asymmetric":
        return x / scale
    if mode == "align_corners":
        return x * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(int(n_out), np.float32)
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(int(n_out), np.float32)
    if mode == "tf_half_pixel_for_nearest":
        return (x + 0.5) / scale
    if mode == "half_pixel_symmetric":
        adjustment = n_out / (scale * n_in)  # type: ignore[operator]
        center = n_in / 2
        offset = center * (1 - adjustment)
        return offset + (x + 0.5) / scale - 0.5
    return (x + 0.5) / scale - 0.5  # half_pixel


def _nearest(coords: np.ndarray, rounding: str, n_in: int) -> np.ndarray:
    if rounding == "floor":
        idx = np.floor(coords)
    elif rounding == "ceil":
        idx = np.ceil(coords)
    elif rounding == "round_prefer_ceil":
        idx = np.floor(coords + 0.5)
    else:  # round_prefer_floor: halves go down
        idx = np.ceil(coords - 0.5)
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


def _resize_axis(n: OnnxNode, x: Tensor, axis: int, n_out: int, scale: float, mode: str, coord: str,
                 rounding: str) -> Tensor:
    n_in = int(x.shape[axis])
    if n_out == n_in and scale == 1.0:
        return x
    coords = source_coordinates(coord, n_in, n_out, scale)
    if mode == "nearest":
        return ops.index_select(x, axis, index_tensor(n, _nearest(coords, rounding, n_in)))
    coords = np.clip(coords, 0, n_in - 1)
    lo = np.floor(coords).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    w = (coords - lo).astype(np.float32)
    shape = [1] * x.ndim
    shape[axis] = n_out
    weight = n.pool.tensor(w.reshape(shape).astype(x.dtype.numpy), n.label)
    a = ops.index_select(x, axis, index_tensor(n, lo))
    b = ops.index_select(x, axis, index_tensor(n, hi))
    return ops.add(a, ops.mul(ops.sub(b, a), weight))


def resize(n: OnnxNode, x: Tensor, sizes: list[int] | None, scales: list[float] | None, axes: list[int]) -> Tensor:
    """``x`` resized along ``axes`` to ``sizes`` (or by ``scales``), as the node's attributes say."""
    mode = n.attr("mode", "nearest")
    coord = n.attr("coordinate_transformation_mode", "half_pixel")
    rounding = n.attr("nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear"):
        raise n.error(f"'mode'={mode!r} is not supported (supported: 'nearest', 'linear')")
    if coord not in _COORDINATES:
        raise n.error(f"'coordinate_transformation_mode'={coord!r} is not supported (supported: {', '.join(_COORDINATES)})")
    if rounding not in _NEAREST:
        raise n.error(f"'nearest_mode'={rounding!r} is not valid (valid: {', '.join(_NEAREST)})")
    if n.attr("antialias", 0) and mode == "linear":
        raise n.error("'antialias'=1 is not supported")
    if n.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise n.error(f"'keep_aspect_ratio_policy'={n.attr('keep_aspect_ratio_policy')!r} is not supported "
                      "(supported: 'stretch')")
    shape = static_shape(n, x)
    y = x
    for k, axis in enumerate(axes):
        if sizes is not None:
            n_out, scale = int(sizes[k]), int(sizes[k]) / shape[axis]
        else:
            scale = float(scales[k])  # type: ignore[index]
            n_out = int(np.floor(shape[axis] * scale))
        if n_out <= 0 or scale <= 0:
            raise n.error(f"resizes axis {axis} of size {shape[axis]} to {n_out} (scale {scale}); sizes must be positive")
        y = _resize_axis(n, y, axis, n_out, scale, mode, coord, rounding)
    return y


@converter("Resize", versions=(11, 19))
def resize_node(n: OnnxNode) -> Tensor:
    """Resize: ``roi`` unused (only ``tf_crop_and_resize`` reads it, not supported), then
    ``scales`` or ``sizes``; ``axes`` from version 18."""
    x = n.tensor(0)
    axes = normalize_axes(n, n.attr("axes") or list(range(x.ndim)), x.ndim)
    scales = n.const(2, "scales") if n.has(2) else None
    sizes = n.ints(3, "sizes") if n.has(3) else None
    if scales is not None and scales.size == 0:
        scales = None
    if (scales is None) == (sizes is None):
        raise n.error("exactly one of 'scales' and 'sizes' must be given")
    values = sizes if sizes is not None else [float(v) for v in scales.reshape(-1)]  # type: ignore[union-attr]
    if len(values) != len(axes):
        raise n.error(f"gives {len(values)} {'sizes' if sizes is not None else 'scales'} for {len(axes)} axes")
    return resize(n, x, sizes, None if sizes is not None else values, axes)  # type: ignore[arg-type]


@converter("Upsample", versions=(7, 9))
def upsample(n: OnnxNode) -> Tensor:
    """Upsample (deprecated): Resize with ``scales`` and the asymmetric coordinates it used."""
    x = n.tensor(0)
    scales = n.attr("scales") if n.version < 9 else [float(v) for v in n.const(1, "scales").reshape(-1)]
    if scales is None or len(scales) != x.ndim:
        raise n.error(f"'scales' must give one scale per axis of the {x.ndim}-d input, got {scales}")
    mode = n.attr("mode", "nearest")
    mode = "linear" if mode in ("linear", "bilinear") else mode
    n.attrs = {**n.attrs, "mode": mode, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    return resize(n, x, None, list(scales), list(range(x.ndim)))
