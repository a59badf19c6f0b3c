"""The ONNX frontend: models exported by torch.onnx.export (both exporters) and models
built node by node, converted, compiled and compared with torch and onnxruntime."""
from __future__ import annotations

import io
import logging
import subprocess
import sys
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import taskloom  # noqa: E402
import taskloom.onnx  # noqa: E402
from taskloom.errors import FrontendError  # noqa: E402
from taskloom.frontend.onnx import REGISTRY, onnx_to_graph  # noqa: E402

nn, F = torch.nn, torch.nn.functional


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference relative to the largest magnitude of the reference."""
    return float(np.abs(got.astype(np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


def run_ort(model: onnx.ModelProto, *inputs: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: x for i, x in zip(session.get_inputs(), inputs)})


# ----------------------------------------------------------------------------- models from torch

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    """conv-bn-relu-pool twice, then a linear layer."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 2 * 2, 10)
        for bn in (self.bn1, self.bn2):  # statistics that are not the identity
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.5, 0.5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(torch.flatten(x, 1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, activation="gelu")

    def forward(self, x):
        return self.layer(x)


class GPT2Block(nn.Module):
    """A GPT-2 decoder block: pre-norm causal self-attention and a tanh-GELU MLP."""

    def __init__(self, d=32, heads=4, seq=8):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (c // self.heads) ** 0.5
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


MODELS = {"mlp": (MLP, (4, 20)), "cnn": (CNN, (2, 3, 16, 16)), "encoder": (Encoder, (2, 8, 32)),
          "gpt2_block": (GPT2Block, (2, 8, 32))}


def export(module: nn.Module, x: torch.Tensor, exporter: str) -> onnx.ModelProto:
    """``torch.onnx.export`` with the TorchScript exporter (opset 17) or the dynamo one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            if exporter == "dynamo":
                return torch.onnx.export(module, (x,), dynamo=True, verbose=False).model_proto
            buf = io.BytesIO()
            torch.onnx.export(module, (x,), buf, dynamo=False, opset_version=17)
            return onnx.load_from_string(buf.getvalue())
        finally:
            logging.disable(logging.NOTSET)


_exported: dict[tuple[str, str], tuple] = {}


def exported(name: str, exporter: str) -> tuple[nn.Module, np.ndarray, onnx.ModelProto]:
    if (name, exporter) not in _exported:
        torch.manual_seed(0)
        cls, shape = MODELS[name]
        module = cls().eval()
        x = torch.randn(*shape)
        _exported[name, exporter] = (module, x.numpy(), export(module, x, exporter))
    return _exported[name, exporter]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
@pytest.mark.parametrize("name", list(MODELS))
def test_exported_model_matches_torch_and_onnxruntime(name, exporter):
    module, x, model = exported(name, exporter)
    compiled = taskloom.onnx.from_onnx(model)
    got = compiled(x)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    assert got.shape == want.shape and got.dtype == np.float32
    assert rel_err(got, want) < 1e-4
    assert rel_err(got, run_ort(model, x)[0]) < 1e-4


def test_shape_arithmetic_of_the_torchscript_export_folds_away():
    # the TorchScript exporter computes the attention's reshape targets from Shape nodes
    _, _, model = exported("encoder", "torchscript")
    onnx_ops = {n.op_type for n in model.graph.node}
    assert {"Shape", "Gather", "Concat"} <= onnx_ops
    graph = onnx_to_graph(model)
    ops = {n.op for n in graph.nodes}
    assert not ops & {"index_select", "concat", "cast", "embedding"}, ops  # all folded to constants
    assert all(isinstance(d, int) for n in graph.nodes for t in n.outputs for d in t.shape)


def test_save_and_load_round_trip(tmp_path):
    module, x, model = exported("gpt2_block", "dynamo")
    compiled = taskloom.onnx.from_onnx(model)
    path = tmp_path / "gpt2_block.taskloom"
    compiled.save(path)
    loaded = taskloom.load(path)
    np.testing.assert_array_equal(loaded(x), compiled(x))
    with torch.no_grad():
        assert rel_err(loaded(x), module(torch.from_numpy(x)).numpy()) < 1e-4


def test_model_from_a_file_and_from_bytes(tmp_path):
    _, x, model = exported("mlp", "torchscript")
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    want = run_ort(model, x)[0]
    for source in (str(path), path, model.SerializeToString()):
        assert rel_err(taskloom.onnx.from_onnx(source)(x), want) < 1e-4


# ----------------------------------------------------------------------------- models built by hand

def make_model(nodes, inputs, outputs, initializers=(), opset=17, name="g"):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def check_against_ort(model, *inputs, tol=1e-5):
    got = taskloom.onnx.from_onnx(model)(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    want = run_ort(model, *inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert rel_err(g, w) < tol


def test_shape_gather_unsqueeze_concat_reshape_chain_folds():
    # Reshape x (2, 3, 4) to (batch, -1) with batch read from the shape at conversion time
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    model = make_model(nodes, [f32("x", [2, 3, 4])], [f32("y", [2, 12])], inits, opset=13)
    graph = onnx_to_graph(model)
    assert [n.op for n in graph.nodes] == ["reshape", "relu"]
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    check_against_ort(model, x)


def single_node_model(op, shapes, out_shapes, opset, inits=(), n_out=1, **attrs):
    """A model of one ``op`` node: float inputs of ``shapes`` first, then ``inits``."""
    names = [f"in{k}" for k in range(len(shapes))] + [i.name for i in inits]
    outs = [f"out{k}" for k in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    if not isinstance(out_shapes[0], list):
        out_shapes = [out_shapes]
    return make_model([node], [f32(f"in{k}", s) for k, s in enumerate(shapes)],
                      [f32(o, s) for o, s in zip(outs, out_shapes)], inits, opset=opset)


def _const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


# Operators whose attributes became inputs across the opsets: both forms, checked against
# onnxruntime. (op, opset, input shapes, output shape, initializers, outputs, attributes)
OPSET_CASES = {
    "reducemean_axes_attribute_13": ("ReduceMean", 13, [[3, 4, 5]], [3, 1, 5], [], 1, {"axes": [1]}),
    "reducemean_axes_input_18": ("ReduceMean", 18, [[3, 4, 5]], [3, 5], [_const("axes", [-2])], 1,
                                 {"keepdims": 0}),
    "reducesum_axes_input_13": ("ReduceSum", 13, [[3, 4, 5]], [1, 1, 5], [_const("axes", [0, 1])], 1, {}),
    "split_attribute_11": ("Split", 11, [[6, 4]], [[2, 4], [4, 4]], [], 2, {"axis": 0, "split": [2, 4]}),
    "split_input_13": ("Split", 13, [[6, 4]], [[6, 1], [6, 3]], [_const("split", [1, 3])], 2, {"axis": 1}),
    "split_num_outputs_18": ("Split", 18, [[7, 2]], [[3, 2], [3, 2], [1, 2]], [], 3, {"axis": 0, "num_outputs": 3}),
    "squeeze_attribute_11": ("Squeeze", 11, [[3, 1, 4, 1]], [3, 4, 1], [], 1, {"axes": [1]}),
    "squeeze_input_13": ("Squeeze", 13, [[3, 1, 4, 1]], [3, 4], [_const("axes", [1, -1])], 1, {}),
    "unsqueeze_input_13": ("Unsqueeze", 13, [[3, 4]], [1, 3, 4, 1], [_const("axes", [0, 3])], 1, {}),
    "clip_attributes_6": ("Clip", 6, [[4, 5]], [4, 5], [], 1, {"min": -0.5, "max": 0.25}),
    "clip_inputs_13": ("Clip", 13, [[4, 5]], [4, 5], [_const("lo", -0.5, np.float32), _const("hi", 0.25, np.float32)],
                       1, {}),
    "pad_constant_13": ("Pad", 13, [[2, 3, 4]], [2, 4, 7], [_const("pads", [0, 0, 1, 0, 1, 2])], 1, {}),
    "pad_axes_18": ("Pad", 18, [[2, 3, 4]], [2, 3, 7],
                    [_const("pads", [1, 2]), _const("value", 1.5, np.float32), _const("axes", [-1])], 1, {}),
    "slice_steps_13": ("Slice", 13, [[6, 7]], [3, 2],
                       [_const("starts", [1, -1]), _const("ends", [100, 0]), _const("axes", [0, 1]),
                        _const("steps", [2, -3])], 1, {}),
    "softmax_axis_13": ("Softmax", 13, [[2, 3, 4]], [2, 3, 4], [], 1, {"axis": 1}),
    "softmax_coerced_2d_11": ("Softmax", 11, [[2, 3, 4]], [2, 3, 4], [], 1, {"axis": 1}),
    "gemm_transposes_and_scales": ("Gemm", 13, [[5, 3], [4, 5], [1, 4]], [3, 4], [], 1,
                                   {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
    "maxpool_asymmetric_pads_ceil": ("MaxPool", 13, [[1, 2, 7, 8]], [1, 2, 4, 5], [], 1,
                                     {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [0, 1, 2, 0],
                                      "ceil_mode": 1}),
    "averagepool_asymmetric_exclude_pad": ("AveragePool", 13, [[1, 2, 7, 8]], [1, 2, 4, 4], [], 1,
                                           {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 2, 1, 0]}),
    "averagepool_same_upper_include_pad": ("AveragePool", 13, [[1, 2, 7, 8]], [1, 2, 3, 3], [], 1,
                                           {"kernel_shape": [3, 3], "strides": [3, 3], "auto_pad": "SAME_UPPER",
                                            "count_include_pad": 1}),
    "conv1d_same_lower_strided": ("Conv", 13, [[1, 3, 10], [4, 3, 4]], [1, 4, 5], [], 1,
                                  {"auto_pad": "SAME_LOWER", "strides": [2]}),
    "conv2d_asymmetric_pads_dilated_groups": ("Conv", 13, [[1, 4, 9, 8], [6, 2, 3, 2]], [1, 6, 6, 10], [], 1,
                                              {"pads": [0, 1, 1, 2], "dilations": [2, 1], "group": 2}),
    "layernorm_statistics_outputs": ("LayerNormalization", 17, [[2, 3, 8], [3, 8]], [[2, 3, 8], [2, 1, 1], [2, 1, 1]],
                                     [], 3, {"axis": 1}),
}


@pytest.mark.parametrize("case", list(OPSET_CASES))
def test_operator_forms_across_opsets(case):
    op, opset, shapes, out_shape, inits, n_out, attrs = OPSET_CASES[case]
    model = single_node_model(op, shapes, out_shape, opset, inits, n_out, **attrs)
    rng = np.random.default_rng(1)
    check_against_ort(model, *(rng.standard_normal(s).astype(np.float32) for s in shapes))


def test_input_shapes_fix_symbolic_input_dimensions():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [f32("x", ["batch", 8])], [f32("y", ["batch", 8])])
    assert str(onnx_to_graph(model).inputs[0].shape[0]) == "batch"  # symbolic unless fixed
    x = -np.arange(24, dtype=np.float32).reshape(3, 8) + 10
    np.testing.assert_array_equal(taskloom.onnx.from_onnx(model, {"x": (3, 8)})(x), np.maximum(x, 0))
    np.testing.assert_array_equal(taskloom.onnx.from_onnx(model, [(3, 8)])(x), np.maximum(x, 0))
    with pytest.raises(FrontendError, match="does not fit"):
        onnx_to_graph(model, {"x": (3, 9)})


def test_inputs_that_decide_shapes_can_be_fixed_with_constants():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    model = make_model(nodes, [f32("x", [2, 6]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                       [f32("y", [3, 4])])
    with pytest.raises(FrontendError, match=r"input 1 \(shape\) must be a constant") as info:
        onnx_to_graph(model)
    assert info.value.constant_inputs == ["shape"]
    compiled = taskloom.onnx.from_onnx(model, constants={"shape": [3, 4]})
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(compiled(x), -x.reshape(3, 4))


def test_every_unsupported_operator_is_listed_in_one_error():
    assert "Hardmax" not in REGISTRY and "NonZero" not in REGISTRY
    nodes = [helper.make_node("Hardmax", ["x"], ["a"]),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Hardmax", ["b"], ["c"]),
             helper.make_node("NonZero", ["c"], ["d"]),
             helper.make_node("Fancy", ["d"], ["e"], domain="com.example"),
             helper.make_node("Conv", ["x3d", "w3d"], ["f"])]
    model = make_model(nodes, [f32("x", [2, 3]), f32("x3d", [1, 1, 2, 2, 2])], [f32("e", [2, 3]), f32("f", None)],
                       [_const("axis", 0), numpy_helper.from_array(np.ones((1, 1, 1, 1, 1), np.float32), "w3d")])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(FrontendError) as info:
        onnx_to_graph(model)
    msg = str(info.value)
    assert "3 operator type(s) without a converter" in msg
    assert "Hardmax (version 13) x2" in msg and "NonZero (version 13) x1" in msg and "com.example.Fancy" in msg
    assert "node 5 (Conv -> 'f'): Conv over 3 spatial dimension(s) is not supported" in msg
    assert msg.count("\n") == 3  # one line of operators, the supported list, the Conv node


def test_importing_taskloom_does_not_import_onnx():
    code = ("import sys, taskloom, taskloom.onnx, taskloom.frontend.onnx; "
            "assert 'onnx' not in sys.modules, 'onnx was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
