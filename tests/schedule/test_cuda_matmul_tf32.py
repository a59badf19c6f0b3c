"""float32 contractions on tensor cores as tf32, where the target allows it: mma.sync m16n8k8
fed by ldmatrix from K-contiguous tiles and by the lanes from [k][x] ones, run in the emulator
to numpy's answer on tf32 inputs, with no bank conflicts and exactly the tiles' mma count."""
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
from taskloom.runtime.emulator.values import tf32_round
from taskloom.schedule.cuda.matmul_mma import CONFIGS, MmaConfig, mma_candidate
from taskloom.schedule.cuda.mma_model import choose, space
from taskloom.target import CudaTarget
from tests.schedule.test_cuda_mma_model import assert_registers_estimated

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
rng = np.random.default_rng(0)
TF32 = CudaTarget.from_string("cuda:sm_80 -tf32")


def product(M: int, K: int, N: int, a_k_inner: bool, b_k_inner: bool):
    """A graph of relu(A B), A read [m][k] or transposed, B [k][n] or transposed; its feeds
    and the tf32 answer."""
    a = rng.standard_normal((M, K) if a_k_inner else (K, M)).astype(np.float32)
    b = rng.standard_normal((N, K) if b_k_inner else (K, N)).astype(np.float32)
    ai, bi = input(a.shape, name="a"), input(b.shape, name="b")
    A = ai if a_k_inner else ops.transpose(ai, 0, 1)
    B = ops.transpose(bi, 0, 1) if b_k_inner else bi
    # the template rounds the factors to nearest tf32, as cuBLAS does
    want = np.maximum(tf32_round(a if a_k_inner else a.T).astype(np.float64) @ tf32_round(b.T if b_k_inner else b), 0)
    return Graph([ai, bi], [ops.relu(ops.matmul(A, B))]), {id(ai): a, id(bi): b}, want


def run(graph: Graph, feeds: dict, config: MmaConfig | None = None, target: CudaTarget = TF32):
    [group] = fuse_graph(graph)
    found = mma_candidate(group.task, target)
    assert found is not None
    config = config or choose(found.tunable, target)
    fn = found.build(config, "mm").fn
    module = taskloom.build(fn, target=target, device="emulator")
    out = np.zeros(tuple(int(d) for d in graph.outputs[0].shape), np.float32)
    report = module["mm"](*[feeds[id(t)] for t in group.inputs], out)
    return out, report, fn, module, config


def mma_count(M: int, N: int, K: int, c: MmaConfig) -> int:
    tiles = -(-M // c.block_m) * -(-N // c.block_n)
    return tiles * (c.block_m // 16) * (c.block_n // 8) * (-(-K // c.block_k) * c.block_k // 8)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([(37, 45, 29), (64, 64, 64), (50, 72, 40), (16, 8, 136)]), st.booleans(), st.booleans(),
       st.sampled_from(space(4)))
def test_products_of_any_layout_and_shape_on_tf32(shape, a_k_inner, b_k_inner, config):
    M, K, N = shape
    graph, feeds, want = product(M, K, N, a_k_inner, b_k_inner)
    out, report, fn, _, _ = run(graph, feeds, config)
    assert "mma.sync m16n8k8 tf32" in fn.attr("doc")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    assert report.counters.bank_conflicts == 0
    assert report.instructions["mma"] == mma_count(M, N, K, config)


def test_k_contiguous_factors_come_by_ldmatrix_and_the_others_by_the_lanes():
    graph, feeds, _ = product(64, 64, 64, True, True)
    _, report, *_ = run(graph, feeds, CONFIGS[1])
    # no lane reads a factor's tile: the shared loads are C's staged runs read back, 16 bytes each
    assert report.instructions["shared_load"] == 64 * 64 // 4 // 32 and report.instructions["ldmatrix"] > 0
    graph, feeds, want = product(64, 64, 64, False, False)
    out, report, *_ = run(graph, feeds, CONFIGS[1])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    assert report.instructions["ldmatrix"] == 0 and report.counters.shared_load_conflicts == 0


@pytest.mark.parametrize("b_k_inner", [False, True], ids=["slots rotating", "slots unrolled"])
def test_many_steps_reuse_every_slot(b_k_inner):
    """K of 9 steps through 3 slots: lane-read fragments rotate two slot counters, ldmatrix
    ones run in unrolled groups of 3 steps; both reuse each slot three times."""
    config = MmaConfig(64, 64, 32, (2, 2), 3)
    graph, feeds, want = product(40, 280, 72, True, b_k_inner)
    out, report, fn, _, _ = run(graph, feeds, config)
    assert ("read_slot" in repr(fn.body)) == (not b_k_inner)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    assert report.counters.bank_conflicts == 0 and report.instructions["mma"] == mma_count(40, 72, 280, config)


def test_the_large_tile_runs_from_dynamic_shared_memory():
    config = MmaConfig(128, 128, 32, (2, 2), 3)  # 96 KiB of float32 tiles
    graph, feeds, want = product(130, 72, 136, True, False)
    out, report, fn, _, _ = run(graph, feeds, config)
    assert int(gpu.launch_dims(fn)[2].value) == config.shared_bytes(4) == report.dynamic_shared
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    assert report.counters.bank_conflicts == 0 and report.instructions["mma"] == mma_count(130, 136, 72, config)


def test_tf32_is_chosen_by_the_target_only():
    x = input((16, 32), name="x")
    [group] = fuse_graph(Graph([x], [ops.matmul(x, taskloom.asarray(np.ones((32, 16), np.float32)))]))
    assert mma_candidate(group.task, CudaTarget.from_arch("sm_80")) is None
    assert mma_candidate(group.task, TF32) is not None


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (128, 768, 768)])
def test_the_models_picks_build_without_spills(arch, shape):
    M, K, N = shape
    a, b = input((M, K), name="a"), input((K, N), name="b")
    graph = Graph([a, b], [ops.matmul(a, b)])
    target = CudaTarget.from_string(f"cuda:{arch} -tf32")
    [group] = fuse_graph(graph)
    found = mma_candidate(group.task, target)
    config = choose(found.tunable, target)
    fn = found.build(config, "mm").fn
    used = taskloom.build(fn, target=target, device="emulator").built.resources["mm"]
    # past 48 KiB, or with C staged over them, the tiles are in dynamic shared memory
    dynamic = int(gpu.launch_dims(fn)[2].value)
    assert not used.spills and used.shared_bytes + dynamic == config.shared_bytes(4), used
    assert (dynamic > 0) == (config.shared_bytes(4) > 48 * 1024 or "C staged" in fn.attr("doc"))


