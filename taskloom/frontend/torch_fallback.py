"""Per-operator fallback of the torch frontend: an ATen graph with nodes taskloom cannot convert
runs as compiled parts and PyTorch calls, in one callable.

The nodes that fall back are those without a converter and those whose converter refused
them (the node named by the :class:`~taskloom.errors.FrontendError`). Every other node
computed at run time goes to a compiled part by its *level*: the largest number of
fallen-back nodes on a path from the inputs to it. Supported nodes of one level form one
part (one taskloom graph, fused as usual); the fallen-back nodes of level ``k`` run between
the parts of levels ``k - 1`` and ``k``, in graph order. So there are as few parts as the
dependencies allow: one more than the longest chain of fallen-back nodes.

Values pass between parts and PyTorch calls as torch tensors (a compiled graph's outputs are
torch tensors sharing its memory). A restride (``as_strided``) that falls back reads the
storage of its input, so the views between it and the tensor it restrides run in PyTorch too.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch.fx.node import Node, map_aggregate
from torch.utils._pytree import tree_flatten, tree_unflatten

from taskloom.errors import FrontendError
from taskloom.frontend.fallback import Fallback, summary  # noqa: F401  (this module's names too)
from taskloom.frontend.torch_aten import functional_form
from taskloom.frontend.torch_convert import Conversion, constant_nodes, convert, node_op_name, unsupported_nodes

#: The reason given for an operator without a converter.
UNSUPPORTED = "unsupported op"


@dataclass
class _Part:
    """Nodes that run together: a compiled part (``eager`` False) or PyTorch calls."""

    eager: bool
    nodes: list[Node]


def _skipped(node: Node) -> bool:
    """Whether the frontend leaves ``node`` out: a result nobody reads of an operator that
    writes no input (what the converter interpreter skips too)."""
    return not node.users and functional_form(node.target) is None


def read_updates(gm: torch.fx.GraphModule) -> None:
    """Makes the readers of a tensor that an in-place node (``x.add_(y)``, left by a
    decomposition) updated read that node instead, which returns the tensor: so parts see
    the update as a dependency."""
    position = {n: k for k, n in enumerate(gm.graph.nodes)}
    for node in gm.graph.nodes:
        target = node.args[0] if node.args and functional_form(node.target) is not None else None
        if isinstance(target, Node):
            for user in [u for u in target.users if position[u] > position[node]]:
                user.replace_input_with(target, node)


def computed_nodes(gm: torch.fx.GraphModule, const: set[Node]) -> list[Node]:
    """The call nodes computed at run time, in graph order."""
    return [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")
            and n not in const and not _skipped(n)]


def partition(nodes: Sequence[Node], eager: set[Node]) -> list[_Part]:
    """``nodes`` (in graph order) as compiled parts and PyTorch calls, by level (see the module)."""
    level: dict[Node, int] = {}
    for node in nodes:
        base = max((level.get(a, 0) for a in node.all_input_nodes), default=0)
        bump = node in eager and node.target is not operator.getitem  # (an item of a PyTorch result stays)
        level[node] = base + bump
    parts: list[_Part] = []
    for k in range(max(level.values(), default=0) + 1):
        for run_in_torch in (True, False):  # level k's PyTorch calls read parts of lower levels only
            members = [n for n in nodes if level[n] == k and (n in eager) == run_in_torch]
            if members:
                parts.append(_Part(run_in_torch, members))
    return parts


def _storage_views(node: Node, const: set[Node]) -> list[Node]:
    """For a restride, the views it reads through (which must run in PyTorch with it)."""
    if not str(node_op_name(node)).startswith("aten.as_strided"):
        return []
    views, x = [], node.args[0]
    while isinstance(x, Node) and x not in const and isinstance(x.target, torch._ops.OpOverload) \
            and x.target._schema.returns and x.target._schema.returns[0].alias_info is not None:
        views.append(x)
        x = x.args[0]
    return views


def _falling_back(gm: torch.fx.GraphModule, const: set[Node], reasons: dict[Node, str]) -> set[Node]:
    """The nodes of ``reasons`` with the items of their results and the views restrides read."""
    eager = set(reasons)
    for node in list(reasons):
        for view in _storage_views(node, const):
            if view not in eager:
                reasons[view] = f"a view read by {node_op_name(node)} '{node.name}'"
                eager.add(view)
    for node in gm.graph.nodes:
        if node.target is operator.getitem and node.args[0] in eager:
            eager.add(node)
    return eager


# ----------------------------------------------------------------------------- building

def _fold(gm: torch.fx.GraphModule, args: Sequence[Any], is_input: Sequence[bool], const: set[Node]) -> dict:
    """The value of every constant node (parameters, buffers, what torch computes from them)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = {n: a for n, a, i in zip(placeholders, args, is_input) if not i}

    def value(x: Any) -> Any:
        return values[x] if isinstance(x, Node) else x
    with torch.no_grad():
        for node in gm.graph.nodes:
            if node in values or node not in const:
                continue
            if node.op == "get_attr":
                values[node] = getattr(gm, node.target)
            elif node.users:
                values[node] = node.target(*map_aggregate(node.args, value), **map_aggregate(node.kwargs, value))
    return values


