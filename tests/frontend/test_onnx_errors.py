"""Errors of the ONNX frontend: a model is checked before it is converted; unreadable files,
invalid models and converter faults are FrontendErrors naming the file or the node; and
what taskloom accepts beyond onnxruntime (a reflect pad wider than its axis) is right."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import taskloom.onnx  # noqa: E402
from taskloom.errors import FrontendError, TaskloomError  # noqa: E402
from taskloom.frontend import onnx as frontend  # noqa: E402
from taskloom.frontend.onnx import REGISTRY, Converter, onnx_to_graph  # noqa: E402
from taskloom.frontend.onnx_registry import OnnxNode  # noqa: E402
from taskloom.graph.tensor import input as graph_input  # noqa: E402


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def model_of(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def relu_model():
    return model_of([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [2, 3])], [f32("y", [2, 3])])


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


# ----------------------------------------------------------------------------- unreadable input

def test_garbage_and_truncated_files_name_the_path(tmp_path):
    data = relu_model().SerializeToString()
    (tmp_path / "garbage.onnx").write_bytes(b"\x01\xff not a model at all \x00" * 3)
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    (tmp_path / "empty.onnx").write_bytes(b"")
    for name in ("garbage.onnx", "cut.onnx", "empty.onnx"):
        path = str(tmp_path / name)
        with pytest.raises(FrontendError, match=rf"'{path}' is (not a readable ONNX model|empty)"):
            taskloom.onnx.from_onnx(path)
    with pytest.raises(FrontendError, match="no ONNX model at"):
        taskloom.onnx.from_onnx(str(tmp_path))  # a folder


def test_garbage_bytes_are_a_frontend_error():
    with pytest.raises(FrontendError, match="bytes given are not a serialized ONNX model") as info:
        onnx_to_graph(b"\x08\x07\x12\xff\xff\xff")
    assert info.value.__cause__ is not None


# ----------------------------------------------------------------------------- invalid models

def test_a_model_without_outputs_is_refused():
    empty = model_of([], [], [])
    with pytest.raises(FrontendError, match="has no outputs"):
        taskloom.onnx.from_onnx(empty)
    with pytest.raises(FrontendError, match="has no outputs"):
        onnx_to_graph(onnx.ModelProto())


def test_the_checker_refuses_invalid_models():
    unknown = model_of([helper.make_node("Frobnicate", ["x"], ["y"])], [f32("x", [2])], [f32("y", [2])])
    with pytest.raises(FrontendError, match=r"not a valid ONNX model: No Op registered for Frobnicate") as info:
        onnx_to_graph(unknown)
    assert type(info.value.__cause__).__name__ == "ValidationError"
    dangling = model_of([helper.make_node("Relu", ["x"], ["r"])], [f32("x", [2])], [f32("y", [2])])
    with pytest.raises(FrontendError, match="Graph output 'y' is not an output of any node"):
        onnx_to_graph(dangling)


def test_strict_shape_inference_refuses_shapes_that_do_not_fit():
    model = model_of([helper.make_node("MatMul", ["x", "w"], ["y"])], [f32("x", [2, 3])], [f32("y", [2, 4])],
                     [numpy_helper.from_array(np.ones((5, 4), np.float32), "w")])
    with pytest.raises(FrontendError, match="shape inference failed: .*Incompatible dimensions"):
        onnx_to_graph(model)
    declared_wrong = model_of([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [2, 3])], [f32("y", [3, 2])])
    with pytest.raises(FrontendError, match="shape inference failed: .*differ"):
        onnx_to_graph(declared_wrong)


def test_an_output_without_a_shape_is_left_to_inference():
    model = model_of([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [2, 3])], [f32("y", None)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    np.testing.assert_array_equal(taskloom.onnx.from_onnx(model)(x), np.maximum(x, 0))


# ----------------------------------------------------------------------------- converter faults

def test_a_converter_fault_is_a_frontend_error_naming_the_node(monkeypatch):
    def broken(n):
        return {}["oops"]
    monkeypatch.setitem(REGISTRY, "Relu", Converter("Relu", (6, 14), broken))
    with pytest.raises(FrontendError) as info:
        onnx_to_graph(relu_model())
    text = str(info.value)
    assert "node 0 (Relu -> 'y'): cannot be converted (KeyError: 'oops')" in text, text
    assert isinstance(info.value.__cause__, KeyError)


def test_a_fault_outside_the_nodes_is_a_frontend_error(monkeypatch):
    def broken(self, input_shapes):
        raise ZeroDivisionError("division by zero")
    monkeypatch.setattr(frontend._Converter, "_inputs", broken)
    with pytest.raises(FrontendError, match="cannot convert the ONNX model: ZeroDivisionError"):
        onnx_to_graph(relu_model())


def _node(op, inputs, version=17, outputs=("y",), **attrs):
    """What a converter is given for one node."""
    return OnnxNode(op, f"node '{op.lower()}' ({op})", version, list(inputs), dict(attrs), list(outputs))


@pytest.mark.parametrize("op, inputs, attrs, message", [
    ("Concat", [graph_input((2, 3))] * 2, {}, "attribute 'axis' is required"),
    ("Cast", [graph_input((2, 3))], {}, "attribute 'to' is required"),
    ("Gemm", [graph_input((2, 3)), None], {}, r"input 1 \(B\) is required"),
    ("Conv", [graph_input((1, 2, 5, 5)), None], {}, r"input 1 \(weight\) is required"),
    ("Conv", [graph_input((1, 2, 5, 5)), np.ones((3, 2, 3), np.float32)], {}, "weight.* must be 4-d"),
    ("Conv", [graph_input((1, 2, 5, 5)), np.ones((3, 2, 3, 3), np.float32)], {"strides": [0, 1]},
     "'strides'=\\[0, 1\\] must hold 2 positive sizes"),
    ("Conv", [graph_input((1, 2, 5, 5)), np.ones((3, 2, 3, 3), np.float32)],
     {"auto_pad": "SAME_UPPER", "pads": [1, 1, 1, 1]}, "'pads' cannot be given with 'auto_pad'='SAME_UPPER'"),
    ("MaxPool", [graph_input((1, 2, 5, 5))], {"kernel_shape": [2]}, "'kernel_shape'=\\[2\\] must hold 2"),
    ("BatchNormalization", [graph_input((4,))] + [np.ones(4, np.float32)] * 4, {}, "at least 2-d"),
    ("ReduceSum", [graph_input((2, 3)), np.array([1])], {"keepdims": 3}, "'keepdims'=3 must be 0 or 1"),
    ("Gemm", [graph_input((2, 3)), np.ones((4, 3), np.float32)], {"transB": 2}, "'transB'=2 must be 0 or 1"),
    ("Reshape", [graph_input((2, 3)), np.array([0, 0, 0])], {}, "holds 0 at position 2, .* the input is 2-d"),
    ("Slice", [graph_input((2, 3)), np.array([0]), np.array([1]), np.array([0, 1])], {},
     "'axes' .* must hold as many"),
    ("Slice", [graph_input((2, 3)), np.array([0, 0]), np.array([1, 1]), np.array([1, -1])], {},
     "names an axis twice"),
    ("Slice", [graph_input((2, 3)), np.array([[0]]), np.array([1])], {}, "must be a 1-d tensor of integers"),
    ("Unsqueeze", [graph_input((2, 3)), np.array([0.0])], {}, "must be a 1-d tensor of integers"),
    ("Gather", [graph_input((2, 3)), np.array([0.5])], {}, "indices.* must hold integers"),
    ("Pad", [graph_input((2, 3)), np.array([0, 0, -3, 0])], {}, "crop axis 0 of size 2 by more than its size"),
    ("ConstantOfShape", [np.array([2, -1])], {}, "non-negative sizes"),
    ("Range", [np.array(0), np.array(4), np.array(0)], {}, "delta.* must not be 0"),
    ("EyeLike", [graph_input((2, 3, 4))], {}, "must be 2-d"),
    ("PRelu", [graph_input((2, 3)), None], {}, "slope.* is required"),
    ("Pow", [graph_input((2, 3)), None], {}, "exponent.* is required"),
    ("CastLike", [graph_input((2, 3)), None], {}, "is required"),
])
def test_converters_say_what_is_wrong(op, inputs, attrs, message):
    with pytest.raises(FrontendError, match=message) as info:
        REGISTRY[op].fn(_node(op, inputs, **attrs))
    assert str(info.value).startswith(f"node '{op.lower()}' ({op}): ")


# ----------------------------------------------------------------------------- beyond onnxruntime

def test_a_reflect_pad_wider_than_its_axis_mirrors_again_as_numpy_does():
    """onnxruntime refuses a reflect pad of more than the axis size - 1; taskloom (and onnx's
    reference implementation) mirror again, as numpy.pad does."""
    model = model_of([helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")], [f32("x", [2, 3])],
                     [f32("y", [2, 10])], [const("pads", [0, 3, 0, 4])])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(taskloom.onnx.from_onnx(model)(x), np.pad(x, ((0, 0), (3, 4)), mode="reflect"))


def test_old_opset_forms_of_matmul_maxpool_and_batchnorm_convert():
    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    model = model_of([helper.make_node("MatMul", ["x", "w"], ["y"])], [f32("x", [2, 3])], [f32("y", [2, 4])], [w],
                     opset=7)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(taskloom.onnx.from_onnx(model)(x), x @ np.ones((3, 4), np.float32))
    stats = [numpy_helper.from_array(np.full(2, v, np.float32), n) for n, v in
             (("s", 2.0), ("b", 1.0), ("m", 0.5), ("v", 4.0))]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"]),
             helper.make_node("MaxPool", ["n"], ["y"], kernel_shape=[2, 2])]
    model = model_of(nodes, [f32("x", [1, 2, 2, 2])], [f32("y", [1, 2, 1, 1])], stats, opset=7)
    x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)
    want = ((x - 0.5) / np.sqrt(4.0 + 1e-5) * 2 + 1).max(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(taskloom.onnx.from_onnx(model)(x), want, rtol=1e-5)


def test_nothing_but_taskloom_errors_leaves_the_frontend():
    for bad in (None, 3.5, ["model.onnx"], b"", b"\x00" * 10):
        with pytest.raises(TaskloomError):
            onnx_to_graph(bad)
