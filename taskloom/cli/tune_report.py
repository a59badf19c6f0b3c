"""``taskloom tune report``: how well the models predict what was measured.

For each tuned workload (a record key, a prefix ending in ``*``, or every template task of a
benchmark model with ``--model``): the size of its schedule space (and how many configs the
analytic model rejects before building), how many configs were built and measured, the best
time, how far the analytic model's pick is from it, and the rank correlation (Spearman)
between predicted and measured times -- for the analytic model, and for the learned model
trained on the other workloads' records. ``--plot FILE`` draws predicted against measured
time, one colour per workload (matplotlib).

    taskloom tune report 'matmul_cpu/*'
    taskloom tune report --model resnet50 --plot resnet50-model.png
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field

import numpy as np

from taskloom.errors import ArgumentError, TaskloomError
from taskloom.schedule.templates.matmul_cpu import MatmulConfig
from taskloom.target import Target, get_target
from taskloom.tune import model as analytic
from taskloom.tune.cost_model import spearman
from taskloom.tune.records import Records, config_key


@dataclass
class WorkloadReport:
    """What the report says of one workload."""

    workload: str
    space: int
    rejected: int
    measured: int
    failed: int
    best_s: float | None
    pick_ratio: float | None            # the analytic pick's measured time over the best
    spearman_analytic: float | None
    spearman_learned: float | None
    points: list[tuple[float, float]] = field(default_factory=list)  # (predicted, measured) seconds


def report_workload(records: Records, workload: str, target: Target, learned: bool = True) -> WorkloadReport:
    """The report of one matmul-template ``workload`` on ``target``."""
    from taskloom.tune import cost_model
    parsed = cost_model.parse_workload(workload, target)
    if parsed is None:
        raise ArgumentError(f"tune report: {workload!r} is not a matmul-template workload key "
                            f"(matmul_cpu/BxMxNxK[/packA+B/digest])")
    shape, pack = parsed
    configs = analytic.candidates(shape, target)
    predictions = {config_key(c.to_dict()): analytic.predict(shape, c, target, pack=pack) for c in configs}
    results = records.results(workload, target.key())
    ok = {k: s for k, (s, e) in results.items() if s is not None and e is None}
    pairs = [(predictions[k].seconds, s) for k, s in ok.items() if k in predictions and predictions[k].ok]
    best = min(ok.values()) if ok else None
    pick = config_key(analytic.best_config(shape, target, pack).to_dict())
    rho_learned = None
    if learned and len(ok) >= 3 and cost_model.load_ranker() is not None:
        data = cost_model.training_set(records, target, exclude=workload)
        if data.groups:
            ranker = cost_model.CostModel().fit(data)
            keys = list(ok)
            X = cost_model.FeatureCache(records).get_many(
                [(shape, pack, MatmulConfig.from_dict(json.loads(k))) for k in keys], target)
            rho_learned = spearman(list(-ranker.scores(X)), [ok[k] for k in keys])
    return WorkloadReport(workload, len(configs), sum(not p.ok for p in predictions.values()), len(results),
                          len(results) - len(ok), best, ok[pick] / best if best and pick in ok else None,
                          spearman([p for p, _ in pairs], [m for _, m in pairs]), rho_learned, pairs)


def model_workloads(name: str, batch: int, seq: int, target: Target) -> list[str]:
    """The template workloads of benchmark model ``name``, as compiling it at tune=0 finds them."""
    import torch

    from taskloom.bench import zoo
    from taskloom.frontend.torch import Backend
    from taskloom.graph.fusion import fuse_graph
    from taskloom.compiler.passes import optimize
    from taskloom.schedule.cpu import task_tunable
    model, inputs = zoo.build(name, batch, seq, 0)
    backend = Backend(target=target)
    with torch.inference_mode():
        torch.compile(model, backend=backend, dynamic=False)(*inputs)
    out: list[str] = []
    for fn in backend.compiled:
        if fn.graph is None:
            continue
        graph = optimize(fn.graph)
        constants = {id(c) for c in graph.constants}
        for group in fuse_graph(graph):
            known = {k: t.numpy() for k, t in enumerate(group.inputs) if id(t) in constants}
            found = task_tunable(group.task, target, known) if group.anchor is not None else None
            if found is not None and found[0].workload not in out:
                out.append(found[0].workload)
    return out


def format_reports(reports: list[WorkloadReport]) -> str:
    """The report as a text table, with a summary line."""
    head = f"{'workload':58} {'space':>5} {'rej':>4} {'meas':>5} {'best ms':>9} {'pick/best':>9} " \
           f"{'rho anl':>7} {'rho lrn':>7}"
    lines = [head, "-" * len(head)]
    f = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
    for r in reports:
        lines.append(f"{r.workload[:58]:58} {r.space:5d} {r.rejected:4d} {r.measured:5d} "
                     f"{f(None if r.best_s is None else r.best_s * 1e3, '9.3f'):>9} {f(r.pick_ratio, '9.3f'):>9} "
                     f"{f(r.spearman_analytic, '7.2f'):>7} {f(r.spearman_learned, '7.2f'):>7}")
    picks = [r.pick_ratio for r in reports if r.pick_ratio is not None]
    if picks:
        geo = math.exp(sum(math.log(p) for p in picks) / len(picks))
        lines.append(f"analytic pick / best: geometric mean {geo:.3f}, worst {max(picks):.3f} over {len(picks)} "
                     f"workloads")
    return "\n".join(lines)


def plot(reports: list[WorkloadReport], path: str) -> None:
    """Predicted against measured milliseconds, log-log, one colour per workload."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TaskloomError("--plot needs matplotlib: pip install 'taskloom[models]'") from None
    fig, ax = plt.subplots(figsize=(7, 6))
    lo, hi = math.inf, 0.0
    for r in reports:
        if not r.points:
            continue
        p, m = (np.array([x[i] for x in r.points]) * 1e3 for i in (0, 1))
        ax.scatter(p, m, s=8, alpha=0.6, label=r.workload.split("/")[1])
        lo, hi = min(lo, p.min(), m.min()), max(hi, p.max(), m.max())
    if hi > 0:
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="predicted ms (analytic model)", ylabel="measured ms",
           title="taskloom: predicted vs measured time per config")
    if len(reports) <= 12:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _report(args: argparse.Namespace) -> int:
    target = get_target(args.target)
    records = Records(args.records) if args.records else Records.default()
    if args.model:
        workloads = model_workloads(args.model, args.batch, args.seq, target)
    elif args.workload:
        if args.workload.endswith("*"):
            workloads = sorted({w for w, t, _ in records.workloads(target.key()) if w.startswith(args.workload[:-1])})
        else:
            workloads = [args.workload]
    else:
        raise ArgumentError("tune report: give a WORKLOAD key (or a prefix ending in '*') or --model NAME")
    if not workloads:
        raise ArgumentError(f"tune report: no tuned workload matches on target {target.key()} in {records.path}")
    reports = [report_workload(records, w, target, learned=not args.no_learned) for w in workloads]
    print(format_reports(reports))
    if args.plot:
        plot(reports, args.plot)
        print(f"plot: {args.plot}")
    return 0


def add_tune_commands(commands: argparse._SubParsersAction) -> None:
    """Register ``tune report``."""
    tune = commands.add_parser("tune", help="inspect tuning: how the models' predictions compare with measurements")
    actions = tune.add_subparsers(dest="action", metavar="ACTION", required=True)
    rep = actions.add_parser("report", help="space size, points measured, the models' rank correlation "
                             "and a predicted-vs-measured plot")
    rep.add_argument("workload", nargs="?", help="a record key, or a prefix ending in '*'")
    rep.add_argument("--model", help="every template task of a benchmark model (resnet50, bert, ...)")
    rep.add_argument("--batch", type=int, default=1)
    rep.add_argument("--seq", type=int, default=128)
    rep.add_argument("--records", help="the record database (default: beside the build cache)")
    rep.add_argument("--target", help="target string (default: this machine)")
    rep.add_argument("--plot", help="write a predicted-vs-measured scatter plot (PNG) here")
    rep.add_argument("--no-learned", action="store_true", help="skip the learned model's correlation")
    rep.set_defaults(func=_report)
