"""Hopper's asynchronous barriers (``mbarrier``) and tensor-memory-accelerator copies (TMA,
``cp.async.bulk.tensor``), as the PTX ISA orders them.

An mbarrier (one int64 of shared memory) counts a phase's arrivals and the bytes it still
expects: ``mbarrier.init`` sets the arrivals a phase needs; ``arrive.expect_tx`` arrives and
adds bytes to expect; a TMA copy names the barrier its bytes land on. When a phase has all
its arrivals and bytes it completes and the next begins (its parity flips). A wait on the
phase of parity ``p`` returns once that phase has completed.

A TMA copy reads its box of global memory when it is issued (elements outside the tensor are
zeros) and lands in shared memory, swizzled by 128 bytes, when some thread waits on its
barrier: until then the slot holds its old contents, so a kernel that reads it without
waiting reads stale data here as it may on the device. A wait that nothing in flight can
complete would hang the device; here it is an error naming the barrier and what it lacks.
A copy into shared memory that a wgmma in flight reads is refused, at issue and at landing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from taskloom.ir.gpu import SWIZZLE_ALIGN, TensorMap, map_extent
from taskloom.runtime.emulator import checks, memory, proxies
from taskloom.runtime.emulator.machine import Machine, Mask
from taskloom.runtime.emulator.wgmma import check_release, check_writes, swizzle128


@dataclass
class _Copy:
    dst: memory.Buffer
    keys: np.ndarray  # the shared elements it writes
    data: np.ndarray  # what lands there
    lane: int  # the issuing thread


@dataclass
class Barrier:
    """One mbarrier of one block."""

    count: int  # arrivals a phase needs
    pending: int  # arrivals this phase still needs
    tx: int = 0  # bytes this phase still expects
    phase: int = 0  # the parity of the phase under way
    copies: list[_Copy] = field(default_factory=list)

    def complete(self) -> None:
        """Starts the next phase where this one has all it waits for."""
        if self.pending <= 0 and self.tx <= 0:
            self.phase ^= 1
            self.pending, self.tx = self.count, 0


def _barriers(st: Machine) -> dict:
    if getattr(st, "mbarriers", None) is None:
        st.mbarriers = {}
    return st.mbarriers


def _keys(st: Machine, buf: memory.Buffer, idx: np.ndarray, mask: Mask, what: str) -> list[tuple[int, int]]:
    """(lane, buffer key) of each active lane's barrier element."""
    if buf.dtype.nbytes != 8:
        raise checks.EmulatorError(f"kernel '{st.kernel}': {what} on '{buf.name}', whose elements are "
                                   f"{buf.dtype.name}; an mbarrier is 64 bits")
    full = memory.checked(st, buf, st.full(idx)[:, None], mask, None, what)
    lanes = np.nonzero(mask.m)[0]
    keys = buf.keys(full)[lanes, 0] if buf.base is not None else full[lanes, 0]
    return [(int(lane), (buf.name, int(key))) for lane, key in zip(lanes, keys)]


def _barrier(st: Machine, key: tuple, lane: int, what: str) -> Barrier:
    found = _barriers(st).get(key)
    if found is None:
        raise checks.EmulatorError(f"kernel '{st.kernel}': {st.thread(lane)} {what} mbarrier '{key[0]}' "
                                   "before it is initialized (mbarrier_init)")
    return found


def init(st: Machine, buf: memory.Buffer, idx: np.ndarray, count: int, mask: Mask) -> None:
    """``mbarrier.init`` by the active lanes."""
    for _, key in _keys(st, buf, idx, mask, "mbarrier_init"):
        _barriers(st)[key] = Barrier(count, count)


def expect_tx(st: Machine, buf: memory.Buffer, idx: np.ndarray, nbytes: int, mask: Mask) -> None:
    """``mbarrier.arrive.expect_tx``: each active lane arrives, expecting ``nbytes`` more."""
    for lane, key in _keys(st, buf, idx, mask, "mbarrier_expect_tx"):
        b = _barrier(st, key, lane, "arrives on")
        b.tx += nbytes
        b.pending -= 1
        b.complete()


def arrive(st: Machine, buf: memory.Buffer, idx: np.ndarray, mask: Mask) -> None:
    """``mbarrier.arrive`` by each active lane (none with its warpgroup's wgmmas in flight)."""
    if st.check:
        check_release(st, np.nonzero(mask.m)[0], buf.name)
    for lane, key in _keys(st, buf, idx, mask, "mbarrier_arrive"):
        b = _barrier(st, key, lane, "arrives on")
        b.pending -= 1
        b.complete()


