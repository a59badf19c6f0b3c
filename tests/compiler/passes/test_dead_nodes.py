"""Dead node elimination. Graph(...) collects only the nodes its outputs depend on, so a
traced or rewritten graph has none; the pass removes nodes added to ``nodes`` by hand."""
from __future__ import annotations

from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.compiler.passes import eliminate_dead_nodes
from tests.compiler.passes.helpers import assert_same_results, ops_of


def test_a_traced_graph_has_no_dead_nodes():
    x = input((3, 4), name="x")
    unused = ops.exp(x)   # traced, but no output depends on it
    g = Graph([x], [ops.relu(x)])
    assert ops_of(g) == ["relu"] and unused.producer[0] not in g.nodes
    assert eliminate_dead_nodes(g) is g


def test_nodes_added_by_hand_that_nothing_reads_are_removed():
    x = input((3, 4), name="x")
    g = Graph([x], [ops.relu(x)])
    live = list(g.nodes)
    e = ops.exp(x)
    g.nodes += [e.producer[0], ops.sigmoid(e).producer[0]]
    s = eliminate_dead_nodes(g)
    assert s.nodes == live
    assert_same_results(g, s)


def test_a_multi_output_node_stays_when_one_output_is_read():
    x = input((6, 2), name="x")
    first, _ = ops.split(x, 3)
    g = Graph([x], [ops.relu(first)])
    assert ops_of(g) == ["split", "relu"]
    assert eliminate_dead_nodes(g) is g
