"""The bars of schedule finding without measurement: how close ``tune=0`` (the analytic
model's pick) and ``tune=1`` (the learned cost model, trained on the other tasks' records)
come to ``tune=2`` (the whole space measured) on a fixed set of tasks.

    python bench/tune_model.py measure --records R.sqlite      # tune=2 on every task (long)
    python bench/tune_model.py evaluate --records R.sqlite --json OUT.json

``measure`` runs ``tune=2`` on each task into its own record database (resumable: measured
configs are skipped). ``evaluate`` reads those records: tune=0's time is the recorded time
of the model's pick; tune=1 is replayed -- its search runs for real, with a cost model
trained only on the other tasks' records, and each config it asks to measure is answered
with the time tune=2 measured for it (so both levels see the same measurements).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import taskloom
from taskloom.graph import Graph
from taskloom.graph import input as graph_input
from taskloom.graph.fusion import fuse_graph
from taskloom.schedule.contraction import match_contraction
from taskloom.schedule.cpu import template_serves, tunable
from taskloom.target.cpu import CpuTarget
from taskloom.tune import model as analytic
from taskloom.tune.measure import Measurement, side_by_side
from taskloom.schedule.templates.matmul_cpu import MatmulConfig
from taskloom.tune.records import Records, config_key
from taskloom.tune.cost_model import spearman
from taskloom.tune.tuner import _Search, tune_matmul

MATMULS = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (128, 768, 2304),
           (512, 512, 512), (1024, 1024, 1024), (2039, 2039, 2039), (4096, 4096, 4096)]
# ResNet-50 at batch 1: (C, H, W, OC, K, stride, pad), every distinct convolution
RESNET = [(3, 224, 224, 64, 7, 2, 3),
          (64, 56, 56, 64, 1, 1, 0), (64, 56, 56, 256, 1, 1, 0), (256, 56, 56, 64, 1, 1, 0),
          (256, 56, 56, 128, 1, 1, 0), (128, 28, 28, 512, 1, 1, 0), (512, 28, 28, 128, 1, 1, 0),
          (512, 28, 28, 256, 1, 1, 0), (256, 14, 14, 1024, 1, 1, 0), (1024, 14, 14, 256, 1, 1, 0),
          (1024, 14, 14, 512, 1, 1, 0), (512, 7, 7, 2048, 1, 1, 0), (2048, 7, 7, 512, 1, 1, 0),
          (256, 56, 56, 512, 1, 2, 0), (512, 28, 28, 1024, 1, 2, 0), (1024, 14, 14, 2048, 1, 2, 0),
          (64, 56, 56, 64, 3, 1, 1), (128, 28, 28, 128, 3, 1, 1), (256, 14, 14, 256, 3, 1, 1),
          (512, 7, 7, 512, 3, 1, 1), (128, 56, 56, 128, 3, 2, 1), (256, 28, 28, 256, 3, 2, 1),
          (512, 14, 14, 512, 3, 2, 1)]
# MobileNet-V2 depthwise 3x3 at batch 1: (C, H, W, stride)
DEPTHWISE = [(32, 112, 112, 1), (144, 56, 56, 1), (192, 28, 28, 1), (384, 14, 14, 1), (576, 14, 14, 1),
             (960, 7, 7, 1), (96, 112, 112, 2), (144, 56, 56, 2), (192, 28, 28, 2), (576, 14, 14, 2)]


def cases() -> list[tuple[str, Graph]]:
    """Every task of the set as a one-operator graph."""
    rng = np.random.default_rng(0)
    out = []
    for m, n, k in MATMULS:
        a, b = graph_input((m, k), "float32", name="a"), graph_input((k, n), "float32", name="b")
        out.append((f"matmul {m}x{n}x{k}", Graph([a, b], [taskloom.ops.matmul(a, b)])))
    for c, h, w, oc, kk, s, p in RESNET:
        # in the form a compiled ResNet-50 runs them: NHWC after the layout pass, except the
        # 3-channel stem, which stays NCHW (taskloom.compiler.passes.layout)
        if c == 3:
            x = graph_input((1, c, h, w), "float32", name="x")
            wt = taskloom.asarray(rng.standard_normal((oc, c, kk, kk), dtype=np.float32))
            y = taskloom.ops.nn.conv2d(x, wt, stride=s, padding=p)
        else:
            x = graph_input((1, h, w, c), "float32", name="x")
            wt = taskloom.asarray(rng.standard_normal((kk, kk, c, oc), dtype=np.float32))
            y = taskloom.ops.nn.conv2d(x, wt, stride=s, padding=p, layout="NHWC")
        out.append((f"resnet conv {c}x{h}x{w}->{oc} k{kk} s{s}", Graph([x], [y])))
    for c, h, w, s in DEPTHWISE:
        x = graph_input((1, c, h, w), "float32", name="x")
        wt = taskloom.asarray(rng.standard_normal((c, 1, 3, 3), dtype=np.float32))
        y = taskloom.ops.nn.conv2d(x, wt, stride=s, padding=1, groups=c)
        out.append((f"depthwise {c}x{h}x{w} s{s}", Graph([x], [y])))
    return out


def tunables(target: CpuTarget) -> list[tuple[str, object]]:
    """(name, Tunable or the reason it has no schedule space) for every case."""
    out = []
    for name, graph in cases():
        (group,) = [g for g in fuse_graph(graph) if g.anchor is not None]
        con = match_contraction(group.task)
        if con is None or not template_serves(con, target):
            out.append((name, "rule-based: no template, no schedule space"))
        else:
            out.append((name, tunable(con, target)))
    return out


def measure_all(records: Records, target: CpuTarget, only: str | None) -> None:
    for name, t in tunables(target):
        if isinstance(t, str) or (only and only not in name):
            continue
        started = time.perf_counter()
        tune_matmul(t.con.shape, target, level=2, records=records, kernel=t.kernel, args=t.args,
                    workload=t.workload, pack=t.pack, timeout_s=30.0)
        print(f"{name}: measured in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


def confirm(t, target: CpuTarget, keys: list[str], rounds: int = 6) -> dict[str, float]:
    """Median seconds of each config (by key) over ``rounds`` runs that time them side by
    side, each round starting with the next config (:func:`side_by_side`)."""
    unique = list(dict.fromkeys(keys))
    fns = [t.kernel(MatmulConfig.from_dict(json.loads(k))) for k in unique]
    times = side_by_side(fns, t.args, target, rounds, repeats=10, timeout_s=60.0)
    return {k: float(np.median(v)) for k, v in zip(unique, times) if v}


def evaluate(records: Records, target: CpuTarget, confirm_runs: bool = True) -> dict:
    rows, tkey = [], target.key()
    everything = records.records(target=tkey)
    for name, t in tunables(target):
        if isinstance(t, str):
            rows.append({"task": name, "note": t})
            continue
        # tune=2 measures one config per distinct program (model.candidates): the records of
        # the configs it would skip (measured before the space was deduplicated) are left out
        space = {config_key(c.to_dict()) for c in analytic.candidates(t.con.shape, target)}
        measured = {k: v for k, v in records.results(t.workload, tkey).items() if k in space}
        ok = {k: s for k, (s, e) in measured.items() if s is not None and e is None}
        if not ok:
            rows.append({"task": name, "note": "not measured"})
            continue
        best = min(ok.values())
        pick = analytic.best_config(t.con.shape, target, t.pack)
        t0 = ok.get(config_key(pick.to_dict()))
        ranked = analytic.rank(t.con.shape, target, pack=t.pack)
        predicted = {config_key(c.to_dict()): p.seconds for c, p in ranked}
        common = [k for k in ok if k in predicted]
        rho = spearman([predicted[k] for k in common], [ok[k] for k in common])
        # tune=1 replayed: a fresh database holding only the other tasks' records
        with tempfile.TemporaryDirectory() as tmp:
            others = Records(Path(tmp) / "others.sqlite")
            for r in everything:
                if r.workload != t.workload:
                    others.add(r.workload, r.target, r.config, r.seconds, r.error)
            order: list[str] = []

            def kernel(c):
                return c  # the replay measurer needs the config, not a program

            def measurer(functions, args, tgt, *, on_result=None, **kw):
                out = []
                for i, c in enumerate(functions):
                    key = config_key(c.to_dict())
                    order.append(key)
                    s, e = measured.get(key, (None, "not measured by tune=2"))
                    m = Measurement(s, e)
                    out.append(m)
                    if on_result is not None:
                        on_result(i, m)
                return out

            # the first 8 points the search would measure, ranked before any measurement of
            # this task (the search itself may stop sooner on a small space)
            first = _Search(t.con.shape, target, others, t.workload, ranked, 1, t.pack).todo()[:8]
            started = time.perf_counter()
            tune_matmul(t.con.shape, target, level=1, records=others, kernel=kernel, args=t.args,
                        workload=t.workload, pack=t.pack, measurer=measurer, progress=False)
            search_s = time.perf_counter() - started
        k1 = min((k for k in order if k in ok), key=ok.get)
        k2 = min(ok, key=ok.get)
        k0 = config_key(pick.to_dict())
        first8 = min((ok[k] for k in map(config_key, (c.to_dict() for c in first)) if k in ok), default=math.inf)
        # the minimum of 192 noisy times is biased low: time the three winners again, side by
        # side in one run, and compare those
        again = confirm(t, target, [k2, k0, k1]) if confirm_runs else {}
        c2 = again.get(k2)
        rows.append({"task": name, "space": len(ranked), "tune2_measured": len(ok), "best_ms": best * 1e3,
                     "tune0_ms": None if t0 is None else t0 * 1e3,
                     "tune0_ratio": None if t0 is None else t0 / best,
                     "tune1_measured": len(set(order)),  # the finalists timed again are no new points
                     "tune1_ratio": ok[k1] / best, "first8_ratio": first8 / best,
                     "confirmed_tune0_ratio": again[k0] / c2 if c2 and k0 in again else None,
                     "confirmed_tune1_ratio": again[k1] / c2 if c2 and k1 in again else None,
                     "tune1_search_s": search_s, "spearman": rho, "pick": str(pick)})
    return {"rows": rows, "summary": _summary(rows), "target": tkey}


def _summary(rows: list[dict]) -> dict:
    done = [r for r in rows if r.get("tune0_ratio") is not None]
    g = lambda xs: float(math.exp(sum(math.log(x) for x in xs) / len(xs))) if xs else None  # noqa: E731
    conf = [r for r in done if r.get("confirmed_tune0_ratio")]
    return {"tasks": len(done),
            "confirmed_tune0_geomean": g([r["confirmed_tune0_ratio"] for r in conf]),
            "confirmed_tune0_worst": max((r["confirmed_tune0_ratio"] for r in conf), default=None),
            "confirmed_tune1_geomean": g([r["confirmed_tune1_ratio"] for r in conf]),
            "confirmed_tune1_worst": max((r["confirmed_tune1_ratio"] for r in conf), default=None),
            "tune0_geomean": g([r["tune0_ratio"] for r in done]),
            "tune0_worst": max((r["tune0_ratio"] for r in done), default=None),
            "tune1_geomean": g([r["tune1_ratio"] for r in done]),
            "tune1_worst": max((r["tune1_ratio"] for r in done), default=None),
            "tune1_measured_share": (sum(r["tune1_measured"] for r in done) / sum(r["tune2_measured"] for r in done))
            if done else None,
            "first8_within_5pct": sum(r["first8_ratio"] <= 1.05 for r in done),
            "spearman_median": float(np.median([r["spearman"] for r in done if r["spearman"] is not None]))
            if done else None}


def table(result: dict) -> str:
    lines = ["| task | space | tune=2 best ms | tune=0 / tune=2 | tune=1 / tune=2 | re-timed tune=0 / tune=2 | "
             "re-timed tune=1 / tune=2 | tune=1 measured | first 8 / best | Spearman |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "note" in r:
            lines.append(f"| {r['task']} | {r['note']} | | | | | | | | |")
            continue
        t0 = "n/a" if r["tune0_ratio"] is None else f"{r['tune0_ratio']:.3f}"
        rho = "" if r["spearman"] is None else f"{r['spearman']:.2f}"
        c0, c1 = (("n/a" if r.get(k) is None else f"{r[k]:.3f}") for k in ("confirmed_tune0_ratio",
                                                                             "confirmed_tune1_ratio"))
        lines.append(f"| {r['task']} | {r['space']} | {r['best_ms']:.3f} | {t0} | {r['tune1_ratio']:.3f} | {c0} | {c1} | "
                     f"{r['tune1_measured']} of {r['tune2_measured']} | {r['first8_ratio']:.3f} | {rho} |")
    s = result["summary"]
    lines.append("")
    lines.append(f"tasks: {s['tasks']}; tune=0/tune=2 geomean {s['tune0_geomean']:.3f}, worst {s['tune0_worst']:.3f}; "
                 f"tune=1/tune=2 geomean {s['tune1_geomean']:.3f}, worst {s['tune1_worst']:.3f}, measuring "
                 f"{100 * s['tune1_measured_share']:.0f}% of tune=2's points; first 8 within 5% of the best on "
                 f"{s['first8_within_5pct']} of {s['tasks']}; median Spearman (analytic vs measured) "
                 f"{s['spearman_median']:.2f}")
    if s.get("confirmed_tune0_geomean"):
        lines.append(f"re-timed side by side (median of 6 rounds, each starting with the next config): tune=0/tune=2 geomean {s['confirmed_tune0_geomean']:.3f}, "
                     f"worst {s['confirmed_tune0_worst']:.3f}; tune=1/tune=2 geomean {s['confirmed_tune1_geomean']:.3f}, "
                     f"worst {s['confirmed_tune1_worst']:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("measure", "evaluate"))
    p.add_argument("--records", required=True, help="the record database of this benchmark")
    p.add_argument("--only", help="measure only tasks whose name contains this")
    p.add_argument("--json", help="write the evaluation here")
    p.add_argument("--no-confirm", action="store_true", help="do not re-time the winners side by side")
    args = p.parse_args(argv)
    target = CpuTarget.host()
    records = Records(args.records)
    if args.action == "measure":
        measure_all(records, target, args.only)
        return 0
    result = evaluate(records, target, confirm_runs=not args.no_confirm)
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
