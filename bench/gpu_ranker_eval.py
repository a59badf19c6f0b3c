"""How well the GPU's learned ranker orders a product it never saw: leave one workload out.

For each tensor-core workload in a records export, the ranker trains on the others (the same
architecture's records), and three orders of the held-out product's measured configs are
set against its measured times: the analytic model's, the learned model's alone, and the
blend ``tune=1`` uses. Reported per order: the first config's time over the fastest
(what ``tune=0`` would pay if it took that order's first), the best of the first
``LEVEL_1`` (what ``tune=1`` would find), and the rank correlation with the clock.

    python bench/gpu_ranker_eval.py bench/results/2026-11-28-h100-second-run/run1/records.jsonl
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from taskloom.schedule.cuda.mma_model import config_from_dict, rank  # noqa: E402
from taskloom.target.cuda import CudaTarget  # noqa: E402
from taskloom.tune import cuda_ranker  # noqa: E402
from taskloom.tune.cost_model import CostModel, spearman  # noqa: E402
from taskloom.tune.cuda import LEVEL_1  # noqa: E402
from taskloom.tune.records import Records  # noqa: E402


def evaluate(records: Records, target: CudaTarget, seeds: int) -> list[dict]:
    rows = []
    workloads = sorted({r.workload for r in records.records(workload="matmul_mma/*")})
    for held in workloads:
        product, nbytes = cuda_ranker.parse_workload(held)  # type: ignore[misc]
        measured = {}
        for r in records.records(workload=held):
            if r.target.startswith(f"{target.key()}/") and r.seconds is not None:
                c = config_from_dict(r.config)
                measured[str(c)] = (c, r.seconds)
        configs = sorted((c for c, _ in measured.values()), key=lambda c: rank(product, c, target, nbytes))
        seconds = np.asarray([measured[str(c)][1] for c in configs])
        data, gpus = cuda_ranker.training_set(records, target, exclude=held)
        X = cuda_ranker.features(product, configs, target, nbytes)
        scores = np.mean([CostModel(seed, cuda_ranker.FEATURE_NAMES).fit(data).scores(X) for seed in range(seeds)],
                         axis=0)
        orders = {"analytic": list(range(len(configs))),
                  "learned": sorted(range(len(configs)), key=lambda i: -scores[i]),
                  "blend": [configs.index(c) for c in cuda_ranker.blended_order(configs, scores)]}
        best = seconds.min()
        row = {"workload": held, "configs": len(configs), "trained_on": len(data.groups), "gpus": gpus}
        for name, order in orders.items():
            row[name] = (seconds[order[0]] / best, seconds[order[:LEVEL_1]].min() / best,
                         spearman([float(order.index(i)) for i in range(len(configs))], list(seconds)))
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", help="a records export (.jsonl) with tensor-core workloads")
    ap.add_argument("--arch", default="sm_90a", help="the architecture the records were measured on")
    ap.add_argument("--seeds", type=int, default=3, help="models trained per held-out workload, scores averaged")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        records = Records(Path(d) / "records.sqlite")
        records.import_file(args.records)
        rows = evaluate(records, CudaTarget.from_arch(args.arch), args.seeds)
    orders = ("analytic", "learned", "blend")
    print(f"| held-out workload | configs | {' | '.join(f'{o}: first, best of {LEVEL_1}, rho' for o in orders)} |")
    print("|---|---|---|---|---|")
    for r in rows:
        cells = [" / ".join(f"{x:.3f}" if x is not None else "-" for x in r[o]) for o in orders]
        print(f"| {r['workload']} | {r['configs']} | " + " | ".join(cells) + " |")
    for o in orders:
        first = math.exp(np.mean([math.log(r[o][0]) for r in rows]))
        top = math.exp(np.mean([math.log(r[o][1]) for r in rows]))
        print(f"{o}: first {first:.3f}x the fastest, best of {LEVEL_1} {top:.3f}x (geometric means)")
    print("trained on the records of:", ", ".join(sorted({g for r in rows for g in r["gpus"]})))


if __name__ == "__main__":
    main()
