"""Constant folding: nodes whose inputs are all constants run at compile time."""
from __future__ import annotations

import numpy as np

from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.graph import record
from taskloom.compiler.passes import constant_folding
from tests.compiler.passes.helpers import assert_same_results, const, ops_of, traced_task


def test_a_chain_of_constant_nodes_becomes_one_constant():
    # as a frontend may record them: exp(relu(w)) with w a constant, then x + that
    w = const(3, 4)
    (r,) = record(traced_task(ops.relu, (3, 4)), [w])
    (e,) = record(traced_task(ops.exp, (3, 4)), [r])
    x = input((3, 4), name="x")
    g = Graph([x], [ops.add(x, e)])
    assert ops_of(g) == ["relu", "exp", "add"]
    folded = constant_folding(g)
    assert ops_of(folded) == ["add"]
    (c,) = folded.constants
    np.testing.assert_allclose(c.numpy(), np.exp(np.maximum(w.numpy(), 0)), rtol=1e-6)
    assert_same_results(g, folded)


def test_every_output_of_a_multi_output_node_is_folded():
    w = const(6, 2)
    pieces = record(traced_task(lambda t: ops.split(t, 3), (6, 2)), [w])
    x = input((3, 2), name="x")
    g = Graph([x], [ops.mul(x, pieces[0]), ops.sub(x, pieces[1])])
    folded = constant_folding(g)
    assert ops_of(folded) == ["mul", "sub"]
    np.testing.assert_array_equal(folded.constants[0].numpy(), w.numpy()[:3])
    np.testing.assert_array_equal(folded.constants[1].numpy(), w.numpy()[3:])
    assert_same_results(g, folded)


def test_a_graph_output_that_is_constant_becomes_a_constant_output():
    w = const(5)
    (r,) = record(traced_task(ops.neg, (5,)), [w])
    x = input((5,), name="x")
    g = Graph([x], [ops.relu(x), r])
    folded = constant_folding(g)
    assert ops_of(folded) == ["relu"] and folded.outputs[1].is_concrete
    assert_same_results(g, folded)


def test_nodes_reading_an_input_stay():
    x = input((2, 3), name="x")
    g = Graph([x], [ops.add(ops.relu(x), const(3))])
    assert constant_folding(g) is g
