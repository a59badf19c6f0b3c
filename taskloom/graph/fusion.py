"""Fusion partition (TVM's categories, Hidet's rule) and the task of a fused group.

A group holds at most one reduction (its anchor: matmul, conv2d, softmax...), the
bijective operators after it whose input is the anchor's result and read by nothing
else (epilogues: bias add, relu, residual add), and the injective operators before it whose
result only the group reads (prologues: transpose, pad, broadcast). Chains of injective
operators fuse together. A tensor that is a graph output is never fused away, nor one whose
node is marked ``materialize``.

The group's task is the nodes' definitions composed: where a node read a tensor made in
the group, it now reads that tensor's definition, so no intermediate buffer exists.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from taskloom.graph.graph import Graph, Node
from taskloom.graph.tensor import Tensor
from taskloom.graph.walk import postorder
from taskloom.ir import expr as E
from taskloom.ir.compute import (GridCompute, ReduceCompute, Task, TensorInput, has_reduction,
                                 preserves_order, tensor_input)
from taskloom.ir.functor import Rewriter, collect
from taskloom.ir.index import is_unit


@dataclass(eq=False)
class FusedGroup:
    nodes: list[Node]
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
    task: Task | None = None

    @staticmethod
    def single(node: Node) -> "FusedGroup":
        g = FusedGroup([node])
        # one argument per placeholder, even when a tensor is read twice (x * x)
        g.inputs, g.outputs = list(node.inputs), list(node.outputs)
        g.task = node.task
        return g

    @property
    def ops(self) -> list[str]:
        return [n.op for n in self.nodes]

    @property
    def anchor(self) -> Node | None:
        return next((n for n in self.nodes if has_reduction(n.task)), None)

    @property
    def name(self) -> str:
        a = self.anchor
        head = a.op if a is not None else self.nodes[-1].op
        return head if len(self.nodes) == 1 else f"{head}_fused{len(self.nodes)}"

    @property
    def category(self) -> str:
        return "reduction" if self.anchor is not None else "injective"


def _unique(ts: list[Tensor]) -> list[Tensor]:
    seen, out = set(), []
    for t in ts:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def fuse_graph(graph: Graph) -> list[FusedGroup]:
    """Partitions ``graph`` into fused groups, in an order where each group comes after the
    groups it reads from, with each group's composed task."""
    consumers: dict[int, list[Node]] = {}
    for n in graph.nodes:
        for t in _unique(n.inputs):
            consumers.setdefault(id(t), []).append(n)
    outputs = {id(t) for t in graph.outputs}
    group_of: dict[int, int] = {id(n): k for k, n in enumerate(graph.nodes)}
    members: dict[int, list[Node]] = {k: [n] for k, n in enumerate(graph.nodes)}

    def merge(src: int, dst: int) -> None:
        for n in members.pop(src):
            group_of[id(n)] = dst
            members[dst].append(n)

    def has_anchor(g: int) -> bool:
        return any(has_reduction(n.task) for n in members[g])

    # epilogues: a node bijective in a tensor that only it reads, keeping its elements'
    # order (elementwise ops, reshapes), joins that tensor's group. A transpose does not: the
    # anchor would compute its results in the transposed order; it becomes a prologue of
    # its reader instead.
    for n in graph.nodes:
        if has_reduction(n.task) or len(members[group_of[id(n)]]) > 1:
            continue
        for placeholder, t in zip(n.task.inputs, n.inputs):
            if t.producer is None or id(t) in outputs or len(consumers.get(id(t), [])) != 1:
                continue
            if not preserves_order(n.task, placeholder):
                continue
            merge(group_of[id(n)], group_of[id(t.producer[0])])
            break

    # prologues: a group without an anchor (injective nodes, e.g. a permute and a reshape)
    # whose results only one other group reads joins that group; last first, so chains fold
    # into their reader one by one. Only cheap ones: an anchor may read an element of a
    # prologue many times (a matmul reads A once per column block), so a prologue with a
    # call (exp, erf...) would be recomputed each time; nor a permute of the innermost axis
    # into a window (a convolution): the window reads each element several times, each an
    # element-by-element gather, where converting once is one pass.
    visited: set[int] = set()
    for n in reversed(graph.nodes):
        g = group_of[id(n)]
        if g in visited or any(has_reduction(m.task) or _costly(m) or m.materialize for m in members[g]):
            continue
        visited.add(g)
        results = [o for m in members[g] for o in m.outputs]
        readers = {group_of[id(c)] for o in results for c in consumers.get(id(o), [])} - {g}
        if len(readers) != 1 or any(id(o) in outputs for o in results):
            continue
        reader = readers.pop()
        if any(_moves_innermost(m) for m in members[g]) and \
                any(_read_through_window(o, consumers, lambda c: group_of[id(c)] == reader) for o in results):
            continue
        merge(g, reader)

    order = {id(n): k for k, n in enumerate(graph.nodes)}
    groups = []
    for g, nodes in members.items():
        nodes.sort(key=lambda n: order[id(n)])
        groups.append(_group(nodes, consumers, outputs))
    groups.sort(key=lambda grp: min(order[id(n)] for n in grp.nodes))
    return _topological(groups)


