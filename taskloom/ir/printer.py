"""Renders IR as kernel-script text: what you read is what :mod:`taskloom.script` parses.

    >>> print(astext(matmul_fn))            # doctest: +SKIP
    @kernel
    def matmul(M: i32, A: f32[M, 4], ...):
        for w in parallel(2):
            ...

``script.parse_source(astext(f)) == f`` holds for every function the script can express.
"""
from __future__ import annotations

import math
from typing import Any

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import PointerType, TensorType, Type, index_type
from taskloom.ir.mapping import Composed, Custom, Repeat, Spatial, TaskMapping
from taskloom.ir.node import Node

# Python operator precedence, so the text has only the parentheses it needs.
_BIN = {
    "or": ("or", 1), "and": ("and", 2),
    "lt": ("<", 4), "le": ("<=", 4), "eq": ("==", 4), "ne": ("!=", 4),
    "bitor": ("|", 5), "bitxor": ("^", 6), "bitand": ("&", 7), "shl": ("<<", 8), "shr": (">>", 8),
    "add": ("+", 9), "sub": ("-", 9), "mul": ("*", 10), "div": ("/", 10), "mod": ("%", 10),
}
_ATOM = 13
_LOOP_WORD = {"serial": "range", "unroll": "unroll", "parallel": "parallel", "vectorize": "vectorize"}
_SCOPE_WORD = {"global": "global_tensor", "shared": "shared_tensor", "local": "local_tensor",
               "register": "register_tensor"}


def type_text(t: Type) -> str:
    if isinstance(t, TensorType):
        return f"{type_text(t.dtype)}[{', '.join(expr_text(d) for d in t.shape)}]"
    if isinstance(t, PointerType):
        return f"ptr({type_text(t.base)})"
    return repr(t)


def _const_text(c: E.Constant) -> str:
    v = c.value
    if c.type.is_float():
        text = ("inf" if v > 0 else "-inf") if math.isinf(v) else "nan" if math.isnan(v) else repr(v)
        return text if c.type.name == "float32" else f"{c.type.short}({text})"
    if c.type.is_bool():
        return repr(v)
    return repr(v) if c.type == index_type else f"{c.type.short}({v})"


def _expr(e: E.Expr) -> tuple[str, int]:
    """Text of ``e`` and its precedence."""
    if isinstance(e, E.Var):
        return e.name, _ATOM
    if isinstance(e, E.Constant):
        text = _const_text(e)
        return text, (11 if text.startswith("-") else _ATOM)
    if isinstance(e, E.Binary):
        if e.op in ("min", "max"):
            return f"{e.op}({expr_text(e.a)}, {expr_text(e.b)})", _ATOM
        sym, p = _BIN[e.op]
        if e.op == "div" and not E._scalar(e.type).is_float():
            sym = "//"
        left = _paren(e.a, p if p not in (4,) else p + 1)
        right = _paren(e.b, p + 1)
        return f"{left} {sym} {right}", p
    if isinstance(e, E.Unary):
        if e.op == "not":
            return f"not {_paren(e.a, 3)}", 3
        return f"{'-' if e.op == 'neg' else '~'}{_paren(e.a, 11)}", 11
    if isinstance(e, E.Cast):
        return f"cast({expr_text(e.value)}, {type_text(e.dtype)})", _ATOM
    if isinstance(e, E.Select):
        return f"select({expr_text(e.cond)}, {expr_text(e.a)}, {expr_text(e.b)})", _ATOM
    if isinstance(e, E.TensorElement):
        return f"{_paren(e.tensor, _ATOM)}[{', '.join(expr_text(i) for i in e.indices)}]", _ATOM
    if isinstance(e, E.VectorLoad):
        el = f"{_paren(e.tensor, _ATOM)}[{', '.join(expr_text(i) for i in e.indices)}]"
        count = "" if e.count is None else f", {expr_text(e.count)}"
        stride = "" if e.stride == 1 else f", stride={e.stride}"
        return f"vload({el}, {e.lanes}{count}{stride})", _ATOM
    if isinstance(e, E.Broadcast):
        return f"broadcast({expr_text(e.value)}, {e.lanes})", _ATOM
    if isinstance(e, E.IndexCheck):
        wrap = ", wrap=True" if e.wrap else ""
        return f"index_check({expr_text(e.value)}, {expr_text(e.extent)}, {e.what!r}{wrap})", _ATOM
    if isinstance(e, E.Call):
        if e.func in gpu.INDEX_PRIMITIVES:  # threadIdx.x, as a kernel writes it
            return gpu.INDEX_PRIMITIVES[e.func], _ATOM
        return f"{e.func}({', '.join(expr_text(a) for a in e.args)})", _ATOM
    from taskloom.ir import compute as C
    if isinstance(e, (C.TensorInput, C.GridCompute)):
        return e.name, _ATOM
    if isinstance(e, C.ReduceCompute):
        axes = ", ".join(a.name for a in e.axes)
        shape = ", ".join(expr_text(d) for d in e.shape)
        return f"reduce([{shape}], lambda {axes}: {expr_text(e.value)}, {e.kind!r})", _ATOM
    raise TypeError(f"the printer does not know {type(e).__name__}")


