"""Row-major index arithmetic on sizes that are ints or expressions: the product of
dimensions, the offset of an index, and the index of an offset.

Unit dimensions (the literal size 1) take no part: they add no factor, no term, and their
index is 0; the outermost remaining dimension needs no modulo. Every pass that flattens or
unflattens (buffers, reshapes, fused row loops, contractions) uses these, so the same
index reads the same everywhere.
"""
from __future__ import annotations

from typing import Sequence, Union

from taskloom.ir.expr import Constant, Expr, as_expr, free_vars, is_const

Dim = Union[int, Expr]


def is_unit(d: Dim) -> bool:
    """Whether a dimension is the literal size 1 (which broadcasts)."""
    return (isinstance(d, int) and d == 1) or (isinstance(d, Expr) and is_const(d, 1))


def is_zero(d: Dim) -> bool:
    """Whether a dimension is the literal size 0 (a symbolic size is not)."""
    return (isinstance(d, int) and d == 0) or (isinstance(d, Expr) and is_const(d, 0))


def round_up(x: int, m: int) -> int:
    """``x`` rounded up to a multiple of ``m`` (positive ints): ``round_up(70, 16) == 80``."""
    return -(-x // m) * m


def prod(dims: Sequence[Dim]) -> Dim:
    """The number of elements of ``dims``: ``prod([M, 1, K]) == M * K``; ``1`` when empty."""
    out: Dim = 1
    for d in dims:
        if not is_unit(d):
            out = d if is_unit(out) else out * d
    return out


def row_major_offset(index: Sequence[Dim], dims: Sequence[Dim]) -> Dim:
    """The row-major offset of ``index`` in ``dims``: ``(i0 * d1 + i1) * d2 + i2``; ``0`` when
    there are no dimensions."""
    out: Dim = 0
    for i, d in zip(index, dims):
        if is_unit(d):
            continue
        out = i if isinstance(out, int) and out == 0 else out * d + i
    return out


def unravel(offset: Dim, dims: Sequence[Dim]) -> list[Dim]:
    """The row-major index of ``offset`` in ``dims``: ``unravel(f, [A, B]) == [f // B, f % B]``.
    An expression offset gives expressions (unit dimensions read ``0`` as a constant)."""
    big = [k for k, d in enumerate(dims) if not is_unit(d)]
    zero: Dim = as_expr(0) if isinstance(offset, Expr) else 0
    out: list[Dim] = [zero] * len(dims)
    stride: Dim = 1
    for k in reversed(big):
        q = offset if is_unit(stride) else offset // stride
        out[k] = q if k == big[0] else q % dims[k]
        stride = dims[k] if is_unit(stride) else stride * dims[k]
    return out


def max_elements(dims: Sequence[Dim]) -> int | None:
    """The most elements a tensor of ``dims`` can have: a symbol may take any value of its
    type (an int32 size is at most ``2**31 - 1``); None when a dimension has no known bound."""
    from taskloom.ir.arith.bounds import BoundAnalyzer
    total = 1
    for d in dims:
        if isinstance(d, int) or isinstance(d, Constant):
            n: int | None = int(d if isinstance(d, int) else d.value)
        else:
            symbols = {v: (0, int(v.type.max_value())) for v in free_vars(d) if v.type.is_integer()}
            n = BoundAnalyzer(symbols).upper(d)
        if n is None:
            return None
        total *= max(n, 0)
    return total
