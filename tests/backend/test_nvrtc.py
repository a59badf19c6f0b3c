"""Building CUDA with NVRTC and the CUDA runtime from PyPI, for machines without nvcc: the
device code to a cubin, the host code by the C++ compiler into a library that embeds it,
ptxas's report kept as with nvcc, and NVRTC's errors carried to the user."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.backend import nvrtc
from taskloom.backend.nvcc import compile_cuda_library, cuda_compiler
from taskloom.errors import CompileError
from taskloom.graph import Graph, input
from taskloom.ir import gpu
from taskloom.target import CudaTarget

pytestmark = pytest.mark.skipif(nvrtc.problem() is not None, reason=f"NVRTC cannot build here: {nvrtc.problem()}")
rng = np.random.default_rng(0)


@pytest.fixture
def with_nvrtc(monkeypatch):
    monkeypatch.setenv("TASKLOOM_CUDA_COMPILER", "nvrtc")
    assert cuda_compiler() == "nvrtc"


def model():
    """Tensor cores with a 64 KiB pipeline (dynamic shared memory), padded odd rows, an
    index check and bfloat16: the parts of the prelude each compiler sees differently."""
    a, b = input((300, 301), "float16", name="a"), input((301, 256), "float16", name="b")
    ids, table = input((4,), "int64", name="ids"), input((7, 8), "bfloat16", name="table")
    big = ops.matmul(input((512, 512), "float16", name="p"), input((512, 512), "float16", name="q"))
    return Graph([a, b, ids, table, big.producer[0].inputs[0], big.producer[0].inputs[1]],
                 [ops.gelu(ops.matmul(a, b)), ops.embedding(ids, table), big])


def test_a_model_builds_into_one_library_with_its_cubin(with_nvrtc):
    compiled = taskloom.compile(model(), target="cuda:sm_90a", device="emulator")
    lib = ctypes.CDLL(str(compiled.built.lib_path))
    assert all(hasattr(lib, f"launch_{k['name']}") for k in compiled.meta["kernels"])
    assert hasattr(lib, "taskloom_graph") and hasattr(lib, "taskloom_status_new")
    data = compiled.built.lib_path.read_bytes()
    assert data.find(b"\x7fELF", 1) > 0  # the cubin, embedded
    kernels = {k["name"] for k in compiled.meta["kernels"]}
    resources = compiled.built.resources
    assert kernels <= set(resources) and all(resources[k].registers > 0 for k in kernels)
    [product] = [f for f in compiled.built.kernels if f.name == compiled.meta["kernels"][-1]["name"]]
    assert int(gpu.launch_dims(product)[2].value) > 48 * 1024  # a pipeline in dynamic shared memory
    # the emulator runs the kernels this build holds
    x, y = rng.standard_normal((300, 301)).astype(np.float16), rng.standard_normal((301, 256)).astype(np.float16)
    p, q = rng.standard_normal((512, 512)).astype(np.float16), rng.standard_normal((512, 512)).astype(np.float16)
    table = np.zeros((7, 8), np.uint16)
    out, rows, big = compiled(x, y, np.array([6, 0, 1, 2]), table, p, q)
    np.testing.assert_allclose(big.astype(np.float32), p.astype(np.float32) @ q.astype(np.float32),
                               rtol=5e-3, atol=1e-1)


def test_nvrtc_and_nvcc_builds_are_cached_apart(with_nvrtc, monkeypatch, tmp_path):
    # (device code is guarded, as the generated files guard it, from the host's compiler)
    source = "#if defined(__CUDACC__)\nextern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n#endif\n"
    target = CudaTarget.from_arch("sm_80")
    by_nvrtc, _ = compile_cuda_library(source, target, name="k")
    monkeypatch.setenv("TASKLOOM_CUDA_COMPILER", "nvcc")
    by_nvcc, _ = compile_cuda_library(source, target, name="k")
    assert by_nvrtc != by_nvcc


def test_nvrtcs_errors_reach_the_user_with_the_kept_source(with_nvrtc):
    source = "extern \"C\" __global__ void broken(float* x) { x[threadIdx.x] = undefined_name; }\n"
    with pytest.raises(CompileError) as err:
        compile_cuda_library(source, CudaTarget.from_arch("sm_80"), name="broken")
    assert "undefined_name" in err.value.compiler_output and str(err.value.source_path).endswith(".cu")


def test_an_unknown_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TASKLOOM_CUDA_COMPILER", "clang")
    with pytest.raises(CompileError, match="names no CUDA compiler; use 'nvcc' or 'nvrtc'"):
        cuda_compiler()


@pytest.mark.cuda
def test_on_the_gpu_an_nvrtc_build_runs_as_nvccs_does(with_nvrtc):
    torch = pytest.importorskip("torch")
    graph = model()
    on_gpu = taskloom.compile(graph, target="cuda", device="cuda")
    emulated = taskloom.compile(graph, target="cuda", device="emulator")
    x, y = rng.standard_normal((300, 301)).astype(np.float16), rng.standard_normal((301, 256)).astype(np.float16)
    p, q = rng.standard_normal((512, 512)).astype(np.float16), rng.standard_normal((512, 512)).astype(np.float16)
    ids, table = np.array([6, 0, 1, 2]), torch.randn(7, 8).to(torch.bfloat16)
    got = on_gpu(*[torch.as_tensor(v).cuda() for v in (x, y, ids)], table.cuda(), torch.as_tensor(p).cuda(),
                 torch.as_tensor(q).cuda())
    want = emulated(x, y, ids, table, p, q)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu().float(), torch.as_tensor(w).float(), rtol=2e-3, atol=2e-2)


def test_hopper_wgmma_builds_with_nvrtc(with_nvrtc):
    from tests.runtime.emulator.test_wgmma import wgmma_kernel
    module = taskloom.build(wgmma_kernel(128, "k", "mn"), target=CudaTarget.from_arch("sm_90a"), device="emulator")
    used = module.built.resources["wg"]
    assert used.spill_stores == used.spill_loads == 0 and used.shared_bytes >= 24576


def test_tma_descriptors_build_with_nvrtc(with_nvrtc):
    from tests.runtime.emulator.test_tma import box_kernel
    module = taskloom.build(box_kernel(0, 0), target=CudaTarget.from_arch("sm_90a"), device="emulator")
    assert "tl_encode_tensor_map(&x_map" in open(module.source_path).read()
