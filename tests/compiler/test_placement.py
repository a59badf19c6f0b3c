"""Results written in place into a padded or joined tensor: the producers' kernels store into
the block, the pad only fills its border, a concatenation runs no kernel; numbers against
torch and numpy, and no placement where a block's input is read elsewhere."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import taskloom
from taskloom import ops
from taskloom.compiler.placement import Block, write_into
from taskloom.compiler.drivers import schedule_kernel
from taskloom.graph import Graph, input
from taskloom.graph.tensor import Tensor, symbol
from taskloom.ir import expr as E
from taskloom.ir.compute import Task, compute
from taskloom.ir.printer import astext
from taskloom.target import get_target

F = torch.nn.functional
rng = np.random.default_rng(11)


def conv_weight(o: int, c: int, k: int) -> np.ndarray:
    return (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)


def kernel_ops(compiled) -> list[list[str]]:
    return [k["ops"] for k in compiled.meta["kernels"]]


def test_branches_write_into_a_padded_concatenation():
    """Inception's pattern: two convolutions joined along the channels, padded for the 3x3
    convolution reading the result: both write into the padded tensor, which only gets its
    border filled, and a 3x3 branch writes into the pad ahead of it."""
    w1, w2, w3, w4 = conv_weight(16, 32, 1), conv_weight(32, 32, 1), conv_weight(32, 32, 3), conv_weight(32, 48, 3)
    x = input((2, 32, 12, 12), name="x")
    a = ops.relu(ops.conv2d(x, taskloom.asarray(w1)))
    b = ops.relu(ops.conv2d(ops.relu(ops.conv2d(x, taskloom.asarray(w2))), taskloom.asarray(w3), padding=1))
    y = ops.relu(ops.conv2d(ops.concat([a, b], axis=1), taskloom.asarray(w4), padding=1))
    compiled = taskloom.compile(Graph([x], [y]))
    assert "3 written in place into 2 padded or joined tensors" in compiled.meta["memory"]
    names = [k["name"] for k in compiled.meta["kernels"]]
    assert sum(n.endswith("_border") for n in names) == 2
    xv = rng.standard_normal((2, 32, 12, 12)).astype(np.float32)
    t = torch.from_numpy
    ta = F.relu(F.conv2d(t(xv), t(w1)))
    tb = F.relu(F.conv2d(F.relu(F.conv2d(t(xv), t(w2))), t(w3), padding=1))
    want = F.relu(F.conv2d(torch.cat([ta, tb], 1), t(w4), padding=1)).numpy()
    for _ in range(2):  # the arena is reused: the border must be filled on every call
        np.testing.assert_allclose(compiled(xv), want, rtol=1e-4, atol=1e-4)


def test_a_concatenation_read_twice_runs_no_kernel():
    x = input((4, 8, 16), name="x")
    w = rng.standard_normal((16, 16)).astype(np.float32) / 4
    a, b = ops.softmax(x, axis=-1), ops.matmul(x, taskloom.asarray(w))  # kernels of their own
    c = ops.concat([a, b], axis=2)
    out = ops.add(ops.sum(c, axis=2, keepdim=True), ops.mul(c, 2.0))
    compiled = taskloom.compile(Graph([x], [out]))
    assert "2 written in place into 1 padded or joined tensors" in compiled.meta["memory"]
    assert not any("concat" in o for o in kernel_ops(compiled))
    xv = rng.standard_normal((4, 8, 16)).astype(np.float32)
    e = np.exp(xv - xv.max(-1, keepdims=True))
    cv = np.concatenate([e / e.sum(-1, keepdims=True), xv @ w], axis=2)
    np.testing.assert_allclose(compiled(xv), cv.sum(2, keepdims=True) + 2 * cv, rtol=1e-5, atol=1e-5)


def test_a_concatenation_returned_is_written_in_the_output(tmp_path):
    """Its inputs' kernels write the graph's output buffer itself; so does a saved copy."""
    x = input((6, 16), name="x")
    w = rng.standard_normal((16, 24)).astype(np.float32) / 4
    compiled = taskloom.compile(Graph([x], [ops.concat([ops.softmax(x, axis=1), ops.matmul(x, taskloom.asarray(w))],
                                                       axis=1)]))
    assert "2 written in place into 1" in compiled.meta["memory"] and compiled.arena_bytes == 0
    xv = rng.standard_normal((6, 16)).astype(np.float32)
    e = np.exp(xv - xv.max(1, keepdims=True))
    compiled.save(tmp_path / "joined.tlm")
    for model in (compiled, taskloom.load(tmp_path / "joined.tlm")):
        np.testing.assert_allclose(model(xv), np.concatenate([e / e.sum(1, keepdims=True), xv @ w], 1),
                                   rtol=1e-5, atol=1e-5)


def test_a_padded_window_with_a_symbolic_batch():
    """A bottleneck's 3x3 convolution: the 1x1 convolution before it writes into the pad's
    interior, the border filled per call, for every batch of one compiled model."""
    w1, w2 = conv_weight(32, 32, 1), conv_weight(32, 32, 3)
    x = Tensor((symbol("batch"), 32, 10, 10), taskloom.ir.f32, name="x")
    y = ops.conv2d(ops.relu(ops.conv2d(x, taskloom.asarray(w1))), taskloom.asarray(w2), padding=1)
    compiled = taskloom.compile(Graph([x], [y]))
    assert "1 written in place into 1 padded" in compiled.meta["memory"]
    for batch in (3, 1, 2):  # (smaller batches after a larger one: the border holds old values)
        xv = rng.standard_normal((batch, 32, 10, 10)).astype(np.float32)
        t = torch.from_numpy
        want = F.conv2d(F.relu(F.conv2d(t(xv), t(w1))), t(w2), padding=1).numpy()
        np.testing.assert_allclose(compiled(xv), want, rtol=1e-4, atol=1e-4)


def test_a_pad_fills_with_its_value():
    x = input((3, 5, 16), name="x")
    p = ops.pad(ops.softmax(x, axis=-1), (2, 3, 1, 0), value=-1.5)
    compiled = taskloom.compile(Graph([x], [ops.sum(p, axis=1), ops.max(p, axis=2)]))  # two readers: a kernel
    assert "1 written in place" in compiled.meta["memory"]
    xv = rng.standard_normal((3, 5, 16)).astype(np.float32)
    e = np.exp(xv - xv.max(-1, keepdims=True))
    pv = np.pad(e / e.sum(-1, keepdims=True), ((0, 0), (1, 0), (2, 3)), constant_values=-1.5)
    total, top = compiled(xv)
    np.testing.assert_allclose(total, pv.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(top, pv.max(2), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["read_elsewhere", "graph_output", "crop", "graph_input", "one_column"])
def test_no_placement_where_a_block_cannot_be_written_in_place(case):
    x = input((4, 16), name="x")
    w = rng.standard_normal((16, 16)).astype(np.float32) / 4
    a, b = ops.matmul(x, taskloom.asarray(w)), ops.softmax(x, axis=1)  # kernels of their own
    outs = []
    if case == "read_elsewhere":  # a's own buffer is read again after the concatenation
        joined = ops.concat([a, b], axis=1)
        outs = [ops.add(ops.mul(joined, 2.0), ops.sum(joined, axis=1, keepdim=True)), ops.softmax(a, axis=1)]
    elif case == "graph_output":
        joined = ops.concat([a, b], axis=1)
        outs = [ops.add(ops.mul(joined, 2.0), ops.sum(joined, axis=1, keepdim=True)), a]
    elif case == "crop":
        cropped = ops.pad(a, (1, -2))
        outs = [ops.add(ops.mul(cropped, 2.0), ops.sum(cropped, axis=1, keepdim=True))]
    elif case == "one_column":  # a border one column wide, filled by vectors down the rows: copied
        padded = ops.pad(a, (0, 1, 1, 0))
        outs = [ops.add(ops.mul(padded, 2.0), ops.sum(padded, axis=1, keepdim=True))]
    else:
        joined = ops.concat([x, b], axis=1)
        outs = [ops.add(ops.mul(joined, 2.0), ops.sum(joined, axis=1, keepdim=True))]
    compiled = taskloom.compile(Graph([x], outs))
    assert "written in place" not in compiled.meta["memory"]
    xv = rng.standard_normal((4, 16)).astype(np.float32)
    got = compiled(xv)
    got = got if isinstance(got, (list, tuple)) else [got]
    e = np.exp(xv - xv.max(1, keepdims=True))
    av, bv = xv @ w, e / e.sum(1, keepdims=True)
    j = {"read_elsewhere": np.concatenate([av, bv], 1), "graph_output": np.concatenate([av, bv], 1),
         "crop": np.pad(av, ((0, 0), (1, 0)))[:, :-2], "graph_input": np.concatenate([xv, bv], 1),
         "one_column": np.pad(av, ((1, 0), (0, 1)))}[case]
    np.testing.assert_allclose(got[0], 2 * j + j.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)


AFTER = """\
@kernel
def relu(x: f32[2, 3, 16], out: f32[2, 5, 48]):
    'relu: scheduled by rules'
    for blk in range(2 * 3):
        for c in range(16 // 16):
            vstore(out[blk // 3, blk % 3 + 2, c * 16 + 16], max(vload(x[blk // 3, blk % 3, c * 16], 16), broadcast(0.0, 16)))
        tail = 16 // 16 * 16
        rest = 16 - tail
        if 0 < rest:
            vstore(out[blk // 3, blk % 3 + 2, tail + 16], max(vload(x[blk // 3, blk % 3, tail], 16, rest), broadcast(0.0, 16)), rest)"""


def test_write_into_shifts_every_access():
    """Before and after: a rule-based kernel's output, declared in its own shape (2, 3, 16),
    becomes the host's (2, 5, 48), every store shifted to the block at (0, 2, 16); a flat
    parameter of a kernel that does not say its rows, and vectors down a column, are refused."""
    x = input((2, 3, 16), name="x")
    fn = schedule_kernel(ops.relu(x).producer[0].task, get_target("cpu"), name="relu").fn
    host = input((2, 5, 48), name="host")
    assert "out: f32[2, 3, 16]" in astext(fn)
    assert astext(write_into(fn, 1, (2, 3, 16), Block(host, (0, 2, 16)))) == AFTER
    flat = input((96,), name="flat")
    fn_flat = schedule_kernel(ops.relu(flat).producer[0].task, get_target("cpu"), name="relu").fn
    assert write_into(fn_flat, 1, (2, 3, 16), Block(host, (0, 2, 16))) is None
    column = Task("fill", (), (compute("column", (2, 5, 1), lambda *i: E.const(0.0, "float32")),))
    fn_column = schedule_kernel(column, get_target("cpu"), name="fill").fn  # vectors down axis 1
    assert "vstore(column[" in astext(fn_column)
    assert write_into(fn_column, 0, (2, 5, 1), Block(host, (0, 0, 3))) is None


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 20), st.integers(0, 2)), min_size=1, max_size=3),
       st.integers(0, 2), st.lists(st.integers(0, 3), min_size=6, max_size=6), st.booleans())
def test_random_joins_and_pads_match_numpy(branches, axis, widths, pad_first):
    """Branches of random sizes along a random axis (a reduction, a softmax, an elementwise
    op), joined and padded in either order, then read twice: numpy's numbers."""
    base = [3, 4, 5]
    inputs, values, parts, arrays = [], [], [], []
    for k, (size, kind) in enumerate(branches):
        shape = tuple(size if d == axis else n for d, n in enumerate(base))
        x = input(shape, name=f"x{k}")
        xv = rng.standard_normal(shape).astype(np.float32)
        inputs.append(x)
        values.append(xv)
        if kind == 0:  # a product: written in place
            w = rng.standard_normal((shape[-1], shape[-1])).astype(np.float32) / 4
            parts.append(ops.matmul(x, taskloom.asarray(w)))
            arrays.append(xv @ w)
        elif kind == 1:
            parts.append(ops.softmax(x, axis=-1))
            arrays.append(np.exp(xv - xv.max(-1, keepdims=True)) / np.exp(xv - xv.max(-1, keepdims=True)).sum(-1, keepdims=True))
        else:  # elementwise: it joins the pad's kernel, which then copies
            parts.append(ops.exp(ops.mul(x, 0.25)))
            arrays.append(np.exp(xv * 0.25))
    np_pads = [(widths[2 * (2 - d)], widths[2 * (2 - d) + 1]) for d in range(3)]
    if pad_first:  # each branch padded off the axis, the first along it too, then joined
        for k in range(len(parts)):
            per = [p if d != axis or k == 0 else (0, 0) for d, p in enumerate(np_pads)]
            parts[k] = ops.pad(parts[k], tuple(w for d in reversed(range(3)) for w in per[d]), value=0.75)
            arrays[k] = np.pad(arrays[k], per, constant_values=0.75)
        joined, jv = ops.concat(parts, axis=axis), np.concatenate(arrays, axis=axis)
    else:
        joined = ops.pad(ops.concat(parts, axis=axis), tuple(widths), value=0.75)
        jv = np.pad(np.concatenate(arrays, axis=axis), np_pads, constant_values=0.75)
    out = ops.add(ops.mul(joined, 2.0), ops.sum(joined, axis=-1, keepdim=True))
    compiled = taskloom.compile(Graph(inputs, [out]))
    want = 2 * jv + jv.sum(-1, keepdims=True)
    np.testing.assert_allclose(compiled(*values), want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))


def test_a_border_along_a_symbolic_axis_is_copied():
    """A pad along the batch, whose border's place depends on the batch: not placed."""
    x = Tensor((symbol("batch"), 16), taskloom.ir.f32, name="x")
    p = ops.pad(ops.softmax(x, axis=1), (0, 0, 1, 2), value=0.5)
    compiled = taskloom.compile(Graph([x], [ops.sum(p, axis=1), ops.max(p, axis=0)]))
    assert "written in place" not in compiled.meta["memory"]
    for batch in (3, 1):
        xv = rng.standard_normal((batch, 16)).astype(np.float32)
        e = np.exp(xv - xv.max(1, keepdims=True))
        pv = np.pad(e / e.sum(1, keepdims=True), ((1, 2), (0, 0)), constant_values=0.5)
        total, top = compiled(xv)
        np.testing.assert_allclose(total, pv.sum(1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(top, pv.max(0), rtol=1e-5, atol=1e-5)
