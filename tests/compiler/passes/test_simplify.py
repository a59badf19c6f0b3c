"""Algebraic simplification: identity operators, identity arithmetic, reshape and
permutation chains."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.compiler.passes import simplify
from tests.compiler.passes.helpers import assert_same_results, filled, ops_of


def test_identity_shape_operators_are_removed():
    x = input((2, 3, 4), name="x")
    h = ops.reshape(x, (2, 3, 4))
    h = ops.permute(h, (0, 1, 2))
    h = ops.transpose(h, 1, 1)
    h = ops.expand(h, (2, -1, 4))
    h = ops.broadcast_to(ops.squeeze(ops.relu(h)), (2, 3, 4))
    g = Graph([x], [h])
    assert ops_of(g) == ["reshape", "permute", "transpose", "expand", "relu", "squeeze", "broadcast_to"]
    s = simplify(g)
    assert ops_of(s) == ["relu"] and s.nodes[0].inputs == [x]
    assert_same_results(g, s)


@pytest.mark.parametrize("make", [
    lambda x, c1, c0: ops.mul(x, c1), lambda x, c1, c0: ops.mul(c1, x),
    lambda x, c1, c0: ops.add(x, c0), lambda x, c1, c0: ops.add(c0, x),
    lambda x, c1, c0: ops.sub(x, c0), lambda x, c1, c0: ops.div(x, c1),
    lambda x, c1, c0: ops.mul(x, 1.0), lambda x, c1, c0: ops.add(x, 0.0),
], ids=["x*1", "1*x", "x+0", "0+x", "x-0", "x/1", "x*1.0", "x+0.0"])
def test_identity_arithmetic_is_removed(make):
    x = input((3, 4), name="x")
    y = ops.exp(make(ops.relu(x), filled((4,), 1.0), filled((1, 4), 0.0)))
    g = Graph([x], [y])
    s = simplify(g)
    assert ops_of(s) == ["relu", "exp"]
    assert_same_results(g, s)


def test_arithmetic_that_is_no_identity_stays():
    x = input((3, 4), name="x")
    i = input((3, 4), "int32", name="i")
    outs = [
        ops.mul(x, filled((2, 3, 4), 1.0)),        # broadcasts x to a larger shape
        ops.sub(filled((4,), 0.0), x),             # 0 - x is -x
        ops.div(filled((4,), 1.0), x),             # 1 / x
        ops.mul(x, taskloom.asarray(np.array([1, 1, 1, 2], np.float32))),  # not all ones
        ops.add(i, filled((4,), 0.0)),             # int32 + float32 is float32
        ops.mul(x, filled((4,), 0.0)),             # x * 0 is not 0 for inf and nan
        ops.mul(x, x),
    ]
    g = Graph([x, i], outs)
    assert simplify(g) is g


def test_reshape_chains_become_one_reshape():
    x = input((2, 3, 4), name="x")
    h = ops.unsqueeze(ops.flatten(ops.reshape(x, (6, 4)), 0), 0)   # (1, 24)
    g = Graph([x], [ops.relu(h)])
    s = simplify(g)
    assert ops_of(s) == ["reshape", "relu"]
    assert s.nodes[0].inputs == [x] and s.nodes[0].task.attr("shape") == (1, 24)
    assert_same_results(g, s)


def test_a_reshape_chain_back_to_the_input_shape_disappears():
    x = input((2, 3, 4), name="x")
    g = Graph([x], [ops.exp(ops.reshape(ops.flatten(x, 1), (2, 3, 4)))])
    s = simplify(g)
    assert ops_of(s) == ["exp"]
    assert_same_results(g, s)


def test_permutation_chains_are_composed():
    x = input((2, 3, 4), name="x")
    y = ops.permute(ops.transpose(x, 0, 2), (1, 2, 0))   # (4,3,2) then -> (3, 2, 4)
    g = Graph([x], [ops.relu(y)])
    s = simplify(g)
    assert ops_of(s) == ["permute", "relu"] and s.nodes[0].inputs == [x]
    assert s.nodes[0].task.attr("dims") == (1, 0, 2)
    assert_same_results(g, s)


def test_permutations_that_undo_each_other_disappear():
    x = input((2, 3, 4), name="x")
    y = ops.permute(ops.transpose(ops.permute(x, (2, 0, 1)), 0, 1), (0, 2, 1))
    g = Graph([x], [ops.sigmoid(y)])
    s = simplify(g)
    assert ops_of(s) == ["sigmoid"] and s.nodes[0].inputs == [x]
    assert_same_results(g, s)


def test_a_graph_can_simplify_to_its_input():
    x = input((3,), name="x")
    g = Graph([x], [ops.mul(ops.reshape(x, (3,)), filled((3,), 1.0))])
    s = simplify(g)
    assert s.nodes == [] and s.outputs == [x]
    assert_same_results(g, s)
