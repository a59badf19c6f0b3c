"""An ATen graph becomes a taskloom :class:`~taskloom.graph.Graph`: the fx interpreter of the
torch frontend.

Nodes are visited in order. A node whose inputs are all constants (parameters, buffers,
tensors made inside the model, sizes) is evaluated by torch itself, once, at compile time:
its result is a constant of the graph. Every other node goes through its converter in
:data:`~taskloom.frontend.torch_aten.REGISTRY`, applied to symbolic taskloom tensors, which
records the graph. Each converted result is checked against the shape torch recorded for the
node and cast to torch's dtype, so converters need not repeat torch's type promotion.

Before anything is converted, every operator without a converter is collected, and all of
them are reported in one :class:`~taskloom.errors.FrontendError` (its ``unsupported``: name ->
uses); an error converting one node carries that node's name as ``node_name``. The per-operator
fallback (:mod:`~taskloom.frontend.torch_fallback`) reads both.
"""
from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch
from torch.fx.node import Node, map_aggregate
from torch.utils._pytree import TreeSpec, tree_flatten

from taskloom import ops
from taskloom.errors import FrontendError, TaskloomError
from taskloom.frontend.torch_aten import dtype_of, functional_form, lookup, op_name
from taskloom.frontend.torch_symbolic import is_symbolic, to_expr
from taskloom.ir import expr as E
from taskloom.ir.arith import simplify_expr
from taskloom.ir.functor import substitute
from taskloom.graph import Graph, Tensor, from_torch
from taskloom.graph import input as graph_input


@dataclass
class Conversion:
    """A converted ATen graph: the taskloom graph (None when every output is a constant), the
    placeholder position of each graph input, and how to rebuild torch's output structure:
    each output leaf is ``("graph", k)`` (the graph's output ``k``) or ``("value", v)``."""

    graph: Graph | None
    input_positions: list[int]
    out_spec: TreeSpec
    leaves: list[tuple[str, Any]] = field(default_factory=list)


def _foldable(node: Node) -> bool:
    """Whether torch may evaluate ``node`` at compile time when its inputs are constants."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return torch.Tag.nondeterministic_seeded not in target.tags
    return True


def constant_nodes(gm: torch.fx.GraphModule, is_input: Sequence[bool]) -> set[Node]:
    """The nodes that depend on no graph input (nor on a symbolic size): torch evaluates
    them at compile time."""
    const: set[Node] = set()
    k = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if not is_input[k] and not is_symbolic(node.meta.get("val")):
                const.add(node)
            k += 1
        elif node.op == "get_attr":
            const.add(node)
        elif node.op == "call_function" and _foldable(node) and all(a in const for a in node.all_input_nodes):
            const.add(node)
    return const


def unsupported_nodes(gm: torch.fx.GraphModule, const: set[Node]) -> list[Node]:
    """The nodes applied to graph inputs whose operator has no converter."""
    return [node for node in gm.graph.nodes
            if (node.op == "call_function" and node not in const and node.target is not operator.getitem
                and not _is_size(node) and lookup(node.target) is None) or node.op in ("call_module", "call_method")]


def _is_size(node: Node) -> bool:
    """A node computing a symbolic size (``sym_size``, arithmetic of SymInts): it becomes the
    size's expression, not an operator."""
    return isinstance(node.meta.get("val"), torch.SymInt)


def node_op_name(node: Node) -> str:
    """The operator of a node as messages name it: ``aten.sin.default``, ``call_method view``."""
    return op_name(node.target) if node.op == "call_function" else f"{node.op} {node.target}"


def unsupported_ops(gm: torch.fx.GraphModule, const: set[Node]) -> Counter[str]:
    """Every operator applied to graph inputs that has no converter, with its number of uses."""
    return Counter(node_op_name(node) for node in unsupported_nodes(gm, const))


def unsupported_message(missing: Counter[str]) -> str:
    lines = [f"  {name} ({n} use{'s' if n > 1 else ''})" for name, n in sorted(missing.items())]
    return (f"the torch frontend has no converter for {len(missing)} operator(s) of this graph:\n"
            + "\n".join(lines)
            + "\nadd converters with @taskloom.torch.register(...), or compile with "
              "fallback=True (options={'fallback': True}, the default) to run these operators in PyTorch")


