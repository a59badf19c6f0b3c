"""``taskloom tune report`` on records written here: the table's space size, points measured,
failures, the analytic pick against the best, and the rank correlation, which is 1.0 when
the measured times are the predictions scaled and -1.0 when they are reversed."""
from __future__ import annotations

from taskloom.cli import main
from taskloom.cli.tune_report import report_workload
from taskloom.tune.cost_model import spearman
from taskloom.target import host_target
from taskloom.tune import model as analytic
from taskloom.tune.records import Records

SHAPE = (1, 96, 80, 64)
WORKLOAD = "matmul_cpu/1x96x80x64"


def fill(records: Records, reverse: bool = False, failures: int = 0) -> int:
    """Measurements of six of the shape's configs: the analytic predictions times 1.1, in
    reversed order where asked; then ``failures`` configs that failed. Returns the count."""
    target = host_target()
    distinct: dict[float, object] = {}  # one config per predicted time: ranks without ties
    for c in analytic.candidates(SHAPE, target):
        p = analytic.predict(SHAPE, c, target)
        if p.ok:
            distinct.setdefault(p.seconds, c)
    predicted = list(distinct.items())[:6 + failures]
    low, high = min(p for p, _ in predicted[:6]), max(p for p, _ in predicted[:6])
    for p, c in predicted[:6]:
        records.add(WORKLOAD, target.key(), c.to_dict(), (low + high - p if reverse else p) * 1.1)  # type: ignore[attr-defined]
    for _, c in predicted[6:]:
        records.add(WORKLOAD, target.key(), c.to_dict(), None, "built but crashed")  # type: ignore[attr-defined]
    return len(predicted)


def test_a_report_agrees_with_predictions_scaled_and_disagrees_with_them_reversed(tmp_path):
    agree, disagree = Records(tmp_path / "a.sqlite"), Records(tmp_path / "b.sqlite")
    count = fill(agree, failures=2)
    fill(disagree, reverse=True)
    good = report_workload(agree, WORKLOAD, host_target(), learned=False)
    assert good.measured == count and good.failed == count - 6 and good.space >= good.measured
    assert good.spearman_analytic is not None and good.spearman_analytic > 0.99
    bad = report_workload(disagree, WORKLOAD, host_target(), learned=False)
    assert bad.spearman_analytic is not None and bad.spearman_analytic < -0.99


def test_the_command_prints_the_table(tmp_path, capsys):
    records = Records(tmp_path / "r.sqlite")
    fill(records)
    assert main(["tune", "report", WORKLOAD, "--records", str(tmp_path / "r.sqlite"), "--no-learned"]) == 0
    out = capsys.readouterr().out
    assert WORKLOAD in out and "rho anl" in out and "1.00" in out


def test_spearman_needs_three_distinct_points():
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1, 2, 3], [10, 20, 30]) == 1.0
