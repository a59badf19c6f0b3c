"""Flattens multi-dimensional tensors to one dimension, with row-major index arithmetic.

``A: f32[M, K]`` becomes ``A: f32[M * K]`` and ``A[i, k]`` becomes ``A[i * K + k]``; the
code generator then only sees one-dimensional buffers, which are C pointers and arrays.
"""
from __future__ import annotations

import functools
import operator

from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import TensorType
from taskloom.ir.functor import Rewriter
from taskloom.ir.index import row_major_offset


class _Flattener(Rewriter):
    def visit_Var(self, v: E.Var) -> E.Var:
        t = v.type
        if isinstance(t, TensorType) and t.ndim != 1:
            static = t.static_shape()
            size = E.const(functools.reduce(operator.mul, static, 1)) if static is not None \
                else functools.reduce(operator.mul, t.shape)
            return E.Var(v.name, TensorType(t.dtype, (size,)))
        return v

    def _flat(self, tensor: E.Expr, indices: tuple[E.Expr, ...]) -> tuple[E.Expr, tuple[E.Expr, ...]]:
        t = tensor.type
        idx = tuple(self.visit(i) for i in indices)
        if isinstance(t, TensorType) and t.ndim != 1:
            idx = (E.as_expr(row_major_offset(idx, t.shape)),)
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
