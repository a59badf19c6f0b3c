"""Window reductions vectorized over the channels: a depthwise convolution, a pooling or a
global average of an NHWC tensor, a thread for each 16 bytes of a pixel's channels.

Such an output element is a sum (max, mean) over a window of the input at the same channel:
a thread computing one element would load each tap's 2 bytes on its own, with the window's
index arithmetic repeated for every channel. Here a thread takes a run of consecutive
channels (8 of float16, 4 of float32, the output's last axis), keeps one accumulator a
channel in registers, and at each tap of the window loads the run of the input and of the
weight with one 16-byte copy each; the epilogue fusion put after the reduction (bias,
activation, residual) runs on the run, which is stored with one more. A warp's loads then
move 512 bytes a request, in a quarter of the instructions, and the index arithmetic is done
once a run.

A tap in the padding reads nothing: a read under a ``select`` whose condition (the window
inside the image) does not vary along the run is made under that condition, and zeros
stand in otherwise. Served: an output whose last axis is static and a whole number of runs,
whose reductions contain none, and whose every read either takes consecutive elements
along the run on the 16-byte grid or is the same for the whole run. That also takes a
contraction too thin for a matmul template (a few rows, a short K: ``cuda.matmul.thin``),
a thread per run of its output's columns.
"""
from __future__ import annotations

import os
from typing import Callable, Collection

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.arith import simplify_expr
from taskloom.ir.compute import GridCompute, ReduceCompute, Task
from taskloom.ir.dtypes import TensorType, index_type
from taskloom.ir.functor import Rewriter, collect, substitute
from taskloom.ir.index import prod, unravel
from taskloom.schedule.cuda.injective import _copies, output_run, wide_reads
from taskloom.schedule.cuda.rows import BLOCK
from taskloom.transforms.names import NameGen

_INIT = {"sum": 0.0, "mean": 0.0, "max": float("-inf"), "min": float("inf")}
_COMBINE = {"sum": "add", "mean": "add", "max": "max", "min": "min"}


def window_run(task: Task, inline: Callable[[E.Expr], E.Expr]) -> int | None:
    """The channels a thread computes (16 bytes of them), or None where ``task`` is not a
    window reduction this kernel may serve (its output's last axis static and a whole
    number of runs, reductions in its definition, none inside another)."""
    run = output_run(task)
    if run is None or os.environ.get("TASKLOOM_WINDOW", "1") == "0":  # (0: a thread an element, to time against)
        return None
    reductions = collect(inline(task.outputs[0].value), ReduceCompute)
    if not reductions or any(collect(r.value, ReduceCompute) for r in reductions):  # type: ignore[attr-defined]
        return None
    if any(r.kind not in _COMBINE or not r.value.type.is_float() for r in reductions):  # type: ignore[attr-defined]
        return None
    return run


