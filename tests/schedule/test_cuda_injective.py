"""Injective CUDA kernels with 16-byte accesses: a thread computes a run of consecutive output
elements, the inputs it reads consecutively come in one wide copy, any other read stays
element by element, and the emulator runs the result to numpy's answer."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.ir import gpu
from taskloom.ir.functor import collect
from taskloom.schedule.cuda import schedule_task_cuda
from taskloom.schedule.cuda.rules import per_element_kernel
from taskloom.target import CudaTarget

A100 = CudaTarget.from_arch("sm_80")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
rng = np.random.default_rng(0)


def kernel_of(graph: Graph):
    [group] = fuse_graph(graph)
    return group, schedule_task_cuda(group.task, A100, "k")


def run(graph: Graph, group, fn, feeds: dict) -> tuple[np.ndarray, object]:
    """The kernel's output and the emulator's counters of one call."""
    module = taskloom.build(fn, target=A100, device="emulator")
    args = [feeds[id(t)] if id(t) in feeds else t.numpy() for t in group.inputs]
    out = graph.outputs[0]
    result = np.zeros(tuple(int(d) for d in out.shape), out.dtype.name)
    return result, module["k"](*args, result).counters


def wide_loads(group, fn) -> list[tuple[str, int]]:
    """The wide copies out of the kernel's inputs: (the graph input's name, bytes)."""
    inputs = {p.name: t.name for p, t in zip(fn.params, group.inputs)}  # the task has no symbols here
    return [(inputs[s.src.tensor.name], s.nbytes) for s in collect(fn.body, gpu.VectorCopy)
            if s.src.tensor.name in inputs]


@needs_nvcc
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 9), runs=st.integers(1, 12), dtype=st.sampled_from(["float32", "float16"]))
def test_a_bias_and_activation_run_to_numpys_answer(rows, runs, dtype):
    width = runs * (4 if dtype == "float32" else 8)
    x, b = input((rows, width), dtype, name="x"), input((width,), dtype, name="b")
    graph = Graph([x, b], [ops.relu(x + b) * 2.0])
    group, fn = kernel_of(graph)
    assert "16 bytes at a time" in fn.attr("doc")
    assert sorted(wide_loads(group, fn)) == [("b", 16), ("x", 16)]
    xs = rng.standard_normal((rows, width)).astype(dtype)
    bs = rng.standard_normal(width).astype(dtype)
    got, _ = run(graph, group, fn, {id(x): xs, id(b): bs})
    want = np.maximum(xs.astype(np.float32) + bs, 0) * 2
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3 if dtype == "float16" else 1e-6)


@needs_nvcc
def test_a_quarter_of_the_requests_for_the_same_sectors():
    x, y = input((64, 256), name="x"), input((64, 256), name="y")
    graph = Graph([x, y], [x * y])
    group, fn = kernel_of(graph)
    feeds = {id(x): rng.standard_normal((64, 256)).astype(np.float32),
             id(y): rng.standard_normal((64, 256)).astype(np.float32)}
    got, wide = run(graph, group, fn, feeds)
    np.testing.assert_allclose(got, feeds[id(x)] * feeds[id(y)], rtol=1e-6)
    _, narrow = run(graph, group, per_element_kernel(group.task, "k"), feeds)
    warps = 64 * 256 // 4 // 32  # a thread a run of 4 floats
    assert (wide.global_load_requests, wide.global_store_requests) == (2 * warps, warps)
    assert wide.global_load_sectors == 16 * wide.global_load_requests  # 512 bytes a request
    assert narrow.global_load_requests == 4 * wide.global_load_requests
    assert narrow.global_load_sectors == wide.global_load_sectors


@needs_nvcc
def test_reads_off_the_grid_leave_the_task_to_the_per_element_rule():
    """A slice starting at column 1, a transpose, a row of 42 (not whole runs): read a run at
    a time they would take twice the sectors of consecutive threads, so the rule is kept;
    a scalar and a broadcast column are loaded once a run."""
    x, t, odd = input((8, 44), name="x"), input((40, 8), name="t"), input((8, 42), name="odd")
    y, col = input((8, 40), name="y"), input((8, 1), name="col")
    feeds = {id(v): rng.standard_normal(tuple(v.shape)).astype(np.float32) for v in (x, t, odd, y, col)}
    for other, want in ((ops.slice(x, 1, 1, 41), feeds[id(x)][:, 1:41]), (ops.transpose(t, 0, 1), feeds[id(t)].T),
                        (ops.slice(odd, 1, 0, 40), feeds[id(odd)][:, :40])):
        graph = Graph([y, x, t, odd], [y + other])
        group, fn = kernel_of(graph)
        assert "a thread an element" in fn.attr("doc")
        got, _ = run(graph, group, fn, feeds)
        np.testing.assert_allclose(got, feeds[id(y)] + want, rtol=1e-6)
    graph = Graph([y, col], [y * col + 2.0])
    group, fn = kernel_of(graph)
    assert wide_loads(group, fn) == [("y", 16)]
    got, counters = run(graph, group, fn, feeds)
    np.testing.assert_allclose(got, feeds[id(y)] * feeds[id(col)] + 2, rtol=1e-6)
    assert counters.global_load_requests == 3 * 3  # 80 runs in 3 warps, each loading y, col and the scalar once


@needs_nvcc
def test_a_cast_to_half_reads_32_bytes_in_two_copies():
    x = input((4, 64), name="x")
    graph = Graph([x], [ops.cast(x, "float16")])
    group, fn = kernel_of(graph)
    assert wide_loads(group, fn) == [("x", 16), ("x", 16)]
    xs = rng.standard_normal((4, 64)).astype(np.float32)
    got, _ = run(graph, group, fn, {id(x): xs})
    np.testing.assert_array_equal(got, xs.astype(np.float16))


def test_rows_of_no_whole_runs_and_reductions_keep_their_rules():
    x = input((3, 37), name="x")
    assert "a thread an element" in kernel_of(Graph([x], [ops.relu(x)]))[1].attr("doc")
    w = input((3, 40), name="w")
    assert "a warp a row" in kernel_of(Graph([w], [ops.softmax(w, axis=-1)]))[1].attr("doc")


@needs_nvcc
def test_a_reduction_behind_an_elementwise_output_stays_element_by_element():
    """relu(a depthwise convolution): the output's own definition has no reduction, the
    node it reads has (and a depthwise convolution is too thin for a matmul template)."""
    torch = pytest.importorskip("torch")
    x, w = rng.standard_normal((1, 8, 6, 8)).astype(np.float32), rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    xi = input(x.shape, name="x")
    graph = Graph([xi], [ops.relu(ops.conv2d(xi, taskloom.asarray(w), padding=1, groups=8))])
    group, fn = kernel_of(graph)
    assert "a thread an element" in fn.attr("doc")
    got, _ = run(graph, group, fn, {id(xi): x})
    want = torch.relu(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1, groups=8))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
