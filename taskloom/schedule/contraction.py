"""Recognizing a contraction in a (fused) task, so the matmul template can serve it.

A task is a contraction when exactly one of its nodes holds a reduction, that reduction is
a sum of a product ``x * y`` of float32 values, and the node's axes fall into three runs:
batch axes (both ``x`` and ``y`` depend on them), then the axes only one factor depends
on, then the axes only the other depends on. Read as a batched matmul
``C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]``, with each run flattened into one index:

- ``matmul(a, b)`` and ``batch_matmul``: ``A`` is ``a``, ``B`` is ``b``;
- ``linear(x, w)``: every leading axis of ``x`` is a row of ``A``; ``B[k, n] = w[n, k]``;
- ``conv2d`` in NCHW: ``A[o, (c, ky, kx)]`` is the weight and ``B[(c, ky, kx), (oy, ox)]``
  is the input window (img2col, read in place), batched over the images.

What the group computes around the reduction comes along as expressions: the factors
with their prologues inlined (``a``, ``b``), and the epilogue (``epilogue``): the output
element in terms of ``acc``, the sum. Fusion keeps the row-major order of the anchor's
result (:func:`taskloom.ir.compute.preserves_order`), so output element ``(b, m, n)``
sits at offset ``(b * M + m) * N + n`` of the group's output.

Sizes may be symbolic (a graph compiled for every batch or sequence length): ``Bt``, ``M``,
``N`` and ``K`` are then expressions of the task's symbols, and :attr:`Contraction.hint`
gives the ints a config is chosen for, each symbol at :data:`SYMBOL_HINT`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from taskloom.ir import expr as E
from taskloom.ir.compute import GridCompute, ReduceCompute, Task, index_bounds, inline
from taskloom.ir.dtypes import DataType, float32, index_type
from taskloom.ir.functor import Rewriter, collect, substitute
from taskloom.ir.index import is_unit, prod, row_major_offset, unravel
from taskloom.ir.arith import simplify_expr
from taskloom.ir.arith.linear import linear_form


#: The value each symbol of a symbolic contraction takes when its config is chosen: the
#: sizes a dynamic graph is tuned for until configs are chosen per range of sizes.
SYMBOL_HINT = 128


@dataclass(frozen=True)
class Contraction:
    """A task read as ``out[(b*M + m)*N + n] = epilogue(acc = sum_k a(b, m, k) * b(b, k, n))``."""

    task: Task
    batch: int | E.Expr
    M: int | E.Expr
    N: int | E.Expr
    K: int | E.Expr
    vb: E.Var
    vm: E.Var
    vn: E.Var
    vk: E.Var
    acc: E.Var
    a: E.Expr           # of vb, vm, vk
    b: E.Expr           # of vb, vk, vn
    epilogue: E.Expr    # of vb, vm, vn, acc
    output: GridCompute

    @property
    def shape(self) -> tuple:
        """``(Bt, M, N, K)``: ints, or expressions of the task's symbols."""
        return (self.batch, self.M, self.N, self.K)

    @property
    def static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def timeable(self) -> bool:
        """Whether every size is an int, the product's and its tensors' (a static product may
        read a slice of an input whose batch is symbolic): a kernel that can be timed."""
        tensors = (*self.task.inputs, self.output)
        return self.static and not any(E.free_vars(d) for t in tensors for d in t.type.shape
                                       if isinstance(d, E.Expr))

    @property
    def hint(self) -> tuple[int, int, int, int]:
        """The shape as ints, each symbol at :data:`SYMBOL_HINT`: what a config is chosen for."""
        if self.static:
            return self.shape  # type: ignore[return-value]
        values = {v: E.as_expr(SYMBOL_HINT) for d in self.shape if isinstance(d, E.Expr) for v in E.free_vars(d)}
        return tuple(d if isinstance(d, int) else int(simplify_expr(substitute(d, values)).value)  # type: ignore
                     for d in self.shape)

    @property
    def bounds(self) -> dict[E.Var, tuple[int, int | None]]:
        """The ranges of the axes, and of the symbols in the sizes: at least 1, since at 0
        there is no element to index (so ``(m*768 + n) // (s*768)`` simplifies to ``m // s``)."""
        return index_bounds((self.vb, self.vm, self.vn, self.vk), [E.as_expr(d) for d in self.shape],
                            self.task.symbols())


