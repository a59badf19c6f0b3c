"""Fresh variable names that do not clash with any name already in a function."""
from __future__ import annotations

from taskloom.ir.expr import Var
from taskloom.ir.functor import collect
from taskloom.ir.node import Node


class NameGen:
    """Hands out names not used anywhere in ``node`` (nor handed out before)."""

    def __init__(self, node: Node):
        self.used = {v.name for v in collect(node, Var)}  # type: ignore[attr-defined]

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name
