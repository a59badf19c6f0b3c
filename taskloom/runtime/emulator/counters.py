"""What a profiler counts, counted exactly: warp-level instructions by class, global-memory
sectors per request, shared-memory wavefronts and bank conflicts, barriers.

- An instruction is one of the IR's operations, counted once per warp that runs it with at
  least one active lane (``a * b + c`` is two arithmetic instructions, whatever the SASS
  nvcc makes of it fuses or splits). A *request* is such a memory instruction.
- Global memory moves 32-byte sectors: a request costs the distinct sectors its active
  lanes touch (32 lanes reading consecutive floats: 4; a stride of 32 floats: 32).
- Shared memory has 32 banks of 4-byte words. A request is served in *wavefronts*: as many
  as the most distinct words any one bank is asked for (the same word for many lanes is a
  broadcast, free). Its bank conflicts are wavefronts - 1. Lanes moving 8 or 16 bytes are
  served a half or a quarter warp at a time, each such phase counted on its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable

import numpy as np

INSTRUCTION_CLASSES = ("arith", "global_load", "global_store", "shared_load", "shared_store", "atomic",
                       "barrier", "shuffle", "mma", "ldmatrix", "cp_async", "wgmma", "fence", "tma", "mbarrier")
SECTOR = 32
BANKS = 32
_BANK_SHIFT = 40  # a (bank, word) pair as one sortable int64


@dataclass
class Counters:
    """The counts of one kernel launch (they add up across launches with ``+``)."""

    instructions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INSTRUCTION_CLASSES, 0))
    global_load_requests: int = 0
    global_load_sectors: int = 0
    global_store_requests: int = 0
    global_store_sectors: int = 0
    shared_load_requests: int = 0
    shared_load_wavefronts: int = 0
    shared_load_conflicts: int = 0
    shared_store_requests: int = 0
    shared_store_wavefronts: int = 0
    shared_store_conflicts: int = 0
    barriers: int = 0  # __syncthreads() passed, summed over blocks

    @property
    def bank_conflicts(self) -> int:
        return self.shared_load_conflicts + self.shared_store_conflicts

    @property
    def global_sectors(self) -> int:
        return self.global_load_sectors + self.global_store_sectors

    def __add__(self, other: "Counters") -> "Counters":
        out = Counters()
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            setattr(out, f.name, {k: a.get(k, 0) + b.get(k, 0) for k in {**a, **b}} if isinstance(a, dict) else a + b)
        return out

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["instructions"] = dict(self.instructions)
        out["bank_conflicts"] = self.bank_conflicts
        return out


def distinct_per_row(keys: np.ndarray) -> np.ndarray:
    """How many distinct non-negative values each row of ``keys`` holds (-1 marks none)."""
    s = np.sort(keys, axis=1)
    new = s >= 0
    new[:, 1:] &= s[:, 1:] != s[:, :-1]
    return np.count_nonzero(new, axis=1)


def _rows(values: np.ndarray, valid: np.ndarray | None, lanes: int) -> tuple[np.ndarray, np.ndarray | None]:
    """``values`` (lanes x k) as one row per group of ``lanes`` lanes, the groups with nothing
    valid left out; and which entries are valid (None: all)."""
    rows = values.reshape(-1, lanes * values.shape[1])
    if valid is None:
        return rows, None
    v = valid.reshape(rows.shape)
    keep = v.any(axis=1)
    rows, v = rows[keep], v[keep]
    return rows, (None if v.all() else v)


_PATTERNS: dict[tuple[str, bytes], int] = {}  # the count of each pattern of words or sectors seen


def _same_pattern(rows: np.ndarray, kind: str, count: Callable[[np.ndarray], int]) -> int | None:
    """When every row is the first one shifted by a constant, the count of one row (a shift
    permutes banks and sectors, keeping which entries coincide); else None."""
    d = rows - rows[:, :1]
    if not (d == d[0]).all():
        return None
    key = (kind, d[0].tobytes())
    n = _PATTERNS.get(key)
    if n is None:
        if len(_PATTERNS) > 4096:
            _PATTERNS.clear()
        n = _PATTERNS[key] = count(rows[:1])
    return n


def count_global(c: Counters, kind: str, addr: np.ndarray, valid: np.ndarray | None, requests: int) -> None:
    """Records a global request: lane ``t`` touches the naturally aligned element at byte
    ``addr[t, k]`` (one sector each) where ``valid`` (None: everywhere)."""
    rows, v = _rows(addr // SECTOR, valid, 32)
    one = _same_pattern(rows, "sectors", lambda r: int(distinct_per_row(r)[0])) if v is None and len(rows) else None
    if one is not None:
        sectors = one * len(rows)
    else:
        sectors = int(distinct_per_row(rows if v is None else np.where(v, rows, -1)).sum())
    add_global(c, kind, requests, sectors)


def add_global(c: Counters, kind: str, requests: int, sectors: int) -> None:
    if kind == "load":
        c.global_load_requests += requests
        c.global_load_sectors += sectors
    else:
        c.global_store_requests += requests
        c.global_store_sectors += sectors


def _waves(rows: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    """Per row of words, the most distinct words any one bank is asked for."""
    keys = ((rows % BANKS) << _BANK_SHIFT) | rows
    if valid is not None:
        keys = np.where(valid, keys, -1)
    keys.sort(axis=1)
    new = keys >= 0
    new[:, 1:] &= keys[:, 1:] != keys[:, :-1]
    bank = np.arange(len(rows))[:, None] * BANKS + (keys >> _BANK_SHIFT)
    return np.bincount(bank[new], minlength=len(rows) * BANKS).reshape(-1, BANKS).max(axis=1)


def wavefronts(words: np.ndarray, valid: np.ndarray | None, phase_lanes: int) -> tuple[int, int]:
    """(wavefronts, bank conflicts) of shared accesses: lane ``t`` touches the 4-byte
    ``words[t, k]`` where ``valid`` (None: everywhere); lanes are served ``phase_lanes`` at
    a time."""
    rows, v = _rows(words, valid, phase_lanes)
    if not len(rows):
        return 0, 0
    waves_of_one = _same_pattern(rows, f"banks{rows.shape[1]}", lambda r: int(_waves(r, None)[0])) \
        if v is None else None
    if waves_of_one is not None:
        return waves_of_one * len(rows), (waves_of_one - 1) * len(rows)
    waves = _waves(rows, v)
    return int(waves.sum()), int((waves - 1).sum())


def count_shared(c: Counters, kind: str, words: np.ndarray, valid: np.ndarray | None, lane_bytes: int,
                 requests: int) -> None:
    """Records a shared request whose lanes each move ``lane_bytes`` bytes."""
    phase = 32  # lanes served together: 128 bytes' worth, a power of two
    while phase > 1 and phase * lane_bytes > 128:
        phase //= 2
    add_shared(c, kind, requests, *wavefronts(words, valid, phase))


def add_shared(c: Counters, kind: str, requests: int, waves: int, conflicts: int) -> None:
    if kind == "load":
        c.shared_load_requests += requests
        c.shared_load_wavefronts += waves
        c.shared_load_conflicts += conflicts
    else:
        c.shared_store_requests += requests
        c.shared_store_wavefronts += waves
        c.shared_store_conflicts += conflicts
