"""Products of one input by several constant factors merge into one product and slices of
it: the numbers stay, attention still fuses, and what cannot merge is left alone."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.compiler.passes.sibling_products import merge_sibling_products
from taskloom.graph import Graph, input
from tests.compiler.passes.helpers import ops_of, random_inputs

rng = np.random.default_rng(0)


def const(*shape: int) -> taskloom.Tensor:
    return taskloom.asarray(rng.standard_normal(shape).astype(np.float32))


def assert_computes_the_same(g: Graph, r: Graph) -> None:
    arrays = random_inputs(g)
    want = taskloom.compile(g, optimize=False)(*arrays)
    got = taskloom.compile(r, optimize=False)(*arrays)
    for w, x in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        np.testing.assert_allclose(x, w, rtol=1e-5, atol=1e-5)


def test_three_products_of_one_input_become_one_and_its_slices():
    x = input((2, 10, 64), name="x")
    q, k, v = (ops.matmul(ops.reshape(x, (20, 64)), const(64, 32)) for _ in range(3))
    g = Graph([x], [ops.relu(q), ops.exp(k), v])
    r = merge_sibling_products(taskloom.compiler.passes.optimize(g))
    assert ops_of(r).count("matmul") == 1 and ops_of(r).count("slice") == 3
    [product] = [n for n in r.nodes if n.op == "matmul"]
    assert product.outputs[0].shape == (20, 96)
    assert_computes_the_same(g, r)


def test_linears_with_biases_merge_weights_and_biases():
    x = input((5, 48), name="x")
    ys = [ops.linear(x, const(n, 48), const(n)) for n in (16, 32, 16)]
    g = Graph([x], ys)
    r = merge_sibling_products(g)
    [linear] = [n for n in r.nodes if n.op == "linear"]
    assert linear.inputs[1].shape == (64, 48) and linear.inputs[2].shape == (64,)
    assert_computes_the_same(g, r)


@pytest.mark.parametrize("make", [
    lambda x, y: [ops.matmul(x, const(64, 32)), ops.matmul(y, const(64, 32))],         # different inputs
    lambda x, y: [ops.matmul(x, const(64, 32))],                                        # one product alone
    lambda x, y: [ops.matmul(x, const(64, 24)), ops.matmul(x, const(64, 24))],         # slices off 16 bytes
    lambda x, y: [ops.linear(x, const(32, 64), const(32)), ops.linear(x, const(32, 64))],  # a bias and none
    lambda x, y: [ops.matmul(x, ops.transpose(y, 0, 1)), ops.matmul(x, const(64, 32))],  # not a constant
], ids=["two_inputs", "alone", "unaligned", "bias_and_none", "data_factor"])
def test_what_cannot_merge_is_left_alone(make):
    x, y = input((8, 64), name="x"), input((8, 64), name="y")
    g = Graph([x, y], make(x, y))
    assert merge_sibling_products(g) is g


def test_bert_s_projections_merge_and_its_attention_still_fuses():
    torch = pytest.importorskip("torch")
    from taskloom.bench.zoo import build, inputs
    net, example = build("bert", 1, 8)
    xs = [a.numpy() for a in inputs("bert", 1, 8)]
    compiled = taskloom.compile(net, example)
    kernels = compiled.meta["kernels"]
    attention = [k for k in kernels if "attention" in k["ops"]]
    assert attention and all(k["ops"].count("slice") == 3 for k in attention)  # q, k, v: slices of one product
    with torch.no_grad():
        want = net(*[torch.from_numpy(x) for x in xs])
    want = (want if isinstance(want, torch.Tensor) else want[0]).numpy()
    got = compiled(*xs)
    np.testing.assert_allclose(np.asarray(got if not isinstance(got, tuple) else got[0]), want, rtol=1e-4, atol=1e-4)
