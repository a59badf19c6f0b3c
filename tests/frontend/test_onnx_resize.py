"""ONNX Resize and Upsample (nearest and linear, every coordinate transformation and
nearest rounding, up and down, by scales or sizes) and the trigonometric operators, each
against ONNX Runtime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import taskloom.onnx  # noqa: E402
from taskloom.errors import FrontendError  # noqa: E402

X = np.random.default_rng(0).standard_normal((1, 3, 5, 7)).astype(np.float32)


def _model(nodes, inits, opset=19, x_shape=(1, 3, 5, 7)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 9
    return m


def resize_model(mode, coord, nearest="round_prefer_floor", scales=None, sizes=None):
    arr = lambda v, t, name: numpy_helper.from_array(np.array(v, t), name)  # noqa: E731
    inits = [arr([], np.float32, "roi"), arr(scales if scales is not None else [], np.float32, "scales")]
    ins = ["x", "roi", "scales"]
    if sizes is not None:
        inits.append(arr(sizes, np.int64, "sizes"))
        ins.append("sizes")
    node = helper.make_node("Resize", ins, ["y"], mode=mode, coordinate_transformation_mode=coord, nearest_mode=nearest)
    return _model([node], inits)


def same_as_ort(m, x=X, tol=1e-5):
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    got = taskloom.onnx.from_onnx(m)(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("coord", ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"])
@pytest.mark.parametrize("size", [dict(scales=[1, 1, 2.0, 1.5]), dict(sizes=[1, 3, 3, 11]),
                                  dict(scales=[1, 1, 0.6, 0.5])])
def test_resize_matches_onnx_runtime(mode, coord, size):
    for nearest in (["round_prefer_floor", "floor", "ceil", "round_prefer_ceil"] if mode == "nearest" else ["floor"]):
        same_as_ort(resize_model(mode, coord, nearest, **size))


def test_upsample_and_unsupported_modes():
    node = helper.make_node("Upsample", ["x", "scales"], ["y"], mode="nearest")
    m = _model([node], [numpy_helper.from_array(np.array([1, 1, 2, 3], np.float32), "scales")], opset=9)
    same_as_ort(m)
    with pytest.raises(FrontendError, match=r"'mode'='cubic' is not supported"):
        taskloom.onnx.from_onnx(resize_model("cubic", "half_pixel", scales=[1, 1, 2, 2]))


@pytest.mark.parametrize("op", ["Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Atanh", "Round"])
def test_trigonometric_operators(op):
    x = np.random.default_rng(1).uniform(-0.9, 0.9, (1, 3, 5, 7)).astype(np.float32)
    x = x * 4 if op == "Round" else x
    same_as_ort(_model([helper.make_node(op, ["x"], ["y"])], [], opset=17), x, tol=1e-6)
