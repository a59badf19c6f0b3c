"""Arrays whose data starts on a cache-line boundary.

numpy aligns large arrays to 16 bytes; a kernel's 64-byte vector loads and stores then
straddle two cache lines each. Outputs, constants and tuning inputs are allocated here.
"""
from __future__ import annotations

from typing import Any

import numpy as np

ALIGNMENT = 64


def aligned_empty(shape: tuple[int, ...] | list[int], dtype: Any, alignment: int = ALIGNMENT) -> np.ndarray:
    """An uninitialized C-contiguous array of ``shape`` whose data is ``alignment``-aligned."""
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dt.itemsize + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + count * dt.itemsize].view(dt).reshape(tuple(shape))


def aligned_copy(a: np.ndarray, alignment: int = ALIGNMENT) -> np.ndarray:
    """``a`` as a C-contiguous, ``alignment``-aligned array (``a`` itself when it already is)."""
    if a.flags.c_contiguous and a.ctypes.data % alignment == 0:
        return a
    out = aligned_empty(a.shape, a.dtype, alignment)
    np.copyto(out, a)
    return out
