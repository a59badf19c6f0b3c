"""The hardware probe, its stored profiles and ``taskloom target show|probe``.

One real probe runs with ``quick=True`` (short measurements, a 256 MiB DRAM buffer; about a
second and a half); the checks are sanity, never speed thresholds.
"""
import json
import math
import shutil
import time

import pytest

from taskloom.cli import main
from taskloom.errors import TargetError
from taskloom.target import CpuTarget
from taskloom.tune import probe_cpu as probe_mod
from taskloom.tune.probe_cpu import (FIELDS, HardwareProfile, estimate, override, probe, profile_for,
                                   profile_path, save_profile, stored_profile)

HOST = CpuTarget.host()
SSE_BOX = CpuTarget("old box", 4, {"sse4_2"})
AVX2_BOX = CpuTarget("avx2 box", 8, {"sse4_2", "avx", "avx2", "fma"})
PROFILE = HardwareProfile(fma_gflops_core=100.0, fma_gflops_all=380.0, l1_gbs=300.0, l2_gbs=120.0,
                          l3_gbs=160.0, mem_gbs_core=15.0, mem_gbs=40.0, source="probed 2024-01-02")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(root))
    return root


@pytest.mark.parametrize("target", [HOST, HOST.with_cores(1), SSE_BOX, AVX2_BOX, AVX2_BOX.with_cores(256)])
def test_estimate_is_positive_and_ordered(target):
    est = estimate(target)
    assert all(getattr(est, name) > 0 for name in FIELDS)
    assert est.l1_gbs >= est.l2_gbs
    assert est.fma_gflops_all >= est.fma_gflops_core
    assert est.mem_gbs >= est.mem_gbs_core
    assert est.source == "estimated from the ISA"
    # wider vectors, more flops and L1 bytes per cycle
    assert estimate(AVX2_BOX).fma_gflops_core > estimate(SSE_BOX).fma_gflops_core


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_probe_measures_and_round_trips(cache_dir, capsys):
    measured = probe(HOST, progress=True, quick=True)
    assert "probing FMA throughput" in capsys.readouterr().err
    values = [getattr(measured, name) for name in FIELDS]
    assert all(math.isfinite(v) and v > 0 for v in values)
    assert measured.l1_gbs > measured.mem_gbs_core
    assert measured.source.startswith("probed ")

    path = save_profile(HOST, measured)
    assert path == profile_path() == cache_dir / "target.json"
    stored = json.loads(path.read_text())[HOST.key()]
    assert stored["cores"] == HOST.num_cores
    assert HardwareProfile.from_dict(stored["profile"]) == measured
    assert profile_for(HOST) == measured
    assert stored_profile(HOST) == (measured, HOST.num_cores)
    assert profile_for(HOST.with_cores(1)) == measured.for_cores(1, HOST.num_cores)


def test_probe_refuses_what_it_cannot_measure():
    with pytest.raises(TargetError, match="-cores="):
        probe(HOST.with_cores(HOST.num_cores + 1), progress=False)


def test_for_cores_scaling():
    assert PROFILE.for_cores(4, 4) is PROFILE
    two = PROFILE.for_cores(2, 4)
    assert two.fma_gflops_all == pytest.approx(190.0) and two.l3_gbs == pytest.approx(80.0)
    assert two.mem_gbs == 30.0  # 2 cores x 15 GB/s, below the 40 measured
    three = PROFILE.for_cores(3, 4)
    assert three.mem_gbs == 40.0  # the controllers' ceiling
    one = PROFILE.for_cores(1, 4)
    assert one.mem_gbs == 15.0
    for name in ("fma_gflops_core", "l1_gbs", "l2_gbs", "mem_gbs_core", "source"):
        assert getattr(one, name) == getattr(PROFILE, name)
    with pytest.raises(TargetError, match="positive integer"):
        PROFILE.for_cores(0, 4)


def test_override_replaces_and_records_keys():
    changed = override(PROFILE, {"mem_gbs": 12, "l1_gbs": 250.0})
    assert changed.mem_gbs == 12.0 and changed.l1_gbs == 250.0 and changed.l2_gbs == PROFILE.l2_gbs
    assert changed.source == "probed 2024-01-02 (overridden: mem_gbs, l1_gbs)"
    again = override(changed, {"l3_gbs": 99, "mem_gbs": 11})
    assert again.source == "probed 2024-01-02 (overridden: mem_gbs, l1_gbs, l3_gbs)"
    assert override(PROFILE, {}) is PROFILE


@pytest.mark.parametrize("settings, match", [
    ({"mem_bw": 10.0}, "'mem_bw'.*valid keys: fma_gflops_core"),
    ({"source": 1.0}, "'source'.*valid keys"),
    ({"mem_gbs": 0}, "mem_gbs.*positive.*valid keys"),
    ({"l2_gbs": -3.0}, "l2_gbs.*positive"),
    ({"l2_gbs": float("nan")}, "l2_gbs.*positive"),
    ({"l2_gbs": "fast"}, "l2_gbs.*positive"),
])
def test_override_errors(settings, match):
    with pytest.raises(TargetError, match=match):
        override(PROFILE, settings)


