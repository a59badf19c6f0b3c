"""Graphs of operators, recorded by applying operators to input tensors that hold no data.

    x = taskloom.graph.input((8, 784), "float32", name="x")
    y = ops.relu(ops.linear(x, w1, b1))            # w1, b1: concrete tensors -> constants
    g = taskloom.graph.Graph([x], [y])

Each node is one operator application: its compute definition (a Task whose inputs are
placeholders for the node's input tensors) and its input and output tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from taskloom.errors import TaskloomError
from taskloom.graph.tensor import Tensor
from taskloom.graph.walk import postorder
from taskloom.ir.compute import Task, classify
from taskloom.ir.expr import Expr


class GraphError(TaskloomError):
    """A graph that is not well formed (an output not reachable from the inputs, ...)."""


@dataclass(eq=False)
class Node:
    """One operator application in a graph."""

    op: str
    task: Task
    inputs: list[Tensor]
    outputs: list[Tensor] = field(default_factory=list)
    #: computed into a buffer of its own, never fused into its reader as a prologue (a
    #: layout its reader loads faster than the tensor it came from)
    materialize: bool = False

    @property
    def category(self) -> str:
        return classify(self.task)

    def __repr__(self) -> str:
        return f"Node({self.op}, {len(self.inputs)} in, {len(self.outputs)} out)"


def record(task: Task, inputs: Sequence[Tensor]) -> list[Tensor]:
    """Adds a node for ``task`` applied to ``inputs`` and returns its (data-less) outputs."""
    return record_outputs(Node(task.name, task, list(inputs)))


def record_outputs(node: Node) -> list[Tensor]:
    """Gives ``node`` one (data-less) output tensor per output of its task and returns them."""
    for k, out in enumerate(node.task.outputs):
        shape = tuple(_static(d) for d in out.shape)
        node.outputs.append(Tensor(shape, out.dtype, producer=(node, k)))
    return node.outputs


def _static(d: Expr) -> int | Expr:
    """A dimension as an int when it folds to one (traced shapes are static)."""
    from taskloom.ir.expr import Constant
    from taskloom.ir.arith import simplify_expr
    d = simplify_expr(d)
    return int(d.value) if isinstance(d, Constant) else d


class Graph:
    """The operators between ``inputs`` and ``outputs``, in an order where every node comes
    after the nodes it reads from."""

    def __init__(self, inputs: Sequence[Tensor], outputs: Sequence[Tensor]):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        for k, t in enumerate(self.inputs):
            if t.is_concrete or t.producer is not None:
                raise GraphError(f"graph input {k} ({t.name or 'unnamed'}) must be a taskloom.graph.input(...)")
            if t.name is None:
                t.name = f"input{k}"
        self.constants: list[Tensor] = []
        known_inputs = {id(t) for t in self.inputs}
        constant_ids: set[int] = set()

        def check(t: Tensor, path: str) -> None:
            if t.producer is None and not t.is_concrete and id(t) not in known_inputs:
                raise GraphError(f"{path} depends on a tensor without data ({t.name or 'unnamed'}, shape "
                                 f"{t.shape}) that is not among the graph's inputs")
            if t.producer is None and t.is_concrete and id(t) not in constant_ids:
                constant_ids.add(id(t))
                t.name = t.name or f"const{len(self.constants)}"
                self.constants.append(t)

        def producers(n: Node) -> list[Node]:
            return [t.producer[0] for t in n.inputs if t.producer is not None]

        for k, out in enumerate(self.outputs):
            check(out, f"graph output {k}")
        self.nodes: list[Node] = postorder([t.producer[0] for t in self.outputs if t.producer is not None], producers)
        for n in self.nodes:
            for i, t in enumerate(n.inputs):
                check(t, f"input {i} of {n.op}")

    def __str__(self) -> str:
        names: dict[int, str] = {id(t): t.name for t in (*self.inputs, *self.constants)}  # type: ignore[misc]
        lines = ["graph(" + ", ".join(f"{t.name}: {t.dtype.short}{list(t.shape)}" for t in self.inputs) + "):"]
        for c in self.constants:
            lines.append(f"  {c.name} = constant {c.dtype.short}{list(c.shape)}")
        for k, n in enumerate(self.nodes):
            outs = []
            for j, o in enumerate(n.outputs):
                names[id(o)] = f"%{k}" if len(n.outputs) == 1 else f"%{k}.{j}"
                outs.append(f"{names[id(o)]}: {o.dtype.short}{list(o.shape)}")
            args = ", ".join(names.get(id(t), "?") for t in n.inputs)
            attrs = "".join(f", {key}={v!r}" for key, v in n.task.attrs)
            lines.append(f"  {', '.join(outs)} = {n.op}({args}{attrs})  # {n.category}")
        lines.append("  return " + ", ".join(names.get(id(t), "?") for t in self.outputs))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Graph({len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs)"
