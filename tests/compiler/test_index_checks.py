"""Out-of-range indices that arrive with a compiled model's inputs are a taskloom error
naming the input, never a fault or a read outside the table; valid ones, negative ones
counted from the end where ONNX allows them, give numpy's answer."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.errors import ArgumentError, TaskloomError
from taskloom.graph import Graph, input

TABLE = np.arange(20, dtype=np.float32).reshape(5, 4)


def embedding_model():
    ids = input((3,), dtype="int64", name="ids")
    return taskloom.compile(Graph([ids], [ops.embedding(ids, taskloom.asarray(TABLE)) * 2.0]))


@pytest.mark.parametrize("bad", [5, 10**9, -1, -10**8])
def test_an_embedding_index_out_of_range_names_the_input(bad):
    model = embedding_model()
    with pytest.raises(ArgumentError, match=f"input 'ids' holds the index {bad}.*embedding.*valid indices are 0..4"):
        model(np.array([0, bad, 1]))
    np.testing.assert_array_equal(model(np.array([4, 0, 2])), TABLE[[4, 0, 2]] * 2)  # still usable


def test_the_check_survives_save_and_load(tmp_path):
    embedding_model().save(tmp_path / "m.tlm")
    with pytest.raises(ArgumentError, match="index 7"):
        taskloom.load(tmp_path / "m.tlm")(np.array([0, 7, 1]))


def test_an_index_computed_inside_the_graph_is_clamped_not_followed():
    ids = input((2,), dtype="int64", name="ids")
    far = ops.add(ids, taskloom.asarray(np.array(10**9, dtype=np.int64)))
    model = taskloom.compile(Graph([ids], [ops.index_select(taskloom.asarray(TABLE), 0, far)]))
    out = model(np.array([0, 1]))  # no fault, no read outside the table
    assert out.shape == (2, 4) and set(out.ravel()) <= set(TABLE.ravel())


def test_onnx_gather_counts_negatives_from_the_end_and_refuses_the_rest():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["y"])], "g",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                              [numpy_helper.from_array(TABLE, "table")])
    model = taskloom.onnx.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    np.testing.assert_array_equal(model(np.array([0, -1, -5])), TABLE[[0, -1, -5]])
    for bad in (5, -6, 10**9, -10**8):
        with pytest.raises(ArgumentError, match=f"index {bad}.*valid indices are -5..4"):
            model(np.array([0, bad, 1]))
    assert onnx


def test_torch_embedding_out_of_range_is_a_taskloom_error():
    torch = pytest.importorskip("torch")
    emb = torch.nn.Embedding(5, 4).eval()
    fast = taskloom.torch.compile(emb)
    ids = torch.tensor([[0, 4, 2]])
    with torch.inference_mode():
        torch.testing.assert_close(fast(ids), emb(ids))
        with pytest.raises(TaskloomError, match="index"):  # a taskloom error, whichever step sees it
            fast(torch.tensor([[0, 10**9, 2]]))
