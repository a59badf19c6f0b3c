"""Contractions read off fused tasks, and their prologues and epilogues added to the matmul
template after scheduling: numbers against torch, one kernel per group, no intermediates."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.compiler.passes import optimize
from taskloom.schedule.contraction import match_contraction
from taskloom.compiler.drivers import schedule
from taskloom.target import host_target

rng = np.random.default_rng(7)
F = torch.nn.functional


def arr(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def const(a):
    return taskloom.asarray(a)


def groups(graph):
    return fuse_graph(optimize(graph))


def compiled(graph):
    c = taskloom.compile(graph)
    return c, [k["ops"] for k in c.meta["kernels"]]


def check(graph, inputs, ref, n_kernels=1, rtol=1e-4):
    c, kernels = compiled(graph)
    out = c(*inputs)
    out = out[0] if isinstance(out, (list, tuple)) else out
    np.testing.assert_allclose(np.asarray(out), ref, rtol=rtol, atol=rtol * max(1.0, float(np.abs(ref).max())))
    assert len(kernels) == n_kernels, kernels
    return c


def template_kernels(c):
    source = open(c.meta["source"]).read()
    # a C function holding the template's micro-kernel (one or several, for edge tiles)
    return sum("the micro-kernel: MR x NV vector FMAs per k" in f for f in source.split("\nvoid "))


# ----------------------------------------------------------------------------- matching

def test_matmul_linear_and_batch_matmul_read_as_contractions():
    x, y = input((6, 40, 24), name="x"), input((24, 30), name="y")
    (g,) = groups(Graph([x, y], [ops.matmul(x, y)]))
    con = match_contraction(g.task)
    assert con.shape == (1, 240, 30, 24)  # a batch that only A has is more rows
    q, k = input((3, 8, 16), name="q"), input((3, 12, 16), name="k")
    (g,) = groups(Graph([q, k], [ops.batch_matmul(q, k, transpose_b=True)]))
    assert match_contraction(g.task).shape == (3, 8, 12, 16)
    x = input((2, 5, 64), name="x")
    (g,) = groups(Graph([x], [ops.linear(x, const(arr(48, 64)), const(arr(48)))]))
    assert match_contraction(g.task).shape == (1, 10, 48, 64)


def test_convolution_reads_as_implicit_gemm():
    x = input((2, 8, 10, 10), name="x")
    (g,) = groups(Graph([x], [ops.conv2d(x, const(arr(16, 8, 3, 3)), stride=2, padding=1)]))
    con = match_contraction(g.task)
    # per image: (out channels) x (output pixels), K = channels x window
    assert con.shape == (2, 16, 25, 72)


def test_what_is_not_a_contraction():
    r, y = input((8, 9), name="r"), input((8, 9), name="y")
    rowmax = ops.max(r, axis=1)
    sq = ops.sum(ops.mul(y, y), axis=1)  # both factors read the same axes: no columns
    for graph in (Graph([r], [rowmax]), Graph([y], [sq])):
        for grp in groups(graph):
            assert match_contraction(grp.task) is None


def test_depthwise_convolution_is_left_to_the_rule_based_scheduler():
    x = input((4, 8, 10, 10), name="x")
    (g,) = groups(Graph([x], [ops.conv2d(x, const(arr(8, 1, 3, 3)), padding=1, groups=8)]))
    con = match_contraction(g.task)
    assert con.shape == (32, 1, 100, 9)  # one row per (image, channel): no register tile to fill
    assert schedule(g.task, host_target()).attr("template") is None


# ----------------------------------------------------------------------------- fusion

def test_matmul_bias_gelu_is_one_template_kernel():
    a, b, bias = arr(100, 70), arr(70, 45), arr(45)
    x, y = input((100, 70), name="x"), input((70, 45), name="w")
    out = ops.gelu(ops.add(ops.matmul(x, y), const(bias)))
    ref = F.gelu(torch.from_numpy(a) @ torch.from_numpy(b) + torch.from_numpy(bias)).numpy()
    c = check(Graph([x, y], [out]), [a, b], ref)
    assert template_kernels(c) == 1


def test_conv_bias_relu_with_img2col_prologue():
    X, W, B = arr(2, 8, 12, 12), arr(16, 8, 3, 3, scale=0.3), arr(16)
    x = input((2, 8, 12, 12), name="img")
    out = ops.relu(ops.conv2d(x, const(W), const(B), padding=1))
    ref = torch.relu(F.conv2d(torch.from_numpy(X), torch.from_numpy(W), torch.from_numpy(B), padding=1)).numpy()
    c = check(Graph([x], [out]), [X], ref)
    assert template_kernels(c) == 1
    # the window is read from the image in place: no buffer the size of img2col
    assert "Bp[" in open(c.meta["source"]).read() and c.meta["arena_bytes"] == 0


def test_strided_conv_batch_one():
    X, W = arr(1, 3, 17, 17), arr(8, 3, 5, 5, scale=0.3)
    x = input((1, 3, 17, 17), name="img")
    ref = F.conv2d(torch.from_numpy(X), torch.from_numpy(W), stride=2, padding=2).numpy()
    check(Graph([x], [ops.conv2d(x, const(W), stride=2, padding=2)]), [X], ref)


def test_transpose_prologue():
    a, b = arr(64, 40), arr(64, 30)
    x, y = input((64, 40), name="x"), input((64, 30), name="y")
    c = check(Graph([x, y], [ops.matmul(ops.transpose(x, 0, 1), y)]), [a, b], a.T @ b)
    assert template_kernels(c) == 1


def test_residual_add_epilogue():
    a, b, r = arr(32, 48), arr(48, 64), arr(32, 64)
    x, y, z = input((32, 48), name="x"), input((48, 64), name="y"), input((32, 64), name="r")
    check(Graph([x, y, z], [ops.add(ops.matmul(x, y), z)]), [a, b, r], a @ b + r)


def test_reshape_epilogue_then_transpose():
    a, b = arr(32, 48), arr(48, 64)
    x, y = input((32, 48), name="x"), input((48, 64), name="y")
    out = ops.transpose(ops.reshape(ops.matmul(x, y), (32, 4, 16)), 0, 1)
    ref = (a @ b).reshape(32, 4, 16).transpose(1, 0, 2)
    c, kernels = compiled(Graph([x, y], [out]))
    np.testing.assert_allclose(c(a, b)[0] if isinstance(c(a, b), (list, tuple)) else c(a, b), ref, rtol=1e-4, atol=1e-4)
    assert ["matmul", "reshape"] in kernels  # the reshape keeps the order: fused; the transpose does not


def test_attention_scores_scale_and_mask():
    q, k = arr(4, 20, 16), arr(4, 24, 16)
    mask = np.triu(np.full((20, 24), -1e9, np.float32), 1)
    x, y = input((4, 20, 16), name="q"), input((4, 24, 16), name="k")
    out = ops.add(ops.mul(ops.batch_matmul(x, y, transpose_b=True), 0.25), const(mask))
    check(Graph([x, y], [out]), [q, k], (q @ k.transpose(0, 2, 1)) * 0.25 + mask)


def test_epilogue_that_does_not_vectorize_runs_lane_by_lane():
    a, b, z = arr(20, 30), arr(30, 40), arr(40, 20)
    x, y, t = input((20, 30), name="x"), input((30, 40), name="y"), input((40, 20), name="z")
    out = ops.add(ops.matmul(x, y), ops.transpose(t, 0, 1))  # reads z down a column
    c = check(Graph([x, y, t], [out]), [a, b, z], a @ b + z.T)
    assert "element by element" in open(c.meta["source"]).read()


def test_matrix_vector_products_stay_rule_based():
    x = input((64, 100), name="x")
    (g,) = groups(Graph([x], [ops.matmul(x, const(arr(100)))]))
    fn = schedule(g.task, host_target())
    assert fn.attr("template") is None


def test_a_few_rows_read_b_in_place_with_its_prologue():
    """One row of register tiles reads B where it lies, and B's prologue comes along,
    vectorized (a scale, a scale and shift: their masked tails go through a vector of
    scratch); a transposed B is gathered, so it is packed."""
    for M in (1, 3):
        a, b = arr(M, 45), arr(45, 37)
        x, y = input((M, 45), name="x"), input((45, 37), name="w")
        c = check(Graph([x, y], [ops.matmul(x, y)]), [a, b], a @ b)
        assert template_kernels(c) == 1 and "pack B's" not in open(c.meta["source"]).read()
    a, b, bt = arr(3, 45), arr(45, 37, scale=0.5), arr(37, 45)
    x, y, t = input((3, 45), name="x"), input((45, 37), name="w"), input((37, 45), name="wt")
    for out, ref in ((ops.matmul(x, ops.mul(y, 0.5)), a @ (0.5 * b)),
                     (ops.matmul(x, ops.add(ops.mul(y, 2.0), const(np.float32(1.0)))), a @ (2 * b + 1))):
        c = check(Graph([x, y], [out]), [a, b], ref)
        assert template_kernels(c) == 1
    c = check(Graph([x, t], [ops.matmul(x, ops.transpose(t, 0, 1))]), [a, bt], a @ bt.T)
    assert template_kernels(c) == 1 and "pack B's" in open(c.meta["source"]).read()


def test_a_plain_a_is_read_in_place_and_a_computed_one_packed():
    """A matrix, or a 1x1 convolution's NHWC input, is read where it lies (rows K apart, or
    two pixels' channels apart with stride 2); a transposed or computed A, or a 3x3 window,
    is packed, and the numbers agree either way."""
    from taskloom.schedule.contraction import a_row_stride
    from taskloom.schedule.cpu import pack_kinds

    def a_stride_of(group):
        con = match_contraction(group.task)
        return a_row_stride(con, pack_kinds(con, host_target())[0])
    a, w, at = arr(50, 64), arr(64, 40), arr(64, 50)
    x, y, xt = input((50, 64), name="x"), input((64, 40), name="w"), input((64, 50), name="xt")
    for ins, out, arrays, ref, stride in (([x, y], ops.matmul(x, y), [a, w], a @ w, 64),
                                          ([x, y], ops.matmul(ops.relu(x), y), [a, w], np.maximum(a, 0) @ w, 0),
                                          ([xt, y], ops.matmul(ops.transpose(xt, 0, 1), y), [at, w], at.T @ w, 0)):
        (g,) = groups(Graph(ins, [out]))
        assert a_stride_of(g) == stride
        c = check(Graph(ins, [out]), arrays, ref)
        assert template_kernels(c) == 1
        assert ("pack A's" in open(c.meta["source"]).read()) is (stride == 0)
    img, X, W = input((1, 9, 9, 16), name="img"), arr(1, 9, 9, 16), arr(1, 1, 16, 24)
    for st, stride in ((1, 16), (2, 32)):
        graph = Graph([img], [ops.conv2d(img, const(W), stride=st, layout="NHWC")])
        (g,) = groups(graph)
        assert a_stride_of(g) == stride
        ref = F.conv2d(torch.from_numpy(X).permute(0, 3, 1, 2), torch.from_numpy(W).permute(3, 2, 0, 1), stride=st)
        check(graph, [X], ref.permute(0, 2, 3, 1).numpy())
    # a 3x3 window copies by vectors of channels, but its offset splits k into taps: packed
    (g,) = groups(Graph([img], [ops.conv2d(img, const(arr(3, 3, 16, 24)), layout="NHWC")]))
    assert a_stride_of(g) == 0


def test_a_vector_times_a_matrix_takes_the_template_unless_b_is_transposed():
    """One row times a matrix read in order, or computed by vectors from one: the template's
    one-row tiles read B's rows; times a transposed matrix it is a reduction along rows, left
    to the rule-based scheduler."""
    x, y, t = input((1, 64), name="x"), input((64, 48), name="w"), input((48, 64), name="wt")
    (g,) = groups(Graph([x, y], [ops.matmul(x, y)]))
    assert schedule(g.task, host_target()).attr("template") == "matmul_cpu"
    (g,) = groups(Graph([x, y], [ops.matmul(x, ops.relu(y))]))
    assert schedule(g.task, host_target()).attr("template") == "matmul_cpu"
    a, b = arr(1, 64), arr(64, 48)
    check(Graph([x, y], [ops.matmul(x, ops.relu(y))]), [a, b], a @ np.maximum(b, 0))
    (g,) = groups(Graph([x, t], [ops.matmul(x, ops.transpose(t, 0, 1))]))
    assert schedule(g.task, host_target()).attr("template") is None


def test_packing_copies_take_the_prologue_vectorized_or_lane_by_lane():
    """B's panels are packed by vector copies: an input read in order stays one masked load; a
    scaled input vectorizes with its tail zeroed; the img2col window goes lane by lane."""
    a, b = arr(37, 29), arr(29, 53)
    x, y = input((37, 29), name="x"), input((29, 53), name="w")
    plain = open(check(Graph([x, y], [ops.matmul(x, y)]), [a, b], a @ b).meta["source"]).read()
    assert "_maskz_loadu_ps" in plain or "_maskload_ps" in plain
    assert "the prologue element by element" not in plain
    scaled = check(Graph([x, y], [ops.matmul(x, ops.add(y, const(np.float32(1.0))))]), [a, b], a @ (b + 1))
    assert "the prologue element by element" not in open(scaled.meta["source"]).read()
    X, W = arr(1, 4, 9, 9), arr(6, 4, 3, 3, scale=0.3)
    img = input((1, 4, 9, 9), name="img")
    ref = F.conv2d(torch.from_numpy(X), torch.from_numpy(W), padding=1).numpy()
    conv = check(Graph([img], [ops.conv2d(img, const(W), padding=1)]), [X], ref)
    assert "the prologue element by element" in open(conv.meta["source"]).read()


@pytest.mark.parametrize("kc, by_runs", [(80, True), (32, False)])
def test_a_stem_window_copies_a_row_of_pixels_at_a_time(kc, by_runs):
    """An NHWC window of 3 channels is contiguous along a row of its pixels (5 x 3 = 15
    elements of K): packed by runs of 15 when every K block starts at a run's start, by
    element otherwise; the numbers agree either way."""
    from taskloom.schedule.cpu import a_run_length, pack_kinds
    from taskloom.schedule.post_fusion import fuse_contraction
    from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
    img, w = input((1, 11, 11, 3), name="img"), input((5, 5, 3, 24), name="w")
    (g,) = groups(Graph([img, w], [ops.conv2d(img, w, stride=2, layout="NHWC")]))
    con = match_contraction(g.task)
    lanes = host_target().vector_lanes(taskloom.ir.f32)
    kind = pack_kinds(con, host_target())[0]
    assert con.shape == (1, 16, 24, 75) and kind == "run15" and a_run_length(kind) == 15
    config = MatmulConfig(mr=3, nv=1, kc=kc, mc=6, nc=lanes, pm=1, pn=1)
    fn = fuse_contraction(matmul_program(con.shape, config, host_target(), name="fused", a_stride=0, a_run=15), con)
    assert (fn.attr("pack_a_run") == 15) is by_runs
    X, W = arr(1, 11, 11, 3), arr(5, 5, 3, 24)
    out = np.full(16 * 24, np.nan, dtype=np.float32)
    taskloom.build(fn)["fused"](X.ravel(), W.ravel(), out)
    ref = F.conv2d(torch.from_numpy(X).permute(0, 3, 1, 2), torch.from_numpy(W).permute(3, 2, 0, 1), stride=2)
    np.testing.assert_allclose(out.reshape(1, 4, 4, 24), ref.permute(0, 2, 3, 1).numpy(), rtol=1e-4, atol=1e-4)


def test_the_tile_ahead_asks_for_the_residual_its_epilogue_reads():
    """An epilogue reading a residual row by row gets its lines asked for a tile ahead; a
    bias, the same for every row, does not."""
    from taskloom.schedule.cpu import epilogue_reads_rows
    x, r = input((40, 64), name="x"), input((40, 48), name="residual")
    W, bias = arr(64, 48), arr(48)
    with_residual = Graph([x, r], [ops.relu(ops.add(ops.matmul(x, const(W)), r))])
    with_bias = Graph([x], [ops.relu(ops.add(ops.matmul(x, const(W)), const(bias)))])
    X, R = arr(40, 64), arr(40, 48)
    for graph, reads_rows, inputs, ref in ((with_residual, True, [X, R], np.maximum(X @ W + R, 0)),
                                            (with_bias, False, [X], np.maximum(X @ W + bias, 0))):
        (g,) = groups(graph)
        assert epilogue_reads_rows(match_contraction(g.task)) is reads_rows
        source = open(check(graph, inputs, ref).meta["source"]).read()
        assert ("__builtin_prefetch(" in source) is reads_rows  # (B, small, is not prefetched)
