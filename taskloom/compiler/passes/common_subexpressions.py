"""Common subexpression elimination: two nodes with equal tasks (the definition, the
attributes and the input shapes, compared structurally) applied to the same input tensors
compute the same values, so the second is dropped and its readers read the first.

Constants with the same dtype, shape and bytes count as the same tensor (the first one
stands for the others), so layers built twice from equal weights, or rewritten twice into
equal weights by another pass, merge too. Every operator is a pure function of its
inputs, so merging is always safe.
"""
from __future__ import annotations

import hashlib

import numpy as np

from taskloom.graph.graph import Graph, Node
from taskloom.compiler.passes.rewrite import Rewrite, reapply, rewrite
from taskloom.graph.tensor import Tensor
from taskloom.ir.compute import Task


#: Elements of a constant its fingerprint reads, spread over it: hashing every byte of a
#: model's weights (half a gigabyte for GPT-2) took a second of each compile.
SAMPLED = 4096


class _Constants:
    """One representative for each distinct constant value (dtype, shape and bytes)."""

    def __init__(self) -> None:
        self._by_key: dict[tuple, list[Tensor]] = {}

    def canonical(self, t: Tensor) -> Tensor:
        if not t.is_concrete:
            return t
        data = t.numpy()
        same = self._by_key.setdefault((t.dtype, t.shape, _fingerprint(data)), [])
        for c in same:  # equal fingerprints: the bytes decide (0.0 and -0.0 differ)
            if c is t or _same_bytes(c.numpy(), data):
                return c
        same.append(t)
        return t


def _fingerprint(a: np.ndarray) -> bytes:
    """A hash of ``SAMPLED`` elements spread over ``a`` and of its last ones."""
    flat = a.reshape(-1)
    sample = np.concatenate([flat[::max(1, flat.size // SAMPLED)], flat[-16:]])
    return hashlib.sha256(sample.tobytes()).digest()


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1)
    return bool(np.array_equal(a.view(np.uint8), b.view(np.uint8)))


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """``graph`` with each repeated computation (same task on the same inputs) done once."""
    seen: dict[tuple[Task, tuple[int, ...]], list[Tensor]] = {}
    constants = _Constants()

    def merge(node: Node, inputs: list[Tensor], ctx: Rewrite) -> list[Tensor] | None:
        inputs = [constants.canonical(t) for t in inputs]
        key = (node.task, tuple(id(t) for t in inputs))
        if key not in seen:
            # keep the node (re-recorded if its inputs changed) and remember its outputs
            seen[key] = reapply(node, inputs)
        return seen[key]
    return rewrite(graph, merge)
