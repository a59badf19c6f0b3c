"""Fits the GPU model's Hopper constants (``mma_model.HARDWARE[9]``) to a GPU session's
tuning records: every config of the space timed on the device for a few products. Reports,
per product, the rank correlation of the model's cycles with the measured times and the
time of the model's pick against the fastest, for the constants in the code and for the
fitted ones (a coordinate search on a log scale, minimizing the squared log error of
cycles / clock against seconds, the clock fitted with them).

    python3 bench/fit_gpu_model.py bench/results/2026-11-28-h100-second-run/run1/records.jsonl
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from taskloom.schedule.cuda import mma_model as m
from taskloom.target import CudaTarget
from taskloom.tune.cost_model import spearman

TARGET = CudaTarget.from_arch("sm_90a")
FIELDS = ("mma_rate", "wgmma_rate", "l2_bytes", "load_latency", "step_latency", "wgmma_step_latency",
          "block_overhead")


def load(path: Path) -> dict[m.Product, list[tuple[m.TensorCoreConfig, float]]]:
    """The records' timings by product (``matmul_mma/BxMxNxK/...`` workloads)."""
    found: dict[m.Product, list] = {}
    for line in path.read_text().splitlines()[1:]:
        r = json.loads(line)
        if r.get("error") or not r["workload"].startswith("matmul_mma/"):
            continue
        b, M, N, K = map(int, r["workload"].split("/")[1].split("x"))
        found.setdefault(m.Product(b, M, N, K), []).append((m.config_from_dict(r["config"]), r["seconds"]))
    return found


def predicted(hw: m.Hardware, product: m.Product, configs: list) -> np.ndarray:
    with _constants(hw):
        return np.array([m.cycles(product, c, TARGET) for c in configs])


#: How much the Nsight Compute anchors (:data:`mma_model.ANCHORS`) weigh against the mean
#: of the records' errors (0: not at all)
ANCHOR_WEIGHT = 0.0


class _constants:
    """``HARDWARE[9]`` set to ``hw`` inside the ``with``."""

    def __init__(self, hw: m.Hardware):
        self.hw, self.saved = hw, dict(m.HARDWARE)

    def __enter__(self) -> None:
        m.HARDWARE[9] = self.hw

    def __exit__(self, *exc: object) -> None:
        m.HARDWARE.clear()
        m.HARDWARE.update(self.saved)


def picked(hw: m.Hardware, product: m.Product, configs: list) -> int:
    """The index of the config the model picks (:func:`mma_model.rank`: its ties broken as
    ``choose`` breaks them)."""
    with _constants(hw):
        return min(range(len(configs)), key=lambda k: m.rank(product, configs[k], TARGET, 2))


def anchors(hw: m.Hardware) -> list[str]:
    """The model's cycles against the Nsight Compute anchors (mma.sync kernels)."""
    with _constants(hw):
        return [f"  anchor {p.M}x{p.N}x{p.K} {c}: model {m.cycles(p, c, CudaTarget.from_arch(arch)):,.0f} cycles, "
                f"measured {want:,} ({m.cycles(p, c, CudaTarget.from_arch(arch)) / want - 1:+.1%})"
                for arch, p, c, want in m.ANCHORS]


def loss(hw: m.Hardware, data: dict) -> tuple[float, float]:
    """The squared log error over every timing, the clock (Hz) chosen best; and that clock."""
    logs = []
    for product, rows in data.items():
        cyc = predicted(hw, product, [c for c, _ in rows])
        logs += [math.log(c) - math.log(s) for c, (_, s) in zip(cyc, rows)]
    a = np.array(logs)
    clock = float(np.exp(np.mean(a)))  # cycles / seconds
    err = float(np.mean((a - np.log(clock)) ** 2))
    if ANCHOR_WEIGHT:  # the anchors' cycles were measured with their clocks: no clock to fit
        with _constants(hw):
            err += ANCHOR_WEIGHT * sum((math.log(m.cycles(p, c, CudaTarget.from_arch(arch)) / want)) ** 2
                                       for arch, p, c, want in m.ANCHORS) / len(m.ANCHORS)
    return err, clock


def fit(hw: m.Hardware, data: dict, rounds: int = 4) -> m.Hardware:
    best, (err, _) = hw, loss(hw, data)
    for _ in range(rounds):
        for f in FIELDS:
            if getattr(best, f) == 0:
                continue
            for scale in (0.5, 0.7, 0.85, 1.2, 1.4, 2.0):
                value = getattr(best, f) * scale
                value = round(value) if isinstance(getattr(best, f), int) else value
                trial = dataclasses.replace(best, **{f: value})
                e, _ = loss(trial, data)
                if e < err:
                    best, err = trial, e
    return best


def report(hw: m.Hardware, data: dict, title: str) -> list[str]:
    err, clock = loss(hw, data)
    lines = [f"{title}: {hw}", f"  squared log error {err:.4f}, fitted clock {clock / 1e9:.2f} GHz", *anchors(hw)]
    for product, rows in data.items():
        configs, seconds = [c for c, _ in rows], np.array([s for _, s in rows])
        cyc = predicted(hw, product, configs)
        pick = picked(hw, product, configs)
        lines.append(f"  {product.M}x{product.N}x{product.K}: rank correlation {spearman(list(cyc), list(seconds)):.3f}, "
                     f"pick {seconds[pick] * 1e6:.1f} us ({configs[pick]}) against the fastest "
                     f"{seconds.min() * 1e6:.1f} us: {seconds[pick] / seconds.min():.3f}x")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", type=Path)
    parser.add_argument("--anchors", type=float, default=0.0, help="the anchors' weight in the fit")
    args = parser.parse_args()
    global ANCHOR_WEIGHT
    ANCHOR_WEIGHT = args.anchors
    data = load(args.records)
    now = m.HARDWARE[9]
    print("\n".join(report(now, data, "in the code")))
    print("\n".join(report(fit(now, data), data, "fitted")))


if __name__ == "__main__":
    main()
