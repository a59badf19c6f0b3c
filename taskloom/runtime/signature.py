"""Kernel signatures as recorded beside a built library, checked once at load time.

A signature is JSON-able::

    {"name": "matmul", "params": [
        {"name": "M", "kind": "scalar", "dtype": "int32"},
        {"name": "A", "kind": "tensor", "dtype": "float32", "shape": ["M", 64], "written": false},
        {"name": "p", "kind": "pointer", "dtype": "float32", "written": true}]}

A shape entry is an int, the name of an integer scalar parameter (a symbol), or a small
integer expression over such names (``"M * 2"``, ``"(N + 15) // 16"``). Expressions are
parsed here into closures, with Python's ``ast`` and a handful of allowed operators; they
are never ``eval``-ed.
"""
from __future__ import annotations

import ast
import ctypes
import operator
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from taskloom.errors import LoadError
from taskloom.runtime.dlpack import DTYPE_NAMES

#: The ctypes type of a scalar parameter of each dtype.
SCALAR_CTYPES: dict[str, type] = {
    "int64": ctypes.c_int64, "int32": ctypes.c_int32, "int16": ctypes.c_int16,
    "int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "float64": ctypes.c_double,
    "float32": ctypes.c_float, "bool": ctypes.c_bool,
}
#: Inclusive value range of each integer dtype.
INT_RANGES: dict[str, tuple[int, int]] = {
    "int64": (-2 ** 63, 2 ** 63 - 1), "int32": (-2 ** 31, 2 ** 31 - 1),
    "int16": (-2 ** 15, 2 ** 15 - 1), "int8": (-128, 127), "uint8": (0, 255),
}
KINDS = ("scalar", "tensor", "pointer")

Env = Mapping[str, int]


@dataclass(frozen=True)
class ShapeExpr:
    """A shape entry that is an expression: its text, the names it reads and its evaluator."""

    text: str
    names: tuple[str, ...]
    evaluate: Callable[[Env], int]


@dataclass(frozen=True)
class Param:
    """One parameter of a kernel, validated.

    ``shape`` holds, per dimension, an int, a symbol name (str) or a :class:`ShapeExpr`;
    it is None for scalars and pointers.
    """

    index: int
    name: str
    kind: str
    dtype: str
    shape: tuple[int | str | ShapeExpr, ...] | None = None
    written: bool = False

    @property
    def is_buffer(self) -> bool:
        """Whether the parameter is passed as a data pointer (a tensor or a pointer)."""
        return self.kind != "scalar"

    def describe(self) -> str:
        """The parameter as ``name: dtype[dims]``, for messages and reprs."""
        if self.kind == "scalar":
            return f"{self.name}: {self.dtype}"
        note = " (written)" if self.written else ""
        if self.kind == "pointer":
            return f"{self.name}: {self.dtype}*{note}"
        dims = ", ".join(d.text if isinstance(d, ShapeExpr) else str(d) for d in self.shape or ())
        return f"{self.name}: {self.dtype}[{dims}]{note}"


@dataclass(frozen=True)
class Signature:
    """A kernel's name and its parameters, in C order."""

    name: str
    params: tuple[Param, ...]
    symbol: str = ""  # the exported C symbol, when it differs from the name

    @property
    def c_symbol(self) -> str:
        return self.symbol or self.name


