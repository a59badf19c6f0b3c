"""Folding inference batch norms into the conv2d or linear layer before them."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.compiler.passes import fold_batch_norm
from tests.compiler.passes.helpers import assert_same_results, const, ops_of


def variance(c: int) -> taskloom.Tensor:
    return taskloom.asarray(np.random.default_rng(1).uniform(0.5, 2.0, c).astype(np.float32))


@pytest.mark.parametrize("conv_bias, affine", [(True, True), (False, False)])
def test_conv2d_then_batch_norm_becomes_one_conv2d(conv_bias, affine):
    x = input((2, 4, 7, 7), name="x")
    kw = dict(stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=2)
    y = ops.conv2d(x, const(6, 2, 3, 3), const(6) if conv_bias else None, **kw)
    y = ops.batch_norm(y, const(6), variance(6), const(6) if affine else None, const(6) if affine else None,
                       eps=1e-3)
    g = Graph([x], [ops.relu(y)])
    folded = fold_batch_norm(g)
    assert ops_of(folded) == ["conv2d", "relu"]
    conv = folded.nodes[0]
    assert conv.task.attrs == g.nodes[0].task.attrs  # stride, padding, dilation and groups kept
    assert len(conv.inputs) == 3 and conv.inputs[0] is x
    assert_same_results(g, folded, rtol=1e-4, atol=1e-4)


def test_linear_then_feature_batch_norm_becomes_one_linear():
    x = input((5, 8), name="x")
    y = ops.batch_norm(ops.linear(x, const(3, 8)), const(3), variance(3), const(3), const(3))
    g = Graph([x], [y])
    folded = fold_batch_norm(g)
    assert ops_of(folded) == ["linear"]
    assert_same_results(g, folded, rtol=1e-4, atol=1e-4)


def test_folded_parameters_are_the_scaled_weight_and_shifted_bias():
    x = input((1, 1, 3, 3), name="x")
    w = taskloom.asarray(np.full((2, 1, 1, 1), 2.0, np.float32))
    b = taskloom.asarray(np.array([1.0, -1.0], np.float32))
    mean, var = taskloom.asarray(np.array([0.5, 0.0], np.float32)), taskloom.asarray(np.array([4.0, 1.0], np.float32))
    gamma, beta = taskloom.asarray(np.array([3.0, 1.0], np.float32)), taskloom.asarray(np.array([0.0, 5.0], np.float32))
    g = Graph([x], [ops.batch_norm(ops.conv2d(x, w, b), mean, var, gamma, beta, eps=0.0)])
    new_w, new_b = fold_batch_norm(g).nodes[0].inputs[1:]
    # scale = gamma / sqrt(var) = [1.5, 1]; weight * scale; (bias - mean) * scale + beta
    np.testing.assert_allclose(new_w.numpy().ravel(), [3.0, 2.0])
    np.testing.assert_allclose(new_b.numpy(), [0.75, 4.0])


def test_batch_norms_that_cannot_be_folded_stay():
    x = input((2, 3, 5, 5), name="x")
    stats = (const(4), variance(4), const(4), const(4))
    conv = ops.conv2d(x, const(4, 3, 3, 3))
    # the conv output is read by something else too
    g = Graph([x], [ops.add(ops.batch_norm(conv, *stats), conv)])
    assert fold_batch_norm(g) is g
    # the conv output is a graph output
    g = Graph([x], [ops.batch_norm(conv, *stats), conv])
    assert fold_batch_norm(g) is g
    # the statistics are not constants
    mean = input((4,), name="mean")
    g = Graph([x, mean], [ops.batch_norm(ops.conv2d(x, const(4, 3, 3, 3)), mean, *stats[1:])])
    assert fold_batch_norm(g) is g
    # the batch norm's axis 1 is not the layer's channel axis (a 3-d linear output)
    t = input((2, 4, 8), name="t")
    g = Graph([t], [ops.batch_norm(ops.linear(t, const(6, 8)), *stats)])
    assert fold_batch_norm(g) is g
    # no layer before it
    g = Graph([x], [ops.batch_norm(ops.relu(x), const(3), variance(3))])
    assert fold_batch_norm(g) is g
