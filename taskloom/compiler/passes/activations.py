"""Activations written out as arithmetic, recognized as the one operator they compute.

Models often spell GELU out: GPT-2's ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``,
exported BERTs' ``x * 0.5 * (1 + erf(x / sqrt(2)))``. Traced, each is six to eight
elementwise nodes, and ``x`` has two readers, so no fusion rule puts them in the epilogue
of the product that makes ``x``: they become a kernel of their own, and the next product
recomputes part of them for every block of its columns. As one ``gelu`` node they are that
product's epilogue.

A ``mul`` node is matched by value, not by the shape of its expression: where the nodes
behind it (at most :data:`MAX_NODES`, each elementwise on scalar constants, one of them a
``tanh`` or ``erf``) lead back to one tensor ``x`` of its shape and dtype, they are
evaluated in float64 on :data:`PROBE`; where that agrees with the GELU of the same special
function to :data:`TOLERANCE` (the constants may be stored in float16), the node becomes
``gelu(x)``, which computes in float32 what the chain computed step by step.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from taskloom import ops
from taskloom.compiler.passes.rewrite import Rewrite, rewrite, same_type
from taskloom.graph.graph import Graph, Node
from taskloom.graph.tensor import Tensor

#: the elementwise operators a chain may use, as numpy computes them
FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "neg": np.negative, "tanh": np.tanh, "erf": np.vectorize(math.erf, otypes=[np.float64])}
#: GELU by the special function in its chain: approximate= and the function
GELUS: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "tanh": ("tanh", lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    "erf": ("none", lambda x: 0.5 * x * (1 + FUNCTIONS["erf"](x / math.sqrt(2))))}
MAX_NODES = 12
PROBE = np.linspace(-6.0, 6.0, 121)
#: the largest difference from the GELU allowed, relative to 1 + |GELU|: float16 constants
#: move the chain's value by about 1e-4; the tanh and erf forms differ by 3e-4 to 2e-2
TOLERANCE = 1e-3


def _scalar(t: Tensor) -> float | None:
    return float(t.numpy().reshape(-1)[0]) if t.is_concrete and int(np.prod(t.shape)) == 1 else None


def _chain(roots: list[Tensor]) -> list[Tensor]:
    """The tensors ``roots`` are and the nodes behind them read, nearest first, through at
    most :data:`MAX_NODES` nodes of :data:`FUNCTIONS`."""
    seen, order, frontier = set(), [], []
    for r in roots:
        if id(r) not in seen and _scalar(r) is None:
            seen.add(id(r))
            order.append(r)
            frontier.append(r)
    nodes = 0
    while frontier and nodes < MAX_NODES:
        t = frontier.pop(0)
        node = t.producer[0] if t.producer is not None else None
        if node is None or node.op not in FUNCTIONS:
            continue
        nodes += 1
        for x in node.inputs:
            if id(x) not in seen and _scalar(x) is None:
                seen.add(id(x))
                order.append(x)
                frontier.append(x)
    return order


def _evaluate(t: Tensor, x: Tensor, budget: list[int]) -> np.ndarray | None:
    """``t`` as a function of ``x`` on :data:`PROBE`, or None where it reads anything else."""
    if t is x:
        return PROBE
    value = _scalar(t)
    if value is not None:
        return np.float64(value)
    node = t.producer[0] if t.producer is not None else None
    if node is None or node.op not in FUNCTIONS or budget[0] == 0:
        return None
    budget[0] -= 1
    args = [_evaluate(a, x, budget) for a in node.inputs]
    if any(a is None for a in args):
        return None
    if node.op == "pow" and len(args) == 1:  # a scalar exponent, kept as the node's attribute
        args.append(np.float64(node.task.attr("exponent")))
    with np.errstate(all="ignore"):
        return np.asarray(FUNCTIONS[node.op](*args), dtype=np.float64)


def _special(roots: list[Tensor], x: Tensor) -> set[str]:
    """The special functions (tanh, erf) among the nodes between ``x`` and ``roots``."""
    found, stack, seen = set(), list(roots), set()
    while stack:
        u = stack.pop()
        node = u.producer[0] if u.producer is not None and u is not x else None
        if node is None or id(node) in seen or node.op not in FUNCTIONS:
            continue
        seen.add(id(node))
        found |= {node.op} & set(GELUS)
        stack.extend(node.inputs)
    return found


def _gelu(node: Node, inputs: list[Tensor], ctx: Rewrite) -> list[Tensor] | None:
    """``gelu(x)`` for a ``mul`` whose inputs compute GELU of one tensor ``x``, else None."""
    if node.op != "mul" or len(inputs) != 2:
        return None
    out = node.outputs[0]
    for x in _chain(inputs):
        special = _special(inputs, x)
        if not same_type(x, out) or len(special) != 1:
            continue
        budget = [MAX_NODES]
        a, b = (_evaluate(t, x, budget) for t in inputs)
        if a is None or b is None:
            continue
        approximate, gelu = GELUS[special.pop()]
        want = gelu(PROBE)
        with np.errstate(all="ignore"):
            close = np.abs(a * b - want) <= TOLERANCE * (1 + np.abs(want))
        return [ops.gelu(x, approximate)] if bool(np.all(close)) else None
    return None


def recognize_activations(graph: Graph) -> Graph:
    """``graph`` with GELUs written out as arithmetic made ``gelu`` nodes (see the module)."""
    return rewrite(graph, _gelu)
