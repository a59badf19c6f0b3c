"""Compute definitions: what an operator computes, element by element (TVM's idea).

    A = tensor_input("A", f32, [M, K])
    B = tensor_input("B", f32, [K, N])
    C = compute("C", [M, N], lambda i, j: reduce([K], lambda k: A[i, k] * B[k, j], "sum"))
    task = Task("matmul", [A, B], [C])

A definition says nothing about loops, threads or vectors; a schedule (a template or the
rule-based scheduler) decides those. The class of an operator -- injective, bijective,
reduction, anchor, opaque -- is read off its definition (:func:`classify`), never declared.
"""
from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from taskloom.errors import IRError
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir.dtypes import TensorType, index_type
from taskloom.ir.functor import Rewriter, collect, substitute
from taskloom.ir.arith import simplify_expr
from taskloom.ir.index import is_unit, prod, row_major_offset, unravel

REDUCE_KINDS = ("sum", "max", "min", "mean", "prod", "argmax", "argmin")


@dataclass(frozen=True, eq=False, repr=False)
class TensorInput(E.Expr):
    """An input tensor of a task."""

    name: str
    type: TensorType
    is_tensor_ref = True

    @property
    def shape(self) -> tuple[E.Expr, ...]:
        return self.type.shape

    @property
    def dtype(self) -> T.DataType:
        return self.type.dtype  # type: ignore[return-value]


@dataclass(frozen=True, eq=False, repr=False)
class GridCompute(E.Expr):
    """A tensor whose element at ``axes`` is ``value`` (an expression of the axes)."""

    name: str
    shape: tuple[E.Expr, ...]
    axes: tuple[E.Var, ...]
    value: E.Expr
    is_tensor_ref = True

    def __post_init__(self) -> None:
        if len(self.shape) != len(self.axes):
            raise IRError(f"compute '{self.name}': {len(self.shape)} dimensions but {len(self.axes)} axes")
        if not isinstance(self.value.type, T.DataType):
            raise IRError(f"compute '{self.name}': an element must be a scalar, got {self.value.type!r}")
        object.__setattr__(self, "type", TensorType(self.value.type, self.shape))

    @property
    def dtype(self) -> T.DataType:
        return self.value.type  # type: ignore[return-value]


@dataclass(frozen=True, eq=False, repr=False)
class ReduceCompute(E.Expr):
    """The reduction (``kind``) of ``value`` over the grid ``shape`` of ``axes``; a scalar."""

    shape: tuple[E.Expr, ...]
    axes: tuple[E.Var, ...]
    value: E.Expr
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in REDUCE_KINDS:
            raise IRError(f"unknown reduction {self.kind!r}; expected one of {REDUCE_KINDS}")
        if not isinstance(self.value.type, T.DataType):
            raise IRError(f"reduce {self.kind}: the reduced value must be a scalar, got {self.value.type!r}")
        if self.kind in ("argmax", "argmin") and len(self.axes) != 1:
            raise IRError(f"{self.kind} reduces exactly one axis, got {len(self.axes)}")
        t = T.int64 if self.kind in ("argmax", "argmin") else self.value.type
        object.__setattr__(self, "type", t)


def _axes(fn: Callable, dims: tuple[E.Expr, ...], default: str) -> tuple[E.Var, ...]:
    """Axis variables named after ``fn``'s parameters (so generated code reads like the
    definition), each of its dimension's type: int32, or int64 for a size past int32."""
    n = len(dims)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = None  # no signature to read: name the axes by default
    names = [p.name for p in params or ()]
    if len(names) != n:
        if params is not None and not any(p.kind == p.VAR_POSITIONAL for p in params):
            raise IRError(f"the function of a {n}-D definition takes {len(names)} argument(s)")
        names = [f"{default}{a}" for a in range(n)]
    return tuple(E.Var(name, d.type if d.type == T.int64 else index_type) for name, d in zip(names, dims))


def tensor_input(name: str, dtype: T.DataType | str, shape: Sequence[Any]) -> TensorInput:
    """An input of ``dtype`` and ``shape`` (ints or symbolic expressions)."""
    return TensorInput(name, T.dtype(dtype)[tuple(shape)] if shape else TensorType(T.dtype(dtype), ()))


def _dim(d: Any) -> E.Expr:
    """A size as an expression, folded (``(56 + 2 - 3) // 1 + 1`` is 56): sizes computed from
    a placeholder's are compared across nodes (which share a loop over rows)."""
    d = E.as_expr(d)
    if isinstance(d, (E.Constant, E.Var)):
        return d
    from taskloom.ir.arith import simplify_expr
    return simplify_expr(d)


def compute(name: str, shape: Sequence[Any], fn: Callable[..., Any]) -> GridCompute:
    """The tensor ``out[i, j, ...] = fn(i, j, ...)`` over ``shape``."""
    dims = tuple(_dim(d) for d in shape)
    axes = _axes(fn, dims, "i")
    value = E.as_expr(fn(*axes))
    return GridCompute(name, dims, axes, value)


