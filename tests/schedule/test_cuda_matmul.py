"""The CUDA matmul template (CUDA cores): every contraction the CPU template serves —
matmul with an epilogue, linear, batched matmul, a convolution read as img2col — built by
nvcc for sm_80 and sm_90a without spills, and run in the emulator to numpy's answer on odd
and prime shapes, with no shared-memory bank conflicts."""
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
from taskloom.schedule.contraction import match_contraction
from taskloom.schedule.cuda.matmul import CONFIGS, choose_config, matmul_candidate, matmul_kernel
from taskloom.target import CudaTarget

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
rng = np.random.default_rng(0)


def arr(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def run(graph: Graph, config=None, arch: str = "sm_80"):
    """The graph's one fused group through the template, in the emulator: (out, report, built module)."""
    [group] = fuse_graph(graph)
    con = match_contraction(group.task)
    assert con is not None
    target = CudaTarget.from_arch(arch)
    fn = matmul_kernel(con, config or choose_config(con, target.num_sms), "mm")
    module = taskloom.build(fn, target=target, device="emulator")
    values = {id(t): t.numpy() for t in group.inputs if t.is_concrete}
    feeds = [values.get(id(t)) if id(t) in values else FEEDS[t.name] for t in group.inputs]
    out = np.zeros(tuple(int(d) for d in graph.outputs[0].shape), np.float32)
    report = module["mm"](*feeds, out)
    return out, report, module


FEEDS: dict[str, np.ndarray] = {}  # the values of the graph inputs made by feed(), by name


def feed(name: str, value: np.ndarray):
    """A graph input named ``name`` whose value in :func:`run` is ``value``."""
    FEEDS[name] = value
    return input(value.shape, name=name)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 7, 31, 64, 97]), st.sampled_from([1, 13, 40, 67]), st.sampled_from([3, 29, 64, 101]),
       st.sampled_from(CONFIGS))
def test_matmul_with_a_bias_relu_epilogue_on_odd_shapes(M, K, N, config):
    a, w, b = arr(M, K), arr(K, N), arr(N)
    ai = feed("a", a)
    out, report, _ = run(Graph([ai], [ops.relu(ops.matmul(ai, taskloom.asarray(w)) + taskloom.asarray(b))]), config)
    np.testing.assert_allclose(out, np.maximum(a @ w + b, 0), rtol=1e-4, atol=1e-4)
    assert report.counters.bank_conflicts == 0


def test_linear_and_batched_matmul():
    x, w, bias = arr(2, 5, 24), arr(17, 24), arr(17)
    xi = feed("x", x)
    out, _, _ = run(Graph([xi], [ops.linear(xi, taskloom.asarray(w), taskloom.asarray(bias))]))
    np.testing.assert_allclose(out, x @ w.T + bias, rtol=1e-4, atol=1e-4)
    p, q = arr(3, 9, 11), arr(3, 11, 6)
    pi, qi = feed("p", p), feed("q", q)
    out, _, _ = run(Graph([pi, qi], [ops.matmul(pi, qi)]))
    np.testing.assert_allclose(out, p @ q, rtol=1e-4, atol=1e-4)


def test_a_convolution_read_as_img2col():
    torch = pytest.importorskip("torch")
    x, w = arr(2, 3, 9, 7), arr(5, 3, 3, 3)
    xi = feed("img", x)
    out, _, _ = run(Graph([xi], [ops.conv2d(xi, taskloom.asarray(w), padding=1, stride=2)]))
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1, stride=2).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_every_config_builds_without_spills(arch, config):
    a = feed("a", arr(64, 64))
    _, _, module = run(Graph([a], [ops.matmul(a, taskloom.asarray(arr(64, 64)))]), config, arch)
    used = module.built.resources["mm"]
    assert not used.spills and used.registers <= 128, used


def test_the_small_tile_is_chosen_when_the_large_one_leaves_sms_idle():
    a = feed("a", arr(128, 32))
    [group] = fuse_graph(Graph([a], [ops.matmul(a, taskloom.asarray(arr(32, 128)))]))
    con = match_contraction(group.task)
    assert choose_config(con, 132) == CONFIGS[1] and choose_config(con, 2) == CONFIGS[0]


def test_a_float16_matmul_accumulates_in_float32():
    a, w = arr(33, 70).astype(np.float16), arr(70, 19).astype(np.float16)
    ai = input(a.shape, "float16", name="a16")
    [group] = fuse_graph(Graph([ai], [ops.matmul(ai, taskloom.asarray(w))]))
    assert match_contraction(group.task) is None  # the CPU template keeps to float32 outputs
    found = matmul_candidate(group.task, CudaTarget.from_arch("sm_80"))
    assert found is not None
    fn = found.build(CONFIGS[1], "mm16").fn
    out = np.zeros((33, 19), np.float16)
    taskloom.build(fn, target=CudaTarget.from_arch("sm_80"), device="emulator")["mm16"](a, w, out)
    want = (a.astype(np.float32) @ w.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_tuning_a_cuda_graph_says_that_nothing_is_measured():
    a = feed("a", arr(16, 8))
    with pytest.warns(RuntimeWarning, match="CUDA-core matmul template is not tuned by measurement"):
        taskloom.compile(Graph([a], [ops.matmul(a, taskloom.asarray(arr(8, 16)))]), target="cuda:sm_80",
                         device="emulator", tune=1)
