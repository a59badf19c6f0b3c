"""Results written in place into a concatenation or a padded tensor.

A group made only of ``concat`` and ``pad`` nodes (Inception's branches joined along the
channels, the padding ahead of a convolution that reads its window in place) copies each of
its inputs into a block of its result: one more pass over every element. When each input is
an intermediate that only this group reads, made by a kernel that writes it through its own
index, that kernel stores straight into the block instead: the input's buffer is the
result's, the kernel's accesses are shifted by the block's offset (:func:`write_into`), and
the group only fills what no input covers (a pad's border, :func:`fill_task`), or nothing at
all (a concatenation).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from taskloom.graph.fusion import FusedGroup
from taskloom.graph.graph import Graph
from taskloom.graph.tensor import Tensor
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.arith import simplify_expr
from taskloom.ir.compute import Task, compute
from taskloom.ir.dtypes import TensorType, index_type_for
from taskloom.ir.functor import Rewriter, collect
from taskloom.ir.index import max_elements, row_major_offset, unravel
from taskloom.ops.transform import pad_widths

PLACING_OPS = ("pad", "concat")


@dataclass(frozen=True)
class Block:
    """Where an input of a placing group lies in that group's result: ``offsets`` per axis."""

    host: Tensor
    offsets: tuple[int, ...]


@dataclass
class Placing:
    """A placing group: its result, its inputs' blocks of it and the boxes (offsets, shape)
    of it that it fills with ``value``."""

    group: int
    host: Tensor
    blocks: dict[int, Block]  # id(input) -> its block
    boxes: list[tuple[tuple[int, ...], tuple[Any, ...]]] = field(default_factory=list)
    value: Any = None


def find_placings(graph: Graph, groups: list[FusedGroup]) -> list[Placing]:
    """The groups whose every input a producer could write in place (see the module docstring)."""
    readers: dict[int, int] = {}
    for n in graph.nodes:
        for t in {id(t): t for t in n.inputs}.values():
            readers[id(t)] = readers.get(id(t), 0) + 1
    outputs = {id(t) for t in graph.outputs}
    made_by = {id(t): g for g, grp in enumerate(groups) for t in grp.outputs}
    placing_groups = {g for g, grp in enumerate(groups) if all(n.op in PLACING_OPS for n in grp.nodes)}
    found = []
    for g in sorted(placing_groups):
        p = _placing(g, groups[g])
        if p is None:
            continue
        if all(readers.get(key) == 1 and key not in outputs and key in made_by
               and made_by[key] not in placing_groups for key in p.blocks):
            found.append(p)
    return found


def _placing(g: int, group: FusedGroup) -> Placing | None:
    """The blocks and fill of a group of pads and concatenations; None where an offset is
    not a constant, a pad crops, two pads fill with different values, or an input is read twice."""
    if len(group.outputs) != 1 or any(len(n.outputs) != 1 for n in group.nodes):
        return None
    host = group.outputs[0]
    if any(not isinstance(d, int) for d in host.shape[1:]) or 0 in host.shape[1:]:
        return None
    at: dict[int, tuple[int, ...]] = {id(host): (0,) * len(host.shape)}
    placing = Placing(g, host, {})
    for n in reversed(group.nodes):
        out = n.outputs[0]
        if id(out) not in at:
            return None
        base = at[id(out)]
        if n.op == "pad":
            before, after = pad_widths(n.task.attr("pads"), len(out.shape))
            value = n.task.attr("value")
            if min(before + after) < 0 or placing.value not in (None, value) \
                    or (before[0] or after[0]) and not isinstance(out.shape[0], int):  # a border at a symbol
                return None
            placing.value = value
            placing.boxes += border_boxes(out.shape, before, after, base)
            placed = [(n.inputs[0], tuple(b + o for b, o in zip(base, before)))]
        else:
            axis, start, placed = n.task.attr("axis"), 0, []
            for x in n.inputs:
                if not isinstance(x.shape[axis], int):
                    return None
                placed.append((x, tuple(o + (start if d == axis else 0) for d, o in enumerate(base))))
                start += x.shape[axis]
        for x, offsets in placed:
            if id(x) in at:
                return None
            at[id(x)] = offsets
    for x in group.inputs:
        if id(x) not in at or x.dtype != host.dtype:
            return None
        placing.blocks[id(x)] = Block(host, at[id(x)])
    return placing


