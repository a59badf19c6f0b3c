"""Constant folding: a node whose inputs are all constants runs now, at compile time, and
its outputs become constants of the graph.

Tracing already runs an operator applied to constants only (eager mode), so such nodes
appear when a graph is assembled by hand with ``record`` or when another pass makes a
node's inputs constant. A folded output is stored in full, so folding a broadcast of a
small constant to a large shape trades memory for the (fusable) broadcast. A node whose
result has a symbolic size is computed per call.
"""
from __future__ import annotations

from taskloom.graph.eager import run_eager
from taskloom.graph.graph import Graph, Node
from taskloom.compiler.passes.rewrite import Rewrite, rewrite
from taskloom.graph.tensor import Tensor


def _fold(node: Node, inputs: list[Tensor], ctx: Rewrite) -> list[Tensor] | None:
    # (a result sized by a symbol of the graph -- an arange to the sequence length -- stays)
    if all(t.is_concrete for t in inputs) and all(isinstance(d, int) for o in node.outputs for d in o.shape):
        return run_eager(node.task, inputs)
    return None


def constant_folding(graph: Graph) -> Graph:
    """``graph`` with every node whose inputs are all constants replaced by its results
    (computed by the eager executor, so with the same kernels a compiled graph would use)."""
    return rewrite(graph, _fold)
