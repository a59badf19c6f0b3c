"""The matmul template reading a convolution's window in place (``a_window``): A's offset split
into a row's base, a run's offset and a step within the run, no window copied; numbers
against torch."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import taskloom
from taskloom import ops
from taskloom.compiler.passes import optimize
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.graph.tensor import Tensor, symbol
from taskloom.schedule.contraction import a_window_run, match_contraction
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
from taskloom.target import host_target

F = torch.nn.functional
rng = np.random.default_rng(11)
#: the comment at the head of the micro-kernel over a window read in place
IN_PLACE = "A read in place from the window"


def arr(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def contraction(x: Tensor, w: np.ndarray, **conv):
    (g,) = fuse_graph(optimize(Graph([x], [ops.conv2d(x, taskloom.asarray(w), layout="NHWC", **conv)])))
    return match_contraction(g.task)


@pytest.mark.parametrize("channels, kernel, stride, dilation, run", [
    (16, 3, 1, 1, 48),   # a window row's three pixels of 16 channels lie together
    (16, 3, 2, 1, 48),   # the stride moves the rows' bases only
    (16, 3, 1, 2, 16),   # dilated, a row's pixels lie apart: a run is one pixel's channels
    (3, 7, 2, 1, 21),    # a stem: seven pixels of 3 channels
    (32, 1, 1, 1, 0),    # a 1x1 window is a matrix, read in place by rows
])
def test_a_window_over_an_input_padded_ahead_splits_into_runs(channels, kernel, stride, dilation, run):
    x = input((2, 13, 13, channels), name="x")
    con = contraction(x, arr(kernel, kernel, channels, 8), stride=stride, dilation=dilation)
    assert a_window_run(con) == run


def test_a_window_that_tests_for_the_border_is_no_run():
    x = input((1, 9, 9, 16), name="x")
    assert a_window_run(contraction(x, arr(3, 3, 16, 8), padding=1)) == 0
    a, b = input((20, 64), name="a"), input((64, 8), name="b")
    (g,) = fuse_graph(Graph([a, b], [ops.matmul(a, b)]))
    assert a_window_run(match_contraction(g.task)) == 0


def reference(X: np.ndarray, W: np.ndarray, **conv) -> np.ndarray:
    out = F.conv2d(torch.from_numpy(X).permute(0, 3, 1, 2), torch.from_numpy(W).permute(3, 2, 0, 1), **conv)
    return out.permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("batch, size, channels, outs, kernel, stride, dilation", [
    (2, 12, 16, 24, 3, 1, 1),   # rows past a whole tile, a partial last column panel
    (1, 15, 32, 64, 3, 2, 1),
    (1, 11, 16, 16, 3, 1, 2),
    (2, 17, 3, 16, 7, 2, 1),
])
def test_window_kernels_match_torch(batch, size, channels, outs, kernel, stride, dilation):
    X, W, bias = arr(batch, size, size, channels), arr(kernel, kernel, channels, outs) / 4, arr(outs)
    x = input(X.shape, name="x")
    y = ops.relu(ops.conv2d(x, taskloom.asarray(W), taskloom.asarray(bias), stride=stride, dilation=dilation,
                            layout="NHWC"))
    compiled = taskloom.compile(Graph([x], [y]))
    want = np.maximum(reference(X, W, stride=stride, dilation=dilation) + bias, 0)
    np.testing.assert_allclose(compiled(X), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    source = open(compiled.meta["source"]).read()
    assert IN_PLACE in source and "pack A's" not in source


def test_a_window_with_a_symbolic_batch():
    x = Tensor((symbol("batch"), 10, 10, 16), taskloom.ir.f32, name="x")
    W = arr(3, 3, 16, 32) / 4
    compiled = taskloom.compile(Graph([x], [ops.conv2d(x, taskloom.asarray(W), layout="NHWC")]))
    assert IN_PLACE in open(compiled.meta["source"]).read()
    for batch in (1, 3, 7):
        X = arr(batch, 10, 10, 16)
        want = reference(X, W)
        np.testing.assert_allclose(compiled(X), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_the_window_is_packed_without_panels_packed_ahead_or_past_l2():
    """In place, all of K is one block: with B packed by the kernel (a block of all K) or a
    B panel larger than L2, the window is packed as before."""
    con = contraction(input((1, 10, 10, 16), name="x"), arr(3, 3, 16, 32))
    R, target = a_window_run(con), host_target()
    config = MatmulConfig(mr=6, nv=2, kc=96, mc=48, nc=64, pm=1, pn=1)

    def window(**kw):
        return matmul_program(con.shape, config, kw.pop("target", target), a_window=R, **kw).attr("a_window")
    assert R == 48 and window(prepacked_b=1) == 48 and window() == 0
    small = dataclasses.replace(target, l2_bytes=con.K * 2 * target.vector_lanes(taskloom.ir.f32) * 4 - 4)
    assert window(prepacked_b=1, target=small) == 0
