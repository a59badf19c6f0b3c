"""gather_nd, scatter and scatter_nd against torch and numpy: random shapes, every
reduction, negative indices with ``wrap``, duplicates (the last update wins), and each bad
coordinate reported against its own dimension, eagerly and in a compiled graph."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import taskloom
from taskloom import ops
from taskloom.errors import IndexOutOfRange, OpError
from taskloom.graph import Graph, input

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=8)
TORCH_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def t(a: np.ndarray) -> taskloom.Tensor:
    return taskloom.asarray(a)


@st.composite
def scatter_cases(draw):
    """(x, axis, index, src): index no larger than x off the axis and than src anywhere."""
    rank = draw(st.integers(1, 3))
    shape = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    axis = draw(st.integers(0, rank - 1))
    ishape = [draw(st.integers(1, s)) if d != axis else draw(st.integers(1, 5)) for d, s in enumerate(shape)]
    sshape = [i + draw(st.integers(0, 1)) for i in ishape]
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    index = rng.integers(0, shape[axis], ishape)
    return (rng.standard_normal(shape).astype(np.float32), axis, index,
            rng.standard_normal(sshape).astype(np.float32))


@settings(**SETTINGS)
@given(scatter_cases(), st.sampled_from([None, "add", "mul", "max", "min"]))
def test_scatter_matches_torch(case, reduce):
    x, axis, index, src = case
    got = ops.scatter(t(x), axis, t(index), t(src), reduce).numpy()
    tx, ti, ts = torch.from_numpy(x), torch.from_numpy(index), torch.from_numpy(src)
    if reduce is None:
        # torch leaves the winner among duplicates unspecified: compare where positions are unique
        want = tx.scatter(axis, ti, ts).numpy()
        counts = torch.zeros_like(tx).scatter_add(axis, ti, torch.ones_like(ts)).numpy()
        np.testing.assert_array_equal(got[counts <= 1], want[counts <= 1])
    else:
        want = tx.scatter_reduce(axis, ti, ts, TORCH_REDUCE[reduce]).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_scatter_duplicates_take_the_last_update_and_wrap_negatives():
    x = np.zeros(4, np.float32)
    got = ops.scatter(t(x), 0, t(np.array([1, -1, 1, 3])), t(np.array([5, 6, 7, 8], np.float32)), wrap=True)
    np.testing.assert_array_equal(got.numpy(), [0, 7, 0, 8])


@settings(**SETTINGS)
@given(st.integers(1, 3), st.integers(0, 2), st.integers(0, 99), st.sampled_from([None, "add", "max"]))
def test_scatter_nd_matches_numpy(q, extra, seed, reduce):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(1, 5, q + extra))
    m = int(rng.integers(1, 6))
    coords = np.stack([rng.integers(-s, s, m) for s in shape[:q]], -1)
    updates = rng.standard_normal((m, *shape[q:])).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    got = ops.scatter_nd(t(x), t(coords), t(updates), reduce, wrap=True).numpy()
    want = x.copy()
    for k in range(m):  # in order: the last duplicate wins, reductions accumulate
        at = tuple(coords[k])
        want[at] = updates[k] if reduce is None else want[at] + updates[k] if reduce == "add" \
            else np.maximum(want[at], updates[k])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@settings(**SETTINGS)
@given(st.integers(0, 1), st.integers(1, 2), st.integers(0, 99))
def test_gather_nd_matches_numpy(batch_dims, q, seed):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(1, 5, batch_dims + q + 1))
    lead = (*shape[:batch_dims], int(rng.integers(1, 4)))
    coords = np.stack([rng.integers(-s, s, lead) for s in shape[batch_dims:batch_dims + q]], -1)
    x = rng.standard_normal(shape).astype(np.float32)
    got = ops.gather_nd(t(x), t(coords), batch_dims, wrap=True).numpy()
    if batch_dims:
        b = np.arange(shape[0]).reshape(-1, 1)
        want = x[(b, *[coords[..., c] for c in range(q)])]
    else:
        want = x[tuple(coords[..., c] for c in range(q))]
    np.testing.assert_array_equal(got, want)


def test_each_coordinate_is_checked_against_its_own_dimension():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    # (0, 5) would be element 5 of the flattened x: it must be an error, not x[1, 1]
    with pytest.raises(IndexOutOfRange, match=r"coordinate 1, along axis 1.*index 5,.*valid indices: 0..3"):
        ops.gather_nd(t(x), t(np.array([[0, 5]])))
    with pytest.raises(IndexOutOfRange, match=r"coordinate 0.*index 3,"):
        ops.scatter_nd(t(x), t(np.array([[3, 0]])), t(np.ones(1, np.float32)))
    with pytest.raises(IndexOutOfRange, match=r"scatter\(\): 'index'.*index -5,.*valid indices: -3..2"):
        ops.scatter(t(x), 0, t(np.array([[-5, 0]])), t(np.ones((1, 2), np.float32)), wrap=True)


def test_bad_indices_from_a_model_input_raise_and_the_model_stays_usable():
    ids = input((2, 2), "int64", name="ids")
    table = t(np.arange(12, dtype=np.float32).reshape(3, 4))
    model = taskloom.compile(Graph([ids], [ops.gather_nd(table, ids, wrap=True)]))
    good = np.array([[2, -1], [0, 0]])
    np.testing.assert_array_equal(model(good), [11, 0])
    for bad in ([[0, 4], [0, 0]], [[-4, 0], [0, 0]], [[0, 0], [10 ** 9, 0]]):
        with pytest.raises(IndexOutOfRange, match="gather_nd"):
            model(np.array(bad))
    np.testing.assert_array_equal(model(good), [11, 0])


def test_argument_errors_name_the_argument():
    x, ones = t(np.zeros((3, 4), np.float32)), t(np.ones((1, 4), np.float32))
    cases = [
        (lambda: ops.scatter(x, 0, t(np.zeros((1, 4), np.int64)), ones, reduce="mean"), "reduce"),
        (lambda: ops.scatter(x, 0, t(np.zeros((1, 5), np.int64)), ones), "index"),
        (lambda: ops.scatter(x, 0, t(np.zeros((1, 4), np.float32)), ones), "index"),
        (lambda: ops.scatter(x, 0, t(np.zeros((1, 4), np.int64)), t(np.ones((1, 4), np.float64))), "src"),
        (lambda: ops.scatter_nd(x, t(np.zeros((1, 3), np.int64)), ones), "indices"),
        (lambda: ops.scatter_nd(x, t(np.zeros((2, 1), np.int64)), ones), "updates"),
        (lambda: ops.gather_nd(x, t(np.zeros((2, 1), np.int64)), batch_dims=2), "batch_dims"),
    ]
    for fn, arg in cases:
        with pytest.raises(OpError, match=f"'{arg}'"):
            fn()