def reduce(shape: Sequence[Any], fn: Callable[..., Any], kind: str = "sum") -> ReduceCompute:
    """``kind`` of ``fn(k, ...)`` over the grid ``shape`` (sum, max, min, mean, prod, argmax, argmin)."""
    dims = tuple(_dim(d) for d in shape)
    axes = _axes(fn, dims, "k")
    return ReduceCompute(dims, axes, E.as_expr(fn(*axes)), kind)


@dataclass(frozen=True)
class Task:
    """An operator's definition: its inputs, its outputs and attributes (e.g. ``axis``)."""

    name: str
    inputs: tuple[TensorInput, ...]
    outputs: tuple[GridCompute, ...]
    attrs: tuple[tuple[str, Any], ...] = ()

    def __init__(self, name: str, inputs: Sequence[TensorInput], outputs: Sequence[GridCompute],
                 attrs: dict[str, Any] | Sequence[tuple[str, Any]] = ()):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "inputs", tuple(inputs))
        object.__setattr__(self, "outputs", tuple(outputs))
        items = tuple(sorted(attrs.items())) if isinstance(attrs, dict) else tuple(attrs)
        items = tuple((k, _freeze(v)) for k, v in items)
        object.__setattr__(self, "attrs", items)
        known = set(self.inputs)
        for node in self.computes():
            for t in _tensors_read(node.value):
                if isinstance(t, TensorInput) and t not in known:
                    raise IRError(f"task '{name}': compute '{node.name}' reads '{t.name}', which is not "
                                  "one of the task's inputs")

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)

    def computes(self) -> list[GridCompute]:
        """Every compute node reachable from the outputs, producers before consumers."""
        order: list[GridCompute] = []
        seen: set[GridCompute] = set()

        def visit(node: GridCompute) -> None:
            if node in seen:
                return
            seen.add(node)
            for t in _tensors_read(node.value):
                if isinstance(t, GridCompute):
                    visit(t)
            order.append(node)

        for out in self.outputs:
            visit(out)
        return order

    def symbols(self) -> list[E.Var]:
        """The symbolic dimensions of the inputs and outputs, in order of first appearance."""
        out: list[E.Var] = []
        for t in (*self.inputs, *self.outputs):
            for d in t.type.shape:
                for v in sorted(E.free_vars(d), key=lambda v: v.name):
                    if v not in out:
                        out.append(v)
        return out


def _freeze(v: Any) -> Any:
    """Attribute values become hashable (lists to tuples), so tasks can key caches."""
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


def _tensors_read(e: E.Expr) -> list[E.Expr]:
    return [el.tensor for el in collect(e, E.TensorElement)]  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- classification

#: Task names that have a schedule template; the schedule package registers its templates here.
ANCHOR_TEMPLATES: set[str] = set()


class _Inliner(Rewriter):
    """Replaces reads of intermediate compute nodes by their definitions."""

    def visit_TensorElement(self, e: E.TensorElement) -> E.Expr:
        e = self.generic_visit(e)
        if isinstance(e.tensor, GridCompute):
            return self.visit(substitute(e.tensor.value, dict(zip(e.tensor.axes, e.indices))))
        return e


def inline(value: E.Expr) -> E.Expr:
    """``value`` with every intermediate compute read replaced by its definition, so only
    task inputs are read."""
    return _Inliner().visit(value)


def has_reduction(task: Task) -> bool:
    return any(collect(c.value, ReduceCompute) for c in task.computes())


def _conditional_reads(e: E.Expr, under: bool = False) -> list[tuple[E.TensorElement, bool]]:
    """Every element read in ``e`` and whether it sits in a branch of a select."""
    if isinstance(e, E.TensorElement):
        return [(e, under)] + [r for i in e.indices for r in _conditional_reads(i, under)]
    if isinstance(e, E.Select):
        return (_conditional_reads(e.cond, under) + _conditional_reads(e.a, True)
                + _conditional_reads(e.b, True))
    return [r for c in e.children() if isinstance(c, E.Expr) for r in _conditional_reads(c, under)]


def _same(a: E.Expr | int, b: E.Expr | int, bounds: dict[E.Var, tuple[int | None, int | None]]) -> bool:
    return E.is_const(simplify_expr(E.as_expr(a) - b, bounds), 0)


def index_bounds(names: Sequence[E.Var], shape: Sequence[Any], other: Sequence[Any] = ()
                 ) -> dict[E.Var, tuple[int, int | None]]:
    """The ranges of ``names`` indexing ``shape``, and of the symbols in ``shape`` and
    ``other``: at least 1, since at a size of 0 a tensor has no element whose index matters
    (which lets ``(x0*768 + x1) // (s*768)`` simplify to ``x0 // s``)."""
    bounds: dict[E.Var, tuple[int, int | None]] = {
        n: (0, int(d.value) - 1) if isinstance(d, E.Constant) else (0, None) for n, d in zip(names, shape)}
    for d in (*shape, *other):
        for v in E.free_vars(d) if isinstance(d, E.Expr) else ():
            bounds.setdefault(v, (1, None))
    return bounds


