"""Expressions compiled once into closures ``f(machine, mask) -> values over lanes``.

Operands are evaluated for every lane (inactive lanes compute garbage that nothing reads),
except where C evaluates lazily: the branches of ``c ? a : b`` and the right side of ``&&``
and ``||`` run only on the lanes that need them when they touch memory or the warp, so a
guarded out-of-bounds read is no error, as on the device.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir.dtypes import DataType, PointerType, TensorType, VectorType, int64
from taskloom.ir.functor import collect
from taskloom.runtime.emulator import memory, values, warp
from taskloom.runtime.emulator.checks import EmulatorError
from taskloom.runtime.emulator.machine import Machine, Mask

Fn = Callable[[Machine, Mask], np.ndarray]
_WARP_CALLS = set(gpu.SHUFFLES) | set(gpu.WARP_REDUCTIONS)


def touches_memory(e: E.Expr) -> bool:
    """Whether evaluating ``e`` reads memory or trades values across the warp."""
    return any(isinstance(n, (E.TensorElement, E.VectorLoad)) or isinstance(n, E.Call) and n.func in _WARP_CALLS
               for n in collect(e, (E.TensorElement, E.VectorLoad, E.Call)))


def instruction_class(scope: str, kind: str) -> str | None:
    return None if scope == "register" else f"{scope}_{kind}"


class ExprCompiler:
    def __init__(self, kernel: str):
        self.kernel = kernel

    def error(self, text: str) -> EmulatorError:
        return EmulatorError(f"kernel '{self.kernel}': {text}", self.kernel)

    def unsupported(self, node: object) -> EmulatorError:
        try:
            shown = f" (`{node!r}`)"
        except Exception:  # a node the printer does not know either
            shown = ""
        return self.error(f"the SIMT emulator cannot run {type(node).__name__} nodes{shown}; it runs the "
                          "lowered IR of the CUDA code generator")

    def expr(self, e: E.Expr) -> Fn:
        method = getattr(self, "e_" + type(e).__name__, None)
        if method is None:
            raise self.unsupported(e)
        return method(e)

    # ---- leaves
    def e_Var(self, e: E.Var) -> Fn:
        name = e.name
        error = self.error

        def f(st: Machine, m: Mask) -> np.ndarray:
            try:
                return st.env[name]
            except KeyError:
                raise error(f"'{name}' is used where it has no value") from None
        return f

    def e_Constant(self, e: E.Constant) -> Fn:
        value = values.constant(e.value, e.type)
        return lambda st, m: value

    # ---- arithmetic
    def e_Binary(self, e: E.Binary) -> Fn:
        fa, fb = self.expr(e.a), self.expr(e.b)
        if e.op in ("and", "or") and not isinstance(e.type, VectorType):
            return _logic(e.op, fa, fb, touches_memory(e.b))
        op = values.binary_op(e.op, values.scalar_of(e.a.type))

        def f(st: Machine, m: Mask) -> np.ndarray:
            st.count("arith", m)
            return op(fa(st, m), fb(st, m))
        return f

    def e_Unary(self, e: E.Unary) -> Fn:
        fa, op = self.expr(e.a), values.unary_op(e.op, values.scalar_of(e.a.type))

        def f(st: Machine, m: Mask) -> np.ndarray:
            st.count("arith", m)
            return op(fa(st, m))
        return f

    def e_Cast(self, e: E.Cast) -> Fn:
        fv, src, dst = self.expr(e.value), values.scalar_of(e.value.type), e.dtype

        def f(st: Machine, m: Mask) -> np.ndarray:
            st.count("arith", m)
            return values.cast(fv(st, m), src, dst)
        return f

    def e_Select(self, e: E.Select) -> Fn:
        fc, fa, fb = self.expr(e.cond), self.expr(e.a), self.expr(e.b)
        lazy = (touches_memory(e.a) or touches_memory(e.b)) and not isinstance(e.cond.type, VectorType)
        widen = isinstance(e.type, VectorType) and not isinstance(e.cond.type, VectorType)

        def f(st: Machine, m: Mask) -> np.ndarray:
            st.count("arith", m)
            c = fc(st, m)
            if c.shape[0] == 1 and c.ndim == 1:
                return fa(st, m) if c[0] else fb(st, m)
            if not lazy:
                a, b = fa(st, m), fb(st, m)
            else:
                ma, mb = m & c, m & ~c
                if not mb.any:
                    return fa(st, m)
                if not ma.any:
                    return fb(st, m)
                a, b = fa(st, ma), fb(st, mb)
            return np.where(c[:, None] if widen else c, a, b)
        return f

    def e_Broadcast(self, e: E.Broadcast) -> Fn:
        fv, lanes = self.expr(e.value), e.lanes
        return lambda st, m: np.repeat(fv(st, m)[:, None], lanes, axis=1)

    def e_IndexCheck(self, e: E.IndexCheck) -> Fn:
        """As ``tl_index`` on the device: a bad index on an active lane is the launch's
        failure (the first one is kept) and reads position 0."""
        fv, fn, what, wrap, t = self.expr(e.value), self.expr(e.extent), e.what, e.wrap, e.type

        def f(st: Machine, m: Mask) -> np.ndarray:
            st.count("arith", m, 2)
            v, n = fv(st, m).astype(np.int64), fn(st, m).astype(np.int64)
            w = np.where(v < 0, v + n, v) if wrap else v
            bad = (w < 0) | (w >= n)
            active = bad & m.m if bad.shape == m.m.shape else (bad & m.any)
            if active.any() and st.failure is None:
                k = int(np.flatnonzero(active)[0])
                size = int(n[k] if n.shape[0] > 1 else n[0])
                st.failure = (what, int(v[k] if v.shape[0] > 1 else v[0]), -size if wrap else 0, size - 1)
            return values.cast(np.where(bad, 0, w), int64, t)
        return f

    # ---- memory
    def buffer_of(self, tensor: E.Expr, indices: tuple[E.Expr, ...], what: str) -> tuple[str, DataType, Fn]:
        """The buffer's name, its element type, and the index function of an access."""
        if not (isinstance(tensor, E.Var) and isinstance(tensor.type, (TensorType, PointerType))):
            raise self.error(f"{what} of `{tensor!r}`, which is not a buffer")
        if len(indices) != 1:
            raise self.error(f"{what} of '{tensor.name}' with {len(indices)} indices: the IR is not "
                             "flattened; run taskloom.transforms.lower first")
        dtype = tensor.type.dtype if isinstance(tensor.type, TensorType) else tensor.type.base
        if not isinstance(dtype, DataType):
            raise self.error(f"'{tensor.name}' holds {dtype!r} vectors; the emulator runs buffers of scalars")
        return tensor.name, dtype, self.expr(indices[0])

    def e_TensorElement(self, e: E.TensorElement) -> Fn:
        name, dtype, fi = self.buffer_of(e.tensor, e.indices, "a load")

        def f(st: Machine, m: Mask) -> np.ndarray:
            buf = lookup(st, name, self)
            kind = instruction_class(buf.scope, "load")
            if kind:
                st.count(kind, m)
            return values.to_value(memory.load(st, buf, fi(st, m)[:, None], m)[:, 0], dtype)
        return f

    def e_VectorLoad(self, e: E.VectorLoad) -> Fn:
        name, dtype, fi = self.buffer_of(e.tensor, e.indices, "a vector load")
        offsets, lanes = np.arange(e.lanes) * e.stride, np.arange(e.lanes)
        fcount = None if e.count is None else self.expr(e.count)

        def f(st: Machine, m: Mask) -> np.ndarray:
            buf = lookup(st, name, self)
            kind = instruction_class(buf.scope, "load")
            if kind:
                st.count(kind, m)
            ok = None if fcount is None else lanes < fcount(st, m)[:, None]
            return values.to_value(memory.load(st, buf, fi(st, m)[:, None] + offsets, m, ok), dtype)
        return f

    # ---- calls
    def e_Call(self, e: E.Call) -> Fn:
        name = e.func
        if name in gpu.INDEX_PRIMITIVES:
            return lambda st, m: st.index[name]
        args = [self.expr(a) for a in e.args]
        if name in gpu.SHUFFLES:
            fv, fl = args
            return lambda st, m: warp.shuffle(st, name, fv(st, m), fl(st, m), m)
        if name in gpu.WARP_REDUCTIONS:
            return lambda st, m: warp.reduce(st, name, args[0](st, m), m)
        if name not in values.MATH and name not in values.REDUCE:
            raise self.unsupported(e)
        op = values.math_op(name, values.scalar_of(e.args[0].type))

        def f(st: Machine, m: Mask) -> np.ndarray:
            st.count("arith", m)
            return op(*(a(st, m) for a in args))
        return f


def lookup(st: Machine, name: str, where: ExprCompiler) -> memory.Buffer:
    try:
        return st.bufs[name]
    except KeyError:
        raise where.error(f"buffer '{name}' is used before it is declared") from None


def _logic(op: str, fa: Fn, fb: Fn, lazy: bool) -> Fn:
    """``a && b`` / ``a || b``: ``b`` runs only where ``a`` leaves the answer open, when lazy."""
    combine = np.logical_and if op == "and" else np.logical_or
    short = op == "or"  # the value of `a` that decides the answer alone

    def f(st: Machine, m: Mask) -> np.ndarray:
        st.count("arith", m)
        a = fa(st, m)
        if a.shape[0] == 1:
            return a if bool(a[0]) == short else fb(st, m)
        if not lazy:
            return combine(a, fb(st, m))
        rest = m & (a != short)
        return combine(a, fb(st, rest)) if rest.any else a
    return f