def _moves_innermost(n: Node) -> bool:
    """Whether ``n`` is a permutation that changes which axis is contiguous."""
    dims = n.task.attr("dims") if n.op in ("permute", "transpose") else None
    return dims is not None and len(dims) > 0 and dims[-1] != len(dims) - 1


def _read_through_window(t: Tensor, consumers: dict[int, list[Node]], inside: Callable[[Node], bool]) -> bool:
    """Whether a node that ``inside`` accepts reads ``t`` through a sliding window, directly
    or through injective nodes it accepts (a pad that already joined the convolution)."""
    for c in consumers.get(id(t), []):
        if not inside(c):
            continue
        if _window_reads(c, t):
            return True
        if not has_reduction(c.task) and any(_read_through_window(o, consumers, inside) for o in c.outputs):
            return True
    return False


def _window_reads(n: Node, t: Tensor) -> bool:
    """Whether ``n`` reads ``t`` through a sliding window: an index that moves with both an
    output axis and a reduction axis (``oy * stride + ky``), so each element is read more
    than once by one reduction."""
    placeholders = {p for p, x in zip(n.task.inputs, n.inputs) if x is t}
    for c in n.task.computes():
        out_axes = set(c.axes)
        for r in collect(c.value, ReduceCompute):
            red_axes = {a for a, d in zip(r.axes, r.shape)  # type: ignore[attr-defined]
                        if not is_unit(d)}  # a 1x1 kernel slides nothing
            for e in collect(r.value, E.TensorElement):  # type: ignore[attr-defined]
                if e.tensor not in placeholders:  # type: ignore[attr-defined]
                    continue
                for i in e.indices:  # type: ignore[attr-defined]
                    used = E.free_vars(i)
                    if used & out_axes and used & red_axes:
                        return True
    return False


def _costly(n: Node) -> bool:
    return any(collect(c.value, E.Call) for c in n.task.computes())


def _topological(groups: list[FusedGroup]) -> list[FusedGroup]:
    """Orders groups so each follows the groups whose outputs it reads."""
    made_by = {id(t): g for g in groups for t in g.outputs}
    return postorder(groups, lambda g: [made_by[id(t)] for t in g.inputs if id(t) in made_by])


def _group(nodes: list[Node], consumers: dict[int, list[Node]], graph_outputs: set[int]) -> FusedGroup:
    if len(nodes) == 1:
        return FusedGroup.single(nodes[0])
    inside = {id(n) for n in nodes}
    made: dict[int, GridCompute] = {}          # tensor made in the group -> its definition
    placeholders: dict[int, TensorInput] = {}  # tensor read from outside -> the group's input
    inputs: list[Tensor] = []
    names: set[str] = set()
    for n in nodes:
        binding: dict[TensorInput, E.Expr] = {}
        for ph, t in zip(n.task.inputs, n.inputs):
            if id(t) in made:
                binding[ph] = made[id(t)]
            else:
                if id(t) not in placeholders:
                    name = ph.name
                    while name in names:
                        name += "_"
                    names.add(name)
                    placeholders[id(t)] = tensor_input(name, t.dtype, ph.shape)
                    inputs.append(t)
                binding[ph] = placeholders[id(t)]
        rebound = _Rebinder(binding)
        for out_t, compute in zip(n.outputs, n.task.outputs):
            made[id(out_t)] = rebound.compute(compute)
    outputs = [t for n in nodes for t in n.outputs
               if id(t) in graph_outputs or any(id(c) not in inside for c in consumers.get(id(t), []))]
    group = FusedGroup(nodes, inputs, outputs)
    group.task = Task(group.name, [placeholders[id(t)] for t in inputs], [made[id(t)] for t in outputs],
                      {"ops": tuple(group.ops)})
    return group


class _Rebinder(Rewriter):
    """Rebuilds a node's compute definitions with its placeholders replaced."""

    def __init__(self, binding: dict[TensorInput, E.Expr]):
        self.binding = binding
        self.memo: dict[int, GridCompute] = {}

    def compute(self, c: GridCompute) -> GridCompute:
        if id(c) not in self.memo:
            self.memo[id(c)] = GridCompute(c.name, c.shape, c.axes, self.visit(c.value))
        return self.memo[id(c)]

    def visit_TensorElement(self, e: E.TensorElement) -> Any:
        idx = tuple(self.visit(i) for i in e.indices)
        t = e.tensor
        if isinstance(t, TensorInput) and t in self.binding:
            t = self.binding[t]
        elif isinstance(t, GridCompute):
            t = self.compute(t)
        return E.TensorElement(t, idx)

    def visit_ReduceCompute(self, r: ReduceCompute) -> Any:
        return ReduceCompute(r.shape, r.axes, self.visit(r.value), r.kind)