def _dims(dims) -> list[int | E.Expr]:
    """Sizes as ints where they fold to one (a conv's output size is arithmetic of
    constants), else as expressions of symbols."""
    out: list[int | E.Expr] = []
    for d in dims:
        d = simplify_expr(d)
        out.append(int(d.value) if isinstance(d, E.Constant) else d)
    return out


def _static(dims) -> list[int] | None:
    """The sizes as ints, or None where one is symbolic."""
    out = _dims(dims)
    return out if all(isinstance(d, int) for d in out) else None  # type: ignore[return-value]


def _product(dims) -> int | E.Expr:
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)
    folded = simplify_expr(E.as_expr(prod(list(dims))))
    return int(folded.value) if isinstance(folded, E.Constant) else folded


def _strip_casts(e: E.Expr) -> E.Expr:
    while isinstance(e, E.Cast) and e.dtype == float32 and e.value.type == float32:
        e = e.value
    return e


class _InlineExcept(Rewriter):
    """Inlines every intermediate compute except ``anchor``, whose reads become ``value``."""

    def __init__(self, anchor: GridCompute, value: E.Expr):
        self.anchor, self.value = anchor, value

    def visit_TensorElement(self, e: E.TensorElement) -> E.Expr:
        if e.tensor is self.anchor:
            return self.value
        e = self.generic_visit(e)
        if isinstance(e.tensor, GridCompute):
            return self.visit(substitute(e.tensor.value, dict(zip(e.tensor.axes, e.indices))))
        return e


@functools.lru_cache(maxsize=1024)  # (a deep model asks once per layer; tasks compare by structure)
def match_contraction(task: Task, out_dtypes: tuple[DataType, ...] = (float32,)) -> Contraction | None:
    """``task`` read as a batched matmul with a prologue and an epilogue, or None. The sum
    is of float32 products (half-precision factors are cast up in the prologue); the output
    may be of any of ``out_dtypes`` (the epilogue casts to it)."""
    if len(task.outputs) != 1 or task.outputs[0].dtype not in out_dtypes:
        return None
    out = task.outputs[0]
    anchors = [n for n in task.computes() if collect(n.value, ReduceCompute)]
    if len(anchors) != 1:
        return None
    R = anchors[0]
    reds = collect(R.value, ReduceCompute)
    if len(reds) != 1:
        return None
    red: ReduceCompute = reds[0]  # type: ignore[assignment]
    if red.kind != "sum" or red.value.type != float32:
        return None
    body = _strip_casts(inline(red.value))
    if not (isinstance(body, E.Binary) and body.op == "mul"):
        return None
    x, y = _strip_casts(body.a), _strip_casts(body.b)
    if collect(x, ReduceCompute) or collect(y, ReduceCompute):
        return None
    extents, k_ext = _dims(R.shape), _dims(red.shape)

    fx, fy = E.free_vars(x), E.free_vars(y)
    kinds: list[str] = []
    for a, d in zip(R.axes, extents):
        in_x, in_y = a in fx, a in fy
        if is_unit(d):
            kinds.append("1")  # a unit axis: index 0 whatever reads it
        elif not (in_x or in_y):
            return None  # an axis of the result neither factor reads: not a contraction
        else:
            kinds.append("b" if in_x and in_y else "x" if in_x else "y")
    # the last run of axes one factor alone reads are the columns, the run before it (the
    # other factor's) the rows, and everything before is batch
    pos = [k for k, kind in enumerate(kinds) if kind != "1"]
    if not pos or kinds[pos[-1]] == "b":
        return None
    col_kind = kinds[pos[-1]]
    row_kind = "y" if col_kind == "x" else "x"
    cut = len(pos)
    while cut > 0 and kinds[pos[cut - 1]] == col_kind:
        cut -= 1
    rows_start = cut
    while rows_start > 0 and kinds[pos[rows_start - 1]] == row_kind:
        rows_start -= 1
    role = {p: ("b" if k < rows_start else "m" if k < cut else "n") for k, p in enumerate(pos)}
    if col_kind == "x":
        x, y = y, x  # the factor that varies along the columns is B

    vb, vm, vn, vk = (E.Var(n, index_type) for n in ("b", "m", "n", "k"))
    acc = E.Var("acc", float32)
    groups = {g: [(R.axes[p], extents[p]) for p in pos if role[p] == g] for g in "bmn"}
    sub: dict[E.Var, E.Expr] = {a: E.as_expr(0) for a, k in zip(R.axes, kinds) if k == "1"}
    for g, flat in (("b", vb), ("m", vm), ("n", vn)):
        axes = groups[g]
        sub.update(zip([a for a, _ in axes], unravel(flat, [d for _, d in axes])))
    sub.update(zip(red.axes, unravel(vk, k_ext)))
    Bt, M, N = (_product([d for _, d in groups[g]]) for g in "bmn")
    K = _product(k_ext)
    bounds = {v: (0, d - 1 if isinstance(d, int) else None) for v, d in ((vb, Bt), (vm, M), (vn, N), (vk, K))}
    a_expr = simplify_expr(substitute(x, sub), bounds)
    b_expr = simplify_expr(substitute(y, sub), bounds)

    # the anchor's own value around its sum (a bias in linear, a cast), then the epilogue
    r_value = substitute(inline(_Replace(red, acc).visit(R.value)), sub)
    if out is R:
        epilogue = r_value
    else:
        flat = (vb * M + vm) * N + vn
        out_idx = unravel(flat, _dims(out.shape))
        epilogue = substitute(_InlineExcept(R, r_value).visit(out.value), dict(zip(out.axes, out_idx)))
    epilogue = simplify_expr(epilogue, bounds)
    return Contraction(task, Bt, M, N, K, vb, vm, vn, vk, acc, a_expr, b_expr, epilogue, out)


