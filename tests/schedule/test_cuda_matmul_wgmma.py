"""The Hopper matmul template: wgmma from swizzled shared memory fed by cp.async, run in the
emulator to numpy's answer on odd and prime shapes, in both operand layouts, with no bank
conflicts on the copies and exactly the tiles' wgmma count; built by nvcc for sm_90a into
HGMMA with asynchronous loads and no spills."""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.ir.dtypes import bfloat16, float16, float32
from taskloom.schedule.contraction import match_contraction
from taskloom.schedule.cuda.matmul_wgmma import WgmmaConfig, wgmma_kernel
from taskloom.target import CudaTarget
from tests.schedule.test_cuda_mma_model import assert_registers_estimated

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
rng = np.random.default_rng(0)
SM90A = CudaTarget.from_arch("sm_90a")
#: small configs the emulator runs quickly: one and two warpgroups, 3 and 4 stages, loads by
#: cp.async, by TMA, and by TMA from a producer warpgroup
SMALL = (WgmmaConfig(64, 64, 3, 1, tma=False), WgmmaConfig(128, 64, 4, 2), WgmmaConfig(64, 128, 3, 1, tma=False),
         WgmmaConfig(64, 128, 4, 1), WgmmaConfig(64, 64, 3, 1, specialized=True),
         WgmmaConfig(128, 64, 4, 2, specialized=True))


def half(*shape):
    return rng.standard_normal(shape).astype(np.float16)


def f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32)


def run(graph: Graph, feeds: dict, config: WgmmaConfig):
    """The graph's one fused group through the template in the emulator: (out, report, kernel)."""
    [group] = fuse_graph(graph)
    con = match_contraction(group.task, (float32, float16, bfloat16))
    assert con is not None
    fn = wgmma_kernel(con, config, "mm")
    module = taskloom.build(fn, target=SM90A, device="emulator")
    args = [feeds[t.name] if t.name in feeds else t.numpy() for t in group.inputs]
    spec = graph.outputs[0]
    out = np.zeros(tuple(int(d) for d in spec.shape), np.dtype(spec.dtype.numpy))
    return out, module["mm"](*args, out), fn


def wgmma_count(batch: int, M: int, N: int, K: int, c: WgmmaConfig) -> int:
    """Warp-level wgmma instructions: every block's m64 strips, four per step of K, 4 warps each."""
    blocks = -(-M // c.block_m) * -(-N // c.block_n) * batch
    return blocks * (c.block_m // 64) * 4 * -(-K // c.block_k) * 4


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 37, 131]), st.sampled_from([64, 72, 200]), st.sampled_from([8, 72, 136]),
       st.sampled_from(SMALL))
