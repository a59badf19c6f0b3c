"""Elementwise operators against torch and numpy: unary functions, binary operators with
broadcasting, comparisons, logical operators, where, cast, the type rules, the Tensor
operators and the errors for invalid arguments.

Shapes are drawn with hypothesis from odd and prime sizes. Eager kernels are compiled once
per pattern of unit dimensions, so the unary tests keep every size above 1 (one pattern per
rank) and the broadcasting tests, where unit dimensions are the point, draw fewer examples.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import taskloom as tl
from taskloom import ops
from taskloom.errors import OpError, TaskloomError
from taskloom.ir import dtypes as T

SIZES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 31, 33, 37, 61]
TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float16: dict(rtol=2e-3, atol=2e-3)}


def shapes(min_dims: int = 1, max_dims: int = 3, max_elems: int = 40_000, unique: bool = False):
    """Shapes of odd and prime sizes; ``unique`` keeps sizes distinct (equal sizes share one
    symbol in the eager placeholders, which is one more kernel to compile)."""
    return st.lists(st.sampled_from(SIZES), min_size=min_dims, max_size=max_dims, unique=unique).map(
        tuple).filter(lambda s: int(np.prod(s)) <= max_elems)


@st.composite
def broadcast_shapes(draw, n: int = 2, max_dims: int = 3):
    """``n`` shapes that broadcast together: each keeps some trailing dims of one full
    shape and turns some of them into 1 (a kept count of 0 gives a 0-d tensor)."""
    full = draw(shapes(1, max_dims))
    out = []
    for _ in range(n):
        k = draw(st.integers(0, len(full)))
        dims = full[len(full) - k:]
        ones = draw(st.lists(st.booleans(), min_size=k, max_size=k))
        out.append(tuple(1 if o else d for d, o in zip(dims, ones)))
    return out


def rand(shape, dtype=np.float32, seed=0, low=None, high=None, ints=None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if ints is not None:
        x = rng.integers(ints[0], ints[1] + 1, size=shape)
    elif low is not None:
        x = rng.uniform(low, high, size=shape)
    else:
        x = rng.standard_normal(shape) * 3
    return np.asarray(x).astype(dtype)


def check(got: tl.Tensor, want: torch.Tensor | np.ndarray, **tol) -> None:
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert isinstance(got, tl.Tensor)
    assert got.shape == want.shape
    assert got.dtype == T.dtype(want.dtype), f"dtype {got.dtype.name}, expected {want.dtype}"
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got.numpy(), want)
    else:
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.astype(np.float64), **tol)


# ----------------------------------------------------------------------------- unary

POSITIVE = dict(low=0.05, high=20.0)
UNIT = dict(low=-0.95, high=0.95)
UNARY = {
    "relu": (ops.relu, F.relu, {}),
    "relu6": (ops.relu6, F.relu6, {}),
    "leaky_relu": (ops.leaky_relu, F.leaky_relu, {}),
    "leaky_relu_0.2": (lambda x: ops.leaky_relu(x, negative_slope=0.2), lambda x: F.leaky_relu(x, 0.2), {}),
    "gelu": (ops.gelu, F.gelu, {}),
    "gelu_tanh": (lambda x: ops.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"), {}),
    "silu": (ops.silu, F.silu, {}),
    "sigmoid": (ops.sigmoid, torch.sigmoid, {}),
    "tanh": (ops.tanh, torch.tanh, {}),
    "exp": (ops.exp, torch.exp, {}),
    "log": (ops.log, torch.log, POSITIVE),
    "sqrt": (ops.sqrt, torch.sqrt, POSITIVE),
    "rsqrt": (ops.rsqrt, torch.rsqrt, POSITIVE),
    "erf": (ops.erf, torch.erf, {}),
    "abs": (ops.abs, torch.abs, {}),
    "neg": (ops.neg, torch.neg, {}),
    "clip": (lambda x: ops.clip(x, -1.5, 2.25), lambda x: torch.clamp(x, -1.5, 2.25), {}),
    "clip_min": (lambda x: ops.clip(x, min=0.5), lambda x: torch.clamp(x, min=0.5), {}),
    "clip_max": (lambda x: ops.clip(x, max=-0.5), lambda x: torch.clamp(x, max=-0.5), {}),
    "hardswish": (ops.hardswish, F.hardswish, {}),
    "hardsigmoid": (ops.hardsigmoid, F.hardsigmoid, {}),
    "reciprocal": (ops.reciprocal, torch.reciprocal, POSITIVE),
    "floor": (ops.floor, torch.floor, {}),
    "ceil": (ops.ceil, torch.ceil, {}),
    "round": (lambda x: ops.round(x * 2.5), lambda x: torch.round(x * 2.5), {}),  # (halves to even)
    "sin": (ops.sin, torch.sin, {}),
    "cos": (ops.cos, torch.cos, {}),
    "tan": (ops.tan, torch.tan, dict(low=-1.2, high=1.2)),
    "asin": (ops.asin, torch.asin, UNIT),
    "acos": (ops.acos, torch.acos, UNIT),
    "atan": (ops.atan, torch.atan, {}),
    "sinh": (ops.sinh, torch.sinh, {}),
    "cosh": (ops.cosh, torch.cosh, {}),
    "asinh": (ops.asinh, torch.asinh, {}),
    "acosh": (ops.acosh, torch.acosh, dict(low=1.05, high=20.0)),
    "atanh": (ops.atanh, torch.atanh, UNIT),
    "log10": (ops.log10, torch.log10, POSITIVE),
}


@pytest.mark.parametrize("name", list(UNARY))
@settings(max_examples=4, deadline=None)
@given(shape=shapes(2, 2, unique=True), seed=st.integers(0, 2**16))
def test_unary_float32(name, shape, seed):
    ours, ref, domain = UNARY[name]
    x = rand(shape, np.float32, seed, **domain)
    check(ours(tl.asarray(x)), ref(torch.from_numpy(x)), **TOL[np.float32])


@pytest.mark.parametrize("name", [n for n in UNARY if n not in ("leaky_relu_0.2", "clip_min", "clip_max")])
@settings(max_examples=3, deadline=None)
@given(shape=shapes(1, 1), seed=st.integers(0, 2**16))
def test_unary_float16(name, shape, seed):
    ours, ref, domain = UNARY[name]
    x = rand(shape, np.float16, seed, **domain)
    check(ours(tl.asarray(x)), ref(torch.from_numpy(x)), **TOL[np.float16])


def test_unary_special_values():
    # 2-d with distinct sizes, as in test_unary_float32, so that the kernels built there serve
    big = np.array([[-1e4, -88.0, -20.0, -0.0, 0.0, 1e-30, 20.0, 88.0, 1e4]] * 2, np.float32)
    for ours, ref in [(ops.gelu, F.gelu), (ops.silu, F.silu), (ops.hardswish, F.hardswish),
                      (lambda v: ops.gelu(v, "tanh"), lambda v: F.gelu(v, approximate="tanh"))]:
        check(ours(tl.asarray(big)), ref(torch.from_numpy(big)), rtol=1e-5, atol=1e-6)
    x = np.concatenate([[[-np.inf]] * 2, big, [[np.inf]] * 2], axis=1).astype(np.float32)
    for ours, ref in [(ops.sigmoid, torch.sigmoid), (ops.tanh, torch.tanh), (ops.erf, torch.erf),
                      (ops.relu, F.relu), (ops.abs, torch.abs), (ops.exp, torch.exp)]:
        check(ours(tl.asarray(x)), ref(torch.from_numpy(x)), rtol=1e-5, atol=1e-6)
    pos = np.array([[0.0, 1e-30, 1.0, 1e30, np.inf]] * 2, np.float32)
    for ours, ref in [(ops.log, torch.log), (ops.sqrt, torch.sqrt), (ops.rsqrt, torch.rsqrt),
                      (ops.reciprocal, torch.reciprocal)]:
        check(ours(tl.asarray(pos)), ref(torch.from_numpy(pos)), rtol=1e-5, atol=0)


def test_unary_0d_unit_dims_and_empty():
    for shape in [(), (1,), (1, 7), (5, 1, 3), (0, 4)]:
        x = rand(shape, seed=3)
        check(ops.gelu(tl.asarray(x)), F.gelu(torch.from_numpy(x)), **TOL[np.float32])
        check(ops.relu6(tl.asarray(x)), F.relu6(torch.from_numpy(x)))
    z = tl.asarray(np.array(2.0, np.float32))
    check(ops.add(z, 1.0), np.array(3.0, np.float32))
    check(ops.maximum(z, tl.asarray(np.array(2.5, np.float32))), np.array(2.5, np.float32))


def test_asarray_keeps_0d_arrays_0d():
    check(ops.relu(tl.asarray(np.array(-2.0, np.float32))), np.array(0.0, np.float32))


def test_unary_accepts_array_likes():
    check(ops.relu([[-1.0, 2.0], [3.0, -4.0]]), np.array([[0, 2], [3, 0]], np.float32))
    check(ops.exp(np.zeros(3, np.float32)), np.ones(3, np.float32))


@pytest.mark.parametrize("ours,ref", [
    (ops.exp, torch.exp), (ops.sigmoid, torch.sigmoid), (ops.sqrt, torch.sqrt), (ops.reciprocal, torch.reciprocal),
])
def test_float_functions_of_integers_give_float32(ours, ref):
    x = np.arange(1, 14, dtype=np.int32)
    check(ours(tl.asarray(x)), ref(torch.from_numpy(x)), **TOL[np.float32])


@pytest.mark.parametrize("ours,ref", [(ops.gelu, F.gelu), (ops.leaky_relu, F.leaky_relu)])
def test_activations_of_integers_are_the_activations_of_their_float32(ours, ref):
    x = np.arange(-6, 7, dtype=np.int32)
    check(ours(tl.asarray(x)), ref(torch.from_numpy(x.astype(np.float32))), **TOL[np.float32])


@pytest.mark.parametrize("dtype", [np.int32, np.int8])
def test_integer_unary_keeps_type(dtype):
    x = np.arange(-9, 10, dtype=dtype).reshape(1, 19)
    tx = torch.from_numpy(x)
    check(ops.abs(tl.asarray(x)), torch.abs(tx))
    check(ops.neg(tl.asarray(x)), torch.neg(tx))
    check(ops.relu(tl.asarray(x)), torch.relu(tx))
    check(ops.clip(tl.asarray(x), -3, 4), torch.clamp(tx, -3, 4))
    if dtype is np.int32:
        check(ops.floor(tl.asarray(x)), x)
        check(ops.ceil(tl.asarray(x)), x)


def test_abs_and_logical_not_of_bool():
    b = np.array([True, False, True])
    check(ops.abs(tl.asarray(b)), b)
    check(ops.logical_not(tl.asarray(b)), ~b)


# ----------------------------------------------------------------------------- clip

@settings(max_examples=4, deadline=None)
@given(shapes3=broadcast_shapes(3), seed=st.integers(0, 2**16))
def test_clip_with_tensor_bounds(shapes3, seed):
    xs, ls, hs = shapes3
    x, lo, hi = rand(xs, seed=seed), np.asarray(rand(ls, seed=seed + 1) - 2), np.asarray(rand(hs, seed=seed + 2) + 2)
    want = torch.clamp(torch.from_numpy(x), torch.from_numpy(lo), torch.from_numpy(hi))
    check(ops.clip(tl.asarray(x), tl.asarray(lo), tl.asarray(hi)), want)
    check(ops.clip(tl.asarray(x), min=tl.asarray(lo)), np.maximum(x, lo))


def test_clip_min_above_max_gives_max_as_torch():
    x = rand((3, 5), seed=1)
    check(ops.clip(tl.asarray(x), 2.0, -1.0), torch.clamp(torch.from_numpy(x), 2.0, -1.0))


def test_clip_float_bound_of_integer_tensor_gives_float32():
    x = np.arange(-4, 5, dtype=np.int32)
    check(ops.clip(tl.asarray(x), -1.5, 2.5), torch.clamp(torch.from_numpy(x), -1.5, 2.5))


# ----------------------------------------------------------------------------- binary

BINARY = {
    "add": (ops.add, torch.add, {}),
    "sub": (ops.sub, torch.sub, {}),
    "mul": (ops.mul, torch.mul, {}),
    "div": (ops.div, torch.div, {}),
    "pow": (ops.pow, torch.pow, dict(low=0.1, high=3.0)),
    "maximum": (ops.maximum, torch.maximum, {}),
    "minimum": (ops.minimum, torch.minimum, {}),
    "atan2": (ops.atan2, torch.atan2, {}),
}
COMPARE = {
    "equal": (ops.equal, torch.eq), "not_equal": (ops.not_equal, torch.ne),
    "less": (ops.less, torch.lt), "less_equal": (ops.less_equal, torch.le),
    "greater": (ops.greater, torch.gt), "greater_equal": (ops.greater_equal, torch.ge),
}
LOGICAL = {
    "logical_and": (ops.logical_and, np.logical_and), "logical_or": (ops.logical_or, np.logical_or),
    "logical_xor": (ops.logical_xor, np.logical_xor),
}


@settings(max_examples=12, deadline=None)
@given(pair=broadcast_shapes(2, max_dims=4), seed=st.integers(0, 2**16))
def test_add_broadcasting(pair, seed):
    a, b = rand(pair[0], seed=seed), rand(pair[1], seed=seed + 1)
    check(ops.add(tl.asarray(a), tl.asarray(b)), torch.from_numpy(a) + torch.from_numpy(b), **TOL[np.float32])


@pytest.mark.parametrize("name", list(BINARY))
@settings(max_examples=3, deadline=None)
@given(pair=broadcast_shapes(2), seed=st.integers(0, 2**16))
def test_binary_float32(name, pair, seed):
    ours, ref, domain = BINARY[name]
    a, b = rand(pair[0], seed=seed, **domain), rand(pair[1], seed=seed + 1, **domain)
    if name == "div":
        b = np.where(np.abs(b) < 0.05, 1.0, b).astype(np.float32)
    check(ours(tl.asarray(a), tl.asarray(b)), ref(torch.from_numpy(a), torch.from_numpy(b)), **TOL[np.float32])


@pytest.mark.parametrize("name", list(BINARY))
@settings(max_examples=2, deadline=None)
@given(shape=shapes(2, 2), seed=st.integers(0, 2**16))
def test_binary_float16(name, shape, seed):
    ours, ref, domain = BINARY[name]
    a = rand(shape, np.float16, seed, **domain)
    b = rand(shape[1:], np.float16, seed + 1, **domain)  # a row broadcast over the rows of a
    if name == "div":
        b = np.where(np.abs(b) < 0.05, 1.0, b).astype(np.float16)
    check(ours(tl.asarray(a), tl.asarray(b)), ref(torch.from_numpy(a), torch.from_numpy(b)), **TOL[np.float16])


@pytest.mark.parametrize("name", list(COMPARE))
@settings(max_examples=2, deadline=None)
@given(pair=broadcast_shapes(2), seed=st.integers(0, 2**16))
def test_comparisons(name, pair, seed):
    ours, ref = COMPARE[name]
    # small integers as floats, so that ties are common
    a, b = rand(pair[0], seed=seed, ints=(-2, 2)), rand(pair[1], seed=seed + 1, ints=(-2, 2))
    check(ours(tl.asarray(a), tl.asarray(b)), ref(torch.from_numpy(a), torch.from_numpy(b)))


@pytest.mark.parametrize("name", list(COMPARE))
def test_comparisons_of_mixed_types(name):
    ours, ref = COMPARE[name]
    a = np.arange(-3, 4, dtype=np.int32)
    b = np.array([[-2.5], [0.0], [1.0]], np.float16)
    check(ours(tl.asarray(a), tl.asarray(b)), ref(torch.from_numpy(a), torch.from_numpy(b)))


@pytest.mark.parametrize("name", ["less", "equal"])
def test_comparisons_with_python_scalars(name):
    ours, ref = COMPARE[name]
    a = np.arange(-3, 4, dtype=np.int32)
    check(ours(tl.asarray(a), 1), ref(torch.from_numpy(a), 1))
    check(ours(tl.asarray(a), 0.5), ref(torch.from_numpy(a), 0.5))


@pytest.mark.parametrize("name", list(LOGICAL))
@settings(max_examples=3, deadline=None)
@given(pair=broadcast_shapes(2), seed=st.integers(0, 2**16))
def test_logical(name, pair, seed):
    ours, ref = LOGICAL[name]
    a = rand(pair[0], seed=seed, ints=(0, 1)).astype(bool)
    b = rand(pair[1], seed=seed + 1, ints=(0, 1)).astype(bool)
    check(ours(tl.asarray(a), tl.asarray(b)), ref(a, b))


@pytest.mark.parametrize("name", list(LOGICAL))
def test_logical_of_non_bool_is_nonzero_as_numpy(name):
    ours, ref = LOGICAL[name]
    a = np.array([[0.0, 1.5, -2.0, 0.0, np.nan]], np.float32)
    b = np.array([[0], [3], [-1]], np.int32)
    check(ours(tl.asarray(a), tl.asarray(b)), ref(a, b))
    check(ops.logical_not(tl.asarray(a)), np.logical_not(a))
    check(ops.logical_not(tl.asarray(b)), np.logical_not(b))


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -0.5, -1, -2, 1.7, 0])
def test_pow_scalar_exponents(exponent):
    x = rand((5, 37), seed=4, low=0.1, high=4.0)
    check(ops.pow(tl.asarray(x), exponent), torch.pow(torch.from_numpy(x), exponent), **TOL[np.float32])
    check(tl.asarray(x) ** exponent, torch.from_numpy(x) ** exponent, **TOL[np.float32])


def test_pow_of_integers_stays_integer():
    a = np.arange(-5, 6, dtype=np.int32).reshape(11, 1)
    b = np.arange(0, 6, dtype=np.int32)
    check(ops.pow(tl.asarray(a), tl.asarray(b)), torch.pow(torch.from_numpy(a), torch.from_numpy(b)))
    check(ops.pow(tl.asarray(a), 3), torch.pow(torch.from_numpy(a), 3))
    check(ops.pow(tl.asarray(a), 2), torch.pow(torch.from_numpy(a), 2))
    pos = np.abs(a)
    check(ops.pow(tl.asarray(pos), 0.5), torch.pow(torch.from_numpy(pos), 0.5), **TOL[np.float32])
    check(ops.pow(2, tl.asarray(b)), torch.pow(2, torch.from_numpy(b)))


def test_div_of_integers_is_true_division():
    a = np.arange(-6, 7, dtype=np.int32)
    b = np.array([[4], [-3]], np.int64)
    check(ops.div(tl.asarray(a), tl.asarray(b)), torch.div(torch.from_numpy(a), torch.from_numpy(b)),
          **TOL[np.float32])
    check(ops.div(tl.asarray(a), 2), torch.from_numpy(a) / 2, **TOL[np.float32])


def test_division_by_zero_gives_inf_and_nan():
    a = np.array([1.0, -1.0, 0.0], np.float32)
    got = ops.div(tl.asarray(a), 0.0).numpy()
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])


# ----------------------------------------------------------------------------- type rules

NUMPY_TYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_]


@pytest.mark.parametrize("da", NUMPY_TYPES)
def test_result_type_matches_torch(da):
    for db in NUMPY_TYPES:
        want = torch.promote_types(torch.from_numpy(np.zeros(1, da)).dtype, torch.from_numpy(np.zeros(1, db)).dtype)
        got = ops.result_type(T.dtype(np.dtype(da)), T.dtype(np.dtype(db)))
        assert got.name == str(want).removeprefix("torch."), (da, db)


PROMOTION_PAIRS = [
    (np.int32, np.float32), (np.float16, np.float32), (np.int64, np.float16), (np.uint8, np.int8),
    (np.bool_, np.int32),
]


@pytest.mark.parametrize("da,db", PROMOTION_PAIRS)
def test_tensor_tensor_promotion_follows_torch(da, db):
    a = np.array([[0, 1, 2, 3]], dtype=da) if da is not np.bool_ else np.array([[True, False, True, True]])
    b = np.array([[1], [2], [3]], dtype=db) if db is not np.bool_ else np.array([[True], [False], [True]])
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    check(ops.add(tl.asarray(a), tl.asarray(b)), ta + tb)
    check(ops.div(tl.asarray(a), tl.asarray(b)), ta / tb, **TOL[np.float32])
    check(ops.less(tl.asarray(a), tl.asarray(b)), ta < tb)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("scalar", [2, 0.5, True])
def test_python_scalars_take_the_tensor_type(dtype, scalar):
    a = np.array([[0, 1, 3]], dtype=dtype) if dtype is not np.bool_ else np.array([[True, False, True]])
    ta = torch.from_numpy(a)
    check(ops.add(tl.asarray(a), scalar), ta + scalar, **TOL[np.float16])
    if dtype is np.float32:
        check(ops.mul(scalar, tl.asarray(a)), scalar * ta, **TOL[np.float16])


# ----------------------------------------------------------------------------- where

@settings(max_examples=8, deadline=None)
@given(shapes3=broadcast_shapes(3), seed=st.integers(0, 2**16))
def test_where_broadcasts_all_three(shapes3, seed):
    cs, as_, bs = shapes3
    c = rand(cs, seed=seed, ints=(0, 1)).astype(bool)
    a, b = rand(as_, seed=seed + 1), rand(bs, seed=seed + 2)
    check(ops.where(tl.asarray(c), tl.asarray(a), tl.asarray(b)), np.where(c, a, b))


def test_where_types_and_scalars():
    x = rand((4, 7), seed=5)
    tx = torch.from_numpy(x)
    check(ops.where(tl.asarray(x) > 0, tl.asarray(x), 0.0), torch.where(tx > 0, tx, 0.0))
    check(ops.where(tl.asarray(x) > 0, 1.0, tl.asarray(x)), torch.where(tx > 0, 1.0, tx))
    i = np.arange(7, dtype=np.int32)
    check(ops.where(tl.asarray(x) > 0, tl.asarray(i), tl.asarray(x)), torch.where(tx > 0, torch.from_numpy(i), tx))
    h = x.astype(np.float16)
    check(ops.where(tl.asarray(x) < 0, tl.asarray(h), -1.0), torch.where(tx < 0, torch.from_numpy(h), -1.0))
    # a non-bool condition counts as cond != 0, as in numpy
    c = np.array([0.0, 2.0, -1.0, 0.0, np.nan, 0.5, 0.0], np.float32)
    check(ops.where(tl.asarray(c), tl.asarray(x), tl.asarray(-x)), np.where(c, x, -x))
    check(ops.where(True, tl.asarray(x), tl.asarray(-x)), x)


# ----------------------------------------------------------------------------- cast

CASTS = [
    (np.float32, np.float16), (np.float16, np.float32), (np.float32, np.int32), (np.float16, np.int64),
    (np.float32, np.bool_), (np.int32, np.float32), (np.int64, np.int32), (np.int32, np.int8),
    (np.bool_, np.float32), (np.uint8, np.float16), (np.float32, np.uint8), (np.int32, np.bool_),
    (np.float64, np.float32),
]


@pytest.mark.parametrize("src,dst", CASTS)
def test_cast_matches_numpy(src, dst):
    x = np.array([[-100.75, -3.5, -1.25, -0.0, 0.0, 0.4, 1.0, 2.6, 77.9, 100.5]], np.float64)
    if dst == np.uint8 or src in (np.uint8, np.bool_):
        x = np.abs(x)
    x = x.astype(src)
    for d in (np.dtype(dst).name, T.dtype(np.dtype(dst).name), np.dtype(dst)):
        check(ops.cast(tl.asarray(x), d), x.astype(dst))


def test_cast_accepts_short_names_and_torch_dtypes():
    x = rand((3, 5), seed=2)
    check(ops.cast(tl.asarray(x), "f16"), x.astype(np.float16))
    check(ops.cast(tl.asarray(x), torch.float16), x.astype(np.float16))
    check(ops.cast(tl.asarray(x), torch.int32), x.astype(np.int32))


def test_cast_to_same_type_is_the_tensor_itself():
    t = tl.asarray(rand((3,), seed=0))
    assert ops.cast(t, "float32") is t


# ----------------------------------------------------------------------------- Tensor operators

def test_tensor_operators_with_tensors_and_scalars_on_either_side():
    a, b = rand((3, 5), seed=6, low=0.5, high=2.0), rand((5,), seed=7, low=0.5, high=2.0)
    x, y = tl.asarray(a), tl.asarray(b)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    tol = TOL[np.float32]
    check(x + y, ta + tb, **tol)
    check(x + 2, ta + 2, **tol)
    check(2 + x, 2 + ta, **tol)
    check(x - y, ta - tb, **tol)
    check(x - 1.5, ta - 1.5, **tol)
    check(1.5 - x, 1.5 - ta, **tol)
    check(x * y, ta * tb, **tol)
    check(3 * x, 3 * ta, **tol)
    check(x * 3, ta * 3, **tol)
    check(x / y, ta / tb, **tol)
    check(x / 4, ta / 4, **tol)
    check(4 / x, 4 / ta, **tol)
    check(x ** y, ta ** tb, **tol)
    check(x ** 2, ta ** 2, **tol)
    check(-x, -ta, **tol)
    check(x < y, ta < tb)
    check(x <= 1.0, ta <= 1.0)
    check(x > y, ta > tb)
    check(x >= 1.0, ta >= 1.0)
    check(1.0 < x, 1.0 < ta)   # Python turns this into x > 1.0
    check(1.0 >= x, 1.0 >= ta)


def test_scalar_to_the_power_of_a_tensor():
    a = rand((4,), seed=1, low=0.5, high=2.0)
    check(2.0 ** tl.asarray(a), 2.0 ** torch.from_numpy(a), **TOL[np.float32])


# ----------------------------------------------------------------------------- errors

def _valid_op_still_works():
    x = rand((3, 5), seed=9)
    check(ops.add(tl.asarray(x), 1.0), x + np.float32(1.0))


@pytest.mark.parametrize("call,op,arg", [
    (lambda: ops.add(tl.asarray(np.ones((2, 3), np.float32)), tl.asarray(np.ones((4,), np.float32))),
     "add", "'a'"),
    (lambda: ops.mul(np.ones((5, 2)), np.ones((3, 1, 5))), "mul", "'b'"),
    (lambda: ops.where(tl.asarray(np.ones((4,), bool)), tl.asarray(np.ones((3,), np.float32)), 0.0),
     "where", "'cond'"),
    (lambda: ops.clip(tl.asarray(np.ones((3,), np.float32)), tl.asarray(np.zeros((2,), np.float32))),
     "clip", "'min'"),
    (lambda: ops.leaky_relu(tl.asarray(np.ones(3, np.float32)), negative_slope="steep"),
     "leaky_relu", "'negative_slope'"),
    (lambda: ops.gelu(tl.asarray(np.ones(3, np.float32)), approximate="fast"), "gelu", "'approximate'"),
    (lambda: ops.gelu(tl.asarray(np.ones(3, np.float32)), approximate=True), "gelu", "'approximate'"),
    (lambda: ops.clip(tl.asarray(np.ones(3, np.float32))), "clip", "'min'"),
    (lambda: ops.clip(tl.asarray(np.ones(3, np.float32)), max="big"), "clip", "'max'"),
    (lambda: ops.cast(tl.asarray(np.ones(3, np.float32)), "float128"), "cast", "'dtype'"),
    (lambda: ops.cast(tl.asarray(np.ones(3, np.float32)), "bfloat16"), "cast", "'dtype'"),
    (lambda: ops.neg(tl.asarray(np.ones(3, bool))), "neg", "'x'"),
    (lambda: ops.sub(tl.asarray(np.ones(3, bool)), tl.asarray(np.ones(3, bool))), "sub", "'a'"),
    (lambda: ops.pow(tl.asarray(np.arange(3, dtype=np.int32)), -1), "pow", "'b'"),
    (lambda: ops.add(tl.asarray(np.ones(3, np.uint8)), 300), "add", "'b'"),
    (lambda: ops.add(tl.asarray(np.ones(3, np.float32)), "abc"), "add", "'b'"),
    (lambda: ops.maximum(object(), tl.asarray(np.ones(3, np.float32))), "maximum", "'a'"),
    (lambda: ops.exp("abc"), "exp", "'x'"),
    (lambda: ops.logical_and(tl.asarray(np.ones((2, 2), bool)), np.ones((3,), bool)), "logical_and", "'b'"),
])
def test_invalid_arguments_raise_op_error(call, op, arg):
    with pytest.raises(OpError) as info:
        call()
    assert isinstance(info.value, TaskloomError)
    msg = str(info.value)
    assert msg.startswith(f"{op}()"), msg
    assert arg in msg, msg
    _valid_op_still_works()


def test_broadcast_error_names_the_dimension():
    with pytest.raises(OpError, match=r"dimension -2 'a' has 3, 'b' has 4"):
        ops.add(tl.asarray(np.ones((3, 5), np.float32)), tl.asarray(np.ones((4, 1), np.float32)))
    _valid_op_still_works()
