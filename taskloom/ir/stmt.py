"""Statements, functions and modules of the tensor-program IR.

Declarations are sequential: a ``Let`` or ``Declare`` inside a ``SeqStmt`` is visible to
the statements after it in that sequence, as in C.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from taskloom.errors import IRError
from taskloom.ir.dtypes import DataType, PointerType, TensorType, VectorType, boolean, element_type
from taskloom.ir.expr import Expr, Var, _check_count, _check_indices, _name, as_expr
from taskloom.ir.node import Node

if TYPE_CHECKING:
    from taskloom.ir.mapping import TaskMapping


class Stmt(Node):
    __slots__ = ()

    def __repr__(self) -> str:
        from taskloom.ir.printer import astext
        return astext(self)


FOR_KINDS = ("serial", "unroll", "parallel", "vectorize")
SCOPES = ("global", "shared", "local", "register")


@dataclass(frozen=True, eq=False, repr=False)
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    """``for var in range(extent)`` with a hint: serial, unroll, parallel (across cores) or vectorize."""

    var: Var
    extent: Expr
    body: Stmt
    kind: str = "serial"

    def __post_init__(self) -> None:
        if self.kind not in FOR_KINDS:
            raise IRError(f"unknown loop kind {self.kind!r}; expected one of {FOR_KINDS}")
        if not (isinstance(self.var.type, DataType) and self.var.type.is_integer()):
            raise IRError(f"loop variable '{self.var.name}' must be an integer, not {self.var.type!r}")
        if not (isinstance(self.extent.type, DataType) and self.extent.type.is_integer()):
            raise IRError(f"the extent of loop '{self.var.name}' must be an integer, got {self.extent!r} "
                          f"of type {self.extent.type!r}")


@dataclass(frozen=True, eq=False, repr=False)
class ForMapping(Stmt):
    """``for i, j in mapping.on(worker)``: iterate the tasks a task mapping gives ``worker``.

    Lowered by :func:`taskloom.transforms.lower_mappings` into loops and index arithmetic.
    """

    vars: tuple[Var, ...]
    mapping: "TaskMapping"
    worker: Expr
    body: Stmt

    def __post_init__(self) -> None:
        if len(self.vars) != len(self.mapping.task_shape):
            raise IRError(f"mapping {self.mapping!r} has {len(self.mapping.task_shape)} task "
                          f"dimensions but the loop binds {len(self.vars)} variable(s)")
        if not (isinstance(self.worker.type, DataType) and self.worker.type.is_integer()):
            raise IRError(f"the worker of {self.mapping!r} must be an integer, got {self.worker!r} "
                          f"of type {self.worker.type!r}")


@dataclass(frozen=True, eq=False, repr=False)
class If(Stmt):
    cond: Expr
    then_body: Stmt
    else_body: Stmt | None = None

    def __post_init__(self) -> None:
        if self.cond.type != boolean:
            raise IRError(f"an if condition must be bool, got {self.cond!r} of type {self.cond.type!r}")


@dataclass(frozen=True, eq=False, repr=False)
class Let(Stmt):
    """Binds ``var`` to ``value`` once; the variable is never assigned again."""

    var: Var
    value: Expr

    def __post_init__(self) -> None:
        if self.var.type != self.value.type:
            raise IRError(f"let {self.var.name}: {self.var.type!r} is given a value of type {self.value.type!r}")


@dataclass(frozen=True, eq=False, repr=False)
class Declare(Stmt):
    """Declares a mutable scalar or a buffer (a tensor-typed var) in a memory scope."""

    var: Var
    init: Expr | None = None
    scope: str = "local"

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise IRError(f"unknown memory scope {self.scope!r}; expected one of {SCOPES}")
        if self.init is not None:
            if isinstance(self.var.type, TensorType):
                raise IRError(f"buffer '{self.var.name}' cannot have an initial value")
            if self.init.type != self.var.type:
                raise IRError(f"'{self.var.name}: {self.var.type!r}' is initialised with type {self.init.type!r}")


@dataclass(frozen=True, eq=False, repr=False)
class Assign(Stmt):
    var: Var
    value: Expr

    def __post_init__(self) -> None:
        if self.var.type != self.value.type:
            raise IRError(f"assigning a value of type {self.value.type!r} to '{self.var.name}: {self.var.type!r}'")


@dataclass(frozen=True, eq=False, repr=False)
class BufferStore(Stmt):
    """``A[i, j] = value``."""

    tensor: Expr
    indices: tuple[Expr, ...]
    value: Expr

    def __post_init__(self) -> None:
        _check_indices("store", self.tensor, self.indices)
        et = element_type(self.tensor.type)
        if self.value.type != et:
            raise IRError(f"storing a value of type {self.value.type!r} into {_name(self.tensor)} "
                          f"whose elements are {et!r}")


@dataclass(frozen=True, eq=False, repr=False)
class VectorStore(Stmt):
    """Stores a vector to consecutive elements from ``A[i, j]``; with ``count``, only the first ``count`` lanes."""

    tensor: Expr
    indices: tuple[Expr, ...]
    value: Expr
    count: Expr | None = None

    def __post_init__(self) -> None:
        _check_indices("vector store", self.tensor, self.indices)
        t = self.value.type
        if not (isinstance(t, VectorType) and t.base == element_type(self.tensor.type)):
            raise IRError(f"vector store of {t!r} into {_name(self.tensor)} with elements "
                          f"{element_type(self.tensor.type)!r}")
        _check_count("vector store", self.count)


@dataclass(frozen=True, eq=False, repr=False)
class Evaluate(Stmt):
    """Evaluates an expression for its effect (a call)."""

    expr: Expr


@dataclass(frozen=True, eq=False, repr=False)
class Prefetch(Stmt):
    """Asks for the cache line holding ``A[i, j]`` to be brought into the L2 ahead of its
    use: a hint that never faults and changes no value (a kernel streaming a weight from
    memory asks for the next panel while it computes on this one)."""

    tensor: Expr
    indices: tuple[Expr, ...]

    def __post_init__(self) -> None:
        _check_indices("prefetch", self.tensor, self.indices)


@dataclass(frozen=True, eq=False, repr=False)
class Barrier(Stmt):
    """Waits until every worker of the enclosing parallel region reaches this point."""


@dataclass(frozen=True, eq=False, repr=False)
class Comment(Stmt):
    """A note that the code generator emits as a comment (why a template chose something)."""

    text: str


def seq(stmts: Iterable[Stmt | None]) -> Stmt:
    """A sequence of statements, flattened; a single statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        flat.extend(s.stmts if isinstance(s, SeqStmt) else [s])
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