def test_a_float32_model_compiled_with_tf32_runs_on_tensor_cores():
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 64), (64, 128), (128, 32)))
    xi = input(x.shape, name="x")
    graph = Graph([xi], [ops.matmul(ops.relu(ops.matmul(xi, taskloom.asarray(w1))), taskloom.asarray(w2))])
    compiled = taskloom.compile(graph, target="cuda:sm_80 -tf32", device="emulator")
    out = compiled(x)
    out = out[0] if isinstance(out, (list, tuple)) else out
    want = np.maximum(x @ w1, 0) @ w2
    assert np.abs(np.asarray(out) - want).max() < 3e-3 * np.abs(want).max()  # tf32's 10 bits, twice
    assert sum(r.instructions["mma"] for r in compiled.last_reports) > 0


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_tf32_config_of_the_space_builds_without_spills_and_as_the_model_estimates(arch):
    a, b = input((128, 128), name="a"), input((128, 128), name="b")
    target = CudaTarget.from_string(f"cuda:{arch} -tf32")
    [group] = fuse_graph(Graph([a, b], [ops.matmul(a, b)]))
    found = mma_candidate(group.task, target)
    fns = [found.build(c, f"mm{k}").fn for k, c in enumerate(space(4))]
    used = taskloom.build(fns, target=target, device="emulator").built.resources
    assert not [(c, used[f"mm{k}"]) for k, c in enumerate(space(4)) if used[f"mm{k}"].spills]
    assert_registers_estimated(space(4), used, target, 4, prefix="mm")  # the model's occupancy holds


def test_float32_rows_of_any_length_come_by_cp_async():
    graph, feeds, want = product(37, 45, 29, True, False)  # rows of 45 and 29 floats: 4-byte aligned only
    out, report, fn, _, _ = run(graph, feeds, CONFIGS[1])
    assert "A into [m][k] by cp.async of 4 bytes; B into [k][n] by cp.async of 4 bytes" in fn.attr("doc")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    assert report.counters.bank_conflicts == 0


def test_factors_are_rounded_to_nearest_tf32_not_cut():
    """A product whose factors sit just under a tf32 step: cutting the low 13 bits would make
    every product smaller (the sum 0.05% low); rounding to nearest keeps it within tf32's
    half step of each factor, unbiased."""
    a = np.full((64, 64), np.float32(1.0) - np.float32(2.0 ** -12), np.float32)  # rounds up to 1
    b = np.ones((64, 32), np.float32)
    ai, bi = input(a.shape, name="a"), input(b.shape, name="b")
    out, _, _, _, _ = run(Graph([ai, bi], [ops.matmul(ai, bi)]), {id(ai): a, id(bi): b}, CONFIGS[1])
    np.testing.assert_array_equal(out, np.full((64, 32), 64.0, np.float32))


def test_tf32_round_is_to_nearest_with_ties_away_and_keeps_specials():
    x = np.array([1 + 2.0 ** -11, 1 + 2.0 ** -12, 1 + 3 * 2.0 ** -12, -(1 + 2.0 ** -11), np.inf, -np.inf, 0.0],
                 np.float32)
    got = tf32_round(x)
    np.testing.assert_array_equal(got[:4], np.array([1 + 2.0 ** -10, 1, 1 + 2.0 ** -10, -(1 + 2.0 ** -10)], np.float32))
    assert np.isinf(got[4]) and np.isinf(got[5]) and got[6] == 0 and np.isnan(tf32_round(np.array([np.nan], np.float32)))[0]
