"""Lowers ``for i, j in mapping.on(worker)`` into plain loops and index arithmetic.

For ``f = a0 * a1 * ... * ak`` the worker is split into one index per atom,
``w_k = (worker // (n_{k+1} * ... * n_k)) % n_k``; a ``spatial`` atom turns ``w_k`` into a
task by unravelling it, a ``repeat`` atom contributes loops, and the task of the whole
composition is ``t = (...(t_0 * d_1 + t_1) * d_2 + ...) + t_k`` on each axis, exactly the
definition ``f3(w) = [t1 ⊙ d2 + t2 | t1 ∈ f1(w // n2), t2 ∈ f2(w % n2)]`` unfolded. Loops
nest in atom order, so the task order is the mapping's order. No mapping object is left
at run time.
"""
from __future__ import annotations

from typing import Any

from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import index_type
from taskloom.ir.functor import Rewriter, substitute
from taskloom.ir.mapping import Custom, Repeat, Spatial, TaskMapping, _axis_order, _unravel
from taskloom.errors import TransformError
from taskloom.transforms.names import NameGen

#: Repeat loops with a constant extent up to this are marked for unrolling (register tiles).
UNROLL_LIMIT = 16


def _is_one(x: Any) -> bool:
    return isinstance(x, int) and x == 1 or E.is_const(x, 1)


def _mul(a: Any, b: Any) -> Any:
    if _is_one(a):
        return b
    if _is_one(b):
        return a
    return a * b


def _as_index(x: Any) -> E.Expr:
    return E.as_expr(x) if not isinstance(x, E.Expr) else x


class _Lowerer(Rewriter):
    def __init__(self, names: NameGen):
        self.names = names

    def visit_ForMapping(self, s: S.ForMapping) -> S.Stmt:
        body = self.visit(s.body)
        worker = self.visit(s.worker)
        return lower_mapping_loop(s.mapping, worker, s.vars, body, self.names)


def lower_mapping_loop(mapping: TaskMapping, worker: E.Expr, task_vars: tuple[E.Var, ...], body: S.Stmt,
                       names: NameGen) -> S.Stmt:
    """The loop nest that runs ``body`` once per task of ``worker``, with ``task_vars`` bound."""
    atoms = mapping.atoms()
    ndim = len(task_vars)
    loops: list[tuple[E.Var, Any, str]] = []
    coords: list[Any] = [0] * ndim
    inner = 1
    inners: list[Any] = []
    for atom in reversed(atoms):
        inners.append(inner)
        inner = _mul(inner, atom.num_workers)
    inners.reverse()
    for k, atom in enumerate(atoms):
        n = atom.num_workers
        wk: Any = 0
        if not _is_one(n):
            wk = worker if _is_one(inners[k]) else worker // inners[k]
            if k > 0:  # the outermost atom's index needs no modulo when the worker is in range
                wk = wk % n
        if isinstance(atom, Spatial):
            task = list(_unravel(wk, atom.shape, atom.ranks))
        elif isinstance(atom, Repeat):
            task = [0] * ndim
            for axis in _axis_order(atom.ranks):
                extent = atom.shape[axis]
                v = E.Var(names.fresh(f"{task_vars[axis].name}_{k}"), index_type)
                kind = "unroll" if isinstance(extent, int) and extent <= UNROLL_LIMIT else "serial"
                loops.append((v, extent, kind))
                task[axis] = v
        elif isinstance(atom, Custom):
            task = _custom_task(atom, wk, task_vars, loops, names, k)
        else:
            raise TransformError(f"cannot lower task mapping {atom!r}")
        coords = [t if (isinstance(c, int) and c == 0) else _mul(c, d) + t
                  for c, d, t in zip(coords, atom.task_shape, task)]
    # An axis whose coordinate is exactly one loop variable gets the user's name for that loop.
    rename: dict[E.Var, E.Expr] = {}
    for axis, c in enumerate(coords):
        if isinstance(c, E.Var) and any(c is v for v, _, _ in loops) and c not in rename:
            rename[c] = task_vars[axis]
    lets = [S.Let(v, _as_index(c)) for v, c in zip(task_vars, coords) if not (isinstance(c, E.Var) and c in rename)]
    out = S.seq([*lets, body])
    for v, extent, kind in reversed(loops):
        out = S.For(v, _as_index(extent), out, kind)
    return substitute(out, rename) if rename else out


def _custom_task(atom: Custom, wk: Any, task_vars: tuple[E.Var, ...], loops: list, names: NameGen,
                 k: int) -> list[Any]:
    """A custom atom becomes one unrolled loop over its task list; each coordinate is a
    select chain over the loop index, which the C compiler folds once it unrolls."""
    tasks = [tuple(t) for t in atom.fn(wk if isinstance(wk, E.Expr) else E.as_expr(wk))]
    if not tasks:
        raise TransformError(f"custom mapping {atom!r} gives a worker no tasks")
    t = E.Var(names.fresh(f"task_{k}"), index_type)
    loops.append((t, len(tasks), "unroll"))
    out = []
    for axis in range(len(task_vars)):
        value: Any = tasks[-1][axis]
        for idx in range(len(tasks) - 2, -1, -1):
            value = E.select(E.eq(t, idx), _as_index(tasks[idx][axis]), _as_index(value))
        out.append(value)
    return out


def lower_mappings(fn: S.Function) -> S.Function:
    """Replaces every ``ForMapping`` of ``fn`` by loops (repeat atoms) and index arithmetic
    on the worker (spatial atoms)."""
    return _Lowerer(NameGen(fn)).visit(fn)