def _part_module(nodes: Sequence[Node], needed: set[Node]) -> tuple[torch.fx.GraphModule, list[Node], list[Node]]:
    """A graph of ``nodes`` alone: (the module, the outside nodes its placeholders stand for,
    the nodes it returns: those read outside it)."""
    inside = set(nodes)
    graph = torch.fx.Graph()
    env: dict[Node, Node] = {}
    sources: list[Node] = []
    for node in nodes:
        for a in node.all_input_nodes:
            if a not in inside and a not in env:
                env[a] = graph.placeholder(a.name)
                env[a].meta = dict(a.meta)
                sources.append(a)
        env[node] = graph.node_copy(node, env.__getitem__)
    exports = [n for n in nodes if any(u.op == "output" or (u in needed and u not in inside) for u in n.users)]
    graph.output(tuple(env[n] for n in exports))
    return torch.fx.GraphModule(torch.nn.Module(), graph), sources, exports


def _example(node: Node) -> torch.Tensor:
    """A tensor of the shape and dtype torch recorded for ``node`` (what conversion reads of an input)."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise FrontendError(f"node '{node.name}' ({node_op_name(node)}) gives no tensor torch recorded a shape for; "
                            "it cannot be an input of a compiled part")
    return torch.empty(tuple(val.shape), dtype=val.dtype)


def _reason(error: FrontendError, node: Node) -> str:
    """What a converter's error says about ``node``, without the node's name in front."""
    text = str(error).strip()
    prefix = f"{node_op_name(node)} (node '{node.name}'): "
    return (text[len(prefix):] if text.startswith(prefix) else text).splitlines()[0]


def _refused(error: FrontendError, gm: torch.fx.GraphModule, reasons: dict[Node, str]) -> None:
    """Adds the node ``error`` names (for an item of a result: the node giving it) to ``reasons``;
    re-raises ``error`` when it names none, or one already falling back."""
    name = getattr(error, "node_name", None)
    named = next((n for n in gm.graph.nodes if n.name == name), None) if name else None
    node = named
    while node is not None and node.target is operator.getitem:
        node = node.args[0]
    if node is None or node in reasons:
        raise error
    reasons[node] = _reason(error, named)


@dataclass
class _Converted:
    """A compiled part before compiling: its conversion, the outside nodes its placeholders
    stand for and the nodes it returns."""

    conversion: Conversion
    sources: list[Node]
    exports: list[Node]


def _convert_parts(parts: Sequence[_Part], needed: set[Node], const: set[Node], values: dict,
                   inputs: dict[Node, tuple[Any, str]]) -> list[_Converted | None]:
    """Each compiled part converted (None for PyTorch calls); a converter's error propagates."""
    out: list[_Converted | None] = []
    for part in parts:
        if part.eager:
            out.append(None)
            continue
        module, sources, exports = _part_module(part.nodes, needed)
        args = [values[a] if a in const else inputs[a][0] if a in inputs else _example(a) for a in sources]
        names = [inputs[a][1] if a in inputs else a.name for a in sources]
        conversion = convert(module, args, [a not in const for a in sources], names)
        out.append(_Converted(conversion, sources, exports))
    return out


