"""The runtime's device interface: aligned allocations that say what did not fit, uploads
that copy, the CUDA device through torch's allocator and stream."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from taskloom.errors import AllocationError
from taskloom.runtime.aligned import MAPPED_BYTES, aligned_empty_at
from taskloom.runtime.device import CpuDevice, CudaDevice, pointer_table


def test_cpu_allocations_are_aligned_and_owned():
    cpu = CpuDevice()
    block = cpu.allocate(1000, "a test arena", alignment=256)
    assert block.ptr % 256 == 0 and block.nbytes == 1000
    assert block.owner.ctypes.data == block.ptr and block.owner.nbytes == 1000


@pytest.mark.parametrize("nbytes", [1000, MAPPED_BYTES + 12])
def test_large_allocations_are_mapped_zeroed_and_owned(nbytes):
    """Both ways an arena is allocated (numpy's, or mapped from the system past a size):
    aligned, zeroed, writable, and kept alive by its owner."""
    block = CpuDevice().allocate(nbytes, "a test arena")
    assert block.ptr % 64 == 0 and block.owner.nbytes == nbytes and block.owner.ctypes.data == block.ptr
    assert not block.owner.any() and block.owner.flags.writeable
    block.owner[-1] = 7
    assert ctypes.c_uint8.from_address(block.ptr + nbytes - 1).value == 7
    out, address = aligned_empty_at((3, MAPPED_BYTES // 8 + 5), np.float32)
    assert address % 64 == 0 and out.ctypes.data == address and out.flags.c_contiguous
    out[...] = 2.0
    assert float(out.sum()) == 2.0 * out.size


def test_an_allocation_that_cannot_fit_names_what_it_was_for():
    with pytest.raises(AllocationError, match="the arena of its intermediates: 4,611,686,018,427,387,904 bytes"):
        CpuDevice().allocate(1 << 62, "the arena of its intermediates")


def test_uploads_copy_into_aligned_memory():
    a = np.arange(10, dtype=np.float32)[1:]  # a view 4 bytes past an aligned start
    up = CpuDevice().upload(a)
    assert up.ptr % 64 == 0 and up.owner is not a
    np.testing.assert_array_equal(up.owner, a)


def test_pointer_tables_and_timing():
    table = pointer_table([16, 32])
    assert list(table) == [16, 32] and len(pointer_table([])) == 1
    assert isinstance(table[0], int) and ctypes.sizeof(table) == 2 * ctypes.sizeof(ctypes.c_void_p)
    assert CpuDevice().seconds(sum, range(1000)) >= 0


@pytest.mark.cuda
def test_the_cuda_device_allocates_on_the_gpu_and_times_with_events():
    torch = pytest.importorskip("torch")
    gpu = CudaDevice()
    block = gpu.allocate(1 << 20, "a test arena")
    assert block.ptr % 256 == 0 and block.owner.is_cuda
    up = gpu.upload(np.ones(8, np.float16))
    assert up.owner.device.type == "cuda" and float(up.owner.sum()) == 8.0
    x = torch.randn(256, 256, device="cuda")
    assert gpu.seconds(torch.matmul, x, x) > 0 and len(gpu.entry_args()) == 1