def _paren(e: E.Expr, min_prec: int) -> str:
    text, p = _expr(e)
    return text if p >= min_prec else f"({text})"


def expr_text(e: E.Expr) -> str:
    return _expr(e)[0]


def _dim_text(d: Any) -> str:
    return expr_text(d) if isinstance(d, E.Expr) else repr(d)


def mapping_text(m: TaskMapping) -> str:
    if isinstance(m, Composed):
        return " * ".join(mapping_text(p) for p in m.parts)
    if isinstance(m, (Spatial, Repeat)):
        word = "spatial" if isinstance(m, Spatial) else "repeat"
        ranks = "" if m.ranks == tuple(range(len(m.shape))) else f", ranks={list(m.ranks)}"
        return f"{word}({', '.join(_dim_text(d) for d in m.shape)}{ranks})"
    if isinstance(m, Custom):
        name = getattr(m.fn, "__name__", "fn")
        return f"custom([{', '.join(_dim_text(d) for d in m.shape)}], {_dim_text(m.workers)}, {name})"
    raise TypeError(f"the printer does not know {type(m).__name__}")


class _StmtPrinter:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def body(self, s: S.Stmt, depth: int) -> None:
        start = len(self.lines)
        self.stmt(s, depth)
        if len(self.lines) == start:
            self.line(depth, "pass")

    def stmt(self, s: S.Stmt, d: int) -> None:
        if isinstance(s, S.SeqStmt):
            for x in s.stmts:
                self.stmt(x, d)
        elif isinstance(s, S.For):
            self.line(d, f"for {s.var.name} in {_LOOP_WORD[s.kind]}({expr_text(s.extent)}):")
            self.body(s.body, d + 1)
        elif isinstance(s, S.ForMapping):
            m = mapping_text(s.mapping)
            m = f"({m})" if isinstance(s.mapping, Composed) else m
            names = ", ".join(v.name for v in s.vars)
            self.line(d, f"for {names} in {m}.on({expr_text(s.worker)}):")
            self.body(s.body, d + 1)
        elif isinstance(s, S.If):
            self.line(d, f"if {expr_text(s.cond)}:")
            self.body(s.then_body, d + 1)
            e = s.else_body
            while isinstance(e, S.If):
                self.line(d, f"elif {expr_text(e.cond)}:")
                self.body(e.then_body, d + 1)
                e = e.else_body
            if e is not None:
                self.line(d, "else:")
                self.body(e, d + 1)
        elif isinstance(s, S.Let):
            value = expr_text(s.value)
            if isinstance(s.value, E.Constant) and "(" not in value:
                # `n = 4` would read back as a parse-time Python constant; `i32(4)` stays a Let
                value = f"{type_text(s.value.type)}({value})"
            self.line(d, f"{s.var.name} = {value}")
        elif isinstance(s, S.Declare):
            t = s.var.type
            if isinstance(t, TensorType):
                shape = ", ".join(expr_text(x) for x in t.shape)
                self.line(d, f"{s.var.name} = {_SCOPE_WORD[s.scope]}({type_text(t.dtype)}, [{shape}])")
            else:
                init = "" if s.init is None else f" = {expr_text(s.init)}"
                self.line(d, f"{s.var.name}: {type_text(t)}{init}")
        elif isinstance(s, S.Assign):
            self.line(d, f"{s.var.name} = {expr_text(s.value)}")
        elif isinstance(s, S.BufferStore):
            idx = ", ".join(expr_text(i) for i in s.indices)
            self.line(d, f"{_paren(s.tensor, _ATOM)}[{idx}] = {expr_text(s.value)}")
        elif isinstance(s, S.VectorStore):
            idx = ", ".join(expr_text(i) for i in s.indices)
            count = "" if s.count is None else f", {expr_text(s.count)}"
            self.line(d, f"vstore({_paren(s.tensor, _ATOM)}[{idx}], {expr_text(s.value)}{count})")
        elif isinstance(s, S.Evaluate):
            self.line(d, expr_text(s.expr))
        elif isinstance(s, S.Prefetch):
            self.line(d, f"prefetch({_paren(s.tensor, _ATOM)}[{', '.join(expr_text(i) for i in s.indices)}])")
        elif isinstance(s, S.Barrier):
            self.line(d, "barrier()")
        elif isinstance(s, S.Comment):
            self.line(d, repr(s.text))
        elif isinstance(s, gpu.WarpSpecialized):
            self.line(d, f"for {s.var.name} in warp_specialized({expr_text(s.steps)}, {expr_text(s.producer)}, "
                         f"{expr_text(s.leader)}, {s.producer_registers}, {s.consumer_registers}):")
            for role, wait, step in (("producer", s.producer_wait, s.producer_step),
                                     ("consumer_setup", None, s.consumer_setup),
                                     ("consumer", s.consumer_wait, s.consumer_step),
                                     ("consumer_finish", None, s.consumer_finish)):
                self.line(d + 1, f"with {role}:")
                if wait is not None:
                    self.stmt(wait, d + 2)
                self.body(step, d + 2)
        elif (text := gpu.statement_text(s, expr_text)) is not None:
            self.line(d, text)
        else:
            raise TypeError(f"the printer does not know {type(s).__name__}")


