"""Activations written out as arithmetic become one operator: GELU's tanh form (GPT-2) and
erf form (exported BERTs), in any operand order, in float32 and float16; what is not a GELU
is left alone."""
from __future__ import annotations

import math

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.compiler.passes import optimize, recognize_activations
from tests.compiler.passes.helpers import const, ops_of, random_inputs

C = math.sqrt(2.0 / math.pi)


def assert_computes_the_same(g: Graph, r: Graph, rtol: float, atol: float) -> None:
    """``r`` compiled gives what ``g`` gives compiled with no graph passes at all."""
    arrays = random_inputs(g)
    want = taskloom.compile(g, optimize=False)(*arrays)
    got = taskloom.compile(r)(*arrays)
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=rtol, atol=atol)

WRITTEN_OUT = {
    # GPT-2's NewGELUActivation, as torch traces it
    "tanh": (lambda x: ops.mul(ops.mul(x, 0.5), ops.add(ops.tanh(ops.mul(ops.add(x, ops.mul(ops.pow(x, 3.0), 0.044715)),
                                                                     C)), 1.0)), "tanh"),
    "tanh, the other order": (lambda x: ops.mul(ops.add(1.0, ops.tanh(ops.mul(C, ops.add(ops.mul(0.044715, ops.mul(
        x, ops.mul(x, x))), x)))), ops.mul(0.5, x)), "tanh"),
    # an exported BERT's erf GELU (Div, Erf, Add, Mul, Mul)
    "erf": (lambda x: ops.mul(ops.mul(x, ops.add(ops.erf(ops.div(x, math.sqrt(2.0))), 1.0)), 0.5), "none"),
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("form", list(WRITTEN_OUT))
def test_a_gelu_written_out_becomes_one_gelu(form, dtype):
    make, approximate = WRITTEN_OUT[form]
    x = input((3, 40), dtype, name="x")
    g = Graph([x], [make(x)])
    r = recognize_activations(g)
    assert ops_of(optimize(r)) == ["gelu"] and r.nodes[-1].task.attr("approximate") == approximate
    assert r.nodes[-1].inputs == [x]
    assert_computes_the_same(g, r, rtol=2e-3 if dtype == "float16" else 1e-5, atol=2e-3 if dtype == "float16" else 1e-6)


@pytest.mark.parametrize("make", [
    lambda x: ops.mul(x, ops.sigmoid(ops.mul(x, 1.702))),          # quick GELU: no tanh or erf
    lambda x: ops.mul(ops.mul(x, 0.5), ops.add(ops.tanh(x), 1.0)),  # tanh, but not GELU's
    lambda x: ops.mul(ops.mul(x, 0.5), ops.add(ops.erf(ops.div(x, 1.3)), 1.0)),  # erf, a wrong scale
], ids=["quick_gelu", "tanh_not_gelu", "erf_wrong_scale"])
def test_what_is_not_a_gelu_is_left_alone(make):
    x = input((3, 40), name="x")
    g = Graph([x], [make(x)])
    assert recognize_activations(g) is g


def test_a_gelu_of_a_product_becomes_its_epilogue():
    # GPT-2's MLP: the written-out GELU read the product twice, so it was a group of its
    # own; as one gelu it fuses into the product
    x = input((8, 32), name="x")
    h = ops.matmul(x, const(32, 64))
    g = Graph([x], [ops.matmul(WRITTEN_OUT["tanh"][0](h), const(64, 32))])
    before = [grp.ops for grp in fuse_graph(g)]
    r = optimize(g)
    after = [grp.ops for grp in fuse_graph(r)]
    assert len(before) > len(after) == 2 and after[0] == ["matmul", "gelu"]
    assert_computes_the_same(g, r, rtol=1e-4, atol=1e-4)


def test_a_gelu_whose_input_is_read_elsewhere_keeps_that_reader():
    x = input((4, 16), name="x")
    gelu = WRITTEN_OUT["erf"][0](x)
    g = Graph([x], [ops.add(gelu, ops.exp(x))])
    r = optimize(g)
    assert sorted(ops_of(r)) == ["add", "exp", "gelu"]
    assert_computes_the_same(g, r, rtol=1e-5, atol=1e-6)
    np.testing.assert_equal(len(r.inputs), 1)
