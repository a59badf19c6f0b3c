"""Window reductions on the GPU with 16-byte runs of channels: depthwise convolutions,
poolings and global means of NHWC tensors, in the emulator (whose memory checker stops a
load in the padding) against torch, and their loads counted against a thread an element."""
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

torch = pytest.importorskip("torch")
F = torch.nn.functional
GPU = CudaTarget.from_arch("sm_80")
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
rng = np.random.default_rng(0)


def kernel(graph: Graph, rule: bool = False):
    [group] = fuse_graph(graph)
    fn = per_element_kernel(group.task, "k") if rule else schedule_task_cuda(group.task, GPU, "k")
    return group, fn


def run(graph: Graph, x: np.ndarray, rule: bool = False):
    """The kernel's output on ``x`` and the emulator's counters."""
    group, fn = kernel(graph, rule)
    module = taskloom.build(fn, target=GPU, device="emulator")
    args = [x if t is graph.inputs[0] else t.numpy() for t in group.inputs]
    out = np.zeros(tuple(int(d) for d in graph.outputs[0].shape), graph.outputs[0].dtype.name)
    return out, module["k"](*args, out).counters


def nchw(x: np.ndarray) -> "torch.Tensor":
    return torch.from_numpy(x.astype(np.float32)).permute(0, 3, 1, 2)


def depthwise(shape, stride, padding, dtype="float16"):
    n, h, w, c = shape
    x = input(shape, dtype, name="x")
    weight = (rng.standard_normal((3, 3, 1, c)) * 0.5).astype(dtype)
    bias = rng.standard_normal(c).astype(dtype)
    y = ops.clip(ops.conv2d(x, taskloom.asarray(weight), taskloom.asarray(bias), stride=stride, padding=padding,
                            groups=c, layout="NHWC"), 0.0, 6.0)
    want = lambda xs: torch.clamp(F.conv2d(nchw(xs), torch.from_numpy(weight.astype(np.float32)).permute(3, 2, 0, 1),
                                           torch.from_numpy(bias.astype(np.float32)), stride=stride,
                                           padding=padding, groups=c), 0, 6).permute(0, 2, 3, 1).numpy()
    return Graph([x], [y]), want


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 2), h=st.integers(1, 9), w=st.integers(1, 9), runs=st.integers(1, 5),
       stride=st.integers(1, 2), padding=st.integers(0, 1), dtype=st.sampled_from(["float16", "float32"]))
def test_a_depthwise_convolution_with_bias_and_relu6_runs_to_torchs_answer(n, h, w, runs, stride, padding, dtype):
    if h + 2 * padding < 3 or w + 2 * padding < 3:
        return  # no window fits
    c = runs * (8 if dtype == "float16" else 4)
    graph, want = depthwise((n, h, w, c), stride, padding, dtype)
    group, fn = kernel(graph)
    assert "a window reduction" in fn.attr("doc")
    # the input's and the weight's runs each come in one 16-byte copy a tap
    loaded = {s.src.tensor.name: s.nbytes for s in collect(fn.body, gpu.VectorCopy)
              if s.src.tensor.name in ("x", "weight")}
    assert loaded == {"x": 16, "weight": 16}
    xs = rng.standard_normal((n, h, w, c)).astype(dtype)
    got, _ = run(graph, xs)  # (a load in the padding stops the emulator)
    tol = 2e-2 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(got.astype(np.float32), want(xs), rtol=tol, atol=tol)


def test_a_thread_loads_each_tap_once_for_eight_channels():
    graph, _ = depthwise((1, 12, 12, 32), 1, 1)
    xs = rng.standard_normal((1, 12, 12, 32)).astype(np.float16)
    window, c = run(graph, xs)
    element, e = run(graph, xs, rule=True)
    np.testing.assert_array_equal(window, element)
    assert c.global_load_requests * 6 < e.global_load_requests
    assert c.global_load_sectors < e.global_load_sectors
    assert sum(c.instructions.values()) < sum(e.instructions.values())


