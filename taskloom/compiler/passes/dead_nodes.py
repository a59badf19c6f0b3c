"""Dead node elimination: nodes whose outputs no graph output depends on disappear.

:class:`~taskloom.graph.Graph` collects only the nodes reachable from its outputs, so a
graph built by tracing has no dead nodes, and every pass (built on
:mod:`~taskloom.compiler.passes.rewrite`) leaves none behind: a node a rewrite bypasses is
simply not collected again. This pass exists for graphs whose ``nodes`` list was edited
by hand, and to state the guarantee; a node with several outputs stays when any of them
is read.
"""
from __future__ import annotations

from taskloom.graph.graph import Graph


def eliminate_dead_nodes(graph: Graph) -> Graph:
    """``graph`` without the nodes that no output depends on (the same graph object when
    there are none)."""
    live = Graph(graph.inputs, graph.outputs)
    if len(live.nodes) == len(graph.nodes) and all(a is b for a, b in zip(live.nodes, graph.nodes)):
        return graph
    return live
