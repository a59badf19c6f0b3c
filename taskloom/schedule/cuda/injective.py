"""Injective CUDA kernels with 16-byte accesses: each thread computes a run of consecutive
output elements (16 bytes of them), loads each input the run reads consecutively with one
wide copy into registers, computes the run there, and stores it with another wide copy.

A warp of scalar float32 loads moves 128 bytes a request; a warp of 16-byte loads moves
512, so the same bytes take a quarter of the load and store instructions and the kernel
stays at the memory's bandwidth with fewer warps in flight. A run never crosses a row:
this kernel serves outputs whose last axis is static and a multiple of the run, and whose
reads are each either a run of their own (consecutive and on the 16-byte grid: a bias row,
a same-shaped input) or the same for the whole run (a scalar, a broadcast column), loaded
once. A task with any other read (a transpose, a gather along the row, a slice off the
grid) is left to the per-element rule: read element by element with runs of 4 lanes
apart, such loads would touch twice the sectors that consecutive threads do.
"""
from __future__ import annotations

from typing import Callable, Collection, Mapping

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.arith import simplify_expr
from taskloom.ir.compute import GridCompute, ReduceCompute, Task
from taskloom.ir.dtypes import TensorType, index_type
from taskloom.ir.functor import Rewriter, collect, substitute
from taskloom.ir.index import prod, unravel
from taskloom.schedule.cuda.rows import BLOCK
from taskloom.transforms.names import NameGen

VECTOR_BYTES = 16


def output_run(task: Task) -> int | None:
    """How many consecutive output elements 16 bytes hold, where ``task``'s one output has
    a static last axis that is a whole number of such runs (else None)."""
    if len(task.outputs) != 1 or not task.outputs[0].shape:
        return None
    out = task.outputs[0]
    last, size = simplify_expr(E.as_expr(out.shape[-1])), out.dtype.nbytes
    run = VECTOR_BYTES // size if size <= VECTOR_BYTES // 2 else 1
    if run < 2 or not isinstance(last, E.Constant) or int(last.value) % run:
        return None
    return run


def run_length(task: Task, inline: Callable[[E.Expr], E.Expr]) -> int | None:
    """How many consecutive output elements a thread computes (16 bytes of them), or None
    where the task is not one this kernel serves; ``inline`` reads the task's nodes as reads
    of its inputs (a reduction anywhere in the output's definition rules it out)."""
    run = output_run(task)
    if run is None or collect(inline(task.outputs[0].value), ReduceCompute):
        return None
    return run