FUNCTION_KINDS = ("host", "cpu_kernel", "cuda_kernel")


@dataclass(frozen=True, eq=False, repr=False)
class Function(Node):
    """A function: its parameters are scalars, pointers or tensors; it returns nothing.

    ``attrs`` is a tuple of ``(key, value)`` pairs (launch configuration, notes) so the
    function stays hashable; read one with :meth:`attr`.
    """

    name: str
    params: tuple[Var, ...]
    body: Stmt
    kind: str = "cpu_kernel"
    attrs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in FUNCTION_KINDS:
            raise IRError(f"unknown function kind {self.kind!r}; expected one of {FUNCTION_KINDS}")
        names = [p.name for p in self.params]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise IRError(f"function '{self.name}' has duplicate parameter(s) {sorted(dup)}")
        for p in self.params:
            if isinstance(p.type, VectorType):
                raise IRError(f"parameter '{p.name}' of '{self.name}' is a vector; pass a tensor instead")

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)

    @property
    def tensor_params(self) -> tuple[Var, ...]:
        """The parameters that are buffers (tensors, pointers), in order: the scalars left out."""
        return tuple(p for p in self.params if not isinstance(p.type, DataType))

    def with_body(self, body: Stmt) -> Function:
        return Function(self.name, self.params, body, self.kind, self.attrs)

    def renamed(self, name: str) -> Function:
        """The same function under ``name`` (itself when the name is already that)."""
        return self if name == self.name else Function(name, self.params, self.body, self.kind, self.attrs)

    @functools.cached_property  # (a walk over the whole body: the graph compiler asks per call)
    def reports_status(self) -> bool:
        """Whether the function takes a status to report failed run-time checks in: it holds
        an :class:`~taskloom.ir.expr.IndexCheck`, or held one before lowering (``status``)."""
        from taskloom.ir.expr import IndexCheck
        from taskloom.ir.functor import collect
        return bool(self.attr("status")) or bool(collect(self.body, IndexCheck))

    def __repr__(self) -> str:
        from taskloom.ir.printer import astext
        return astext(self)


@dataclass(frozen=True, eq=False, repr=False)
class Module(Node):
    """The functions built into one shared library."""

    functions: tuple[Function, ...]

    def __post_init__(self) -> None:
        names = [f.name for f in self.functions]
        if len(set(names)) != len(names):
            raise IRError(f"module has functions with the same name: {names}")

    def __getitem__(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    def __repr__(self) -> str:
        from taskloom.ir.printer import astext
        return astext(self)


def store(element: Expr, value: Any) -> BufferStore:
    """``A[i, j] = value`` from the element expression ``A[i, j]``."""
    from taskloom.ir.expr import TensorElement
    if not isinstance(element, TensorElement):
        raise IRError(f"can only store to an element access like A[i, j], got {element!r}")
    return BufferStore(element.tensor, element.indices, as_expr(value, element.type))


def vstore(element: Expr, value: Expr, count: Any = None) -> VectorStore:
    from taskloom.ir.expr import TensorElement
    if not isinstance(element, TensorElement):
        raise IRError(f"vstore() takes an element access like C[i, j], got {element!r}")
    return VectorStore(element.tensor, element.indices, value, None if count is None else as_expr(count))


def prefetch(element: Expr) -> Prefetch:
    """``prefetch(A[i, j])``: the :class:`Prefetch` of the line holding ``A[i, j]``."""
    from taskloom.ir.expr import TensorElement
    if not isinstance(element, TensorElement):
        raise IRError(f"prefetch() takes an element access like B[i, j], got {element!r}")
    return Prefetch(element.tensor, element.indices)


def tensor_param(name: str, dtype: DataType, shape: Sequence[Any]) -> Var:
    """A tensor-typed variable (a parameter or a buffer)."""
    return Var(name, dtype[tuple(shape)])


def pointer_param(name: str, dtype: DataType) -> Var:
    return Var(name, PointerType(dtype))