def _constant(value: Any, where: str) -> Any:
    """A torch tensor as a concrete taskloom tensor sharing its memory; other values as they are."""
    if not isinstance(value, torch.Tensor):
        return value
    t = value.detach()
    if t.device.type != "cpu":  # a constant is compile-time data: the target puts it on its device
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    dt = dtype_of(t.dtype)
    if dt.numpy is None:
        raise FrontendError(f"{where} is a {dt.name} constant, which taskloom cannot hold as data yet; "
                            "use float32 or float16 weights")
    return from_torch(t)


def _check(node: Node, value: Any, hints: dict[str, int] | None = None) -> Any:
    """``value`` (a converter's result) against the shape and dtype torch recorded for ``node``
    (symbolic sizes compared at the example's values, ``hints``)."""
    want = node.meta.get("val")
    if isinstance(value, Tensor) and isinstance(want, torch.Tensor):
        if tuple(_hint(d, hints) for d in value.shape) != tuple(_hint(d, hints) for d in want.shape):
            raise FrontendError(f"{op_name(node.target)} (node '{node.name}'): the converter gives shape "
                                f"{tuple(value.shape)}, torch computes {tuple(want.shape)}")
        dt = dtype_of(want.dtype)
        if value.dtype != dt:
            value = ops.cast(value, dt)
    return value


def _hint(d: Any, hints: dict[str, int] | None) -> int:
    """A size as an int: a symbolic one (a taskloom expression or a SymInt) at the example's value."""
    if isinstance(d, torch.SymInt):
        return int(d.node.hint)
    if isinstance(d, E.Expr):
        values = {v: E.as_expr((hints or {}).get(v.name, -1)) for v in E.free_vars(d)}
        folded = simplify_expr(substitute(d, values))
        return int(folded.value) if isinstance(folded, E.Constant) else -1
    return int(d)