def border_boxes(shape: tuple[Any, ...], before: list[int], after: list[int], base: tuple[int, ...]
                 ) -> list[tuple[tuple[int, ...], tuple[Any, ...]]]:
    """The border of a pad's result of ``shape`` at ``base`` as disjoint boxes: per padded
    axis, the slabs before and after the input, spanning the input along the earlier axes
    and the whole result along the later ones."""
    boxes = []
    for d in range(len(shape)):
        for start, width in ((0, before[d]), (shape[d] - after[d], after[d])):
            if width <= 0:
                continue
            offsets = tuple(base[a] + (before[a] if a < d else start if a == d else 0) for a in range(len(shape)))
            dims = tuple(shape[a] - before[a] - after[a] if a < d else width if a == d else shape[a]
                         for a in range(len(shape)))
            boxes.append((offsets, dims))
    return boxes


def fill_task(p: Placing, name: str) -> Task:
    """The task writing ``p``'s boxes, one output each; :func:`write_into` then places them."""
    value = E.const(p.value, p.host.dtype)
    outs = [compute(f"border{k}", list(dims), lambda *i: value) for k, (_, dims) in enumerate(p.boxes)]
    return Task(name, (), tuple(outs), (("ops", ("pad",)),))


def write_into(fn: S.Function, param: int, shape: tuple[Any, ...], block: Block) -> S.Function | None:
    """``fn`` with its tensor parameter number ``param`` (holding a tensor of ``shape``) made
    the block's host, every access shifted into the block; None where ``fn`` accesses it in
    a way this cannot follow. A parameter declared with ``shape`` maps index by index; one
    declared flat maps through the row-major index, which a kernel whose vectors run along
    rows of ``out_row`` elements (a contraction's) keeps within one contiguous run."""
    old = fn.tensor_params[param]
    if not isinstance(old.type, TensorType):
        return None  # (a pointer: no shape to shift in)
    host = block.host
    dims = [_int(d) for d in shape]
    declared = [_int(d) for d in old.type.shape]
    if declared == dims and _vectors_hold(fn.body, old, dims, host):
        mapper: _Shift = _Shift(old, host, block.offsets)
    elif len(declared) == 1 and None not in dims[1:] and _runs_hold(fn, dims, host, block.offsets) \
            and index_type_for(max_elements(host.shape)) == index_type_for(max_elements(old.type.shape)):
        # (the kernel computes its flat offsets in the width its own output needs)
        mapper = _FlatShift(old, host, block.offsets, tuple(shape))
    else:
        return None
    body = mapper.visit(fn.body)
    if any(v is old or (v.name == old.name and v.type == old.type) for v in collect(body, E.Var)):
        return None  # read or passed some other way
    params = tuple(mapper.new if p is old else p for p in fn.params)
    return S.Function(fn.name, params, body, fn.kind, fn.attrs)


def _int(d: Any) -> int | None:
    d = simplify_expr(E.as_expr(d))
    return int(d.value) if isinstance(d, E.Constant) else None


def _vectors_hold(body: S.Stmt, old: E.Var, dims: list[Any], host: Tensor) -> bool:
    """Whether each vector the kernel moves to or from ``old`` (contiguous in its own layout,
    along its last axis longer than 1) stays contiguous in the host: the axes after that one
    are of size 1 there too."""
    vectors = [a for a in (*collect(body, S.VectorStore), *collect(body, E.VectorLoad)) if a.tensor is old]
    if not vectors:
        return True
    if any(getattr(a, "stride", 1) != 1 for a in vectors):
        return False
    long = [d for d, n in enumerate(dims) if n != 1]
    return all(_int(n) == 1 for n in host.shape[(long[-1] if long else 0) + 1:])


