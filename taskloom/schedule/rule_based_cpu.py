"""The rule-based scheduler: any task (a DAG of compute and reduce nodes) becomes a CPU
tensor program, with no schedule written for any operator (Hidet, section 5.1.3).

The rules:
- Outputs and nodes holding a reduction are materialized; every other node is inlined
  into its readers, and so is a reduction that one reader reads only at its own index (an
  activation after a pooling or depthwise window).
- When all materialized nodes share leading axes and read each other only at those axes
  (softmax, layer_norm: row by row), one parallel loop runs over the shared axes and the
  nodes run one after another inside it, their intermediates in small per-row buffers
  that stay in cache. Otherwise each node gets its own parallel loop nest.
- An injective node with nothing to share is split into blocks of its last axis, so even
  a 1-D tensor spreads over every core.
- The innermost axis of a node is vectorized (full vectors, then one masked tail) when its
  expression allows (see :mod:`taskloom.schedule.vectorize`); otherwise it is a scalar
  loop with a simd hint.
- A reduction that does not depend on the innermost output axis is computed once before
  that loop; its own innermost axis is accumulated in vector registers when contiguous,
  then reduced horizontally, with a scalar tail.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.compute import GridCompute, ReduceCompute, Task, at_own_index
from taskloom.ir.dtypes import DataType, TensorType, float32, index_type_for
from taskloom.ir.functor import Rewriter, collect, substitute
from taskloom.ir.index import max_elements, prod, unravel
from taskloom.ir.printer import expr_text
from taskloom.schedule.interior import interior
from taskloom.schedule.vectorize import vectorize_expr
from taskloom.target.cpu import CpuTarget
from taskloom.transforms.names import NameGen
from taskloom.ir.arith import simplify_expr

#: Elements of the last axis per parallel block of an injective node: enough work per
#: block to amortize the loop, small enough to spread a single row over every core.
BLOCK = 4096
#: The same for a 1-d node whose every element is a reduction.
REDUCE_BLOCK = 64
#: Element steps (an output element, or one term of a reduction) below which a kernel runs
#: on one thread: waking the other cores costs about half a microsecond a kernel, about what
#: one core takes for a few thousand (a layer norm and softmax of 4 x 256: 1.2 us on one
#: thread, 2.2 on two; at 16 x 256 a wash; at 64 x 256 two threads win, measured).
SERIAL_STEPS = 8192
#: Vector accumulators of a reduction along a contiguous axis: enough to cover the latency
#: of a vector add (4 cycles) at one add per cycle.
ACCUMULATORS = 4
#: Terms of a per-vector reduction from which several vectors reduce side by side
#: (:func:`_vector_span`): a global pool's 49 or more pixels, not a 3x3 window's 9.
LONG_REDUCTION = 16

_INIT = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf, "prod": 1.0}
_COMBINE = {"sum": "add", "mean": "add", "max": "max", "min": "min", "prod": "mul"}
_HORIZONTAL = {"sum": "reduce_add", "mean": "reduce_add", "max": "reduce_max", "min": "reduce_min"}


def _identity(kind: str, t: DataType) -> E.Expr:
    v = _INIT[kind]
    if t.is_float():
        return E.Constant(v, t)
    return E.Constant(t.min_value() if kind == "max" else t.max_value() if kind == "min" else int(v), t)


@dataclass
class _Ctx:
    """How the tensors of the task are reached from inside the generated program."""

    target: CpuTarget
    names: NameGen
    tensors: dict[E.Expr, E.Var] = field(default_factory=dict)   # input/output/buffer -> its var
    prefix: int = 0                                               # shared leading axes (fused rows)
    local: set[GridCompute] = field(default_factory=set)         # intermediates held per row
    known: dict[E.Expr, E.Var] = field(default_factory=dict)      # reductions computed already

    @property
    def lanes(self) -> int:
        return self.target.vector_lanes(float32)


class _Reads(Rewriter):
    """Rewrites reads of task tensors into reads of the program's variables, inlining the
    nodes that are not materialized."""

    def __init__(self, ctx: _Ctx):
        self.ctx = ctx

    def visit_TensorElement(self, e: E.TensorElement) -> E.Expr:
        t = e.tensor
        if isinstance(t, GridCompute) and t not in self.ctx.tensors:
            # inline with the indices as they are: the result is rewritten once, as a whole
            value = self.visit(substitute(t.value, dict(zip(t.axes, e.indices)), promote=True))
            return E.cast(value, t.dtype)  # (a wide index may have widened an integer value)
        idx = tuple(self.visit(i) for i in e.indices)
        var = self.ctx.tensors[t]
        if t in self.ctx.local:
            idx = idx[self.ctx.prefix:]  # per-row buffer: the shared row axes are implicit
            if not idx:
                return var
        return E.TensorElement(var, idx)


def _materialized(task: Task, shared_reads: bool) -> list[GridCompute]:
    """Outputs, nodes holding a reduction and, with ``shared_reads``, costly nodes (a call
    such as ``exp``) read by two or more others: inside fused rows such a node costs a small
    row buffer instead of a second evaluation. Cheap ones (``x - mean``) are recomputed,
    which beats writing and reading a buffer."""
    outs = set(task.outputs)
    nodes = task.computes()
    readers: dict[GridCompute, list[GridCompute]] = {}
    for n in nodes:
        for t in {el.tensor for el in collect(n.value, E.TensorElement)}:  # type: ignore[attr-defined]
            if isinstance(t, GridCompute):
                readers.setdefault(t, []).append(n)
    return [c for c in nodes if c in outs or (collect(c.value, ReduceCompute) and not _read_in_place(c, readers))
            or (shared_reads and len(readers.get(c, [])) > 1 and collect(c.value, E.Call))]


def _read_in_place(c: GridCompute, readers: dict[GridCompute, list[GridCompute]]) -> bool:
    """Whether ``c``'s one reader reads it only at its own index, over the same grid (an
    activation after a pooling or depthwise window): ``c`` then computes inside the reader's
    loop, an element at a time, with no buffer between them."""
    (reader, *more) = readers.get(c, [None])
    if reader is None or more or tuple(reader.shape) != tuple(c.shape):
        return False
    return all(el.tensor is not c or at_own_index(el.indices, reader)  # type: ignore[attr-defined]
               for el in collect(reader.value, E.TensorElement))


def _shared_prefix(nodes: list[GridCompute]) -> int:
    """How many leading axes every materialized node shares, read row-locally."""
    if len(nodes) < 2:
        return 0
    limit = min(len(n.shape) - (0 if collect(n.value, ReduceCompute) else 1) for n in nodes)
    p = 0
    while p < limit and all(n.shape[p] == nodes[0].shape[p] for n in nodes):
        p += 1
    # every read of a materialized node must use the reader's own leading axes
    mats = set(nodes)
    while p > 0:
        ok = True
        for n in nodes:
            for el in collect(n.value, E.TensorElement):
                if el.tensor in mats and tuple(el.indices[:p]) != tuple(n.axes[:p]):  # type: ignore[attr-defined]
                    ok = False
        if ok:
            break
        p -= 1
    return p


def schedule_task(task: Task, target: CpuTarget, name: str | None = None) -> S.Function:
    """The CPU tensor program of ``task``, scheduled by rules (see the module docstring)."""
    names = NameGen(S.SeqStmt(()))
    ctx = _Ctx(target, names)
    params: list[E.Var] = list(task.symbols())
    for v in params:
        names.used.add(v.name)
    for t in (*task.inputs, *task.outputs):
        var = E.Var(names.fresh(t.name), t.type)  # (fused groups may repeat a name: 'out')
        ctx.tensors[t] = var
        params.append(var)
    nodes = _materialized(task, shared_reads=True)
    ctx.prefix = _shared_prefix(nodes)
    if not ctx.prefix:
        nodes = _materialized(task, shared_reads=False)
    body: list[S.Stmt] = []
    if ctx.prefix:
        body.append(_fused_rows(task, nodes, ctx))
    else:
        for n in nodes:
            if n not in task.outputs:
                buf = E.Var(names.fresh(n.name), n.type)
                ctx.tensors[n] = buf
                body.append(S.Declare(buf, None, "global"))
            body.append(_node_nest(n, ctx))
    return S.Function(name or task.name, tuple(params), S.seq(body),
                      attrs=(("doc", f"{task.name}: scheduled by rules"),))


def _extent(dims: Sequence[E.Expr]) -> E.Expr:
    """The number of elements of ``dims``, in the index type that holds it: int64 where it
    may pass 2**31 - 1 (a large static size, or a product of symbols), so no count overflows."""
    t = index_type_for(max_elements(dims))
    return E.as_expr(prod([E.cast(d, t) for d in dims]))


def _loop_var(ctx: _Ctx, name: str, extent: E.Expr) -> E.Var:
    """A fresh variable for a loop over ``extent`` (of the extent's type)."""
    return E.Var(ctx.names.fresh(name), extent.type)


def _positions(flat: E.Expr, dims: Sequence[E.Expr]) -> list[E.Expr]:
    """The row-major index of ``flat`` in ``dims``, of ``flat``'s type: an int64 loop over
    the rows binds the axes to int64 positions (substituted with ``promote``)."""
    return unravel(flat, dims)


def _blocks(last: E.Expr, block: int) -> E.Expr:
    """``ceil(last / block)``, as ``(last - 1) / block + 1``: ``last + block - 1`` would pass
    2**31 - 1 for a size near it."""
    if isinstance(last, E.Constant):
        return E.as_expr(max(-(-int(last.value) // block), 1))
    return (last - 1) // block + 1


def _fused_rows(task: Task, nodes: list[GridCompute], ctx: _Ctx) -> S.Stmt:
    """One parallel loop over the shared leading axes; the nodes run in order inside it."""
    p = ctx.prefix
    rows = nodes[-1].shape[:p]
    extent = _extent(rows)
    t = _loop_var(ctx, "row", extent)
    row_axes = _positions(t, rows)
    inner: list[S.Stmt] = [S.Comment(f"{len(nodes)} stages share the leading {p} axis(es): run row by row")]
    inner += _row_reductions(nodes, row_axes, ctx)
    for n in nodes:
        if n not in task.outputs:
            ctx.local.add(n)
            rest = n.shape[p:]
            var = E.Var(ctx.names.fresh(n.name), TensorType(n.dtype, tuple(rest)) if rest else n.dtype)
            ctx.tensors[n] = var
            inner.append(S.Declare(var, None, "local") if rest else S.Declare(var))
        inner.append(_node_body(n, ctx, dict(zip(n.axes[:p], row_axes))))
    return S.For(t, extent, S.seq(inner), _loop_kind(nodes))


def _loop_kind(nodes: Sequence[GridCompute]) -> str:
    """``parallel``, or ``serial`` when ``nodes`` together take fewer than SERIAL_STEPS steps
    (their elements, times the terms of their largest reduction) and the count is known."""
    steps = 0
    for n in nodes:
        elements = _count(n.shape)
        terms = [_count(r.shape) for r in collect(n.value, ReduceCompute)]  # type: ignore[attr-defined]
        if elements is None or None in terms:
            return "parallel"
        steps += elements * max([1, *terms])  # type: ignore[type-var]
    return "serial" if steps < SERIAL_STEPS else "parallel"


def _count(shape: Sequence[E.Expr]) -> int | None:
    """How many elements ``shape`` holds, or None when that is not known at compile time."""
    n = simplify_expr(E.as_expr(prod(shape)))
    return int(n.value) if isinstance(n, E.Constant) else None


def _row_reductions(nodes: list[GridCompute], row_axes: list[E.Expr], ctx: _Ctx) -> list[S.Stmt]:
    """Reductions of any stage that depend only on the row and on task inputs, computed up
    front, those over the same grid in one pass (layer_norm's sum and sum of squares)."""
    p = ctx.prefix
    mats = set(nodes)
    found: list[E.Expr] = []
    for n in nodes:
        bind = dict(zip(n.axes[:p], row_axes))
        for r in collect(n.value, ReduceCompute):
            if collect(r.value, ReduceCompute) or _reads_any(r, mats):  # type: ignore[attr-defined]
                continue
            if E.free_vars(r) & set(n.axes[p:]):
                continue  # depends on more than the row
            rb = _Reads(ctx).visit(substitute(r, bind, promote=True))
            if rb not in found:
                found.append(rb)
    if len(found) < 2:
        return []
    out: list[S.Stmt] = []
    while found:
        group = [r for r in found if r.shape == found[0].shape]  # type: ignore[attr-defined]
        found = [r for r in found if r not in group]
        accs, stmts = _reductions(group, ctx)  # type: ignore[arg-type]
        out += stmts
        ctx.known.update(zip(group, accs))
    return out


def _reads_any(e: E.Expr, nodes: set[GridCompute]) -> bool:
    """Whether ``e`` reads one of ``nodes``, directly or through nodes that get inlined."""
    for el in collect(e, E.TensorElement):
        t = el.tensor  # type: ignore[attr-defined]
        if t in nodes or (isinstance(t, GridCompute) and _reads_any(t.value, nodes)):
            return True
    return False


def _node_nest(n: GridCompute, ctx: _Ctx) -> S.Stmt:
    """A node on its own: parallel over its outer axes (and blocks of its last axis)."""
    if not n.shape:
        return _node_body(n, ctx, {})
    free, units = _without_trailing_units(list(zip(n.axes, n.shape)))
    axes, shape = [a for a, _ in free], [d for _, d in free]
    reduces = bool(collect(n.value, ReduceCompute))
    if reduces and len(shape) > 1 and not _few_rows(shape[:-1], ctx):
        outer = shape[:-1]
        t = _loop_var(ctx, "o", _extent(outer))
        body = _node_body(n, ctx, {**dict(zip(axes[:-1], _positions(t, outer))), **units})
        return S.For(t, _extent(outer), body, _loop_kind([n]))
    # each element of a 1-d reduction (or of a few rows of them: a matrix-vector product) is a
    # whole reduction: far smaller blocks spread it
    block = REDUCE_BLOCK if reduces else BLOCK
    *outer, last = shape
    nb = _blocks(last, block)
    extent = _extent([*outer, nb]) if outer else nb
    t = _loop_var(ctx, "blk", extent)
    if E.is_const(nb, 1):
        o, b = t, E.as_expr(0)
    else:
        o, b = (t // E.cast(nb, t.type), t % E.cast(nb, t.type)) if outer else (E.as_expr(0), t)
    bind = {**(dict(zip(axes[:-1], _positions(o, outer))) if outer else {}), **units}
    if E.is_const(nb, 1):
        return S.For(t, extent, _row(n, ctx, bind, E.as_expr(0), last, axes[-1]), _loop_kind([n]))
    start = E.Var(ctx.names.fresh("start"), last.type)
    length = E.Var(ctx.names.fresh("length"), last.type)
    body = S.seq([S.Comment(f"blocks of {block} along the last axis spread even one row over every core"),
                  S.Let(start, E.cast(b, last.type) * block), S.Let(length, E.minimum(last - start, block)),
                  _row(n, ctx, bind, start, length, axes[-1])])
    return S.For(t, extent, body, _loop_kind([n]))


def _few_rows(outer: Sequence[E.Expr], ctx: _Ctx) -> bool:
    """Whether ``outer`` holds fewer rows than twice the cores (too few to share out)."""
    rows = _count(outer)
    return rows is not None and rows < 2 * ctx.target.num_cores


def _node_body(n: GridCompute, ctx: _Ctx, bind: dict[E.Var, E.Expr]) -> S.Stmt:
    """The loops over the axes of ``n`` not bound by ``bind``; the last one vectorized."""
    free = [(a, d) for a, d in zip(n.axes, n.shape) if a not in bind]
    if not free:
        value = E.cast(_Reads(ctx).visit(substitute(n.value, bind, promote=True)), n.dtype)
        value, pre = _reduce_all(value, ctx)
        return S.seq([*pre, _store(n, ctx, bind, value)])
    free, units = _without_trailing_units(free)
    outer, (axis, last_extent) = free[:-1], free[-1]
    loops_vars = {a: E.Var(ctx.names.fresh(a.name), a.type) for a, _ in outer}
    inner = _row(n, ctx, {**bind, **units, **loops_vars}, E.as_expr(0), last_extent, axis)
    for (a, d) in reversed(outer):
        inner = S.For(loops_vars[a], d, inner)
    return inner


def _without_trailing_units(free: list[tuple[E.Var, E.Expr]]
                            ) -> tuple[list[tuple[E.Var, E.Expr]], dict[E.Var, E.Expr]]:
    """``(axis, extent)`` pairs less the trailing ones of extent 1, and those axes bound to 0:
    a row runs along the last axis of any length (a mean kept as ``(C, 1, 1)`` vectorizes
    over its channels)."""
    k = len(free)
    while k > 1 and E.is_const(free[k - 1][1], 1):
        k -= 1
    return free[:k], {a: E.as_expr(0) for a, _ in free[k:]}


def _store(n: GridCompute, ctx: _Ctx, bind: dict[E.Var, E.Expr], value: E.Expr) -> S.Stmt:
    var = ctx.tensors[n]
    idx = tuple(bind.get(a, a) for a in n.axes)
    if n in ctx.local:
        idx = idx[ctx.prefix:]
        if not idx:
            return S.Assign(var, value)
    return S.BufferStore(var, idx, value)


def _row(n: GridCompute, ctx: _Ctx, bind: dict[E.Var, E.Expr], start: E.Expr, length: E.Expr,
         axis: E.Var | None = None) -> S.Stmt:
    """``n`` along ``axis`` (its last, or one that only axes bound to 0 follow) for positions
    ``start .. start + length``."""
    last = n.axes[-1] if axis is None else axis
    j = E.Var(ctx.names.fresh(last.name), last.type)
    value = E.cast(_Reads(ctx).visit(substitute(n.value, {**bind, last: start + j}, promote=True)), n.dtype)
    # reductions that do not depend on the row's axis: once, before the loop
    pre: list[S.Stmt] = []
    value, pre = _reduce_all(value, ctx, keep_if_mentions=j)
    var = ctx.tensors[n]
    cut = ctx.prefix if n in ctx.local else 0

    def out_idx(jj: E.Expr) -> tuple[E.Expr, ...]:
        return tuple(start + jj if a is last else bind.get(a, a) for a in n.axes)[cut:]
    if n.dtype == float32:
        span = _vector_span(value, j, E.as_expr(0), length, var, out_idx, ctx)
        if span is not None:
            return S.seq([*pre, span])
        split = interior(value, j)
        if split is not None:
            # vectorize where every bounds check passes; the edges keep their checks
            lo_e, hi_e, inner = split
            lo, hi = E.Var(ctx.names.fresh("lo"), j.type), E.Var(ctx.names.fresh("hi"), j.type)
            lo_v = E.Constant(0, j.type) if lo_e is None else E.cast(E.minimum(E.maximum(lo_e, 0), length), j.type)
            hi_v = length if hi_e is None else E.cast(E.maximum(E.minimum(hi_e, length), lo), j.type)
            span = _vector_span(inner, j, lo, hi - lo, var, out_idx, ctx)
            if span is not None:
                return S.seq([*pre, S.Comment("bounds checks only at the edges of the row"),
                              S.Let(lo, lo_v), S.Let(hi, hi_v),
                              _scalar_span(value, j, E.as_expr(0), lo, var, out_idx, ctx), span,
                              _scalar_span(value, j, hi, length - hi, var, out_idx, ctx)])
    return S.seq([*pre, _scalar_span(value, j, E.as_expr(0), length, var, out_idx, ctx)])


def _vector_span(value: E.Expr, j: E.Var, base: E.Expr, count: E.Expr, var: E.Var, out_idx: Any,
                 ctx: _Ctx) -> S.Stmt | None:
    """``value`` stored for ``j`` in ``[base, base + count)``: full vectors, then one masked tail.
    A value that reduces LONG_REDUCTION terms or more per vector (a global average pool's sum
    over every pixel) takes ACCUMULATORS vectors a step first, their reductions in one loop
    nest, so that the chains of adds run side by side rather than each waiting on its own
    latency; a 3x3 window's few terms do not gain (measured slower)."""
    lanes = ctx.lanes
    head: list[S.Stmt] = []
    long = any((_count(r.shape) or 0) >= LONG_REDUCTION  # type: ignore[attr-defined]
               for r in collect(value, ReduceCompute))
    steps = _vector_steps(value, j, base, count, var, out_idx, ctx) if long else None
    if steps is not None:
        head, done = steps
        base, count = base + done, count - done
    c = E.Var(ctx.names.fresh("c"), j.type)
    full = _vector_chunk(value, j, base + c * lanes, None, ctx)
    if full is None:
        return None
    tail0 = E.Var(ctx.names.fresh("tail"), j.type)
    rest = E.Var(ctx.names.fresh("rest"), j.type)
    tail = _vector_chunk(value, j, base + tail0, rest, ctx)
    assert tail is not None
    return S.seq([*head,
                  S.For(c, count // lanes, S.seq([*full[0], S.VectorStore(var, out_idx(base + c * lanes), full[1])])),
                  S.Let(tail0, count // lanes * lanes), S.Let(rest, count - tail0),
                  S.If(0 < rest, S.seq([*tail[0], S.VectorStore(var, out_idx(base + tail0), tail[1], rest)]))])


def _vector_steps(value: E.Expr, j: E.Var, base: E.Expr, count: E.Expr, var: E.Var, out_idx: Any,
                  ctx: _Ctx) -> tuple[list[S.Stmt], E.Var] | None:
    """The loop over ``j`` in steps of ACCUMULATORS vectors, each vector's reductions fused into
    one nest (:func:`_fused_nest`), and the variable holding how many elements it covers; None
    when the vectors' statements differ in shape."""
    lanes, n = ctx.lanes, ACCUMULATORS
    step = E.Var(ctx.names.fresh("c"), j.type)
    parts = [_vector_chunk(value, j, base + (step * n + u) * lanes, None, ctx) for u in range(n)]
    if any(p is None for p in parts) or len({len(p[0]) for p in parts}) != 1:  # type: ignore[index]
        return None
    body = [_fused_nest(list(stmts)) for stmts in zip(*(p[0] for p in parts))]  # type: ignore[index]
    stores = [S.VectorStore(var, out_idx(base + (step * n + u) * lanes), p[1])  # type: ignore[index]
              for u, p in enumerate(parts)]
    done = E.Var(ctx.names.fresh("done"), j.type)
    steps = count // (lanes * n)
    return [S.For(step, steps, S.seq([*body, *stores])), S.Let(done, steps * (lanes * n))], done


def _fused_nest(nests: list[S.Stmt]) -> S.Stmt:
    """Loop nests of the same extents as one nest whose body runs each nest's body in turn
    (their loop variables renamed to the first's); other statements one after another."""
    first = nests[0]
    if isinstance(first, S.For) and all(isinstance(n, S.For) and expr_text(n.extent) == expr_text(first.extent)
                                        for n in nests):
        bodies = [substitute(n.body, {n.var: first.var}) for n in nests]  # type: ignore[attr-defined]
        return S.For(first.var, first.extent, _fused_nest(bodies), first.kind)
    return S.seq(nests)


def _scalar_span(value: E.Expr, j: E.Var, base: E.Expr, count: E.Expr, var: E.Var, out_idx: Any,
                 ctx: _Ctx) -> S.Stmt:
    """``value`` stored element by element for ``j`` in ``[base, base + count)``; reductions that
    need ``j`` are computed per element."""
    jj = E.Var(ctx.names.fresh(j.name), j.type)
    body_value, body_pre = _reduce_all(substitute(value, {j: base + jj}), ctx)
    return S.For(jj, count, S.seq([*body_pre, S.BufferStore(var, out_idx(base + jj), body_value)]),
                 "serial" if body_pre else "vectorize")


def _vector_chunk(value: E.Expr, j: E.Var, j0: E.Expr, count: E.Expr | None,
                  ctx: _Ctx) -> tuple[list[S.Stmt], E.Expr] | None:
    """``value`` for ``lanes`` consecutive ``j`` from ``j0``: statements (the reductions
    along ``j``, accumulated lane-wise in vector registers) and the vector expression. None
    when some part cannot be vectorized along ``j``."""
    lanes = ctx.lanes
    stmts: list[S.Stmt] = []
    vectors: dict[E.Var, E.Expr] = {}
    while True:
        reds = [r for r in collect(value, ReduceCompute) if not collect(r.value, ReduceCompute)]  # type: ignore[attr-defined]
        if not reds:
            break
        r: ReduceCompute = reds[0]  # type: ignore[assignment]
        if r.kind not in _HORIZONTAL or r.value.type != float32:
            return None
        axes = {a: E.Var(ctx.names.fresh(a.name), a.type) for a in r.axes}
        v = vectorize_expr(substitute(r.value, axes), j, j0, lanes, count, vectors)
        if v is None:
            return None
        vacc = E.Var(ctx.names.fresh(f"{r.kind}_vec"), v.type)
        loop: S.Stmt = S.Assign(vacc, E.Binary(_COMBINE[r.kind], vacc, v))
        for a, d in reversed(list(zip(axes.values(), r.shape))):
            loop = S.For(a, d, loop)
        stmts += [S.Declare(vacc, E.Broadcast(_identity(r.kind, float32), lanes)), loop]
        if r.kind == "mean":
            stmts.append(S.Assign(vacc, vacc / E.Broadcast(E.cast(_extent(r.shape), float32), lanes)))
        # the value reads a scalar stand-in; the vectorizer reads the accumulator for it
        stand_in = E.Var(ctx.names.fresh(f"{r.kind}_lane"), float32)
        vectors[stand_in] = vacc
        value = substitute_node(value, r, stand_in)
    vexpr = vectorize_expr(value, j, j0, lanes, count, vectors)
    return None if vexpr is None else (stmts, vexpr)


def _reduce_all(value: E.Expr, ctx: _Ctx, keep_if_mentions: E.Var | None = None) -> tuple[E.Expr, list[S.Stmt]]:
    """Computes the reductions in ``value`` into scalars (innermost first) and returns the
    value reading those scalars; with ``keep_if_mentions``, reductions mentioning that
    variable are left in place."""
    pre: list[S.Stmt] = []
    for r, acc in ctx.known.items():
        value = substitute_node(value, r, acc)
    while True:
        todo = [r for r in collect(value, ReduceCompute)
                if not collect(r.value, ReduceCompute)  # type: ignore[attr-defined]
                and (keep_if_mentions is None or keep_if_mentions not in E.free_vars(r))]
        if not todo:
            return value, pre
        # reductions over the same grid share one loop nest: one pass over the data
        group = [r for r in dict.fromkeys(todo) if r.shape == todo[0].shape]  # type: ignore[attr-defined]
        accs, stmts = _reductions(group, ctx)  # type: ignore[arg-type]
        pre += stmts
        for r, acc in zip(group, accs):
            value = substitute_node(value, r, acc)


class _ReplaceNode(Rewriter):
    def __init__(self, old: E.Expr, new: E.Expr):
        self.old, self.new = old, new

    def visit(self, node):  # type: ignore[override]
        if node == self.old:
            return self.new
        return super().visit(node)


def substitute_node(e: E.Expr, old: E.Expr, new: E.Expr) -> E.Expr:
    return _ReplaceNode(old, new).visit(e)


def _reductions(rs: list[ReduceCompute], ctx: _Ctx) -> tuple[list[E.Var], list[S.Stmt]]:
    """Statements that leave each reduction's value in a fresh scalar; reductions over the
    same grid run in one loop nest. The innermost axis is accumulated in vector registers
    when every value vectorizes along it."""
    axes = {a: E.Var(ctx.names.fresh(a.name), a.type) for a in rs[0].axes}
    accs = [E.Var(ctx.names.fresh(f"{r.kind}_acc"), r.type) for r in rs]
    values = [substitute(r.value, dict(zip(r.axes, axes.values()))) for r in rs]
    if len(rs) > 1 and any(r.kind in ("argmax", "argmin") for r in rs):
        split = [_reductions([r], ctx) for r in rs]
        return [a for s in split for a in s[0]], [st for s in split for st in s[1]]
    if rs[0].kind in ("argmax", "argmin"):
        return accs, _arg_reduction(rs[0], values[0], axes, accs[0], ctx)
    stmts: list[S.Stmt] = [S.Declare(a, _identity(r.kind, r.value.type)) for r, a in zip(rs, accs)]  # type: ignore[arg-type]
    *outer, (last, extent) = list(zip(axes.values(), rs[0].shape))
    lanes = ctx.lanes
    c = E.Var(ctx.names.fresh("c"), rs[0].axes[-1].type)
    vvalues = [vectorize_expr(v, last, c * lanes, lanes)
               if r.kind in _HORIZONTAL and r.value.type == float32 else None for r, v in zip(rs, values)]
    if all(v is not None for v in vvalues):
        inner = _vector_accumulate(rs, accs, values, vvalues, c, last, extent, ctx)  # type: ignore[arg-type]
    else:
        inner = S.For(last, extent, S.seq([S.Assign(a, E.binary(_COMBINE[r.kind], a, v))
                                          for r, a, v in zip(rs, accs, values)]))
    for v, d in reversed(outer):
        inner = S.For(v, d, inner)
    stmts.append(inner)
    for r, a in zip(rs, accs):
        if r.kind == "mean":
            stmts.append(S.Assign(a, a / E.cast(_extent(r.shape), r.value.type)))  # type: ignore[arg-type]
    return accs, stmts


def _vector_accumulate(rs: list[ReduceCompute], accs: list[E.Var], values: list[E.Expr],
                       vvalues: list[E.Expr], c: E.Var, last: E.Var, extent: E.Expr, ctx: _Ctx) -> S.Stmt:
    """ACCUMULATORS independent vector accumulators per reduction hide the latency of the
    combining instruction; then the leftover vectors, one horizontal reduction each, and
    the scalar tail."""
    lanes = ctx.lanes
    nvec = E.Var(ctx.names.fresh("nvec"), extent.type)
    u = E.Var(ctx.names.fresh("c"), extent.type)
    decls: list[S.Stmt] = []
    steps: list[S.Stmt] = []
    rest: list[S.Stmt] = []
    finish: list[S.Stmt] = []
    tail: list[S.Stmt] = []
    for r, acc, value, vvalue in zip(rs, accs, values, vvalues):
        combine = _COMBINE[r.kind]
        vaccs = [E.Var(ctx.names.fresh(f"{r.kind}_vec"), vvalue.type) for _ in range(ACCUMULATORS)]
        decls += [S.Declare(a, E.Broadcast(_identity(r.kind, float32), lanes)) for a in vaccs]
        steps += [S.Assign(a, E.Binary(combine, a, substitute(vvalue, {c: c * ACCUMULATORS + k})))
                  for k, a in enumerate(vaccs)]
        rest.append(S.Assign(vaccs[0], E.Binary(combine, vaccs[0],
                                                substitute(vvalue, {c: nvec // ACCUMULATORS * ACCUMULATORS + u}))))
        total: E.Expr = vaccs[0]
        for a in vaccs[1:]:
            total = E.Binary(combine, total, a)
        finish.append(S.Assign(acc, E.binary(combine, acc, E.call(_HORIZONTAL[r.kind], total))))
        tail.append(S.Assign(acc, E.binary(combine, acc, substitute(value, {last: nvec * lanes + last}))))
    return S.seq([S.Let(nvec, extent // lanes), *decls,
                  S.For(c, nvec // ACCUMULATORS, S.seq(steps)),
                  S.For(u, nvec % ACCUMULATORS, S.seq(rest)),
                  *finish,
                  S.For(last, extent - nvec * lanes, S.seq(tail))])


def _arg_reduction(r: ReduceCompute, value: E.Expr, axes: dict[E.Var, E.Var], acc: E.Var,
                   ctx: _Ctx) -> list[S.Stmt]:
    """argmax / argmin: the first index of the best value."""
    t = r.value.type
    assert isinstance(t, DataType)
    best = E.Var(ctx.names.fresh("best"), t)
    (k,) = axes.values()
    better = value > best if r.kind == "argmax" else value < best
    return [S.Declare(acc, E.Constant(0, acc.type)),  # type: ignore[arg-type]
            S.Declare(best, _identity("max" if r.kind == "argmax" else "min", t)),
            S.For(k, r.shape[0], S.If(better, S.seq([S.Assign(best, value),
                                                      S.Assign(acc, E.cast(k, acc.type))])))]  # type: ignore[arg-type]
