"""Closed forms of tensors computed from the symbols alone: what they simplify to, and that
they hold at every size (against the same graph run eagerly at concrete sizes)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from taskloom import ops
from taskloom.compiler import dynamic
from taskloom.graph.closed_form import closed_form, simplify_cases
from taskloom.graph.tensor import Tensor, symbol
from taskloom.ir import expr as E
from taskloom.ir.dtypes import float32, int64
from taskloom.ir.functor import Rewriter
from taskloom.ir.printer import expr_text
from taskloom.schedule.prepack import evaluate

LOWEST = float(np.finfo(np.float32).min)


def positions(B, L):
    """Token positions per batch row, as transformers builds them."""
    return ops.broadcast_to(ops.unsqueeze(ops.arange(L), 0), (B, L))


def diff(x, L):
    """``x[:, t] - x[:, t - 1]``, the first against ``x[:, 0] - 1`` (packed-sequence detection)."""
    ext = ops.concat([ops.sub(ops.slice(x, 1, 0, 1), 1), x], axis=1)
    return ops.sub(ops.slice(ext, 1, 1, L + 1), ops.slice(ext, 1, 0, L))


def causal_mask(B, L):
    """transformers' mask: the key at or before the query, and in the same packed segment."""
    pos = positions(B, L)
    segment = ops.cumsum(ops.not_equal(diff(pos, L), 1), 1)
    q, k = ops.unsqueeze(pos, 2), ops.unsqueeze(pos, 1)
    same = ops.equal(ops.unsqueeze(segment, 2), ops.unsqueeze(segment, 1))
    allowed = ops.logical_and(ops.less_equal(k, q), same)
    return ops.where(allowed, np.float32(0), np.float32(LOWEST))


def values(t, sizes):
    """The closed form of ``t`` evaluated at every element, for the symbols' values ``sizes``."""
    (axes, value), (B, L) = closed_form(t), sizes
    env = {E.Var("batch", int64): np.int64(B), E.Var("seq", int64): np.int64(L)}
    shape = dynamic.evaluate(t.shape, {"batch": B, "seq": L})
    grids = np.indices(shape, dtype=np.int64)
    return np.broadcast_to(_evaluate(value, {**env, **dict(zip(axes, grids))}), shape)


def _evaluate(e, env):
    """``evaluate`` with reductions too: each summed (or maxed) over its axis, in numpy."""
    found = {}

    class Reduce(Rewriter):
        def visit_ReduceCompute(self, r):
            (axis,), (n,) = r.axes, r.shape
            terms = [_evaluate(r.value, {**env, axis: np.int64(k)}) for k in range(int(_evaluate(n, env)))]
            v = E.Var(f"reduced{len(found)}", r.type)
            found[v] = {"sum": np.sum, "max": np.max, "min": np.min}[r.kind](np.broadcast_arrays(*terms), axis=0)
            return v
    return evaluate(Reduce().visit(e), {**env, **found}, {})


def test_transformers_causal_mask_reads_causal_for_every_length():
    mask = causal_mask(symbol("batch"), symbol("seq"))
    axes, value = closed_form(mask)
    assert expr_text(value) == f"select({axes[2].name} <= {axes[1].name}, 0.0, {LOWEST!r})"


def test_data_has_no_closed_form():
    x = Tensor((symbol("batch"), symbol("seq")), float32, name="x")
    assert closed_form(ops.add(x, 1.0)) is None
    assert closed_form(ops.add(positions(2, symbol("seq")), np.arange(2)[:, None])) is None  # unequal constant
    assert closed_form(ops.mul(positions(symbol("batch"), symbol("seq")), 0)) is not None


def test_split_keeps_a_select_whose_sides_differ():
    i = E.Var("i", int64)
    # at i = 0 the sides are 5 and 0: no single expression
    kept = simplify_cases(E.select(i < 1, E.const(5, int64), i), {i: (0, None)})
    assert isinstance(kept, E.Select)
    # at i = 0 both are -1, and past it max(i - 1, 0) is i - 1
    gone = simplify_cases(i - E.select(i < 1, E.const(-1, int64), E.maximum(i - 1, 0)), {i: (0, None)})
    assert E.is_const(gone, 1)


STEPS = st.sampled_from(["add", "mul", "diff", "cumsum", "ne", "where", "max", "pairs"])


def _apply(x, step, c, B, L):
    if step == "add":
        return ops.add(x, c)
    if step == "mul":
        return ops.mul(x, c)
    if step == "diff":
        return diff(x, L)
    if step == "cumsum":
        return ops.cumsum(x, 1)
    if step == "ne":
        return ops.where(ops.not_equal(x, c), x, -c)
    if step == "where":
        return ops.where(ops.less_equal(x, c), x, c)
    if step == "max":
        return ops.maximum(x, c)
    return ops.sub(ops.unsqueeze(x, 2), ops.unsqueeze(x, 1))  # pairs: (B, L, L)


def _chain(B, L, steps, consts):
    x = positions(B, L)
    for step, c in zip(steps, consts):
        if x.ndim == 3 and step in ("diff", "cumsum", "pairs"):
            continue
        x = _apply(x, step, c, B, L)
    return x


@settings(max_examples=30, deadline=None)
@given(st.lists(STEPS, min_size=1, max_size=5), st.lists(st.integers(-3, 3), min_size=5, max_size=5),
       st.sampled_from([1, 3]), st.sampled_from([1, 2, 7]))  # (few sizes: eager runs build kernels per shape)
def test_closed_form_holds_at_concrete_sizes(steps, consts, b, n):
    symbolic = _chain(symbol("batch"), symbol("seq"), steps, consts)
    assert closed_form(symbolic) is not None, steps
    np.testing.assert_array_equal(values(symbolic, (b, n)), _chain(b, n, steps, consts).numpy())


def test_causal_mask_values_at_concrete_sizes():
    for b, n in ((1, 1), (2, 5), (3, 9)):
        np.testing.assert_array_equal(values(causal_mask(symbol("batch"), symbol("seq")), (b, n)),
                                      causal_mask(b, n).numpy())
