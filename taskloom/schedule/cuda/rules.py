"""The CUDA rule-based scheduler: any task becomes a correct CUDA kernel, with no schedule
written for any operator.

The rules:
- A row reduction (softmax, layer_norm, a sum over the last axes: reductions that depend
  only on the output's leading axes) gets a warp or a block per row
  (:mod:`taskloom.schedule.cuda.rows`).
- An injective task whose output rows are whole 16-byte runs, and whose reads are runs too
  or the same for a run, gets a thread per run, its loads and stores 16 bytes wide
  (:mod:`taskloom.schedule.cuda.injective`); so does a window reduction over such rows (a
  depthwise convolution or a pooling in NHWC: :mod:`taskloom.schedule.cuda.window`), each
  tap's run loaded at once.
- Any other task gets one thread per element of the largest output, 256 threads a block,
  consecutive threads on consecutive elements (so a warp's loads and stores of a row-major
  tensor coalesce); a thread past the end does nothing, so any size works. Its reductions
  are computed by the thread that needs them, in a loop over their axes, into a register.
- Every node that is not an output is inlined into its readers.

This is correct for every task, and fast for injective ones and row reductions; the
contractions (matmul, convolution) wait for their templates.
"""
from __future__ import annotations

import math
from typing import Any

from taskloom.errors import ScheduleError
from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.arith import simplify_expr
from taskloom.ir.compute import GridCompute, ReduceCompute, Task, TensorInput
from taskloom.ir.dtypes import DataType, TensorType, index_type
from taskloom.ir.functor import Rewriter, collect, substitute
from taskloom.ir.index import prod, unravel
from taskloom.schedule.cuda.injective import run_length, vector_kernel
from taskloom.schedule.cuda.rows import BLOCK, WARP_ROW_MAX, _Row, row_axes
from taskloom.schedule.cuda.window import window_kernel, window_run
from taskloom.target.cuda import CudaTarget
from taskloom.transforms.names import NameGen

_INIT = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf, "prod": 1.0}
_COMBINE = {"sum": "add", "mean": "add", "max": "max", "min": "min", "prod": "mul"}


class _Inline(Rewriter):
    """Reads of task nodes become reads of the kernel's parameters (inputs) or the node's
    value at the read's indices (every other node, inlined)."""

    def __init__(self, params: dict[E.Expr, E.Var]):
        self.params = params

    def visit_TensorElement(self, e: E.TensorElement) -> E.Expr:
        t = e.tensor
        if isinstance(t, GridCompute):
            return self.visit(substitute(t.value, dict(zip(t.axes, e.indices))))
        if isinstance(t, TensorInput):
            return E.TensorElement(self.params[t], tuple(self.visit(i) for i in e.indices))
        return self.generic_visit(e)


def _identity(kind: str, t: DataType) -> E.Expr:
    if t.is_float():
        return E.Constant(_INIT[kind], t)
    value = t.min_value() if kind == "max" else t.max_value() if kind == "min" else int(_INIT[kind])
    return E.Constant(value, t)


def _reduce_serially(value: E.Expr, names: NameGen) -> tuple[E.Expr, list[S.Stmt]]:
    """Each reduction in ``value`` computed into a register by a loop nest; the value reading
    those registers. A reduction that reads none of the axes of those around it is computed
    first, once (a softmax's max, before the sum over keys that uses it); one that reads them
    (attention's score of a key, inside that sum) is computed inside their loop."""
    return _lower_reductions(_FreshAxes(names).visit(value), names)


