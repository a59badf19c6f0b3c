"""A kernel's result written over an input that dies in it (a residual): one buffer for both,
numbers against numpy, and never where another element or a later kernel still reads it."""
from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings, strategies as st

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.tensor import Tensor, symbol

rng = np.random.default_rng(5)


def weight(n: int = 16) -> np.ndarray:
    return (rng.standard_normal((n, n)) / n).astype(np.float32)


def residual_block(x, w1: np.ndarray, w2: np.ndarray, w3: np.ndarray):
    h = ops.relu(ops.matmul(x, taskloom.asarray(w1)))
    z = ops.relu(ops.add(ops.matmul(ops.relu(ops.matmul(h, taskloom.asarray(w2))), taskloom.asarray(w1)), h))
    return ops.matmul(z, taskloom.asarray(w3))  # z is an intermediate: h dies where z is made


def relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0)


def residual_numpy(x: np.ndarray, w1: np.ndarray, w2: np.ndarray, w3: np.ndarray) -> np.ndarray:
    h = relu(x @ w1)
    return relu(relu(h @ w2) @ w1 + h) @ w3


def shared_params(source: str) -> list[str]:
    """The kernels whose signature drops ``restrict`` from a parameter (one it shares)."""
    return [m for m in re.findall(r"^void (k\d+\w*)\(([^)]*)\)", source, re.M) if "float* " in m[1]
            and any("__restrict__" not in p for p in m[1].split(", ") if "float*" in p)]


def test_a_residual_is_written_over_where_it_dies():
    w1, w2, w3 = weight(), weight(), weight()
    x = input((40, 16), name="x")
    compiled = taskloom.compile(Graph([x], [residual_block(x, w1, w2, w3)]))
    assert "1 written over an input" in compiled.meta["memory"]
    assert compiled.arena_bytes <= 2 * 40 * 16 * 4  # h and z in one buffer, the other intermediate in one
    (kernel,) = shared_params(open(compiled.meta["source"]).read())
    assert "fused3" in kernel[0]  # matmul + add + relu, its residual and its result not restrict
    xv = rng.standard_normal((40, 16)).astype(np.float32)
    np.testing.assert_allclose(compiled(xv), residual_numpy(xv, w1, w2, w3), rtol=1e-5, atol=1e-5)


def test_a_residual_read_again_later_keeps_its_buffer():
    w1, w2, w3 = weight(), weight(), weight()
    x = input((40, 16), name="x")
    h = ops.relu(ops.matmul(x, taskloom.asarray(w1)))
    z = ops.add(ops.matmul(h, taskloom.asarray(w2)), h)
    out = ops.add(ops.matmul(z, taskloom.asarray(w3)), h)  # h is read after z is made
    compiled = taskloom.compile(Graph([x], [out]))
    assert "written over" not in compiled.meta["memory"]
    xv = rng.standard_normal((40, 16)).astype(np.float32)
    hv = relu(xv @ w1)
    np.testing.assert_allclose(compiled(xv), (hv @ w2 + hv) @ w3 + hv, rtol=1e-5, atol=1e-5)


def test_a_symbolic_batch_shares_the_slot():
    w1, w2, w3 = weight(), weight(), weight()
    x = Tensor((symbol("rows"), 16), taskloom.ir.f32, name="x")
    compiled = taskloom.compile(Graph([x], [residual_block(x, w1, w2, w3)]))
    assert "1 written over an input" in compiled.meta["memory"]
    assert len(compiled.meta["dynamic"]["slots"]) == 2
    for rows in (1, 7, 130):
        xv = rng.standard_normal((rows, 16)).astype(np.float32)
        np.testing.assert_allclose(compiled(xv), residual_numpy(xv, w1, w2, w3), rtol=1e-5, atol=1e-5)


#: steps of a random program over 16 x 16 tensors: (name, arity, taskloom op, numpy op)
STEPS = [
    ("add", 2, ops.add, np.add),
    ("mul", 2, ops.mul, np.multiply),
    ("relu", 1, ops.relu, relu),
    ("transpose_add", 2, lambda a, b: ops.add(ops.transpose(a, 0, 1), b), lambda a, b: a.T + b),
    ("matmul", 2, ops.matmul, np.matmul),
    ("softmax", 1, lambda a: ops.softmax(a, axis=-1),
     lambda a: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    ("row_sum_add", 1, lambda a: ops.add(a, ops.sum(a, axis=1, keepdim=True)), lambda a: a + a.sum(1, keepdims=True)),
    # a product and a residual: the residual read at its own index in the product's epilogue
    ("residual", 2, lambda a, b: ops.relu(ops.add(ops.matmul(a, a), b)), lambda a, b: relu(a @ a + b)),
    ("residual_t", 2, lambda a, b: ops.add(ops.matmul(a, b), ops.transpose(b, 0, 1)), lambda a, b: a @ b + b.T),
]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(STEPS) - 1), st.integers(0, 3), st.integers(0, 3)),
                min_size=3, max_size=9))
def test_random_programs_match_numpy(program):
    """Programs whose steps read recent results at their own index, transposed, inside a
    reduction or by a product, some dying where they are read, and a product of the last
    one (so that it is an intermediate too): written over or not, the numbers are numpy's."""
    x, y = input((16, 16), name="x"), input((16, 16), name="y")
    xv, yv = (rng.standard_normal((16, 16)).astype(np.float32) / 4 for _ in range(2))
    values, arrays = [x, y], [xv, yv]
    for step, i, j in program:
        _, arity, op, ref = STEPS[step]
        args = [values[-1 - i % len(values)], values[-1 - j % len(values)]][:arity]
        refs = [arrays[-1 - i % len(values)], arrays[-1 - j % len(values)]][:arity]
        values.append(op(*args))
        arrays.append(np.asarray(ref(*refs), np.float32))
    compiled = taskloom.compile(Graph([x, y], [ops.matmul(values[-1], y)]))
    want = arrays[-1] @ yv
    np.testing.assert_allclose(compiled(xv, yv), want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))
