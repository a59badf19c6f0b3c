"""The rewrite machinery shared by the graph passes."""
from __future__ import annotations

import pytest

from taskloom import ops
from taskloom.graph import Graph, GraphError, input
from taskloom.compiler.passes.rewrite import reapply, rewrite, use_counts
from tests.compiler.passes.helpers import assert_same_results, const, ops_of


def test_a_rule_that_matches_nothing_returns_the_same_graph():
    x = input((2, 3), name="x")
    g = Graph([x], [ops.relu(ops.exp(x))])
    assert rewrite(g, lambda node, inputs, ctx: None) is g


def test_nodes_after_a_replacement_are_re_recorded_on_the_new_tensors():
    x = input((2, 3), name="x")
    h = ops.exp(x)
    y = ops.add(ops.relu(h), h)
    g = Graph([x], [y])

    def exp_to_sigmoid(node, inputs, ctx):
        return [ops.sigmoid(inputs[0])] if node.op == "exp" else None
    new = rewrite(g, exp_to_sigmoid)
    assert ops_of(new) == ["sigmoid", "relu", "add"]
    assert ops_of(g) == ["exp", "relu", "add"]  # the old graph is left as it was
    sig = new.nodes[0].outputs[0]
    assert new.nodes[1].inputs == [sig] and new.nodes[2].inputs[1] is sig
    assert new.nodes[1].task == g.nodes[1].task  # re-recorded with the same task
    assert_same_results(Graph([x], [ops.add(ops.relu(ops.sigmoid(x)), ops.sigmoid(x))]), new)


def test_a_re_recorded_node_stays_materialized():
    x = input((2, 3), name="x")
    padded = ops.pad(ops.exp(x), (1, 1))
    padded.producer[0].materialize = True
    new = rewrite(Graph([x], [ops.relu(padded)]),
                  lambda node, inputs, ctx: [ops.sigmoid(inputs[0])] if node.op == "exp" else None)
    assert ops_of(new) == ["sigmoid", "pad", "relu"] and new.nodes[1].materialize


def test_a_replacement_must_keep_shape_and_dtype():
    x = input((2, 3), name="x")
    g = Graph([x], [ops.relu(ops.exp(x))])
    with pytest.raises(GraphError, match="replaced its output 0.*shape and dtype must stay"):
        rewrite(g, lambda node, inputs, ctx: [ops.sum(inputs[0], 0)] if node.op == "exp" else None)
    with pytest.raises(GraphError, match="cannot re-record relu"):
        reapply(g.nodes[1], [input((3, 2))])


def test_use_counts_count_node_inputs_and_graph_outputs():
    x = input((4,), name="x")
    h = ops.relu(x)
    y = ops.mul(h, h)
    g = Graph([x], [y, h])
    counts = use_counts(g)
    assert counts[id(h)] == 3 and counts[id(x)] == 1 and counts[id(y)] == 1
    w = const(4)
    assert use_counts(Graph([x], [ops.add(x, w)]))[id(w)] == 1
