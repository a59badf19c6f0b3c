"""Tuning the tensor-core template by measurement: every config timed (here by a stand-in
for the GPU's clock), each time recorded under the GPU's name, the fastest taken at tune=0
on that GPU alone; without a GPU, a clear warning and the model's choice."""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.schedule.cuda.matmul_mma import mma_candidate
from taskloom.schedule.cuda.mma_model import choose, target_space
from taskloom.target import CudaTarget
from taskloom.tune.cuda import LEVEL_1, mma_workload, recorded_mma, records_target, tune_mma
from taskloom.tune.records import Records

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
GPU = dataclasses.replace(CudaTarget.from_arch("sm_90a"), name="a test GPU")


def product(M=96, K=160, N=72):
    a, b = input((M, K), "float16", name="a"), input((K, N), "float16", name="b")
    return Graph([a, b], [ops.relu(ops.matmul(a, b))])


def candidate(graph, target=GPU):
    [group] = fuse_graph(graph)
    return mma_candidate(group.task, target)


def clock(fns, target):
    """A stand-in for the GPU: 64x32 tiles in 2 stages are fastest (the first such config
    wins the tie), one config fails."""
    out = []
    for fn in fns:
        doc = fn.attr("doc")
        if "128x128x32, 4 stages" in doc:
            out.append(RuntimeError("too many resources requested for launch"))
            continue
        fast = ("64x32x32" in doc) + ("2 stages" in doc)
        out.append(1e-5 / (1 + fast))  # ties among the rest, and among the fastest
    return out


def test_tune_2_times_the_whole_space_and_records_every_time(tmp_path):
    records = Records(tmp_path / "tune.sqlite")
    found = candidate(product())
    best = tune_mma(found, GPU, 2, records, timer=clock, progress=False)
    assert (best.block_m, best.block_n, best.stages) == (64, 32, 2)
    workload = mma_workload(found.tunable, GPU)
    assert workload == "matmul_mma/1x96x72x160/float16/kx"
    results = records.results(workload, records_target(GPU))
    assert len(results) == len(target_space(GPU, 2))  # mma.sync's and wgmma's
    assert sum(error is not None for _, error in results.values()) == 1
    assert recorded_mma(found.tunable, GPU, records) == best
    other = dataclasses.replace(GPU, name="another GPU")  # another GPU's times are not this one's
    assert recorded_mma(found.tunable, other, records) is None


def test_tune_1_times_the_models_best_few(tmp_path):
    records = Records(tmp_path / "tune.sqlite")
    found = candidate(product())
    tune_mma(found, GPU, 1, records, timer=clock, progress=False)
    assert len(records.results(mma_workload(found.tunable, GPU), records_target(GPU))) == LEVEL_1


def test_tune_0_compiles_with_this_gpus_fastest_record(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path))  # the default records, private to this test
    graph = product()
    before = taskloom.compile(graph, target=GPU, device="emulator").meta["kernels"][0]["schedule"]
    assert "64x32x32, 2 stages" not in before and str(choose(candidate(graph).tunable, GPU).block_m) in before
    tune_mma(candidate(graph), GPU, 2, Records.default(), timer=clock, progress=False)
    model = taskloom.compile(graph, target=GPU, device="emulator")
    assert "64x32x32, 2 stages" in model.meta["kernels"][0]["schedule"]
    x, y = (np.random.default_rng(0).standard_normal(s).astype(np.float16) for s in ((96, 160), (160, 72)))
    np.testing.assert_allclose(model(x, y).astype(np.float32),
                               np.maximum(x.astype(np.float32) @ y.astype(np.float32), 0), rtol=5e-3, atol=5e-2)


def test_without_a_gpu_tuning_warns_and_takes_the_models_choice():
    with pytest.warns(RuntimeWarning, match="tuned on the GPU it compiles for"):
        model = taskloom.compile(product(), target="cuda:sm_90a", tune=2, device="emulator")
    hopper = CudaTarget.from_arch("sm_90a")
    assert model.meta["kernels"][0]["schedule"].endswith(str(choose(candidate(product(), hopper).tunable, hopper)))


@pytest.mark.cuda
def test_on_the_gpu_tune_1_times_real_kernels(tmp_path):
    records = Records(tmp_path / "tune.sqlite")
    target = CudaTarget.device()
    found = candidate(product(200, 320, 136), target)
    tune_mma(found, target, 1, records, progress=False)
    results = records.results(mma_workload(found.tunable, target), records_target(target))
    assert len(results) == LEVEL_1 and all(s is not None and 0 < s < 1e-2 for s, _ in results.values())
