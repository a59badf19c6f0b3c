"""Turns a scalar expression of a loop variable ``j`` into the vector expression that
computes it for ``lanes`` consecutive values of ``j`` at once.

Rules, by the shape of each subexpression:
- does not mention ``j``: computed once as a scalar and broadcast;
- ``X[..., base + j]`` with the rest free of ``j``: one (masked) vector load;
- ``X[..., base + s * j]`` for a small constant stride ``s`` (pooling, strided convolutions):
  one gather, on targets with 8 or 16 float lanes (AVX2, AVX-512);
- when the caller promises that ``j0`` is a multiple of ``lanes`` (``aligned``), ``j // D`` and
  ``j % D`` for a constant ``D`` that ``lanes`` divides are the same for every lane but for
  the remainder's lane offset: an NHWC img2col window ``x[.., (j // C) .., j % C]`` with ``C``
  a multiple of the vector reads one contiguous run of channels per vector; when it promises
  instead that the lanes lie in one run ``[r * R, (r + 1) * R)`` (``run=R``), the same holds
  for every ``D`` that ``R`` divides: a 3-channel stem's window row, ``KW * 3`` channels, is
  copied by vectors that end where the row does;
- arithmetic, comparisons, select and vector-capable primitives of vector operands: the
  same operation on vectors.
Anything else (any other gather along ``j``, ``j`` used as a value, a non-float32 element) makes
the whole expression non-vectorizable, and the caller falls back to a scalar loop.
"""
from __future__ import annotations

from taskloom.ir import expr as E
from taskloom.ir.dtypes import float32
from taskloom.ir.functor import Rewriter, collect
from taskloom.ir.arith.linear import linear_form
from taskloom.ir.arith import simplify_expr

#: Primitives the C backend implements on float32 vectors.
VECTOR_PRIMITIVES = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "abs",
                               "floor", "ceil", "fma", "pow"})
_VECTOR_BINARY = frozenset({"add", "sub", "mul", "div", "min", "max", "lt", "le", "eq", "ne", "and", "or"})


class _NotVectorizable(Exception):
    pass


class _AlignedDivMod(Rewriter):
    """``j // D`` -> ``j0 // D`` and ``j % D`` -> ``j0 % D + (j - j0)``, for ``j`` in
    ``[j0, j0 + lanes)`` lying within one multiple of ``unit`` (``j0 >= 0``) and ``D`` a positive
    multiple of ``unit``: no two lanes of the vector fall on different sides of a multiple of
    ``D``."""

    def __init__(self, j: E.Var, j0: E.Expr, unit: int):
        self.j, self.j0, self.unit = j, j0, unit

    def visit_Binary(self, e: E.Binary) -> E.Expr:
        if e.op in ("div", "mod") and e.a == self.j and isinstance(e.b, E.Constant) \
                and int(e.b.value) > 0 and int(e.b.value) % self.unit == 0:
            if e.op == "div":
                return E.binary("div", self.j0, e.b)
            return E.binary("mod", self.j0, e.b) + (self.j - self.j0)
        return self.generic_visit(e)


#: The largest stride read with a gather; past it a row of lanes spans too many cache lines.
MAX_STRIDE = 4


def _strided_offset(index: E.Expr, j: E.Var) -> tuple[E.Expr, int] | None:
    """``(base, s)`` when ``index == base + s * j`` with ``base`` free of ``j`` and ``s`` a
    constant in ``1..MAX_STRIDE``, else None."""
    s = linear_form(simplify_expr(index)).terms.get(j, 1)
    if not isinstance(s, int) or not 1 <= s <= MAX_STRIDE:
        return None
    base = simplify_expr(E.binary("sub", index, j * s if s != 1 else j))
    return None if j in E.free_vars(base) else (base, s)