def window_kernel(task: Task, params: list[E.Var], out: E.Var, names: NameGen,
                  inline: Callable[[E.Expr], E.Expr], run: int, name: str) -> S.Function | None:
    """``task`` with a thread for each ``run`` consecutive channels of its output ``out``
    (see the module docstring), or None where a read is neither a run nor the same for the
    run; ``params``, ``names`` and ``inline`` are the per-element rule's."""
    node: GridCompute = task.outputs[0]
    width = int(simplify_expr(E.as_expr(node.shape[-1])).value)  # type: ignore[attr-defined]
    runs = (*node.shape[:-1], E.as_expr(width // run))
    # a reduction's own axes (a matmul's k) must not share a name with the variables made
    # here: variables of one name and type are one variable to a substitution
    names.used.update(v.name for v in collect(inline(node.value), E.Var))  # type: ignore[attr-defined]
    q = E.Var(names.fresh("q"), index_type)
    lead = [E.Var(names.fresh(a.name), index_type) for a in node.axes]
    k = E.Var(names.fresh("k"), index_type)
    value = inline(substitute(node.value, dict(zip(node.axes, (*lead[:-1], lead[-1] * run + k)))))
    body: list[S.Stmt] = [S.Let(v, e) for v, e in zip(lead, unravel(q, runs))]
    accumulators: set[E.Var] = set()
    for r in collect(value, ReduceCompute):
        found = _accumulate(r, k, run, set(lead), names)  # type: ignore[arg-type]
        if found is None:
            return None
        stmts, acc = found
        body += stmts
        accumulators.add(acc)
        value = _Reduced(r, E.TensorElement(acc, (k,))).visit(value)
    found_epilogue = _loads(value, k, run, set(lead), names, accumulators)
    if found_epilogue is None:
        return None
    loads, value = found_epilogue
    result = E.Var(names.fresh(f"{node.name}_run"), TensorType(node.dtype, (E.as_expr(run),)))
    body += [*loads, S.Declare(result, scope="register"),
             S.For(k, E.as_expr(run), S.BufferStore(result, (k,), value), "unroll"),
             *_copies(E.TensorElement(out, (*lead[:-1], lead[-1] * run)), E.TensorElement(result, (E.as_expr(0),)),
                      run)]
    total = simplify_expr(E.as_expr(prod(runs)))
    fn = S.Function(name, tuple(params), S.seq([S.Let(q, gpu.blockIdx.x * BLOCK + gpu.threadIdx.x),
                                                S.If(q < total, S.seq(body))]),
                    attrs=(("doc", f"{task.name}: a window reduction, {run} channels a thread, "
                                   "each tap's run loaded 16 bytes at a time"),))
    return gpu.cuda_kernel(fn, (simplify_expr(E.as_expr(E.cdiv(total, BLOCK))),), (BLOCK,))


def _accumulate(r: ReduceCompute, k: E.Var, run: int, fixed: set[E.Var],
                names: NameGen) -> tuple[list[S.Stmt], E.Var] | None:
    """The loop nest of reduction ``r`` over its window, a register accumulator a channel of
    the run (returned), each tap's reads loaded once; None where a read cannot be."""
    axes = [E.Var(names.fresh(a.name), index_type) for a in r.axes]
    # an axis of one step (a depthwise weight's channel of its group) is 0, so that a read
    # along the run stays recognizably consecutive
    at = {a: (E.as_expr(0) if E.is_const(simplify_expr(E.as_expr(d)), 1) else v)
          for a, v, d in zip(r.axes, axes, r.shape)}
    loops = [(v, d) for a, v, d in zip(r.axes, axes, r.shape) if at[a] is v]
    found = _loads(substitute(r.value, at), k, run, fixed | {v for v, _ in loops}, names)
    if found is None:
        return None
    loads, term = found
    acc = E.Var(names.fresh(f"{r.kind}_acc"), TensorType(r.type, (E.as_expr(run),)))  # type: ignore[arg-type]
    step: S.Stmt = S.seq([*loads, S.For(k, E.as_expr(run), S.BufferStore(
        acc, (k,), E.binary(_COMBINE[r.kind], E.TensorElement(acc, (k,)), term)), "unroll")])
    for v, d in reversed(loops):
        step = S.For(v, E.as_expr(d), step)
    stmts = [S.Declare(acc, scope="register"),
             S.For(k, E.as_expr(run), S.BufferStore(acc, (k,), E.Constant(_INIT[r.kind], r.type)), "unroll"),
             S.Comment(f"the window's taps, each {run} channels of a pixel at once"), step]
    if r.kind == "mean":
        count = E.cast(prod(r.shape), r.type)  # type: ignore[arg-type]
        stmts.append(S.For(k, E.as_expr(run), S.BufferStore(acc, (k,), E.TensorElement(acc, (k,)) / count), "unroll"))
    return stmts, acc


def _loads(value: E.Expr, k: E.Var, run: int, fixed: set[E.Var], names: NameGen,
           held: Collection[E.Var] = ()) -> tuple[list[S.Stmt], E.Expr] | None:
    """:func:`~taskloom.schedule.cuda.injective.wide_reads` of ``value``, a read under a
    ``select`` loaded only where the select takes it (:func:`_guards`)."""
    guards = _guards(value)
    return None if guards is None else wide_reads(value, k, run, fixed, names, held, guards)


def _guards(value: E.Expr) -> dict[str, E.Expr] | None:
    """For each read of ``value`` under a ``select``, the condition under which the select
    takes it (the conjunction of the enclosing selects' conditions, negated on their else
    side); None where one read sits under two different conditions."""
    found: dict[str, E.Expr | None] = {}

    def walk(e: E.Expr, guard: E.Expr | None) -> bool:
        if isinstance(e, E.Select):
            def under(c: E.Expr) -> E.Expr:
                return c if guard is None else E.logical_and(guard, c)
            return walk(e.cond, guard) and walk(e.a, under(e.cond)) and walk(e.b, under(E.logical_not(e.cond)))
        if isinstance(e, E.TensorElement):
            key = repr(e)
            if key in found and repr(found[key]) != repr(guard):
                return False
            found[key] = guard
            return all(walk(i, guard) for i in e.indices)
        return all(walk(c, guard) for c in e.children() if isinstance(c, E.Expr))
    if not walk(value, None):
        return None
    return {key: g for key, g in found.items() if g is not None}


class _Reduced(Rewriter):
    """A reduction replaced by the accumulator that computed it."""

    def __init__(self, r: E.Expr, acc: E.Expr):
        self.r, self.acc = r, acc

    def visit_ReduceCompute(self, r: ReduceCompute) -> E.Expr:
        return self.acc if r is self.r or r == self.r else self.generic_visit(r)
