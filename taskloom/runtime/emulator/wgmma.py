"""Hopper's warpgroup MMA (``wgmma.mma_async``) as the PTX ISA defines it, asynchronously.

A warpgroup is 4 consecutive warps of a block (its first warp a multiple of 4). Its wgmma
reads A (64 x 16) and B (16 x N) from shared memory through matrix descriptors, whose
128-byte-swizzled canonical layouts are, for an operand starting at byte ``s`` and element
``(x, k)`` (``x`` along M or N):

- K-major: byte ``s + (x // 8) SBO + (x % 8) 128 + 2 k``;
- M/N-major: byte ``s + (x // 64) LBO + 2 (x % 64) + (k % 8) 128 + (k // 8) SBO``;

and then the swizzle: bits 4-6 of the address exclusive-or'd with bits 7-9. The address is
the shared window's; here a buffer starts at 0, which the CUDA dialect makes true by placing
every buffer of a wgmma kernel at a multiple of 1024 bytes. The descriptors' base offset is
0, so an operand must start where bits 7-9 are zero.

The accumulators are ``mma.sync``'s C fragments stacked: warp ``w`` of the group holds rows
``16 w + g`` and ``16 w + g + 8``, and ``d[4 j + i]`` is element ``(g + 8 (i >> 1), 8 j + 2 t +
(i & 1))`` (``g = lane >> 2``, ``t = lane & 3``).

Like ``cp.async`` here, a wgmma happens when its group is waited for
(``wgmma.wait_group n`` completes all the warpgroup's groups but the ``n`` newest): it reads
the operands and the accumulators then, so a kernel that overwrites a slot, or reads the
accumulators, before waiting computes a wrong answer here as it may on the device.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taskloom.runtime.emulator import checks, memory, proxies
from taskloom.runtime.emulator.machine import Machine, Mask
from taskloom.runtime.emulator.mma import C_COL, C_ROW
from taskloom.runtime.emulator.values import to_stored, to_value

GROUP = 128  # threads of a warpgroup
_X64, _K16 = np.arange(64)[:, None], np.arange(16)[None, :]


def swizzle128(addr: np.ndarray) -> np.ndarray:
    """The 128-byte swizzle of shared addresses: bits 4-6 ^= bits 7-9."""
    return addr ^ (((addr >> 7) & 7) << 4)


def operand_bytes(rows: int, major: str, lbo: int, sbo: int) -> np.ndarray:
    """The byte offsets, before the swizzle, of an operand's ``rows x 16`` elements ``(x, k)``
    from its start (``rows`` along M or N)."""
    x, k = np.arange(rows)[:, None], _K16
    if major == "k":
        return (x // 8) * sbo + (x % 8) * 128 + 2 * k
    return (x // 64) * lbo + 2 * (x % 64) + (k % 8) * 128 + (k // 8) * sbo


@dataclass
class _Op:
    """One wgmma of every issuing warpgroup, waiting for its group to complete."""

    groups: np.ndarray  # the warpgroups (batch-wide numbers) that issued it
    group: np.ndarray  # per warpgroup, the commit group it belongs to
    lead: np.ndarray  # per warpgroup, its first lane
    a: tuple[memory.Buffer, np.ndarray]  # shared buffer, its keys read (warpgroups x 64 x 16)
    b: tuple[memory.Buffer, np.ndarray]  # (warpgroups x N x 16)
    d: tuple[memory.Buffer, np.ndarray]  # register buffer, each lane's first accumulator
    n: int


class Wgmmas:
    """The wgmmas in flight of a batch of blocks, and each warpgroup's committed groups."""

    def __init__(self, groups: int):
        self.committed = np.zeros(groups, dtype=np.int64)
        self.pending: list[_Op] = []


