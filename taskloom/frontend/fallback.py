"""What both frontends report of the operators they run outside the compiled graph (their
per-operator fallback: :mod:`~taskloom.frontend.torch_fallback`,
:mod:`~taskloom.frontend.onnx_fallback`): one record per node and a one-line summary."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Fallback:
    """One node run outside the compiled graph: its operator (``aten.sin.default``, ``Det``;
    ``graph`` when a whole graph runs in PyTorch), the node's name and why."""

    op: str
    node: str
    reason: str

    def __str__(self) -> str:
        return f"{self.op} (node '{self.node}'): {self.reason}" if self.node else f"{self.op}: {self.reason}"


def summary(fallbacks: Sequence[Fallback], total: int, nodes: str = "nodes", runner: str = "PyTorch") -> str:
    """One line: how many of the graph's ``total`` nodes run in ``runner``, which and why."""
    counts = Counter((f.op, f.reason.splitlines()[0]) for f in fallbacks)
    what = ", ".join(f"{op}{f' x{n}' if n > 1 else ''} ({reason})" for (op, reason), n in counts.items())
    return f"taskloom: {len(fallbacks)} of {total} {nodes} run in {runner}: {what}"