def test_profile_dict_round_trip_and_errors():
    assert HardwareProfile.from_dict(PROFILE.to_dict()) == PROFILE
    broken = PROFILE.to_dict()
    del broken["l3_gbs"]
    with pytest.raises(TargetError, match="lacks l3_gbs"):
        HardwareProfile.from_dict(broken)
    with pytest.raises(TargetError, match="l1_gbs must be a positive"):
        HardwareProfile.from_dict({**PROFILE.to_dict(), "l1_gbs": -1})


def test_profile_for_falls_back_to_estimate(cache_dir):
    assert not profile_path().exists()
    assert profile_for(AVX2_BOX) == estimate(AVX2_BOX)
    save_profile(SSE_BOX, PROFILE)  # another ISA's entry does not apply
    assert profile_for(AVX2_BOX) == estimate(AVX2_BOX)
    assert profile_for(SSE_BOX) == PROFILE


def test_profile_for_sees_each_save(cache_dir):
    save_profile(AVX2_BOX, PROFILE)
    assert profile_for(AVX2_BOX) == PROFILE
    newer = override(PROFILE, {"mem_gbs": 33})
    save_profile(AVX2_BOX, newer)
    assert profile_for(AVX2_BOX) == newer
    assert profile_for(AVX2_BOX.with_cores(2)) == newer.for_cores(2, AVX2_BOX.num_cores)


def test_damaged_file_warns_and_falls_back(cache_dir):
    cache_dir.mkdir(parents=True)
    profile_path().write_text("{not json")
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert profile_for(AVX2_BOX) == estimate(AVX2_BOX)
    profile_path().write_text(json.dumps({AVX2_BOX.key(): {"cores": 8, "profile": {"l1_gbs": 1}}}))
    with pytest.warns(RuntimeWarning, match="lacks"):
        assert profile_for(AVX2_BOX) == estimate(AVX2_BOX)
    save_profile(AVX2_BOX, PROFILE)  # a damaged entry is replaced
    assert profile_for(AVX2_BOX) == PROFILE


def test_cli_target_show(cache_dir, capsys):
    assert main(["target", "show"]) == 0
    out = capsys.readouterr().out
    assert HOST.key() in out and f"cores:    {HOST.num_cores}" in out
    assert "estimated from the ISA" in out and "GFLOP/s" in out and "GB/s" in out
    assert main(["target", "show", "--target", "cpu -isa=avx2 -cores=1"]) == 0
    assert "x86_64-sse4_2-avx-avx2-fma\n" in capsys.readouterr().out


def test_cli_target_probe_no_measure_set(cache_dir, capsys):
    assert main(["target", "probe", "--no-measure", "--set", "mem_gbs=12"]) == 0
    out = capsys.readouterr().out
    assert "overridden: mem_gbs" in out
    assert any(line.split()[:3] == ["mem_gbs:", "12.0", "GB/s"] for line in out.splitlines())
    assert profile_for(HOST).mem_gbs == 12.0
    assert main(["target", "show"]) == 0
    assert str(profile_path()) in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["--set", "mem_gbs"], "KEY=VALUE"),
    (["--set", "mem_gbs=lots"], "KEY=VALUE"),
    (["--set", "dram=3"], "valid keys"),
    (["--set", "mem_gbs=0"], "positive"),
])
def test_cli_target_probe_errors(cache_dir, capsys, argv, match):
    assert main(["target", "probe", "--no-measure", *argv]) == 1
    assert match in capsys.readouterr().err
    assert not profile_path().exists()


def test_cli_target_the_host_cannot_run(cache_dir, capsys, monkeypatch):
    monkeypatch.setattr(CpuTarget, "host", staticmethod(lambda: SSE_BOX))
    spec = ["--target", "cpu -isa=avx2"]
    assert main(["target", "probe", *spec, "--set", "mem_gbs=5"]) == 1
    err = capsys.readouterr().err
    assert "cannot run" in err and "--no-measure" in err and "avx2" in err
    assert main(["target", "probe", *spec, "--no-measure", "--set", "mem_gbs=5"]) == 0
    capsys.readouterr()
    assert profile_for(SSE_BOX.with_isa("avx2")).mem_gbs == 5.0
    with pytest.raises(TargetError, match="lacks avx, avx2, fma"):
        probe(SSE_BOX.with_isa("avx2"), progress=False)


def test_profile_for_is_cheap(cache_dir):
    save_profile(HOST, PROFILE)
    start = time.perf_counter()
    for _ in range(2000):
        profile_for(HOST)
    assert time.perf_counter() - start < 2.0  # a stat and a dict look-up each
    assert probe_mod._MEMO


def test_cli_target_show_and_probe_of_a_gpu(cache_dir, capsys, monkeypatch):
    from taskloom.target import cuda
    monkeypatch.setattr(cuda, "_read_device", lambda index: None)
    assert main(["target", "show", "--target", "cuda:sm_80"]) == 0
    out = capsys.readouterr().out
    assert "key:      cuda-sm_80" in out and "num_sms: 108" in out and "l2_bytes: 40.0 MiB" in out
    assert main(["target", "probe", "--target", "cuda:sm_80"]) != 0
    assert "only CPU targets are probed" in capsys.readouterr().err
