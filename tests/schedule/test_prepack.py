"""B of a product with a constant weight, evaluated for packing: a weight read whole is a
view of the array (no gather into new pages), equal to the point-by-point evaluation."""
from __future__ import annotations

import numpy as np

from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.ir import expr as E
from taskloom.schedule import prepack
from taskloom.schedule.contraction import match_contraction

rng = np.random.default_rng(0)


def _b(make, x_shape):
    """constant_b of the one group ``make(x)`` fuses into, B evaluated point by point, and
    whether constant_b read it as a view."""
    x = input(x_shape, "float32", name="x")
    [group] = fuse_graph(Graph([x], [make(x)]))
    con = match_contraction(group.task)
    constants = {k: t.numpy() for k, t in enumerate(group.inputs) if t.is_concrete}
    arrays = {t: constants[k] for k, t in enumerate(con.task.inputs) if k in constants}
    pb = con.batch if con.vb in E.free_vars(con.b) else 1
    b, k, n = np.ix_(np.arange(pb), np.arange(con.K), np.arange(con.N))
    pointwise = np.broadcast_to(prepack.evaluate(con.b, {con.vb: b, con.vk: k, con.vn: n}, arrays),
                                (pb, con.K, con.N))
    viewed = prepack._read_where_it_lies(con, arrays) is not None
    return prepack.constant_b(con, constants), pointwise, viewed


def test_a_weight_read_whole_is_a_view_of_it():
    w = rng.standard_normal((6, 10)).astype(np.float32)
    wb = rng.standard_normal((2, 6, 10)).astype(np.float32)
    cases = [(lambda x: ops.matmul(x, w), (3, 6), w[None]),  # W[k, n]
             (lambda x: ops.linear(x, w.T.copy()), (3, 6), w[None]),  # W[n, k], as torch's Linear keeps it
             (lambda x: ops.matmul(x, wb), (2, 3, 6), wb)]  # W[b, k, n]
    for make, x_shape, want in cases:
        b, pointwise, viewed = _b(make, x_shape)
        assert viewed and b.dtype == np.float32 and b.flags["C_CONTIGUOUS"]
        np.testing.assert_array_equal(b, want)
        np.testing.assert_array_equal(b, pointwise)


def test_a_weight_read_by_computed_indices_is_evaluated():
    w = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)  # NHWC: (KH, KW, C, OC), K is (kh, kw, c)
    b, pointwise, viewed = _b(lambda x: ops.conv2d(x, w, layout="NHWC"), (1, 6, 6, 2))
    assert not viewed
    np.testing.assert_array_equal(b, pointwise)
