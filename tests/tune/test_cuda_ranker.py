"""The GPU's learned ranker: features of tensor-core configs, training on one architecture's
records (any GPU of it), and the order ``tune=1`` measures in."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from taskloom.schedule.cuda.matmul_mma import MmaConfig
from taskloom.schedule.cuda.mma_model import Product, choose, cycles, target_space
from taskloom.target import CudaTarget
from taskloom.tune import cuda_ranker
from taskloom.tune.cuda import LEVEL_1, ranked_configs, records_target
from taskloom.tune.records import Records

GPU = dataclasses.replace(CudaTarget.from_arch("sm_90a"), name="GPU A")
PRODUCTS = [Product(1, 512, 512, 512), Product(1, 1024, 768, 768), Product(1, 256, 3072, 768),
            Product(2, 384, 640, 1024)]


def workload(p: Product) -> str:
    return f"matmul_mma/{p.batch}x{p.M}x{p.N}x{p.K}/float16/kx"


def small_tiles(c) -> bool:
    """The family the stand-in clock favours: mma.sync tiles of 32 rows."""
    return isinstance(c, MmaConfig) and c.block_m == 32


def record(records: Records, p: Product, target: CudaTarget = GPU) -> None:
    """Times of every config of ``p``: the model's, but a third for :func:`small_tiles`."""
    for c in target_space(target, 2):
        seconds = cycles(p, c, target) / 1.98e9 / (3 if small_tiles(c) else 1)
        records.add(workload(p), records_target(target), c.to_dict(), seconds)


def test_workloads_parse_into_products_and_factor_bytes():
    assert cuda_ranker.parse_workload("matmul_mma/2x96x72x160/float16/kx") == (Product(2, 96, 72, 160), 2)
    assert cuda_ranker.parse_workload("matmul_mma/1x64x64x64/float32/kk") == (Product(1, 64, 64, 64), 4)
    assert cuda_ranker.parse_workload("matmul_cpu/1x64x64x64") is None


def test_features_price_each_config_against_the_models_best():
    configs = target_space(GPU, 2)
    X = cuda_ranker.features(PRODUCTS[0], configs, GPU, 2)
    assert X.shape == (len(configs), len(cuda_ranker.FEATURE_NAMES)) and np.isfinite(X).all()
    relative = X[:, cuda_ranker.FEATURE_NAMES.index("cycles_vs_best")]
    assert relative.min() == pytest.approx(1.0) and (relative >= 1.0).all()


def test_training_takes_this_architectures_records_of_any_gpu(tmp_path):
    records = Records(tmp_path / "tune.sqlite")
    record(records, PRODUCTS[0])
    record(records, PRODUCTS[1], dataclasses.replace(GPU, name="GPU B"))
    record(records, PRODUCTS[2], CudaTarget.from_arch("sm_80"))  # another architecture's configs
    data, gpus = cuda_ranker.training_set(records, GPU)
    assert sorted(data.workloads) == sorted(map(workload, PRODUCTS[:2])) and gpus == ["GPU A", "GPU B"]
    assert sum(data.groups) == len(data.X) == 2 * len(target_space(GPU, 2))


def test_without_records_tune_1_measures_the_models_best_tune_0s_pick_first(tmp_path):
    configs, chosen = ranked_configs(PRODUCTS[3], GPU, 1, Records(tmp_path / "tune.sqlite"))
    assert len(configs) == LEVEL_1 and configs[0] == choose(PRODUCTS[3], GPU) and "analytic" in chosen


def test_the_ranker_moves_forward_what_records_found_fast(tmp_path):
    pytest.importorskip("lightgbm")
    records = Records(tmp_path / "tune.sqlite")
    for p in PRODUCTS[:3]:
        record(records, p)
    analytic, _ = ranked_configs(PRODUCTS[3], GPU, 2, records)
    learned, gpus = cuda_ranker.learned_order(PRODUCTS[3], analytic, GPU, 2, records)
    assert gpus == ["GPU A"] and sorted(map(str, learned)) == sorted(map(str, analytic))

    def mean_place(order) -> float:
        return float(np.mean([k for k, c in enumerate(order) if small_tiles(c)]))
    assert mean_place(learned) < 0.7 * mean_place(analytic)
    configs, chosen = ranked_configs(PRODUCTS[3], GPU, 1, records)
    assert configs == learned[:LEVEL_1] and "GPU A" in chosen