class _Replace(Rewriter):
    """Replaces one node (the anchor's reduction) by another."""

    def __init__(self, old: E.Expr, new: E.Expr):
        self.old, self.new = old, new

    def visit(self, node):  # type: ignore[override]
        if node is self.old:
            return self.new
        return super().visit(node)


# -- how the operands are read ---------------------------------------------------------

#: Cycles per packed vector of L elements when the prologue vectorizes into a plain
#: contiguous copy (a load and a store); a prologue that goes lane by lane costs a cycle
#: per element for every LANE_NODES_PER_CYCLE nodes of its scalar expression (a 3x3
#: convolution's padded window is about 80 nodes of index arithmetic and bounds checks).
VECTOR_COPY_CYCLES = 2.0
LANE_NODES_PER_CYCLE = 16.0
#: Pack costs of a plain matmul's operands: both copies vectorize.
DEFAULT_PACK = (VECTOR_COPY_CYCLES, VECTOR_COPY_CYCLES)


def pack_cost(kind: str, lanes: int) -> float:
    """Cycles per packed vector of ``lanes`` elements of a
    :func:`~taskloom.schedule.cpu.pack_kinds` kind."""
    if kind == "copy":
        return VECTOR_COPY_CYCLES
    if kind == "vec":
        return 2 * VECTOR_COPY_CYCLES
    if kind == "gather":
        return VECTOR_COPY_CYCLES + lanes / 2  # a gather costs about half a cycle per lane
    if kind.startswith("run") and kind[3:].isdigit():  # whole vectors and a masked one a run
        run = int(kind[3:])
        return VECTOR_COPY_CYCLES * -(-run // lanes) * lanes / run
    if kind.startswith("lane") and kind[4:].isdigit():
        return lanes * max(1.0, int(kind[4:]) / LANE_NODES_PER_CYCLE)
    raise ValueError(f"unknown pack kind {kind!r}")


def b_vectorizes(pack: tuple[float, float], lanes: int) -> bool:
    """Whether B, packing at ``pack[1]`` cycles a vector, copies by vectors (a plain copy or
    vector arithmetic, not a gather or lane by lane): what lets a band one tile high read it
    in place (:func:`~taskloom.schedule.templates.matmul_cpu.reads_b_in_place`)."""
    return pack[1] <= pack_cost("vec", lanes)


def plain_a_stride(shape: tuple[int, int, int, int], pack: tuple[float, float]) -> int:
    """The distance between A's rows, ``K``, when A packs by plain copies (``pack[0]``) as a
    row-major matrix does; 0 (A is packed) when its prologue computes or gathers: what the
    template is told when nothing better is known
    (:func:`~taskloom.schedule.templates.matmul_cpu.reads_a_in_place`). The learned cost
    model, which knows a tuning record only by its key, assumes it for every record, also
    for a window without padding that copies plainly but is packed (its offset is not
    ``row + k``: :func:`~taskloom.schedule.select.a_row_stride`)."""
    return int(shape[3]) if pack[0] <= pack_cost("copy", 1) else 0


def kinds_cost(kinds: tuple[str, str], lanes: int) -> tuple[float, float]:
    """Cycles per vector of packing A and B, packed as ``kinds``
    (:func:`~taskloom.schedule.cpu.pack_kinds`)."""
    return pack_cost(kinds[0], lanes), pack_cost(kinds[1], lanes)


def a_row_stride(con: Contraction, a_kind: str) -> int:
    """The distance in elements between two rows of A as the fused kernel reads them, when
    A packs by plain copies (``a_kind``, its :func:`~taskloom.schedule.cpu.pack_kinds` kind,
    is ``copy``) of one input at ``row(b, m) + k`` (a matrix, a 1x1 convolution's NHWC
    input): what decides whether the template reads A in place
    (:func:`~taskloom.schedule.templates.matmul_cpu.reads_a_in_place`); 0 otherwise. A
    3x3 window copies by vectors too, but its offset divides k into taps and channels:
    read in place, that arithmetic would run in the FMA loop."""
    a = con.a
    if con.hint[1] < 2 or a_kind != "copy" or not isinstance(a, E.TensorElement):
        return 0
    offset = E.as_expr(row_major_offset(a.indices, a.tensor.shape))
    if con.vk in E.free_vars(simplify_expr(offset - con.vk)):
        return 0

    def at(m: int) -> E.Expr:
        return simplify_expr(substitute(offset, {con.vb: E.as_expr(0), con.vm: E.as_expr(m), con.vk: E.as_expr(0)}))
    first, second = at(0), at(1)
    if not (isinstance(first, E.Constant) and isinstance(second, E.Constant)):
        return 0
    return max(0, int(second.value) - int(first.value))


def a_window_run(con: Contraction) -> int:
    """``R`` when A, as the fused kernel reads it, lies in one input at ``row(b, m) + tap(k //
    R) + k % R`` with nothing to test (a convolution's window over an NHWC input padded ahead:
    ``R = KW * C``, the channels of a window row, which lie together); 0 otherwise. The
    template can then read such an A in place, no window copied: each tile's rows from their
    bases, K in runs of ``R`` (:func:`~taskloom.schedule.templates.matmul_cpu.matmul_program`'s
    ``a_window``). A matrix is one run, read in place by :func:`a_row_stride` instead."""
    a, K = con.a, con.K
    if not isinstance(a, E.TensorElement) or not isinstance(K, int):
        return 0
    offset = simplify_expr(E.as_expr(row_major_offset(a.indices, a.tensor.shape)), con.bounds)
    runs = {int(e.b.value) for e in collect(offset, E.Binary)
            if e.op == "mod" and e.a is con.vk and isinstance(e.b, E.Constant)}
    if len(runs) != 1:
        return 0
    R = runs.pop()
    if not 1 < R < K or K % R:
        return 0
    t, c = E.Var("window_tap", index_type), E.Var("window_step", index_type)
    bounds = {**con.bounds, t: (0, K // R - 1), c: (0, R - 1)}
    split = linear_form(simplify_expr(substitute(offset, {con.vk: t * R + c}), bounds))
    rows = {con.vb, con.vm, *(v for d in con.shape if isinstance(d, E.Expr) for v in E.free_vars(d))}
    for term, coeff in split.terms.items():
        used = E.free_vars(term)
        if c in used and not (term is c and coeff == 1):
            return 0  # a step within a run must be one element
        if c not in used and not (used <= {t} or (t not in used and used <= rows)):
            return 0  # a term mixing the row and the tap
    return R if c in split.terms else 0
