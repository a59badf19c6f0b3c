"""Static memory planning: every intermediate tensor of a graph gets an offset in one arena,
and tensors whose lifetimes do not overlap share memory.

Lifetimes are intervals of node positions (produced at one node, last read at another).
Tensors are placed largest first, each at the lowest offset that does not collide with a
placed tensor whose lifetime overlaps; this best-fit-by-size order keeps the peak close to
the largest set of tensors alive at once.
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64  # every tensor starts on a cache line (and an AVX-512 register's width)


@dataclass(frozen=True)
class Buffer:
    """A tensor to place: its size in bytes and its lifetime ``[first, last]`` (inclusive)."""

    key: object
    nbytes: int
    first: int
    last: int


@dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[object, int]
    arena_bytes: int
    total_bytes: int  # what the tensors would need without reuse

    def describe(self) -> str:
        saved = 1 - self.arena_bytes / self.total_bytes if self.total_bytes else 0.0
        return (f"arena {self.arena_bytes / 2**20:.2f} MiB for {len(self.offsets)} intermediates "
                f"({self.total_bytes / 2**20:.2f} MiB without reuse, {saved:.0%} saved)")


def _round(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(buffers: list[Buffer]) -> MemoryPlan:
    """Offsets in one arena for ``buffers``; overlapping lifetimes never share bytes."""
    placed: list[tuple[int, int, Buffer]] = []  # (offset, size, buffer)
    offsets: dict[object, int] = {}
    for b in sorted(buffers, key=lambda b: (-b.nbytes, b.first)):
        size = _round(max(b.nbytes, 1))
        busy = sorted((o, o + s) for o, s, other in placed if not (other.last < b.first or b.last < other.first))
        offset = 0
        for start, end in busy:
            if offset + size <= start:
                break
            offset = max(offset, end)
        placed.append((offset, size, b))
        offsets[b.key] = offset
    arena = max((o + s for o, s, _ in placed), default=0)
    return MemoryPlan(offsets, arena, sum(_round(max(b.nbytes, 1)) for b in buffers))