def _launch_text(v: object) -> object:
    """A launch extent as the parser reads it back: an int, or the expression as a string."""
    if isinstance(v, tuple):
        return tuple(_launch_text(x) for x in v)
    if isinstance(v, E.Constant):
        return int(v.value)
    return expr_text(v) if isinstance(v, E.Expr) else v


def _decorator(f: S.Function) -> str:
    kw = [] if f.kind == "cpu_kernel" else [f"kind={f.kind!r}"]
    kw += [f"{k}={_launch_text(v) if k in gpu.LAUNCH_ATTRS else v!r}" for k, v in f.attrs if k != "doc"]
    return "@kernel" + (f"({', '.join(kw)})" if kw else "")


def function_text(f: S.Function) -> str:
    p = _StmtPrinter()
    params = ", ".join(f"{v.name}: {type_text(v.type)}" for v in f.params)
    p.lines += [_decorator(f), f"def {f.name}({params}):"]
    doc = f.attr("doc")
    if doc is not None:  # the parser reads the docstring back into the 'doc' attribute
        p.line(1, repr(doc))
    elif isinstance(f.body, S.Comment) or isinstance(f.body, S.SeqStmt) and f.body.stmts \
            and isinstance(f.body.stmts[0], S.Comment):
        p.line(1, "pass")  # so that a leading comment is not read back as the docstring
    p.body(f.body, 1)
    return "\n".join(p.lines)


def astext(node: Node | TaskMapping) -> str:
    """Readable text of any IR node (an expression, a statement, a function or a module)."""
    if isinstance(node, TaskMapping):
        return mapping_text(node)
    if isinstance(node, E.Expr):
        return expr_text(node)
    if isinstance(node, S.Stmt):
        p = _StmtPrinter()
        p.stmt(node, 0)
        return "\n".join(p.lines)
    if isinstance(node, S.Function):
        return function_text(node)
    if isinstance(node, S.Module):
        return "\n\n\n".join(function_text(f) for f in node.functions)
    return object.__repr__(node)