def _lower_reductions(value: E.Expr, names: NameGen) -> tuple[E.Expr, list[S.Stmt]]:
    """:func:`_reduce_serially` of a value whose reductions bind axes of their own."""
    pre: list[S.Stmt] = []
    while True:
        reductions = collect(value, ReduceCompute)
        if not reductions:
            return value, pre
        # ready: reading no axis of another reduction, so computable here; of those, one with
        # no ready one inside it (that one goes first, once, not once an iteration)
        bound = {a for r in reductions for a in r.axes}  # type: ignore[attr-defined]
        ready = [r for r in reductions if not _outer_reads(r) & bound]  # type: ignore[arg-type]
        r: ReduceCompute = next(r for r in ready if not any(o is not r and _contains(r, o) for o in ready))  # type: ignore
        if r.kind not in _COMBINE:
            raise ScheduleError(f"the CUDA rules do not compute {r.kind} reductions yet")
        acc = E.Var(names.fresh(f"{r.kind}_acc"), r.type)
        term, inside = _lower_reductions(r.value, names)  # what reads its axes, inside its loop
        body: S.Stmt = S.seq([*inside, S.Assign(acc, E.binary(_COMBINE[r.kind], acc, term))])
        for a, d in reversed(list(zip(r.axes, r.shape))):
            body = S.For(a, d, body)
        pre += [S.Declare(acc, _identity(r.kind, r.value.type)), body]  # type: ignore[arg-type]
        if r.kind == "mean":
            pre.append(S.Assign(acc, acc / E.cast(prod(r.shape), r.value.type)))  # type: ignore[arg-type]
        value = _Replace(r, acc).visit(value)


class _FreshAxes(Rewriter):
    """Every reduction's axes renamed apart: a definition may bind one variable in two nested
    reductions (the max and the sum over keys of a softmax), and a substitution for the
    outer one must not reach into the inner one."""

    def __init__(self, names: NameGen):
        self.names = names

    def visit_ReduceCompute(self, r: ReduceCompute) -> E.Expr:
        axes = tuple(E.Var(self.names.fresh(a.name), index_type) for a in r.axes)
        value = substitute(self.visit(r.value), dict(zip(r.axes, axes)))
        return ReduceCompute(tuple(self.visit(d) for d in r.shape), axes, value, r.kind)


def _outer_reads(r: ReduceCompute) -> set[E.Var]:
    """The variables ``r`` reads that neither it nor a reduction inside it binds."""
    own = {a for x in (r, *collect(r.value, ReduceCompute)) for a in x.axes}  # type: ignore[attr-defined]
    return E.free_vars(r.value) - own


def _contains(outer: E.Expr, r: E.Expr) -> bool:
    return any(x is r for x in collect(outer.value, ReduceCompute))  # type: ignore[attr-defined]


class _Replace(Rewriter):
    def __init__(self, old: E.Expr, new: E.Expr):
        self.old, self.new = old, new

    def visit(self, node):  # type: ignore[override]
        return self.new if node is self.old or node == self.old else super().visit(node)


def _parameters(task: Task) -> tuple[NameGen, list[E.Var], dict[E.Expr, E.Var]]:
    """The kernel's parameters (the task's symbols, inputs and outputs) and their names."""
    names = NameGen(S.SeqStmt(()))
    params: list[E.Var] = list(task.symbols())
    names.used.update(v.name for v in params)
    tensors: dict[E.Expr, E.Var] = {}
    for t in (*task.inputs, *task.outputs):
        tensors[t] = E.Var(names.fresh(t.name), t.type)  # fused groups may repeat a name
        params.append(tensors[t])
    return names, params, tensors


def schedule_task_cuda(task: Task, target: CudaTarget, name: str | None = None) -> S.Function:
    """The CUDA kernel of ``task``, scheduled by rules (see the module docstring)."""
    if len(task.outputs) == 1 and task.outputs[0].shape:
        out = task.outputs[0]
        split = row_axes(_Inline({t: t for t in task.inputs}).visit(out.value), out.axes)
        if split is not None:
            return _rows_kernel(task, split, name)
    names, params, tensors = _parameters(task)
    inline = _Inline(tensors).visit
    run = run_length(task, inline)
    wide = None if run is None else vector_kernel(task, params, tensors[task.outputs[0]], names, inline, run,
                                                   name or task.name)
    if wide is None and (run := window_run(task, inline)) is not None:
        wide = window_kernel(task, params, tensors[task.outputs[0]], names, inline, run, name or task.name)
    return wide if wide is not None else per_element_kernel(task, name)


