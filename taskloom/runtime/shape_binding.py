"""Binding a dynamic graph's symbols on each call: their values read off the inputs' shapes,
checked against the declared ranges, and what follows from them (the outputs' shapes, the
arena's size, each intermediate's offset), worked out once per distinct set of values.

A compiled graph whose inputs have symbolic dimensions records, in ``meta["dynamic"]``::

    {"symbols": [{"name": "batch", "min": 1, "max": 64, "ladder": [1, 8, 64]}, ...],
     "slots": [{"elements": "batch * seq * 768", "itemsize": 4, "first": 0, "last": 3}, ...],
     "variants": [[0, 0, 1, ...], ...]}

and shape entries that are ints, symbol names or expressions over them (``"seq + 1"``).
The kernels take the symbols' values as size arguments (the launcher's ``sym`` table), the
intermediates live at offsets planned for this call's sizes (``off``), and each kernel
built in variants runs the one chosen at the sample point nearest these sizes (``var``:
the point is the nearest rung of each symbol's ladder, by ratio; ``variants`` holds, per
such kernel, its variant at every point, the last symbol varying fastest). One library
serves every value in range.
"""
from __future__ import annotations

import ctypes
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

from taskloom.errors import ArgumentError, LoadError
from taskloom.runtime.memory_plan import Buffer, plan_memory
from taskloom.runtime.signature import ShapeExpr, parse_dim

#: Kernels index with 32-bit integers unless a size was known to need more at compile time,
#: so no tensor of a dynamic graph may hold more elements than this.
INDEX_MAX = 2 ** 31 - 1
#: Distinct sets of symbol values whose plans are kept.
CACHED_BINDINGS = 64


@dataclass(frozen=True)
class Binding:
    """What one set of symbol values gives: the values (in symbol order) and their table,
    the offsets and variants tables, the arena bytes the call needs and the outputs' shapes."""

    values: tuple[int, ...]
    sym: Any  # ctypes int64 array
    off: Any  # ctypes int64 array
    var: Any  # ctypes int64 array
    arena_bytes: int
    output_shapes: tuple[tuple[int, ...], ...]


