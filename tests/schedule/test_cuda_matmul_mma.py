"""The tensor-core matmul template: contractions of float16 and bfloat16 factors through
cp.async, ldmatrix and mma.sync, run in the emulator to numpy's answer on odd and prime
shapes with no bank conflicts and exactly the tiles' mma count, built by nvcc without spills."""
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
from taskloom.ir.dtypes import bfloat16, float16, float32
from taskloom.schedule.contraction import match_contraction
from taskloom.schedule.cuda.matmul_mma import CONFIGS, MmaConfig, mma_candidate, mma_kernel
from taskloom.schedule.cuda.matmul_wgmma import WgmmaConfig
from taskloom.schedule.cuda.mma_model import Product, choose, space
from taskloom.target import CudaTarget
from tests.schedule.test_cuda_mma_model import assert_registers_estimated

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
rng = np.random.default_rng(0)
SM80 = CudaTarget.from_arch("sm_80")


def half(*shape):
    return rng.standard_normal(shape).astype(np.float16)


def run(graph: Graph, feeds: dict[str, np.ndarray], config: MmaConfig | None = None, arch: str = "sm_80"):
    """The graph's one fused group through the template in the emulator: (out, report, kernel, module)."""
    [group] = fuse_graph(graph)
    con = match_contraction(group.task, (float32, float16, bfloat16))
    assert con is not None
    target = CudaTarget.from_arch(arch)
    config = config or choose(con, target)
    fn = config.kernel(con, "mm")
    module = taskloom.build(fn, target=target, device="emulator")
    args = [feeds[t.name] if t.name in feeds else t.numpy() for t in group.inputs]
    spec = graph.outputs[0]
    shape = tuple(int(d) for d in spec.shape)
    if spec.dtype == bfloat16:  # no numpy type: torch tensors in and out
        import torch
        out = torch.zeros(shape, dtype=torch.bfloat16)
    else:
        out = np.zeros(shape, np.dtype(spec.dtype.numpy))
    report = module["mm"](*args, out)
    return out, report, fn, module


def f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32)


def mma_count(batch: int, M: int, N: int, K: int, c: MmaConfig) -> int:
    """The mmas the block tiles issue: every m16n8k16 of every block's tile, edges included."""
    tiles = -(-M // c.block_m) * -(-N // c.block_n) * batch
    return tiles * (c.block_m // 16) * (c.block_n // 8) * (-(-K // c.block_k) * c.block_k // 16)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 16, 37, 128, 131]), st.sampled_from([8, 40, 64, 72, 13]),
       st.sampled_from([8, 29, 64, 136]), st.sampled_from(CONFIGS))
def test_matmul_bias_relu_on_odd_shapes(M, K, N, config):
    a, w, b = half(M, K), half(K, N), half(N)
    ai = input(a.shape, "float16", name="a")
    graph = Graph([ai], [ops.relu(ops.matmul(ai, taskloom.asarray(w)) + taskloom.asarray(b))])
    out, report, fn, _ = run(graph, {"a": a}, config)
    want = np.maximum(f32(a) @ f32(w) + f32(b), 0)
    np.testing.assert_allclose(f32(out), want, rtol=2e-3, atol=2e-2)
    assert report.counters.bank_conflicts == 0
    assert report.instructions["mma"] == mma_count(1, M, N, K, config)
    # a row of A or B is 16-byte aligned exactly when K and N are multiples of 8 (or A has
    # only one row, at the tensor's start: its last piece is copied in part)
    assert ("A into [m][k] by cp.async" in fn.attr("doc")) == (K % 8 == 0 or M == 1)
    assert ("B into [k][n] by cp.async" in fn.attr("doc")) == (N % 8 == 0)


def test_linear_reads_its_weight_k_contiguous_and_accumulates_bf16_in_fp32():
    torch = pytest.importorskip("torch")
    x, w, bias = (torch.randn(*s, dtype=torch.bfloat16) for s in ((3, 50, 64), (96, 64), (96,)))
    xi, wi, bi = (input(tuple(t.shape), "bfloat16", name=n) for t, n in ((x, "x"), (w, "w"), (bias, "bias")))
    out, report, fn, _ = run(Graph([xi, wi, bi], [ops.linear(xi, wi, bi)]), {"x": x, "w": w, "bias": bias}, CONFIGS[1])
    assert "B into [n][k] by cp.async" in fn.attr("doc")
    got = out.float()
    want = x.float() @ w.float().T + bias.float()
    torch.testing.assert_close(got, want.bfloat16().float(), rtol=1e-2, atol=5e-2)
    assert report.counters.bank_conflicts == 0


def test_a_transposed_factor_loads_m_contiguous_through_ldmatrix_trans():
    a, w = half(64, 40), half(64, 24)  # C = a^T w: A is read along m
    ai = input(a.shape, "float16", name="a")
    out, report, fn, _ = run(Graph([ai], [ops.matmul(ops.transpose(ai, 0, 1), taskloom.asarray(w))]), {"a": a},
                             CONFIGS[1])
    assert "A into [k][m] by cp.async" in fn.attr("doc")
    np.testing.assert_allclose(f32(out), f32(a).T @ f32(w), rtol=2e-3, atol=2e-2)
    assert report.counters.bank_conflicts == 0


def test_batched_matmul_and_a_float32_result():
    p, q = half(3, 33, 48), half(3, 48, 40)
    pi, qi = input(p.shape, "float16", name="p"), input(q.shape, "float16", name="q")
    out, _, _, _ = run(Graph([pi, qi], [ops.cast(ops.matmul(pi, qi), "float32")]), {"p": p, "q": q})
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, f32(p) @ f32(q), rtol=1e-3, atol=1e-3)


