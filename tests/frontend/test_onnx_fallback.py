"""Per-operator fallback of the ONNX frontend: with ``fallback=True`` the nodes taskloom
cannot convert run in ONNX's reference implementation between compiled parts, and the
model matches ONNX Runtime; by default such a model is still one error listing them."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import taskloom.onnx  # noqa: E402
from taskloom.errors import FrontendError  # noqa: E402
from taskloom.frontend.onnx_fallback import OnnxFallbackWarning  # noqa: E402

rng = np.random.default_rng(0)


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def model(nodes, inputs, outputs, inits=()):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def weights(*names, shape=(6, 6)):
    return [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), n) for n in names]


def det_model():
    """x @ w, relu, then its determinant (no converter) scales the relu plus a bias."""
    n = helper.make_node
    nodes = [n("MatMul", ["x", "w"], ["h"]), n("Relu", ["h"], ["r"]), n("Det", ["r"], ["d"]),
             n("Add", ["r", "w2"], ["s"]), n("Mul", ["s", "d"], ["y"])]
    return model(nodes, [f32("x", [6, 6])], [f32("y", [6, 6])], weights("w", "w2"))


def chained_model():
    """Two levels of fallback: Hardmax of a product, a product of that, TopK's values of it."""
    n = helper.make_node
    k = numpy_helper.from_array(np.array([3], np.int64), "k")
    nodes = [n("MatMul", ["x", "w"], ["h"]), n("Hardmax", ["h"], ["hm"], axis=1),
             n("MatMul", ["hm", "w2"], ["h2"]), n("Sigmoid", ["h2"], ["s"]),
             n("TopK", ["s", "k"], ["top", "idx"], axis=1), n("Mul", ["top", "top"], ["y"])]
    return model(nodes, [f32("x", [6, 6])], [f32("y", [6, 3])], [*weights("w", "w2"), k])


def against_ort(m, compiled):
    x = rng.standard_normal((6, 6)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-5)


def test_unsupported_nodes_run_in_the_reference_implementation():
    m = det_model()
    with pytest.raises(FrontendError, match=r"without a converter: Det"):
        taskloom.onnx.from_onnx(m)  # strict by default
    with pytest.warns(OnnxFallbackWarning, match=r"1 of 5 ONNX nodes run in ONNX's reference implementation: "
                                                 r"Det \(unsupported op\)"):
        compiled = taskloom.onnx.from_onnx(m, fallback=True)
    against_ort(m, compiled)
    assert [(f.op, f.reason) for f in compiled.fallbacks] == [("Det", "unsupported op")]
    assert len(compiled.parts) == 2  # matmul and relu; then the bias and the scale by the determinant
    assert sum(len(p.meta["kernels"]) for p in compiled.parts) <= 3
    with pytest.raises(FrontendError, match="cannot be saved"):
        compiled.save("never.tlm")


def test_levels_of_fallback_make_as_few_parts_as_the_chain_needs():
    m = chained_model()
    with pytest.warns(OnnxFallbackWarning, match="2 of 6"):
        compiled = taskloom.onnx.from_onnx(m, fallback=True)
    against_ort(m, compiled)
    assert [f.op for f in compiled.fallbacks] == ["Hardmax", "TopK"] and len(compiled.parts) == 3


def test_a_node_whose_output_shape_is_unknown_cannot_fall_back():
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["r"]), n("NonZero", ["r"], ["nz"]), n("Cast", ["nz"], ["y"], to=TensorProto.FLOAT)]
    m = model(nodes, [f32("x", [6, 6])], [f32("y", [2, "n"])])
    with pytest.raises(FrontendError, match=r"NonZero.*no static shape and type for its output 'nz'"):
        taskloom.onnx.from_onnx(m, fallback=True)


def test_symbolic_inputs_must_be_fixed_to_fall_back():
    m = det_model()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "rows"
    with pytest.raises(FrontendError, match=r"fallback=True.*'x' have symbolic dimensions.*input_shapes"):
        taskloom.onnx.from_onnx(m, fallback=True)
    with pytest.warns(OnnxFallbackWarning):
        against_ort(m, taskloom.onnx.from_onnx(m, {"x": (6, 6)}, fallback=True))
