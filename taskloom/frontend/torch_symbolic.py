"""Dynamo's symbolic sizes as taskloom symbols.

With ``dynamic=True`` (or once dynamo has seen a dimension change), dynamo hands the backend
a graph whose sizes are ``torch.SymInt``\\ s: symbols of its shape environment (``s77``)
and expressions of them (``s77 * s27``), each symbol with the range its guards allow (2 and
up, for a size dynamo did not specialize). Here a SymInt becomes a taskloom expression of
symbols of the same names, and the shape environment's ranges become the compile's ranges,
so one compiled graph serves every size dynamo's guards let through.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

import sympy
import torch

from taskloom.errors import FrontendError
from taskloom.ir import expr as E

#: The largest size a symbol may take: kernels index with 32-bit integers.
MAX_SIZE = 2 ** 31 - 1


def is_symbolic(value: Any) -> bool:
    """Whether a value dynamo recorded (a SymInt, or a tensor some of whose sizes are) varies."""
    if isinstance(value, torch.SymInt):
        return bool(value.node.expr.free_symbols)
    if isinstance(value, torch.Tensor):
        return any(is_symbolic(d) for d in value.shape)
    return False


def graph_is_symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether any placeholder of dynamo's graph has a symbolic size."""
    return any(is_symbolic(n.meta.get("example_value")) for n in gm.graph.nodes if n.op == "placeholder")


def fake_inputs(gm: torch.fx.GraphModule) -> list[Any]:
    """The placeholders' fake values, in dynamo's shape environment: what a symbolic trace
    of ``gm`` runs on."""
    values = [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]
    if any(v is None for v in values):
        raise FrontendError("dynamo gave a placeholder without its example value; the graph cannot be "
                            "traced with symbolic sizes")
    return values


@contextlib.contextmanager
def traced_inputs(gm: torch.fx.GraphModule, args: Sequence[Any]) -> Iterator[list[Any]]:
    """What a symbolic trace of ``gm`` runs on: dynamo's fake values for the inputs that vary,
    and fakes of static shape of the real ``args`` for the rest (parameters, buffers)."""
    fakes = fake_inputs(gm)
    mode = next((v.fake_mode for v in fakes if isinstance(v, torch.Tensor)), None)
    if mode is None:
        yield list(fakes)
        return

    def static(f: Any, a: Any) -> Any:
        if is_symbolic(f) or not isinstance(a, torch.Tensor):
            return f
        return mode.fake_tensor_converter.from_real_tensor(mode, a)  # (a fake of static shape)
    yield [static(f, a) for f, a in zip(fakes, args)]