def parse_signature(data: Mapping[str, Any]) -> Signature:
    """Validate one recorded signature; :class:`LoadError` names the kernel and parameter at fault."""
    if not isinstance(data, Mapping):
        raise LoadError(f"a kernel signature must be a dict with 'name' and 'params', got {data!r}")
    name = data.get("name")
    if not _is_identifier(name):
        raise LoadError(f"kernel signature has an invalid name {name!r}; expected a C identifier")
    raw_params = data.get("params")
    if not isinstance(raw_params, (list, tuple)):
        raise LoadError(f"kernel {name!r}: 'params' must be a list, got {raw_params!r}")

    first: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_params):
        where = f"kernel {name!r}, parameter #{index}"
        if not isinstance(raw, Mapping):
            raise LoadError(f"{where}: expected a dict, got {raw!r}")
        pname = raw.get("name")
        if not _is_identifier(pname):
            raise LoadError(f"{where}: invalid name {pname!r}; expected a C identifier")
        where = f"kernel {name!r}, parameter {pname!r}"
        if pname in seen:
            raise LoadError(f"{where}: the name is used by two parameters")
        seen.add(pname)
        kind, dtype = raw.get("kind"), raw.get("dtype")
        if kind not in KINDS:
            raise LoadError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if dtype not in DTYPE_NAMES:
            raise LoadError(f"{where}: dtype must be one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
        if kind == "scalar" and dtype not in SCALAR_CTYPES:
            raise LoadError(f"{where}: a scalar parameter cannot be {dtype} (no C calling convention "
                            f"for it here); scalar dtypes: {', '.join(SCALAR_CTYPES)}")
        written = raw.get("written", False)
        if not isinstance(written, bool):
            raise LoadError(f"{where}: 'written' must be true or false, got {written!r}")
        if kind == "tensor" and not isinstance(raw.get("shape"), (list, tuple)):
            raise LoadError(f"{where}: a tensor parameter needs a 'shape' list, got {raw.get('shape')!r}")
        first.append({"name": pname, "kind": kind, "dtype": dtype, "written": written,
                      "shape": raw.get("shape")})

    int_scalars = {p["name"] for p in first if p["kind"] == "scalar" and p["dtype"] in INT_RANGES}
    params = []
    for index, p in enumerate(first):
        shape = None
        if p["kind"] == "tensor":
            where = f"kernel {name!r}, parameter {p['name']!r}"
            shape = tuple(_parse_dim(entry, int_scalars, where) for entry in p["shape"])
        params.append(Param(index, p["name"], p["kind"], p["dtype"], shape, p["written"]))
    symbol = data.get("symbol", name)
    if not _is_identifier(symbol):
        raise LoadError(f"kernel {name!r} has an invalid symbol {symbol!r}; expected a C identifier")
    return Signature(name, tuple(params), symbol if symbol != name else "")


# -- shape entries -----------------------------------------------------------------------

def parse_dim(entry: Any, names: set[str], where: str) -> int | str | ShapeExpr:
    """A shape entry (an int, a name among ``names``, or an expression over them) as an int,
    the name, or a :class:`ShapeExpr`; a :class:`LoadError` saying ``where`` otherwise."""
    return _parse_dim(entry, names, where)


def _parse_dim(entry: Any, int_scalars: set[str], where: str) -> int | str | ShapeExpr:
    if isinstance(entry, bool) or not isinstance(entry, (int, str)):
        raise LoadError(f"{where}: shape entry {entry!r} must be an int or a string")
    if isinstance(entry, int):
        if entry < 0:
            raise LoadError(f"{where}: shape entry {entry} is negative")
        return entry
    text = entry.strip()
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise LoadError(f"{where}: shape entry {entry!r} is not an expression") from None
    names: list[str] = []
    evaluate = _compile(tree, names, entry, where)
    for n in names:
        if n not in int_scalars:
            raise LoadError(f"{where}: shape entry {entry!r} reads {n!r}, which is not an integer "
                            f"scalar parameter of the kernel")
    if isinstance(tree, ast.Name):
        return tree.id
    if not names:
        try:
            value = evaluate({})
        except ZeroDivisionError:
            raise LoadError(f"{where}: shape entry {entry!r} divides by zero") from None
        if value < 0:
            raise LoadError(f"{where}: shape entry {entry!r} is negative")
        return value
    return ShapeExpr(text, tuple(dict.fromkeys(names)), evaluate)


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def _compile(node: ast.AST, names: list[str], entry: str, where: str) -> Callable[[Env], int]:
    """Turn an expression tree into a closure over an environment of symbol values."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
        return lambda env: value
    if isinstance(node, ast.Name):
        name = node.id
        names.append(name)
        return lambda env: env[name]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        op = _BINARY[type(node.op)]
        left = _compile(node.left, names, entry, where)
        right = _compile(node.right, names, entry, where)
        return lambda env: op(left(env), right(env))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        op1 = _UNARY[type(node.op)]
        inner = _compile(node.operand, names, entry, where)
        return lambda env: op1(inner(env))
    raise LoadError(f"{where}: shape entry {entry!r} uses {ast.unparse(node)!r}; shape expressions "
                    f"may hold ints, parameter names, + - * // % and parentheses")


def _is_identifier(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier() and name.isascii()