def vector_kernel(task: Task, params: list[E.Var], out: E.Var, names: NameGen,
                  inline: Callable[[E.Expr], E.Expr], run: int, name: str) -> S.Function | None:
    """``task`` with a thread for each ``run`` consecutive elements of its output ``out``
    (see the module docstring), or None where a read is neither a run nor the same for the
    run; ``params``, ``names`` and ``inline`` (reads of the task's nodes as reads of the
    parameters) are the per-element rule's."""
    node: GridCompute = task.outputs[0]
    width = int(simplify_expr(E.as_expr(node.shape[-1])).value)  # type: ignore[attr-defined]
    runs = (*node.shape[:-1], E.as_expr(width // run))
    q = E.Var(names.fresh("q"), index_type)
    lead = [E.Var(names.fresh(a.name), index_type) for a in node.axes]
    k = E.Var(names.fresh("k"), index_type)
    first = lead[-1] * run
    value = inline(substitute(node.value, dict(zip(node.axes, (*lead[:-1], first + k)))))
    found = wide_reads(value, k, run, lead, names)
    if found is None:
        return None
    loads, value = found
    result = E.Var(names.fresh(f"{node.name}_run"), TensorType(node.dtype, (E.as_expr(run),)))
    body = S.seq([
        *[S.Let(v, e) for v, e in zip(lead, unravel(q, runs))],
        *loads,
        S.Declare(result, scope="register"),
        S.For(k, E.as_expr(run), S.BufferStore(result, (k,), value), "unroll"),
        *_copies(E.TensorElement(out, (*lead[:-1], first)), E.TensorElement(result, (E.as_expr(0),)), run)])
    total = simplify_expr(E.as_expr(prod(runs)))
    fn = S.Function(name, tuple(params), S.seq([
        S.Let(q, gpu.blockIdx.x * BLOCK + gpu.threadIdx.x),
        S.If(q < total, body)]),
        attrs=(("doc", f"{task.name}: scheduled by the CUDA rules, {run} consecutive elements a thread, "
                       "moved 16 bytes at a time"),))
    return gpu.cuda_kernel(fn, (simplify_expr(E.as_expr(E.cdiv(total, BLOCK))),), (BLOCK,))


def _copies(dst: E.TensorElement, src: E.TensorElement, run: int) -> list[S.Stmt]:
    """``run`` elements from ``src`` to ``dst`` in copies of at most 16 bytes."""
    nbytes = run * dst.type.nbytes
    step = min(nbytes, VECTOR_BYTES)
    per = step // dst.type.nbytes

    def at(ref: E.TensorElement, c: int) -> E.TensorElement:
        *rest, last = ref.indices
        return E.TensorElement(ref.tensor, (*rest, simplify_expr(last + c * per)))
    return [gpu.VectorCopy(at(dst, c), at(src, c), step) for c in range(nbytes // step)]


def wide_reads(value: E.Expr, k: E.Var, run: int, fixed: Collection[E.Var], names: NameGen,
               held: Collection[E.Var] = (), guards: Mapping[str, E.Expr] | None = None
               ) -> tuple[list[S.Stmt], E.Expr] | None:
    """The reads of ``value`` that take ``run`` consecutive, aligned elements as ``k`` goes
    over the run, each loaded once into a register buffer, and the reads the same for every
    ``k`` (their indices of ``fixed`` variables only: a broadcast), each loaded once into a
    register; ``value`` reading those. Reads of ``held`` (registers already) stay. A read
    with a guard (``guards``, by the read's text: where a ``select`` takes it) is loaded
    only where the guard holds, zeros standing in elsewhere. None where a read is neither,
    or its guard varies along the run."""
    guards = guards or {}
    loads: list[S.Stmt] = []
    swaps: dict[str, E.Expr] = {}
    e: E.TensorElement
    for e in collect(value, E.TensorElement):  # type: ignore[assignment]
        key = repr(e)
        if key in swaps or e.tensor in held:
            continue
        guard = guards.get(key)
        if guard is not None and k in E.free_vars(guard):
            return None
        name = getattr(e.tensor, "name", "input")
        if set().union(*map(E.free_vars, e.indices)) <= set(fixed):
            v = E.Var(names.fresh(name), e.type)
            loads += ([S.Let(v, e)] if guard is None else
                      [S.Declare(v, E.Constant(0, e.type)), S.If(guard, S.Assign(v, e))])
            swaps[key] = v
            continue
        if not _consecutive(e, k, run):
            return None
        buf = E.Var(names.fresh(f"{name}_run"), TensorType(e.type, (E.as_expr(run),)))
        *rest, last = e.indices
        start = E.TensorElement(e.tensor, (*rest, simplify_expr(substitute(last, {k: E.as_expr(0)}))))
        copies = _copies(E.TensorElement(buf, (E.as_expr(0),)), start, run)
        zeros = S.For(k, E.as_expr(run), S.BufferStore(buf, (k,), E.Constant(0, e.type)), "unroll")
        loads += [S.Declare(buf, scope="register"),
                  *(copies if guard is None else [S.If(guard, S.seq(copies), zeros)])]
        swaps[key] = E.TensorElement(buf, (k,))
    return loads, _Swap(swaps).visit(value) if swaps else value


def _consecutive(e: E.TensorElement, k: E.Var, run: int) -> bool:
    """Whether ``e`` reads element ``base + k`` of its rows, with ``base`` on the 16-byte
    grid and every row a whole number of runs (so the copy is aligned and stays in its row)."""
    t, nbytes = e.tensor.type, e.type.nbytes * run
    if not isinstance(t, TensorType) or not t.shape or nbytes not in (4, 8) and nbytes % VECTOR_BYTES:
        return False
    width = simplify_expr(E.as_expr(t.shape[-1]))
    if not isinstance(width, E.Constant) or int(width.value) % run:
        return False
    *rest, last = e.indices
    if any(k in E.free_vars(i) for i in rest):
        return False
    base = simplify_expr(last - k)
    if k in E.free_vars(base):
        return False
    offset = simplify_expr(base % run)
    return isinstance(offset, E.Constant) and int(offset.value) == 0


class _Swap(Rewriter):
    """Reads replaced by the register buffer holding them."""

    def __init__(self, swaps: dict[str, E.Expr]):
        self.swaps = swaps

    def visit_TensorElement(self, e: E.TensorElement) -> E.Expr:
        swap = self.swaps.get(repr(e))
        return self.generic_visit(e) if swap is None else swap
