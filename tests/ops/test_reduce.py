"""Reductions, softmax and normalizations against numpy and torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import taskloom as tl
from taskloom import ops
from taskloom.errors import OpError
from taskloom.ir import dtypes as T

SIZES = [1, 2, 3, 5, 7, 13, 17]
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NP_NAME = {"sum": np.sum, "mean": np.mean, "max": np.amax, "min": np.amin, "prod": np.prod}


def shapes(min_dims: int = 1, max_dims: int = 4, sizes=SIZES):
    return st.lists(st.sampled_from(sizes), min_size=min_dims, max_size=max_dims).map(tuple)


def rand(shape, seed, dtype=np.float32, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape).astype(dtype)


def axis_args(draw, ndim: int):
    """None, a single axis (maybe negative) or a tuple of distinct axes (maybe negative)."""
    choice = draw(st.sampled_from(["none", "int", "tuple"]))
    if choice == "none":
        return None
    if choice == "int":
        return draw(st.integers(-ndim, ndim - 1))
    picked = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    return tuple(a - ndim if draw(st.booleans()) else a for a in picked)


def check_reduction(name, x, axis, keepdim, rtol=1e-5, atol=1e-5):
    got = getattr(ops, name)(tl.asarray(x), axis, keepdim).numpy()
    ref = NP_NAME[name](x.astype(np.float64), axis=axis, keepdims=keepdim)
    assert got.shape == ref.shape, (name, x.shape, axis, keepdim)
    assert got.dtype == x.dtype
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------- reductions

@settings(max_examples=6, **SETTINGS)
@given(shape=shapes(), data=st.data(), seed=st.integers(0, 2**16))
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_reductions_match_numpy(name, shape, data, seed):
    axis = axis_args(data.draw, len(shape))
    keepdim = data.draw(st.booleans())
    x = rand(shape, seed)
    n = x.size if axis is None else int(np.prod([shape[a] for a in np.atleast_1d(axis)]))
    tol = 1e-5 * max(1, np.sqrt(n)) if name == "sum" else 1e-5
    check_reduction(name, x, axis, keepdim, rtol=1e-5, atol=tol)


@settings(max_examples=8, **SETTINGS)
@given(shape=shapes(max_dims=3, sizes=[1, 2, 3, 5, 7]), data=st.data(), seed=st.integers(0, 2**16))
def test_prod_matches_numpy(shape, data, seed):
    axis = axis_args(data.draw, len(shape))
    keepdim = data.draw(st.booleans())
    x = rand(shape, seed, low=0.8, high=1.25)
    check_reduction("prod", x, axis, keepdim, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["sum", "max"])  # an accumulating and a comparing kind
def test_every_axis_and_keepdim(name):
    x = rand((3, 5, 7), 1, low=0.8, high=1.25)
    for axis in [None, 0, 1, 2, -1, -2, -3, (0, 2), (-1, 0)]:
        for keepdim in (False, True):
            check_reduction(name, x, axis, keepdim, rtol=1e-5, atol=1e-5)


def test_keepdims_alias_and_empty_axis_tuple():
    x = rand((4, 6), 2)
    np.testing.assert_allclose(ops.sum(tl.asarray(x), 1, keepdims=True).numpy(),
                               x.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
    assert ops.mean(tl.asarray(x), keepdims=True).numpy().shape == (1, 1)
    # an empty tuple reduces nothing, as in numpy
    np.testing.assert_array_equal(ops.max(tl.asarray(x), ()).numpy(), x)


def test_integer_and_bool_reductions():
    x = np.random.default_rng(3).integers(-5, 6, size=(5, 7)).astype(np.int32)
    s = ops.sum(tl.asarray(x), 0).numpy()
    assert s.dtype == np.int64
    np.testing.assert_array_equal(s, x.sum(0))
    np.testing.assert_array_equal(ops.max(tl.asarray(x), 1).numpy(), x.max(1))
    np.testing.assert_array_equal(ops.min(tl.asarray(x)).numpy(), x.min())
    np.testing.assert_array_equal(ops.prod(tl.asarray(x[:, :3]), 1).numpy(), x[:, :3].astype(np.int64).prod(1))
    b = x > 0
    np.testing.assert_array_equal(ops.sum(tl.asarray(b), 1).numpy(), b.sum(1))


def test_zero_dim_and_empty_inputs():
    s = tl.Tensor((), T.float32, np.array(2.5, np.float32))
    for got in (ops.sum(s), ops.max(s, 0), ops.mean(s, -1, keepdim=True), ops.prod(s, ())):
        assert got.numpy().shape == () and got.numpy() == np.float32(2.5)
    assert ops.argmax(s).numpy().shape == () and ops.argmax(s, 0).numpy() == 0
    assert ops.softmax(s).numpy() == np.float32(1) and ops.log_softmax(s).numpy() == np.float32(0)
    with pytest.raises(OpError, match="'axis'=1 is out of range"):
        ops.sum(s, 1)
    e = np.zeros((3, 0), np.float32)
    np.testing.assert_array_equal(ops.sum(tl.asarray(e), 1).numpy(), np.zeros(3, np.float32))
    assert ops.sum(tl.asarray(e), 0).numpy().shape == (0,)
    assert np.isnan(ops.mean(tl.asarray(e), 1).numpy()).all()


@settings(max_examples=5, **SETTINGS)
@given(shape=shapes(max_dims=3), data=st.data(), seed=st.integers(0, 2**16))
@pytest.mark.parametrize("name", ["sum", "mean", "max"])
def test_float16_reductions_match_torch(name, shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = rand(shape, seed, np.float16, -1.0, 1.0)
    got = getattr(ops, name)(tl.asarray(x), axis).numpy()
    t = torch.from_numpy(x)
    ref = {"sum": lambda: t.sum(axis), "mean": lambda: t.mean(axis), "max": lambda: t.amax(axis)}[name]().numpy()
    assert got.dtype == np.float16 and got.shape == ref.shape
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=2e-2)


# ----------------------------------------------------------------------------- argmax / argmin

@settings(max_examples=6, **SETTINGS)
@given(shape=shapes(), data=st.data(), seed=st.integers(0, 2**16))
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_match_torch_with_ties(name, shape, data, seed):
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    keepdim = data.draw(st.booleans())
    # few distinct values: many ties, which must resolve to the first index
    x = np.random.default_rng(seed).integers(0, 3, size=shape).astype(np.float32)
    got = getattr(ops, name)(tl.asarray(x), axis, keepdim).numpy()
    ref = getattr(torch, name)(torch.from_numpy(x), axis, keepdim).numpy()
    assert got.dtype == np.int64
    assert got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


def test_argmax_first_index_of_ties_and_float16():
    x = np.array([[1, 5, 5, 0], [7, 7, 7, 7], [0, 0, 0, -1]], np.float32)
    np.testing.assert_array_equal(ops.argmax(tl.asarray(x), 1).numpy(), [1, 0, 0])
    np.testing.assert_array_equal(ops.argmin(tl.asarray(x), 0).numpy(), [2, 2, 2, 2])
    assert ops.argmax(tl.asarray(x)).numpy() == 4
    assert ops.argmax(tl.asarray(x), keepdims=True).numpy().shape == (1, 1)
    h = rand((6, 11), 5, np.float16)
    np.testing.assert_array_equal(ops.argmax(tl.asarray(h), -1).numpy(), torch.from_numpy(h).argmax(-1).numpy())


# ----------------------------------------------------------------------------- softmax

@settings(max_examples=8, **SETTINGS)
@given(shape=shapes(), data=st.data(), seed=st.integers(0, 2**16))
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_matches_torch(name, shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = rand(shape, seed, low=-8, high=8)
    got = getattr(ops, name)(tl.asarray(x), axis).numpy()
    ref = getattr(torch, name)(torch.from_numpy(x), axis).numpy()
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_every_axis_and_large_values(name):
    x = rand((3, 5, 7), 7, low=-30, high=30)
    x[0, 0, :] = 1e4  # overflows exp without the max shift
    for axis in range(-3, 3):
        got = getattr(ops, name)(tl.asarray(x), axis).numpy()
        ref = getattr(torch, name)(torch.from_numpy(x), axis).numpy()
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    big = rand((4, 3072), 8)
    np.testing.assert_allclose(getattr(ops, name)(tl.asarray(big)).numpy(),
                               getattr(torch, name)(torch.from_numpy(big), -1).numpy(), rtol=1e-5, atol=1e-6)


@settings(max_examples=5, **SETTINGS)
@given(shape=shapes(max_dims=3), data=st.data(), seed=st.integers(0, 2**16))
def test_float16_softmax_matches_torch(shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = rand(shape, seed, np.float16, -4, 4)
    got = ops.softmax(tl.asarray(x), axis).numpy()
    ref = torch.softmax(torch.from_numpy(x), axis).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-3)
    got = ops.log_softmax(tl.asarray(x), axis).numpy()
    ref = torch.log_softmax(torch.from_numpy(x), axis).numpy()
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-2)


def _captured_task(monkeypatch, fn):
    """The task an operator runs (captured on its way to the eager executor)."""
    import taskloom.ops.base as base
    seen = []
    real = base.run_eager

    def spy(task, inputs):
        seen.append(task)
        return real(task, inputs)
    monkeypatch.setattr(base, "run_eager", spy)
    fn()
    return seen[-1]


@pytest.mark.parametrize("make", [
    lambda x: ops.softmax(x, -1), lambda x: ops.log_softmax(x, 1),
    lambda x: ops.layer_norm(x, 16, np.ones(16, np.float32), np.zeros(16, np.float32))])
def test_last_axis_normalizations_fuse_row_by_row(monkeypatch, make):
    from taskloom.ir import stmt as S
    from taskloom.ir.compute import classify
    from taskloom.ir.functor import collect
    from taskloom.schedule.rule_based_cpu import schedule_task
    from taskloom.target.cpu import host_target
    x = tl.asarray(rand((6, 16), 9))
    task = _captured_task(monkeypatch, lambda: make(x))
    assert classify(task) == "reduction"
    fn = schedule_task(task, host_target())
    parallel = [s for s in collect(fn.body, S.For) if s.kind == "parallel"]
    assert len(parallel) == 1, "every stage should run inside one parallel loop over the rows"


# ----------------------------------------------------------------------------- layer_norm

@settings(max_examples=8, **SETTINGS)
@given(shape=shapes(), data=st.data(), seed=st.integers(0, 2**16))
def test_layer_norm_matches_torch(shape, data, seed):
    d = data.draw(st.integers(1, len(shape)))
    ns = shape[len(shape) - d:]
    affine = data.draw(st.sampled_from(["none", "weight", "bias", "both"]))
    x = rand(shape, seed) + 3.0
    w = rand(ns, seed + 1) if affine in ("weight", "both") else None
    b = rand(ns, seed + 2) if affine in ("bias", "both") else None
    got = ops.layer_norm(tl.asarray(x), ns, w, b, eps=1e-5).numpy()
    ref = F.layer_norm(torch.from_numpy(x), ns, None if w is None else torch.from_numpy(w),
                       None if b is None else torch.from_numpy(b), eps=1e-5).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_layer_norm_rows_and_float16():
    x = rand((5, 768), 10)
    w, b = rand((768,), 11), rand((768,), 12)
    np.testing.assert_allclose(ops.layer_norm(tl.asarray(x), 768, w, b).numpy(),
                               F.layer_norm(torch.from_numpy(x), (768,), torch.from_numpy(w),
                                            torch.from_numpy(b)).numpy(), rtol=1e-4, atol=1e-4)
    h = rand((3, 7, 33), 13, np.float16)
    got = ops.layer_norm(tl.asarray(h), (7, 33), eps=1e-3).numpy()
    ref = F.layer_norm(torch.from_numpy(h).float(), (7, 33), eps=1e-3).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=1e-2, atol=1e-2)


# ----------------------------------------------------------------------------- batch_norm

@settings(max_examples=8, **SETTINGS)
@given(shape=shapes(min_dims=2), data=st.data(), seed=st.integers(0, 2**16))
def test_batch_norm_matches_torch(shape, data, seed):
    c = (shape[1],)
    affine = data.draw(st.sampled_from(["none", "weight", "bias", "both"]))
    x = rand(shape, seed)
    rm, rv = rand(c, seed + 1), rand(c, seed + 2, low=0.1, high=3.0)
    w = rand(c, seed + 3) if affine in ("weight", "both") else None
    b = rand(c, seed + 4) if affine in ("bias", "both") else None
    got = ops.batch_norm(tl.asarray(x), rm, rv, w, b, eps=1e-3).numpy()
    t = lambda a: None if a is None else torch.from_numpy(a)  # noqa: E731
    ref = F.batch_norm(torch.from_numpy(x), t(rm), t(rv), t(w), t(b), training=False, eps=1e-3).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_batch_norm_nchw_float16():
    x = rand((2, 3, 5, 7), 20, np.float16)
    rm, rv, w, b = (rand((3,), s, np.float16, 0.1, 2.0) for s in range(21, 25))
    got = ops.batch_norm(tl.asarray(x), rm, rv, w, b).numpy()
    t = lambda a: torch.from_numpy(a).float()  # noqa: E731
    ref = F.batch_norm(t(x), t(rm), t(rv), t(w), t(b), training=False).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ref, rtol=1e-2, atol=1e-2)


# ----------------------------------------------------------------------------- invalid arguments

X2 = np.arange(12, dtype=np.float32).reshape(3, 4)
INVALID = [
    ("sum", lambda x: ops.sum(x, 2), "'axis'=2 is out of range"),
    ("mean", lambda x: ops.mean(x, (-3,)), "'axis'=-3 is out of range"),
    ("max", lambda x: ops.max(x, (0, -2)), "'axis' repeats"),
    ("min", lambda x: ops.min(x, 1.5), "'axis'"),
    ("prod", lambda x: ops.prod(x, 0, keepdim="yes"), "'keepdim'"),
    ("sum", lambda x: ops.sum(x, 0, True, keepdims=False), "'keepdim'"),
    ("mean", lambda x: ops.mean(tl.asarray(X2.astype(np.int32))), "'x'"),
    ("max", lambda x: ops.max(tl.asarray(np.zeros((2, 0), np.float32)), 1), "'x'"),
    ("sum", lambda x: ops.sum("not a tensor"), "'x'"),
    ("argmax", lambda x: ops.argmax(x, (0, 1)), "'axis'"),
    ("argmin", lambda x: ops.argmin(x, -3), "'axis'=-3 is out of range"),
    ("argmax", lambda x: ops.argmax(tl.asarray(np.zeros((0, 3), np.float32))), "'x'"),
    ("softmax", lambda x: ops.softmax(x, 3), "'axis'=3 is out of range for a 2-d tensor (valid: -2..1)"),
    ("log_softmax", lambda x: ops.log_softmax(tl.asarray(X2.astype(np.int64))), "'x'"),
    ("layer_norm", lambda x: ops.layer_norm(x, (3,)), "'normalized_shape'"),
    ("layer_norm", lambda x: ops.layer_norm(x, (2, 3, 4)), "'normalized_shape'"),
    ("layer_norm", lambda x: ops.layer_norm(x, (-4,)), "'normalized_shape'"),
    ("layer_norm", lambda x: ops.layer_norm(x, 4.0), "'normalized_shape'"),
    ("layer_norm", lambda x: ops.layer_norm(x, 4, np.ones(3, np.float32)), "'weight'"),
    ("layer_norm", lambda x: ops.layer_norm(x, 4, None, np.ones(4, np.int32)), "'bias'"),
    ("layer_norm", lambda x: ops.layer_norm(x, 4, eps=-1.0), "'eps'"),
    ("batch_norm", lambda x: ops.batch_norm(tl.asarray(np.ones(4, np.float32)), np.ones(4), np.ones(4)), "'x'"),
    ("batch_norm", lambda x: ops.batch_norm(x, np.ones(3, np.float32), np.ones(4, np.float32)), "'running_mean'"),
    ("batch_norm", lambda x: ops.batch_norm(x, np.ones(4, np.float32), None), "'running_var'"),
    ("batch_norm", lambda x: ops.batch_norm(x, np.ones(4, np.float32), np.ones(4, np.float32),
                                            np.ones((4, 1), np.float32)), "'weight'"),
    ("batch_norm", lambda x: ops.batch_norm(tl.asarray(X2.astype(np.int32)), np.ones(4), np.ones(4)), "'x'"),
]


@pytest.mark.parametrize("op,call,fragment", INVALID, ids=[f"{o}-{i}" for i, (o, _, _) in enumerate(INVALID)])
def test_invalid_arguments_raise_op_error(op, call, fragment):
    x = tl.asarray(X2)
    with pytest.raises(OpError) as info:
        call(x)
    msg = str(info.value)
    assert msg.startswith(f"{op}():"), msg
    assert fragment in msg, msg
    # the process stays usable
    np.testing.assert_allclose(ops.sum(x, 1).numpy(), X2.sum(1))


def test_layer_norm_reads_each_row_twice_moments_in_one_pass():
    from taskloom.graph import capture_tasks
    from taskloom.ir import astext
    from taskloom.schedule import schedule_task
    from taskloom.transforms import lower
    x = np.random.default_rng(0).standard_normal((4, 100)).astype(np.float32) + 1e3
    with capture_tasks() as records:
        y = tl.ops.layer_norm(x, (100,))
    text = astext(lower(schedule_task(records[0][0], tl.host_target())))
    import re
    assert len(re.findall(r"in range\(nvec\w* // 4\)", text)) == 1   # one vectorized pass for both moments
    ref = torch.nn.functional.layer_norm(torch.from_numpy(x), (100,)).numpy()
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-3, atol=1e-3)  # 1e3 offset: shifted moments


@settings(max_examples=8, **SETTINGS)
@given(shapes(1, 3), st.integers(0, 99), st.booleans(), st.booleans(), st.sampled_from([np.float32, np.int32]),
       st.data())
def test_cumsum_matches_numpy(shape, seed, exclusive, reverse, dtype, data):
    x = rand(shape, seed, dtype, -5, 5)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    got = ops.cumsum(tl.asarray(x), axis, exclusive, reverse).numpy()
    flipped = np.flip(x, axis) if reverse else x
    want = np.cumsum(flipped, axis, dtype=np.float32 if dtype == np.float32 else np.int64)
    if exclusive:
        want = want - flipped
    want = np.flip(want, axis) if reverse else want
    assert got.dtype == (np.float32 if dtype == np.float32 else np.int64)  # integers sum to int64, as in torch
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