def ready(st: Machine, buf: memory.Buffer, idx: np.ndarray, phase: np.ndarray, mask: Mask) -> bool:
    """Whether every active lane's wait on the phase of parity ``phase`` would return now,
    the copies in flight on its barrier landed first (they may land at any time)."""
    parity = st.full(phase)
    return all(_phase_done(st, _barrier(st, key, lane, "waits on"), int(parity[lane]) & 1)
               for lane, key in _keys(st, buf, idx, mask, "mbarrier_wait"))


def _phase_done(st: Machine, b: Barrier, parity: int) -> bool:
    """Whether ``b``'s phase of ``parity`` has completed, its copies in flight landed first."""
    if b.phase == parity:
        for c in b.copies:
            _land(st, c)
            b.tx -= c.data.size * c.dst.dtype.nbytes
        b.copies = []
        b.complete()
    return b.phase != parity


def wait(st: Machine, buf: memory.Buffer, idx: np.ndarray, phase: np.ndarray, mask: Mask) -> None:
    """Each active lane waits for the phase of parity ``phase`` of its barrier: the copies
    in flight on it land; a phase that still cannot complete is an error."""
    parity = st.full(phase)
    for lane, key in _keys(st, buf, idx, mask, "mbarrier_wait"):
        b = _barrier(st, key, lane, "waits on")
        if not _phase_done(st, b, int(parity[lane]) & 1):
            raise checks.EmulatorError(
                f"kernel '{st.kernel}': {st.thread(lane)} waits on mbarrier '{key[0]}' for a phase that cannot "
                f"complete: {b.pending} of {b.count} arrivals and {b.tx} bytes still missing, nothing in flight "
                "(the device would hang)")


def load(st: Machine, dst: memory.Buffer, dst_idx: np.ndarray, src: memory.Buffer, tmap: TensorMap,
         coords: list[np.ndarray], bar: memory.Buffer, bar_idx: np.ndarray, mask: Mask) -> None:
    """``cp.async.bulk.tensor`` by each active lane: its box read now, landing at a wait."""
    st.count("tma", mask)
    nbytes = dst.dtype.nbytes
    offsets = _box_offsets(tmap, nbytes)
    inner = [np.arange(b) for b in tmap.box]
    for lane, key in _keys(st, bar, bar_idx, mask, "tma_load's barrier"):
        b = _barrier(st, key, lane, "gives tma_load")
        at = [int(st.full(c)[lane]) for c in coords]
        grids = np.meshgrid(*[a + i for a, i in zip(at, inner)], indexing="ij")  # innermost first
        inside = np.ones(grids[0].shape, dtype=bool)
        for g, d in zip(grids, tmap.dims):
            inside &= (g >= 0) & (g < map_extent(d, lambda name: int(st.full(st.env[name])[lane])))
        element = grids[0].astype(np.int64)
        for g, stride in zip(grids[1:], tmap.strides):
            element = element + g.astype(np.int64) * (stride // nbytes)
        # box order is innermost fastest: transpose the ij grids to that order
        element, inside = element.transpose().reshape(-1), inside.transpose().reshape(-1)
        values = src.data[np.where(inside, element, 0)]
        values = np.where(inside, values, np.zeros(1, dtype=values.dtype))
        start = int(st.full(dst_idx)[lane]) * nbytes
        if start % SWIZZLE_ALIGN:
            raise checks.EmulatorError(f"kernel '{st.kernel}': {st.thread(lane)} gives tma_load the shared "
                                       f"address {start} of '{dst.name}'; a 128-byte-swizzled box starts on "
                                       f"{SWIZZLE_ALIGN}")
        index = swizzle128(start + offsets) // nbytes
        if index.max() >= dst.size:
            raise checks.OutOfBoundsError(f"kernel '{st.kernel}': {st.thread(lane)}'s tma_load reaches element "
                                          f"{int(index.max())} of shared '{dst.name}' ({dst.size} elements)")
        keys = int(dst.base[lane, 0]) + index
        check_writes(st, dst, keys, np.full(len(keys), lane))
        b.copies.append(_Copy(dst, keys, values, lane))


def _box_offsets(tmap: TensorMap, nbytes: int) -> np.ndarray:
    """Each box element's byte offset in shared memory before the swizzle, innermost fastest."""
    return np.arange(int(np.prod(tmap.box)), dtype=np.int64) * nbytes


def _land(st: Machine, c: _Copy) -> None:
    check_writes(st, c.dst, c.keys, np.full(len(c.keys), c.lane))
    c.dst.data[c.keys] = c.data
    proxies.wrote_async(c.dst, c.keys)
