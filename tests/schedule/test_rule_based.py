"""The rule-based scheduler: any compute definition becomes a correct CPU program, with
the structure the rules promise (fused rows, vector loops, vector accumulators)."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom.ir import (For, VectorLoad, VectorStore, call, collect, f32, i32, logical_and, ne, select,
                         var)
from taskloom.ir.stmt import Assign
from taskloom.ir.compute import Task, compute, reduce, tensor_input
from taskloom.schedule import schedule_task
from taskloom.target import get_target, host_target
from taskloom.transforms import lower

HOST = host_target()
TARGETS = ["cpu -isa=avx2"] + (["cpu -isa=avx512"] if HOST.has("avx512f") else [])
R, C, N = var("R"), var("C"), var("N")
rng = np.random.default_rng(0)


def build(task, spec=None):
    target = get_target(spec) if spec else HOST
    fn = schedule_task(task, target)
    return taskloom.build(fn, target)[fn.name], lower(fn)


def softmax_task():
    X = tensor_input("X", f32, [R, C])
    mx = compute("mx", [R], lambda r: reduce([C], lambda k: X[r, k], "max"))
    e = compute("e", [R, C], lambda r, c: call("exp", X[r, c] - mx[r]))
    s = compute("s", [R], lambda r: reduce([C], lambda k: e[r, k], "sum"))
    return Task("softmax", [X], [compute("Y", [R, C], lambda r, c: e[r, c] / s[r])])


def layernorm_task():
    X, G, B = tensor_input("X", f32, [R, C]), tensor_input("G", f32, [C]), tensor_input("B", f32, [C])
    mean = compute("mean", [R], lambda r: reduce([C], lambda k: X[r, k], "mean"))
    d = compute("d", [R, C], lambda r, c: X[r, c] - mean[r])
    var_ = compute("var", [R], lambda r: reduce([C], lambda k: d[r, k] * d[r, k], "mean"))
    y = compute("Y", [R, C], lambda r, c: d[r, c] * call("rsqrt", var_[r] + 1e-5) * G[c] + B[c])
    return Task("layernorm", [X, G, B], [y])


@pytest.mark.parametrize("spec", TARGETS)
def test_softmax_runs_row_by_row_with_one_exp_per_element(spec):
    kernel, low = build(softmax_task(), spec)
    loops = collect(low, For)
    assert sum(l.kind == "parallel" for l in loops) == 1  # one pass over rows, stages inside
    assert str(low).count("exp(") == 2                    # full vectors and the tail, once each
    for rows, cols in [(1, 1), (3, 17), (5, 64), (2, 1000)]:
        x = rng.standard_normal((rows, cols), dtype=np.float32) * 10
        y = np.empty_like(x)
        kernel(x, y)
        ref = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("spec", TARGETS)
def test_layernorm(spec):
    kernel, _ = build(layernorm_task(), spec)
    for rows, cols in [(1, 3), (7, 768), (4, 33)]:
        x = rng.standard_normal((rows, cols), dtype=np.float32)
        g, b = rng.standard_normal(cols, dtype=np.float32), rng.standard_normal(cols, dtype=np.float32)
        y = np.empty_like(x)
        kernel(x, g, b, y)
        mu = x.mean(1, keepdims=True)
        ref = (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + 1e-5) * g + b
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_elementwise_1d_splits_into_parallel_blocks_and_vectorizes():
    A = tensor_input("A", f32, [N])
    task = Task("gelu", [A], [compute("G", [N], lambda i: A[i] * 0.5 * (1.0 + call("erf", A[i] * 0.7071067811865476)))])
    kernel, low = build(task)
    par = [l for l in collect(low, For) if l.kind == "parallel"]
    assert len(par) == 1 and "// 4096 + 1" in str(par[0].extent)  # ceil(N / 4096), no overflow near 2**31
    assert collect(low, VectorStore) and collect(low, VectorLoad)
    from math import erf
    for n in (1, 15, 4097, 10000):
        a = rng.standard_normal(n, dtype=np.float32)
        g = np.empty_like(a)
        kernel(a, g)
        np.testing.assert_allclose(g, [v * 0.5 * (1 + erf(v / 2 ** 0.5)) for v in a], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("rows, cols, kind", [(4, 256, "serial"), (8, 8, "serial"), (64, 256, "parallel"),
                                              (R, 256, "parallel")])
def test_work_too_small_to_share_runs_on_one_thread(rows, cols, kind):
    """Fewer than SERIAL_STEPS element steps (a reduction's terms count) run serially: waking
    the team would cost more than the work. Unknown sizes stay parallel."""
    X = tensor_input("X", f32, [rows, cols])
    mx = compute("mx", [rows], lambda r: reduce([cols], lambda k: X[r, k], "max"))
    task = Task("shift", [X], [compute("Y", [rows, cols], lambda r, c: X[r, c] - mx[r])])
    kernel, low = build(task)
    assert ("parallel" in {l.kind for l in collect(low, For)}) == (kind == "parallel")
    x = rng.standard_normal((rows if isinstance(rows, int) else 5, cols), dtype=np.float32)
    y = np.empty_like(x)
    kernel(x, y)
    np.testing.assert_allclose(y, x - x.max(1, keepdims=True))


def test_reductions_over_each_axis_and_kind():
    X = tensor_input("X", f32, [R, C])
    outs = [compute("sum0", [C], lambda c: reduce([R], lambda r: X[r, c])),
            compute("max1", [R], lambda r: reduce([C], lambda c: X[r, c], "max")),
            compute("min1", [R], lambda r: reduce([C], lambda c: X[r, c], "min")),
            compute("mean0", [C], lambda c: reduce([R], lambda r: X[r, c], "mean")),
            compute("prod1", [R], lambda r: reduce([C], lambda c: X[r, c], "prod")),
            compute("all", [], lambda: reduce([R, C], lambda r, c: X[r, c]))]
    for out in outs:
        kernel, _ = build(Task(out.name, [X], [out]))
        x = rng.uniform(0.5, 1.5, size=(7, 19)).astype(np.float32)
        y = np.empty([int(d.value) if hasattr(d, "value") else {R: 7, C: 19}[d] for d in out.shape], np.float32)
        kernel(x, y)
        ref = {"sum0": x.sum(0), "max1": x.max(1), "min1": x.min(1), "mean0": x.mean(0),
               "prod1": x.prod(1), "all": x.sum()}[out.name]
        np.testing.assert_allclose(y, ref, rtol=1e-5, err_msg=out.name)


def test_argmax_takes_the_first_of_ties_and_returns_int64():
    X = tensor_input("X", f32, [R, C])
    out = compute("am", [R], lambda r: reduce([C], lambda c: X[r, c], "argmax"))
    kernel, _ = build(Task("argmax", [X], [out]))
    x = np.array([[1, 3, 3, 0], [5, 1, 5, 5], [-1, -2, -3, -1]], np.float32)
    y = np.empty(3, np.int64)
    kernel(x, y)
    np.testing.assert_array_equal(y, [1, 0, 0])


def test_matmul_vectorizes_the_reduction_along_columns():
    M, K = var("M"), var("K")
    A, B = tensor_input("A", f32, [M, K]), tensor_input("B", f32, [K, N])
    C_ = compute("C", [M, N], lambda i, j: reduce([K], lambda k: A[i, k] * B[k, j]))
    kernel, low = build(Task("matmul", [A, B], [C_]))
    assert "sum_vec" in str(low)
    for m, n, k in [(1, 1, 1), (5, 17, 3), (33, 40, 65)]:
        a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
        c = np.empty((m, n), np.float32)
        kernel(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_gather_along_the_last_axis_falls_back_to_a_scalar_loop():
    X = tensor_input("X", f32, [R, C])
    T_ = compute("T", [C, R], lambda c, r: X[r, c])   # transpose: strided along the last axis
    kernel, low = build(Task("transpose", [X], [T_]))
    assert not collect(low, VectorLoad) and any(l.kind == "vectorize" for l in collect(low, For))
    x = rng.standard_normal((5, 9), dtype=np.float32)
    t = np.empty((9, 5), np.float32)
    kernel(x, t)
    np.testing.assert_array_equal(t, x.T)


def test_integer_and_bool_outputs_use_the_scalar_path():
    A = tensor_input("A", i32, [N])
    out = compute("isodd", [N], lambda i: ne(A[i] % 2, 0))  # C remainder: -5 % 2 == -1
    kernel, _ = build(Task("isodd", [A], [out]))
    a = np.arange(-5, 6, dtype=np.int32)
    y = np.empty(a.size, np.bool_)
    kernel(a, y)
    np.testing.assert_array_equal(y, a % 2 != 0)


def test_reduction_along_columns_inside_an_expression():
    X = tensor_input("X", f32, [R, C])
    centred = compute("centred", [R, C], lambda r, c: X[r, c] - reduce([R], lambda k: X[k, c], "mean"))
    kernel, low = build(Task("centre_columns", [X], [centred]))
    assert "mean_vec" in str(low)
    x = rng.standard_normal((6, 37), dtype=np.float32)
    y = np.empty_like(x)
    kernel(x, y)
    np.testing.assert_allclose(y, x - x.mean(0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pad,k", [(0, 1), (1, 3), (2, 3), (3, 7), (4, 2)])
def test_padded_windows_vectorize_the_interior_and_check_only_the_edges(pad, k):
    """A 1-d padded convolution: out[x] = sum_t select(inside, X[x + t - pad], 0) * W[t]."""
    L, K = var("L"), var("K")
    X, Wt = tensor_input("X", f32, [R, L]), tensor_input("W", f32, [K])
    out = compute("conv1d", [R, L + 2 * pad - K + 1], lambda r, x: reduce(
        [K], lambda t: select(logical_and(0 <= x + t - pad, x + t - pad < L), X[r, x + t - pad], 0.0) * Wt[t]))
    kernel, low = build(Task("conv1d", [X, Wt], [out]))
    text = str(low)
    if pad:
        assert "bounds checks only at the edges of the row" in text and "sum_vec" in text
    for length in (1, k, 5, 40):
        if length + 2 * pad - k + 1 <= 0:
            continue
        x = rng.standard_normal((3, length), dtype=np.float32)
        w = rng.standard_normal(k, dtype=np.float32)
        y = np.empty((3, length + 2 * pad - k + 1), np.float32)
        kernel(x, w, y)
        xp = np.pad(x, ((0, 0), (pad, pad)))
        ref = np.stack([np.correlate(row, w, "valid") for row in xp])
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", TARGETS)
@pytest.mark.parametrize("stride,pad,k", [(2, 1, 3), (2, 0, 2), (3, 2, 5), (4, 1, 3), (5, 1, 3)])
def test_strided_windows_gather_and_check_only_the_edges(spec, stride, pad, k):
    """A 1-d padded max pool with a stride: out[x] = max_t select(inside, X[s*x + t - pad], -inf).
    Strides up to MAX_STRIDE read one gather per vector; larger ones stay scalar."""
    L = var("L")
    X = tensor_input("X", f32, [R, L])
    i = lambda x, t: stride * x + t - pad  # noqa: E731
    out = compute("pool1d", [R, (L + 2 * pad - k) // stride + 1], lambda r, x: reduce(
        [k], lambda t: select(logical_and(0 <= i(x, t), i(x, t) < L), X[r, i(x, t)], float("-inf")), "max"))
    kernel, low = build(Task("pool1d", [X], [out]), spec)
    gathers = [v for v in collect(low, VectorLoad) if v.stride == stride]
    assert bool(gathers) == (stride <= 4)
    assert ("bounds checks only at the edges of the row" in str(low)) == (stride <= 4)
    for length in (k, k + 1, 7, 40, 101):
        x = rng.standard_normal((2, length), dtype=np.float32)
        n = (length + 2 * pad - k) // stride + 1
        y = np.empty((2, n), np.float32)
        kernel(x, y)
        xp = np.pad(x, ((0, 0), (pad, pad)), constant_values=-np.inf)
        ref = np.stack([[row[stride * j:stride * j + k].max() for j in range(n)] for row in xp])
        np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("batch", [1, 2])
def test_an_activation_after_a_window_is_computed_in_its_loop(batch):
    """A depthwise window read by its activation only at its own index runs inside the
    activation's loop (one parallel nest, no buffer), over every row even at batch 1 with
    the batch symbolic."""
    import taskloom
    from taskloom import ops
    from taskloom.graph import Graph
    from taskloom.graph.tensor import Tensor, symbol
    w = rng.standard_normal((3, 3, 1, 32)).astype(np.float32)
    shape = (symbol("batch") if batch == 2 else 1, 24, 24, 32)
    x = Tensor(shape, f32, name="x")
    y = ops.relu6(ops.conv2d(x, taskloom.asarray(w), padding=1, groups=32, layout="NHWC"))
    compiled = taskloom.compile(Graph([x], [y]))
    source = open(compiled.meta["source"]).read()
    kernel = source[source.index("void k0_conv2d"):].split("\n}\n")[0]
    assert kernel.count("#pragma omp parallel for") == 1 and "tl_scratch_take" not in kernel
    X = rng.standard_normal((batch, 24, 24, 32)).astype(np.float32)
    import torch
    ref = torch.nn.functional.conv2d(torch.from_numpy(X).permute(0, 3, 1, 2), torch.from_numpy(w).permute(3, 2, 0, 1),
                                     padding=1, groups=32).clamp(0, 6).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(compiled(X), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("spec", TARGETS)
@pytest.mark.parametrize("pixels, side_by_side", [(49, True), (9, False)])
def test_long_reductions_per_vector_run_several_vectors_side_by_side(spec, pixels, side_by_side):
    """A global average pool in NHWC sums every pixel per vector of channels: four vectors'
    sums share one loop over the pixels (independent chains of adds); a 3x3 window's nine
    terms keep a loop per vector. Channel counts leave a single vector and a masked tail."""
    P = var("P")
    X = tensor_input("X", f32, [R, P, C])
    mean = compute("mean", [R, C], lambda r, c: reduce([pixels], lambda p: X[r, p, c], "mean"))
    kernel, low = build(Task("global_pool", [X], [mean]), spec)
    def sums(loop: For) -> set[str]:  # the vector sums one loop over the pixels adds to
        return {a.var.name for a in collect(loop.body, Assign) if a.var.name.startswith("mean_vec")}
    assert any(len(sums(f)) == 4 and not collect(f.body, For) for f in collect(low, For)) is side_by_side
    lanes = get_target(spec).vector_lanes(f32)
    for channels in (3, lanes, 4 * lanes + 5, 9 * lanes):
        x = rng.standard_normal((2, pixels, channels), dtype=np.float32)
        y = np.empty((2, channels), np.float32)
        kernel(x, y)
        np.testing.assert_allclose(y, x.mean(1), rtol=1e-5, atol=1e-6)


def test_a_row_ending_in_axes_of_one_vectorizes_along_its_last_long_axis():
    """A mean kept as (C, 1, 1) per image (a global pool of an NHWC tensor read as NCHW) runs
    along its channels: vector loads of consecutive channels, not one channel at a time."""
    X = tensor_input("X", f32, [2, 5, 5, 40])
    pooled = compute("pooled", [2, 40, 1, 1], lambda n, c, h, w: reduce([5, 5], lambda y, x: X[n, y, x, c], "mean"))
    kernel, low = build(Task("pool_nchw", [X], [pooled]))
    assert collect(low, VectorLoad) and collect(low, VectorStore)
    x = rng.standard_normal((2, 5, 5, 40), dtype=np.float32)
    y = np.empty((2, 40, 1, 1), np.float32)
    kernel(x, y)
    np.testing.assert_allclose(y[:, :, 0, 0], x.mean((1, 2)), rtol=1e-5, atol=1e-6)
