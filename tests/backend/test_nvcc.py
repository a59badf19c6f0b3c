"""The CUDA compiler driver: builds with nvcc for sm_80 and sm_90a, ptxas's report parsed and
cached, nvcc's errors carried, resource limits checked before launch. Skipped where no nvcc."""
from __future__ import annotations

import shutil

import pytest

from taskloom.backend.cache import BuildCache
from taskloom.backend.nvcc import (KernelResources, check_resources, compile_cuda_library,
                                   parse_ptxas_report)
from taskloom.errors import CompileError, ResourceError
from taskloom.target import CudaTarget

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

SOURCE = """
#include <cstdint>
extern "C" __global__ void __launch_bounds__(128) add_one(const float* x, float* y, int32_t n) {
  __shared__ float tile[128];
  int32_t i = blockIdx.x * 128 + threadIdx.x;
  if (i < n) tile[threadIdx.x] = x[i];
  __syncthreads();
  if (i < n) y[i] = tile[threadIdx.x] + 1.0f;
}
"""

REPORT = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm' for 'sm_90a'
ptxas info    : Function properties for gemm
    8 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 8 bytes cumulative stack size, 32768 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'copy' for 'sm_90a'
ptxas info    : Function properties for copy
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 6 registers, 372 bytes cmem[0]
"""


def test_the_ptxas_report_is_read_per_kernel():
    found = parse_ptxas_report(REPORT)
    assert found["gemm"] == KernelResources(registers=168, spill_stores=16, spill_loads=12, shared_bytes=32768,
                                            barriers=1, stack_bytes=8)
    assert found["gemm"].spills and not found["copy"].spills and found["copy"].registers == 6


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_builds_for_each_architecture_and_caches_the_report(tmp_path, arch):
    cache = BuildCache(tmp_path)
    target = CudaTarget.from_arch(arch)
    lib, used = compile_cuda_library(SOURCE, target, name="add_one", cache=cache)
    assert lib.is_file() and (lib.parent / "source.cu").read_text() == SOURCE
    assert used["add_one"].shared_bytes == 512 and used["add_one"].barriers == 1
    assert 0 < used["add_one"].registers <= 32 and not used["add_one"].spills
    again, cached = compile_cuda_library(SOURCE, target, name="add_one", cache=cache)
    assert again == lib and cached == used


@needs_nvcc
def test_an_nvcc_error_names_the_kept_source(tmp_path):
    with pytest.raises(CompileError) as info:
        compile_cuda_library(SOURCE.replace("tile[threadIdx.x] + 1.0f", "tile[threadIdx.x] + undefined_name"),
                             CudaTarget.from_arch("sm_80"), name="broken", cache=BuildCache(tmp_path))
    text = str(info.value)
    assert "undefined_name" in text and "broken-" in info.value.source_path
    assert info.value.source_path.endswith(".cu") and "identifier" in text


def test_resources_beyond_the_target_are_refused_before_launch():
    h100 = CudaTarget.from_arch("sm_90")
    fine = KernelResources(registers=128, shared_bytes=48 * 1024)
    check_resources("gemm", fine, h100, threads_per_block=256, dynamic_shared_bytes=100 * 1024)
    with pytest.raises(ResourceError, match="1024 threads|allows 1024"):
        check_resources("gemm", fine, h100, threads_per_block=2048)
    with pytest.raises(ResourceError, match="128 registers per thread.*65536"):
        check_resources("gemm", fine, h100, threads_per_block=1024)
    with pytest.raises(ResourceError, match="shared memory.*232448"):
        check_resources("gemm", fine, h100, threads_per_block=128, dynamic_shared_bytes=200 * 1024)
