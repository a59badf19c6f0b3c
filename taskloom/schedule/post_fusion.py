"""Post-scheduling fusion (Hidet, section 4.2): a fused group's prologues and epilogues
are added to the scheduled program of its anchor, not to its definition.

A template is written against abstract operands -- for a contraction ``A[b, m, k]``,
``B[b, k, n]`` and the result ``C[b, m, n]`` -- and promises only this: it reads ``A``
and ``B`` by element or copies a vector of them into a buffer of its own (packing,
``P[..] = vload(B[b, k, n], L, count)``), and writes ``C`` by (vector) stores.
:func:`fuse_contraction` then

- replaces every read ``A[b, m, k]`` by the prologue: the expression the group computes
  for that element from its true inputs (a transpose reads ``x[k, m]``, img2col reads the
  input window, and with no prologue it is the input itself);
- replaces every packing copy by the prologue vectorized along the copied axis (one masked
  load when the operand is an input read in order), lane by lane otherwise; a template whose
  copies all start at multiples of the vector length says so (the ``pack_aligned``
  attribute), which lets an NHWC window vectorize along its channels, and one that copies A
  by runs says how long they are (``pack_a_run``: a stem's window row); a copy into a
  register of vectors (``bv[v] = vload(B[b, k, n], L, count)``, an operand read in place)
  is a packing copy too;
- replaces a prefetch of ``C[b, m, n]`` by prefetches of what the epilogue reads there from
  tensors that differ by row (a residual), or by nothing;
- replaces every store ``C[b, m, n:n+L] = v`` by the epilogue evaluated on ``v``, vectorized
  along ``n`` when the epilogue allows (bias, activations, residual adds), lane by lane
  otherwise, written to the group's true output at the element's offset.

So no intermediate tensor exists and a template knows nothing about fusion. Every tensor of
the fused kernel is passed flat (one dimension), so an epilogue that reads a 4-d residual
at a flattened column still sees consecutive elements as consecutive.

A template may instead take ``B`` already packed (its ``prepacked_b`` attribute: B is a
weight, packed once when the model is compiled): then ``B`` is a parameter of its own,
kept as it is, and the task's inputs that only ``B`` read are no parameters of the fused
kernel (its ``inputs`` attribute lists the positions of those that are).
"""
from __future__ import annotations

import re

from taskloom.errors import ScheduleError
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.compute import TensorInput
from taskloom.ir.dtypes import TensorType, index_type
from taskloom.ir.functor import Rewriter, collect, substitute
from taskloom.ir.index import prod, row_major_offset
from taskloom.schedule.contraction import Contraction
from taskloom.schedule.vectorize import vectorize_expr
from taskloom.ir.arith import simplify_expr


def _flat_size(name: str, t: TensorType) -> int:
    size = simplify_expr(E.as_expr(prod(t.shape)))
    if not isinstance(size, E.Constant):
        raise ScheduleError(f"post-scheduling fusion: tensor '{name}' has a symbolic shape {t.shape}")
    return int(size.value)


def _flat_var(name: str, t: TensorType) -> E.Var:
    """The flat parameter of a tensor: its size an int, or an expression of its symbols."""
    return E.Var(name, TensorType(t.dtype, (simplify_expr(E.as_expr(prod(t.shape))),)))


def flat_prologue_a(con: Contraction) -> E.Expr:
    """A's prologue as the fused kernel reads it, every tensor flat: ``x[n, y, x, c]`` of an
    NHWC window becomes one offset, in which a window row's ``KW * C`` channels are one run."""
    params = {t: _flat_var(t.name, t.type) for t in con.task.inputs}
    return simplify_expr(_FlatReads(params).visit(con.a), con.bounds)


def inputs_beside_panels(con: Contraction) -> list[int]:
    """The positions of the task inputs a kernel taking B's prepacked panels still reads: those
    of A's prologue and of the epilogue (an input only B read is in the panels)."""
    read = set(collect(con.a, TensorInput)) | set(collect(con.epilogue, TensorInput))
    return [k for k, t in enumerate(con.task.inputs) if t in read]