def _runs_hold(fn: S.Function, dims: list[Any], host: Tensor, offsets: tuple[int, ...]) -> bool:
    """Whether each row of ``out_row`` elements the kernel stores lies in one contiguous run
    of the host: the input's trailing axes that match the host's, and the one before them."""
    row = fn.attr("out_row")
    if not isinstance(row, int):
        return False
    same = _same_tail(dims, list(host.shape), offsets)
    run = math.prod(dims[max(1, len(dims) - same - 1):])  # (past axis 0, whose size may be a symbol)
    return run % row == 0


def _same_tail(dims: list[Any], host: list[Any], offsets: tuple[int, ...]) -> int:
    """How many trailing axes after the first the block spans whole (as long as the host's,
    at offset 0)."""
    same = 0
    for d in reversed(range(1, len(dims))):
        if dims[d] != host[d] or offsets[d]:
            break
        same += 1
    return same


class _Shift(Rewriter):
    """Accesses of a parameter as accesses of the host at the index plus the block's offsets."""

    def __init__(self, old: E.Var, host: Tensor, offsets: tuple[int, ...]):
        self.old, self.offsets = old, offsets
        self.new = E.Var(old.name, TensorType(old.type.dtype, tuple(E.as_expr(d) for d in host.shape)))

    def index(self, idx: tuple[E.Expr, ...]) -> tuple[E.Expr, ...]:
        return tuple(simplify_expr(i + o) if o else i for i, o in zip(idx, self.offsets))

    def _mapped(self, tensor: E.Expr, indices: tuple[E.Expr, ...]) -> tuple[E.Expr, tuple[E.Expr, ...]] | None:
        if tensor is not self.old:
            return None
        return self.new, self.index(tuple(self.visit(i) for i in indices))

    def visit_TensorElement(self, e: E.TensorElement) -> Any:
        m = self._mapped(e.tensor, e.indices)
        return E.TensorElement(*m) if m else self.generic_visit(e)

    def visit_VectorLoad(self, e: E.VectorLoad) -> Any:
        m = self._mapped(e.tensor, e.indices)
        if m is None:
            return self.generic_visit(e)
        return E.VectorLoad(*m, e.lanes, self.visit(e.count) if e.count is not None else None, e.stride)

    def visit_BufferStore(self, s: S.BufferStore) -> Any:
        m = self._mapped(s.tensor, s.indices)
        return S.BufferStore(*m, self.visit(s.value)) if m else self.generic_visit(s)

    def visit_VectorStore(self, s: S.VectorStore) -> Any:
        m = self._mapped(s.tensor, s.indices)
        if m is None:
            return self.generic_visit(s)
        return S.VectorStore(*m, self.visit(s.value), self.visit(s.count) if s.count is not None else None)

    def visit_Prefetch(self, s: S.Prefetch) -> Any:
        m = self._mapped(s.tensor, s.indices)
        return S.Prefetch(*m) if m else self.generic_visit(s)


class _FlatShift(_Shift):
    """The same for a parameter declared flat: an element's offset in the input, unravelled
    over the input's shape, shifted, and ravelled over the host's (flat too)."""

    def __init__(self, old: E.Var, host: Tensor, offsets: tuple[int, ...], shape: tuple[Any, ...]):
        super().__init__(old, host, offsets)
        self.new = E.Var(old.name, TensorType(old.type.dtype, (simplify_expr(E.as_expr(math.prod(
            E.as_expr(d) for d in host.shape))),)))
        # the trailing axes the block spans whole as one: a run, one remainder to find in it
        keep = len(shape) - _same_tail(list(shape), list(host.shape), offsets)
        run = [math.prod(shape[keep:])] if keep < len(shape) else []
        self.shape, self.host_shape = (*shape[:keep], *run), (*host.shape[:keep], *run)
        self.offsets = (*offsets[:keep], *[0] * len(run))

    def index(self, idx: tuple[E.Expr, ...]) -> tuple[E.Expr, ...]:
        shifted = [i + o if o else i for i, o in zip(unravel(idx[0], self.shape), self.offsets)]
        return (simplify_expr(E.as_expr(row_major_offset(shifted, self.host_shape))),)
