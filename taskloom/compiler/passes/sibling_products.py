"""Products of one input by several constant factors become one product: an attention
layer's query, key and value projections of the same hidden states (BERT's three linears
of 768 x 768) are one of 768 x 2304, whose result each reader takes a slice of.

One launch instead of three, and a product with three times the columns: at batch 1 each
projection alone gives a GPU a few dozen blocks and a CPU core a narrow panel, and the
merged one fills more of either. The slices are views that fuse into their readers (the
reshapes and permutes before an attention). The factors are concatenated at compile time.

Merged: the ``matmul(x, C)`` nodes (``C`` a constant matrix) that read one tensor ``x``,
and likewise its ``linear(x, W, b)`` nodes (constant ``W``, and ``b`` when all have one),
two or more of them, of one dtype, each with a multiple of :data:`COLUMNS` columns (so
that every slice starts on 16 bytes for the vector loads of its readers). The graph
compiler runs it after the attention pass; ``TASKLOOM_MERGE_PRODUCTS=0`` turns it off (for
measuring what it is worth).
"""
from __future__ import annotations

import numpy as np

from taskloom import ops
from taskloom.compiler.passes.rewrite import Rewrite, rewrite
from taskloom.graph.graph import Graph, Node
from taskloom.graph.tensor import Tensor, asarray

#: the columns each merged product's share must be a multiple of
COLUMNS = 16


def _kind(node: Node) -> str | None:
    """``"matmul"`` or ``"linear"`` (with or without a bias) for a product by a constant
    matrix, else None."""
    if node.op == "matmul" and len(node.inputs) == 2:
        a, b = node.inputs
        if b.is_concrete and b.ndim == 2 and a.ndim >= 2 and b.shape[1] % COLUMNS == 0:
            return "matmul"
    if node.op == "linear" and len(node.inputs) in (2, 3):
        w = node.inputs[1]
        if all(t.is_concrete for t in node.inputs[1:]) and w.ndim == 2 and node.inputs[0].ndim >= 1 \
                and w.shape[0] % COLUMNS == 0:
            return f"linear{len(node.inputs)}"
    return None


def _siblings(graph: Graph) -> dict[int, list[Node]]:
    """Per node of a group to merge (by id), its group in graph order."""
    groups: dict[tuple, list[Node]] = {}
    for n in graph.nodes:
        kind = _kind(n)
        if kind is not None:
            groups.setdefault((id(n.inputs[0]), kind, n.inputs[1].dtype.name), []).append(n)
    return {id(n): g for g in groups.values() if len(g) > 1 for n in g}


def merge_sibling_products(graph: Graph) -> Graph:
    """``graph`` with each set of sibling products (see the module) merged into one."""
    siblings = _siblings(graph)
    if not siblings:
        return graph
    merged: dict[int, list[Tensor]] = {}  # first sibling's id -> the slices, in group order

    def rule(node: Node, inputs: list[Tensor], ctx: Rewrite) -> list[Tensor] | None:
        group = siblings.get(id(node))
        if group is None:
            return None
        key = id(group[0])
        if key not in merged:
            merged[key] = _merge(group, inputs[0])
        return [merged[key][next(k for k, n in enumerate(group) if n is node)]]
    return rewrite(graph, rule)


def _merge(group: list[Node], x: Tensor) -> list[Tensor]:
    """One product standing for ``group`` (of ``x``, as it is in the new graph), sliced."""
    factors = [n.inputs[1].numpy() for n in group]
    if group[0].op == "matmul":  # (K, N_i): side by side
        whole = ops.matmul(x, asarray(np.concatenate(factors, axis=1)))
        widths = [f.shape[1] for f in factors]
    else:  # linear's (N_i, K): one above the other, and so the biases
        bias = asarray(np.concatenate([n.inputs[2].numpy() for n in group])) if len(group[0].inputs) == 3 \
            else None
        whole = ops.linear(x, asarray(np.concatenate(factors, axis=0)), bias)
        widths = [f.shape[0] for f in factors]
    starts = np.cumsum([0, *widths])
    return [ops.slice(whole, -1, int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]
