"""ONNX models with named symbolic dimensions compile once for every size: the exporters'
shape arithmetic (Shape -> Gather -> Concat -> Reshape, Expand, ConstantOfShape, Range,
Slice of a buffer up to the sequence length, Where over Equal) is carried out on the
symbols, checked against ONNX Runtime at several sizes of one compiled model; what cannot
be decided or is not shape arithmetic is an error naming the node."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import taskloom.onnx  # noqa: E402
from taskloom.errors import ArgumentError, FrontendError  # noqa: E402
from taskloom.frontend.onnx import onnx_to_graph  # noqa: E402

I64 = TensorProto.INT64


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)


def model(nodes, inputs, outputs, inits=(), opset=17):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def heads_model(D=8, H=2):
    """x (batch, seq, H*D): split into heads by a reshape whose target comes from Shape,
    transposed, scaled and merged back through a second computed target; positions added
    from a buffer sliced to the sequence length (Slice up to Shape), and a mask of ones
    made by ConstantOfShape and Range."""
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"]),
        n("Gather", ["s", "zero"], ["b"], axis=0), n("Gather", ["s", "one"], ["l"], axis=0),
        n("Unsqueeze", ["b", "ax0"], ["b1"]), n("Unsqueeze", ["l", "ax0"], ["l1"]),
        n("Concat", ["b1", "l1", "hd"], ["target"], axis=0),
        n("Reshape", ["x", "target"], ["split"]),
        n("Transpose", ["split"], ["t"], perm=[0, 2, 1, 3]),
        n("Mul", ["t", "two"], ["t2"]),
        n("Transpose", ["t2"], ["back"], perm=[0, 2, 1, 3]),
        # -1 chosen by Where(Equal(target, 0)): torch's exporters spell view(-1) so
        n("Concat", ["b1", "l1", "minus1"], ["merge0"], axis=0),
        n("Equal", ["merge0", "zero1"], ["is0"]),
        n("Where", ["is0", "one1", "merge0"], ["merge"]),
        n("Reshape", ["back", "merge"], ["merged"]),
        n("Slice", ["positions", "zero1", "l1", "zero1"], ["pos"]),  # positions[:seq]
        n("Unsqueeze", ["pos", "ax0"], ["pos1"]),
        n("Add", ["merged", "pos1"], ["y0"]),
        n("Range", ["zero_s", "l", "one_s"], ["r"]),
        n("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        n("Unsqueeze", ["rf", "ax1"], ["rf2"]),
        n("Concat", ["b1", "l1", "one1"], ["ones_shape"], axis=0),
        n("ConstantOfShape", ["ones_shape"], ["ones"], value=numpy_helper.from_array(np.array([1.0], np.float32))),
        n("Mul", ["ones", "rf2"], ["ramp"]),
        n("Expand", ["ramp", "s"], ["wide"]),
        n("Add", ["y0", "wide"], ["y"]),
    ]
    inits = [const("zero", 0), const("one", 1), const("ax0", [0]), const("ax1", [1]), const("hd", [H, D]),
             const("minus1", [-1]), const("zero1", [0]), const("one1", [1]), const("zero_s", 0), const("one_s", 1),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.arange(64 * H * D, dtype=np.float32).reshape(64, H * D) / 100, "positions")]
    return model(nodes, [f32("x", ["batch", "seq", H * D])], [f32("y", ["batch", "seq", H * D])], inits)


def test_one_compile_serves_every_size():
    m = heads_model()
    compiled = taskloom.onnx.from_onnx(m, dynamic={"batch": (1, 8), "seq": (1, 64)})
    session = ort.InferenceSession(m.SerializeToString())
    for b, s in ((1, 1), (2, 7), (3, 64), (8, 33)):
        x = np.random.default_rng(b * s).standard_normal((b, s, 16)).astype(np.float32)
        np.testing.assert_allclose(compiled(x), session.run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)
    assert [(s["name"], s["max"]) for s in compiled.meta["dynamic"]["symbols"]] == [("batch", 8), ("seq", 64)]
    with pytest.raises(ArgumentError, match="seq"):
        compiled(np.zeros((1, 65, 16), np.float32))  # past the declared range
    again = taskloom.compile(m, dynamic={"batch": (1, 8), "seq": (1, 64)})  # the same through compile()
    assert again.symbols == {"batch": (1, 8), "seq": (1, 64)}


@settings(max_examples=5, deadline=None)
@given(b=st.integers(1, 4), s=st.integers(1, 64))
def test_any_size_in_range(b, s):
    x = np.random.default_rng(s).standard_normal((b, s, 16)).astype(np.float32)
    np.testing.assert_allclose(_compiled()(x), _session().run(None, {"x": x})[0], rtol=1e-6, atol=1e-6)


_cache: dict = {}


def _compiled():
    if "c" not in _cache:
        _cache["c"] = taskloom.onnx.from_onnx(heads_model(), dynamic={"seq": (1, 64)})
    return _cache["c"]


def _session():
    if "s" not in _cache:
        _cache["s"] = ort.InferenceSession(heads_model().SerializeToString())
    return _cache["s"]


def test_input_shapes_still_fix_the_sizes():
    graph = onnx_to_graph(heads_model(), {"x": (2, 5, 16)})
    assert graph.inputs[0].shape == (2, 5, 16) and all(isinstance(d, int) for d in graph.outputs[0].shape)


def test_an_undecidable_comparison_names_the_node():
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["s"]), n("Gather", ["s", "zero"], ["b"], axis=0),
             n("Gather", ["s", "one"], ["l"], axis=0), n("Equal", ["b", "l"], ["same"]),
             n("Where", ["same", "b", "l"], ["pick"]), n("Unsqueeze", ["pick", "ax0"], ["p1"]),
             n("Reshape", ["x", "p1"], ["y"])]
    m = model(nodes, [f32("x", ["a", "c"])], [f32("y", ["n"])],
              [const("zero", 0), const("one", 1), const("ax0", [0])])
    with pytest.raises(FrontendError, match=r"Equal.*cannot decide whether a == c.*input_shapes"):
        onnx_to_graph(m)


def test_sizes_read_as_data_are_an_error():
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["s"]), n("Cast", ["s"], ["sf"], to=TensorProto.FLOAT), n("Mul", ["x", "sf"], ["y"])]
    m = model(nodes, [f32("x", ["a", 2])], [f32("y", ["a", 2])])
    with pytest.raises(FrontendError, match=r"Cast.*symbolic sizes \[a, 2\] to float32"):
        onnx_to_graph(m)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_exported_transformers_models(family, tmp_path):
    """A transformers model exported by torch.onnx (dynamo) with dynamic batch and sequence."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    small = ({"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 128}
             if family == "bert" else {"n_embd": 64, "n_layer": 1, "n_head": 2, "use_cache": False})
    torch.manual_seed(0)
    net = transformers.AutoModel.from_config(transformers.AutoConfig.for_model(family, vocab_size=100, **small)).eval()

    class First(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, ids):
            return self.net(ids)[0]
    path = str(tmp_path / f"{family}.onnx")
    dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence")}
    torch.onnx.export(First(), (torch.randint(0, 100, (2, 16)),), path, dynamo=True, input_names=["ids"],
                      dynamic_shapes=(dims,))
    compiled = taskloom.onnx.from_onnx(path, dynamic={"batch": (1, 4), "sequence": (1, 64)})
    session = ort.InferenceSession(path)
    for b, s in ((1, 1), (2, 9), (4, 64)):
        ids = np.random.default_rng(s).integers(0, 100, (b, s))
        np.testing.assert_allclose(compiled(ids), session.run(None, {"ids": ids})[0], rtol=1e-4, atol=1e-5)


def test_cuda_targets_keep_the_symbolic_dimensions_too():
    dynamic = taskloom.onnx.from_onnx(heads_model(), target="cuda:sm_90", device="emulator",
                                      dynamic={"batch": (1, 4), "seq": (1, 32)})
    fixed = taskloom.onnx.from_onnx(heads_model(), {"x": (1, 3, 16)}, target="cuda:sm_90", device="emulator")
    for shape, model in (((2, 5, 16), dynamic), ((1, 3, 16), dynamic), ((1, 3, 16), fixed)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(model(x), _session().run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
