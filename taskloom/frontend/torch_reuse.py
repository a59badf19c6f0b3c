"""Whether a graph dynamo traced again is an earlier graph at particular sizes.

Dynamo traces a model again when a guard fails, and many guards only say that the model's
Python took another branch at one size: transformers' GPT-2 expands its position ids to the
batch ``if batch != position_ids.shape[0]``, so a batch of 1 is a graph of its own, the same
operators less one ``expand``. A library compiled for the first graph's symbolic sizes
computes the second graph as well when the second is the first with its symbols set to some
values (a batch of 1) and the operators that become no-ops there removed. This module
decides that, on the two graphs' core ATen forms, and says how to call the earlier graph
with the later graph's arguments.

The test is a match of values, not of text: each node of the later graph is keyed by its
operator and the keys of its arguments (sizes as sympy expressions of its symbols); each
node of the earlier graph, its symbols replaced by what the later graph's inputs say they
are, must find its key among them, or be a view or copy whose result has its input's shape
(an ``expand`` to the batch of 1 it already has, a full ``slice``), which is that input.
The outputs must come out the same. Operators that mutate, draw random numbers or read
memory by strides (``as_strided``) make no match.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import sympy
import torch

from taskloom.frontend.torch_symbolic import MAX_SIZE, bound as _bound

aten = torch.ops.aten

#: Operators that give their input back when the result has the input's shape.
_NO_OPS_AT_SAME_SHAPE = frozenset({
    aten.expand.default, aten.slice.Tensor, aten.view.default, aten.reshape.default, aten._unsafe_view.default,
    aten.alias.default, aten.clone.default, aten.repeat.default})
#: Operators whose result is fixed by their input and the shape they make (the elements in order, or broadcast).
_RESHAPES = frozenset({aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.expand.default})
#: Operators that read their input's memory as laid out, not its values.
_READ_MEMORY = frozenset({aten.as_strided.default, aten.as_strided_scatter.default})
#: The largest constant tensor compared by value (larger ones only by identity).
_CONSTANT_ELEMENTS = 4096


class _NoMatch(Exception):
    pass


@dataclass(frozen=True)
class Binding:
    """How to call the earlier graph with the later graph's arguments: for each earlier
    placeholder, ``("arg", k)`` (the later graph's argument ``k``), ``("size", k, axis)``
    (a size of the later graph's argument ``k``) or ``("value", v)``. ``values`` maps each
    earlier symbol to its value in the later graph (an int or a later symbol)."""

    sources: tuple[tuple, ...]
    values: Mapping[str, Any]

    def arguments(self, args: Sequence[Any]) -> list[Any]:
        """The earlier graph's arguments for a call of the later graph with ``args``."""
        out = []
        for source in self.sources:
            kind = source[0]
            out.append(args[source[1]] if kind == "arg" else int(args[source[1]].shape[source[2]])
                       if kind == "size" else source[1])
        return out


def specializes(earlier: torch.fx.GraphModule, earlier_names: Sequence[str],
                earlier_ranges: Callable[[str], tuple[int, int] | None],
                later: torch.fx.GraphModule, later_names: Sequence[str],
                later_inputs: Sequence[bool]) -> Binding | None:
    """A :class:`Binding` when the ATen graph ``later`` computes what ``earlier`` computes at
    some values of ``earlier``'s symbols, each within ``earlier_ranges(symbol name)`` (the
    range its library was compiled for); None otherwise. ``*_names`` name each graph's
    placeholders as dynamo did (what pairs them); ``later_inputs`` says which of ``later``'s
    placeholders are runtime inputs (whose sizes may carry a symbol's value)."""
    try:
        later_env, later_fixed = _environment(later)
        _, earlier_fixed = _environment(earlier)
        values = _bind(earlier, earlier_names, earlier_fixed, later, later_names, later_fixed)
        _check_ranges(values, earlier_ranges, later_env)
        keys = _Keys(later_fixed)
        later_out = keys.walk(later, later_names)
        mine = _Keys(earlier_fixed, values, keys.table)
        earlier_out = mine.walk(earlier, earlier_names)
        if earlier_out != later_out or not _all_tensors(earlier_out):
            return None
        sources = _sources(earlier, earlier_names, earlier_fixed, values, later, later_names, later_inputs, later_fixed)
    except _NoMatch:
        return None
    return Binding(tuple(sources), {str(k): (int(v) if v.is_Integer else v) for k, v in values.items()})


def _placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _environment(gm: torch.fx.GraphModule) -> tuple[Any, dict[sympy.Symbol, sympy.Integer]]:
    """The shape environment of ``gm``'s values, and its symbols a guard fixed to one value."""
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        sizes = v.shape if isinstance(v, torch.Tensor) else (v,)
        for d in sizes:
            if isinstance(d, torch.SymInt):
                env = d.node.shape_env
                return env, {s: sympy.Integer(int(r.lower)) for s, r in env.var_to_range.items() if r.is_singleton()}
    return None, {}  # (a graph of static sizes)


def _expr(size: Any, fixed: Mapping) -> sympy.Expr:
    """A size (int or SymInt) as a sympy expression, the environment's replacements and the
    fixed symbols applied."""
    if isinstance(size, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        node = size.node
        return node.shape_env.replace(node.expr).xreplace(fixed)
    if isinstance(size, (bool, int)):
        return sympy.Integer(int(size))
    raise _NoMatch


def _bind(earlier: torch.fx.GraphModule, earlier_names: Sequence[str], earlier_fixed: Mapping,
          later: torch.fx.GraphModule, later_names: Sequence[str], later_fixed: Mapping) -> dict:
    """Each earlier symbol's value in the later graph, read off the placeholders' shapes."""
    later_at = {name: n for name, n in zip(later_names, _placeholders(later))}
    pairs = []  # (earlier size, later size) of each dimension of each tensor placeholder
    for name, node in zip(earlier_names, _placeholders(earlier)):
        mine = node.meta.get("val")
        if not isinstance(mine, torch.Tensor):
            continue
        other = later_at.get(name)
        theirs = other.meta.get("val") if other is not None else None
        if not isinstance(theirs, torch.Tensor) or (theirs.dtype, theirs.device, theirs.dim()) != \
                (mine.dtype, mine.device, mine.dim()):
            raise _NoMatch
        pairs += [(_expr(a, earlier_fixed), _expr(b, later_fixed)) for a, b in zip(mine.shape, theirs.shape)]
    values: dict[sympy.Symbol, sympy.Expr] = {}
    for a, b in pairs:  # a dimension that is one symbol gives its value ...
        if a.is_Symbol:
            values.setdefault(a, b)
    for a, b in pairs:  # ... and every dimension must then agree (the two graphs' symbols may share names)
        if not a.free_symbols <= values.keys() or a.xreplace(values) != b:
            raise _NoMatch
    return values


def _check_ranges(values: Mapping, earlier_ranges: Callable[[str], tuple[int, int] | None], later_env: Any) -> None:
    """Every value a symbol takes in the later graph lies in the range the earlier library serves."""
    for symbol, value in values.items():
        served = earlier_ranges(str(symbol))
        if served is None:
            raise _NoMatch
        low, high = served
        if value.is_Integer:
            if not low <= int(value) <= high:
                raise _NoMatch
        elif value.is_Symbol:
            r = later_env.var_to_range.get(value) if later_env is not None else None
            if r is None or not (_bound(r.lower, -1) >= low and _bound(r.upper, MAX_SIZE) <= high):
                raise _NoMatch
        else:
            raise _NoMatch


class _Keys:
    """Keys of a graph's values: a size is its expression (an earlier graph's symbols replaced
    by their values), a tensor is its operator and its arguments' keys, looked up in
    ``table`` (the later graph's keys, which an earlier graph's nodes must find)."""

    def __init__(self, fixed: Mapping, values: Mapping | None = None, table: dict | None = None):
        self.fixed, self.values = fixed, values
        self.adding = table is None
        self.table: dict = {} if table is None else table

    def size(self, value: Any) -> Any:
        e = _expr(value, self.fixed)
        if self.values is not None:
            if not e.free_symbols <= self.values.keys():
                raise _NoMatch  # (an earlier symbol the inputs do not determine)
            e = e.xreplace(self.values)
        return ("int", int(e)) if e.is_Integer else ("bool", bool(e)) if e in (sympy.true, sympy.false) \
            else ("size", e)

    def walk(self, gm: torch.fx.GraphModule, names: Sequence[str]) -> Any:
        """The key of ``gm``'s output, every node keyed on the way."""
        env: dict[torch.fx.Node, Any] = {}
        placeholders = iter(names)
        for k, n in enumerate(gm.graph.nodes):
            v = n.meta.get("val")
            if n.op == "placeholder":
                name = next(placeholders)
                env[n] = self.size(v) if _is_size(v) else ("input", name)
            elif n.op == "output":
                return self.arg(n.args[0], env)
            elif _is_size(v):
                env[n] = self.size(v)
            elif n.op == "call_function":
                env[n] = self.node(n, k, env)
            elif n.op == "get_attr":
                env[n] = _constant(getattr(gm, n.target))
            else:
                raise _NoMatch
        raise _NoMatch

    def node(self, n: torch.fx.Node, k: int, env: dict) -> Any:
        target = n.target
        if target in _READ_MEMORY or isinstance(target, torch._ops.OpOverload) and (
                target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags):
            raise _NoMatch
        if target in _NO_OPS_AT_SAME_SHAPE and self._same_shape(n):
            return env[n.args[0]]
        if target in _RESHAPES:  # (keyed by the shape they make: a -1 or a size, the same view)
            key = ("reshape" if target != aten.expand.default else "expand", env[n.args[0]], self._shape(n))
        else:
            key = ("op", str(target), self.arg(n.args, env), self.arg(dict(n.kwargs), env))
        if self.adding:
            return self.table.setdefault(key, ("node", k))
        return self.table.get(key, ("earlier", k))  # (an earlier node of no use unless an output reads it)

    def _same_shape(self, n: torch.fx.Node) -> bool:
        source = n.args[0]
        a, b = n.meta.get("val"), source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.dtype != b.dtype:
            return False
        return a.dim() == b.dim() and all(self.size(x) == self.size(y) for x, y in zip(a.shape, b.shape))

    def _shape(self, n: torch.fx.Node) -> tuple:
        v = n.meta.get("val")
        if not isinstance(v, torch.Tensor):
            raise _NoMatch
        return tuple(self.size(d) for d in v.shape)

    def arg(self, value: Any, env: dict) -> Any:
        if isinstance(value, torch.fx.Node):
            return env[value]
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(self.arg(v, env) for v in value))
        if isinstance(value, dict):
            return ("dict", tuple((k, self.arg(v, env)) for k, v in sorted(value.items())))
        if isinstance(value, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            return self.size(value)
        if isinstance(value, (bool, int, str, type(None))):
            return (type(value).__name__, value)
        if isinstance(value, float):
            return ("float", repr(value))  # (a NaN equal to itself)
        if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return (type(value).__name__, str(value))
        if isinstance(value, torch.Tensor):
            return _constant(value)
        raise _NoMatch


def _is_size(v: Any) -> bool:
    return isinstance(v, (torch.SymInt, torch.SymBool, torch.SymFloat, int, bool)) and not isinstance(v, torch.Tensor)


def _constant(t: Any) -> Any:
    """A constant tensor's key: its values when it is small, else itself."""
    if not isinstance(t, torch.Tensor):
        raise _NoMatch
    if t.numel() <= _CONSTANT_ELEMENTS and t.device.type == "cpu":
        return ("constant", str(t.dtype), tuple(t.shape), t.detach().contiguous().numpy().tobytes())
    return ("constant", id(t))


def _all_tensors(key: Any) -> bool:
    """Whether every leaf of an output key is a tensor's (sizes come out of a program as the
    earlier graph's values, not the later's)."""
    if key[0] in ("tuple", "list"):
        return all(_all_tensors(k) for k in key[1])
    return key[0] in ("node", "input")


def _sources(earlier: torch.fx.GraphModule, earlier_names: Sequence[str], earlier_fixed: Mapping, values: Mapping,
             later: torch.fx.GraphModule, later_names: Sequence[str], later_inputs: Sequence[bool],
             later_fixed: Mapping) -> list[tuple]:
    """Where each earlier placeholder's argument comes from in a call of the later graph."""
    position = {name: k for k, name in enumerate(later_names)}
    later_nodes = _placeholders(later)
    # the later graph's runtime inputs' sizes that are one symbol: where a symbol's value is read
    readable: dict[sympy.Expr, tuple[int, int]] = {}
    for k, (n, is_input) in enumerate(zip(later_nodes, later_inputs)):
        v = n.meta.get("val")
        if is_input and isinstance(v, torch.Tensor):
            for axis, d in enumerate(v.shape):
                e = _expr(d, later_fixed)
                if e.is_Symbol:
                    readable.setdefault(e, (k, axis))
    out = []
    for name, n in zip(earlier_names, _placeholders(earlier)):
        v = n.meta.get("val")
        if not _is_size(v):
            if name not in position:
                raise _NoMatch
            out.append(("arg", position[name]))
            continue
        e = _expr(v, earlier_fixed).xreplace(values)
        if e.is_Integer:
            out.append(("value", int(e)))
        elif e in readable:
            out.append(("size", *readable[e]))
        else:
            raise _NoMatch
    return out


__all__ = ["Binding", "specializes"]
