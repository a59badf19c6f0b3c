"""Algebraic simplification: operators that do nothing are removed, and chains of
reshapes or of permutations become one operator.

Rules (each matches one node, reading its inputs as they are in the new graph):

- ``reshape``/``flatten``/``squeeze``/``unsqueeze``/``expand``/``broadcast_to`` to the
  input's own shape, and ``transpose``/``permute`` by the identity permutation: the input.
- ``x * 1``, ``1 * x``, ``x + 0``, ``0 + x``, ``x - 0``, ``x / 1``, where the constant holds
  only that value and the result has ``x``'s shape and dtype (a constant that broadcasts
  ``x`` to a larger shape, or promotes its dtype, is not an identity): ``x``.
- a reshape-like operator applied to a reshape-like operator: one ``reshape`` of the first
  one's input (or that input itself when the shapes agree).
- a permutation applied to a permutation: one ``permute`` by the composed permutation (or
  the input itself when it is the identity).
- a gather, index_select or embedding whose index is ``where(i < 0, i + n, i)`` (negative
  indices counted from the end of a dimension of size ``n``): the same lookup of ``i`` with
  ``wrap=True``, which checks ``i`` against ``[-n, n)``.

Rewrites that make ``x * 0`` a zero constant, or reorder arithmetic, are not done: they
change results for inf and nan. The one liberty taken is the sign of zero: ``-0.0 + 0`` is
``+0.0``, and without the addition it stays ``-0.0`` (equal in every comparison), as in
other compilers' simplifiers.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from taskloom import ops
from taskloom.graph.graph import Graph, Node
from taskloom.compiler.passes.rewrite import Rewrite, rewrite, same_type
from taskloom.graph.tensor import Tensor

RESHAPES = ("reshape", "flatten", "squeeze", "unsqueeze")
PERMUTES = ("transpose", "permute")
BROADCASTS = ("expand", "broadcast_to")

#: operator -> ((operand position that may be the constant, its identity value), ...)
IDENTITIES = {"mul": ((1, 1), (0, 1)), "add": ((1, 0), (0, 0)), "sub": ((1, 0),), "div": ((1, 1),)}


def _is_filled(t: Tensor, value: float) -> bool:
    """Whether ``t`` is a constant whose every element equals ``value``."""
    return t.is_concrete and bool(np.all(t.numpy() == value))


def _producer(t: Tensor, ops_: tuple[str, ...]) -> Node | None:
    """The node that made ``t`` when it is one of ``ops_``."""
    node = t.producer[0] if t.producer is not None else None
    return node if node is not None and node.op in ops_ else None


def _static(shape: tuple) -> bool:
    return all(isinstance(d, int) for d in shape)


def _identity(node: Node, inputs: list[Tensor]) -> list[Tensor] | None:
    out = node.outputs[0]
    if node.op in (*RESHAPES, *BROADCASTS) and same_type(inputs[0], out):
        return [inputs[0]]
    if node.op in PERMUTES and tuple(node.task.attr("dims")) == tuple(range(out.ndim)):
        return [inputs[0]]
    for pos, value in IDENTITIES.get(node.op, ()):
        x, c = inputs[1 - pos], inputs[pos]
        if _is_filled(c, value) and same_type(x, out):
            return [x]
    return None


def _merge_reshapes(node: Node, inputs: list[Tensor]) -> list[Tensor] | None:
    inner = _producer(inputs[0], RESHAPES) if node.op in RESHAPES else None
    out = node.outputs[0]
    if inner is None or not _static((*inner.inputs[0].shape, *out.shape)):
        return None
    x = inner.inputs[0]
    return [x if same_type(x, out) else ops.reshape(x, out.shape)]


def _merge_permutes(node: Node, inputs: list[Tensor]) -> list[Tensor] | None:
    inner = _producer(inputs[0], PERMUTES) if node.op in PERMUTES else None
    if inner is None:
        return None
    first, second = inner.task.attr("dims"), node.task.attr("dims")
    dims = tuple(first[d] for d in second)
    x = inner.inputs[0]
    return [x if dims == tuple(range(len(dims))) else ops.permute(x, dims)]


#: lookup -> (position of its index operand, position of the table)
LOOKUPS = {"gather": (1, 0), "index_select": (1, 0), "embedding": (0, 1)}


def _wrapped_source(t: Tensor, n: int) -> Tensor | None:
    """``i`` when ``t`` is ``where(i < 0, i + n, i)``, else None."""
    where = _producer(t, ("where",))
    if where is None:
        return None
    cond, shifted, i = where.inputs
    less, add = _producer(cond, ("less",)), _producer(shifted, ("add",))
    if less is None or add is None or less.inputs[0] is not i or not _is_filled(less.inputs[1], 0):
        return None
    a, b = add.inputs
    if not same_type(shifted, i) or not ((a is i and _is_filled(b, n)) or (b is i and _is_filled(a, n))):
        return None
    return i


def _wrapped_index(node: Node, inputs: list[Tensor]) -> list[Tensor] | None:
    """A lookup whose index is ``where(i < 0, i + n, i)`` -- how the frontends count
    negative indices from the end -- with ``n`` the size it indexes (through reshapes too):
    the lookup of ``i`` with ``wrap``, so that a bad index is reported as the model gave it."""
    if node.op not in LOOKUPS or node.task.attr("wrap"):
        return None
    at, table = LOOKUPS[node.op]
    x, index = inputs[table], inputs[at]
    axis = 0 if node.op == "embedding" else node.task.attr("axis")
    t = index
    while (view := _producer(t, RESHAPES)) is not None:
        t = view.inputs[0]
    i = _wrapped_source(t, x.shape[axis]) if isinstance(x.shape[axis], int) else None
    if i is None:
        return None
    if tuple(i.shape) != tuple(index.shape):
        i = ops.reshape(i, index.shape)
    if node.op == "embedding":
        return [ops.embedding(i, x, wrap=True)]
    return [getattr(ops, node.op)(x, axis, i, wrap=True)]


RULES: tuple[Callable[[Node, list[Tensor]], list[Tensor] | None], ...] = (
    _identity, _merge_reshapes, _merge_permutes, _wrapped_index)


def _simplify(node: Node, inputs: list[Tensor], ctx: Rewrite) -> list[Tensor] | None:
    for rule in RULES:
        outs = rule(node, inputs)
        if outs is not None:
            return outs
    return None


def simplify(graph: Graph) -> Graph:
    """``graph`` with identity operators removed and reshape and permutation chains merged
    (see the module docstring for the rules)."""
    return rewrite(graph, _simplify)
