"""Warp shuffles and warp reductions: the 32 consecutive lanes of a warp trade values.

``__shfl_*_sync(0xffffffff, v, b)`` as the PTX ISA defines ``shfl.sync`` for a width of 32:
lane ``l`` reads lane ``j`` (``idx``: ``b % 32``; ``up``: ``l - b``; ``down``: ``l + b``;
``xor``: ``l ^ b``) and keeps its own value when ``j`` is outside the warp. The reductions
are the prelude's butterflies, in its order, so float sums round as on the device.
"""
from __future__ import annotations

import numpy as np

from taskloom.runtime.emulator import checks
from taskloom.runtime.emulator.machine import Machine, Mask

BUTTERFLY = (16, 8, 4, 2, 1)


def _source_lane(kind: str, lane: np.ndarray, b: np.ndarray) -> np.ndarray:
    b = b.astype(np.int64) & 0xFFFFFFFF  # the lane argument is an unsigned int
    if kind == "shfl_idx":
        return b & 31
    j = {"shfl_up": lane - b, "shfl_down": lane + b, "shfl_xor": lane ^ b}[kind]
    return np.where((j >= 0) & (j < 32), j, lane)


def shuffle(st: Machine, kind: str, value: np.ndarray, b: np.ndarray, mask: Mask) -> np.ndarray:
    """``kind(value, b)`` on every warp with an active lane."""
    if st.check:
        checks.check_converged(st, mask, f"{kind}()")
    st.count("shuffle", mask)
    if value.shape[0] == 1:
        return value  # every lane holds the same value
    src = _source_lane(kind, st.lane_id, st.full(b))
    return np.take_along_axis(value.reshape(-1, 32), src.reshape(-1, 32), axis=1).reshape(-1)


def reduce(st: Machine, kind: str, value: np.ndarray, mask: Mask) -> np.ndarray:
    """``warp_sum``/``warp_max``: ``v = v op shfl_xor(v, m)`` for m = 16, 8, 4, 2, 1."""
    if st.check:
        checks.check_converged(st, mask, f"{kind}()")
    st.count("shuffle", mask, len(BUTTERFLY))
    st.count("arith", mask, len(BUTTERFLY))
    v = st.full(value).reshape(-1, 32)
    lanes = np.arange(32)
    for m in BUTTERFLY:
        other = v[:, lanes ^ m]
        v = v + other if kind == "warp_sum" else np.where(other > v, other, v)
    return v.reshape(-1)