def test_matmul_bias_relu_on_odd_shapes(M, K, N, config):
    a, w, b = half(M, K), half(K, N), half(N)
    ai = input(a.shape, "float16", name="a")
    graph = Graph([ai], [ops.relu(ops.matmul(ai, taskloom.asarray(w)) + taskloom.asarray(b))])
    out, report, fn = run(graph, {"a": a}, config)
    np.testing.assert_allclose(f32(out), np.maximum(f32(a) @ f32(w) + f32(b), 0), rtol=2e-3, atol=2e-2)
    assert report.instructions["wgmma"] == wgmma_count(1, M, N, K, config)
    assert report.counters.bank_conflicts == 0
    how = "TMA" if config.tma else "cp.async"
    assert f"A into [m][k] by {how}" in fn.attr("doc") and f"B into [k][n] by {how}" in fn.attr("doc")
    assert report.instructions["tma"] == (wgmma_count(1, M, N, K, config) // (config.block_m // 64 * 16) *
                                          (1 + config.block_n // 64) if config.tma else 0)


@pytest.mark.parametrize("config", [SMALL[0], SMALL[1]], ids=["cp.async", "TMA"])
def test_linear_reads_its_weight_k_major(config):
    torch = pytest.importorskip("torch")
    x, w, bias = (torch.randn(*s, dtype=torch.bfloat16) for s in ((2, 50, 64), (96, 64), (96,)))
    xi, wi, bi = (input(tuple(t.shape), "bfloat16", name=n) for t, n in ((x, "x"), (w, "w"), (bias, "bias")))
    graph = Graph([xi, wi, bi], [ops.linear(xi, wi, bi)])
    [group] = fuse_graph(graph)
    con = match_contraction(group.task, (float32, float16, bfloat16))
    fn = wgmma_kernel(con, config, "mm")
    out = torch.zeros((2, 50, 96), dtype=torch.bfloat16)
    report = taskloom.build(fn, target=SM90A, device="emulator")["mm"](x, w, bias, out)
    assert f"B into [n][k] by {'TMA' if config.tma else 'cp.async'}" in fn.attr("doc")
    want = x.float() @ w.float().T + bias.float()
    torch.testing.assert_close(out.float(), want.bfloat16().float(), rtol=1e-2, atol=5e-2)
    assert report.counters.bank_conflicts == 0


@pytest.mark.parametrize("config", [SMALL[0], SMALL[3]], ids=["cp.async", "TMA"])
def test_a_transposed_factor_is_m_major(config):
    a, w = half(72, 40), half(72, 64)  # C = a^T w: A is read along m
    ai = input(a.shape, "float16", name="a")
    out, report, fn = run(Graph([ai], [ops.matmul(ops.transpose(ai, 0, 1), taskloom.asarray(w))]), {"a": a},
                          config)
    assert f"A into [k][m] by {'TMA' if config.tma else 'cp.async'}" in fn.attr("doc")
    np.testing.assert_allclose(f32(out), f32(a).T @ f32(w), rtol=2e-3, atol=2e-2)


def test_batched_matmul_and_a_convolution_window():
    torch = pytest.importorskip("torch")
    p, q = half(3, 33, 64), half(3, 64, 64)
    pi, qi = input(p.shape, "float16", name="p"), input(q.shape, "float16", name="q")
    out, _, _ = run(Graph([pi, qi], [ops.cast(ops.matmul(pi, qi), "float32")]), {"p": p, "q": q}, SMALL[1])
    np.testing.assert_allclose(out, f32(p) @ f32(q), rtol=1e-3, atol=1e-3)
    x, w = half(1, 8, 9, 7), half(64, 8, 3, 3)
    xi = input(x.shape, "float16", name="img")
    out, _, fn = run(Graph([xi], [ops.conv2d(xi, taskloom.asarray(w), padding=1)]), {"img": x}, SMALL[0])
    assert "by its threads" in fn.attr("doc")
    want = torch.nn.functional.conv2d(torch.from_numpy(f32(x)), torch.from_numpy(f32(w)), padding=1).numpy()
    np.testing.assert_allclose(f32(out), want, rtol=2e-3, atol=3e-2)


def test_compiling_for_sm_90a_takes_wgmma_for_a_large_product(monkeypatch):
    a, w = half(200, 512), half(512, 384)
    ai = input(a.shape, "float16", name="a")
    graph = Graph([ai], [ops.matmul(ai, taskloom.asarray(w))])
    small = dataclasses.replace(SM90A, num_sms=4)  # an H100 of 4 SMs: this product fills it
    compiled = taskloom.compile(graph, target=small, device="emulator")
    [kernel] = compiled.meta["kernels"]
    assert "(wgmma, TMA from a producer warpgroup)" in kernel["schedule"]
    np.testing.assert_allclose(f32(compiled(a)), f32(a) @ f32(w), rtol=2e-3, atol=5e-2)
    monkeypatch.setenv("TASKLOOM_WGMMA", "0")  # kept on mma.sync
    assert "wgmma" not in taskloom.compile(graph, target=small, device="emulator").meta["kernels"][0]["schedule"]


def test_every_config_builds_without_spills_and_as_the_model_estimates():
    from taskloom.schedule.cuda.mma_model import wgmma_space
    a = input((512, 512), "float16", name="a")
    [group] = fuse_graph(Graph([a], [ops.relu(ops.matmul(a, taskloom.asarray(half(512, 512))))]))
    con = match_contraction(group.task, (float32, float16, bfloat16))
    configs = wgmma_space(SM90A.shared_memory_per_block)
    module = taskloom.build([wgmma_kernel(con, c, f"k{i}") for i, c in enumerate(configs)], target=SM90A,
                            device="emulator")
    for i, c in enumerate(configs):
        used = module.built.resources[f"k{i}"]
        assert used.spill_stores == used.spill_loads == 0, c
    assert_registers_estimated(configs, module.built.resources, SM90A)  # the model's occupancy holds


def test_a_producer_warpgroup_prints_and_parses_back():
    from taskloom.ir.printer import function_text
    from taskloom.script import parse_source
    from taskloom.transforms import lower
    a, w = half(40, 72), half(72, 64)
    ai = input(a.shape, "float16", name="a")
    [group] = fuse_graph(Graph([ai], [ops.matmul(ai, taskloom.asarray(w))]))
    con = match_contraction(group.task, (float32, float16, bfloat16))
    fn = lower(wgmma_kernel(con, SMALL[4], "mm"))
    text = function_text(fn)
    assert "in warp_specialized(" in text and "with producer:" in text and "with consumer:" in text
    again = parse_source(text)
    outs = []
    for kernel in (fn, again):
        out = np.zeros(40 * 64, np.float16)  # the lowered kernel's tensors are flat
        taskloom.build(kernel, target=SM90A, device="emulator")["mm"](a.ravel(), w.ravel(), out)
        outs.append(out.reshape(40, 64))
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(f32(outs[0]), f32(a) @ f32(w), rtol=2e-3, atol=2e-2)



def test_the_template_s_proxy_fence_is_what_makes_cp_async_tiles_visible():
    # the same kernel with its fence.proxy.async dropped: the emulator names the race the
    # device could run into (the tensor cores reading a slot the cp.async writes have not reached)
    from taskloom.ir import gpu, stmt as S
    from taskloom.ir.functor import Rewriter, collect
    from taskloom.runtime.emulator import EmulatorError

    class DropFence(Rewriter):
        def visit_FenceProxyAsync(self, node):
            return S.seq([])

    ai = input((64, 128), "float16", name="a")
    graph = Graph([ai], [ops.matmul(ai, taskloom.asarray(half(128, 64)))])
    [group] = fuse_graph(graph)
    fn = wgmma_kernel(match_contraction(group.task, (float16,)), SMALL[0], "mm")
    bare = DropFence().visit(fn)
    assert collect(fn.body, gpu.FenceProxyAsync) and not collect(bare.body, gpu.FenceProxyAsync)
    module = taskloom.build(bare, target=SM90A, device="emulator")
    with pytest.raises(EmulatorError, match="no fence.proxy.async after it"):
        module["mm"](half(64, 128), *[t.numpy() for t in group.inputs[1:]], np.zeros((64, 64), np.float16))


def test_a_producer_s_slot_is_freed_only_once_its_consumers_wgmmas_are_all_done():
    # the consumers freeing the step before's slot with this step's wgmmas in flight (waiting
    # for all but one group) computed wrong on an H200; the emulator refuses it, the template
    # as built waits for all of them
    import dataclasses as dc
    from taskloom.ir import gpu
    from taskloom.ir.functor import Rewriter
    from taskloom.runtime.emulator import EmulatorError

    class WaitForOlderOnly(Rewriter):
        def visit_WarpSpecialized(self, node):
            step = node.consumer_step
            relaxed = type(step)([dc.replace(s, pending=1) if isinstance(s, gpu.WgmmaWait) else s
                                  for s in step.stmts])
            return dc.replace(node, consumer_step=relaxed)

    a, w = half(64, 64 * 7), half(64 * 7, 64)  # 7 steps through 3 slots: each slot used again
    ai = input(a.shape, "float16", name="a")
    [group] = fuse_graph(Graph([ai], [ops.matmul(ai, taskloom.asarray(w))]))
    fn = wgmma_kernel(match_contraction(group.task, (float16,)), SMALL[4], "mm")
    for kernel, fails in ((fn, False), (WaitForOlderOnly().visit(fn), True)):
        module = taskloom.build(kernel, target=SM90A, device="emulator")
        out = np.zeros((64, 64), np.float16)
        if fails:
            with pytest.raises(EmulatorError, match="wgmmas are in flight"):
                module["mm"](a, w, out)
        else:
            module["mm"](a, w, out)
            np.testing.assert_allclose(f32(out), f32(a) @ f32(w), rtol=2e-3, atol=5e-2)


@pytest.mark.parametrize("config", [WgmmaConfig(128, 64, 4, 2), WgmmaConfig(64, 64, 3, 1, specialized=True)],
                         ids=["over the tiles", "room of its own"])
def test_c_is_staged_and_leaves_in_a_quarter_of_the_stores(config):
    """Without a producer warpgroup C is staged over the factors' tiles; with one, in room
    the config keeps for it (the producer may still be copying), stored after the roles end.
    Either way, on whole tiles, its 16-byte runs leave in a quarter of the store requests the
    fragments' pairs took, and half the sectors; on the edges, only what lies inside C."""
    from unittest import mock

    from taskloom.ir import gpu
    from taskloom.schedule.cuda import matmul_mma
    for M, N in ((131, 136), (128, 128)):
        a, w = half(M, 72), half(72, N)
        ai = input(a.shape, "float16", name="a")
        graph = Graph([ai], [ops.matmul(ai, taskloom.asarray(w))])
        out, report, fn = run(graph, {"a": a}, config)
        np.testing.assert_allclose(f32(out), f32(a) @ f32(w), rtol=2e-3, atol=2e-2)
        assert "C staged in shared memory" in fn.attr("doc") and report.counters.bank_conflicts == 0
        assert (gpu.SHARED_REUSE in dict(fn.attrs)) == (not config.specialized)
    assert config.staging_bytes() == (64 * 72 * 2 + 1024 if config.specialized else 0)
    with mock.patch.object(matmul_mma._Kernel, "_stage_shape", lambda self: None):
        direct, before, _ = run(graph, {"a": a}, config)
    np.testing.assert_array_equal(direct, out)
    c, d = report.counters, before.counters
    assert (c.global_store_requests, d.global_store_requests) == (128 * 128 // 8 // 32, 128 * 128 // 2 // 32)
    assert (c.global_store_sectors, d.global_store_sectors) == (16 * 64, 8 * 256)
