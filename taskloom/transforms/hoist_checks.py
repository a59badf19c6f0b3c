"""Run-time index checks moved out of the loops that do not change them.

An embedding copies a row of the table per index: its inner loop reads
``W[index_check(ids[i], n) * D + j]`` for every ``j``, so the check (and the load of the
index) would run once per element of the row. This pass gives each check that a loop
evaluates on every iteration, and that depends on nothing the loop changes, a ``let``
before the loop; the statements after that ``let`` read it too, so each index is checked
once where it is used:

    embedding_pos = index_check(ids[i], n, "embedding(): 'indices'")
    for j in range(D): out[i * D + j] = W[embedding_pos * D + j]

Only checks on the path every iteration takes move: not those under an ``if`` or in one
branch of a ``select`` (C evaluates only the branch taken), where the index read may be
guarded. A loop of no iterations then checks an index it would not have read, which the
operators' definitions allow (every index of the index tensor is checked).
"""
from __future__ import annotations

from typing import Iterator

from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.functor import Rewriter, collect
from taskloom.transforms.names import NameGen


def _evaluated(e: E.Expr) -> Iterator[E.IndexCheck]:
    """The checks that evaluating ``e`` always runs (not inside a branch of a select, nor
    on the right of a short-circuit ``and``/``or``), outermost first."""
    if isinstance(e, E.IndexCheck):
        yield e
    elif isinstance(e, E.Select):
        yield from _evaluated(e.cond)
    elif isinstance(e, E.Binary) and e.op in ("and", "or"):
        yield from _evaluated(e.a)
    else:
        for c in e.children():
            if isinstance(c, E.Expr):
                yield from _evaluated(c)


def _always(s: S.Stmt) -> Iterator[E.IndexCheck]:
    """The checks every execution of ``s`` runs: not those under an ``if`` or in a loop's body
    (a loop may run no iterations; checks moved out of it already sit before it)."""
    if isinstance(s, S.SeqStmt):
        for x in s.stmts:
            yield from _always(x)
    elif isinstance(s, S.If):
        yield from _evaluated(s.cond)
    elif isinstance(s, S.For):
        yield from _evaluated(s.extent)
    elif not isinstance(s, (S.ForMapping, S.Comment)):
        for c in s.children():
            if isinstance(c, E.Expr):
                yield from _evaluated(c)


def _changed(s: S.Stmt) -> tuple[set[E.Var], set[E.Expr]]:
    """The variables ``s`` binds or assigns and the tensors it writes."""
    bound: set[E.Var] = set()
    for n in collect(s, (S.Let, S.Declare, S.Assign, S.For)):
        bound.add(n.var)  # type: ignore[attr-defined]
    written = {n.tensor for n in collect(s, (S.BufferStore, S.VectorStore))}  # type: ignore[attr-defined]
    return bound, written


def _invariant(check: E.IndexCheck, bound: set[E.Var], written: set[E.Expr]) -> bool:
    if E.free_vars(check) & bound:
        return False
    return not any(el.tensor in written for el in collect(check, E.TensorElement))  # type: ignore[attr-defined]


class _Replace(Rewriter):
    def __init__(self, table: dict[E.Expr, E.Var]):
        self.table = table

    def visit(self, node):  # type: ignore[override]
        hit = self.table.get(node) if isinstance(node, E.IndexCheck) else None
        return hit if hit is not None else super().visit(node)


class _Hoister(Rewriter):
    def __init__(self, names: NameGen):
        self.names = names

    def visit_For(self, s: S.For) -> S.Stmt:
        body = self.visit(s.body)
        bound, written = _changed(body)
        bound.add(s.var)
        moved: dict[E.Expr, E.Var] = {}
        for check in _always(body):
            if check not in moved and _invariant(check, bound, written):
                moved[check] = E.Var(self.names.fresh(check.what.split("(")[0] + "_pos"), check.type)
        if not moved:
            return s if body is s.body else S.For(s.var, s.extent, body, s.kind)
        lets = [S.Let(v, c) for c, v in moved.items()]
        return S.SeqStmt((*lets, S.For(s.var, s.extent, _Replace(moved).visit(body), s.kind)))

    def visit_SeqStmt(self, s: S.SeqStmt) -> S.Stmt:
        """A check a ``let`` holds is read from it by the statements after the ``let``, up to
        one that writes a tensor the check reads."""
        out: list[S.Stmt] = []
        held: dict[E.Expr, E.Var] = {}
        for st in s.stmts:
            st = self.visit(st)
            parts = st.stmts if isinstance(st, S.SeqStmt) else (st,)
            for part in parts:
                if held:
                    held = {c: v for c, v in held.items() if _invariant(c, *_changed(part))}
                    part = _Replace(held).visit(part)
                if isinstance(part, S.Let) and isinstance(part.value, E.IndexCheck):
                    held[part.value] = part.var
                out.append(part)
        return S.SeqStmt(tuple(out))


def hoist_checks(fn: S.Function) -> S.Function:
    """``fn`` with each index check out of the loops that do not change it (see above)."""
    if not collect(fn.body, E.IndexCheck):
        return fn
    body = _Hoister(NameGen(fn)).visit(fn.body)
    return fn if body is fn.body else fn.with_body(body)
