"""The counters are what a profiler counts: bank conflicts per warp access (wavefronts - 1),
32-byte sectors per warp request, warp instructions by class, barriers."""
from __future__ import annotations

import numpy as np
import pytest

from taskloom.runtime.emulator import run_kernel
from tests.runtime.emulator.kernels import build

SHARED = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(32, 1, 1))
def strided(x: T[1024], y: T[32]):
    s = shared_tensor(T, [1024])
    for k in range(32):
        s[k * 32 + threadIdx.x] = x[k * 32 + threadIdx.x]
    barrier()
    y[threadIdx.x] = s[threadIdx.x * STRIDE]
'''


@pytest.mark.parametrize("stride, conflicts", [(1, 0), (2, 1), (4, 3), (32, 31), (0, 0), (33, 0)])
def test_bank_conflicts_of_one_warp_reading_floats(stride, conflicts):
    x, y = np.arange(1024, dtype=np.float32), np.zeros(32, np.float32)
    report = run_kernel(build(SHARED.replace("T[", "f32[").replace("(T,", "(f32,"), STRIDE=stride), [x, y])
    np.testing.assert_array_equal(y, x[np.arange(32) * stride])
    assert report.shared_load_requests == 1
    assert report.shared_load_conflicts == conflicts
    assert report.shared_load_wavefronts == conflicts + 1
    assert report.shared_store_conflicts == 0 and report.shared_store_wavefronts == 32


@pytest.mark.parametrize("dtype, stride, wavefronts", [("f16", 1, 1), ("f16", 2, 1), ("f16", 32, 16),
                                                       ("f64", 1, 2), ("f64", 16, 32)])
def test_bank_conflicts_of_narrow_and_wide_elements(dtype, stride, wavefronts):
    np_dtype = {"f16": np.float16, "f64": np.float64}[dtype]
    x, y = np.arange(1024).astype(np_dtype), np.zeros(32, np_dtype)
    report = run_kernel(build(SHARED.replace("T[", f"{dtype}[").replace("(T,", f"({dtype},"), STRIDE=stride), [x, y])
    assert report.shared_load_wavefronts == wavefronts
    # 8-byte lanes are served half a warp at a time: two wavefronts are no conflict
    assert report.shared_load_conflicts == wavefronts - (2 if dtype == "f64" else 1)


GLOBAL = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(64, 1, 1))
def gather(x: f32[2048], y: f32[64]):
    if threadIdx.x < LIVE:
        y[threadIdx.x] = x[threadIdx.x * STRIDE]
'''


@pytest.mark.parametrize("stride, live, sectors", [(1, 64, 8), (32, 64, 64), (2, 64, 16), (0, 64, 2),
                                                   (1, 20, 3), (8, 33, 33)])
def test_global_sectors_per_warp_request(stride, live, sectors):
    x, y = np.arange(2048, dtype=np.float32), np.zeros(64, np.float32)
    report = run_kernel(build(GLOBAL, STRIDE=stride, LIVE=live), [x, y])
    assert report.global_load_requests == (2 if live > 32 else 1)
    assert report.global_load_sectors == sectors


def test_instruction_classes_and_barriers():
    report = run_kernel(build(SHARED.replace("T[", "f32[").replace("(T,", "(f32,"), STRIDE=1),
                        [np.zeros(1024, np.float32), np.zeros(32, np.float32)])
    i = report.instructions
    assert (i["global_load"], i["global_store"], i["shared_store"], i["shared_load"]) == (32, 1, 32, 1)
    assert i["barrier"] == 1 and report.barriers == 1
    assert i["mma"] == i["ldmatrix"] == i["cp_async"] == i["shuffle"] == i["atomic"] == 0
    assert i["arith"] > 0
    text = report.summary()
    assert "kernel 'strided'" in text and "0 bank conflicts" in text and "32 requests" in text
    total = report.counters + report.counters
    assert total.instructions["global_load"] == 64 and total.bank_conflicts == 0