def fused_arg_specs(con: Contraction) -> list[tuple[tuple[int], str]]:
    """The (shape, dtype) of each parameter of ``con``'s fused kernel, in order: every
    tensor flat (what :func:`fuse_contraction` declares, for timing it with made-up data)."""
    return [((_flat_size(t.name, t.type), ), t.dtype.name)  # type: ignore[arg-type]
            for t in (*con.task.inputs, con.output)]


class _FlatReads(Rewriter):
    """Reads of the task's inputs become reads of the kernel's flat parameters."""

    def __init__(self, params: dict[TensorInput, E.Var]):
        self.params = params

    def visit_TensorElement(self, e: E.TensorElement) -> E.Expr:
        idx = tuple(self.visit(i) for i in e.indices)
        t = e.tensor
        if isinstance(t, TensorInput):
            return E.TensorElement(self.params[t], (E.as_expr(row_major_offset(idx, t.shape)),))
        return E.TensorElement(t, idx)


class _Fuse(Rewriter):
    def __init__(self, con: Contraction, A: E.Var, B: E.Var | None, C: E.Var, params: dict[TensorInput, E.Var],
                 out: E.Var, aligned: bool = False, a_run: int = 0):
        self.con, self.A, self.B, self.C, self.out = con, A, B, C, out
        self.aligned = aligned  # packing copies start at multiples of the vector length
        self.a_run = a_run      # A's copies each lie in one run of this many elements of K
        flat = _FlatReads(params)
        bounds = con.bounds
        self.a = simplify_expr(flat.visit(con.a), bounds)
        self.b = simplify_expr(flat.visit(con.b), bounds) if B is not None else None
        self.epilogue = simplify_expr(flat.visit(con.epilogue), bounds)
        self.tiles = 0

    def _offset(self, b: E.Expr, m: E.Expr, n: E.Expr) -> E.Expr:
        c = self.con
        return simplify_expr((b * c.M + m) * c.N + n)

    def visit_TensorElement(self, e: E.TensorElement) -> E.Expr:
        c = self.con
        if e.tensor is self.A:
            b, m, k = (self.visit(i) for i in e.indices)
            return substitute(self.a, {c.vb: b, c.vm: m, c.vk: k})
        if e.tensor is self.B:
            b, k, n = (self.visit(i) for i in e.indices)
            return substitute(self.b, {c.vb: b, c.vk: k, c.vn: n})
        if e.tensor is self.C:
            raise ScheduleError("post-scheduling fusion: the template reads its result C; a template may "
                                "only store to C (keep partial sums in a buffer of its own)")
        return self.generic_visit(e)

    def visit_VectorLoad(self, e: E.VectorLoad) -> E.Expr:
        if e.tensor in (self.A, self.B, self.C):
            raise ScheduleError(f"post-scheduling fusion: the template loads a vector of {e.tensor.name} into an "
                                "expression; operands are read by element, or copied whole into a buffer "
                                "(P[..] = vload(B[..], L, count))")
        return self.generic_visit(e)

    def _pack(self, s: S.VectorStore | S.BufferStore, load: E.VectorLoad) -> S.Stmt:
        """``P[..] = vload(A|B[..], L, count)``: the prologue for those lanes, zero past ``count``.
        ``P`` is a buffer of elements, or a register tensor of vectors (a micro-kernel reading
        its operand in place), which takes a prologue that goes lane by lane through a
        vector of scratch."""
        c = self.con
        into_register = isinstance(s, S.BufferStore)
        run = self.a_run if load.tensor is self.A else 0
        stored = getattr(s, "count", None)
        if load.stride != 1 or (stored is not None and not (run and stored == load.count)):
            raise ScheduleError("post-scheduling fusion: a packing copy must be a full contiguous vector "
                                "(or, copying A by runs, one stored as far as it was loaded)")
        b, row, start = (self.visit(i) for i in load.indices)
        if load.tensor is self.B:  # lanes run along n
            expr, along, extent = substitute(self.b, {c.vb: b, c.vk: row}), c.vn, c.N
        else:  # lanes run along k
            expr, along, extent = substitute(self.a, {c.vb: b, c.vm: row}), c.vk, c.K
        count = self.visit(load.count) if load.count is not None else None
        lanes = load.lanes
        idx = tuple(self.visit(i) for i in s.indices)
        vector = vectorize_expr(expr, along, start, lanes, count, aligned=self.aligned, run=run)
        if run:  # the lanes past a run belong to the next: stored masked, not zeroed
            if not isinstance(vector, E.VectorLoad):
                raise ScheduleError(f"post-scheduling fusion: A does not copy by runs of {run} along K")
            return S.VectorStore(s.tensor, idx, vector, count)
        if into_register and (vector is None or not (count is None or isinstance(vector, E.VectorLoad))):
            self.tiles += 1
            tile = E.Var(f"prologue_tile{self.tiles}", TensorType(load.type.base, (E.as_expr(lanes),)))
            return S.seq([S.Declare(tile, scope="local"), self._pack(S.VectorStore(tile, (E.as_expr(0),), load), load),
                          S.BufferStore(s.tensor, idx, E.VectorLoad(tile, (E.as_expr(0),), lanes))])
        if vector is not None:
            if count is None or isinstance(vector, E.VectorLoad):  # a masked load already zeroes the rest
                return S.BufferStore(s.tensor, idx, vector) if into_register else S.VectorStore(s.tensor, idx, vector)
            return S.seq([S.VectorStore(s.tensor, idx, E.Broadcast(E.const(0.0, vector.type.base), lanes)),
                          S.VectorStore(s.tensor, idx, vector, count)])
        lane = E.Var("lane", index_type)
        # lanes past the operand's edge read its last element (never used: they are zeroed)
        scalar = substitute(expr, {along: E.minimum(start + lane, extent - 1)})
        if count is not None:
            scalar = E.Select(E.binary("lt", lane, count), scalar, E.const(0.0, scalar.type))
        return S.seq([S.Comment("the prologue element by element: it does not vectorize along the copy"),
                      S.For(lane, E.as_expr(lanes),
                            S.BufferStore(s.tensor, (*idx[:-1], simplify_expr(idx[-1] + lane)), scalar),
                            "vectorize")])

    def visit_Prefetch(self, s: S.Prefetch) -> S.Stmt:
        """A prefetch of ``C[b, m, n]`` asks for what the epilogue reads at that element from
        tensors that differ by row (a residual; not a bias): nothing when there are none."""
        if s.tensor is not self.C:
            return self.generic_visit(s)
        c = self.con
        b, m, n = (self.visit(i) for i in s.indices)
        asks: dict[tuple, S.Stmt] = {}
        for e in collect(self.epilogue, E.TensorElement):
            if c.vm in E.free_vars(e.indices[0]):
                at = tuple(simplify_expr(substitute(i, {c.vb: b, c.vm: m, c.vn: n})) for i in e.indices)
                asks.setdefault((e.tensor, at), S.Prefetch(e.tensor, at))
        return S.seq(list(asks.values()))

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        if isinstance(s.value, E.VectorLoad) and s.value.tensor in (self.A, self.B) and s.tensor is not self.C:
            return self._pack(s, s.value)  # a register of the micro-kernel loaded from its operand
        if s.tensor is not self.C:
            return self.generic_visit(s)
        c = self.con
        b, m, n = (self.visit(i) for i in s.indices)
        value = substitute(self.epilogue, {c.vb: b, c.vm: m, c.vn: n, c.acc: self.visit(s.value)})
        return S.BufferStore(self.out, (self._offset(b, m, n),), value)

    def visit_VectorStore(self, s: S.VectorStore) -> S.Stmt:
        if isinstance(s.value, E.VectorLoad) and s.value.tensor in (self.A, self.B) and s.tensor is not self.C:
            return self._pack(s, s.value)
        if s.tensor is not self.C:
            return self.generic_visit(s)
        c = self.con
        b, m, n0 = (self.visit(i) for i in s.indices)
        value = self.visit(s.value)
        lanes = value.type.lanes  # type: ignore[union-attr]
        count = self.visit(s.count) if s.count is not None else None
        epi = substitute(self.epilogue, {c.vb: b, c.vm: m})
        acc = E.Var("acc_v", value.type)
        vector = vectorize_expr(epi, c.vn, n0, lanes, count, vectors={c.acc: acc})
        offset = self._offset(b, m, n0)
        if vector is not None:
            return S.seq([S.Let(acc, value), S.VectorStore(self.out, (offset,), vector, count)])
        # lane by lane: the epilogue gathers or is not float32
        self.tiles += 1
        tile = E.Var(f"epilogue_tile{self.tiles}", TensorType(c.acc.type, (E.as_expr(lanes),)))  # type: ignore[arg-type]
        lane = E.Var("lane", index_type)
        scalar = substitute(epi, {c.vn: n0 + lane, c.acc: E.TensorElement(tile, (lane,))})
        body: S.Stmt = S.BufferStore(self.out, (simplify_expr(offset + lane),), scalar)
        if count is not None:
            body = S.If(E.binary("lt", lane, count), body)
        return S.seq([S.Comment("the epilogue element by element: it does not vectorize along the columns"),
                      S.Declare(tile, scope="local"), S.VectorStore(tile, (E.as_expr(0),), value),
                      S.For(lane, E.as_expr(lanes), body)])


