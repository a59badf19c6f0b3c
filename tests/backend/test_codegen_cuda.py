"""The CUDA dialect: kernels in kernel script become readable CUDA C++ with a host launcher,
which nvcc builds for sm_80 and sm_90a with no spills (nvcc tests skip where it is missing)."""
from __future__ import annotations

import shutil

import pytest

from taskloom.backend.codegen_cuda import codegen_cuda
from taskloom.backend.nvcc import compile_cuda_library
from taskloom.errors import CodegenError
from taskloom.ir import stmt as S
from taskloom.script import parse_source
from taskloom.target import CudaTarget
from taskloom.transforms import lower
from tests.ir.gpu_kernels import MMA, REDUCE

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
H100 = CudaTarget.from_arch("sm_90a")


def cuda(source: str, target: CudaTarget = H100) -> str:
    return codegen_cuda(S.Module((lower(parse_source(source)),)), target)


def kernel_text(source: str) -> str:
    text = cuda(source)
    return text[text.index('extern "C" __global__'):]


def test_the_reduction_reads_as_cuda():
    text = kernel_text(REDUCE)
    for line in ['extern "C" __global__ void __launch_bounds__(256) block_sum(int32_t N, '
                 'const float* __restrict__ x, float* __restrict__ total) {',
                 "__shared__ float __align__(16) s[8];  // shared",
                 "const int32_t i = (int32_t)blockIdx.x * 256 + (int32_t)threadIdx.x;",
                 "v = tl_warp_sum(v);", "__syncthreads();", "atomicAdd(&total[0], t);",
                 'extern "C" int launch_block_sum(int32_t N, const float* __restrict__ x, '
                 'float* __restrict__ total, void* stream) {',
                 "const dim3 grid((N + 255) / 256, 1, 1);",
                 "::block_sum<<<grid, block, shared_bytes, (cudaStream_t)stream>>>(N, x, total);"]:
        assert line in text, line


@needs_nvcc
def test_with_dependent_launch_each_kernel_waits_for_the_one_before_first(monkeypatch, tmp_path):
    monkeypatch.setenv("TASKLOOM_PDL", "1")
    text = kernel_text(REDUCE)
    body = text[text.index("{") + 1:].lstrip()
    assert body.startswith('asm volatile("griddepcontrol.wait;\\n" ::: "memory");')  # before any read
    assert "cudaLaunchAttributeProgrammaticStreamSerialization" in text and "cudaLaunchKernelExC(&config" in text
    assert "<<<" not in text
    from taskloom.backend.cache import BuildCache
    compile_cuda_library(cuda(REDUCE), H100, name="pdl", cache=BuildCache(tmp_path))  # nvcc takes both sides
    sm80 = cuda(REDUCE, CudaTarget.from_arch("sm_80"))  # no such instruction before Hopper
    assert "griddepcontrol" not in sm80 and "<<<" in sm80
    monkeypatch.setenv("TASKLOOM_PDL", "0")
    assert "griddepcontrol" not in cuda(REDUCE)


def test_tensor_core_statements_call_the_prelude():
    text = kernel_text(MMA)
    assert "__half __align__(16) ra[8];  // register" in text and "float __align__(16) acc[4];  // register" in text
    assert "tl_ldmatrix<4, false>(&ra[0], &sa[lane % 16 * 16 + lane / 16 * 8]);" in text
    assert "tl_ldmatrix<2, true>(&rb[0], &sb[lane % 16 * 8]);" in text
    assert "tl_mma_m16n8k16_f16(&acc[0], &ra[0], &rb[0], &acc[0]);" in text
    assert "#pragma unroll 8" in text and "GCC" not in text


def test_a_wide_copy_is_one_access_of_its_bytes():
    from tests.runtime.emulator.kernels import WIDE_SCALE
    text = kernel_text(WIDE_SCALE)
    assert "tl_copy<16>(&r[0], &x[i + offset]);" in text and "tl_copy<16>(&y[i], &r[0]);" in text


