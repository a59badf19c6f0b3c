"""The learned ranker of the tensor-core template's configs, trained on GPU tuning records.

``tune=1`` on the GPU measures :data:`~taskloom.tune.cuda.LEVEL_1` configs of a contraction.
Which ones: the analytic model's best (:mod:`taskloom.schedule.cuda.mma_model`), re-ranked by
a LightGBM lambdarank model trained on every record of the same architecture
(``cuda-sm_90a/...``, whatever GPU of it measured them), the two ranks averaged as on the CPU
(:mod:`taskloom.tune.tuner`): each is wrong in its own way.

A config's features (:data:`FEATURE_NAMES`) are the product's sizes, the config's fields and
what the analytic model derives from both on this target: blocks, waves of blocks over the
SMs and the last wave's fill, blocks an SM holds at once, the edge tiles' padding, registers
and shared memory, and the model's cycles in parts (:func:`~taskloom.schedule.cuda.mma_model.cycle_parts`),
each also relative to the best the model predicts for the product, since a ranking compares
configs of one product.
"""
from __future__ import annotations

import math
import re
from typing import Sequence

import numpy as np

from taskloom.schedule.cuda.mma_model import (Product, TensorCoreConfig, blocks_per_sm, config_from_dict,
                                              cycle_parts, registers, target_space)
from taskloom.schedule.cuda.matmul_wgmma import WgmmaConfig
from taskloom.target.cuda import CudaTarget
from taskloom.tune.cost_model import TrainingSet, blended_ranks
from taskloom.tune.records import Records

FEATURE_NAMES = (
    "log_batch", "log_m", "log_n", "log_k", "bytes", "wgmma", "block_m", "block_n", "block_k", "warps", "stages",
    "warpgroups", "tma", "producer", "blocks", "waves", "last_wave_fill", "blocks_per_sm", "padding",
    "registers", "shared_kib", "log_cycles", "cycles_vs_best", "tensor_share", "alone_share", "reads_share",
    "latency_share", "dram_share", "rounds", "steps")

_WORKLOAD = re.compile(r"^matmul_mma/(\d+)x(\d+)x(\d+)x(\d+)/(\w+)/([kx]{2})$")


def parse_workload(workload: str) -> tuple[Product, int] | None:
    """A tensor-core record's product and factor bytes (4 for tf32); None for another template's."""
    m = _WORKLOAD.match(workload)
    if m is None:
        return None
    batch, M, N, K = map(int, m.groups()[:4])
    return Product(batch, M, N, K), 4 if m.group(5) == "float32" else 2


def features(p: Product, configs: Sequence[TensorCoreConfig], target: CudaTarget, nbytes: int) -> np.ndarray:
    """One row of :data:`FEATURE_NAMES` per config of ``configs`` for product ``p``."""
    major = target.compute_capability[0]
    parts = [cycle_parts(p, c, target, nbytes) for c in configs]
    best = min(cycle_parts(p, c, target, nbytes)["total"] for c in target_space(target, nbytes))
    rows = []
    for c, q in zip(configs, parts):
        wgmma = isinstance(c, WgmmaConfig)
        held = max(blocks_per_sm(c, target, nbytes), 1)
        waves = q["blocks"] / (target.num_sms * held)
        padded = math.ceil(p.M / c.block_m) * c.block_m * math.ceil(p.N / c.block_n) * c.block_n
        step = q["step"]
        rows.append([
            math.log2(p.batch), math.log2(p.M), math.log2(p.N), math.log2(p.K), nbytes, float(wgmma),
            c.block_m, c.block_n, c.block_k, c.threads // 32, c.stages,
            c.warpgroups if wgmma else 0, float(getattr(c, "tma", False)), float(getattr(c, "specialized", False)),
            q["blocks"], waves, waves / math.ceil(waves) if waves else 0.0, held, padded / (p.M * p.N),
            registers(c, nbytes, major), c.shared_bytes(nbytes) / 1024, math.log2(q["total"]),
            q["total"] / best, q["tensor"] / step, q["alone"] / step, q["reads"] / step, q["latency"] / step,
            q["dram"] / q["total"], q["rounds"], q["steps"]])
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURE_NAMES))


def training_set(records: Records, target: CudaTarget, *, exclude: str | None = None) -> tuple[TrainingSet, list[str]]:
    """Every successful tensor-core record of ``target``'s architecture (any GPU of it), but
    workload ``exclude``, featurized on ``target`` and grouped by workload and GPU; and the
    GPUs whose records these are."""
    arch = f"{target.key()}/"
    by_task: dict[tuple[str, str], dict[str, tuple[TensorCoreConfig, float]]] = {}
    for r in records.records(workload="matmul_mma/*"):
        if not r.target.startswith(arch) or r.seconds is None or r.error is not None or r.workload == exclude:
            continue
        try:
            c = config_from_dict(r.config)
        except (KeyError, TypeError, ValueError):
            continue
        by_task.setdefault((r.workload, r.target), {})[str(c)] = (c, r.seconds)  # a config's latest time
    Xs, ys, groups, names, gpus = [], [], [], [], set()
    for (workload, where), measured in sorted(by_task.items()):
        parsed = parse_workload(workload)
        if parsed is None or len(measured) < 2:
            continue  # one point ranks nothing
        product, nbytes = parsed
        configs, seconds = zip(*measured.values())
        Xs.append(features(product, configs, target, nbytes))
        ys.append(np.asarray(seconds))
        groups.append(len(configs))
        names.append(workload)
        gpus.add(where[len(arch):])
    if not Xs:
        return TrainingSet(np.zeros((0, len(FEATURE_NAMES))), np.zeros(0), [], []), []
    return TrainingSet(np.concatenate(Xs), np.concatenate(ys), groups, names), sorted(gpus)


def blended_order(configs: Sequence[TensorCoreConfig], scores: np.ndarray) -> list[TensorCoreConfig]:
    """``configs`` (in the analytic model's order) re-ordered by the mean of their analytic
    and learned ranks (higher ``scores`` predicted faster), ties to the analytic order."""
    return [configs[i] for i in blended_ranks(range(len(configs)), scores)]


def learned_order(p: Product, configs: Sequence[TensorCoreConfig], target: CudaTarget, nbytes: int,
                  records: Records) -> tuple[list[TensorCoreConfig], list[str]] | None:
    """``configs`` (the analytic model's order) in the blended order of a ranker trained on
    ``records`` of this architecture, and the GPUs that measured them; None without LightGBM
    or without records to train on."""
    from taskloom.tune.cost_model import CostModel, load_ranker
    if load_ranker() is None:
        return None
    data, gpus = training_set(records, target)
    if not data.groups:
        return None
    model = CostModel(feature_names=FEATURE_NAMES).fit(data)
    return blended_order(configs, model.scores(features(p, configs, target, nbytes))), gpus


__all__ = ["FEATURE_NAMES", "blended_order", "features", "learned_order", "parse_workload", "training_set"]
