"""The memory checker: out-of-bounds accesses, collectives under divergence and shared-memory
races, each an :class:`EmulatorError` naming the kernel, the buffer, the index, the thread
and the block.

A shared-memory race is two different threads touching one element between two barriers,
at least one of them writing (within a warp too: since Volta its lanes need not run in
lockstep). Per shared buffer the checker keeps, since the last barrier, the thread that
wrote each element and the lowest and highest threads that read it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from taskloom.errors import TaskloomError

if TYPE_CHECKING:
    from taskloom.runtime.emulator.machine import Machine, Mask

_NONE, _FAR = -1, np.iinfo(np.int64).max  # no thread; above every thread


class EmulatorError(TaskloomError):
    """A kernel run in the SIMT emulator did what would fault or compute garbage on the device.

    ``kernel``, ``buffer``, ``index``, ``thread`` and ``block`` say where, when they apply.
    """

    def __init__(self, message: str, kernel: str | None = None, buffer: str | None = None,
                 index: int | None = None, thread: tuple[int, ...] | None = None,
                 block: tuple[int, ...] | None = None):
        super().__init__(message)
        self.kernel, self.buffer, self.index, self.thread, self.block = kernel, buffer, index, thread, block


class OutOfBoundsError(EmulatorError):
    """An access outside its buffer, or misaligned for its instruction."""


class DivergenceError(EmulatorError):
    """A barrier or a warp collective reached by only some of the threads that must take part."""


class RaceError(EmulatorError):
    """Two threads touching one shared element between two barriers, or two blocks one global
    element during a launch, one of them writing."""


def coords(st: "Machine", lane: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    ix = st.index
    return (tuple(int(ix[f"thread_idx_{a}"][lane]) for a in "xyz"),
            tuple(int(ix[f"block_idx_{a}"][lane]) for a in "xyz"))


def _fail(cls: type[EmulatorError], st: "Machine", lane: int, text: str, buffer: str | None = None,
          index: int | None = None) -> EmulatorError:
    thread, block = coords(st, lane)
    return cls(f"kernel '{st.kernel}': {text}", st.kernel, buffer, index, thread, block)


def out_of_bounds(st: "Machine", buf: Any, what: str, idx: np.ndarray, hit: np.ndarray) -> EmulatorError:
    """The error for the first lane of ``hit`` (lanes x elements), whose index is ``idx``."""
    lane, k = (int(x[0]) for x in np.nonzero(hit))
    index = int(np.broadcast_to(idx, hit.shape)[lane, k])
    return _fail(OutOfBoundsError, st, lane, f"{st.thread(lane)} {what} {buf.scope} buffer "
                 f"'{buf.name}' at index {index}, outside its {buf.size} elements", buf.name, index)


def misaligned(st: "Machine", buf: Any, what: str, idx: np.ndarray, hit: np.ndarray, align: int) -> EmulatorError:
    lane = int(np.nonzero(hit)[0][0])
    index = int(np.broadcast_to(idx, hit.shape)[lane])
    return _fail(OutOfBoundsError, st, lane, f"{st.thread(lane)} {what} {buf.scope} buffer '{buf.name}' at "
                 f"index {index}, an address not aligned to {align} bytes", buf.name, index)


def check_barrier(st: "Machine", mask: "Mask") -> None:
    """A barrier must be reached by all of a block's threads or by none."""
    act = mask.m.reshape(st.nblocks, st.padded)
    live = st.live.reshape(st.nblocks, st.padded)
    split = act.any(axis=1) & (act != live).any(axis=1)
    if split.any():
        b = int(np.argmax(split))
        here = b * st.padded + int(np.argmax(act[b]))
        away = b * st.padded + int(np.argmax(live[b] & ~act[b]))
        thread, _ = coords(st, away)
        raise _fail(DivergenceError, st, here, f"barrier() reached by {st.thread(here)} while thread "
                    f"({thread[0]}, {thread[1]}, {thread[2]}) of that block does not reach it "
                    "(a __syncthreads() under divergent control flow)")


def check_converged(st: "Machine", mask: "Mask", what: str) -> None:
    """A warp collective (shuffle, ldmatrix, mma.sync) needs all 32 lanes of a warp."""
    act = mask.m.reshape(-1, 32)
    split = act.any(axis=1) & ~act.all(axis=1)
    if split.any():
        w = int(np.argmax(split))
        here, away = 32 * w + int(np.argmax(act[w])), 32 * w + int(np.argmax(~act[w]))
        if st.live[away]:
            t, _ = coords(st, away)
            gone = f", thread ({t[0]}, {t[1]}, {t[2]}), is inactive"
        else:
            gone = " does not exist (the block is not a whole number of warps)"
        raise _fail(DivergenceError, st, here, f"{what} by {st.thread(here)} while lane {away % 32} of its warp"
                    f"{gone}; all 32 lanes must take part")


