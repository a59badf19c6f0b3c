"""Depth-first post-order over a DAG with an explicit stack, so graphs thousands of nodes
deep need no recursion."""
from __future__ import annotations

from typing import Callable, Iterable, TypeVar

T = TypeVar("T")


def postorder(roots: Iterable[T], deps: Callable[[T], Iterable[T]]) -> list[T]:
    """Every item reachable from ``roots``, each after the items it depends on (``deps``),
    each once, in depth-first order."""
    done: set[int] = set()
    out: list[T] = []
    for root in roots:
        if id(root) in done:
            continue
        done.add(id(root))
        stack = [(root, iter(deps(root)))]
        while stack:
            item, pending = stack[-1]
            for d in pending:
                if id(d) not in done:
                    done.add(id(d))
                    stack.append((d, iter(deps(d))))
                    break
            else:
                stack.pop()
                out.append(item)
    return out
