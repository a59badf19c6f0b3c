"""Tracing graphs and partitioning them into fused groups."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, GraphError, input
from taskloom.graph.fusion import fuse_graph

rng = np.random.default_rng(0)


def const(*shape):
    return taskloom.asarray(rng.standard_normal(shape).astype(np.float32))


def test_tracing_records_nodes_and_constants():
    x = input((4, 8), name="x")
    w, b = const(16, 8), const(16)
    y = ops.relu(ops.linear(x, w, b))
    assert not y.is_concrete and y.shape == (4, 16)
    g = Graph([x], [y])
    assert [n.op for n in g.nodes] == ["linear", "relu"]
    assert g.constants == [w, b]
    text = str(g)
    assert "graph(x: f32[4, 8]):" in text and "= relu(%0)  # bijective" in text and "return %1" in text


def test_a_graph_output_must_come_from_its_inputs():
    x, other = input((3,), name="x"), input((3,), name="other")
    with pytest.raises(GraphError, match="not among the graph's inputs"):
        Graph([x], [ops.add(x, other)])
    with pytest.raises(GraphError, match="must be a taskloom.graph.input"):
        Graph([const(3)], [x])


def groups_of(outputs, inputs):
    return [g.ops for g in fuse_graph(Graph(inputs, outputs))]


def test_conv_batchnorm_relu_is_one_group():
    x = input((1, 3, 9, 9), name="x")
    y = ops.conv2d(x, const(4, 3, 3, 3), const(4), padding=1)
    y = ops.relu(ops.batch_norm(y, const(4), taskloom.asarray(np.ones(4, np.float32)), const(4), const(4)))
    assert groups_of([ops.max_pool2d(y, 2)], [x]) == [["conv2d", "batch_norm", "relu"], ["max_pool2d"]]


def test_prologues_epilogues_and_residuals_join_the_anchor():
    x = input((8, 8), name="x")
    w = const(8, 8)
    h = ops.matmul(ops.transpose(x, 0, 1), w)           # transpose: an injective prologue
    y = ops.add(ops.gelu(h), ops.transpose(x, 0, 1))     # gelu and the residual add: epilogues
    assert groups_of([y], [x]) == [["transpose", "matmul", "gelu", "transpose", "add"]]


def test_an_intermediate_that_is_also_an_output_is_not_fused_away():
    x = input((4, 8), name="x")
    h = ops.linear(x, const(8, 8))
    y = ops.relu(h)
    grouped = fuse_graph(Graph([x], [y, h]))
    assert [g.ops for g in grouped] == [["linear"], ["relu"]]


def test_two_reductions_stay_in_two_groups():
    x = input((4, 8), name="x")
    y = ops.softmax(ops.linear(x, const(8, 8)), axis=-1)
    assert groups_of([y], [x]) == [["linear"], ["softmax"]]


def test_a_tensor_read_twice_is_not_an_epilogue_input():
    x = input((4, 8), name="x")
    h = ops.linear(x, const(8, 8))
    y = ops.add(ops.relu(h), ops.neg(h))
    grouped = groups_of([y], [x])
    assert grouped[0] == ["linear"] and sum(len(g) for g in grouped) == 4


def test_a_costly_injective_node_is_not_a_prologue():
    x = input((8, 8), name="x")
    y = ops.matmul(ops.gelu(x), const(8, 8))   # gelu before a matmul would be recomputed per column
    assert groups_of([y], [x]) == [["gelu"], ["matmul"]]


def test_reshapes_are_epilogues_and_transposes_are_not():
    x = input((6, 8), name="x")
    h = ops.linear(x, const(12, 8))                                    # (6, 12)
    y = ops.gelu(ops.reshape(h, (2, 3, 12)))                           # reshape keeps the order
    assert groups_of([y], [x]) == [["linear", "reshape", "gelu"]]
    z = ops.relu(ops.transpose(ops.linear(x, const(12, 8)), 0, 1))     # transpose does not
    grouped = groups_of([z], [x])
    assert ["linear"] in grouped and len(grouped) == 2


def test_a_chain_of_layout_ops_is_one_prologue():
    x = input((2, 4, 6), name="x")
    h = ops.reshape(ops.permute(x, (0, 2, 1)), (2, 6, 4))   # permute then reshape: both injective
    y = ops.batch_matmul(h, const(2, 4, 5))
    assert groups_of([y], [x]) == [["permute", "reshape", "batch_matmul"]]


def test_a_transpose_of_the_innermost_axis_is_no_prologue_of_a_window():
    """A window reads each element several times, each a gather through the transpose:
    converting once in a kernel of its own is cheaper. A 1x1 convolution (no window) still
    takes the transpose as its prologue."""
    x = input((1, 16, 8, 8), name="x")
    xh = ops.permute(x, (0, 2, 3, 1))
    w3 = taskloom.asarray(np.ones((3, 3, 16, 16), np.float32))
    w1 = taskloom.asarray(np.ones((1, 1, 16, 16), np.float32))
    window = fuse_graph(Graph([x], [ops.conv2d(xh, w3, padding=1, layout="NHWC")]))
    assert [g.ops for g in window] == [["permute"], ["conv2d"]]
    pointwise = fuse_graph(Graph([x], [ops.conv2d(xh, w1, layout="NHWC")]))
    assert [g.ops for g in pointwise] == [["permute", "conv2d"]]
    # nor through a pad that already joined the window's group
    padded = fuse_graph(Graph([x], [ops.conv2d(ops.pad(xh, (0, 0, 1, 1, 1, 1)), w3, layout="NHWC")]))
    assert [g.ops for g in padded] == [["permute"], ["pad", "conv2d"]]