def test_a_convolution_window_is_computed_into_the_tile():
    torch = pytest.importorskip("torch")
    x, w = half(2, 8, 9, 7), half(16, 8, 3, 3)
    xi = input(x.shape, "float16", name="img")
    out, report, fn, _ = run(Graph([xi], [ops.conv2d(xi, taskloom.asarray(w), padding=1)]), {"img": x})
    assert "by its threads" in fn.attr("doc")
    want = torch.nn.functional.conv2d(torch.from_numpy(f32(x)), torch.from_numpy(f32(w)), padding=1).numpy()
    np.testing.assert_allclose(f32(out), want, rtol=2e-3, atol=3e-2)
    assert report.counters.bank_conflicts == 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([8, 16, 24]), st.sampled_from([5, 9]), st.sampled_from([1, 2]), st.sampled_from([0, 1, 2]),
       st.sampled_from([1, 3]), st.sampled_from(["sm_80", "sm_90a"]))
def test_an_nhwc_window_is_copied_by_runs_of_channels(C, H, stride, padding, kernel, arch):
    # a pixel's 8 channels are one 16-byte cp.async: inside the image, or all padding (zeros)
    torch = pytest.importorskip("torch")
    x, w = half(2, H, H + 2, C), half(kernel, kernel, C, 24)
    xi = input(x.shape, "float16", name="img")
    graph = Graph([xi], [ops.conv2d(xi, taskloom.asarray(w), stride=stride, padding=padding, layout="NHWC")])
    out, report, fn, _ = run(graph, {"img": x}, arch=arch)
    plain = kernel == stride == 1 and padding == 0  # a plain matrix: whole rows by cp.async
    how = "cp.async" if plain else "cp.async of the window's runs"
    assert f"A into [m][k] by {how};" in fn.attr("doc")
    want = torch.nn.functional.conv2d(torch.from_numpy(f32(x)).permute(0, 3, 1, 2),
                                      torch.from_numpy(f32(w)).permute(3, 2, 0, 1), stride=stride, padding=padding)
    np.testing.assert_allclose(f32(out), want.permute(0, 2, 3, 1).numpy(), rtol=2e-3, atol=3e-2)
    assert report.counters.bank_conflicts == 0


def test_channels_that_are_no_whole_run_are_computed_element_by_element():
    x = half(1, 5, 5, 12)
    xi = input(x.shape, "float16", name="img")
    graph = Graph([xi], [ops.conv2d(xi, taskloom.asarray(half(3, 3, 12, 16)), padding=1, layout="NHWC")])
    assert "A into [m][k] by its threads" in run(graph, {"img": x})[2].attr("doc")


@pytest.mark.parametrize("stages", [2, 4])
def test_pipelines_of_other_depths(stages):
    a, w = half(70, 200), half(200, 72)
    ai = input(a.shape, "float16", name="a")
    out, _, _, _ = run(Graph([ai], [ops.matmul(ai, taskloom.asarray(w))]), {"a": a}, MmaConfig(64, 64, 32, (2, 2), stages))
    np.testing.assert_allclose(f32(out), f32(a) @ f32(w), rtol=2e-3, atol=5e-2)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_every_config_builds_without_spills(arch, config):
    a = half(256, 256)
    ai = input(a.shape, "float16", name="a")
    _, report, _, module = run(Graph([ai], [ops.matmul(ai, taskloom.asarray(half(256, 256)))]), {"a": a}, config, arch)
    used = module.built.resources["mm"]
    # the tiles, in static shared memory or (C staged over them) dynamic
    assert not used.spills and used.shared_bytes + report.dynamic_shared == config.shared_bytes(), used


