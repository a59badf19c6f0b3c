"""Which graph inputs hold indices into a table, and the range each must lie in.

Kernels clamp every index they read, so no index faults; the range check that makes an
out-of-range index an error is done once per call, on the inputs, where it costs one pass
of numpy over the ids (:meth:`~taskloom.runtime.compiled_graph.CompiledGraph.__call__`).
An input reaches a lookup's index operand directly or through reshapes and casts, or
through the ``where(i < 0, i + n, i)`` that counts ONNX's negative indices from the end.
"""
from __future__ import annotations

from typing import Any

from taskloom.graph.graph import Graph
from taskloom.graph.tensor import Tensor

#: op -> (position of the index operand, position of the table)
LOOKUPS = {"embedding": (0, 1), "index_select": (1, 0), "gather": (1, 0)}
_VIEWS = ("reshape", "cast", "flatten", "squeeze", "unsqueeze")


def _table_extent(node: Any) -> int:
    table = node.inputs[LOOKUPS[node.op][1]]
    return int(table.shape[0] if node.op == "embedding" else table.shape[node.task.attr("axis", 0)])


def _source(t: Tensor, extent: int) -> tuple[Tensor, int]:
    """The tensor ``t`` is a view of, and the lowest index it may hold (``-extent`` behind
    the negative-index wrap)."""
    lo = 0
    while t.producer is not None:
        node = t.producer[0]
        if node.op in _VIEWS and len(node.inputs) == 1:
            t = node.inputs[0]
        elif node.op == "where" and len(node.inputs) == 3:
            lo, t = -extent, node.inputs[2]
        else:
            break
    return t, lo


def index_checks(graph: Graph) -> list[dict[str, Any]]:
    """One entry per (graph input, lookup) pair: ``{"input", "op", "low", "extent"}``."""
    position = {id(t): k for k, t in enumerate(graph.inputs)}
    found = []
    for node in graph.nodes:
        if node.op not in LOOKUPS:
            continue
        extent = _table_extent(node)
        src, lo = _source(node.inputs[LOOKUPS[node.op][0]], extent)
        if id(src) in position:
            found.append({"input": position[id(src)], "op": node.op, "low": lo, "extent": extent})
    return found
