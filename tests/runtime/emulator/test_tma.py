"""TMA copies and mbarriers follow the PTX ISA: a box of a tensor lands in shared memory
swizzled by 128 bytes, zeros where it reaches past the tensor, and only once its barrier's
phase is waited for; a wait nothing can complete, which would hang the device, is an error."""
from __future__ import annotations

import numpy as np
import pytest

from taskloom.ir.gpu import TensorMap, tensor_maps
from taskloom.runtime.emulator import EmulatorError, run_kernel
from taskloom.runtime.emulator.wgmma import swizzle128
from tests.runtime.emulator.kernels import build

#: Thread 0 copies the 64 x 64 box of x at (column C0, row R0) into s; every thread waits,
#: then the block copies s out as it lies (swizzled) into y. The launcher encodes x_map: x
#: (100 x 72) seen as 72 columns by 100 rows 144 bytes apart, boxes of 64 x 64.
TMA = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(128, 1, 1),
        tensor_maps=(('x_map', 'x', (72, 100), (144,), (64, 64)),))
def box(x: f16[100, 72], y: f16[4096]):
    s = shared_tensor(f16, [4096])
    bar = shared_tensor(i64, [1])
    if threadIdx.x == 0:
        mbarrier_init(bar[0], 1)
        fence_mbarrier_init()
    barrier()
    if threadIdx.x == 0:
        mbarrier_expect_tx(bar[0], EXPECT)
        tma_load(s[0], 'x_map', (C0, R0), bar[0])
    WAIT
    for i in range(32):
        y[threadIdx.x + i * 128] = s[threadIdx.x + i * 128]
'''

def box_kernel(c0: int, r0: int, expect: int = 8192, wait: str = "mbarrier_wait(bar[0], 0)"):
    src = TMA.replace("C0", str(c0)).replace("R0", str(r0)).replace("EXPECT", str(expect)).replace("WAIT", wait)
    return build(src)


def _swizzled(box: np.ndarray) -> np.ndarray:
    """The 64 x 64 box as shared memory holds it: element (r, c) at swizzle128(128 r + 2 c) / 2."""
    out = np.zeros(4096, box.dtype)
    r, c = np.meshgrid(np.arange(64), np.arange(64), indexing="ij")
    out[swizzle128(128 * r + 2 * c) // 2] = box[r, c]
    return out


@pytest.mark.parametrize("c0, r0", [(0, 0), (8, 36), (64, 90)])
def test_a_box_lands_swizzled_with_zeros_past_the_tensor(c0, r0):
    x = np.random.default_rng(0).standard_normal((100, 72)).astype(np.float16)
    y = np.zeros(4096, np.float16)
    report = run_kernel(box_kernel(c0, r0), [x, y])
    padded = np.zeros((164, 136), np.float16)
    padded[:100, :72] = x
    np.testing.assert_array_equal(y, _swizzled(padded[r0:r0 + 64, c0:c0 + 64]))
    assert report.instructions["tma"] == 1


def test_kernel_script_declares_the_tensor_maps():
    assert tensor_maps(box_kernel(0, 0)) == (TensorMap("x_map", "x", (72, 100), (144,), (64, 64)),)


def test_reading_before_the_wait_reads_the_old_contents():
    x = np.ones((100, 72), np.float16)
    y = np.full(4096, 7, np.float16)
    run_kernel(box_kernel(0, 0, wait="barrier()"), [x, y])
    assert np.isnan(y).all()  # shared memory as it was: never written


def test_a_wait_for_bytes_that_never_come_is_an_error():
    x = np.ones((100, 72), np.float16)
    with pytest.raises(EmulatorError, match="cannot complete: 0 of 1 arrivals and 4096 bytes still missing"):
        run_kernel(box_kernel(0, 0, expect=8192 + 4096), [x, np.zeros(4096, np.float16)])


#: A producer thread copies the box at row 8 k into the one slot, each step once the
#: consumers have freed it; the 128 consumers copy the slot out to y[k] and free it.
ROLES = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(256, 1, 1),
        tensor_maps=(('x_map', 'x', (72, 100), (144,), (64, 64)),))
def roles(x: f16[100, 72], y: f16[3, 4096]):
    s = shared_tensor(f16, [4096])
    full = shared_tensor(i64, [1])
    free = shared_tensor(i64, [1])
    if threadIdx.x == 0:
        mbarrier_init(full[0], 1)
        mbarrier_init(free[0], 128)
        fence_mbarrier_init()
    barrier()
    for k in warp_specialized(3, threadIdx.x >= 128, threadIdx.x == 128):
        with producer:
            mbarrier_wait(free[0], (k + 1) % 2)
            mbarrier_expect_tx(full[0], 8192)
            tma_load(s[0], 'x_map', (0, k * 8), full[0])
        with consumer_setup:
            pass
        with consumer:
            mbarrier_wait(full[0], k % 2)
            for i in range(32):
                y[k, threadIdx.x + i * 128] = s[threadIdx.x + i * 128]
            FREE
        with consumer_finish:
            pass
'''


def test_warp_specialized_roles_meet_at_mbarriers():
    x = np.random.default_rng(1).standard_normal((100, 72)).astype(np.float16)
    y = np.zeros((3, 4096), np.float16)
    run_kernel(build(ROLES.replace("FREE", "mbarrier_arrive(free[0])")), [x, y])
    for k in range(3):
        np.testing.assert_array_equal(y[k], _swizzled(x[8 * k:8 * k + 64, :64]))


def test_a_slot_never_freed_is_a_hang():
    x = np.ones((100, 72), np.float16)
    with pytest.raises(EmulatorError, match="the device would hang"):
        run_kernel(build(ROLES.replace("FREE", "pass")), [x, np.zeros((3, 4096), np.float16)])


def test_the_cuda_dialect_starts_a_tma_kernels_shared_buffers_on_1024_bytes():
    from taskloom.backend.codegen_cuda import codegen_cuda
    from taskloom.ir import stmt as S
    from taskloom.target import CudaTarget
    source = codegen_cuda(S.Module((box_kernel(0, 0),)), CudaTarget.from_arch("sm_90a"))
    assert "__shared__ __half __align__(1024) s[4096];" in source