def test_the_template_serves_16_bit_contractions_only():
    x16, x32 = input((16, 32), "float16", name="h"), input((16, 32), name="s")
    for x, dtype, served in ((x16, np.float16, True), (x32, np.float32, False)):
        [group] = fuse_graph(Graph([x], [ops.matmul(x, taskloom.asarray(np.ones((32, 16), dtype)))]))
        assert (mma_candidate(group.task, SM80) is not None) == served


def test_a_float16_graph_compiles_onto_tensor_cores():
    x, w1, w2 = half(8, 64), half(64, 128), half(128, 32)
    xi = input(x.shape, "float16", name="x")
    graph = Graph([xi], [ops.matmul(ops.relu(ops.matmul(xi, taskloom.asarray(w1))), taskloom.asarray(w2))])
    compiled = taskloom.compile(graph, target="cuda:sm_80", device="emulator")
    [out] = compiled(x) if isinstance(compiled(x), (list, tuple)) else [compiled(x)]
    hidden = np.maximum(f32(x) @ f32(w1), 0).astype(np.float16)
    np.testing.assert_allclose(f32(out), f32(hidden) @ f32(w2), rtol=5e-3, atol=5e-2)
    assert sum(r.instructions["mma"] for r in compiled.last_reports) > 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(space()), st.sampled_from([(1, 40, 24, 72), (2, 33, 48, 40), (1, 130, 13, 70)]))
def test_configs_of_the_space_compute_the_product(config, shape):
    batch, M, K, N = shape
    p, q = half(batch, M, K), half(batch, K, N)
    pi, qi = input(p.shape, "float16", name="p"), input(q.shape, "float16", name="q")
    out, report, _, _ = run(Graph([pi, qi], [ops.matmul(pi, qi)]), {"p": p, "q": q}, config)
    np.testing.assert_allclose(f32(out), f32(p) @ f32(q), rtol=2e-3, atol=5e-2)
    assert report.counters.bank_conflicts == 0 and report.instructions["mma"] == mma_count(batch, M, N, K, config)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_config_of_the_space_builds_without_spills_and_as_the_model_estimates(arch):
    a = half(128, 128)
    ai = input(a.shape, "float16", name="a")
    [group] = fuse_graph(Graph([ai], [ops.matmul(ai, taskloom.asarray(half(128, 128)))]))
    con = match_contraction(group.task, (float32, float16, bfloat16))
    fns = [mma_kernel(con, c, f"mm{k}") for k, c in enumerate(space())]
    target = CudaTarget.from_arch(arch)
    used = taskloom.build(fns, target=target, device="emulator").built.resources
    assert not [(c, used[f"mm{k}"]) for k, c in enumerate(space()) if used[f"mm{k}"].spills]
    assert_registers_estimated(space(), used, target, prefix="mm")  # the model's occupancy holds


def test_the_model_keeps_large_tiles_for_large_products():
    for arch in ("sm_80", "sm_90a"):
        target = CudaTarget.from_arch(arch)
        big = choose(Product(1, 4096, 4096, 4096), target)
        # sm_90a takes Hopper's wgmma, whose tiles go larger at the same accumulators a thread
        assert (big.block_m, big.block_n) == ((128, 256) if arch == "sm_90a" else (128, 128))
        assert isinstance(big, WgmmaConfig) == (arch == "sm_90a")
    assert 50 <= len(space()) <= 200


def test_thin_contractions_are_left_to_the_rules():
    """A depthwise convolution (one row of weights, K 9) fills 2% of a tensor-core tile: a
    thread an output does its 9 products; a matrix-vector product (K 768) keeps a template."""
    torch = pytest.importorskip("torch")
    from taskloom.compiler.drivers import schedule_kernel
    from taskloom.schedule.cuda.matmul import matmul_candidate
    x, w = half(1, 16, 7, 9), half(16, 1, 3, 3)
    xi = input(x.shape, "float16", name="x")
    [group] = fuse_graph(Graph([xi], [ops.conv2d(xi, taskloom.asarray(w), padding=1, groups=16)]))
    assert mma_candidate(group.task, SM80) is None and matmul_candidate(group.task, SM80) is None
    fn = schedule_kernel(group.task, SM80, "dw").fn
    assert "a thread an element" in fn.attr("doc")
    out = np.zeros((1, 16, 7, 9), np.float16)
    taskloom.build(fn, target=SM80, device="emulator")["dw"](x, w, out)
    want = torch.nn.functional.conv2d(torch.from_numpy(f32(x)), torch.from_numpy(f32(w)), padding=1, groups=16)
    np.testing.assert_allclose(f32(out), want.numpy(), rtol=2e-3, atol=2e-3)
    v = input((1, 768), "float16", name="v")
    [group] = fuse_graph(Graph([v], [ops.matmul(v, taskloom.asarray(half(768, 768)))]))
    assert mma_candidate(group.task, SM80) is not None