@functools.lru_cache(maxsize=4096)  # (fusion asks per layer of a deep model; tasks compare by structure)
def inverse_map(task: Task, inp: TensorInput) -> tuple[tuple[E.Var, ...], tuple[E.Expr, ...]] | None:
    """For a task bijective in ``inp``: variables naming an element of ``inp`` and the index of
    the output element it feeds. None when the task is not bijective in ``inp``.

    Post-scheduling fusion pushes a store through an epilogue with this map.
    """
    if len(task.outputs) != 1 or has_reduction(task):
        return None
    out = task.outputs[0]
    value = inline(out.value)
    reads = [(r, cond) for r, cond in _conditional_reads(value) if r.tensor == inp]
    if not reads or len({r.indices for r, _ in reads}) != 1 or all(cond for _, cond in reads):
        return None  # never read, read at two different elements, or only in branches of a select
    idx = reads[0][0].indices
    if any(collect(i, E.TensorElement) for i in idx):
        return None  # a data-dependent index (gather) cannot be inverted
    in_shape, out_shape = inp.shape, out.shape
    bounds = index_bounds(out.axes, out_shape, in_shape)
    stem = re.sub(r"\W|^(?=\d)", "_", inp.name)  # an input may be named 'x.1' or '0' (ONNX)
    names = [E.Var(f"{stem}_{k}", index_type) for k in range(len(in_shape))]
    # a permutation of the output axes, each over an equal extent
    if len(idx) == len(out.axes) and all(isinstance(i, E.Var) for i in idx) and set(idx) == set(out.axes):
        pos = {v: k for k, v in enumerate(idx)}
        if all(_same(in_shape[pos[a]], d, {}) for a, d in zip(out.axes, out_shape)):
            return tuple(names), tuple(names[pos[a]] for a in out.axes)
        return None
    # a reshape: the row-major offset of the element read equals the offset of the output element
    if not _same(prod(in_shape), prod(out_shape), {}):
        return None
    units = {a: E.as_expr(0) for a, d in zip(out.axes, out_shape) if E.is_const(d, 1)}  # unsqueezed axes
    if not _same(substitute(E.as_expr(row_major_offset(idx, in_shape)) - row_major_offset(out.axes, out_shape), units), 0, bounds):
        return None
    in_bounds = index_bounds(names, in_shape, out_shape)
    return tuple(names), tuple(simplify_expr(E.as_expr(i), in_bounds) for i in unravel(row_major_offset(names, in_shape), out_shape))


@functools.lru_cache(maxsize=4096)
def preserves_order(task: Task, inp: TensorInput) -> bool:
    """Whether ``task`` is bijective in ``inp`` and keeps the row-major order of its elements
    (elementwise operators, reshapes; not transposes). Such an epilogue leaves a fused anchor
    computing its results in its own order."""
    m = inverse_map(task, inp)
    if m is None:
        return False
    names, out_idx = m
    bounds = index_bounds(names, inp.shape, task.outputs[0].shape)
    return _same(E.as_expr(row_major_offset(out_idx, task.outputs[0].shape)) - row_major_offset(names, inp.shape), 0, bounds)


@functools.lru_cache(maxsize=4096)
def reads_at_own_index(task: Task, inp: TensorInput) -> bool:
    """Whether ``task``'s one output reads ``inp`` only at the output element's own index and
    outside every reduction (``relu(acc + r[i, j])``, not ``softmax(r)[i, j]``): each element
    of ``inp`` then feeds only the output element at its index, which reads it before it is
    written, so the output may be written over ``inp`` where ``inp`` dies (one buffer for
    both in the memory plan)."""
    if len(task.outputs) != 1:
        return False
    out = task.outputs[0]
    if len(inp.shape) != len(out.shape) or not all(_same(a, b, {}) for a, b in zip(inp.shape, out.shape)):
        return False
    value = inline(out.value)
    reads = [e for e in collect(value, E.TensorElement) if e.tensor is inp]
    reduced = {id(e) for r in collect(value, ReduceCompute) for e in collect(r.value, E.TensorElement)}
    return bool(reads) and all(id(e) not in reduced and at_own_index(e.indices, out) for e in reads)


def at_own_index(indices: Sequence[E.Expr], node: GridCompute) -> bool:
    """Whether ``indices`` name ``node``'s own element: each its axis, or 0 on an axis of
    extent 1 (where broadcasting reads it)."""
    return len(indices) == len(node.axes) and all(
        i == axis or (is_unit(extent) and E.is_const(i, 0)) for i, axis, extent in zip(indices, node.axes, node.shape))


def bijective_inputs(task: Task) -> list[TensorInput]:
    """The inputs in which ``task`` is bijective: each of their elements feeds exactly one
    output element, through an index map that can be inverted."""
    return [i for i in task.inputs if inverse_map(task, i) is not None]


def classify(task: Task) -> str:
    """The class of a task, read off its definition: 'anchor' (a template exists),
    'reduction', 'bijective' (injective and bijective in every input), 'injective', or
    'opaque' (no output defined by a compute)."""
    if task.name in ANCHOR_TEMPLATES:
        return "anchor"
    if not task.outputs:
        return "opaque"
    if has_reduction(task):
        return "reduction"
    if task.inputs and len(bijective_inputs(task)) == len(task.inputs):
        return "bijective"
    return "injective"
