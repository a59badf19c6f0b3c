"""The base of every IR node: immutable, with structural equality and a cached hash."""
from __future__ import annotations

import dataclasses
from typing import Any, Iterator


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # per node class, its dataclass field names


def field_names(cls: type) -> tuple[str, ...]:
    """A node class's dataclass field names, in order (looked up once per class: walking a
    tree asks for them at every node)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


class Node:
    """An immutable IR node. Two nodes are equal when their classes and fields are equal.

    Subclasses are ``@dataclass(frozen=True, eq=False)``; equality and hashing live here so
    the hash of a deep tree is computed once.
    """

    __slots__ = ()

    def _fields(self) -> tuple[Any, ...]:
        d = self.__dict__
        return tuple(d[n] for n in field_names(type(self)))

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((type(self).__name__, self._fields()))
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(self) is not type(other) or hash(self) != hash(other):
            return False
        return self._fields() == other._fields()  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __getstate__(self) -> dict[str, Any]:
        # the cached hash is not pickled: string hashes differ from one process to the next
        # (nor the cached variables, which a reader finds again)
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_vars")}

    #: A node that names a tensor defined elsewhere (a task input or a compute node) is a
    #: leaf for traversal: walking an expression never enters another tensor's definition.
    is_tensor_ref = False

    def children(self) -> Iterator["Node"]:
        """The direct child nodes, in field order (tuples are walked one level deep)."""
        if self.is_tensor_ref:
            return
        for value in self._fields():
            if isinstance(value, Node):
                yield value
            elif isinstance(value, tuple):
                for v in value:
                    if isinstance(v, Node):
                        yield v

    def __str__(self) -> str:
        from taskloom.ir.printer import astext
        return astext(self)
