"""Arrays whose data starts on a cache-line boundary.

numpy aligns large arrays to 16 bytes; a kernel's 64-byte vector loads and stores then
straddle two cache lines each. Outputs, constants and tuning inputs are allocated here.
"""
from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...] | list[int], dtype: Any, alignment: int = ALIGNMENT) -> np.ndarray:
    """An uninitialized C-contiguous array of ``shape`` whose data is ``alignment``-aligned."""
    return aligned_empty_at(shape, dtype, alignment)[0]


def aligned_empty_at(shape: tuple[int, ...] | list[int], dtype: Any,
                     alignment: int = ALIGNMENT) -> tuple[np.ndarray, int]:
    """:func:`aligned_empty` and the address of its data, for a caller that passes it to C
    (reading ``ctypes.data`` again costs as much as the allocation)."""
    dt = np.dtype(dtype)
    count = math.prod(int(d) for d in shape)
    raw = np.empty(count * dt.itemsize + alignment, dtype=np.uint8)
    # the address through a ctypes view of the (fresh, writable, never empty) buffer: a
    # third of what ``raw.ctypes.data`` costs, which matters on a small graph's every call
    address = ctypes.addressof(ctypes.c_char.from_buffer(raw))
    start = -address % alignment
    return np.ndarray(tuple(shape), dt, buffer=raw, offset=start), address + start


def aligned_copy(a: np.ndarray, alignment: int = ALIGNMENT) -> np.ndarray:
    """``a`` as a C-contiguous, ``alignment``-aligned array (``a`` itself when it already is)."""
    if a.flags.c_contiguous and a.ctypes.data % alignment == 0:
        return a
    out = aligned_empty(a.shape, a.dtype, alignment)
    np.copyto(out, a)
    return out
