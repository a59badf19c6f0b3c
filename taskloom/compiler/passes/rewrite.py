"""The shared machinery of graph passes: rebuild a graph node by node, letting a rule
replace the outputs of the nodes it matches.

A pass is a rule ``rule(node, inputs, ctx) -> list[Tensor] | None`` handed to
:func:`rewrite`. ``node`` is a node of the old graph, ``inputs`` its inputs as they are in
the new graph (earlier replacements applied) and ``ctx`` a :class:`Rewrite` that maps any
other old tensor to its new one and counts how often the old graph reads a tensor. The
rule returns the new tensors standing for ``node.outputs`` (made by applying
``taskloom.ops`` functions, or existing tensors of the new graph), or None to keep the
node. A kept node is reused as it is when its inputs did not change, and re-recorded with
its own task on the new inputs otherwise. A replacement must have the shape and dtype of
what it replaces: a task's placeholders are tied to its input shapes, so the nodes after
it could not be re-recorded otherwise. The old graph is never modified; the new one shares
the nodes that did not change.
"""
from __future__ import annotations

from typing import Callable, Sequence

from taskloom.graph.graph import Graph, GraphError, Node, record
from taskloom.graph.tensor import Tensor

Rule = Callable[[Node, list[Tensor], "Rewrite"], "Sequence[Tensor] | None"]


def use_counts(graph: Graph) -> dict[int, int]:
    """How many times each tensor (by ``id``) is read: once per node input slot and once
    per graph output slot that holds it."""
    counts: dict[int, int] = {}
    for t in (*(t for n in graph.nodes for t in n.inputs), *graph.outputs):
        counts[id(t)] = counts.get(id(t), 0) + 1
    return counts


def same_type(a: Tensor, b: Tensor) -> bool:
    """Whether two tensors have the same shape and dtype (so one may stand for the other)."""
    return a.dtype == b.dtype and len(a.shape) == len(b.shape) and \
        all(bool(x == y) for x, y in zip(a.shape, b.shape))


def reapply(node: Node, inputs: Sequence[Tensor]) -> list[Tensor]:
    """The outputs of ``node``'s task applied to ``inputs``: the node's own outputs when the
    inputs are the node's own, else a new node recording the same task (and marked
    ``materialize`` as ``node`` was)."""
    if len(inputs) == len(node.inputs) and all(a is b for a, b in zip(inputs, node.inputs)):
        return list(node.outputs)
    for k, (old, new) in enumerate(zip(node.inputs, inputs)):
        if not same_type(old, new):
            raise GraphError(f"cannot re-record {node.op}: its input {k} was {old.dtype.name}{list(old.shape)} "
                             f"and its replacement is {new.dtype.name}{list(new.shape)}; a replacement "
                             "must keep the shape and dtype")
    outs = record(node.task, inputs)
    outs[0].producer[0].materialize = node.materialize  # a pass's choice outlives re-recording
    return outs


class Rewrite:
    """The state of one rewrite of ``graph``: old tensors to new ones, and the old graph's
    use counts."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.changed = False
        self._uses = use_counts(graph)
        self._new: dict[int, Tensor] = {}
        self._outputs = {id(t) for t in graph.outputs}

    def new(self, t: Tensor) -> Tensor:
        """The tensor of the new graph standing for ``t`` of the old one."""
        return self._new.get(id(t), t)

    def uses(self, t: Tensor) -> int:
        """How often the old graph reads ``t`` (node inputs and graph outputs)."""
        return self._uses.get(id(t), 0)

    def only_read_by(self, t: Tensor, node: Node) -> bool:
        """Whether ``t`` (of the old graph) is read once, by ``node``, and is no graph output."""
        return id(t) not in self._outputs and self.uses(t) == 1 and any(x is t for x in node.inputs)

    def run(self, rule: Rule) -> Graph:
        """Applies ``rule`` to every node in order; the graph itself when nothing changed."""
        for node in self.graph.nodes:
            inputs = [self.new(t) for t in node.inputs]
            outs = rule(node, inputs, self)
            outs = reapply(node, inputs) if outs is None else list(outs)
            if len(outs) != len(node.outputs):
                raise GraphError(f"a rewrite of {node.op} gave {len(outs)} outputs for its {len(node.outputs)}")
            for k, (old, new) in enumerate(zip(node.outputs, outs)):
                if new is old:
                    continue
                if not same_type(old, new):
                    raise GraphError(f"a rewrite of {node.op} replaced its output {k} "
                                     f"({old.dtype.name}{list(old.shape)}) by a "
                                     f"{new.dtype.name}{list(new.shape)} tensor; the shape and dtype must stay")
                self._new[id(old)] = new
                self.changed = True
        if not self.changed:
            return self.graph
        return Graph(self.graph.inputs, [self.new(t) for t in self.graph.outputs])


def rewrite(graph: Graph, rule: Rule) -> Graph:
    """``graph`` rebuilt with ``rule`` applied to each node (see the module docstring); the
    same graph object when the rule changed nothing."""
    return Rewrite(graph).run(rule)
