from __future__ import annotations

import json

import pytest

from taskloom.errors import TargetError
from taskloom.target import CpuTarget, CudaTarget, Target, get_target, target_from_dict
from taskloom.target import cuda as cuda_module


@pytest.fixture
def no_gpu(monkeypatch):
    """This machine seen as having no GPU, whatever it has."""
    monkeypatch.setattr(cuda_module, "_read_device", lambda index: None)


def test_named_architectures_need_no_gpu(no_gpu):
    h100 = get_target("cuda:sm_90")
    assert isinstance(h100, CudaTarget) and isinstance(h100, Target) and h100.is_gpu
    assert h100.kind == "cuda" and h100.key() == "cuda-sm_90"
    assert h100.compute_capability == (9, 0) and h100.num_sms == 132
    assert h100.shared_memory_per_block == 227 * 1024 and h100.warp_size == 32
    a100 = get_target("cuda:sm_80")
    assert a100.compute_capability == (8, 0) and a100.nvcc_flags() == ["-arch=sm_80"]
    assert CudaTarget.from_arch("sm_90a").nvcc_flags() == ["-gencode", "arch=compute_90a,code=sm_90a"]
    assert a100.shared_memory_per_block < a100.shared_memory_per_sm
    hopper = get_target("cuda:sm_90a")
    assert hopper.has_wgmma() and not h100.has_wgmma() and hopper.key() == "cuda-sm_90a"


def test_cuda_without_a_gpu_says_how_to_name_one(no_gpu):
    with pytest.raises(TargetError, match="cuda:sm_90.*emulator"):
        get_target("cuda")


@pytest.mark.parametrize("spec, word", [
    ("cuda:sm_70", "sm_70"), ("cuda:sm_9", "sm_9"), ("cuda:", "cuda:"), ("gpu", "gpu"),
    ("cuda:sm_90 -x", "sm_90 -x"), ("", "''"),
])
def test_bad_cuda_specs_name_the_culprit(no_gpu, spec, word):
    with pytest.raises(TargetError, match=word):
        get_target(spec)


def test_dict_round_trip_for_both_kinds(no_gpu):
    for target in (get_target("cuda:sm_80"), get_target("cuda:sm_90a"), CpuTarget.host()):
        data = json.loads(json.dumps(target.to_dict()))
        assert target_from_dict(data) == target
        assert target_from_dict(data).key() == target.key()
    with pytest.raises(TargetError, match="tpu"):
        target_from_dict({"kind": "tpu"})
    with pytest.raises(TargetError, match="num_sms"):
        CudaTarget.from_dict({"kind": "cuda", "arch": "sm_80"})


def test_tf32_is_an_option_of_the_target_and_of_its_key(no_gpu):
    plain, tf32 = get_target("cuda:sm_90"), get_target("cuda:sm_90  -tf32")
    assert not plain.tf32 and tf32.tf32 and tf32.key() == "cuda-sm_90-tf32" != plain.key()
    assert target_from_dict(json.loads(json.dumps(tf32.to_dict()))) == tf32
    old = {k: v for k, v in plain.to_dict().items() if k != "tf32"}  # written before the option existed
    assert target_from_dict(old) == plain
    with pytest.raises(TargetError, match=r"unknown option '-fp8' .*known: -tf32"):
        get_target("cuda:sm_90 -fp8")
    with pytest.raises(TargetError, match="tf32 must be True or False"):
        CudaTarget.from_dict({**plain.to_dict(), "tf32": "yes"})


def test_invalid_fields_are_refused():
    with pytest.raises(TargetError, match="num_sms"):
        CudaTarget(arch="sm_80", name="x", num_sms=0, shared_memory_per_block=1,
                   shared_memory_per_sm=1, l2_bytes=1, clock_mhz=1)
    with pytest.raises(TargetError, match="sm_75"):
        CudaTarget.from_arch("sm_75")


def test_code_runs_on_same_major_architecture():
    a100, a10, h100, hopper = (CudaTarget.from_arch(a) for a in ("sm_80", "sm_86", "sm_90", "sm_90a"))
    assert a100.runs_on(a10) and not a10.runs_on(a100)
    assert not a100.runs_on(h100) and h100.runs_on(h100) and hopper.runs_on(h100)


def test_a_device_read_from_the_driver_fills_the_target(monkeypatch):
    props = {"name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0, "num_sms": 132,
             "shared_memory_per_block": 232448, "shared_memory_per_sm": 233472,
             "l2_bytes": 52428800, "clock_mhz": 1980, "max_threads_per_sm": 2048,
             "memory_clock_khz": 2619000, "memory_bus_bits": 5120}
    monkeypatch.setattr(cuda_module, "_read_device", lambda index: cuda_module._from_properties(props))
    device = get_target("cuda")
    assert device.name == props["name"] and device.arch == "sm_90a" and device.l2_bytes == 52428800
    assert device.dram_gbs == 3352  # 2 transfers a clock of 2619 MHz over 640 bytes
    assert cuda_module._from_properties({**props, "memory_clock_khz": 0}).dram_gbs == 3352  # the preset's
    assert get_target("cuda:sm_90").name == props["name"]  # the GPU here serves its own arch
    assert get_target("cuda:sm_80").name.endswith("(sm_80 preset)")


def test_a_cuda_compile_without_a_gpu_points_to_the_emulator(no_gpu):
    import taskloom
    from taskloom import ops
    from taskloom.graph import Graph, input
    x = input((4,), name="x")
    with pytest.raises(TargetError, match="needs an NVIDIA GPU.*device='emulator'"):
        taskloom.compile(Graph([x], [ops.relu(x)]), target="cuda:sm_90")


def test_graph_policies_ask_the_target():
    gpu = CudaTarget.from_arch("sm_90")
    assert not gpu.streams_weights(10 * gpu.l2_bytes) and gpu.nhwc_channel_multiple() == 8 and gpu.nhwc_dtypes() == ("float16", "bfloat16")
