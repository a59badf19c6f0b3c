"""Parses a decorated Python function (the kernel script) into an :class:`ir.Function`.

The parser is an evaluator over the function's AST. Each expression evaluates either to an
IR expression (anything that mentions a kernel variable) or to a plain Python value
(ints, types, task mappings, helper results), which is computed at parse time. So a kernel
may use closure constants (``MR``, ``lanes``) and Python helpers freely; the IR keeps only
what must happen at run time.

Scoping follows C: a name first assigned in a block is declared there. A name assigned
once in its block becomes a ``Let``; a name assigned again (or annotated, ``x: f32 = 0.0``)
becomes a mutable ``Declare`` followed by ``Assign``\\ s.
"""
from __future__ import annotations

import ast
import builtins
import functools
import inspect
import re
import sys
import textwrap
from dataclasses import dataclass
from typing import Any, Callable

from taskloom.errors import IRError, MappingError, ScriptError
from taskloom.ir import dtypes as T
from taskloom.ir import gpu
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.mapping import MappingIter, custom, repeat, spatial
from taskloom.ir.primitives import is_primitive, primitive_names

# ----------------------------------------------------------------------------- builtins


@dataclass(frozen=True)
class _Builtin:
    """A name with a meaning in the script (``range``, ``vload``...) handled by the parser."""

    name: str


_LOOPS = {"range": "serial", "unroll": "unroll", "parallel": "parallel", "vectorize": "vectorize"}
_BUFFERS = {"global_tensor": "global", "shared_tensor": "shared", "local_tensor": "local",
            "register_tensor": "register"}
_SPECIAL = ("vload", "vstore", "prefetch", "broadcast", "cast", "select", "min", "max", "barrier", "index_check",
            "warp_specialized")
#: the blocks of a warp_specialized loop, in order
_ROLE_BLOCKS = ("producer", "consumer_setup", "consumer", "consumer_finish")

BUILTINS: dict[str, Any] = {
    **{n: _Builtin(n) for n in (*_LOOPS, *_BUFFERS, *_SPECIAL, *gpu.STATEMENTS)},
    **{n: _Builtin(n) for n in primitive_names()},
    **{t.short: t for t in T.SCALAR_TYPES},
    "spatial": spatial, "repeat": repeat, "custom": custom, "ptr": T.ptr, "vec": T.vec,
    "inf": float("inf"), "nan": float("nan"),
    **gpu.SCRIPT_NAMES,
}
_VECTOR_NAME = re.compile(r"^([a-z]+\d*)x(\d+)$")


def _lookup_builtin(name: str) -> Any:
    if name in BUILTINS:
        return BUILTINS[name]
    if is_primitive(name):
        return _Builtin(name)
    m = _VECTOR_NAME.match(name)
    if m:
        base = {t.short: t for t in T.SCALAR_TYPES}.get(m.group(1))
        if base is not None:
            return T.vec(base, int(m.group(2)))
    raise KeyError(name)


@dataclass
class _BufferDecl:
    scope: str
    type: T.TensorType


@dataclass
class _Binding:
    value: Any            # an ir Var, or a Python value bound at parse time
    mutable: bool = False


class _Fail(Exception):
    """Raised inside the parser with a message; turned into a ScriptError with a location."""


# ----------------------------------------------------------------------------- parser

