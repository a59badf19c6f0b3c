"""Index simplification: constant folding, algebraic identities, sums in normal form, and
division and remainder decided by the ranges of loop variables.

Lowered task mappings are full of ``(w // 32) % 8 * 16 + w % 32``-style index arithmetic;
knowing that ``w`` lies in ``[0, 256)`` lets most of it disappear. The expression rules
(:mod:`taskloom.ir.arith`) are a table of small ``pattern -> replacement`` rewrites, applied
bottom-up until none fires; this pass, over statements, drops dead branches and loops,
inlines trivial ``let``s, and tells the expression rules the range of every loop variable
in scope.

Every rewrite is exact under C semantics (``//`` and ``%`` truncate toward zero). A rule
that needs an operand to be non-negative asks the bounds analysis, and does nothing when
the bounds are unknown.
"""
from __future__ import annotations

from typing import Any, Mapping

from taskloom.errors import TransformError
from taskloom.ir.expr import Constant, Expr, Var, free_vars, logical_not
from taskloom.ir.functor import Rewriter, collect, substitute
from taskloom.ir.stmt import (Assign, Evaluate, For, ForMapping, Function, If, Let, SeqStmt, Stmt,
                              seq)
from taskloom.ir.arith import BoundAnalyzer, ExprSimplifier, analyzer, simplify_expr

__all__ = ["simplify", "simplify_expr", "simplify_stmt"]


# ----------------------------------------------------------------------------- statements

class _StmtSimplifier(Rewriter):
    """Simplifies statements; a ``visit_*`` returns None for a statement that does nothing."""

    def __init__(self, bounds: BoundAnalyzer, assigned: set[Var]):
        self.bounds = bounds
        self.exprs = ExprSimplifier(bounds)
        self.assigned = assigned  # mutable variables: their value may change after a let reads them

    def visit(self, node: Any) -> Any:
        if isinstance(node, Expr):
            return self.exprs.simplify(node)
        return super().visit(node)

    def visit_type(self, t: Any) -> Any:
        return t  # a variable's type must stay what every other use of it says

    def _field(self, value: Any) -> Any:
        out = super()._field(value)
        return SeqStmt(()) if out is None and isinstance(value, Stmt) else out

    def body(self, s: Stmt | None) -> Stmt | None:
        return None if s is None else self.visit(s)

    def visit_Function(self, f: Function) -> Function:
        body = self.visit(f.body)
        return f.with_body(SeqStmt(()) if body is None else body) if body is not f.body else f

    def visit_SeqStmt(self, s: SeqStmt) -> Stmt | None:
        out: list[Stmt] = []
        subst: dict[Var, Expr] = {}
        pushed: list[Var] = []
        try:
            for st in s.stmts:
                st = substitute(st, subst)
                if isinstance(st, Let):
                    value = self.visit(st.value)
                    if self._inlinable(st.var, value):
                        subst[st.var] = value
                        continue
                    lo, hi = self.bounds.bound(value)
                    if lo is not None or hi is not None:
                        self.bounds.push(st.var, lo, hi)
                        pushed.append(st.var)
                    out.append(st if value is st.value else Let(st.var, value))
                    continue
                new = self.visit(st)
                if new is not None:
                    out.append(new)
        finally:
            for v in reversed(pushed):
                self.bounds.pop(v)
        return None if not out else out[0] if len(out) == 1 else seq(out)

    def _inlinable(self, v: Var, value: Expr) -> bool:
        if v in self.assigned:
            return False
        return isinstance(value, Constant) or isinstance(value, Var) and value not in self.assigned

    def visit_Let(self, s: Let) -> Stmt | None:
        value = self.visit(s.value)
        if self._inlinable(s.var, value):
            return None  # nothing follows it here, so nothing reads it
        return s if value is s.value else Let(s.var, value)

    def visit_For(self, s: For) -> Stmt | None:
        extent = self.visit(s.extent)
        hi = self.bounds.upper(extent)
        if hi is not None and hi <= 0:
            return None
        if s.var in self.assigned:  # a loop that moves its own variable: nothing is known
            self.bounds.push(s.var, None, None)
        elif isinstance(extent, Constant) and extent.value == 1:
            return self.visit(substitute(s.body, {s.var: Constant(0, s.var.type)}))
        else:
            # `var < extent` holds in the body unless the body can change the extent's value
            fixed = not (free_vars(extent) & self.assigned)
            self.bounds.push(s.var, 0, None if hi is None else hi - 1, extent if fixed else None)
        try:
            body = self.visit(s.body)
        finally:
            self.bounds.pop(s.var)
        if body is None:
            return None
        if body is s.body and extent is s.extent:
            return s
        return For(s.var, extent, body, s.kind)

    def visit_ForMapping(self, s: ForMapping) -> Stmt:
        worker = self.visit(s.worker)
        for v, d in zip(s.vars, s.mapping.task_shape):
            hi = d if isinstance(d, int) else self.bounds.upper(self.visit(d))
            self.bounds.push(v, 0, None if hi is None else hi - 1)
        try:
            body = self.visit(s.body)
        finally:
            for v in reversed(s.vars):
                self.bounds.pop(v)
        body = SeqStmt(()) if body is None else body
        if body is s.body and worker is s.worker:
            return s
        return ForMapping(s.vars, s.mapping, worker, body)

    def visit_If(self, s: If) -> Stmt | None:
        cond = self.visit(s.cond)
        if isinstance(cond, Constant):
            return self.body(s.then_body if cond.value else s.else_body)
        then, other = self.body(s.then_body), self.body(s.else_body)
        if then is None and other is None:
            return None
        if then is None:
            return If(self.visit(logical_not(cond)), other)  # type: ignore[arg-type]
        if cond is s.cond and then is s.then_body and other is s.else_body:
            return s
        return If(cond, then, other)

    def visit_Evaluate(self, s: Evaluate) -> Stmt | None:
        e = self.visit(s.expr)
        if isinstance(e, (Constant, Var)):
            return None  # evaluating a value has no effect
        return s if e is s.expr else Evaluate(e)


def simplify_stmt(s: Stmt, bounds: Mapping[Var, tuple[int, int]] | None = None) -> Stmt:
    """Simplifies a statement: its expressions (see :func:`simplify_expr`), under the range
    of every enclosing loop variable, and the statement structure itself: an ``if`` with a
    known condition becomes its branch, a loop of 0 iterations disappears and one of 1
    iteration becomes its body, and a ``let`` of a constant or a variable is inlined into
    the statements after it. A statement that does nothing becomes an empty sequence."""
    out = _StmtSimplifier(analyzer(bounds), _assigned(s)).visit(s)
    return SeqStmt(()) if out is None else out


def simplify(fn: Function, bounds: Mapping[Var, tuple[int, int]] | None = None) -> Function:
    """The index-simplification pass (``Function -> Function``): :func:`simplify_stmt` on
    the body. ``bounds`` gives ranges of the parameters (say, a symbolic size known to be
    at least 1) when they are known."""
    if not isinstance(fn, Function):
        raise TransformError(f"simplify() takes a Function, got a {type(fn).__name__}; use "
                             "simplify_stmt() for a statement and simplify_expr() for an expression")
    return _StmtSimplifier(analyzer(bounds), _assigned(fn)).visit(fn)


def _assigned(node: Any) -> set[Var]:
    return {a.var for a in collect(node, Assign)}  # type: ignore[attr-defined]
