"""The IR's GPU words: kernel script with launch configurations, thread indices, warp
primitives and the GPU statements prints and parses back to the same function."""
from __future__ import annotations

import pytest

from taskloom.errors import IRError, ScriptError
from taskloom.ir import astext, gpu
from taskloom.ir import expr as E
from taskloom.ir.dtypes import float16, float32, int32
from taskloom.script import parse_source
from tests.ir.gpu_kernels import MMA, REDUCE

STATEMENTS = '''
@kernel(kind='cuda_kernel', grid=(2, 1, 1), block=(64, 1, 1), dynamic_shared=0)
def words(N: i32, x: f32[N], h: f16[64]):
    s = shared_tensor(f32, [64])
    r = register_tensor(f16, [8])
    acc = register_tensor(f32, [4])
    cp_async(s[threadIdx.x], x[threadIdx.x], 4, src_bytes=N)
    cp_async_commit()
    cp_async_wait(0)
    ldmatrix(r[0], h[threadIdx.x % 8 * 8], num=1, trans=True)
    mma_sync(acc[0], r[0], r[4], acc[0])
    atomic_add(x[0], shfl_xor(s[threadIdx.x], 1) + warp_max(s[0]))
'''


@pytest.mark.parametrize("source", [REDUCE, MMA, STATEMENTS])
def test_cuda_kernels_round_trip_through_text(source):
    fn = parse_source(source)
    text = astext(fn)
    assert text.strip() == source.strip()
    assert astext(parse_source(text)) == text


def test_launch_configuration_is_held_as_expressions():
    fn = parse_source(REDUCE)
    grid, block, dynamic = gpu.launch_dims(fn)
    assert fn.kind == "cuda_kernel" and len(grid) == len(block) == 3
    assert [int(b.value) for b in block] == [256, 1, 1] and not E.is_const(grid[0])
    assert E.is_const(dynamic, 0)


def test_index_primitives_and_shuffles_are_typed():
    assert gpu.threadIdx.x.type == int32 and gpu.blockDim.z.type == int32
    v = E.Var("v", float32)
    assert gpu.shuffle("shfl_down", v, 1).type == float32 and E.call("warp_sum", v).type == float32
    with pytest.raises(IRError, match="32-bit"):
        gpu.shuffle("shfl_xor", E.Var("h", float16), 1)


def test_gpu_statements_check_their_operands():
    x = E.Var("x", float32[64])
    h = E.Var("h", float16[64])
    with pytest.raises(IRError, match="4, 8 or 16 bytes"):
        gpu.CpAsync(x[0], x[1], 12)
    with pytest.raises(IRError, match="element reference"):
        gpu.AtomicAdd(x, 1.0)
    i = E.Var("i", int32[64])
    with pytest.raises(IRError, match="float16 or bfloat16 or float32"):
        gpu.Ldmatrix(i[0], i[0])
    with pytest.raises(IRError, match="split float32"):
        gpu.Ldmatrix(x[0], x[0], trans=True)
    with pytest.raises(IRError, match="A fragment must have elements of float32"):
        gpu.MmaSync(x[0], h[0], h[8], x[0], "m16n8k8")
    with pytest.raises(IRError, match="m16n8k16 and m16n8k8, not 'm16n8k32'"):
        gpu.MmaSync(x[0], h[0], h[8], x[0], "m16n8k32")
    gpu.VectorCopy(x[0], x[4], 16)
    with pytest.raises(IRError, match="copy_vector moves 4, 8 or 16 bytes"):
        gpu.VectorCopy(x[0], x[4], 32)
    with pytest.raises(IRError, match="from f16 elements into f32 ones"):
        gpu.VectorCopy(x[0], h[0], 16)
    with pytest.raises(IRError, match="C fragment"):
        gpu.MmaSync(x[0], h[0], h[8], h[0])
    with pytest.raises(IRError, match="pending"):
        gpu.CpAsyncWait(-1)


def test_a_cuda_kernel_needs_its_launch_configuration():
    with pytest.raises(ScriptError, match="grid=..., block="):
        parse_source("@kernel(kind='cuda_kernel')\ndef f(x: f32[4]):\n    x[0] = 1.0\n")
    with pytest.raises(ScriptError, match="one to three"):
        parse_source("@kernel(kind='cuda_kernel', grid=(1, 1, 1, 1), block=32)\ndef f(x: f32[4]):\n    x[0] = 1.0\n")
