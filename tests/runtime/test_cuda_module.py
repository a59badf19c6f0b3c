"""CUDA kernels built by taskloom.build: on a GPU, or in the emulator where there is none;
arguments checked against each kernel's signature before anything runs."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import taskloom
from taskloom.errors import ArgumentError, TargetError
from taskloom.script import parse_source
from taskloom.target import cuda as cuda_target
from tests.ir.gpu_kernels import MMA, REDUCE

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(cuda_target, "_read_device", lambda index: None)


def test_without_a_gpu_the_error_points_at_the_emulator(no_gpu):
    with pytest.raises(TargetError, match="device='emulator'"):
        taskloom.build(parse_source(REDUCE), target="cuda:sm_90")
    with pytest.raises(TargetError, match="'cuda' \\(the GPU\\) or 'emulator'"):
        taskloom.build(parse_source(REDUCE), target="cuda:sm_90", device="tpu")


def test_a_cpu_build_takes_no_gpu_device():
    with pytest.raises(ArgumentError, match="CUDA targets"):
        taskloom.build(parse_source("def f(x: f32[4]):\n    x[0] = 1.0\n"), device="emulator")


def test_arguments_are_checked_against_the_signature():
    kernel = taskloom.build(parse_source(REDUCE), target="cuda:sm_80", device="emulator")["block_sum"]
    x, total = np.ones(100, np.float32), np.zeros(1, np.float32)
    with pytest.raises(ArgumentError, match="'x' must be float32, got float64"):
        kernel(x.astype(np.float64), total)
    with pytest.raises(ArgumentError, match=r"'total' must have shape \(1,\), got \(2,\)"):
        kernel(x, np.zeros(2, np.float32))
    with pytest.raises(ArgumentError, match="takes 3 arguments"):
        kernel(x)
    with pytest.raises(ArgumentError, match=r"'x' must have shape \(7,\)"):
        kernel(7, x, total)


def test_the_module_names_its_kernels_and_source():
    mod = taskloom.build(parse_source(MMA), target="cuda:sm_90a", device="emulator")
    assert "mma16" in repr(mod) and mod.source_path.name == "source.cu"
    assert mod.built.resources["mma16"].barriers == 1
    with pytest.raises(KeyError, match="it has mma16"):
        mod["missing"]


def test_pointers_must_be_aligned_to_the_widest_access_of_their_parameter():
    from taskloom.runtime.cuda_module import _device_pointer, wide_access_alignment
    from taskloom.runtime.signature import Param
    from tests.runtime.emulator.kernels import WIDE_SCALE, build
    assert wide_access_alignment(build(WIDE_SCALE)) == {"x": 16, "y": 16}
    assert wide_access_alignment(build(REDUCE)) == {}

    class Device:  # a CUDA array seen through its interface, at a chosen address
        def __init__(self, address):
            self.__cuda_array_interface__ = {"data": (address, False)}
    p = Param(0, "x", "tensor", "float32", (64,))
    assert _device_pointer("k", p, Device(4096), 16).value == 4096
    assert _device_pointer("k", p, Device(4100), 4).value == 4100
    with pytest.raises(ArgumentError, match=r"kernel 'k': argument 'x' starts at an address that is not a multiple "
                                            r"of 16 bytes.*x.clone\(\)"):
        _device_pointer("k", p, Device(4100), 16)
