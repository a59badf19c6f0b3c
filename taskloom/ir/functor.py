"""Visitor and rewriter bases: a pass overrides ``visit_<NodeClass>`` for the nodes it cares about."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from taskloom.ir.dtypes import PointerType, TensorType, Type
from taskloom.ir.expr import Expr, Var
from taskloom.ir.node import Node, field_names


class Visitor:
    """Walks a tree; ``visit_<Class>(node)`` overrides the default walk for that class."""

    def visit(self, node: Node) -> Any:
        method = getattr(self, "visit_" + type(node).__name__, None)
        return method(node) if method is not None else self.generic_visit(node)

    def generic_visit(self, node: Node) -> None:
        for c in node.children():
            self.visit(c)


class Rewriter:
    """Rebuilds a tree bottom-up; an unchanged subtree is returned as the same object.

    Override ``visit_<Class>(node)`` to replace nodes of a class; call
    ``self.generic_visit(node)`` inside it to rewrite the children first. Types that hold
    expressions (tensor shapes) are rewritten through :meth:`visit_type`.
    """

    def visit(self, node: Any) -> Any:
        if not isinstance(node, Node):
            return node
        method = getattr(self, "visit_" + type(node).__name__, None)
        return method(node) if method is not None else self.generic_visit(node)

    def visit_type(self, t: Type) -> Type:
        if isinstance(t, TensorType):
            shape = tuple(self.visit(d) for d in t.shape)
            return t if all(a is b for a, b in zip(shape, t.shape)) else TensorType(t.dtype, shape)
        if isinstance(t, PointerType):
            return t
        return t

    def _field(self, value: Any) -> Any:
        if isinstance(value, Node):
            return self.visit(value)
        if isinstance(value, tuple):
            new = tuple(self._field(v) for v in value)
            return value if all(a is b for a, b in zip(new, value)) else new
        if isinstance(value, Type):
            return self.visit_type(value)
        return value

    def generic_visit(self, node: Node) -> Any:
        if node.is_tensor_ref:
            return node
        changes = {}
        values = node.__dict__
        for name in field_names(type(node)):
            old = values[name]
            new = self._field(old)
            if new is not old:
                changes[name] = new
        return dataclasses.replace(node, **changes) if changes else node  # type: ignore[type-var]


class Substituter(Rewriter):
    """Replaces variables by expressions (see :func:`substitute`)."""

    def __init__(self, mapping: Mapping[Var, Expr]):
        self.mapping = dict(mapping)

    def visit_Var(self, v: Var) -> Expr:
        if v in self.mapping:
            return self.mapping[v]
        return self.generic_visit(v)


class PromotingSubstituter(Substituter):
    """A substitution whose values may be wider than the variables they replace (an int64
    position for an int32 axis): the operations above them are rebuilt with the IR's
    promotion rules instead of refusing operands of two types."""

    def visit_Binary(self, e: Any) -> Expr:
        from taskloom.ir.expr import binary
        a, b = self.visit(e.a), self.visit(e.b)
        return e if a is e.a and b is e.b else binary(e.op, a, b)

    def visit_Select(self, e: Any) -> Expr:
        from taskloom.ir.expr import select
        c, a, b = self.visit(e.cond), self.visit(e.a), self.visit(e.b)
        return e if c is e.cond and a is e.a and b is e.b else select(c, a, b)


def substitute(node: Any, mapping: Mapping[Var, Expr], promote: bool = False) -> Any:
    """``node`` with every occurrence of each key variable replaced by its value; with
    ``promote``, a value may have a wider integer type than its variable."""
    if not mapping:
        return node
    return (PromotingSubstituter if promote else Substituter)(mapping).visit(node)


def collect(node: Node, cls: type | tuple[type, ...]) -> list[Node]:
    """Every node of class ``cls`` in the tree, in pre-order."""
    out: list[Node] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cls):
            out.append(n)
        stack.extend(reversed(list(n.children())))
    return out
