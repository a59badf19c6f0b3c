"""Indices read from data at run time (gather, index_select, embedding) are checked as the
kernel reads them: an index out of range is an IndexOutOfRange naming the operator, its
argument, the value and the valid range -- eagerly, in a compiled graph, through the ONNX
and torch frontends -- never a fault or a read outside the table, and the kernel or model
still works afterwards. Negative indices count from the end only where asked (``wrap``,
ONNX), as torch and ONNX define them."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.errors import IndexOutOfRange, TaskloomError
from taskloom.graph import Graph, input

TABLE = np.arange(20, dtype=np.float32).reshape(5, 4)  # 5 rows
FAR = (10**9, -10**8)


def lookup(op: str, table, ids, wrap: bool = False):
    """Rows of ``table`` at ``ids`` (a 1-d index) through ``op``, along axis 0."""
    if op == "embedding":
        return ops.embedding(ids, table, wrap=wrap)
    if op == "index_select":
        return ops.index_select(table, 0, ids, wrap=wrap)
    return ops.gather(table, 0, ops.broadcast_to(ops.reshape(ids, (-1, 1)), (ids.shape[0], 4)), wrap=wrap)


def bad_values(wrap: bool) -> list[int]:
    """Out of range for 5 rows: just past each end, far, and 2**32 + 1 (row 1 if it were
    narrowed to 32 bits before the check)."""
    return [5, -6 if wrap else -1, *FAR, 2 ** 32 + 1]


def expect_out_of_range(fn, op: str, bad: int, valid: str) -> None:
    with pytest.raises(IndexOutOfRange) as info:
        fn()
    text = str(info.value)
    assert f"{op}()" in text and f"index {bad}," in text and f"valid indices: {valid}" in text, text
    assert isinstance(info.value, IndexError)  # as torch and numpy raise


OPS = ["embedding", "index_select", "gather"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("wrap", [False, True])
def test_eager_lookups_check_each_index(op, wrap):
    table = taskloom.asarray(TABLE)
    good = np.array([4, 0, -5, -1] if wrap else [4, 0, 2], dtype=np.int64)
    np.testing.assert_array_equal(lookup(op, table, taskloom.asarray(good), wrap).numpy(), TABLE[good])
    for bad in bad_values(wrap):
        expect_out_of_range(lambda: lookup(op, table, taskloom.asarray(np.array([0, bad, 1])), wrap),
                            op, bad, "-5..4" if wrap else "0..4")
    np.testing.assert_array_equal(lookup(op, table, taskloom.asarray(good), wrap).numpy(), TABLE[good])


@pytest.mark.parametrize("op", OPS)
def test_compiled_graph_lookups_check_each_index(op):
    ids = input((3,), dtype="int64", name="ids")
    model = taskloom.compile(Graph([ids], [ops.mul(lookup(op, taskloom.asarray(TABLE), ids), 2.0)]))
    for bad in bad_values(False):
        expect_out_of_range(lambda: model(np.array([0, bad, 1])), op, bad, "0..4")
    np.testing.assert_array_equal(model(np.array([4, 0, 2])), TABLE[[4, 0, 2]] * 2)  # still usable


def test_a_gather_fused_into_a_matmul_still_checks():
    rng = np.random.default_rng(0)
    table, w = rng.standard_normal((50, 32)).astype(np.float32), rng.standard_normal((32, 24)).astype(np.float32)
    ids = input((7,), dtype="int32", name="ids")
    model = taskloom.compile(Graph([ids], [ops.matmul(ops.embedding(ids, taskloom.asarray(table)),
                                                      taskloom.asarray(w))]))
    assert [k["ops"] for k in model.meta["kernels"]] == [["embedding", "matmul"]]  # one kernel
    for bad in (50, -1, *FAR):
        expect_out_of_range(lambda: model(np.array([0, 1, 2, bad, 4, 5, 6], np.int32)), "embedding", bad, "0..49")
    good = np.array([0, 49, 3, 3, 10, 20, 1], np.int32)
    np.testing.assert_allclose(model(good), table[good] @ w, rtol=1e-5, atol=1e-5)


def test_the_check_survives_save_and_load(tmp_path):
    ids = input((3,), dtype="int64", name="ids")
    taskloom.compile(Graph([ids], [ops.embedding(ids, taskloom.asarray(TABLE))])).save(tmp_path / "m.tlm")
    loaded = taskloom.load(tmp_path / "m.tlm")
    expect_out_of_range(lambda: loaded(np.array([0, 7, 1])), "embedding", 7, "0..4")
    np.testing.assert_array_equal(loaded(np.array([1, 2, 3])), TABLE[[1, 2, 3]])


def test_concurrent_calls_each_see_their_own_failure():
    """A status per call: threads calling one kernel at once each get their own answer."""
    table = taskloom.asarray(TABLE)
    results: dict[int, object] = {}

    def run(k: int) -> None:
        ids = np.array([k % 5, 9 if k % 2 else 1] * 500)
        try:
            results[k] = ops.embedding(taskloom.asarray(ids), table).numpy()
        except IndexOutOfRange as e:
            results[k] = e
    threads = [threading.Thread(target=run, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, r in results.items():
        if k % 2:
            assert isinstance(r, IndexOutOfRange) and "index 9," in str(r)
        else:
            np.testing.assert_array_equal(r, TABLE[[k % 5, 1] * 500])


def _onnx_model(node: str, ids_shape: list[int], out_shape: list[int], axis: int = 0):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph([helper.make_node(node, ["table", "ids"], ["y"], axis=axis)], "g",
                              [helper.make_tensor_value_info("ids", TensorProto.INT64, ids_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(TABLE, "table")])
    return taskloom.onnx.from_onnx(helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)]))


@pytest.mark.parametrize("node,axis", [("Gather", 0), ("Gather", 1), ("GatherElements", 0)])
def test_onnx_gathers_count_negatives_from_the_end_and_refuse_the_rest(node, axis):
    n = TABLE.shape[axis]
    if node == "Gather":
        model = _onnx_model(node, [3], [3, 4] if axis == 0 else [5, 3], axis)
        reference = lambda ids: np.take(TABLE, ids, axis=axis)  # noqa: E731
        shaped = lambda ids: ids  # noqa: E731
    else:
        model = _onnx_model(node, [3, 4], [3, 4], axis)
        reference = lambda ids: np.take_along_axis(TABLE, ids, axis=0)  # noqa: E731
        shaped = lambda ids: np.repeat(ids[:, None], 4, axis=1)  # noqa: E731
    good = np.array([0, -1, -n])
    np.testing.assert_array_equal(model(shaped(good)), reference(shaped(good)))
    for bad in (n, -n - 1, *FAR):
        expect_out_of_range(lambda: model(shaped(np.array([0, bad, 1]))), "", bad, f"{-n}..{n - 1}")
    np.testing.assert_array_equal(model(shaped(good)), reference(shaped(good)))


def test_torch_embedding_out_of_range_is_a_taskloom_error():
    torch = pytest.importorskip("torch")
    # dynamo runs a frame eagerly once it has compiled its code 8 times (its recompile
    # limit): other tests in this process may have compiled Embedding.forward already
    torch._dynamo.reset()
    emb = torch.nn.Embedding(5, 4).eval()
    fast = taskloom.torch.compile(emb)
    with torch.inference_mode():
        torch.testing.assert_close(fast(torch.tensor([[0, 4, 2]])), emb(torch.tensor([[0, 4, 2]])))
        for bad in (5, -1, *FAR):
            with pytest.raises(TaskloomError, match=f"embedding.*index {bad},"):
                fast(torch.tensor([[0, bad, 2]]))
        torch.testing.assert_close(fast(torch.tensor([[3, 1, 0]])), emb(torch.tensor([[3, 1, 0]])))


def test_constant_indices_in_a_traced_graph_are_checked_when_traced():
    x = input((5, 4), name="x")
    with pytest.raises(IndexOutOfRange, match=r"index_select\(\): 'index' holds the index 7"):
        ops.index_select(x, 0, np.array([0, 7]))
    ops.index_select(x, 0, np.array([-5, 4]), wrap=True)  # in range when counted from the end


def test_torch_advanced_indexing_counts_negatives_from_the_end():
    torch = pytest.importorskip("torch")

    class Pick(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("table", torch.from_numpy(TABLE.copy()))

        def forward(self, ids):
            return self.table[ids]
    model = Pick().eval()
    fast = taskloom.torch.compile(model)
    with torch.inference_mode():
        ids = torch.tensor([0, -1, -5])
        torch.testing.assert_close(fast(ids), model(ids))
        for bad in (5, -6, *FAR):
            with pytest.raises(TaskloomError, match=f"index {bad},.*valid indices: -5..4"):
                fast(torch.tensor([0, bad, 1]))
        torch.testing.assert_close(fast(ids), model(ids))
