"""Matrix products, conv2d and the 2-D pools against torch, on shapes drawn with hypothesis.

Sizes are small (channels up to ~8, spatial sizes up to 13) and odd or prime; kernels,
strides (1-3), dilations (1-2), paddings (int, pair, asymmetric 4-tuple, 'same'), groups
(depthwise included) and the pooling modes are drawn too. Each drawn combination is a new
kernel to compile, so the example counts are small. Sums are compared with tolerances
that allow for a different float32 accumulation order; float16 results (accumulated in
float32, rounded once) are compared with the float32 result of the same float16 inputs.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import taskloom as tl
from taskloom import ops
from taskloom.errors import OpError
from taskloom.graph import Graph, input
from taskloom.ir import dtypes as T
from taskloom.ir.compute import ReduceCompute, classify
from taskloom.ir.expr import Select
from taskloom.ir.functor import collect
from taskloom.ops import base

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SIZES = st.sampled_from([1, 2, 3, 5, 7, 11, 13])
F32 = dict(rtol=1e-4, atol=1e-4)
F16 = dict(rtol=2e-3, atol=2e-3)


def rand(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def check(got: tl.Tensor, want: torch.Tensor | np.ndarray, dtype=np.float32, **tol) -> None:
    want = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert isinstance(got, tl.Tensor)
    assert got.shape == want.shape, f"shape {got.shape}, expected {want.shape}"
    assert got.dtype == T.dtype(dtype), f"dtype {got.dtype.name}, expected {np.dtype(dtype)}"
    if np.issubdtype(np.dtype(dtype), np.integer):
        np.testing.assert_array_equal(got.numpy(), want)
    else:
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.astype(np.float64), **(tol or F32))


def t(a: np.ndarray) -> torch.Tensor:
    """float16 data is referenced in float32 (torch's CPU half kernels accumulate in float32 too)."""
    return torch.from_numpy(a).float() if a.dtype == np.float16 else torch.from_numpy(a)


# ----------------------------------------------------------------------------- matmul

@st.composite
def matmul_shapes(draw):
    m, k, n = draw(SIZES), draw(SIZES), draw(SIZES)
    batch = draw(st.lists(SIZES, max_size=2))
    a_kind = draw(st.sampled_from(["vector", "matrix"]))
    b_kind = draw(st.sampled_from(["vector", "matrix"]))

    def batch_of():  # trailing batch axes, some turned into 1 to broadcast
        keep = draw(st.integers(0, len(batch)))
        return [1 if draw(st.booleans()) else d for d in batch[len(batch) - keep:]]
    sa = (k,) if a_kind == "vector" else (*batch_of(), m, k)
    sb = (k,) if b_kind == "vector" else (*batch_of(), k, n)
    return sa, sb


@settings(max_examples=10, **SETTINGS)
@given(matmul_shapes())
def test_matmul_float32(shapes):
    sa, sb = shapes
    a, b = rand(sa, seed=1), rand(sb, seed=2)
    check(ops.matmul(a, b), torch.matmul(t(a), t(b)))


@settings(max_examples=4, **SETTINGS)
@given(matmul_shapes())
def test_matmul_float16_and_int32(shapes):
    sa, sb = shapes
    a, b = rand(sa, np.float16, 1), rand(sb, np.float16, 2)
    check(ops.matmul(a, b), torch.matmul(t(a), t(b)).half(), np.float16, **F16)
    ai, bi = (a * 4).astype(np.int32), (b * 4).astype(np.int32)
    check(ops.matmul(ai, bi), np.matmul(ai, bi), np.int32)


def test_matmul_vector_cases_and_operator():
    v, w = rand(7, seed=1), rand(7, seed=2)
    dot = ops.matmul(v, w)
    assert dot.shape == ()
    np.testing.assert_allclose(dot.numpy(), np.dot(v, w), rtol=1e-5)
    m = rand((5, 7), seed=3)
    check(ops.matmul(v, m.T.copy()), v @ m.T)
    check(ops.matmul(m, v), m @ v)
    check(tl.asarray(m) @ tl.asarray(m.T.copy()), m @ m.T)
    # a long reduction: float32 accumulation over 1000 terms
    a, b = rand((3, 1000), seed=4), rand((1000, 2), seed=5)
    check(ops.matmul(a, b), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("sa,sb", [((2, 1, 3, 4), (5, 4, 6)), ((1, 3, 4), (2, 4, 5)), ((3, 4), (2, 4, 5)),
                                   ((2, 3, 4), (4,)), ((4,), (3, 1, 4, 5))])
def test_matmul_batch_broadcasting(sa, sb):
    a, b = rand(sa, seed=1), rand(sb, seed=2)
    check(ops.matmul(a, b), np.matmul(a, b))


@settings(max_examples=8, **SETTINGS)
@given(SIZES, SIZES, SIZES, SIZES, st.booleans(), st.booleans(), st.sampled_from(["same", "a1", "b1"]))
def test_batch_matmul(bsz, m, k, n, ta, tb, bcast):
    ba = 1 if bcast == "a1" else bsz
    bb = 1 if bcast == "b1" else bsz
    a = rand((ba, k, m) if ta else (ba, m, k), seed=1)
    b = rand((bb, n, k) if tb else (bb, k, n), seed=2)
    want = torch.matmul(t(a).transpose(1, 2) if ta else t(a), t(b).transpose(1, 2) if tb else t(b))
    check(ops.batch_matmul(a, b, transpose_a=ta, transpose_b=tb), want)


@settings(max_examples=8, **SETTINGS)
@given(st.lists(SIZES, max_size=2), SIZES, SIZES, st.booleans(), st.sampled_from([np.float32, np.float16]))
def test_linear(lead, fin, fout, with_bias, dtype):
    x, w = rand((*lead, fin), dtype, 1), rand((fout, fin), dtype, 2)
    bias = rand(fout, dtype, 3) if with_bias else None
    want = F.linear(t(x), t(w), None if bias is None else t(bias))
    tol = F16 if dtype == np.float16 else F32
    check(ops.linear(x, w, bias), want.half() if dtype == np.float16 else want, dtype, **tol)


# ----------------------------------------------------------------------------- conv2d

@st.composite
def conv_cases(draw, depthwise: bool = False):
    groups = draw(st.integers(1, 3))
    c_per_group = 1 if depthwise else draw(st.integers(1, 3))
    mult = draw(st.integers(1, 3))
    if depthwise:
        groups = draw(st.integers(2, 8))
    kh, kw = draw(st.sampled_from([1, 3, 5, 2])), draw(st.sampled_from([1, 3, 5]))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    form = draw(st.sampled_from(["int", "pair", "four", "same"]))
    if form == "same":
        sh = sw = 1
        padding = "same"
        pads = None
    else:
        sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        if form == "int":
            p = draw(st.integers(0, 2))
            padding, pads = p, (p, p, p, p)
        elif form == "pair":
            ph, pw = draw(st.integers(0, 2)), draw(st.integers(0, 2))
            padding, pads = (ph, pw), (ph, ph, pw, pw)
        else:
            pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
            padding = pads
    lo_h = max(1, dh * (kh - 1) + 1 - (0 if pads is None else pads[0] + pads[1]))
    lo_w = max(1, dw * (kw - 1) + 1 - (0 if pads is None else pads[2] + pads[3]))
    h, w = draw(st.integers(lo_h, 13)), draw(st.integers(lo_w, 13))
    n = draw(st.sampled_from([None, 1, 2]))  # None: an unbatched (C, H, W) input
    return dict(n=n, c=groups * c_per_group, o=groups * mult, h=h, w=w, k=(kh, kw), stride=(sh, sw),
                padding=padding, pads=pads, dilation=(dh, dw), groups=groups,
                bias=draw(st.booleans()))


def _conv_reference(x, w, b, case):
    tx = t(x)
    if case["pads"] is not None and not isinstance(case["padding"], int) and len(case["padding"]) == 4:
        top, bottom, left, right = case["pads"]
        tx = F.pad(tx, (left, right, top, bottom))  # torch orders the pad (left, right, top, bottom)
        padding = 0
    else:
        padding = case["padding"]
    with warnings.catch_warnings():  # torch warns that 'same' with an even kernel copies the input
        warnings.simplefilter("ignore", UserWarning)
        return F.conv2d(tx, t(w), None if b is None else t(b), case["stride"], padding, case["dilation"],
                        case["groups"])


def _run_conv(case, dtype=np.float32, layout="NCHW"):
    """The op's result (back in NCHW) and torch's; NHWC takes the input and weight transposed."""
    shape = (case["c"], case["h"], case["w"])
    x = rand(shape if case["n"] is None else (case["n"], *shape), dtype, 1)
    w = rand((case["o"], case["c"] // case["groups"], *case["k"]), dtype, 2)
    b = rand(case["o"], dtype, 3) if case["bias"] else None
    kw = dict(stride=case["stride"], padding=case["padding"], dilation=case["dilation"], groups=case["groups"])
    if layout == "NHWC":
        hwc = (*range(x.ndim - 3), x.ndim - 2, x.ndim - 1, x.ndim - 3)
        got = ops.conv2d(np.ascontiguousarray(x.transpose(hwc)), np.ascontiguousarray(w.transpose(2, 3, 1, 0)), b,
                         layout="NHWC", **kw).numpy()
        got = tl.asarray(np.ascontiguousarray(got.transpose(np.argsort(hwc))))
    else:
        got = ops.conv2d(x, w, b, **kw)
    return got, _conv_reference(x, w, b, case)


@settings(max_examples=12, **SETTINGS)
@given(conv_cases())
def test_conv2d_float32(case):
    got, want = _run_conv(case)
    check(got, want, rtol=1e-4, atol=2e-4)


@settings(max_examples=5, **SETTINGS)
@given(conv_cases(depthwise=True))
def test_conv2d_depthwise(case):
    got, want = _run_conv(case)
    check(got, want, rtol=1e-4, atol=2e-4)


@settings(max_examples=8, **SETTINGS)
@given(st.one_of(conv_cases(), conv_cases(depthwise=True)))
def test_conv2d_nhwc(case):
    got, want = _run_conv(case, layout="NHWC")
    check(got, want, rtol=1e-4, atol=2e-4)


@settings(max_examples=6, **SETTINGS)
@given(st.sampled_from([3, 16, 32, 20]), st.sampled_from([16, 7]), st.integers(1, 2), st.integers(0, 1),
       st.sampled_from([(3, 3), (1, 1), (2, 3)]), SIZES, SIZES)
def test_compiled_nhwc_conv_packs_its_window_by_channels(c, o, stride, pad, k, h, w):
    """The NHWC conv through the matmul template: channels a multiple of the vector pack by
    vectors (aligned division of K), others element by element; padding and strides."""
    x = rand((1, h + k[0], w + k[1], c), seed=1)
    wt = rand((*k, c, o), seed=2)
    xi = input(x.shape, name="x")
    g = Graph([xi], [ops.conv2d(xi, wt, stride=stride, padding=pad, layout="NHWC")])
    got = tl.asarray(tl.compile(g)(x))
    want = F.conv2d(t(x).permute(0, 3, 1, 2), t(wt).permute(3, 2, 0, 1), None, stride, pad).permute(0, 2, 3, 1)
    check(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(c * k[0] * k[1]))


@pytest.mark.parametrize("isa", ["avx2", None])
def test_compiled_nhwc_conv_on_both_isas(isa):
    """8-lane (AVX2) and 16-lane vectors: channels of 8, 16 and 24 against each width."""
    target = tl.get_target("cpu -isa=avx2") if isa else tl.host_target()
    for c in (8, 16, 24):
        x, wt = rand((1, 7, 6, c), seed=1), rand((3, 3, c, 5), seed=2)
        xi = input(x.shape, name="x")
        g = Graph([xi], [ops.conv2d(xi, wt, padding=1, layout="NHWC")])
        got = tl.asarray(tl.compile(g, target=target)(x))
        want = F.conv2d(t(x).permute(0, 3, 1, 2), t(wt).permute(3, 2, 0, 1), None, 1, 1).permute(0, 2, 3, 1)
        check(got, want, rtol=1e-4, atol=1e-3)


def test_nhwc_conv_and_pool_errors_name_the_layout():
    x = rand((1, 5, 5, 4), seed=1)
    with pytest.raises(OpError, match=r"'weight' must be 4-d \(KH, KW"):
        ops.conv2d(x, rand((4, 3, 3), seed=2), layout="NHWC")
    with pytest.raises(OpError, match="'layout'='NCWH'"):
        ops.conv2d(x, rand((3, 3, 4, 2), seed=2), layout="NCWH")
    with pytest.raises(OpError, match="height"):
        ops.max_pool2d(rand((1, 2, 9, 4), seed=1), 3, layout="NHWC")


@settings(max_examples=3, **SETTINGS)
@given(conv_cases())
def test_conv2d_float16(case):
    got, want = _run_conv(case, np.float16)
    check(got, want.half(), np.float16, **F16)


def test_conv2d_resnet_layer():
    """A ResNet-like 3x3 stride-2 layer with bias, larger than the drawn shapes."""
    x, w, b = rand((2, 16, 28, 28), seed=1), rand((32, 16, 3, 3), seed=2), rand(32, seed=3)
    got = ops.conv2d(x, w, b, stride=2, padding=1)
    check(got, F.conv2d(t(x), t(w), t(b), 2, 1), rtol=1e-4, atol=5e-4)


def test_conv2d_padding_order_is_top_bottom_left_right():
    x = np.zeros((1, 1, 3, 3), np.float32)
    x[0, 0, 0, 0] = 1.0
    w = np.ones((1, 1, 1, 1), np.float32)
    out = ops.conv2d(x, w, padding=(1, 0, 2, 0)).numpy()  # one row on top, two columns on the left
    assert out.shape == (1, 1, 4, 5)
    assert out[0, 0, 1, 2] == 1.0 and out.sum() == 1.0


# ----------------------------------------------------------------------------- pooling

@st.composite
def pool_cases(draw, dilation: bool):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = draw(st.sampled_from([None, 1, 2, 3, (1, 2), (3, 2)]))
    pad = (draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilation else (1, 1)
    shape = (draw(st.sampled_from([(), (1,), (2,)])) + (draw(st.integers(1, 5)),)
             + (draw(st.integers(1, 13)), draw(st.integers(1, 13))))
    return dict(shape=shape, k=k, stride=stride, padding=pad, dilation=d, ceil_mode=draw(st.booleans()))


def _torch_or_error(fn):
    try:
        return fn()
    except RuntimeError:
        return None


@settings(max_examples=10, **SETTINGS)
@given(pool_cases(dilation=True))
def test_max_pool2d(case):
    x = rand(case["shape"], seed=1)
    args = dict(kernel_size=case["k"], stride=case["stride"], padding=case["padding"],
                dilation=case["dilation"], ceil_mode=case["ceil_mode"])
    want = _torch_or_error(lambda: F.max_pool2d(t(x), **args))
    if want is None:  # torch rejects the window: so must we
        with pytest.raises(OpError, match=r"max_pool2d\(\)"):
            ops.max_pool2d(x, **args)
        return
    check(ops.max_pool2d(x, **args), want, rtol=0, atol=0)


@settings(max_examples=10, **SETTINGS)
@given(pool_cases(dilation=False), st.booleans(), st.sampled_from([None, None, 3]))
def test_avg_pool2d(case, count_include_pad, divisor):
    x = rand(case["shape"], seed=1)
    args = dict(kernel_size=case["k"], stride=case["stride"], padding=case["padding"],
                ceil_mode=case["ceil_mode"], count_include_pad=count_include_pad, divisor_override=divisor)
    want = _torch_or_error(lambda: F.avg_pool2d(t(x), **args))
    if want is None:
        with pytest.raises(OpError, match=r"avg_pool2d\(\)"):
            ops.avg_pool2d(x, **args)
        return
    check(ops.avg_pool2d(x, **args), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d_divisor_at_the_edges(ceil_mode, count_include_pad):
    x = rand((1, 2, 8, 7), seed=1)
    got = ops.avg_pool2d(x, 3, 2, 1, ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    check(got, F.avg_pool2d(t(x), 3, 2, 1, ceil_mode, count_include_pad), rtol=1e-5, atol=1e-6)


def test_pool_ceil_mode_drops_window_starting_in_right_padding():
    # 5 wide, kernel 2, stride 2, padding 1: ceil gives 4 windows, but the 4th would start at
    # column 5 = width + 0, inside the right padding only, so torch keeps 3
    x = rand((1, 1, 5, 5), seed=1)
    for fn, tfn in ((ops.max_pool2d, F.max_pool2d), (ops.avg_pool2d, F.avg_pool2d)):
        got = fn(x, 2, 2, 1, ceil_mode=True)
        assert got.shape == (1, 1, 3, 3)
        check(got, tfn(t(x), 2, 2, 1, ceil_mode=True), rtol=1e-6, atol=1e-6)
    # without padding, kernel 3 stride 2 on 6: the ceil window starting at 4 stays (partly outside)
    x = rand((1, 2, 6, 6), seed=2)
    got = ops.avg_pool2d(x, 3, 2, ceil_mode=True)
    assert got.shape == (1, 2, 3, 3)
    check(got, F.avg_pool2d(t(x), 3, 2, ceil_mode=True), rtol=1e-6, atol=1e-6)


@settings(max_examples=3, **SETTINGS)
@given(pool_cases(dilation=False))
def test_pools_float16(case):
    x = rand(case["shape"], np.float16, 1)
    args = dict(kernel_size=case["k"], stride=case["stride"], padding=case["padding"], ceil_mode=case["ceil_mode"])
    want = _torch_or_error(lambda: F.max_pool2d(t(x), **args))
    assume(want is not None)
    check(ops.max_pool2d(x, **args), want.half(), np.float16, rtol=0, atol=0)
    check(ops.avg_pool2d(x, **args), F.avg_pool2d(t(x), **args).half(), np.float16, **F16)


@settings(max_examples=6, **SETTINGS)
@given(pool_cases(dilation=False), st.booleans())
def test_pools_nhwc(case, count_include_pad):
    x = rand(case["shape"], seed=1)
    args = dict(kernel_size=case["k"], stride=case["stride"], padding=case["padding"], ceil_mode=case["ceil_mode"])
    want = _torch_or_error(lambda: F.max_pool2d(t(x), **args))
    assume(want is not None)
    hwc = (*range(x.ndim - 3), x.ndim - 2, x.ndim - 1, x.ndim - 3)
    xh = np.ascontiguousarray(x.transpose(hwc))
    back = tuple(np.argsort(hwc))
    def nchw(y: tl.Tensor) -> tl.Tensor:
        return tl.asarray(np.ascontiguousarray(y.numpy().transpose(back)))
    check(nchw(ops.max_pool2d(xh, layout="NHWC", **args)), want, rtol=0, atol=0)
    got = nchw(ops.avg_pool2d(xh, count_include_pad=count_include_pad, layout="NHWC", **args))
    check(got, F.avg_pool2d(t(x), count_include_pad=count_include_pad, **args), rtol=1e-5, atol=1e-6)


@settings(max_examples=7, **SETTINGS)
@given(st.sampled_from([(), (1,), (2,)]), st.integers(1, 5), SIZES, SIZES,
       st.one_of(st.integers(1, 8), st.tuples(st.one_of(st.none(), st.integers(1, 8)), st.integers(1, 8))))
def test_adaptive_avg_pool2d(lead, c, h, w, size):
    x = rand((*lead, c, h, w), seed=1)
    check(ops.adaptive_avg_pool2d(x, size), F.adaptive_avg_pool2d(t(x), size), rtol=1e-5, atol=1e-6)


@settings(max_examples=4, **SETTINGS)
@given(st.sampled_from([(), (1,), (3,)]), st.integers(1, 7), SIZES, SIZES, st.sampled_from([np.float32, np.float16]))
def test_global_pools(lead, c, h, w, dtype):
    x = rand((*lead, c, h, w), dtype, 1)
    tol = F16 if dtype == np.float16 else dict(rtol=1e-5, atol=1e-6)
    mean = t(x).mean((-2, -1), keepdim=True)
    check(ops.global_avg_pool2d(x), mean.half() if dtype == np.float16 else mean, dtype, **tol)
    peak = t(x).amax((-2, -1), keepdim=True)
    check(ops.global_max_pool2d(x), peak.half() if dtype == np.float16 else peak, dtype, rtol=0, atol=0)


# ----------------------------------------------------------------------------- definitions

def test_definitions_are_reductions_with_select_padding(monkeypatch):
    tasks = []
    real = base.run_eager

    def record(task, inputs):
        tasks.append(task)
        return real(task, inputs)
    monkeypatch.setattr(base, "run_eager", record)
    ops.matmul(rand((3, 5)), rand((5, 2)))
    ops.conv2d(rand((1, 2, 5, 5)), rand((2, 2, 3, 3)), padding=1)
    ops.conv2d(rand((1, 2, 5, 5)), rand((2, 2, 3, 3)))
    ops.max_pool2d(rand((1, 2, 5, 5)), 3, 2, 1)
    assert [classify(task) for task in tasks] == ["reduction"] * 4
    matmul, padded, unpadded, pool = tasks
    assert len(collect(matmul.outputs[0].value, ReduceCompute)) == 1
    assert collect(padded.outputs[0].value, Select)  # padding is a select on the input coordinates
    assert not collect(unpadded.outputs[0].value, Select)
    assert collect(pool.outputs[0].value, Select)


# ----------------------------------------------------------------------------- errors

def _ones(*shape, dtype=np.float32):
    return np.ones(shape, dtype)


def _scalar():
    return tl.Tensor((), T.float32, np.array(2.0, np.float32))


ERRORS = [
    ("matmul", lambda: ops.matmul(_ones(3, 4), _ones(5, 2)), ["'a'", "'b'", "inner"]),
    ("matmul", lambda: ops.matmul(_ones(4), _ones(5)), ["'a'", "'b'", "inner"]),
    ("matmul", lambda: ops.matmul(_ones(2, 3, 4), _ones(3, 4, 5)), ["'a'", "'b'", "batch"]),
    ("matmul", lambda: ops.matmul(_scalar(), _ones(3)), ["'a'", "0-d"]),
    ("matmul", lambda: ops.matmul(_ones(3), _scalar()), ["'b'", "0-d"]),
    ("matmul", lambda: ops.matmul(_ones(3, 3), _ones(3, 3, dtype=np.int32)), ["'b'", "dtype"]),
    ("matmul", lambda: ops.matmul(_ones(3, 3, dtype=np.bool_), _ones(3, 3, dtype=np.bool_)), ["'a'", "dtype"]),
    ("batch_matmul", lambda: ops.batch_matmul(_ones(3, 4), _ones(3, 4, 5)), ["'a'", "3-d"]),
    ("batch_matmul", lambda: ops.batch_matmul(_ones(2, 3, 4), _ones(2, 3, 5), transpose_b=True), ["inner", "'b'"]),
    ("batch_matmul", lambda: ops.batch_matmul(_ones(2, 3, 4), _ones(3, 4, 5)), ["'a'", "'b'", "batch"]),
    ("batch_matmul", lambda: ops.batch_matmul(_ones(2, 3, 4), _ones(2, 4, 5), transpose_a=1), ["'transpose_a'"]),
    ("linear", lambda: ops.linear(_ones(2, 5), _ones(3, 4)), ["'weight'", "'x'"]),
    ("linear", lambda: ops.linear(_ones(2, 4), _ones(4)), ["'weight'", "2-d"]),
    ("linear", lambda: ops.linear(_ones(2, 4), _ones(3, 4), _ones(4)), ["'bias'", "(3,)"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 6, 5, 5), _ones(4, 2, 3, 3), groups=4), ["'groups'", "6"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 6, 5, 5), _ones(3, 3, 3, 3), groups=2), ["'groups'", "output"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 6, 5, 5), _ones(4, 2, 3, 3), groups=2), ["'weight'", "expected 3"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 7, 3)), ["'weight'", "padded input"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 3, 3), dilation=3), ["'weight'", "padded input"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 3, 3), stride=0), ["'stride'"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 3, 3), padding=-1), ["'padding'"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 3, 3), padding=(1, 2, 3)), ["'padding'"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 3, 3), padding="full"), ["'padding'"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 3, 3), stride=2, padding="same"), ["'padding'", "stride"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 3, 3), dilation=(1, 0)), ["'dilation'"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 3, 3), groups=0), ["'groups'"]),
    ("conv2d", lambda: ops.conv2d(_ones(2, 5, 5), _ones(4, 2, 3)), ["'weight'", "4-d"]),
    ("conv2d", lambda: ops.conv2d(_ones(5, 5), _ones(4, 2, 3, 3)), ["'x'", "4-d"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 3, 3), _ones(3)), ["'bias'"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5, dtype=np.int32), _ones(4, 2, 3, 3, dtype=np.int32)),
     ["'x'", "floating"]),
    ("conv2d", lambda: ops.conv2d(_ones(1, 2, 5, 5), _ones(4, 2, 3, 3, dtype=np.float16)), ["'weight'", "dtype"]),
    ("max_pool2d", lambda: ops.max_pool2d(_ones(1, 1, 5, 5), 3, padding=2), ["'padding'", "half"]),
    ("max_pool2d", lambda: ops.max_pool2d(_ones(1, 1, 5, 5), 0), ["'kernel_size'"]),
    ("max_pool2d", lambda: ops.max_pool2d(_ones(1, 1, 2, 5), 3), ["'kernel_size'", "height"]),
    ("max_pool2d", lambda: ops.max_pool2d(_ones(1, 1, 5, 5), 2, stride=(1, 0)), ["'stride'"]),
    ("max_pool2d", lambda: ops.max_pool2d(_ones(1, 1, 5, 5), 2, dilation=0), ["'dilation'"]),
    ("max_pool2d", lambda: ops.max_pool2d(_ones(1, 1, 5, 5), 2, ceil_mode=1), ["'ceil_mode'"]),
    ("max_pool2d", lambda: ops.max_pool2d(_ones(5, 5), 2), ["'x'"]),
    ("avg_pool2d", lambda: ops.avg_pool2d(_ones(1, 1, 5, 5), 2, divisor_override=0), ["'divisor_override'"]),
    ("avg_pool2d", lambda: ops.avg_pool2d(_ones(1, 1, 5, 5), (2, 2, 2)), ["'kernel_size'"]),
    ("avg_pool2d", lambda: ops.avg_pool2d(_ones(1, 1, 5, 5, dtype=np.int32), 2), ["'x'", "floating"]),
    ("adaptive_avg_pool2d", lambda: ops.adaptive_avg_pool2d(_ones(1, 1, 5, 5), 0), ["'output_size'"]),
    ("adaptive_avg_pool2d", lambda: ops.adaptive_avg_pool2d(_ones(1, 1, 5, 5), (1, 2, 3)), ["'output_size'"]),
    ("global_avg_pool2d", lambda: ops.global_avg_pool2d(_ones(5, 5)), ["'x'"]),
    ("global_max_pool2d", lambda: ops.global_max_pool2d(_ones(2, 1, 1, 5, 5)), ["'x'"]),
]


@pytest.mark.parametrize("op,call,words", ERRORS, ids=[f"{e[0]}-{i}" for i, e in enumerate(ERRORS)])
def test_invalid_arguments(op, call, words):
    with pytest.raises(OpError) as info:
        call()
    msg = str(info.value)
    assert msg.startswith(f"{op}(): "), msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    # the process stays usable
    check(ops.matmul(_ones(2, 3), _ones(3, 2)), np.full((2, 2), 3.0, np.float32))
