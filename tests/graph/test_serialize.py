"""Graphs saved to a file and loaded back: equal tasks, equal numbers, clear errors."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.errors import LoadError
from taskloom.graph import Graph, input, load_graph, save_graph

rng = np.random.default_rng(3)


def arr(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def cnn() -> Graph:
    x = input((2, 3, 10, 10), name="image")
    w, b = taskloom.asarray(arr(8, 3, 3, 3)), taskloom.asarray(arr(8))
    y = ops.relu(ops.conv2d(x, w, b, padding=1))
    y = ops.max_pool2d(y, 2)
    y = ops.softmax(ops.linear(ops.flatten(y, 1), taskloom.asarray(arr(4, 200))), axis=-1)
    m = ops.argmax(y, axis=-1)  # an int output and a reduction kind beside sum and max
    return Graph([x], [y, m])


def test_round_trip_keeps_tasks_constants_and_numbers(tmp_path):
    g = cnn()
    path = tmp_path / "cnn.tlg"
    save_graph(g, path)
    h = load_graph(path)
    assert str(h) == str(g)
    assert [n.task for n in h.nodes] == [n.task for n in g.nodes]  # structural equality of the IR
    for a, b in zip(g.constants, h.constants):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    x = arr(2, 3, 10, 10)
    want, got = taskloom.compile(g)(x), taskloom.compile(h)(x)
    for w, o in zip(want, got):
        np.testing.assert_array_equal(w, o)


def test_special_floats_and_transformer_ops_survive(tmp_path):
    x = input((3, 5), name="x")
    masked = ops.where(ops.greater(x, taskloom.asarray(np.float32(0.5))), x, taskloom.asarray(np.float32(-np.inf)))
    g = Graph([x], [ops.layer_norm(ops.softmax(masked, axis=-1), (5,))])
    save_graph(g, tmp_path / "g.tlg")
    h = load_graph(tmp_path / "g.tlg")
    a = arr(3, 5) + 1.0
    np.testing.assert_allclose(taskloom.compile(h)(a), taskloom.compile(g)(a), rtol=0, atol=0)


def test_not_a_graph_file(tmp_path):
    bad = tmp_path / "bad.tlg"
    bad.write_bytes(b"not a zip")
    with pytest.raises(LoadError, match="not a taskloom graph file"):
        load_graph(bad)
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(LoadError, match="not a taskloom graph file"):
        load_graph(tmp_path / "other.npz")
