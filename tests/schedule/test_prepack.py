"""Weights packed at compile time: B of a contraction evaluated from constants (a weight read
whole taken as a view of it), the kernel reading the panels, and the graph compiler passing
them in place of the weights."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.ir import expr as E
from taskloom.ir.compute import tensor_input
from taskloom.ir.dtypes import index_type
from taskloom.schedule.contraction import match_contraction
from taskloom.schedule.prepack import NotEvaluable, _read_where_it_lies, constant_b, evaluate
from taskloom.compiler.drivers import schedule_kernel
from taskloom.target import host_target

HOST = host_target()
rng = np.random.default_rng(0)


def task_of(y: taskloom.Tensor):
    return y.producer[0].task


def test_evaluate_has_c_integer_semantics_and_clamped_reads():
    i = E.Var("i", index_type)
    env = {i: np.arange(-5, 5)}
    np.testing.assert_array_equal(evaluate(i // 3, env, {}), np.trunc(np.arange(-5, 5) / 3))
    np.testing.assert_array_equal(evaluate(i % 3, env, {}), np.fmod(np.arange(-5, 5), 3))
    x = tensor_input("x", "float32", [4])
    data = np.arange(4, dtype=np.float32)
    inside = E.logical_and(0 <= i, i < 4)
    got = evaluate(E.select(inside, x[i], E.const(-1.0, x.dtype)), env, {x: data})
    np.testing.assert_array_equal(got, np.where((env[i] >= 0) & (env[i] < 4), np.clip(env[i], 0, 3), -1))
    with pytest.raises(NotEvaluable):
        evaluate(E.Call("exp", (x[i],)), env, {x: data})


def test_constant_b_of_linear_conv_and_matmul():
    x = input((3, 8), name="x")
    w = rng.standard_normal((5, 8)).astype(np.float32)
    con = match_contraction(task_of(ops.linear(x, w)))
    np.testing.assert_array_equal(constant_b(con, {1: w})[0], w.T)
    assert constant_b(con, {}) is None  # the weight is not known: packed by the kernel
    xh = input((1, 6, 6, 16), name="x")
    wh = rng.standard_normal((3, 3, 16, 4)).astype(np.float32)
    con = match_contraction(task_of(ops.conv2d(xh, wh, padding=1, layout="NHWC")))
    np.testing.assert_array_equal(constant_b(con, {1: wh})[0], wh.reshape(-1, 4))
    # a constant on the left is A, not B
    a = rng.standard_normal((4, 8)).astype(np.float32)
    con = match_contraction(task_of(ops.matmul(a, input((8, 32), name="y"))))
    assert constant_b(con, {0: a}) is None


def test_batched_b_keeps_its_batches_and_shared_b_one():
    wb = rng.standard_normal((2, 8, 20)).astype(np.float32)
    con = match_contraction(task_of(ops.matmul(input((2, 5, 8), name="x"), wb)))
    assert constant_b(con, {1: wb}).shape == (2, 8, 20)
    w = rng.standard_normal((8, 20)).astype(np.float32)
    con = match_contraction(task_of(ops.matmul(input((3, 5, 8), name="x"), w)))
    assert constant_b(con, {1: w}).shape == (1, 8, 20)


def test_scheduled_kernel_takes_panels_in_place_of_the_weight():
    x = input((7, 24), name="x")
    w, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    (group,) = fuse_graph(Graph([x], [ops.relu(ops.linear(x, w, b))]))
    task = group.task
    constants = {k: t.numpy() for k, t in enumerate(group.inputs) if t.is_concrete}
    s = schedule_kernel(task, HOST, constants=constants)
    assert s.fn.attr("prepacked_b") == 1
    weight = next(k for k, a in constants.items() if a.shape == (40, 24))
    kept = [k for k in range(len(task.inputs)) if k != weight]
    assert list(s.inputs[:-1]) == kept  # x and the bias stay inputs; the weight became panels
    assert isinstance(s.inputs[2], np.ndarray) and s.inputs[2].ndim == 4
    plain = schedule_kernel(task, HOST)
    assert plain.inputs == (0, 1, 2) and not plain.fn.attr("prepacked_b")


@pytest.mark.parametrize("batch", [1, 3])
def test_compiled_graph_with_prepacked_weights_matches_and_round_trips(batch, tmp_path):
    x = input((batch, 9, 24), name="x")
    w1, w2 = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 17)).astype(np.float32)
    h = ops.relu(ops.linear(x, w1, np.ones(40, np.float32)))
    y = ops.add(ops.matmul(ops.linear(h, w1[:, :24].T.copy()), w2), 1.0)
    compiled = taskloom.compile(Graph([x], [y]))
    assert sum("B prepacked" in k["schedule"] for k in compiled.meta["kernels"]) == 3
    # the weights themselves are gone: only their panels (and the bias) are constants
    assert not any(c.shape in ((40, 24), (24, 17), (24, 40)) for c in compiled.constants)
    data = rng.standard_normal((batch, 9, 24)).astype(np.float32)
    h_ref = np.maximum(data @ w1.T + 1, 0)
    want = (h_ref @ w1[:, :24]) @ w2 + 1
    np.testing.assert_allclose(compiled(data), want, rtol=1e-4, atol=1e-3)
    compiled.save(tmp_path / "m.taskloom")
    np.testing.assert_array_equal(taskloom.load(str(tmp_path / "m.taskloom"))(data), compiled(data))


def test_weights_larger_than_the_caches_are_prefetched():
    """A graph whose weights outgrow the cores' L2 caches together streams them from memory
    on every call: its prepacked kernels prefetch the next panel, with the same numbers; the
    same graph whose weights fit gets no prefetches."""
    import dataclasses
    x = input((1, 64, 96), name="x")
    w1, w2 = rng.standard_normal((96, 96)).astype(np.float32), rng.standard_normal((96, 96)).astype(np.float32)
    y = ops.linear(ops.relu(ops.linear(x, w1)), w2)
    data = rng.standard_normal((1, 64, 96)).astype(np.float32)
    want = np.maximum(data @ w1.T, 0) @ w2.T
    weights = w1.nbytes + w2.nbytes
    small_l2 = dataclasses.replace(HOST, l2_bytes=weights // (2 * HOST.num_cores))
    for target, streams in ((small_l2, True), (dataclasses.replace(HOST, l2_bytes=weights), False)):
        compiled = taskloom.compile(Graph([x], [y]), target=target)
        schedules = [k["schedule"] for k in compiled.meta["kernels"]]
        assert all(("B prepacked and prefetched" in s) == streams for s in schedules), schedules
        assert ("__builtin_prefetch" in open(compiled.meta["source"]).read()) == streams
        np.testing.assert_allclose(compiled(data), want, rtol=1e-4, atol=1e-3)


def _b_of(make, x_shape):
    """constant_b of the one group ``make(x)`` fuses into, B evaluated point by point, and
    whether constant_b read it as a view."""
    x = input(x_shape, "float32", name="x")
    [group] = fuse_graph(Graph([x], [make(x)]))
    con = match_contraction(group.task)
    constants = {k: t.numpy() for k, t in enumerate(group.inputs) if t.is_concrete}
    arrays = {t: constants[k] for k, t in enumerate(con.task.inputs) if k in constants}
    pb = con.batch if con.vb in E.free_vars(con.b) else 1
    b, k, n = np.ix_(np.arange(pb), np.arange(con.K), np.arange(con.N))
    pointwise = np.broadcast_to(evaluate(con.b, {con.vb: b, con.vk: k, con.vn: n}, arrays),
                                (pb, con.K, con.N))
    viewed = _read_where_it_lies(con, arrays) is not None
    return constant_b(con, constants), pointwise, viewed


def test_a_weight_read_whole_is_a_view_of_it():
    w = rng.standard_normal((6, 10)).astype(np.float32)
    wb = rng.standard_normal((2, 6, 10)).astype(np.float32)
    cases = [(lambda x: ops.matmul(x, w), (3, 6), w[None]),  # W[k, n]
             (lambda x: ops.linear(x, w.T.copy()), (3, 6), w[None]),  # W[n, k], as torch's Linear keeps it
             (lambda x: ops.matmul(x, wb), (2, 3, 6), wb)]  # W[b, k, n]
    for make, x_shape, want in cases:
        b, pointwise, viewed = _b_of(make, x_shape)
        assert viewed and b.dtype == np.float32 and b.flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(b, want)
        np.testing.assert_array_equal(b, pointwise)


def test_a_weight_read_by_computed_indices_is_evaluated():
    w = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)  # NHWC: (KH, KW, C, OC), K is (kh, kw, c)
    b, pointwise, viewed = _b_of(lambda x: ops.conv2d(x, w, layout="NHWC"), (1, 6, 6, 2))
    assert not viewed
    np.testing.assert_array_equal(b, pointwise)
