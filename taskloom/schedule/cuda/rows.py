"""The CUDA rule for row reductions (softmax, layer_norm, a sum over the last axes): the
threads of a warp, or of a block, share a row.

A task qualifies when it has one output whose reductions depend only on the output's
leading axes (the row), not on its last axis: every element of a row reads the same
reduced values, so they are computed once per row, cooperatively, instead of once per
element. A reduction of one tensor over its last axes (a sum, a mean) qualifies too, each
output element a row of one (:func:`row_axes`). The kernel, for each row:

1. each reduction (innermost first): every thread of the row combines a strided share of
   the reduced elements (consecutive threads on consecutive elements, so loads coalesce),
   then the warp combines its 32 values by butterfly shuffles; with a block per row, the
   warps' results meet in shared memory between two barriers;
2. the row's elements, strided the same way, each computed from those registers.

A warp takes a row when the longest reduction has at most :data:`WARP_ROW_MAX` elements
(each thread then combines at most 32 of them), else the whole block does.
"""
from __future__ import annotations

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.arith import simplify_expr
from taskloom.ir.compute import ReduceCompute
from taskloom.ir.dtypes import DataType, TensorType, float32, index_type, int32
from taskloom.ir.functor import collect, substitute
from taskloom.ir.index import prod, unravel
from taskloom.transforms.names import NameGen

#: The longest reduction a warp takes alone; past it a block of 256 threads shares a row.
WARP_ROW_MAX = 1024
#: The fewest elements a reduction of one output element needs for a warp to share it: one
#: a lane (a 3x3 pooling window would leave 23 lanes idle and shuffle for the rest)
SHARED_MIN = 32
#: Threads a block: eight warps, enough to hide memory latency with several blocks an SM.
BLOCK = 256
_COMBINE = {"sum": "add", "mean": "add", "max": "max", "min": "min", "prod": "mul"}


def _bound_axes(r: ReduceCompute) -> set[E.Var]:
    return {a for n in collect(r, ReduceCompute) for a in n.axes}  # type: ignore[attr-defined]


def row_axes(value: E.Expr, axes: tuple[E.Var, ...]) -> int | None:
    """How many leading output axes name a row, when an output of ``axes`` whose value
    (its task's nodes inlined) is ``value`` is a row reduction this rule serves, else None.

    ``len(axes) - 1`` when every reduction depends only on the leading axes (softmax,
    layer_norm: a row of elements shares them); ``len(axes)`` when the reductions depend on
    every axis but read one tensor (a sum over the last axis: an element is a row of one,
    and a warp shares its reduction) and are not all short (a pooling window of 9 is a
    thread's); None otherwise (a contraction reads two tensors along its reduction, and
    waits for its template)."""
    reds = collect(value, ReduceCompute)
    if not axes or not reds or any(n.kind not in _COMBINE for n in reds):  # type: ignore[attr-defined]
        return None
    uses = set().union(*((E.free_vars(n) - _bound_axes(n)) for n in reds))  # type: ignore[arg-type]
    if uses <= set(axes[:-1]):
        return len(axes) - 1
    read = {e.tensor for n in reds for e in collect(n, E.TensorElement)}  # type: ignore[attr-defined]
    return len(axes) if len(read) == 1 and not _short(reds) else None


def _short(reds: list) -> bool:
    """Whether every reduction has fewer than :data:`SHARED_MIN` elements (a pooling
    window), which a thread reduces alone."""
    sizes = [simplify_expr(E.as_expr(prod(r.shape))) for r in reds]
    return all(isinstance(n, E.Constant) and int(n.value) < SHARED_MIN for n in sizes)


def register_type(t: DataType) -> DataType:
    """The type a row's partial results travel in: shuffles move 32 bits, and 16-bit floats
    summed in their own precision lose digits, so narrower types widen to 32 bits."""
    if t.nbytes >= 4:
        return t
    return float32 if t.is_float() else int32


def _combine(kind: str, a: E.Expr, b: E.Expr) -> E.Expr:
    return E.binary(_COMBINE[kind], a, b)


class _Row:
    """The statements of one row's kernel body, ``threads`` threads sharing the row."""

    def __init__(self, names: NameGen, threads: int, lane: E.Var, warp: E.Var):
        self.names, self.threads, self.lane, self.warp = names, threads, lane, warp
        self.partials: dict[str, E.Var] = {}  # shared buffers of the warps' results, by type

    def reduce(self, r: ReduceCompute, identity: E.Expr) -> tuple[E.Expr, list[S.Stmt]]:
        """``r`` as a register every thread of the row holds (rounded back to ``r``'s type
        when it is narrower than 32 bits), and the statements for it."""
        wide = register_type(r.type)  # type: ignore[arg-type]
        acc = E.Var(self.names.fresh(f"{r.kind}_acc"), wide)
        count = simplify_expr(E.as_expr(prod(r.shape)))
        t = E.Var(self.names.fresh("t"), index_type)
        k = E.Var(self.names.fresh("k"), index_type)
        value = E.cast(substitute(r.value, dict(zip(r.axes, unravel(k, r.shape)))), wide)
        share = S.For(t, E.cdiv(count, self.threads), S.seq([
            S.Let(k, t * self.threads + self.lane),
            S.If(k < count, S.Assign(acc, _combine(r.kind, acc, value)))]))
        stmts: list[S.Stmt] = [S.Declare(acc, E.cast(identity, wide)), S.Comment("each thread a strided share of the row"),
                               share, S.Comment("the warp's 32 values combined by butterfly shuffles")]
        for m in (16, 8, 4, 2, 1):
            stmts.append(S.Assign(acc, _combine(r.kind, acc, gpu.shuffle("shfl_xor", acc, m))))
        if self.threads > gpu.WARP_SIZE:
            stmts += self._across_warps(r.kind, acc)
        if r.kind == "mean":
            stmts.append(S.Assign(acc, acc / E.cast(count, wide)))
        return (acc if wide == r.type else E.cast(acc, r.type)), stmts

    def _across_warps(self, kind: str, acc: E.Var) -> list[S.Stmt]:
        """The warps' results through shared memory; barriers before the reads and after
        them, so the next reduction's writes wait for every read."""
        warps = self.threads // gpu.WARP_SIZE
        t = acc.type
        partial = self.partials.get(t.name)  # type: ignore[union-attr]
        decl: list[S.Stmt] = []
        if partial is None:
            partial = E.Var(self.names.fresh("partial"), TensorType(t, (E.as_expr(warps),)))  # type: ignore[arg-type]
            self.partials[t.name] = partial  # type: ignore[union-attr]
            decl = [S.Declare(partial, scope="shared")]
        total = E.TensorElement(partial, (E.as_expr(0),))
        for w in range(1, warps):
            total = _combine(kind, total, E.TensorElement(partial, (E.as_expr(w),)))
        return [*decl, S.Comment("the warps' results meet in shared memory"),
                S.If(E.eq(self.lane % gpu.WARP_SIZE, 0), S.BufferStore(partial, (self.warp,), acc)),
                S.Barrier(), S.Assign(acc, total), S.Barrier()]