@pytest.mark.parametrize("K, piece", [(68, 8), (70, 4)])
def test_rows_aligned_to_8_or_4_bytes_come_by_smaller_copies(K, piece):
    """A row of 68 halves starts every 136 bytes (8-byte aligned), one of 70 every 140 (4):
    cp.async moves them in 8- or 4-byte pieces, still asynchronous, into the same swizzled tile."""
    a, w = half(40, K), half(K, 24)
    ai = input(a.shape, "float16", name="a")
    out, report, fn, _ = run(Graph([ai], [ops.matmul(ai, taskloom.asarray(w))]), {"a": a}, CONFIGS[1])
    assert f"A into [m][k] by cp.async of {piece} bytes" in fn.attr("doc")
    np.testing.assert_allclose(f32(out), f32(a) @ f32(w), rtol=2e-3, atol=5e-2)
    assert report.counters.bank_conflicts == 0 and report.instructions["cp_async"] > 0


@pytest.mark.parametrize("linear", [False, True], ids=["B [k][n]", "B [n][k]"])
def test_global_loads_and_stores_are_whole_sectors(linear):
    """cp.async requests read 512 bytes in 16 sectors, the fewest there can be; C, staged in
    shared memory, leaves 16 bytes a thread: a warp's request writes 512 bytes, 16 sectors,
    and staging and reading it back meet no bank conflict."""
    a, w = half(256, 256), half(256, 256)
    ai, wi = input(a.shape, "float16", name="a"), input(w.shape, "float16", name="w")
    graph = Graph([ai, wi], [ops.matmul(ai, ops.transpose(wi, 0, 1) if linear else wi)])
    out, report, fn, _ = run(graph, {"a": a, "w": w}, CONFIGS[1])
    c = report.counters
    assert c.global_load_sectors == 16 * c.global_load_requests
    assert "C staged in shared memory" in fn.attr("doc") and c.bank_conflicts == 0
    assert c.global_store_requests == 256 * 256 // 8 // 32 and c.global_store_sectors == 16 * c.global_store_requests
    np.testing.assert_allclose(f32(out), f32(a) @ f32(w.T if linear else w), rtol=2e-3, atol=5e-2)


def test_rows_padded_to_16_bytes_are_copied_whole_and_the_padding_never_read():
    M, K, N = 77, 91, 133  # the factors are the first K and N columns of wider, aligned rows
    a8, b8 = input((M, 96), "float16", name="a8"), input((K, 136), "float16", name="b8")
    graph = Graph([a8, b8], [ops.matmul(ops.slice(a8, 1, 0, K), ops.slice(b8, 1, 0, N))])
    a, b = half(M, 96), half(K, 136)
    a[:, K:], b[:, N:] = np.nan, np.nan  # a piece across a row's end copies only what lies before it
    out, report, fn, _ = run(graph, {"a8": a, "b8": b})
    assert "A into [m][k] by cp.async; B into [k][n] by cp.async" in fn.attr("doc")
    np.testing.assert_allclose(f32(out), f32(a[:, :K]) @ f32(b[:, :N]), rtol=2e-3, atol=5e-2)
    assert report.instructions["cp_async"] == report.counters.global_load_requests


def test_c_staging_can_be_switched_off_to_time_against(monkeypatch):
    a = half(64, 64)
    ai = input(a.shape, "float16", name="a")
    graph = Graph([ai], [ops.matmul(ai, taskloom.asarray(half(64, 128)))])
    [group] = fuse_graph(graph)
    con = match_contraction(group.task, (float32, float16, bfloat16))
    assert "C staged in shared memory" in CONFIGS[1].kernel(con, "mm").attr("doc")
    monkeypatch.setenv("TASKLOOM_STAGE_C", "0")
    fn = CONFIGS[1].kernel(con, "mm")
    assert "C stored from the fragments" in fn.attr("doc") and gpu.SHARED_REUSE not in dict(fn.attrs)
