"""``ldmatrix`` and ``mma.sync.m16n8k16`` lane by lane, with the PTX ISA's fragment layouts.

With ``g = lane >> 2`` (groupID) and ``t = lane % 4`` (threadID_in_group):

- ``ldmatrix .m8n8 .x{1,2,4}``: lane ``l`` gives the address of row ``l % 8`` of matrix
  ``l // 8`` (8 consecutive 16-bit elements); for each matrix ``i`` lane ``l`` receives
  elements ``(g, 2t)`` and ``(g, 2t + 1)`` into ``dst[2i]``, ``dst[2i + 1]``; with
  ``.trans`` elements ``(2t, g)`` and ``(2t + 1, g)``.
- ``mma.m16n8k16 .row.col``: A (16 x 16) element ``a[i]`` of lane ``l`` is at row
  ``g + 8 ((i >> 1) & 1)``, column ``2t + (i & 1) + 8 (i >> 2)``; B (16 x 8, k x n)
  element ``b[i]`` at row ``2t + (i & 1) + 8 (i >> 1)``, column ``g``; C and D (16 x 8)
  element ``c[i]`` at row ``g + 8 (i >> 1)``, column ``2t + (i & 1)``.

The products of 16-bit inputs are exact in float32; they are summed in float32.
"""
from __future__ import annotations

import numpy as np

from taskloom.ir.dtypes import DataType
from taskloom.runtime.emulator import checks, memory
from taskloom.runtime.emulator.machine import Machine, Mask
from taskloom.runtime.emulator.values import to_value

_LANE = np.arange(32)[:, None]
_G, _T = _LANE >> 2, _LANE & 3
_A = np.arange(8)[None, :]
A_ROW, A_COL = _G + 8 * ((_A >> 1) & 1), 2 * _T + (_A & 1) + 8 * (_A >> 2)
_B = np.arange(4)[None, :]
B_ROW, B_COL = 2 * _T + (_B & 1) + 8 * (_B >> 1), np.broadcast_to(_G, (32, 4))
C_ROW, C_COL = _G + 8 * (_B >> 1), 2 * _T + (_B & 1)


def _bits(stored: np.ndarray, src: DataType, dst: DataType) -> np.ndarray:
    """16-bit elements moved without conversion (ldmatrix moves bits)."""
    return stored if src == dst else stored.view(np.uint16).view(dst.numpy or np.uint16)


def _warps(st: Machine, mask: Mask, what: str) -> None:
    if st.check:
        checks.check_converged(st, mask, what)


def ldmatrix(st: Machine, dst: memory.Buffer, dst_idx: np.ndarray, src: memory.Buffer, src_idx: np.ndarray,
             num: int, trans: bool, mask: Mask) -> None:
    """The warp loads ``num`` 8x8 matrices from shared ``src`` into registers at ``dst``."""
    _warps(st, mask, "ldmatrix")
    st.count("ldmatrix", mask)
    rows = st.full(src_idx)
    if st.check:
        odd = mask.m & ((rows * src.dtype.nbytes) % 16 != 0) & (st.lane_id < 8 * num)
        if odd.any():
            raise checks.misaligned(st, src, "gives ldmatrix a row of", rows, odd, 16)
    providers = mask & (st.lane_id < 8 * num)  # lanes 8 num .. 31 give no address
    elements = memory.load(st, src, rows[:, None] + np.arange(8), providers, what="gives ldmatrix a row of")
    m = elements.reshape(-1, 4, 8, 8)[:, :num]  # warp, matrix, row, column
    pick = (2 * _T + np.arange(2), _G) if trans else (_G, 2 * _T + np.arange(2))
    out = m[:, :, pick[0], pick[1]]  # warp, matrix, lane, 2
    out = out.transpose(0, 2, 1, 3).reshape(st.T, 2 * num)
    memory.store(st, dst, st.full(dst_idx)[:, None] + np.arange(2 * num), _bits(out, src.dtype, dst.dtype), mask)


def _fragment(st: Machine, buf: memory.Buffer, idx: np.ndarray, n: int, mask: Mask) -> np.ndarray:
    stored = memory.load(st, buf, st.full(idx)[:, None] + np.arange(n), mask)
    return to_value(stored, buf.dtype).astype(np.float32).reshape(-1, 32, n)


def mma_sync(st: Machine, d: tuple, a: tuple, b: tuple, c: tuple, mask: Mask) -> None:
    """``D = A B + C`` for every warp with an active lane; operands are (buffer, index)."""
    _warps(st, mask, "mma_sync")
    st.count("mma", mask)
    fa, fb, fc = _fragment(st, *a, 8, mask), _fragment(st, *b, 4, mask), _fragment(st, *c, 4, mask)
    W = fa.shape[0]
    A = np.zeros((W, 16, 16), np.float32)
    B = np.zeros((W, 16, 8), np.float32)
    C = np.zeros((W, 16, 8), np.float32)
    A[:, A_ROW, A_COL] = fa
    B[:, B_ROW, B_COL] = fb
    C[:, C_ROW, C_COL] = fc
    D = np.matmul(A, B) + C
    buf, idx = d
    memory.store(st, buf, st.full(idx)[:, None] + np.arange(4), D[:, C_ROW, C_COL].reshape(st.T, 4), mask)
