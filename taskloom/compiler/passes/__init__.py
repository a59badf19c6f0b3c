"""Graph passes: each a function ``Graph -> Graph`` that returns a new graph computing the
same outputs (or the graph itself when it has nothing to do), built on the rewrite
machinery of :mod:`taskloom.compiler.passes.rewrite`.

:func:`optimize` runs them all to a fixed point.
"""
from __future__ import annotations

from typing import Callable, Sequence

from taskloom.graph.graph import Graph
from taskloom.compiler.passes.activations import recognize_activations
from taskloom.compiler.passes.common_subexpressions import eliminate_common_subexpressions
from taskloom.compiler.passes.constant_folding import constant_folding
from taskloom.compiler.passes.dead_nodes import eliminate_dead_nodes
from taskloom.compiler.passes.fold_batch_norm import fold_batch_norm
from taskloom.compiler.passes.simplify import simplify

Pass = Callable[[Graph], Graph]

#: The order one round runs the passes in: constants first (so later rules see them), then
#: the local rewrites and the activations written out as arithmetic, merging repeated work
#: before folding batch norms (so a repeated layer is folded once).
DEFAULT_PASSES: tuple[Pass, ...] = (constant_folding, simplify, recognize_activations,
                                    eliminate_common_subexpressions, fold_batch_norm, eliminate_dead_nodes)


def optimize(graph: Graph, passes: Sequence[Pass] = DEFAULT_PASSES, max_rounds: int = 10) -> Graph:
    """``graph`` after running ``passes`` in order, round after round, until a round
    changes nothing or ``max_rounds`` rounds have run. Every pass keeps the results (up to
    floating-point rounding where batch norms are folded), so the result computes what
    ``graph`` computes."""
    for _ in range(max_rounds):
        before = graph
        for p in passes:
            graph = p(graph)
        if graph is before:
            break
    return graph


__all__ = ["optimize", "DEFAULT_PASSES", "constant_folding", "simplify", "recognize_activations",
           "fold_batch_norm", "eliminate_common_subexpressions", "eliminate_dead_nodes"]