def split(gm: torch.fx.GraphModule, args: Sequence[Any], is_input: Sequence[bool], names: Sequence[str],
          compile_graph: Callable[[Any], Any], error: FrontendError | None = None
          ) -> tuple["SplitGraph", list[Fallback], int]:
    """The ATen graph ``gm`` (traced on ``args``; see :func:`~taskloom.frontend.torch_convert.convert`
    for ``is_input`` and ``names``) as a :class:`SplitGraph` whose parts ``compile_graph``
    compiled; with the nodes that run in PyTorch and the number of nodes computed at run time.
    ``error``, the whole graph's conversion error, may name the first node to fall back."""
    read_updates(gm)
    const = constant_nodes(gm, is_input)
    reasons = {n: UNSUPPORTED for n in unsupported_nodes(gm, const)}
    if error is not None and not getattr(error, "unsupported", None):
        _refused(error, gm, reasons)
    values = _fold(gm, args, is_input, const)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = {n: (args[k], names[k]) for k, n in enumerate(placeholders) if is_input[k]}
    nodes = computed_nodes(gm, const)
    needed = set(nodes)
    while True:  # each converter that refuses its node sends it to PyTorch too
        eager = _falling_back(gm, const, reasons)
        parts = partition(nodes, eager)
        try:
            converted = _convert_parts(parts, needed, const, values, inputs)
            break
        except FrontendError as e:
            _refused(e, gm, reasons)
    steps = [_Eager(part.nodes, gm) if c is None else
             _Compiled(c, None if c.conversion.graph is None else compile_graph(c.conversion.graph))
             for part, c in zip(parts, converted)]
    kept = {a for part in parts if part.eager for n in part.nodes for a in n.all_input_nodes if a in const}
    output = next(n for n in gm.graph.nodes if n.op == "output")
    kept |= {a for a in output.all_input_nodes if a in const}
    graph = SplitGraph(steps, [(k, n) for k, n in enumerate(placeholders) if is_input[k]],
                       {n: values[n] for n in kept}, output)
    fallbacks = [Fallback(node_op_name(n), n.name, reasons[n]) for n in nodes if n in reasons]
    return graph, fallbacks, sum(n.target is not operator.getitem for n in nodes)


# ----------------------------------------------------------------------------- running

def _plain(value: Any) -> Any:
    """A torch tensor as a compiled graph takes it: detached and contiguous."""
    if isinstance(value, torch.Tensor):
        if value.requires_grad:
            value = value.detach()
        if not value.is_contiguous():
            value = value.contiguous()
    return value


class _Compiled:
    """A compiled part as a step: reads its inputs from the values, writes its results there."""

    def __init__(self, converted: _Converted, compiled: Any):
        conv = converted.conversion
        self.compiled = compiled
        self.inputs = [converted.sources[p] for p in conv.input_positions]
        self.results = list(zip(converted.exports, conv.leaves))

    def __call__(self, env: dict[Node, Any]) -> None:
        outs: Any = ()
        if self.compiled is not None:
            outs = self.compiled(*[_plain(env[n]) for n in self.inputs])
            if not isinstance(outs, tuple):
                outs = (outs,)
        for node, (kind, v) in self.results:
            env[node] = torch.as_tensor(outs[v]) if kind == "graph" else v


class _Eager:
    """Nodes that PyTorch runs, in graph order, as a step."""

    def __init__(self, nodes: Sequence[Node], gm: torch.fx.GraphModule):
        self.calls = [(n, _function(n, gm)) for n in nodes]

    def __call__(self, env: dict[Node, Any]) -> None:
        def value(x: Any) -> Any:
            return env[x] if isinstance(x, Node) else x
        for node, fn in self.calls:
            env[node] = fn(*map_aggregate(node.args, value), **map_aggregate(node.kwargs, value))


def _function(node: Node, gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """What computes ``node`` in PyTorch."""
    if node.op == "call_module":
        return gm.get_submodule(node.target)
    if node.op == "call_method":
        return lambda self, *a, **k: getattr(self, node.target)(*a, **k)
    return node.target


class SplitGraph:
    """An ATen graph run as compiled parts and PyTorch calls: called with the graph's arguments,
    it returns the graph's outputs in torch's structure. ``compiled_graphs`` lists the compiled
    parts' graphs in the order they run."""

    def __init__(self, steps: list[Any], inputs: list[tuple[int, Node]], constants: dict[Node, Any],
                 output: Node):
        self.steps, self.inputs, self.constants = steps, inputs, constants
        self.leaves, self.spec = tree_flatten(output.args[0])
        self.compiled_graphs = [s.compiled for s in steps if isinstance(s, _Compiled) and s.compiled is not None]

    def __call__(self, args: Sequence[Any]) -> Any:
        env = dict(self.constants)
        for k, node in self.inputs:
            env[node] = args[k]
        with torch.no_grad():
            for step in self.steps:
                step(env)
        return tree_unflatten([env[x] if isinstance(x, Node) else x for x in self.leaves], self.spec)