@pytest.mark.parametrize("pool", ["max", "avg"])
def test_poolings_take_the_window_kernel(pool):
    x = input((2, 7, 5, 16), "float16", name="x")
    y = ops.max_pool2d(x, 3, 2, 1, layout="NHWC") if pool == "max" else ops.avg_pool2d(x, 3, 1, 1, layout="NHWC")
    graph = Graph([x], [y])
    assert "a window reduction" in kernel(graph)[1].attr("doc")
    xs = rng.standard_normal((2, 7, 5, 16)).astype(np.float16)
    got, _ = run(graph, xs)
    t = nchw(xs)
    want = (F.max_pool2d(t, 3, 2, 1) if pool == "max" else F.avg_pool2d(t, 3, 1, 1)).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)


def test_a_global_mean_keeps_a_warp_a_row():
    """A mean over all of a channel's pixels is a row reduction: a warp a channel spreads it
    over the GPU, where a thread a run would walk every pixel alone."""
    x = input((1, 7, 7, 64), "float16", name="x")
    assert "a warp a row" in kernel(Graph([x], [ops.mean(x, (1, 2), keepdim=True)]))[1].attr("doc")


def test_channels_off_the_16_byte_grid_stay_element_by_element():
    """12 float16 channels are not whole runs of 8; an NCHW depthwise window reads along W
    at offsets off the grid."""
    graph, _ = depthwise((1, 6, 6, 12), 1, 1)
    assert "a thread an element" in kernel(graph)[1].attr("doc")
    x = input((1, 16, 6, 16), "float16", name="x")
    w = rng.standard_normal((16, 1, 3, 3)).astype(np.float16)
    graph = Graph([x], [ops.conv2d(x, taskloom.asarray(w), padding=1, groups=16)])
    assert "a thread an element" in kernel(graph)[1].attr("doc")


def test_one_compile_with_a_symbolic_batch_serves_every_batch():
    """A depthwise convolution between NCHW graph edges (the graph turns its region NHWC),
    its batch a symbol: one window kernel, its grid computed per call."""
    from taskloom.graph import Tensor, symbol
    from taskloom.ir.dtypes import float16
    c = 16
    w = rng.standard_normal((c, 1, 3, 3)).astype(np.float16)
    b = rng.standard_normal(c).astype(np.float16)
    w2 = (rng.standard_normal((32, c, 1, 1)) * 0.2).astype(np.float16)
    x = Tensor((symbol("batch"), c, 9, 9), float16, name="x")
    y = ops.conv2d(ops.clip(ops.conv2d(x, taskloom.asarray(w), taskloom.asarray(b), stride=2, padding=1, groups=c),
                            0.0, 6.0), taskloom.asarray(w2))
    model = taskloom.compile(Graph([x], [y]), target="cuda:sm_90a", device="emulator", dynamic={"batch": (1, 8)})
    assert model.source_path.read_text().count("a window reduction") == 1
    for n in (1, 3, 8):
        xs = rng.standard_normal((n, c, 9, 9)).astype(np.float16)
        t = torch.from_numpy(xs.astype(np.float32))
        hidden = torch.clamp(F.conv2d(t, torch.from_numpy(w.astype(np.float32)), torch.from_numpy(b.astype(np.float32)),
                                      stride=2, padding=1, groups=c), 0, 6)
        want = F.conv2d(hidden, torch.from_numpy(w2.astype(np.float32))).numpy()
        np.testing.assert_allclose(model(xs).astype(np.float32), want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


def test_the_window_kernel_can_be_switched_off_to_time_against(monkeypatch):
    graph, _ = depthwise((1, 6, 6, 16), 1, 1)
    monkeypatch.setenv("TASKLOOM_WINDOW", "0")
    assert "a thread an element" in kernel(graph)[1].attr("doc")