def per_element_kernel(task: Task, name: str | None = None) -> S.Function:
    """``task`` with a thread for each element of its largest output (the rule that serves
    every task)."""
    names, params, tensors = _parameters(task)
    sizes = [simplify_expr(E.as_expr(prod(o.shape))) for o in task.outputs]
    total = sizes[0]
    for s in sizes[1:]:
        total = E.maximum(total, s)
    i = E.Var(names.fresh("i"), index_type)
    body: list[S.Stmt] = [S.Let(i, gpu.blockIdx.x * BLOCK + gpu.threadIdx.x)]
    for out, size in zip(task.outputs, sizes):
        body.append(S.If(i < size, _element(out, tensors, i, names)))
    fn = S.Function(name or task.name, tuple(params), S.seq(body),
                    attrs=(("doc", f"{task.name}: scheduled by the CUDA rules, a thread an element"),))
    return gpu.cuda_kernel(fn, (simplify_expr(E.as_expr(E.cdiv(total, BLOCK))),), (BLOCK,))


def _element(out: GridCompute, tensors: dict[E.Expr, E.Var], i: E.Var, names: NameGen) -> S.Stmt:
    """Output element ``i`` (row-major) of ``out``: its indices, its reductions, its store."""
    idx = unravel(i, out.shape)
    value = _Inline(tensors).visit(substitute(out.value, dict(zip(out.axes, idx))))
    value, pre = _reduce_serially(value, names)
    return S.seq([*pre, S.BufferStore(tensors[out], tuple(idx), value)])


def _static_size(shape: tuple) -> int:
    """The number of elements of ``shape``; past any bound when it is symbolic."""
    n = simplify_expr(E.as_expr(prod(shape)))
    return int(n.value) if isinstance(n, E.Constant) else 1 << 62


def _row_loops(body: list[S.Stmt], length: Any) -> list[tuple[S.For, E.Var]]:
    """The top-level loops of a row kernel that stride over the row's ``length`` elements
    (``for t: k = t * threads + lane; if k < length: ...``), each with its element variable."""
    found = []
    for stmt in body:
        if isinstance(stmt, S.For) and isinstance(stmt.body, S.SeqStmt) and len(stmt.body.stmts) == 2:
            let, guard = stmt.body.stmts
            cond = guard.cond if isinstance(guard, S.If) and guard.else_body is None else None
            if isinstance(let, S.Let) and isinstance(cond, E.Binary) and cond.op == "lt" and cond.a is let.var \
                    and isinstance(cond.b, E.Constant) and int(cond.b.value) == length:
                found.append((stmt, let.var))
    return found


