"""The threads of a batch of blocks, run in lockstep: their indices, the active mask, the
variables, the buffers and the counters.

Lane ``t`` of every array is one thread. A block's threads are padded to a whole number of
warps (the padding lanes are never active), so the lanes of warp ``w`` are
``32 w .. 32 w + 31`` and never span two blocks. A value every thread shares (a constant,
a loop counter, a scalar parameter) has shape ``(1,)`` and broadcasts.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from taskloom.runtime.emulator.counters import Counters

WARP = 32
_MISSING = object()


class Mask:
    """The threads executing a statement: ``m`` over lanes, with its counts computed once.

    ``all``: every lane is active, the padding too; ``full``: every thread of the launch
    (all ``live`` lanes) is active, so a variable may be overwritten whole.
    """

    __slots__ = ("m", "live", "count", "all", "full", "any", "_warps")

    def __init__(self, m: np.ndarray, live: int):
        self.m, self.live = m, live
        self.count = int(np.count_nonzero(m))
        self.all = self.count == m.shape[0]
        self.full = self.count == live
        self.any = self.count > 0
        self._warps: int | None = None

    @property
    def warps(self) -> int:
        """How many warps have an active lane: what a warp-level instruction counts."""
        if self._warps is None:
            self._warps = self.m.shape[0] // WARP if self.all else \
                int(np.count_nonzero(self.m.reshape(-1, WARP).any(axis=1)))
        return self._warps

    def __and__(self, other: np.ndarray) -> "Mask":
        return Mask(self.m & other, self.live)


class Machine:
    """Blocks ``first .. first + count - 1`` of a launch, executing one statement at a time."""

    def __init__(self, kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int],
                 first: int, count: int, check: bool, counters: Counters):
        self.kernel, self.grid, self.block, self.check, self.counters = kernel, grid, block, check, counters
        self.failure: tuple[str, int, int, int] | None = None  # the first failed index check
        self.block_threads = block[0] * block[1] * block[2]
        self.padded = -(-self.block_threads // WARP) * WARP
        self.nblocks, self.first = count, first
        self.T = count * self.padded
        local = np.tile(np.arange(self.padded, dtype=np.int32), count)
        self.block_of = np.repeat(np.arange(count, dtype=np.int64), self.padded)  # batch-local block
        self.lane_id = local % WARP
        self.local_id = local
        self.live = local < self.block_threads
        bid = (first + self.block_of).astype(np.int64)
        bx, by = block[0], block[1]
        gx, gy = grid[0], grid[1]
        self.index = {  # the index primitives, by name
            "thread_idx_x": (local % bx).astype(np.int32),
            "thread_idx_y": (local // bx % by).astype(np.int32),
            "thread_idx_z": (local // (bx * by)).astype(np.int32),
            "block_idx_x": (bid % gx).astype(np.int32),
            "block_idx_y": (bid // gx % gy).astype(np.int32),
            "block_idx_z": (bid // (gx * gy)).astype(np.int32),
        }
        for axis, b, g in zip("xyz", block, grid):
            self.index[f"block_dim_{axis}"] = np.array([b], dtype=np.int32)
            self.index[f"grid_dim_{axis}"] = np.array([g], dtype=np.int32)
        self.top = Mask(self.live, int(np.count_nonzero(self.live)))
        self.shared: list[Any] = []  # the shared buffers, whose races a barrier forgets
        self.env: dict[str, Any] = {}
        self.bufs: dict[str, Any] = {}
        self.static: dict[int, Any] = {}  # shared and register buffers, by declaration
        self.frames: list[list[tuple[str, Any]]] = []
        self.async_copies: Any = None
        self.wgmmas: Any = None  # wgmma groups in flight (emulator.wgmma)
        self.mbarriers: Any = None  # the blocks' mbarriers (emulator.tma)
        self.proxies: frozenset[str] | None = None  # a checked wgmma kernel: its accumulators (emulator.proxies)
        self._lanes: dict[int, np.ndarray] = {}

    # ---- variables, with C's block scoping
    def bind(self, name: str, value: Any) -> None:
        if self.frames:
            self.frames[-1].append((name, self.env.get(name, _MISSING)))
        self.env[name] = value

    def enter(self) -> None:
        self.frames.append([])

    def leave(self) -> None:
        for name, old in reversed(self.frames.pop()):
            if old is _MISSING:
                self.env.pop(name, None)
            else:
                self.env[name] = old

    # ---- lanes
    def lanes(self, k: int) -> np.ndarray:
        """Each lane's index, ``k`` times over: who touches a (lanes x k) access, flattened."""
        out = self._lanes.get(k)
        if out is None:
            out = self._lanes[k] = np.repeat(np.arange(self.T), k)
        return out

    def mask(self, m: np.ndarray) -> Mask:
        return Mask(m, self.top.live)

    def full(self, v: np.ndarray) -> np.ndarray:
        """A value with one entry per lane (a uniform value repeated)."""
        return np.broadcast_to(v, (self.T,) + v.shape[1:]) if v.shape[0] == 1 else v

    def count(self, kind: str, mask: Mask, times: int = 1) -> None:
        """Counts a warp-level instruction of class ``kind`` for every warp in ``mask``."""
        self.counters.instructions[kind] += mask.warps * times

    def thread(self, lane: int) -> str:
        """``thread (x, y, z) of block (x, y, z)``: where lane ``lane`` runs."""
        ix = self.index
        t = ", ".join(str(int(ix[f"thread_idx_{a}"][lane])) for a in "xyz")
        b = ", ".join(str(int(ix[f"block_idx_{a}"][lane])) for a in "xyz")
        return f"thread ({t}) of block ({b})"