def inline_scalar_reads(gm: torch.fx.GraphModule, args: Sequence[Any], positions: Sequence[int]) -> None:
    """Replaces each ``.item()`` of the placeholders at ``positions`` -- Python floats dynamo
    passes as tensors when shapes are dynamic (a module's epsilon, a dropout rate,
    ``math.pi``) -- by its value, which a symbolic trace could not read."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for k in positions:
        node, value = placeholders[k], args[k]
        for user in list(node.users):
            if user.op == "call_method" and user.target == "item" and len(user.args) == 1:
                constant = value.item()
                for reader in list(user.users):
                    reader.args = torch.fx.node.map_arg(reader.args, lambda a: constant if a is user else a)
                    reader.kwargs = torch.fx.node.map_arg(reader.kwargs, lambda a: constant if a is user else a)
                gm.graph.erase_node(user)
    gm.recompile()


def to_expr(value: Any, names: Mapping[str, str | int] | None = None) -> Any:
    """A SymInt (or int) as a taskloom size: an int, or an expression of the symbols, each
    named as ``names`` says (dynamo's own name, ``s77``, otherwise; an int for a symbol a
    guard fixed, :func:`fixed_symbols`)."""
    if isinstance(value, torch.SymInt):
        return _sympy(value.node.shape_env.replace(value.node.expr), names or {})
    return value


#: The size functions of dynamo's expressions on ints (sizes: never negative).
_ON_INTS = {"Min": min, "Max": max, "FloorDiv": lambda a, b: a // b, "Mod": lambda a, b: a % b,
            "PythonMod": lambda a, b: a % b, "CeilDiv": lambda a, b: -(-a // b), "CleanDiv": lambda a, b: a // b}


def _sympy(e: Any, names: Mapping[str, str | int]) -> Any:
    if e.is_Integer:
        return int(e)
    if e.is_Symbol:
        name = names.get(str(e), str(e))
        return name if isinstance(name, int) else E.var(name)
    args = [_sympy(a, names) for a in e.args]
    if isinstance(e, sympy.Add):
        return _fold(args, lambda a, b: a + b)
    if isinstance(e, sympy.Mul):
        return _fold(args, lambda a, b: a * b)
    name = type(e).__name__
    if all(isinstance(a, int) for a in args) and name in _ON_INTS:  # (a symbol fixed to a value)
        return _ON_INTS[name](*args)
    if name in ("Min", "Max"):  # (sympy's, or torch's own of the same names)
        return _fold(args, E.minimum if name == "Min" else E.maximum)
    if name == "FloorDiv":
        return E.as_expr(args[0]) // args[1]
    if name in ("Mod", "PythonMod"):
        return E.as_expr(args[0]) % args[1]
    if name == "CeilDiv" or name == "CleanDiv":
        return E.as_expr(args[0] + args[1] - 1) // args[1] if name == "CeilDiv" else E.as_expr(args[0]) // args[1]
    raise FrontendError(f"the symbolic size {e} uses {name}, which taskloom cannot carry as a size yet")


def _fold(args: Sequence[Any], op: Any) -> Any:
    out = args[0]
    for a in args[1:]:
        out = op(out, a)
    return out


def symbol_names(fakes: Sequence[Any], dims: Mapping[int, Mapping[int, str]]) -> dict[str, str]:
    """Names for dynamo's symbols: ``dims`` names dimensions of the inputs (``{0: {0:
    "batch"}}``, the position among ``fakes`` first), and each such dimension's symbol takes
    its name. Two symbols given one name become one (the compiled graph then requires the
    dimensions to be equal)."""
    out = {}
    for k, named in dims.items():
        for d, name in named.items():
            size = fakes[k].shape[d]
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                out[str(size.node.expr)] = name
    return out


def ranges(fakes: Sequence[Any], names: Mapping[str, str] | None = None) -> dict[str, tuple[int, int]]:
    """Each symbol's range from the shape environment of ``fakes`` (dynamo's guards: 2 and up
    for a dimension it did not specialize), capped at :data:`MAX_SIZE`; symbols are named as
    ``names`` says, and a name two symbols share gets both ranges' intersection."""
    env = _shape_env(fakes)
    if env is None:
        return {}
    out: dict[str, tuple[int, int]] = {}
    for symbol, r in env.var_to_range.items():
        name = (names or {}).get(str(symbol), str(symbol))
        if isinstance(name, int):
            continue  # fixed by a guard (fixed_symbols)
        low, high = out.get(name, (0, MAX_SIZE))
        out[name] = (max(bound(r.lower, 0), low), min(bound(r.upper, MAX_SIZE), high))
    return out


def fixed_symbols(fakes: Sequence[Any]) -> dict[str, int]:
    """The symbols of ``fakes`` a guard of dynamo's fixed to one value (``Eq(s72, 1)``: the
    model's code branched on a batch of 1, and the graph's views were traced with that 1),
    with their values: the graph is one for that value only, and converts as such."""
    env = _shape_env(fakes)
    out: dict[str, int] = {}
    for guard in env.guards if env is not None else ():
        e = guard.expr
        if isinstance(e, sympy.Eq):
            a, b = e.args
            symbol, value = (a, b) if a.is_Symbol else (b, a)
            if symbol.is_Symbol and value.is_Integer:
                out[str(symbol)] = int(value)
    return out


def _shape_env(fakes: Sequence[Any]) -> Any:
    for v in fakes:
        if isinstance(v, torch.Tensor) and getattr(v, "fake_mode", None) is not None:
            return v.fake_mode.shape_env
        if isinstance(v, torch.SymInt):
            return v.node.shape_env
    return None


def bound(value: Any, infinite: int) -> int:
    """A range's end as an int; ``infinite`` for torch's and sympy's infinities."""
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, sympy.Integer) else infinite  # (int_oo, -int_oo, oo)


def ranges_of(graph: Any, ranges: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The ``ranges`` of the symbols ``graph``'s inputs have (a graph split for the fallback
    may have fewer than dynamo's)."""
    names = {v.name for t in graph.inputs for d in t.shape if isinstance(d, E.Expr) for v in E.free_vars(d)}
    return {k: v for k, v in ranges.items() if k in names}