class RaceTracker:
    """Who touched each element of one shared buffer since the last barrier: the thread that
    wrote it, and the lowest and highest threads that read it.

    Reads are many and writes few, so reads are only logged, and folded into the lowest and
    highest readers when a write needs them; a barrier forgets the log.
    """

    def __init__(self, nblocks: int, size: int):
        self.size = size
        n = nblocks * size
        self.writer = np.full(n, _NONE, dtype=np.int64)
        self.lo = np.full(n, _FAR, dtype=np.int64)
        self.hi = np.full(n, _NONE, dtype=np.int64)
        self.reads: list[tuple[np.ndarray, np.ndarray]] = []
        self.written = False  # whether anything was written since the last barrier

    def reset(self, blocks: np.ndarray) -> None:
        """A barrier passed by ``blocks`` (a mask over the batch's blocks) starts a new interval."""
        if not blocks.all():
            self._fold()  # the other blocks' reads stay
        self.reads.clear()
        for a, empty in ((self.writer, _NONE), (self.lo, _FAR), (self.hi, _NONE)):
            a.reshape(-1, self.size)[blocks] = empty
        self.written = self.written and not blocks.all()

    def _fold(self) -> None:
        if self.reads:
            keys = np.concatenate([k for k, _ in self.reads])
            lanes = np.concatenate([t for _, t in self.reads])
            np.minimum.at(self.lo, keys, lanes)
            np.maximum.at(self.hi, keys, lanes)
            self.reads.clear()

    def read(self, st: "Machine", name: str, keys: np.ndarray, lanes: np.ndarray) -> None:
        """``lanes[i]`` reads element ``keys[i]``."""
        if self.written:
            w = self.writer[keys]
            clash = (w != _NONE) & (w != lanes)
            if clash.any():
                i = int(np.argmax(clash))
                self._raise(st, name, keys[i], lanes[i], w[i], "reads it", "wrote it, with no barrier between")
        self.reads.append((keys, lanes))

    def write(self, st: "Machine", name: str, keys: np.ndarray, lanes: np.ndarray) -> None:
        """``lanes[i]`` writes element ``keys[i]``."""
        self._fold()
        _refuse_write(self, st, name, keys, lanes, lanes, ", with no barrier between")
        self.writer[keys] = lanes
        self.written = True
        back = self.writer[keys]
        clash = back != lanes  # two lanes of this access wrote one element
        if clash.any():
            i = int(np.argmax(clash))
            self._raise(st, name, keys[i], back[i], lanes[i], "writes it", "writes it in the same instruction")

    def _raise(self, st: "Machine", name: str, key: int, lane: int, other: int, does: str, did: str) -> None:
        index = int(key) % self.size
        t, _ = coords(st, int(other))
        raise _fail(RaceError, st, int(lane), f"shared-memory race on '{name}' at index {index}: "
                    f"{st.thread(int(lane))} {does} and thread ({t[0]}, {t[1]}, {t[2]}) {did}", name, index)


def _refuse_write(tracker: Any, st: "Machine", name: str, keys: np.ndarray, lanes: np.ndarray, who: np.ndarray,
                  after: str) -> None:
    """Raises where another than ``who`` (threads, or blocks) wrote or read an element of
    ``keys`` that ``lanes`` now write; ``tracker`` keeps the writer and the lowest and
    highest readers of each element."""
    w, lo, hi = tracker.writer[keys], tracker.lo[keys], tracker.hi[keys]
    for seen, did in ((w, "wrote"), (np.where(lo != who, lo, hi), "read")):
        clash = (seen != _NONE) & (seen != _FAR) & (seen != who)
        if clash.any():
            i = int(np.argmax(clash))
            tracker._raise(st, name, keys[i], lanes[i], seen[i], "writes it", f"{did} it{after}")


class BlockRaceTracker:
    """Which block wrote each element of one global buffer during a launch, and the lowest
    and highest blocks that read it. Blocks run in any order and meet at no barrier, so an
    element one block writes and another reads or writes is a race (atomics aside); the
    emulator runs blocks in batches one after another, which would hide it.
    """

    def __init__(self, size: int):
        self.writer = np.full(size, _NONE, dtype=np.int64)
        self.lo = np.full(size, _FAR, dtype=np.int64)
        self.hi = np.full(size, _NONE, dtype=np.int64)

    def read(self, st: "Machine", name: str, keys: np.ndarray, lanes: np.ndarray) -> None:
        """``lanes[i]`` reads element ``keys[i]``."""
        blocks = st.first + st.block_of[lanes]
        w = self.writer[keys]
        clash = (w != _NONE) & (w != blocks)
        if clash.any():
            i = int(np.argmax(clash))
            self._raise(st, name, keys[i], lanes[i], w[i], "reads it", "wrote it")
        np.minimum.at(self.lo, keys, blocks)
        np.maximum.at(self.hi, keys, blocks)

    def write(self, st: "Machine", name: str, keys: np.ndarray, lanes: np.ndarray) -> None:
        """``lanes[i]`` writes element ``keys[i]``."""
        blocks = st.first + st.block_of[lanes]
        _refuse_write(self, st, name, keys, lanes, blocks, "")
        self.writer[keys] = blocks

    @staticmethod
    def _raise(st: "Machine", name: str, key: int, lane: int, other: int, does: str, did: str) -> None:
        raise _fail(RaceError, st, int(lane), f"global-memory race on '{name}' at index {int(key)}: "
                    f"{st.thread(int(lane))} {does} and block {int(other)} (linear) {did} in the same launch; "
                    "blocks are not ordered", name, int(key))
