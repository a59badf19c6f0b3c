"""``ldmatrix`` and ``mma.sync`` (m16n8k16 on 16-bit floats, m16n8k8 on tf32) lane by lane,
with the PTX ISA's fragment layouts.

With ``g = lane >> 2`` (groupID) and ``t = lane % 4`` (threadID_in_group):

- ``ldmatrix .m8n8 .x{1,2,4}``: lane ``l`` gives the address of row ``l % 8`` of matrix
  ``l // 8`` (8 consecutive 16-bit elements); for each matrix ``i`` lane ``l`` receives
  elements ``(g, 2t)`` and ``(g, 2t + 1)`` into ``dst[2i]``, ``dst[2i + 1]``; with
  ``.trans`` elements ``(2t, g)`` and ``(2t + 1, g)``. On 32-bit elements a row is 4 of
  them and lane ``l`` receives element ``(g, t)`` of each matrix into ``dst[i]``.
- ``mma.m16n8k16 .row.col``: A (16 x 16) element ``a[i]`` of lane ``l`` is at row
  ``g + 8 ((i >> 1) & 1)``, column ``2t + (i & 1) + 8 (i >> 2)``; B (16 x 8, k x n)
  element ``b[i]`` at row ``2t + (i & 1) + 8 (i >> 1)``, column ``g``; C and D (16 x 8)
  element ``c[i]`` at row ``g + 8 (i >> 1)``, column ``2t + (i & 1)``.
- ``mma.m16n8k8 .row.col`` on tf32: A (16 x 8) element ``a[i]`` at row ``g + 8 (i & 1)``,
  column ``t + 4 (i >> 1)``; B (8 x 8) element ``b[i]`` at row ``t + 4 i``, column ``g``;
  C and D as above.

The products of 16-bit inputs are exact in float32; they are summed in float32. tf32
inputs are float32 values cut to 10 bits of mantissa (the low 13 bits dropped), whose
products are exact in float32 too.
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
_A8, _B8 = np.arange(4)[None, :], np.arange(2)[None, :]
#: per shape: (k, A's rows and columns, B's rows and columns) of each lane's fragment elements
LAYOUTS = {
    "m16n8k16": (16, (A_ROW, A_COL), (B_ROW, B_COL)),
    "m16n8k8": (8, (_G + 8 * (_A8 & 1), _T + 4 * (_A8 >> 1)), (_T + 4 * _B8, np.broadcast_to(_G, (32, 2)))),
}


def _bits(stored: np.ndarray, src: DataType, dst: DataType) -> np.ndarray:
    """16-bit elements moved without conversion (ldmatrix moves bits)."""
    return stored if src == dst else stored.view(np.uint16).view(dst.numpy or np.uint16)


def _warps(st: Machine, mask: Mask, what: str) -> None:
    if st.check:
        checks.check_converged(st, mask, what)


def ldmatrix(st: Machine, dst: memory.Buffer, dst_idx: np.ndarray, src: memory.Buffer, src_idx: np.ndarray,
             num: int, trans: bool, mask: Mask) -> None:
    """The warp loads ``num`` 8x8 matrices (of 16-bit elements, or 8x4 of 32-bit ones)
    from shared ``src`` into registers at ``dst``."""
    _warps(st, mask, "ldmatrix")
    st.count("ldmatrix", mask)
    rows = st.full(src_idx)
    if st.check:
        odd = mask.m & ((rows * src.dtype.nbytes) % 16 != 0) & (st.lane_id < 8 * num)
        if odd.any():
            raise checks.misaligned(st, src, "gives ldmatrix a row of", rows, odd, 16)
    providers = mask & (st.lane_id < 8 * num)  # lanes 8 num .. 31 give no address
    per_row = 16 // src.dtype.nbytes  # elements in a row's 16 bytes
    each = per_row // 4  # elements a lane receives of each matrix
    elements = memory.load(st, src, rows[:, None] + np.arange(per_row), providers, what="gives ldmatrix a row of")
    m = elements.reshape(-1, 4, 8, per_row)[:, :num]  # warp, matrix, row, column
    pick = (each * _T + np.arange(each), _G) if trans else (_G, each * _T + np.arange(each))
    out = m[:, :, pick[0], pick[1]]  # warp, matrix, lane, each
    out = out.transpose(0, 2, 1, 3).reshape(st.T, each * num)
    memory.store(st, dst, st.full(dst_idx)[:, None] + np.arange(each * num), _bits(out, src.dtype, dst.dtype), mask)


def _fragment(st: Machine, buf: memory.Buffer, idx: np.ndarray, n: int, mask: Mask) -> np.ndarray:
    stored = memory.load(st, buf, st.full(idx)[:, None] + np.arange(n), mask)
    return to_value(stored, buf.dtype).astype(np.float32).reshape(-1, 32, n)


def tf32(v: np.ndarray) -> np.ndarray:
    """float32 values as the tensor cores read tf32: the low 13 bits of mantissa dropped."""
    return (np.ascontiguousarray(v, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def mma_sync(st: Machine, d: tuple, a: tuple, b: tuple, c: tuple, mask: Mask, shape: str = "m16n8k16") -> None:
    """``D = A B + C`` for every warp with an active lane; operands are (buffer, index)."""
    _warps(st, mask, "mma_sync")
    st.count("mma", mask)
    k, (a_row, a_col), (b_row, b_col) = LAYOUTS[shape]
    fa, fb = _fragment(st, *a, a_row.shape[1], mask), _fragment(st, *b, b_row.shape[1], mask)
    if shape == "m16n8k8":
        fa, fb = tf32(fa), tf32(fb)
    fc = _fragment(st, *c, 4, mask)
    W = fa.shape[0]
    A = np.zeros((W, 16, k), np.float32)
    B = np.zeros((W, k, 8), np.float32)
    C = np.zeros((W, 16, 8), np.float32)
    A[:, a_row, a_col] = fa
    B[:, b_row, b_col] = fb
    C[:, C_ROW, C_COL] = fc
    D = np.matmul(A, B) + C
    buf, idx = d
    memory.store(st, buf, st.full(idx)[:, None] + np.arange(4), D[:, C_ROW, C_COL].reshape(st.T, 4), mask)