class ShapeBinder:
    """The symbols of one dynamic graph (see the module docstring), bound per call."""

    def __init__(self, meta: dict[str, Any], where: str = "the compiled graph"):
        dyn = meta["dynamic"]
        self.symbols = [s["name"] for s in dyn["symbols"]]
        self.ranges = {s["name"]: (int(s["min"]), int(s["max"])) for s in dyn["symbols"]}
        self.ladders = [[int(v) for v in s.get("ladder", [1])] for s in dyn["symbols"]]
        self.variants = [[int(v) for v in table] for table in dyn.get("variants", [])]
        points = math.prod(len(rungs) for rungs in self.ladders)
        if any(len(table) != points for table in self.variants):
            raise LoadError(f"{where}: a table of kernel variants does not have one entry per sample point "
                            f"({points})")
        names = set(self.symbols)
        parse = lambda d, what: parse_dim(d, names, f"{where}: {what}")  # noqa: E731
        self.inputs = [(i["name"], tuple(parse(d, f"input {i['name']!r}") for d in i["shape"]))
                       for i in meta["inputs"]]
        self.outputs = [tuple(parse(d, f"output {k}") for d in o["shape"]) for k, o in enumerate(meta["outputs"])]
        self.slots = [(parse(s["elements"], f"slot {k}"), int(s["itemsize"]), int(s["first"]), int(s["last"]))
                      for k, s in enumerate(dyn["slots"])]
        for name in self.symbols:
            if not any(d == name for _, shape in self.inputs for d in shape):
                raise LoadError(f"{where}: symbol {name!r} is no whole dimension of any input, so no call "
                                "could give its value")
        self._cache: OrderedDict[tuple[int, ...], Binding] = OrderedDict()
        self._by_shapes: dict[tuple, Binding] = {}

    def bind(self, shapes: Sequence[tuple[int, ...]]) -> Binding:
        """The binding of the inputs' ``shapes``; an :class:`ArgumentError` naming the input,
        the dimension and what it should be when they disagree or leave a range."""
        key = tuple(shapes)
        seen = self._by_shapes.get(key)  # shapes checked before: no checks again
        if seen is not None:
            return seen
        found = self._bind(shapes)
        self._by_shapes[key] = found
        if len(self._by_shapes) > CACHED_BINDINGS:
            self._by_shapes.pop(next(iter(self._by_shapes)))
        return found

    def _bind(self, shapes: Sequence[tuple[int, ...]]) -> Binding:
        env: dict[str, int] = {}
        origin: dict[str, str] = {}
        for (name, dims), shape in zip(self.inputs, shapes):
            if len(shape) != len(dims):
                raise ArgumentError(f"input '{name}' must have {len(dims)} dimensions ({_text(dims)}), got "
                                    f"shape {tuple(shape)}")
            for axis, (d, n) in enumerate(zip(dims, shape)):
                if isinstance(d, str):
                    self._bind_symbol(d, n, f"input '{name}' dimension {axis}", env, origin)
        for (name, dims), shape in zip(self.inputs, shapes):
            for axis, (d, n) in enumerate(zip(dims, shape)):
                want = d if isinstance(d, int) else d.evaluate(env) if isinstance(d, ShapeExpr) else env[d]
                if want != n:
                    why = "" if isinstance(d, int) else f" ({_dim_text(d)} with {_env_text(env)})"
                    raise ArgumentError(f"input '{name}' dimension {axis} must be {want}{why}, got shape "
                                        f"{tuple(shape)}")
        values = tuple(env[s] for s in self.symbols)
        found = self._cache.get(values)
        if found is None:
            found = self._plan(values, env)
            self._cache[values] = found
            if len(self._cache) > CACHED_BINDINGS:
                self._cache.popitem(last=False)
        return found

    def _bind_symbol(self, symbol: str, value: int, where: str, env: dict[str, int], origin: dict[str, str]) -> None:
        have = env.get(symbol)
        if have is None:
            low, high = self.ranges[symbol]
            if not low <= value <= high:
                raise ArgumentError(f"{where} is {symbol}={value}; the model was compiled for {symbol} from "
                                    f"{low} to {high}: compile it with a range that holds {value}")
            env[symbol], origin[symbol] = value, where
        elif have != value:
            raise ArgumentError(f"{where} is {symbol}={value}, but {origin[symbol]} gave {symbol}={have}")

    def _plan(self, values: tuple[int, ...], env: dict[str, int]) -> Binding:
        """Sizes, index-range checks and the memory plan for one set of symbol values."""
        outputs = tuple(tuple(_value(d, env) for d in dims) for dims in self.outputs)
        buffers = []
        for k, (elements, itemsize, first, last) in enumerate(self.slots):
            n = _value(elements, env)
            if n > INDEX_MAX:
                raise ArgumentError(f"with {_env_text(env)} an intermediate of the compiled graph would hold "
                                    f"{n:,} elements, past the {INDEX_MAX:,} its kernels can index: call it "
                                    "with smaller inputs")
            buffers.append(Buffer(k, n * itemsize, first, last))
        named = [(f"input '{name}'", tuple(_value(d, env) for d in dims)) for name, dims in self.inputs]
        for what, shape in named + [(f"output {k}", shape) for k, shape in enumerate(outputs)]:
            if _product(shape) > INDEX_MAX:
                raise ArgumentError(f"with {_env_text(env)} {what} has shape {shape}, more elements than the "
                                    f"{INDEX_MAX:,} the compiled graph's kernels can index: call it with "
                                    "smaller inputs")
        plan = plan_memory(buffers)
        sym = (ctypes.c_int64 * max(len(values), 1))(*values)
        off = (ctypes.c_int64 * max(len(buffers), 1))(*(plan.offsets[k] for k in range(len(buffers))))
        point = 0
        for value, rungs in zip(values, self.ladders):
            point = point * len(rungs) + _nearest(value, rungs)
        var = (ctypes.c_int64 * max(len(self.variants), 1))(*(table[point] for table in self.variants))
        return Binding(values, sym, off, var, plan.arena_bytes, outputs)


def _nearest(value: int, rungs: Sequence[int]) -> int:
    """The position of the rung nearest ``value`` by ratio (0 counts as 1)."""
    v = max(value, 1)
    return min(range(len(rungs)), key=lambda k: abs(math.log(v / max(rungs[k], 1))))


def _value(d: Any, env: dict[str, int]) -> int:
    return d if isinstance(d, int) else d.evaluate(env) if isinstance(d, ShapeExpr) else env[d]


def _product(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _dim_text(d: Any) -> str:
    return d.text if isinstance(d, ShapeExpr) else str(d)


def _text(dims: Sequence[Any]) -> str:
    return ", ".join(_dim_text(d) for d in dims)


def _env_text(env: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.items())
