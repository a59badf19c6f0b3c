"""Scalar expressions turned into vector ones along one loop variable."""
from __future__ import annotations

import numpy as np

from taskloom.ir import expr as E
from taskloom.ir.compute import tensor_input
from taskloom.ir.dtypes import index_type
from taskloom.ir.functor import collect
from taskloom.schedule.prepack import evaluate
from taskloom.schedule.vectorize import vectorize_expr

j, j0 = E.Var("j", index_type), E.Var("j0", index_type)


def nhwc_window(C: int) -> tuple[E.Expr, object]:
    """The padded 3x3 window of pixel (2, 2) of an 5x5 NHWC image, along k = (ky, kx, c)."""
    x = tensor_input("x", "float32", [5 * 5 * C])
    ky, kx, c = j // (3 * C), j // C % 3, j % C
    iy, ix = 2 + ky - 1, 2 + kx - 1
    inside = E.logical_and(E.logical_and(0 <= iy, iy < 5), E.logical_and(0 <= ix, ix < 5))
    return E.select(inside, x[(iy * 5 + ix) * C + c], E.const(0.0, x.dtype)), x


def test_aligned_divisions_by_a_multiple_of_the_lanes_vectorize():
    e, x = nhwc_window(32)
    assert vectorize_expr(e, j, j0, 16) is None  # without the promise, k // C may differ across lanes
    v = vectorize_expr(e, j, j0, 16, aligned=True)
    assert v is not None
    (load,) = collect(v, E.VectorLoad)
    assert load.stride == 1 and isinstance(v, E.Select) and v.cond.type == E.dtypes.boolean
    # lanes agree with the scalar expression at every aligned start
    data = np.arange(5 * 5 * 32, dtype=np.float32)
    for start in range(0, 9 * 32, 16):
        lanes = evaluate(e, {j: np.arange(start, start + 16)}, {x: data})
        cond = evaluate(v.cond, {j0: np.asarray(start)}, {x: data})
        base = evaluate(load.indices[0], {j0: np.asarray(start)}, {x: data})
        want = data[base:base + 16] if cond else np.zeros(16, np.float32)
        np.testing.assert_array_equal(lanes, want)


def test_divisions_the_lanes_do_not_divide_stay_scalar():
    e, _ = nhwc_window(24)  # 24 channels: a vector of 16 crosses a pixel
    assert vectorize_expr(e, j, j0, 16, aligned=True) is None


def test_a_window_row_of_few_channels_vectorizes_within_one_run():
    """A padded-ahead 7x7 window of 3 channels (a stem), flattened: ``x[k // 21 * W3 + k % 21]``
    reads each window row's 21 elements in order, so a vector that stays in one row is one
    (masked) load; across rows it is not."""
    from taskloom.schedule.vectorize import run_length
    x = tensor_input("x", "float32", [20 * 20 * 3])
    e = x[(j // 21) * 60 + j % 21 + 5]
    assert vectorize_expr(e, j, j0, 16, aligned=True) is None
    assert run_length(e, j, 16) == 21 and run_length(e, j, 8) == 21
    count = E.Var("count", index_type)
    v = vectorize_expr(e, j, j0, 16, count, run=21)
    assert isinstance(v, E.VectorLoad) and v.stride == 1 and v.count is count
    data = np.arange(20 * 20 * 3, dtype=np.float32)
    for row in range(7):
        for start in (row * 21, row * 21 + 16):
            n = min(16, (row + 1) * 21 - start)
            base = int(evaluate(v.indices[0], {j0: np.asarray(start)}, {x: data}))
            np.testing.assert_array_equal(data[base:base + n], evaluate(e, {j: np.arange(start, start + n)}, {x: data}))
    # whole vectors of channels need no runs; a gather along j has none
    assert run_length(nhwc_window(32)[0], j, 16) == 0
    assert run_length(x[(j % 7) * 3], j, 16) == 0
