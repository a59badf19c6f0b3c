"""wgmma (Hopper's warpgroup MMA) follows the PTX ISA: operands through descriptors of the
128-byte-swizzled canonical layouts, K-major and M/N-major, the accumulators laid out as
mma.sync's C fragments stacked over the warpgroup's warps, and completion at wait_group."""
from __future__ import annotations

import numpy as np
import pytest

from taskloom.errors import IRError
from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir.dtypes import TensorType, float16, float32
from taskloom.runtime.emulator import EmulatorError, run_kernel
from taskloom.runtime.emulator.wgmma import operand_bytes, swizzle128
from tests.runtime.emulator.kernels import build

#: One warpgroup: c = a @ b for a 64 x 64 a and a 64 x N b, in four wgmmas of K 16. Each
#: operand is stored in shared memory in the swizzled layout its descriptor names: K-major
#: (rows of 64 K-elements 128 bytes apart) or M/N-major (rows of 64 M- or N-elements along
#: K, the next 64 of M or N a whole 64-row atom on); A_IN / B_IN say how the inputs are laid.
WGMMA = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(128, 1, 1))
def wg(a: f16[A_IN], b: f16[B_IN], c: f32[64, N]):
    sa = shared_tensor(f16, [4096])
    sb = shared_tensor(f16, [64 * N])
    acc = register_tensor(f32, [N // 2])
    tid = threadIdx.x
    for i in range(32):
        e = tid + i * 128
        x = A_X
        k = A_K
        sa[A_AT] = a[A_READ]
    for i in range(N // 2):
        e = tid + i * 128
        x = B_X
        k = B_K
        sb[B_AT] = b[B_READ]
    for i in range(N // 2):
        acc[i] = 0.0
    fence_proxy_async()
    barrier()
    wgmma_fence(acc)
    for kk in range(4):
        wgmma(acc[0], sa[A_STEP], sb[B_STEP], shape='m64nNk16', a_major='A_MAJOR', b_major='B_MAJOR',
              a_lbo=8192, a_sbo=1024, b_lbo=8192, b_sbo=1024)
    wgmma_commit()
    wgmma_wait(acc, WAIT)
    w = tid // 32
    g = tid % 32 // 4
    t = tid % 4
    for i in range(N // 2):
        c[16 * w + g + i // 2 % 2 * 8, i // 4 * 8 + t * 2 + i % 2] = acc[i]
'''
#: per major: (input shape, x and k of element e, its place in the shared tile, its read, a step's start)
K_MAJOR = ("X, 64", "e // 64", "e % 64", "x * 64 + ((k // 8) ^ (x % 8)) * 8 + k % 8", "x, k", "kk * 16")
MN_MAJOR = ("64, X", "e % X", "e // X", "x // 64 * 4096 + k * 64 + ((x % 64 // 8) ^ (k % 8)) * 8 + x % 8", "k, x",
            "kk * 1024")


def wgmma_source(n: int, a_major: str = "k", b_major: str = "mn", wait: int = 0) -> str:
    src = WGMMA
    for name, major, rows in (("A", a_major, "64"), ("B", b_major, "N")):
        shape, x, k, at, read, step = K_MAJOR if major == "k" else MN_MAJOR
        src = src.replace(f"{name}_IN", shape.replace("X", rows)).replace(f"{name}_X", x.replace("X", rows))
        src = src.replace(f"{name}_K", k.replace("X", rows)).replace(f"{name}_AT", at)
        src = src.replace(f"{name}_READ", read).replace(f"{name}_STEP", step).replace(f"{name}_MAJOR", major)
    return src.replace("WAIT", str(wait)).replace("N", str(n))


def wgmma_kernel(n: int, a_major: str = "k", b_major: str = "mn", wait: int = 0):
    return build(wgmma_source(n, a_major, b_major, wait))


def _run(n: int, a_major: str, b_major: str, wait: int = 0, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, n)).astype(np.float16)
    c = np.zeros((64, n), np.float32)
    args = [a if a_major == "k" else np.ascontiguousarray(a.T), np.ascontiguousarray(b.T) if b_major == "k" else b, c]
    report = run_kernel(wgmma_kernel(n, a_major, b_major, wait), args)
    return c, a.astype(np.float32) @ b.astype(np.float32), report


LAYOUTS = [("k", "mn"), ("k", "k"), ("mn", "mn"), ("mn", "k")]


@pytest.mark.parametrize("n, a_major, b_major", [(8, "k", "k"), (16, "mn", "k")] +
                         [(n, a, b) for n in (64, 128, 192) for a, b in LAYOUTS])
def test_wgmma_multiplies_each_operand_layout(n, a_major, b_major):
    c, want, report = _run(n, a_major, b_major)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    assert report.instructions["wgmma"] == 4 * 4  # four wgmmas, each counted for its 4 warps


def test_wgmma_accumulators_read_before_the_wait_are_stale():
    c, want, _ = _run(64, "k", "mn", wait=1)
    assert np.abs(c).max() == 0 and np.abs(want).max() > 1


def test_the_swizzle_is_the_isa_s_128_byte_pattern():
    # row r of a K-major atom keeps chunk c at chunk c ^ r: 8 rows of one chunk hit 8 bank groups
    addr = operand_bytes(8, "k", 16, 1024)[:, 0]
    assert sorted((swizzle128(addr) % 128 // 16).tolist()) == list(range(8))
    # an M/N-major operand: the next 64 along M/N is LBO on, the next 8 along K SBO on
    mn = operand_bytes(128, "mn", 8192, 1024)
    assert mn[64, 0] == 8192 and mn[0, 8] == 1024 and mn[1, 1] == 130


def _run_64(src: str) -> None:
    """Runs a variant of the 64 x 64 x 64 kernel on random inputs."""
    rng = np.random.default_rng(0)
    run_kernel(build(src), [rng.standard_normal((64, 64)).astype(np.float16),
                            rng.standard_normal((64, 64)).astype(np.float16), np.zeros((64, 64), np.float32)])


def test_an_operand_off_the_swizzle_grid_is_refused():
    # A's start moved 128 bytes: bits 7-9 of its address are no longer zero
    with pytest.raises(EmulatorError, match="bits 7-9"):
        _run_64(wgmma_source(64, "k", "k").replace("sa[kk * 16]", "sa[kk * 16 + 64]"))


def test_wgmma_checks_its_operands():
    a = E.Var("a", TensorType(float16, (E.as_expr(64),)))
    d = E.Var("d", TensorType(float32, (E.as_expr(64),)))
    ref = lambda v: E.TensorElement(v, (E.as_expr(0),))  # noqa: E731
    with pytest.raises(IRError, match="m64nNk16"):
        gpu.Wgmma(ref(d), ref(a), ref(a), "m64n100k16")
    with pytest.raises(IRError, match="multiple of 16"):
        gpu.Wgmma(ref(d), ref(a), ref(a), "m64n64k16", b_sbo=1000)
    with pytest.raises(IRError, match="accumulators"):
        gpu.Wgmma(ref(a), ref(a), ref(a), "m64n64k16")


def test_overwriting_an_operand_in_flight_is_a_race():
    src = wgmma_source(64, "k", "mn").replace("    wgmma_commit()\n", "    wgmma_commit()\n    sa[tid] = a[0, 0]\n")
    with pytest.raises(EmulatorError, match="while a wgmma in flight reads it as its A operand"):
        _run_64(src)


def test_an_operand_past_its_buffer_is_caught_at_issue():
    from taskloom.runtime.emulator import OutOfBoundsError
    with pytest.raises(OutOfBoundsError, match="gives wgmma's B operand shared buffer 'sb' at index 4096"):
        _run_64(wgmma_source(64, "k", "k").replace("sb[kk * 16]", "sb[kk * 16 + 4096]"))


def test_stores_the_tensor_cores_read_need_a_proxy_fence():
    # the tiles were stored by the threads (the generic proxy): without fence.proxy.async the
    # tensor cores (the async proxy) may read the old contents
    src = wgmma_source(64, "k", "mn").replace("    fence_proxy_async()\n", "")
    with pytest.raises(EmulatorError, match=r"reads shared 'sa' at index \d+ as its A operand, which thread "
                                            r"\(\d+, 0, 0\) of block \(0, 0, 0\) wrote by a store or a cp.async "
                                            "with no fence.proxy.async after it"):
        _run_64(src)


def test_a_fence_before_the_stores_does_not_count():
    src = wgmma_source(64, "k", "mn").replace("    fence_proxy_async()\n", "")
    src = src.replace("    tid = threadIdx.x\n", "    tid = threadIdx.x\n    fence_proxy_async()\n")
    with pytest.raises(EmulatorError, match="no fence.proxy.async"):
        _run_64(src)


def test_accumulators_written_after_the_wgmma_fence_are_a_race():
    src = wgmma_source(64, "k", "mn").replace("    wgmma_fence(acc)\n", "    wgmma_fence(acc)\n    acc[0] = 1.0\n")
    with pytest.raises(EmulatorError, match="reads register 'acc' at index 0 as its accumulators, which .* wrote "
                                            "by an ordinary instruction with no wgmma.fence after it"):
        _run_64(src)

