"""``taskloom records transfer``: one GPU's best configs timed on another, per workload and
in summary, from the records both tuned."""
import pytest

from taskloom.cli import main
from taskloom.schedule.cuda.matmul_mma import MmaConfig
from taskloom.tune.records import Records
from taskloom.tune.transfer import summary, transfer

H100, H200 = "cuda-sm_90a/NVIDIA H100 80GB HBM3", "cuda-sm_90a/NVIDIA H200"
CONFIGS = [MmaConfig(128, 128, 32, (2, 2), s).to_dict() for s in (2, 3, 4)] + [MmaConfig(64, 64, 32, (2, 2), 4).to_dict()]


@pytest.fixture
def records(tmp_path):
    """Two products tuned on both GPUs: on the first they agree, on the second the H100's
    pick is 1.5x the H200's best; a third product tuned on the H100 alone."""
    r = Records(tmp_path / "tune.sqlite")
    for c, h100, h200 in zip(CONFIGS, (4e-4, 3e-4, 2e-4, 5e-4), (3.9e-4, 2.9e-4, 1.9e-4, 4.8e-4)):
        r.add("matmul_mma/1x4096x4096x4096/float16/kk", H100, c, h100)
        r.add("matmul_mma/1x4096x4096x4096/float16/kk", H200, c, h200)
    for c, h100, h200 in zip(CONFIGS, (9e-6, 8e-6, 6e-6, 7e-6), (8e-6, 7e-6, 6e-6, 4e-6)):
        r.add("matmul_mma/1x128x768x768/float16/kk", H100, c, h100)
        r.add("matmul_mma/1x128x768x768/float16/kk", H200, c, h200)
    r.add("matmul_mma/1x128x3072x768/float16/kk", H100, CONFIGS[0], 1e-5)
    r.add("matmul_mma/1x128x3072x768/float16/kk", H200, CONFIGS[1], None, "launch: too many resources")
    return r


def test_each_workload_both_tuned_says_what_the_first_ones_pick_costs_on_the_second(records):
    rows = {r.workload.split("/")[1]: r for r in transfer(records, H100, H200)}
    assert set(rows) == {"1x4096x4096x4096", "1x128x768x768"}  # the third ran nowhere on the H200
    big, small = rows["1x4096x4096x4096"], rows["1x128x768x768"]
    assert big.ratio == 1.0 and big.spearman == pytest.approx(1.0) and big.common == 4
    assert small.ratio == pytest.approx(6e-6 / 4e-6) and small.target_best_s == 4e-6
    assert summary(list(rows.values())).startswith("2 workload(s) tuned on both: the first's picks run 1.225x")
    assert [r.workload for r in transfer(records, H100, H200, "matmul_mma/1x128*")] == \
        ["matmul_mma/1x128x768x768/float16/kk"]


def test_the_command_prints_a_row_a_workload_and_the_summary(records, capsys):
    assert main(["records", "transfer", H100, H200, "--records", str(records.path)]) == 0
    out = capsys.readouterr().out
    assert "1.500x" in out and "1.000x" in out and "1 of 2 are the second's best" in out
    assert main(["records", "transfer", H200, H100, "--records", str(records.path),
                 "--workload", "matmul_cpu/*"]) == 0
    assert "no workload has successful records on both" in capsys.readouterr().out
