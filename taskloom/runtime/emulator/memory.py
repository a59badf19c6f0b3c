"""Buffers and the accesses to them, checked and counted.

Every access is a (lanes, k) array of element indices: lane ``t`` touches ``k`` elements
(one for a scalar load, a row for ``ldmatrix``, a vector for ``cp.async``); ``ok`` says
which of them it really touches. A uniform index has one row. Global buffers are the
arguments, one for the launch; shared buffers one per block; register buffers one per
thread. All live in one flat array, addressed by :meth:`Buffer.keys`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taskloom.ir.dtypes import DataType
from taskloom.runtime.emulator import checks, counters, proxies
from taskloom.runtime.emulator.machine import Machine, Mask
from taskloom.runtime.emulator.values import bf16_from_bits, bf16_to_bits, storage


@dataclass
class Buffer:
    name: str
    scope: str  # "global", "shared" or "register"
    dtype: DataType
    size: int  # elements of one instance
    data: np.ndarray  # all instances, flat, in the storage dtype
    base: np.ndarray | None = None  # per lane, the offset of the lane's instance (None: global)
    races: checks.RaceTracker | None = None
    generic: np.ndarray | None = None  # unfenced generic writers, where a wgmma reads it (emulator.proxies)

    def keys(self, idx: np.ndarray) -> np.ndarray:
        return idx if self.base is None else self.base + idx


def garbage(dtype: DataType, count: int) -> np.ndarray:
    """Fresh storage as the device leaves it: not zeros. Every byte is 0xFF (NaN in each float
    type, -1 in each signed integer), so a kernel that reads what it never wrote computes NaN
    or fails an index check here, instead of finding the zeros it may not find on the GPU."""
    if dtype.is_bool():
        return np.ones(count, dtype=bool)
    return np.full(count * dtype.nbytes, 0xFF, dtype=np.uint8).view(storage(dtype))


def new_buffer(st: Machine, name: str, scope: str, dtype: DataType, size: int) -> Buffer:
    """A shared (one per block) or register (one per thread) buffer, holding :func:`garbage`."""
    shared = scope == "shared"
    count = st.nblocks if shared else st.T
    owner = st.block_of if shared else np.arange(st.T, dtype=np.int64)
    races = checks.RaceTracker(st.nblocks, size) if shared and st.check and size else None
    generic = np.full(count * size, proxies.NONE, dtype=np.int64) if proxies.tracked(st, scope, name) else None
    return Buffer(name, scope, dtype, size, garbage(dtype, count * size), (owner * size)[:, None], races, generic)


def checked(st: Machine, buf: Buffer, idx: np.ndarray, mask: Mask, ok: np.ndarray | None,
             what: str) -> np.ndarray:
    """``idx`` with indices outside the buffer raised as errors on active lanes and made 0
    on the others (and where ``ok`` is false)."""
    if idx.dtype.kind == "i":  # one comparison: negative indices are huge unsigned ones
        bad = idx.view(idx.dtype.str.replace("i", "u")) >= buf.size
    else:
        bad = (idx < 0) | (idx >= buf.size)
    if ok is not None:
        bad = bad & ok
    if bad.any():
        hit = bad & mask.m[:, None]
        if hit.any():
            raise checks.out_of_bounds(st, buf, what, idx, hit)
        idx = np.where(bad, 0, idx)
    return idx if ok is None else np.where(ok, idx, 0)


def check_aligned(st: Machine, buf: Buffer, idx: np.ndarray, nbytes: int, mask: Mask, what: str) -> None:
    """A wide access (``nbytes`` at once) must start on a multiple of ``nbytes``, as on the device."""
    odd = mask.m & ((st.full(idx) * buf.dtype.nbytes) % nbytes != 0)
    if odd.any():
        raise checks.misaligned(st, buf, what, st.full(idx), odd, nbytes)


def _touched(st: Machine, mask: Mask, k: int, ok: np.ndarray | None) -> np.ndarray | None:
    """Which (lane, element) pairs an access touches, lanes x ``k``; None for all of them."""
    if mask.all and ok is None:
        return None
    act = np.broadcast_to(mask.m[:, None], (st.T, k))
    return act if ok is None else act & ok


def _everywhere(st: Machine, mask: Mask, k: int, ok: np.ndarray | None) -> np.ndarray:
    sel = _touched(st, mask, k, ok)
    return np.ones((st.T, k), dtype=bool) if sel is None else sel


def count_access(st: Machine, buf: Buffer, kind: str, idx: np.ndarray, mask: Mask,
                 ok: np.ndarray | None) -> None:
    """Counts a global or shared request: its sectors, or its wavefronts and bank conflicts."""
    c, size, k = st.counters, buf.dtype.nbytes, idx.shape[1]
    if idx.shape[0] == 1 and k == 1 and ok is None:  # one element for the whole warp: no conflict
        if buf.scope == "global":
            counters.add_global(c, kind, mask.warps, mask.warps)
        else:
            counters.add_shared(c, kind, mask.warps, mask.warps, 0)
        return
    full = np.broadcast_to(idx, (st.T, k)).astype(np.int64)
    valid = _touched(st, mask, k, ok)
    if buf.scope == "global":
        counters.count_global(c, kind, full * size, valid, mask.warps)
    else:
        counters.count_shared(c, kind, full * size // 4, valid, size * k, mask.warps)


def _track(st: Machine, buf: Buffer, kind: str, keys: np.ndarray, mask: Mask, ok: np.ndarray | None) -> None:
    """Tells the race checker which lanes touch which elements."""
    k = keys.shape[1]
    full = np.broadcast_to(keys, (st.T, k))
    sel = _touched(st, mask, k, ok)
    if sel is None:
        keys, lanes = full.reshape(-1), st.lanes(k)
    else:
        keys, lanes = full[sel], np.broadcast_to(np.arange(st.T)[:, None], full.shape)[sel]
    (buf.races.read if kind == "load" else buf.races.write)(st, buf.name, keys, lanes)  # type: ignore[union-attr]


def load(st: Machine, buf: Buffer, idx: np.ndarray, mask: Mask, ok: np.ndarray | None = None,
         what: str = "loads from") -> np.ndarray:
    """The stored elements at ``idx`` (lanes x k), zero where not ``ok``."""
    if buf.size == 0 or not mask.any:
        if mask.any and (ok is None or ok.any()):
            raise checks.out_of_bounds(st, buf, what, idx, _everywhere(st, mask, idx.shape[1], ok))
        return np.zeros(idx.shape, dtype=buf.data.dtype)
    idx = checked(st, buf, idx, mask, ok, what)
    keys = buf.keys(idx)
    out = buf.data[keys]
    if ok is not None:
        out = np.where(ok, out, np.zeros(1, dtype=out.dtype))
    if buf.scope != "register":
        count_access(st, buf, "load", idx, mask, ok)
        if buf.races is not None:
            _track(st, buf, "load", keys, mask, ok)
    return out


def guard_async_reads(st: Machine, buf: Buffer, keys: np.ndarray, mask: Mask, ok: np.ndarray | None) -> None:
    """Refuses a write of shared ``keys`` that a wgmma in flight reads (see
    :func:`taskloom.runtime.emulator.wgmma.check_writes`)."""
    if buf.scope != "shared" or st.wgmmas is None or not st.wgmmas.pending:
        return
    from taskloom.runtime.emulator.wgmma import check_writes
    full = np.broadcast_to(keys, (st.T, keys.shape[1]))
    sel = _everywhere(st, mask, keys.shape[1], ok)
    check_writes(st, buf, full[sel], np.broadcast_to(np.arange(st.T)[:, None], full.shape)[sel])


def store(st: Machine, buf: Buffer, idx: np.ndarray, values: np.ndarray, mask: Mask,
          ok: np.ndarray | None = None, what: str = "stores to", count: bool = True) -> None:
    """Writes ``values`` (stored elements, lanes x k) at ``idx`` for the active lanes."""
    if not mask.any:
        return
    if buf.size == 0:
        raise checks.out_of_bounds(st, buf, what, idx, _everywhere(st, mask, idx.shape[1], ok))
    idx = checked(st, buf, idx, mask, ok, what)
    keys = buf.keys(idx)
    guard_async_reads(st, buf, keys, mask, ok)
    if buf.races is not None:
        _track(st, buf, "store", keys, mask, ok)
    if count and buf.scope != "register":
        count_access(st, buf, "store", idx, mask, ok)
    if mask.all and ok is None:
        keys, values = np.broadcast_arrays(keys, values)
        buf.data[keys] = values
        if buf.generic is not None:
            proxies.wrote(buf, np.broadcast_to(keys, (st.T, keys.shape[1])), np.arange(st.T)[:, None])
        return
    keys, values = np.broadcast_arrays(np.broadcast_to(keys, (st.T, keys.shape[1])), values)
    sel = _everywhere(st, mask, keys.shape[1], ok)
    buf.data[keys[sel]] = values[sel]
    if buf.generic is not None:
        proxies.wrote(buf, keys[sel], np.broadcast_to(np.arange(st.T)[:, None], keys.shape)[sel])


def atomic_add(st: Machine, buf: Buffer, idx: np.ndarray, values: np.ndarray, mask: Mask) -> None:
    """``atomicAdd`` by every active lane: all the additions land, in lane order."""
    if not mask.any:
        return
    idx = checked(st, buf, idx, mask, None, "adds atomically to")
    count_access(st, buf, "store", idx, mask, None)
    keys = np.broadcast_to(buf.keys(idx), (st.T, 1))[mask.m, 0]
    vals = np.broadcast_to(values, (st.T,))[mask.m]
    if buf.dtype.name != "bfloat16":
        np.add.at(buf.data, keys, vals.astype(buf.data.dtype))
        return
    for k, v in zip(keys.tolist(), vals.tolist()):  # bfloat16: each addition rounds
        total = bf16_from_bits(buf.data[k:k + 1]) + np.float32(v)
        buf.data[k:k + 1] = bf16_to_bits(total)
