"""The fences Hopper's asynchronous tensor cores need, checked.

A wgmma reads its shared operands through the *async proxy*, a path to shared memory of its
own. Writes through the generic proxy (a store, a ``cp.async`` that landed) reach it only
after their thread's ``fence.proxy.async``; TMA writes through the async proxy and needs
none. Likewise the accumulator registers a wgmma adds into must not have been written by
ordinary instructions since the warpgroup's last ``wgmma.fence``. Without the fence the
device may compute from the old contents, now or only under some timing; the emulator
computes in order, so it checks the fences instead: in a kernel that issues wgmma, each
shared element and each accumulator remembers the thread that wrote it and has not fenced
since, and a wgmma that reads such an element is a :class:`~.checks.RaceError`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from taskloom.runtime.emulator import checks
from taskloom.runtime.emulator.machine import Machine, Mask

if TYPE_CHECKING:
    from taskloom.runtime.emulator.memory import Buffer

NONE = -1


def tracked(st: Machine, scope: str, name: str) -> bool:
    """Whether a new buffer's generic writes are tracked: the kernel issues wgmma (and is
    checked), and the buffer is shared or holds a wgmma's accumulators."""
    return st.proxies is not None and (scope == "shared" or name in st.proxies)


def wrote(buf: "Buffer", keys: np.ndarray, lanes: np.ndarray) -> None:
    """``lanes[i]`` wrote element ``keys[i]`` through the generic proxy."""
    if buf.generic is not None:
        buf.generic[keys] = lanes


def wrote_async(buf: "Buffer", keys: np.ndarray) -> None:
    """Elements written through the async proxy (TMA, a wgmma's own accumulators): nothing to fence."""
    if buf.generic is not None:
        buf.generic[keys] = NONE


def fence_shared(st: Machine, mask: Mask) -> None:
    """``fence.proxy.async`` by the active threads: their generic writes reach the async proxy."""
    for buf in st.shared:
        if buf.generic is not None:
            w = buf.generic
            hit = w != NONE
            hit[hit] = mask.m[w[hit]]
            w[hit] = NONE


def fence_registers(st: Machine, buf: "Buffer", mask: Mask) -> None:
    """``wgmma.fence`` by the active threads: their own writes of accumulators are ordered."""
    if buf.generic is not None:
        buf.generic.reshape(st.T, -1)[mask.m] = NONE


def check_read(st: Machine, buf: "Buffer", keys: np.ndarray, reader: np.ndarray, what: str) -> None:
    """A wgmma of the threads ``reader`` (one a row of ``keys``) reads ``keys`` of ``buf``
    as its ``what``: none of them may carry an unfenced generic write."""
    if buf.generic is None:
        return
    w = buf.generic[keys]
    bad = w != NONE
    if not bad.any():
        return
    at = np.argwhere(bad)[0]
    key, lane = int(keys[tuple(at)]), int(reader[at[0]])
    fence = "fence.proxy.async" if buf.scope == "shared" else "wgmma.fence"
    via = "a store or a cp.async" if buf.scope == "shared" else "an ordinary instruction"
    raise checks._fail(
        checks.RaceError, st, lane, f"the wgmma of {st.thread(lane)} reads {buf.scope} '{buf.name}' at index "
        f"{key % buf.size} as its {what}, which {st.thread(int(w[tuple(at)]))} wrote by {via} with no {fence} "
        "after it: the tensor cores may read the old contents", buf.name, key % buf.size)