class _Parser:
    def __init__(self, env: dict[str, Any], filename: str, lines: list[str], line_offset: int):
        self.env = env
        self.filename = filename
        self.lines = lines
        self.line_offset = line_offset
        self.scopes: list[dict[str, _Binding]] = []
        # per enclosing block: the statements after the current one, and whether the block
        # is a parse-time `if` branch (which shares its names with the block around it)
        self.pending_later: list[tuple[list[ast.stmt], bool]] = []

    # ---- errors
    def error(self, node: ast.AST, message: str) -> ScriptError:
        lineno = getattr(node, "lineno", None)
        line = self.lines[lineno - 1] if lineno and lineno <= len(self.lines) else None
        return ScriptError(message, self.filename, None if lineno is None else lineno + self.line_offset, line)

    # ---- names
    def lookup(self, name: str, node: ast.AST) -> Any:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name].value
        try:
            return _lookup_builtin(name)
        except KeyError:
            pass
        if name in self.env:
            return self.env[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise _Fail(f"name '{name}' is not defined")

    def binding(self, name: str) -> _Binding | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    # ---- function
    def function(self, fdef: ast.FunctionDef, kind: str, attrs: dict[str, Any], name: str | None) -> S.Function:
        self.scopes.append({})
        params: list[E.Var] = []
        args = fdef.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs:
            raise self.error(fdef, "kernel parameters must be plain annotated names (no *args, **kwargs or defaults)")
        # scalars first, so tensor shapes may name scalar parameters declared after them
        order = sorted(args.args, key=lambda a: not (isinstance(a.annotation, ast.Name)))
        made: dict[str, E.Var] = {}
        for a in order:
            if a.annotation is None:
                raise self.error(a, f"parameter '{a.arg}' needs a type annotation such as f32[M, N] or i32")
            t = self.guard(a.annotation, lambda: self.eval(a.annotation))
            if not isinstance(t, T.Type):
                raise self.error(a, f"annotation of parameter '{a.arg}' is {t!r}, not a type")
            v = E.Var(a.arg, t)
            made[a.arg] = v
            self.scopes[-1][a.arg] = _Binding(v)
        params = [made[a.arg] for a in args.args]
        body = list(fdef.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            attrs = {**attrs, "doc": inspect.cleandoc(body[0].value.value)}
            body = body[1:]
        stmts = self.block(body)
        launch = {k: attrs.pop(k) for k in gpu.LAUNCH_ATTRS if k in attrs} if kind == "cuda_kernel" else {}
        try:
            fn = S.Function(name or fdef.name, tuple(params), stmts, kind, tuple(attrs.items()))
            if kind == "cuda_kernel":
                fn = self.guard(fdef, lambda: self._launch(fn, launch))
        except IRError as e:
            raise self.error(fdef, str(e)) from None
        finally:
            self.scopes.pop()
        return fn

    def _launch(self, fn: S.Function, launch: dict[str, Any]) -> S.Function:
        """A CUDA kernel's launch configuration: extents given as ints or as kernel-script
        expressions of the parameters (strings: ``grid="cdiv(N, 256)"``)."""
        if "grid" not in launch or "block" not in launch:
            raise _Fail("a cuda_kernel needs its launch configuration: @kernel(kind='cuda_kernel', "
                        "grid=..., block=...)")

        def value(x: Any) -> Any:
            if isinstance(x, (tuple, list)):
                return tuple(value(v) for v in x)
            return self.eval(ast.parse(x, mode="eval").body) if isinstance(x, str) else x
        return gpu.cuda_kernel(fn, value(launch["grid"]), value(launch["block"]),
                               value(launch.get("dynamic_shared", 0)))

    def guard(self, node: ast.AST, fn: Callable[[], Any]) -> Any:
        """Runs ``fn``; IR and mapping errors become ScriptErrors pointing at ``node``."""
        try:
            return fn()
        except ScriptError:
            raise
        except (_Fail, IRError, MappingError) as e:
            raise self.error(node, str(e)) from None
        except Exception as e:  # a Python helper called at parse time failed
            raise self.error(node, f"{type(e).__name__}: {e}") from e

    # ---- statements
    def block(self, stmts: list[ast.stmt], new_scope: bool = True, transparent: bool = False) -> S.Stmt:
        if new_scope:
            self.scopes.append({})
        out: list[S.Stmt] = []
        for i, st in enumerate(stmts):
            self.pending_later.append((stmts[i + 1:], transparent))
            out.extend(self.guard(st, lambda st=st: self.stmt(st)))
            self.pending_later.pop()
        if new_scope:
            self.scopes.pop()
        return S.seq(out) if out else S.SeqStmt(())

    def stmt(self, st: ast.stmt) -> list[S.Stmt]:
        method = getattr(self, "stmt_" + type(st).__name__, None)
        if method is None:
            raise _Fail(f"`{type(st).__name__}` statements are not supported in a kernel")
        return method(st)

    def stmt_Pass(self, st: ast.Pass) -> list[S.Stmt]:
        return []

    def stmt_Expr(self, st: ast.Expr) -> list[S.Stmt]:
        if isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
            return [S.Comment(st.value.value)]
        v = self.eval(st.value)
        if isinstance(v, S.Stmt):
            return [v]
        if isinstance(v, E.Expr):
            return [S.Evaluate(v)]
        return []

    def _assigned_later(self, name: str) -> bool:
        """Whether ``name`` is assigned again after the current statement in the scope the
        name would be declared in (parse-time `if` branches are part of their outer scope)."""
        later: list[ast.stmt] = []
        for stmts, transparent in reversed(self.pending_later):
            later += stmts
            if not transparent:
                break
        for st in later:
            for n in ast.walk(st):
                targets = n.targets if isinstance(n, ast.Assign) else \
                    [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else []
                for t in targets:
                    for leaf in ast.walk(t):
                        if isinstance(leaf, ast.Name) and leaf.id == name and isinstance(leaf.ctx, ast.Store):
                            return True
        return False

    def assign_name(self, name: str, value: Any, node: ast.AST) -> list[S.Stmt]:
        b = self.binding(name)
        if isinstance(value, _BufferDecl):
            v = E.Var(name, value.type)
            self.scopes[-1][name] = _Binding(v)
            return [S.Declare(v, None, value.scope)]
        if b is not None and (isinstance(b.value, E.Var) or b.mutable):
            var_ = b.value
            if isinstance(var_.type, T.TensorType):
                raise _Fail(f"cannot assign to buffer '{name}'; store to its elements instead")
            if not b.mutable:
                raise _Fail(f"'{name}' is a parameter, a loop variable or was bound once with `{name} = ...`, "
                            f"so it cannot be assigned; copy it into a mutable variable instead, e.g. "
                            f"`{name}_: {var_.type!r} = {name}`")
            return [S.Assign(var_, self.convert(value, var_.type, name))]
        if not isinstance(value, E.Expr) and (not isinstance(value, (bool, int, float))
                                              or b is None and not self._assigned_later(name)):
            # a parse-time Python value (a number, a mapping, a tuple, a helper result):
            # `n = 4` stays the Python int 4, so register_tensor(f32, [n]) has a static shape
            self.scopes[-1][name] = _Binding(value)
            return []
        e = E.as_expr(value)
        v = E.Var(name, e.type)
        if self._assigned_later(name):
            self.scopes[-1][name] = _Binding(v, mutable=True)
            return [S.Declare(v, e)]
        self.scopes[-1][name] = _Binding(v)
        return [S.Let(v, e)]

    def convert(self, value: Any, t: T.Type, what: str) -> E.Expr:
        e = E.as_expr(value, t)
        if e.type != t:
            raise _Fail(f"'{what}' has type {t!r} but is given a value of type {e.type!r}; use cast()")
        return e

    def store(self, target: ast.Subscript, value: Any) -> S.Stmt:
        el = self.eval(target)
        if not isinstance(el, E.TensorElement):
            raise _Fail("only elements of tensors (A[i, j] = ...) can be stored to")
        return S.BufferStore(el.tensor, el.indices, self.convert(value, el.type, ast.unparse(target)))

    def stmt_Assign(self, st: ast.Assign) -> list[S.Stmt]:
        if len(st.targets) != 1:
            raise _Fail("chained assignment (a = b = ...) is not supported")
        target = st.targets[0]
        if isinstance(target, ast.Tuple):
            if not isinstance(st.value, ast.Tuple) or len(st.value.elts) != len(target.elts):
                values = self.eval(st.value)
                if not isinstance(values, (tuple, list)) or len(values) != len(target.elts):
                    raise _Fail("tuple assignment needs as many values as names")
            else:
                values = [self.eval(v) for v in st.value.elts]
            out: list[S.Stmt] = []
            for t, v in zip(target.elts, values):
                out += self.assign_one(t, v, st)
            return out
        return self.assign_one(target, self.eval(st.value), st)

    def assign_one(self, target: ast.expr, value: Any, node: ast.AST) -> list[S.Stmt]:
        if isinstance(target, ast.Name):
            return self.assign_name(target.id, value, node)
        if isinstance(target, ast.Subscript):
            return [self.store(target, value)]
        raise _Fail(f"cannot assign to `{ast.unparse(target)}`")

    def stmt_AnnAssign(self, st: ast.AnnAssign) -> list[S.Stmt]:
        if not isinstance(st.target, ast.Name):
            raise _Fail("an annotated assignment declares a variable: `x: f32 = 0.0`")
        t = self.eval(st.annotation)
        if not isinstance(t, (T.DataType, T.VectorType)):
            raise _Fail(f"`{st.target.id}: ...` needs a scalar or vector type, got {t!r}; "
                        "declare buffers with register_tensor(...) and friends")
        v = E.Var(st.target.id, t)
        init = None if st.value is None else self.convert(self.eval(st.value), t, st.target.id)
        self.scopes[-1][st.target.id] = _Binding(v, mutable=True)
        return [S.Declare(v, init)]

    def stmt_AugAssign(self, st: ast.AugAssign) -> list[S.Stmt]:
        op = _BINOPS.get(type(st.op))
        if op is None:
            raise _Fail(f"augmented assignment with {type(st.op).__name__} is not supported")
        rhs = self.eval(st.value)
        if isinstance(st.target, ast.Name):
            cur = self.lookup(st.target.id, st)
            return self.assign_name(st.target.id, op(cur, rhs), st)
        if isinstance(st.target, ast.Subscript):
            return [self.store(st.target, op(self.eval(st.target), rhs))]
        raise _Fail(f"cannot assign to `{ast.unparse(st.target)}`")

    def stmt_If(self, st: ast.If) -> list[S.Stmt]:
        cond = self.eval(st.test)
        if not isinstance(cond, E.Expr):  # decided at parse time
            chosen = st.body if cond else st.orelse
            # no new scope: names bound in the chosen branch stay visible after the `if`
            return [self.block(chosen, new_scope=False, transparent=True)] if chosen else []
        then = self.block(st.body)
        orelse = self.block(st.orelse) if st.orelse else None
        return [S.If(self.convert(cond, T.boolean, "if condition"), then, orelse)]

    def stmt_For(self, st: ast.For) -> list[S.Stmt]:
        if st.orelse:
            raise _Fail("for ... else is not supported")
        it = self.eval(st.iter)
        names = [st.target] if isinstance(st.target, ast.Name) else \
            list(st.target.elts) if isinstance(st.target, ast.Tuple) else None
        if names is None or not all(isinstance(n, ast.Name) for n in names):
            raise _Fail("a loop binds a name or a tuple of names")
        ids = [n.id for n in names]  # type: ignore[union-attr]
        if isinstance(it, MappingIter):
            vs = tuple(E.Var(n, T.index_type) for n in ids)
            body = self.loop_body(st.body, dict(zip(ids, vs)))
            return [S.ForMapping(vs, it.mapping, it.worker, body)]
        if isinstance(it, _Roles):
            return [self.roles(st, it, ids)]
        if isinstance(it, _Loop):
            if len(ids) != 1:
                raise _Fail(f"{it.word}() binds one loop variable")
            if it.start is None:
                v = E.Var(ids[0], T.index_type)
                return [S.For(v, it.extent, self.loop_body(st.body, {ids[0]: v}), it.kind)]
            # range(start, stop, step): iterate a counter, bind the user's name to start + k*step
            k = E.Var(f"{ids[0]}_k", T.index_type)
            v = E.Var(ids[0], T.index_type)
            body = self.loop_body(st.body, {ids[0]: v}, prelude=[S.Let(v, it.start + k * it.step)])
            return [S.For(k, it.extent, body, it.kind)]
        if isinstance(it, (tuple, list)):  # unrolled at parse time
            out = []
            for item in it:
                self.scopes.append({})
                vals = [item] if len(ids) == 1 else list(item)
                for n, val in zip(ids, vals):
                    self.scopes[-1][n] = _Binding(val)
                out.append(self.block(st.body))
                self.scopes.pop()
            return out
        raise _Fail(f"cannot loop over {it!r}; use range(), unroll(), parallel(), vectorize() "
                    "or mapping.on(worker)")

    def roles(self, st: ast.For, it: "_Roles", ids: list[str]) -> S.Stmt:
        """``for k in warp_specialized(steps, producer, leader[, registers...]):`` whose body
        is ``with producer:``, ``with consumer_setup:``, ``with consumer:`` and ``with
        consumer_finish:``; each role's step starts with its mbarrier_wait."""
        words = [w.items[0].context_expr.id if isinstance(w, ast.With) and len(w.items) == 1
                 and isinstance(w.items[0].context_expr, ast.Name) else None for w in st.body]
        if len(ids) != 1 or words != list(_ROLE_BLOCKS):
            raise _Fail("a warp_specialized loop binds one name; its body is " +
                        ", ".join(f"`with {w}:`" for w in _ROLE_BLOCKS))
        k = E.Var(ids[0], T.index_type)
        parts: dict[str, Any] = {}
        for word, role in zip(words, st.body):
            if word in ("consumer_setup", "consumer_finish"):  # outside the steps: k is not bound
                parts[word] = self.block(role.body)  # type: ignore[attr-defined]
                continue
            body = self.loop_body(role.body, {ids[0]: k})  # type: ignore[attr-defined]
            stmts = list(body.stmts) if isinstance(body, S.SeqStmt) else [body]
            if not stmts or not isinstance(stmts[0], gpu.MbarrierWait):
                raise _Fail("each role of a warp_specialized loop starts with its mbarrier_wait")
            parts[word] = (stmts[0], S.seq(stmts[1:]))
        return gpu.WarpSpecialized(k, it.steps, it.producer, it.leader, *parts["producer"], *parts["consumer"],
                                   parts["consumer_setup"], parts["consumer_finish"], *it.registers)

    def loop_body(self, body: list[ast.stmt], binds: dict[str, E.Var], prelude: list[S.Stmt] = ()) -> S.Stmt:
        self.scopes.append({n: _Binding(v) for n, v in binds.items()})
        inner = self.block(body, new_scope=False)
        self.scopes.pop()
        return S.seq([*prelude, inner])

    # ---- expressions
    def eval(self, node: ast.expr) -> Any:
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.error(node, f"`{ast.unparse(node)}`: {type(node).__name__} expressions are not "
                                   "supported in a kernel")
        return self.guard(node, lambda: method(node))  # errors point at the expression's own line

    def expr_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def expr_Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node)

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        base = self.eval(node.value)
        if isinstance(base, E.Var) and node.attr == "shape" and isinstance(base.type, T.TensorType):
            return base.type.shape
        if isinstance(base, E.Expr):
            raise _Fail(f"IR value `{ast.unparse(node.value)}` has no attribute '{node.attr}'")
        try:
            return getattr(base, node.attr)
        except AttributeError:
            raise _Fail(f"`{ast.unparse(node.value)}` has no attribute '{node.attr}'") from None

    def expr_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.eval(e) for e in node.elts)

    def expr_List(self, node: ast.List) -> list:
        return [self.eval(e) for e in node.elts]

    def expr_BinOp(self, node: ast.BinOp) -> Any:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise _Fail(f"operator {type(node.op).__name__} is not supported")
        return op(self.eval(node.left), self.eval(node.right))

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        v = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            return E.logical_not(v) if isinstance(v, E.Expr) else not v
        if isinstance(node.op, ast.USub):
            return E.unary("neg", v) if isinstance(v, E.Expr) else -v
        if isinstance(node.op, ast.UAdd):
            return v
        return E.unary("bitnot", v) if isinstance(v, E.Expr) else ~v

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        vals = [self.eval(v) for v in node.values]
        if not any(isinstance(v, E.Expr) for v in vals):
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        return (E.logical_and if isinstance(node.op, ast.And) else E.logical_or)(*vals)

    def expr_Compare(self, node: ast.Compare) -> Any:
        left = self.eval(node.left)
        parts = []
        for op, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node)
            fn = _CMPOPS.get(type(op))
            if fn is None:
                raise _Fail(f"comparison {type(op).__name__} is not supported")
            parts.append(fn(left, right))
            left = right
        if not any(isinstance(p, E.Expr) for p in parts):
            return all(parts)
        return E.logical_and(*parts)

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.eval(node.test)
        if not isinstance(cond, E.Expr):
            return self.eval(node.body if cond else node.orelse)
        return E.select(cond, self.eval(node.body), self.eval(node.orelse))

    def expr_Subscript(self, node: ast.Subscript) -> Any:
        base = self.eval(node.value)
        idx_nodes = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if any(isinstance(i, ast.Slice) for i in idx_nodes):
            raise _Fail(f"`{ast.unparse(node)}`: slices are not supported; index single elements")
        idx = [self.eval(i) for i in idx_nodes]
        if isinstance(base, E.Expr):
            return base[tuple(idx)]
        return base[tuple(idx) if len(idx) > 1 else idx[0]]

    def expr_Call(self, node: ast.Call) -> Any:
        fn = self.eval(node.func)
        args = [self.eval(a) for a in node.args]
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords if k.arg is not None}
        if isinstance(fn, _Builtin):
            return self.call_builtin(fn.name, args, kwargs)
        if isinstance(fn, T.DataType):  # f16(1.0) is a constant, f16(x) a cast
            if len(args) != 1 or kwargs:
                raise _Fail(f"{fn.short}(x) takes one argument")
            return E.cast(args[0], fn)
        if not callable(fn):
            raise _Fail(f"`{ast.unparse(node.func)}` is not callable")
        return fn(*args, **kwargs)

    def call_builtin(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name in _LOOPS:
            return _Loop.make(name, args)
        if name in _BUFFERS:
            if len(args) != 2 or not isinstance(args[0], (T.DataType, T.VectorType)):
                raise _Fail(f"{name}(dtype, [d0, d1, ...]) declares a buffer")
            shape = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
            return _BufferDecl(_BUFFERS[name], args[0][tuple(shape)])
        if name == "vload":
            return E.vload(*args, **kwargs)
        if name == "vstore":
            return S.vstore(*args, **kwargs)
        if name == "prefetch":
            return S.prefetch(*args, **kwargs)
        if name == "broadcast":
            return E.broadcast(*args)
        if name == "cast":
            return E.cast(*args)
        if name == "select":
            return E.select(*args)
        if name == "index_check":
            return E.index_check(*args, **kwargs)
        if name in ("min", "max"):
            if not any(isinstance(a, E.Expr) for a in args):
                return getattr(builtins, name)(*args)
            if len(args) != 2:
                raise _Fail(f"{name}() of IR values takes two arguments")
            return (E.minimum if name == "min" else E.maximum)(*args)
        if name == "barrier":
            return S.Barrier()
        if name == "warp_specialized":
            return _Roles(*args, **kwargs)
        if name in gpu.SCRIPT_CALLS:
            return gpu.SCRIPT_CALLS[name](*args, **kwargs)
        if is_primitive(name):
            return E.call(name, *args)
        raise _Fail(f"unknown builtin {name}")


@dataclass
class _Loop:
    word: str
    kind: str
    extent: Any
    start: Any = None
    step: Any = None

    @staticmethod
    def make(word: str, args: list[Any]) -> "_Loop":
        kind = _LOOPS[word]
        if len(args) == 1:
            return _Loop(word, kind, E.as_expr(args[0]))
        if word != "range" or not 2 <= len(args) <= 3:
            raise _Fail(f"{word}() takes one extent" + (" or (start, stop[, step])" if word == "range" else ""))
        start, stop = args[0], args[1]
        step = args[2] if len(args) == 3 else 1
        if not isinstance(step, int) or step <= 0:
            raise _Fail(f"range() step must be a positive int, got {step!r}")
        extent = E.cdiv(stop - start, step) if step != 1 else stop - start
        return _Loop(word, kind, E.as_expr(extent), E.as_expr(start), step)


class _Roles:
    """``warp_specialized(steps, producer, leader, producer_registers, consumer_registers)``."""

    def __init__(self, steps: Any, producer: Any, leader: Any, *registers: int):
        self.steps, self.producer, self.leader, self.registers = E.as_expr(steps), producer, leader, registers


def _py_or_ir(py: Callable, ir: Callable) -> Callable:
    def op(a: Any, b: Any) -> Any:
        return ir(a, b) if isinstance(a, E.Expr) or isinstance(b, E.Expr) else py(a, b)
    return op


import operator as _op  # noqa: E402

_BINOPS = {
    ast.Add: _py_or_ir(_op.add, lambda a, b: E.binary("add", a, b)),
    ast.Sub: _py_or_ir(_op.sub, lambda a, b: E.binary("sub", a, b)),
    ast.Mult: _py_or_ir(_op.mul, lambda a, b: E.binary("mul", a, b)),
    ast.Div: _py_or_ir(_op.truediv, E.true_div),
    ast.FloorDiv: _py_or_ir(_op.floordiv, E.int_div),
    ast.Mod: _py_or_ir(_op.mod, lambda a, b: E.binary("mod", a, b)),
    ast.BitAnd: _py_or_ir(_op.and_, lambda a, b: E.binary("bitand", a, b)),
    ast.BitOr: _py_or_ir(_op.or_, lambda a, b: E.binary("bitor", a, b)),
    ast.BitXor: _py_or_ir(_op.xor, lambda a, b: E.binary("bitxor", a, b)),
    ast.LShift: _py_or_ir(_op.lshift, lambda a, b: E.binary("shl", a, b)),
    ast.RShift: _py_or_ir(_op.rshift, lambda a, b: E.binary("shr", a, b)),
    ast.Pow: _py_or_ir(_op.pow, lambda a, b: E.call("pow", a, b)),
}
_CMPOPS = {
    ast.Lt: _py_or_ir(_op.lt, lambda a, b: E.binary("lt", a, b)),
    ast.LtE: _py_or_ir(_op.le, lambda a, b: E.binary("le", a, b)),
    ast.Gt: _py_or_ir(_op.gt, lambda a, b: E.binary("lt", b, a)),
    ast.GtE: _py_or_ir(_op.ge, lambda a, b: E.binary("le", b, a)),
    ast.Eq: _py_or_ir(_op.eq, E.eq),
    ast.NotEq: _py_or_ir(_op.ne, E.ne),
}


# ----------------------------------------------------------------------------- entry points

def _decorator_kwargs(fdef: ast.FunctionDef, given: dict[str, Any], filename: str,
                      line_offset: int) -> dict[str, Any]:
    """The decorator's keywords that ``given`` lacks; those must be literals."""
    for d in fdef.decorator_list:
        if isinstance(d, ast.Call):
            out = {}
            for k in d.keywords:
                if k.arg is None or k.arg in given:
                    continue
                try:
                    out[k.arg] = ast.literal_eval(k.value)
                except ValueError:
                    raise ScriptError(f"decorator argument {k.arg}={ast.unparse(k.value)} must be a literal",
                                      filename, k.value.lineno + line_offset) from None
            return out
    return {}


def parse_source(source: str, env: dict[str, Any] | None = None, filename: str = "<kernel>",
                 line_offset: int = 0, **options: Any) -> S.Function:
    """Parses the first function in ``source`` (as printed by :func:`taskloom.ir.astext`).

    Decorator keywords (``@kernel(kind='host', ...)``) are read when ``options`` does not
    give them.
    """
    source = textwrap.dedent(source)
    try:
        tree = _syntax_tree(source)
    except SyntaxError as e:
        raise ScriptError(f"invalid Python syntax: {e.msg}", filename,
                          (e.lineno or 0) + line_offset, e.text) from None
    fdef = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fdef is None:
        raise ScriptError("no function definition found", filename)
    opts = {**_decorator_kwargs(fdef, options, filename, line_offset), **options}
    kind = opts.pop("kind", "cpu_kernel")
    name = opts.pop("name", None)
    parser = _Parser(env or {}, filename, source.splitlines(), line_offset)
    return parser.function(fdef, kind, opts, name)


@functools.lru_cache(maxsize=1024)
def _syntax_tree(source: str) -> ast.Module:
    """``source`` parsed (kept: a template's phases are parsed again for every kernel built
    from them, with new values for their names; the parser never changes a tree)."""
    return ast.parse(source)


@functools.lru_cache(maxsize=1024)
def _source_lines(code: Any) -> tuple[str, int, str]:
    """The source text of a function's code, its first line and its file (kept, as above)."""
    lines, start = inspect.getsourcelines(code)
    return "".join(lines), start, inspect.getsourcefile(code) or "<kernel>"


def parse_function(fn: Callable, defining_locals: dict[str, Any] | None = None, **options: Any) -> S.Function:
    """Parses a Python function object; its globals and closure are the parse-time environment,
    with ``defining_locals`` (the locals where it was defined) between them: a name used only
    in an annotation is no closure variable (annotations are not evaluated under
    ``from __future__ import annotations``), yet ``x: f32[SHAPE]`` must find ``SHAPE``."""
    try:
        source, start, filename = _source_lines(fn.__code__)
    except (OSError, TypeError, AttributeError) as e:
        raise ScriptError(f"cannot read the source of {getattr(fn, '__name__', fn)!r}: {e}") from None
    env = dict(fn.__globals__)
    env.update(defining_locals or {})
    if fn.__closure__:
        env.update({n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__)
                    if _cell_filled(c)})
    return parse_source(source, env, filename, start - 1, **options)


def _cell_filled(cell: Any) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def kernel(fn: Callable | None = None, *, kind: str = "cpu_kernel", name: str | None = None,
           **attrs: Any) -> Any:
    """Decorator: the Python function becomes an :class:`ir.Function`.

        @kernel
        def scale(N: i32, x: f32[N], y: f32[N]):
            for w in parallel(2):
                for i in spatial(2).on(w):   # ...
                    y[i] = x[i] * 2.0

    ``kind`` is 'cpu_kernel' (default), 'cuda_kernel' or 'host'; other keywords become
    function attributes. Names are looked up in the closure, then the locals of the scope
    that applies the decorator (for names only annotations use), then the globals.
    """
    def wrap(f: Callable, depth: int) -> S.Function:
        frame = sys._getframe(depth)  # the scope that defines the kernel
        scope = dict(frame.f_locals) if frame.f_code.co_name != "<module>" else None
        return parse_function(f, defining_locals=scope, kind=kind, name=name, **attrs)
    return wrap(fn, 2) if fn is not None else (lambda f: wrap(f, 2))