class _Interpreter:
    def __init__(self, gm: torch.fx.GraphModule, args: Sequence[Any], is_input: Sequence[bool],
                 names: Sequence[str], symbol_names: Mapping[str, str]):
        self.gm, self.args, self.is_input, self.names = gm, args, is_input, names
        self.symbol_names = symbol_names
        self.const = constant_nodes(gm, is_input)
        self.env: dict[Node, Any] = {}            # node -> torch value (constants) or taskloom value
        self.as_taskloom: dict[Node, Any] = {}    # constant node -> its taskloom form
        self.inputs: list[Tensor] = []
        self.input_positions: list[int] = []
        self.input_names: dict[Node, str] = {}
        self.hints: dict[str, int] = {}  # each symbol's example value

    def arg(self, a: Any) -> Any:
        """A converter's argument: constants become concrete tensors, traced nodes their tensors."""
        def one(x: Any) -> Any:
            if not isinstance(x, Node):
                return x
            if x in self.const:
                if x not in self.as_taskloom:
                    self.as_taskloom[x] = _constant(self.env[x], f"constant '{x.name}'")
                return self.as_taskloom[x]
            return self.env[x]
        return map_aggregate(a, one)

    def torch_arg(self, a: Any) -> Any:
        return map_aggregate(a, lambda x: self.env[x] if isinstance(x, Node) else x)

    def run(self) -> Conversion:
        missing = unsupported_ops(self.gm, self.const)
        if missing:
            error = FrontendError(unsupported_message(missing))
            error.unsupported = dict(missing)  # type: ignore[attr-defined] - read by the fallback warning
            raise error
        position = 0
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.placeholder(node, position)
                position += 1
            elif node.op == "get_attr":
                self.env[node] = getattr(self.gm, node.target)
            elif _is_size(node) and node not in self.const:
                self.env[node] = to_expr(node.meta["val"], self.symbol_names)
            elif node.op == "call_function" and (node.users or functional_form(node.target) is not None):
                # (a result nobody reads is not computed, unless the operator writes its input)
                self.env[node] = self.fold(node) if node in self.const else self.call(node)
            elif node.op == "output":
                return self.output(node)
        raise FrontendError("the ATen graph has no output node")

    def placeholder(self, node: Node, position: int) -> None:
        value, val = self.args[position], node.meta.get("val")
        if not self.is_input[position]:
            self.env[node] = to_expr(val, self.symbol_names) if is_symbolic(val) else value
            return
        # (an input's device is the target's business, checked where the target is chosen:
        # only its shape and dtype enter the graph)
        name = self.input_names[node] = self.names[position]
        if is_symbolic(val):
            t = Tensor(tuple(to_expr(d, self.symbol_names) for d in val.shape), dtype_of(value.dtype), name=name)
            for d in val.shape:
                if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol:
                    symbol = self.symbol_names.get(str(d.node.expr), str(d.node.expr))
                    if isinstance(symbol, str):  # (an int: a value a guard fixed)
                        self.hints[symbol] = int(d.node.hint)
        else:
            t = graph_input(tuple(value.shape), dtype_of(value.dtype), name=name)
        self.inputs.append(t)
        self.input_positions.append(position)
        self.env[node] = t

    def fold(self, node: Node) -> Any:
        with torch.no_grad():
            return node.target(*self.torch_arg(node.args), **self.torch_arg(node.kwargs))

    def call(self, node: Node) -> Any:
        """``node`` converted; a FrontendError raised converting it names it as ``node_name``."""
        try:
            return self.convert_node(node)
        except FrontendError as e:
            if getattr(e, "node_name", None) is None:
                e.node_name = node.name  # type: ignore[attr-defined] - read by the per-operator fallback
            raise

    def convert_node(self, node: Node) -> Any:
        if node.target is operator.getitem:
            source, index = node.args
            value = self.env[source][index]
            if callable(value):
                value = value()  # a result computed only when the graph reads it
            return _check(node, value, self.hints)
        convert = lookup(node.target)
        try:
            value = convert(*self.arg(node.args), **self.arg(node.kwargs))
        except TaskloomError as e:
            raise FrontendError(f"{op_name(node.target)} (node '{node.name}'): {e}") from e
        except Exception as e:  # the converter's own fault on arguments it did not expect
            raise FrontendError(f"{op_name(node.target)} (node '{node.name}'): the converter does not accept "
                                f"these arguments ({type(e).__name__}: {e})") from e
        if isinstance(value, (tuple, list)):
            want = node.meta.get("val")
            if isinstance(want, (tuple, list)) and len(want) == len(value):
                return tuple(v if callable(v) else _check(_Sub(node, w), v, self.hints) for v, w in zip(value, want))
            return tuple(value)
        value = _check(node, value, self.hints)
        if functional_form(node.target) is not None:  # in place: later readers of the input see the result
            target = node.args[0]
            if target in self.const or target.op == "placeholder":
                what = "a constant" if target in self.const else "the graph input"
                raise FrontendError(f"{op_name(node.target)} (node '{node.name}') updates {what} "
                                    f"'{self.input_names.get(target, target.name)}' in place, which a "
                                    "compiled graph cannot do; "
                                    "update a copy instead")
            self.env[target] = value
        return value

    def output(self, node: Node) -> Conversion:
        leaves, spec = tree_flatten(node.args[0])
        outputs: list[Tensor] = []
        kinds: list[tuple[str, Any]] = []
        for leaf in leaves:
            value = self.env[leaf] if isinstance(leaf, Node) else leaf
            if isinstance(leaf, Node) and leaf not in self.const and isinstance(value, Tensor):
                kinds.append(("graph", len(outputs)))
                outputs.append(value)
            else:
                kinds.append(("value", value))
        graph = Graph(self.inputs, outputs) if outputs else None
        return Conversion(graph, self.input_positions, spec, kinds)


class _Sub:
    """One result of a multi-result node, for checking it against torch's record."""

    def __init__(self, node: Node, val: Any):
        self.name, self.target, self.meta = node.name, node.target, {"val": val}


def convert(gm: torch.fx.GraphModule, args: Sequence[Any], is_input: Sequence[bool],
            names: Sequence[str], symbol_names: Mapping[str, str] | None = None) -> Conversion:
    """Converts the ATen graph ``gm`` traced on ``args``: placeholders where ``is_input`` holds
    become graph inputs named ``names``; the others (parameters, buffers, sizes) constants.
    Symbolic sizes keep dynamo's symbols, renamed as ``symbol_names`` says."""
    return _Interpreter(gm, args, is_input, names, symbol_names or {}).run()
