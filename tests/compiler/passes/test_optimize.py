"""optimize(): every pass, in rounds, to a fixed point, without changing results."""
from __future__ import annotations

import numpy as np

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.graph import record
from taskloom.compiler.passes import optimize, simplify
from tests.compiler.passes.helpers import assert_same_results, const, filled, ops_of, traced_task


def block(x, w, bn, scale):
    """conv -> batch_norm -> relu, reshaped to (N, C*H*W) through two reshapes, times 1."""
    y = ops.relu(ops.batch_norm(ops.conv2d(x, w, padding=1), *bn))
    y = ops.reshape(ops.reshape(y, (2, 4, 25)), (2, 100))
    return ops.mul(y, scale)


def test_a_small_model_is_optimized_without_changing_results():
    x = input((2, 3, 5, 5), name="x")
    w = const(4, 3, 3, 3)
    bn = (const(4), taskloom.asarray(np.linspace(0.5, 2, 4, dtype=np.float32)), const(4), const(4))
    ones = filled((100,), 1.0)
    (head,) = record(traced_task(lambda t: ops.transpose(t, 0, 1), (100, 6)), [const(100, 6)])
    a, b = block(x, w, bn, ones), block(x, w, bn, ones)    # the same block twice
    out = ops.matmul(a, ops.transpose(head, 0, 1))    # the transpose of a constant
    g = Graph([x], [out, ops.sigmoid(b)])
    assert len(g.nodes) == 16
    opt = optimize(g)
    # conv and batch_norm folded; the reshapes merged; "* 1" removed; the two blocks merged;
    # the recorded transpose of a constant folded, and then the transpose of that too
    assert ops_of(opt) == ["conv2d", "relu", "reshape", "matmul", "sigmoid"]
    assert opt.nodes[3].inputs[0] is opt.nodes[4].inputs[0]
    assert opt.nodes[3].inputs[1].is_concrete
    assert_same_results(g, opt, rtol=1e-4, atol=1e-4)


def test_an_optimized_graph_is_a_fixed_point():
    x = input((4, 6), name="x")
    g = Graph([x], [ops.relu(ops.transpose(ops.transpose(ops.exp(x), 0, 1), 0, 1))])
    opt = optimize(g)
    assert ops_of(opt) == ["exp", "relu"]
    assert optimize(opt) is opt
    assert_same_results(g, opt)


def test_rounds_are_bounded_and_the_passes_can_be_chosen():
    x = input((4, 6), name="x")
    g = Graph([x], [ops.relu(ops.exp(x))])
    assert optimize(g) is g
    calls = []

    def counting(graph):
        calls.append(graph)
        return Graph(graph.inputs, graph.outputs)  # always "changes" the graph
    optimize(g, passes=[counting, simplify], max_rounds=3)
    assert len(calls) == 3