def _param_names(con: Contraction, taken: set[str]) -> list[str]:
    """Parameter names from the task's tensors, clear of the template's own names."""
    names: list[str] = []
    for t in (*con.task.inputs, con.output):
        base = re.sub(r"\W|^(?=\d)", "_", t.name) or "t"
        if t is con.output and base in names:
            base = "out"
        name = base
        while name in names or name in taken:
            name += "_"
        names.append(name)
    return names


def fuse_contraction(program: S.Function, con: Contraction, name: str | None = None) -> S.Function:
    """``program`` (a template over ``A``, ``B``, ``C``) with the group of ``con`` fused in: its
    parameters become the task's symbolic sizes (if any), then its inputs and its output,
    each flat, in that order."""
    if len(program.params) != 3:
        raise ScheduleError(f"post-scheduling fusion: template '{program.name}' must take (A, B, C), "
                            f"got {[p.name for p in program.params]}")
    A, B, C = program.params
    taken = {v.name for v in collect(program.body, E.Var)}  # type: ignore[attr-defined]
    names = _param_names(con, taken)
    params = {t: _flat_var(n, t.type) for t, n in zip(con.task.inputs, names)}
    out = _flat_var(names[-1], con.output.type)  # type: ignore[arg-type]
    # its stores run along rows of N elements of the flat output (for writing it in place)
    attrs = (*program.attrs, ("out_row", con.N)) if isinstance(con.N, int) else program.attrs
    packed = program.attr("prepacked_b", 0)
    fuse = _Fuse(con, A, None if packed else B, C, params, out, aligned=program.attr("pack_aligned", False),
                 a_run=program.attr("pack_a_run", 0))
    body = fuse.visit(program.body)
    sizes = tuple(con.task.symbols())  # symbolic sizes come first, as scalar parameters
    if not packed:
        return S.Function(name or program.name, (*sizes, *params.values(), out), body, program.kind, attrs)
    kept = inputs_beside_panels(con)
    inputs = [params[con.task.inputs[k]] for k in kept]
    return S.Function(name or program.name, (*sizes, *inputs, B, out), body, program.kind,
                      (*attrs, ("inputs", tuple(kept))))

