"""``cp.async`` with commit and wait groups, as the device orders them.

A copy reads global memory when it is issued and lands in shared memory only when its
thread waits for its group (``cp.async.wait_group n``: every group the thread committed,
but the ``n`` most recent, is complete). Until then the destination holds its old contents,
so a kernel that reads it without waiting reads stale data here as on the device. Copies
issued after the last commit belong to no group yet and are not waited for.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taskloom.runtime.emulator import memory
from taskloom.runtime.emulator.machine import Machine, Mask


@dataclass
class _Copy:
    dst: memory.Buffer
    lanes: np.ndarray  # the issuing lanes
    group: np.ndarray  # per lane, the group the copy belongs to
    idx: np.ndarray  # per lane, the destination elements
    data: np.ndarray  # per lane, what lands there


class AsyncCopies:
    """The copies in flight of a batch of blocks, and each thread's committed groups."""

    def __init__(self, lanes: int):
        self.committed = np.zeros(lanes, dtype=np.int64)
        self.pending: list[_Copy] = []


def _state(st: Machine) -> AsyncCopies:
    if st.async_copies is None:
        st.async_copies = AsyncCopies(st.T)
    return st.async_copies


def issue(st: Machine, dst: memory.Buffer, dst_idx: np.ndarray, src: memory.Buffer, src_idx: np.ndarray,
          nbytes: int, src_bytes: np.ndarray | None, mask: Mask) -> None:
    """``cp.async`` of ``nbytes`` by the active lanes; bytes past ``src_bytes`` are zeros."""
    if not mask.any:
        return
    st.count("cp_async", mask)
    k = nbytes // dst.dtype.nbytes
    if st.check:
        memory.check_aligned(st, dst, dst_idx, nbytes, mask, "copies (cp.async) into")
        memory.check_aligned(st, src, src_idx, nbytes, mask, "copies (cp.async) from")
    ok = None if src_bytes is None else np.arange(k) < (st.full(src_bytes) // dst.dtype.nbytes)[:, None]
    data = memory.load(st, src, st.full(src_idx)[:, None] + np.arange(k), mask, ok, "copies (cp.async) from")
    didx = memory.checked(st, dst, st.full(dst_idx)[:, None] + np.arange(k), mask, None, "copies (cp.async) into")
    memory.count_access(st, dst, "store", didx, mask, None)
    memory.guard_async_reads(st, dst, dst.keys(didx), mask, None)
    lanes = np.nonzero(mask.m)[0]
    copies = _state(st)
    copies.pending.append(_Copy(dst, lanes, copies.committed[lanes], didx[lanes],
                                np.broadcast_to(data, (st.T, k))[lanes]))


def commit(st: Machine, mask: Mask) -> None:
    """``cp.async.commit_group``: the active lanes' open copies become a group."""
    _state(st).committed[mask.m] += 1


def wait(st: Machine, pending: int, mask: Mask) -> None:
    """``cp.async.wait_group pending``: the active lanes' older groups land."""
    copies = _state(st)
    limit = copies.committed - pending
    keep = []
    for c in copies.pending:
        ready = mask.m[c.lanes] & (c.group < limit[c.lanes])
        if ready.any():
            _land(st, c, ready)
        if not ready.all():
            keep.append(_Copy(c.dst, c.lanes[~ready], c.group[~ready], c.idx[~ready], c.data[~ready]))
    copies.pending = keep


def _land(st: Machine, c: _Copy, ready: np.ndarray) -> None:
    lanes = c.lanes[ready]
    on = np.zeros(st.T, dtype=bool)
    on[lanes] = True
    idx = np.zeros((st.T, c.idx.shape[1]), dtype=c.idx.dtype)
    data = np.zeros((st.T, c.idx.shape[1]), dtype=c.data.dtype)
    idx[lanes], data[lanes] = c.idx[ready], c.data[ready]
    memory.store(st, c.dst, idx, data, st.mask(on), count=False)