class _Vectorizer:
    def __init__(self, j: E.Var, j0: E.Expr, lanes: int, count: E.Expr | None,
                 vectors: dict[E.Var, E.Expr] | None = None):
        self.j, self.j0, self.lanes, self.count = j, j0, lanes, count
        self.vectors = vectors or {}
        self.varying = {j, *self.vectors}

    def vec(self, e: E.Expr) -> E.Expr:
        if isinstance(e, E.Var) and e in self.vectors:
            return self.vectors[e]  # a scalar stand-in for a vector the caller computed
        if not (E.free_vars(e) & self.varying):
            if e.type != float32 and e.type != E.dtypes.boolean:
                raise _NotVectorizable
            if e.type == E.dtypes.boolean:
                raise _NotVectorizable  # a scalar condition: keep the scalar loop
            return E.Broadcast(e, self.lanes)
        if isinstance(e, E.TensorElement):
            return self.load(e)
        if isinstance(e, E.Binary) and e.op in _VECTOR_BINARY:
            if e.a.type not in (float32, E.dtypes.boolean):
                raise _NotVectorizable
            a, b = self.vec(e.a), self.vec(e.b)
            return E.Binary(e.op, a, b)
        if isinstance(e, E.Unary) and e.op in ("neg", "not"):
            return E.Unary(e.op, self.vec(e.a))
        if isinstance(e, E.Select):
            if not (E.free_vars(e.cond) & self.varying):
                # one condition for every lane: a C conditional, so only the taken branch loads
                return E.Select(e.cond, self.vec(e.a), self.vec(e.b))
            # a per-lane condition on float data (an index condition is an int compare, which
            # is rejected below): both branches read in-range elements, so loading both is safe
            return E.Select(self.vec(e.cond), self.vec(e.a), self.vec(e.b))
        if isinstance(e, E.Call) and e.func in VECTOR_PRIMITIVES and e.type == float32:
            return E.Call(e.func, tuple(self.vec(a) for a in e.args))
        if isinstance(e, E.Cast) and e.dtype == float32 and e.value.type == float32:
            return self.vec(e.value)
        raise _NotVectorizable

    def load(self, e: E.TensorElement) -> E.Expr:
        if e.type != float32 or not e.indices:
            raise _NotVectorizable
        *outer, last = e.indices
        if any(self.j in E.free_vars(i) for i in outer):
            raise _NotVectorizable
        found = _strided_offset(last, self.j)
        if found is None or (found[1] != 1 and self.lanes not in (8, 16)):
            raise _NotVectorizable  # gathered along j, or strided with no gather instruction
        base, stride = found
        start = simplify_expr(base + self.j0 * stride)
        return E.VectorLoad(e.tensor, (*outer, start), self.lanes, self.count, stride)


def vectorize_expr(e: E.Expr, j: E.Var, j0: E.Expr, lanes: int, count: E.Expr | None = None,
                   vectors: dict[E.Var, E.Expr] | None = None, aligned: bool = False,
                   run: int = 0) -> E.Expr | None:
    """``e`` for ``j = j0, j0 + 1, ..., j0 + lanes - 1`` as one vector expression, or None.

    With ``count``, only the first ``count`` lanes are loaded (a loop tail). ``vectors``
    maps scalar variables of ``e`` to vectors already holding their lanes. ``aligned``
    promises that ``j0`` is a non-negative multiple of ``lanes``, which lets divisions of
    ``j`` by multiples of ``lanes`` vectorize; ``run`` promises that the loaded lanes lie in
    one run ``[r * run, (r + 1) * run)``, which lets divisions by multiples of ``run`` vectorize.
    """
    if run:
        e = _AlignedDivMod(j, j0, run).visit(e)
    elif aligned:
        e = _AlignedDivMod(j, j0, lanes).visit(e)
    try:
        return _Vectorizer(j, j0, lanes, count, vectors).vec(e)
    except _NotVectorizable:
        return None


def is_vectorizable(e: E.Expr, j: E.Var, lanes: int) -> bool:
    return vectorize_expr(e, j, E.as_expr(0), lanes) is not None


def run_length(e: E.Expr, j: E.Var, lanes: int) -> int:
    """The longest run ``R`` along ``j`` in which ``e`` reads one contiguous vector at a time
    (see ``run`` of :func:`vectorize_expr`), tried among the constants ``j`` is divided by in
    ``e``; 0 when there is none, or when whole vectors need no runs (``R`` a multiple of
    ``lanes``)."""
    divisors = {int(d.b.value) for d in collect(e, E.Binary)
                if d.op in ("div", "mod") and d.a == j and isinstance(d.b, E.Constant) and int(d.b.value) > 1}
    for R in sorted(divisors, reverse=True):
        v = vectorize_expr(e, j, E.Var("run_start", j.type), lanes, E.Var("run_count", j.type), run=R)
        if isinstance(v, E.VectorLoad) and v.stride == 1:
            return 0 if R % lanes == 0 else R
    return 0
