"""Flattens multi-dimensional tensors to one dimension, with row-major index arithmetic.

``A: f32[M, K]`` becomes ``A: f32[M * K]`` and ``A[i, k]`` becomes ``A[i * K + k]``; the
code generator then only sees one-dimensional buffers, which are C pointers and arrays.

The offset is computed in 32 bits where the buffer cannot have more than ``2**31 - 1``
elements (its static size, or its symbols' types bound it: one int32 size), else in 64
bits, ``(int64_t)i * K + k``: each index fits its own dimension, only the sum may not.
"""
from __future__ import annotations

import functools
import operator

from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import TensorType, index_type, index_type_for, wide_index_type
from taskloom.ir.functor import Rewriter
from taskloom.ir.index import max_elements, row_major_offset


def _wide(dims: tuple[E.Expr, ...]) -> bool:
    """Whether a buffer of ``dims`` may have more elements than a 32-bit index reaches."""
    return index_type_for(max_elements(dims)) != index_type


def _widened(xs: tuple[E.Expr, ...], wide: bool) -> tuple[E.Expr, ...]:
    return tuple(E.cast(x, wide_index_type) for x in xs) if wide else xs


class _Flattener(Rewriter):
    def visit_Var(self, v: E.Var) -> E.Var:
        t = v.type
        if isinstance(t, TensorType) and t.ndim != 1:
            static = t.static_shape()
            size = E.const(functools.reduce(operator.mul, static, 1)) if static is not None \
                else functools.reduce(operator.mul, _widened(t.shape, _wide(t.shape)))
            return E.Var(v.name, TensorType(t.dtype, (size,)))
        return v

    def _flat(self, tensor: E.Expr, indices: tuple[E.Expr, ...]) -> tuple[E.Expr, tuple[E.Expr, ...]]:
        t = tensor.type
        idx = tuple(self.visit(i) for i in indices)
        if isinstance(t, TensorType) and t.ndim != 1:
            wide = _wide(t.shape)
            idx = (E.as_expr(row_major_offset(_widened(idx, wide), _widened(t.shape, wide))),)
        return self.visit(tensor), idx

    def visit_TensorElement(self, e: E.TensorElement) -> E.Expr:
        return E.TensorElement(*self._flat(e.tensor, e.indices))

    def visit_VectorLoad(self, e: E.VectorLoad) -> E.Expr:
        tensor, idx = self._flat(e.tensor, e.indices)
        return E.VectorLoad(tensor, idx, e.lanes, self.visit(e.count) if e.count is not None else None, e.stride)

    def visit_BufferStore(self, s: S.BufferStore) -> S.Stmt:
        tensor, idx = self._flat(s.tensor, s.indices)
        return S.BufferStore(tensor, idx, self.visit(s.value))

    def visit_VectorStore(self, s: S.VectorStore) -> S.Stmt:
        tensor, idx = self._flat(s.tensor, s.indices)
        return S.VectorStore(tensor, idx, self.visit(s.value), self.visit(s.count) if s.count is not None else None)

    def visit_Prefetch(self, s: S.Prefetch) -> S.Stmt:
        return S.Prefetch(*self._flat(s.tensor, s.indices))


def flatten_buffers(fn: S.Function) -> S.Function:
    """Every tensor parameter and buffer of ``fn`` becomes one-dimensional."""
    return _Flattener().visit(fn)