def _stage_row(body: list[S.Stmt], names: NameGen, threads: int, lane: E.Var, length: Any,
               out: E.Var) -> list[S.Stmt] | None:
    """``body`` with the row's elements that two or more of its passes read (a layer norm's
    input: its mean, its variance, its result) loaded once into registers, as the passes
    stride over them, and each pass reading the registers; None where nothing is read twice
    or the row is too long for registers (a warp a row of at most ``ROW_REGISTERS`` each)."""
    length = int(length.value) if isinstance(length, E.Constant) else length
    if not isinstance(length, int) or -(-length // threads) > ROW_REGISTERS:
        return None
    loops = _row_loops(body, length)
    e = E.Var(names.fresh("e"), index_type)
    seen: dict[E.Expr, int] = {}
    for loop, k in loops:
        # (in the order read, not a set's: the kernel's text, and so its cache key, must not
        # change from one compile to the next)
        reads = dict.fromkeys(substitute(x, {k: e}) for x in collect(loop.body, E.TensorElement)
                              if x.tensor is not out and k in E.free_vars(x))  # type: ignore[attr-defined]
        for x in reads:
            seen[x] = seen.get(x, 0) + 1
    # (read at the top of the row: an index must not depend on what the row computes)
    made = {d.var for d in collect(S.seq(body), (S.Declare, S.Let, S.For))}  # type: ignore[attr-defined]
    shared = [x for x, n in seen.items() if n > 1 and not (E.free_vars(x) & made)]
    if not shared:
        return None
    per_thread = -(-length // threads)
    held = {x: E.Var(names.fresh("row"), TensorType(x.type, (E.as_expr(per_thread),))) for x in shared}
    t, k = E.Var(names.fresh("t"), index_type), E.Var(names.fresh("k"), index_type)
    stage = [S.Declare(v, scope="register") for v in held.values()] + [
        S.Comment("the row's elements this thread reads, loaded once"),
        S.For(t, E.as_expr(per_thread), S.seq([
            S.Let(k, t * threads + lane),
            S.If(k < length, S.seq([S.BufferStore(v, (t,), substitute(x, {e: k})) for x, v in held.items()]))]),
            kind="unroll")]
    rewritten = {}
    for loop, var in loops:
        inner = loop.body
        for x, v in held.items():
            inner = _Replace(substitute(x, {e: var}), E.TensorElement(v, (loop.var,))).visit(inner)
        rewritten[id(loop)] = S.For(loop.var, loop.extent, inner, kind="unroll")
    return stage + [rewritten.get(id(stmt), stmt) for stmt in body]


#: The most elements of a row a thread holds in registers (a warp's row of 1024)
ROW_REGISTERS = 32


def _rows_kernel(task: Task, split: int, name: str | None) -> S.Function:
    """A row reduction with a warp (or a block) per row: the rows are the output's first
    ``split`` axes, the row's elements the rest (one axis, or none), each warp of a block
    takes a row, or the whole block does (see ``rows``)."""
    names, params, tensors = _parameters(task)
    out = task.outputs[0]
    whole = _Inline(tensors).visit(out.value)
    longest = max(_static_size(r.shape) for r in collect(whole, ReduceCompute))  # type: ignore[attr-defined]
    threads = gpu.WARP_SIZE if longest <= WARP_ROW_MAX else BLOCK
    per_block = BLOCK // threads
    rows = simplify_expr(E.as_expr(prod(out.shape[:split])))
    length = prod(out.shape[split:])
    lane, warp, row = (E.Var(names.fresh(n), index_type) for n in ("lane", "warp", "row"))
    head = [S.Let(lane, gpu.threadIdx.x % threads if threads < BLOCK else gpu.threadIdx.x),
            *([S.Let(warp, gpu.threadIdx.x // gpu.WARP_SIZE)] if threads > gpu.WARP_SIZE else []),
            S.Let(row, gpu.blockIdx.x * per_block + gpu.threadIdx.x // threads if per_block > 1 else gpu.blockIdx.x)]
    outer = unravel(row, out.shape[:split])
    value = substitute(whole, dict(zip(out.axes[:split], outer)))
    builder, body = _Row(names, threads, lane, warp), []
    while todo := [r for r in collect(value, ReduceCompute) if not collect(r.value, ReduceCompute)]:  # type: ignore[attr-defined]
        r: ReduceCompute = todo[0]  # type: ignore[assignment]
        acc, stmts = builder.reduce(r, _identity(r.kind, r.value.type))  # type: ignore[arg-type]
        body += stmts
        value = _Replace(r, acc).visit(value)
    if split == len(out.axes):  # a row of one element: the first thread stores it
        body.append(S.If(E.eq(lane, 0), S.BufferStore(tensors[out], tuple(outer), value)))
    else:
        t, j = E.Var(names.fresh("t"), index_type), E.Var(names.fresh(out.axes[-1].name), index_type)
        body += [S.Comment("the row's elements, strided as the reductions were"),
                 S.For(t, E.as_expr(E.cdiv(E.as_expr(length), threads)), S.seq([
                     S.Let(j, t * threads + lane),
                     S.If(j < length, S.BufferStore(tensors[out], (*outer, j), substitute(value, {out.axes[-1]: j})))]))]
    staged = _stage_row(body, names, threads, lane, length, tensors[out]) if threads == gpu.WARP_SIZE else None
    body = staged or body
    doc = (f"{task.name}: scheduled by the CUDA rules, a {'warp' if threads < BLOCK else 'block'} a row"
           + (", the row held in registers" if staged else ""))
    fn = S.Function(name or task.name, tuple(params), S.seq([*head, S.If(row < rows, S.seq(body))]),
                    attrs=(("doc", doc),))
    return gpu.cuda_kernel(fn, (simplify_expr(E.as_expr(E.cdiv(rows, per_block))),), (BLOCK,))
