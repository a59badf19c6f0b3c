"""Arrays whose data starts on a cache-line boundary.

numpy aligns large arrays to 16 bytes; a kernel's 64-byte vector loads and stores then
straddle two cache lines each. Outputs, constants and tuning inputs are allocated here.

Large ones are mapped from the system directly, page-aligned. numpy advises the kernel to
back an array of 4 MiB or more with transparent huge pages; where the kernel compacts memory
to find them when the array is first written, that first write takes several times as long
as with the system's default pages, and it comes with every weight packed at compile time,
every arena and every large output (bench/results/2026-11-29-results-in-place.md).
"""
from __future__ import annotations

import ctypes
import math
import mmap
from typing import Any

import numpy as np

ALIGNMENT = 64

#: Buffers of at least this many bytes are mapped directly (numpy's own threshold for its
#: huge-page advice).
MAPPED_BYTES = 4 << 20


def raw_buffer(nbytes: int, alignment: int = ALIGNMENT, zeroed: bool = False) -> tuple[np.ndarray, int]:
    """A byte array of ``nbytes`` whose data starts ``alignment``-aligned, and that address;
    zero-filled with ``zeroed`` (a mapped buffer always is)."""
    if nbytes >= MAPPED_BYTES and mmap.PAGESIZE % alignment == 0:
        mapped = mmap.mmap(-1, nbytes)
        return np.frombuffer(mapped, np.uint8), ctypes.addressof(ctypes.c_char.from_buffer(mapped))
    raw = (np.zeros if zeroed else np.empty)(nbytes + alignment, dtype=np.uint8)
    # the address through a ctypes view of the (fresh, writable, never empty) buffer: a
    # third of what ``raw.ctypes.data`` costs, which matters on a small graph's every call
    address = ctypes.addressof(ctypes.c_char.from_buffer(raw))
    start = -address % alignment
    return raw[start:start + nbytes], address + start


def aligned_empty(shape: tuple[int, ...] | list[int], dtype: Any, alignment: int = ALIGNMENT) -> np.ndarray:
    """An uninitialized C-contiguous array of ``shape`` whose data is ``alignment``-aligned."""
    return aligned_empty_at(shape, dtype, alignment)[0]


def aligned_empty_at(shape: tuple[int, ...] | list[int], dtype: Any,
                     alignment: int = ALIGNMENT) -> tuple[np.ndarray, int]:
    """:func:`aligned_empty` and the address of its data, for a caller that passes it to C
    (reading ``ctypes.data`` again costs as much as the allocation)."""
    dt = np.dtype(dtype)
    count = math.prod(int(d) for d in shape)
    raw, address = raw_buffer(count * dt.itemsize, alignment)
    return np.ndarray(tuple(shape), dt, buffer=raw), address


def aligned_copy(a: np.ndarray, alignment: int = ALIGNMENT) -> np.ndarray:
    """``a`` as a C-contiguous, ``alignment``-aligned array (``a`` itself when it already is)."""
    if a.flags.c_contiguous and a.ctypes.data % alignment == 0:
        return a
    out = aligned_empty(a.shape, a.dtype, alignment)
    np.copyto(out, a)
    return out