def _state(st: Machine) -> Wgmmas:
    if getattr(st, "wgmmas", None) is None:
        if st.padded % GROUP:
            raise checks.EmulatorError(f"kernel '{st.kernel}' uses wgmma in blocks of {st.block_threads} threads; "
                                       "a warpgroup is 128 threads, so a block needs a multiple of 128")
        st.wgmmas = Wgmmas(st.T // GROUP)
    return st.wgmmas


def _groups(st: Machine, mask: Mask, what: str) -> np.ndarray:
    """The warpgroups executing ``what``: every one of their 128 threads active, or none."""
    m = mask.m.reshape(-1, GROUP)
    some, every = m.any(axis=1), m.all(axis=1)
    if st.check and (some & ~every).any():
        lane = int(np.nonzero(np.repeat(some & ~every, GROUP) & ~mask.m)[0][0])
        raise checks.EmulatorError(f"kernel '{st.kernel}': {what} is executed by part of a warpgroup; "
                                   f"{st.thread(lane)} does not take part (all 128 threads must)")
    return np.nonzero(some)[0]


def _elements(st: Machine, buf: memory.Buffer, start: np.ndarray, layout: np.ndarray, what: str) -> np.ndarray:
    """Element indices of an operand per warpgroup from its first element ``start``."""
    nbytes = buf.dtype.nbytes
    begin = start.astype(np.int64) * nbytes
    if st.check and ((begin >> 7) & 7).any():
        raise checks.EmulatorError(
            f"kernel '{st.kernel}': wgmma's {what} starts at byte {int(begin[((begin >> 7) & 7) != 0][0])} of "
            f"'{buf.name}', where bits 7-9 are not zero (its descriptor's base offset is 0)")
    addr = swizzle128(begin[:, None, None] + layout[None])
    return addr // nbytes


def issue(st: Machine, d: tuple, a: tuple, b: tuple, n: int, majors: tuple[str, str],
          offsets: tuple[int, int, int, int], mask: Mask) -> None:
    """``wgmma.mma_async`` by the active warpgroups: queued in their open group."""
    groups = _groups(st, mask, "wgmma")
    if not len(groups):
        return
    st.count("wgmma", mask)
    state = _state(st)
    lead = groups * GROUP
    a_lbo, a_sbo, b_lbo, b_sbo = offsets
    (abuf, aidx), (bbuf, bidx) = a, b
    for buf, idx, what in ((abuf, aidx, "A"), (bbuf, bidx, "B")):
        if st.check and (np.broadcast_to(idx, (st.T,))[lead[:, None] + np.arange(GROUP)] !=
                         np.broadcast_to(idx, (st.T,))[lead][:, None]).any():
            raise checks.EmulatorError(f"kernel '{st.kernel}': wgmma's {what} descriptor differs between "
                                       "the threads of a warpgroup")
    ai = _elements(st, abuf, st.full(aidx)[lead], operand_bytes(64, majors[0], a_lbo, a_sbo), "A")
    bi = _elements(st, bbuf, st.full(bidx)[lead], operand_bytes(n, majors[1], b_lbo, b_sbo), "B")
    dbuf, didx = d[0], np.array(st.full(d[1]))
    akeys, bkeys = _keys(st, abuf, ai, lead, "A"), _keys(st, bbuf, bi, lead, "B")
    if st.proxies is not None:
        _check_fences(st, (abuf, akeys), (bbuf, bkeys), (dbuf, didx), lead, n)
    state.pending.append(_Op(groups, state.committed[groups], lead, (abuf, akeys), (bbuf, bkeys), (dbuf, didx), n))


def _check_fences(st: Machine, a: tuple, b: tuple, d: tuple, lead: np.ndarray, n: int) -> None:
    """The operands reach the async proxy, the accumulators were fenced (emulator.proxies)."""
    for (buf, keys), what in ((a, "A operand"), (b, "B operand")):
        proxies.check_read(st, buf, keys.reshape(len(lead), -1), lead, what)
    lanes = (lead[:, None] + np.arange(GROUP)).reshape(-1)
    dbuf, didx = d
    keys = dbuf.keys(didx[:, None] + np.arange(n // 2))[lanes]
    proxies.check_read(st, dbuf, keys, lanes, "accumulators")


def _keys(st: Machine, buf: memory.Buffer, idx: np.ndarray, lead: np.ndarray, what: str) -> np.ndarray:
    """The buffer keys of each warpgroup's operand elements ``idx``; one outside the buffer
    is caught at issue, on the warpgroup's first thread."""
    bad = (idx < 0) | (idx >= buf.size)
    if bad.any():
        w = int(np.nonzero(bad.reshape(len(lead), -1).any(axis=1))[0][0])
        lane, index = int(lead[w]), int(idx[w][bad[w]][0])
        hit = np.zeros((lane + 1, 1), dtype=bool)
        hit[lane] = True
        raise checks.out_of_bounds(st, buf, f"gives wgmma's {what} operand", np.full((lane + 1, 1), index), hit)
    return (st.block_of[lead] * buf.size).reshape((-1,) + (1,) * (idx.ndim - 1)) + idx


def commit(st: Machine, mask: Mask) -> None:
    """``wgmma.commit_group``: the active warpgroups' open wgmmas become a group."""
    _state(st).committed[_groups(st, mask, "wgmma.commit_group")] += 1


def wait(st: Machine, pending: int, mask: Mask) -> None:
    """``wgmma.wait_group pending``: the active warpgroups' older groups complete, in order."""
    state = _state(st)
    waiting = np.zeros(len(state.committed), dtype=bool)
    waiting[_groups(st, mask, "wgmma.wait_group")] = True
    limit = state.committed - pending
    keep = []
    for op in state.pending:
        ready = waiting[op.groups] & (op.group < limit[op.groups])
        if ready.any():
            _complete(st, op, ready)
        if not ready.all():
            keep.append(_Op(op.groups[~ready], op.group[~ready], op.lead[~ready], (op.a[0], op.a[1][~ready]),
                            (op.b[0], op.b[1][~ready]), op.d, op.n))
    state.pending = keep


def check_release(st: Machine, lanes: np.ndarray, barrier: str) -> None:
    """An ``mbarrier.arrive`` (a slot handed back to its producer) by a thread whose
    warpgroup has wgmmas in flight is an error. The PTX ISA lets a slot go once the wgmmas
    reading it are waited for, but on an H200 a producer's copies into a slot freed while
    the warpgroup's newer wgmmas ran computed wrong results, where waiting for all of them
    first computed right (bench/results/2026-11-28-h200-run.md)."""
    state = st.wgmmas
    if state is None or not state.pending:
        return
    busy = np.zeros(len(state.committed), dtype=bool)
    for op in state.pending:
        busy[op.groups] = True
    hit = busy[lanes // GROUP]
    if hit.any():
        raise checks.RaceError(
            f"kernel '{st.kernel}': {st.thread(int(lanes[np.argmax(hit)]))} arrives on mbarrier '{barrier}' while "
            "its warpgroup's wgmmas are in flight: wait for all of them (wgmma.wait_group 0) before freeing a slot")


def check_writes(st: Machine, buf: memory.Buffer, keys: np.ndarray, lanes: np.ndarray) -> None:
    """A write of shared ``keys`` (by ``lanes``, one each) while a wgmma in flight reads
    them is an error: the device may read either value (a store, or a ``cp.async`` that may
    land at once)."""
    state = st.wgmmas
    for op in state.pending if state is not None else ():
        for (obuf, read), what in ((op.a, "A"), (op.b, "B")):
            if obuf is not buf:
                continue
            hit = np.isin(keys, read)
            if hit.any():
                k = int(np.argmax(hit))
                raise checks.RaceError(
                    f"kernel '{st.kernel}': {st.thread(int(lanes[k]))} writes shared buffer '{buf.name}' at index "
                    f"{int(keys[k]) % buf.size} while a wgmma in flight reads it as its {what} operand "
                    "(wait for its group first)")


def _read(buf: memory.Buffer, keys: np.ndarray) -> np.ndarray:
    """Shared elements at ``keys``, as float32."""
    return to_value(buf.data[keys], buf.dtype).astype(np.float32)


def _complete(st: Machine, op: _Op, ready: np.ndarray) -> None:
    """D += A B for the warpgroups of ``op`` that are ``ready``."""
    lead = op.lead[ready]
    A = _read(op.a[0], op.a[1][ready])  # warpgroups x 64 x 16
    B = _read(op.b[0], op.b[1][ready])  # warpgroups x N x 16
    lanes = (lead[:, None] + np.arange(GROUP)).reshape(-1)
    on = np.zeros(st.T, dtype=bool)
    on[lanes] = True
    dbuf, didx = op.d
    per = op.n // 2
    idx = didx[:, None] + np.arange(per)
    acc = to_value(memory.load(st, dbuf, idx, st.mask(on)), dbuf.dtype).astype(np.float32)
    W = len(lead)
    D = np.zeros((W, 64, op.n), np.float32)  # the accumulators as a matrix
    warp, lane = np.arange(GROUP) // 32, np.arange(GROUP) % 32
    e = np.arange(per)
    rows = 16 * warp[:, None] + C_ROW[lane][:, e % 4]
    cols = 8 * (e // 4)[None, :] + C_COL[lane][:, e % 4]
    D[:, rows, cols] = acc[lanes].reshape(W, GROUP, per)
    D += np.matmul(A, B.transpose(0, 2, 1))
    out = np.zeros((st.T, per), np.float32)
    out[lanes] = D[:, rows, cols].reshape(-1, per)
    memory.store(st, dbuf, idx, to_stored(out, dbuf.dtype), st.mask(on))
    proxies.wrote_async(dbuf, dbuf.keys(idx)[lanes])  # the next wgmma of the group is ordered after it