def test_with_dynamic_shared_memory_the_shared_buffers_are_laid_out_in_it():
    text = kernel_text(MMA.replace("dynamic_shared=0", "dynamic_shared=768"))
    assert "extern __shared__ __align__(16) unsigned char tl_dynamic_shared[];" in text
    assert "__half* const sa = (__half*)(tl_dynamic_shared + 0);  // shared, dynamic" in text
    assert "__half* const sb = (__half*)(tl_dynamic_shared + 512);  // shared, dynamic" in text
    assert "__shared__ __half" not in text and "shared_bytes > 48 * 1024" in text
    with pytest.raises(CodegenError, match=r"'sb' ends at byte 768 .* sizes at 600 bytes"):
        cuda(MMA.replace("dynamic_shared=0", "dynamic_shared=600"))


@pytest.mark.parametrize("source, message", [
    ("@kernel(kind='cuda_kernel', grid=1, block=32)\ndef f(x: f32[64]):\n"
     "    for w in parallel(2):\n        x[w] = 1.0\n", "parallel loop is a CPU construct"),
    ("@kernel(kind='cuda_kernel', grid=1, block=32)\ndef f(N: i32, x: f32[N]):\n"
     "    s = shared_tensor(f32, [N])\n    s[0] = 1.0\n    x[0] = s[0]\n", "symbolic size"),
])
def test_what_a_cuda_kernel_cannot_hold_is_a_codegen_error(source, message):
    with pytest.raises(CodegenError, match=message):
        cuda(source)


def test_the_c_backend_refuses_cuda_kernels():
    from taskloom.backend.codegen_x86 import codegen_x86
    from taskloom.target import CpuTarget
    with pytest.raises(CodegenError, match="CUDA kernel"):
        codegen_x86(S.Module((lower(parse_source(REDUCE)),)), CpuTarget.host())


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("source", [REDUCE, MMA], ids=["reduce", "mma"])
def test_nvcc_builds_every_kernel_without_spills(tmp_path, arch, source):
    from taskloom.backend.cache import BuildCache
    target = CudaTarget.from_arch(arch)
    fn = parse_source(source)
    _, used = compile_cuda_library(cuda(source, target), target, name=fn.name, cache=BuildCache(tmp_path))
    assert not used[fn.name].spills and used[fn.name].barriers == 1 and used[fn.name].registers <= 64


def test_a_staged_tile_is_laid_over_the_tiles_it_reuses():
    """The tensor-core template stages C where its factors' tiles were: the staging buffer
    starts where the first tile does; a reuse of a buffer not in dynamic shared memory is an
    error naming both."""
    import dataclasses

    import numpy as np

    import taskloom
    from taskloom import ops
    from taskloom.graph import Graph, input
    from taskloom.graph.fusion import fuse_graph
    from taskloom.ir import gpu
    from taskloom.schedule.cuda.matmul_mma import MmaConfig, mma_candidate
    a = input((64, 64), "float16", name="a")
    w = taskloom.asarray(np.ones((64, 128), np.float16))
    [group] = fuse_graph(Graph([a], [ops.matmul(a, w)]))
    fn = mma_candidate(group.task, H100).build(MmaConfig(64, 64, 32, (2, 2), 3), "mm").fn
    [(stage, tile)] = fn.attr(gpu.SHARED_REUSE)
    text = codegen_cuda(S.Module((lower(fn),)), H100)
    assert f"__half* const {tile} = (__half*)(tl_dynamic_shared + 0);" in text
    assert f"__half* const {stage} = (__half*)(tl_dynamic_shared + 0);  // shared, over {tile}" in text
    attrs = dict(fn.attrs)
    attrs[gpu.SHARED_REUSE] = ((stage, "nowhere"),)
    with pytest.raises(CodegenError, match=f"'{stage}' reuses 'nowhere'"):
        codegen_cuda(S.Module((lower(dataclasses.replace(fn, attrs=tuple(attrs.items()))),)), H100)
