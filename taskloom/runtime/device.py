"""Where a compiled graph's memory lives and its library runs: the runtime's device interface.

A device allocates memory (a graph's arena of intermediates), copies host arrays to itself
(its constants), gives the extra arguments a library entry takes on it (the CUDA stream),
waits for the work it was given, and times it. Compiled graphs are written against this
interface: :class:`~taskloom.runtime.compiled_graph.CompiledGraph` runs on the
:class:`CpuDevice` and :class:`~taskloom.runtime.cuda_graph.CudaCompiledGraph` on the
:class:`CudaDevice` (through PyTorch's CUDA allocator and current stream) or, for the
emulator, on the CPU device's memory.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from taskloom.errors import AllocationError, TaskloomError
from taskloom.runtime.aligned import ALIGNMENT, aligned_copy, raw_buffer


@dataclass(frozen=True)
class Allocation:
    """A block of a device's memory: ``ptr`` its aligned address, ``owner`` what keeps it
    alive (a numpy array, a torch tensor)."""

    ptr: int
    nbytes: int
    owner: Any


class Device:
    """The operations a compiled graph needs of the place it runs."""

    name = "device"

    def allocate(self, nbytes: int, what: str, alignment: int = ALIGNMENT) -> Allocation:
        """``nbytes`` bytes aligned to ``alignment``, or an :class:`AllocationError`
        naming ``what`` they were for."""
        raise NotImplementedError

    def upload(self, array: np.ndarray) -> Allocation:
        """A copy of a host array in this device's memory, aligned."""
        raise NotImplementedError

    def entry_args(self) -> tuple[Any, ...]:
        """The arguments a library entry takes after the graph's own on this device."""
        return ()

    def synchronize(self) -> None:
        """Wait until the work given to the device is done."""

    def seconds(self, fn: Any, *args: Any) -> float:
        """The device time of ``fn(*args)``, synchronized on both sides."""
        self.synchronize()
        started = time.perf_counter()
        fn(*args)
        self.synchronize()
        return time.perf_counter() - started


def pointer_table(pointers: Sequence[int]) -> Any:
    """A C array of pointers, as a launcher takes its weights, inputs and outputs."""
    return (ctypes.c_void_p * max(len(pointers), 1))(*pointers)


class CpuDevice(Device):
    """This machine's memory; a library entry is a plain native call."""

    name = "cpu"

    def allocate(self, nbytes: int, what: str, alignment: int = ALIGNMENT) -> Allocation:
        try:
            raw, address = raw_buffer(nbytes, alignment, zeroed=True)
        except (MemoryError, ValueError, OverflowError, OSError):
            raise AllocationError(f"the compiled graph cannot allocate {what}: {nbytes:,} bytes do not fit in "
                                  "this machine's memory (compile smaller shapes, or run on a larger "
                                  "machine)") from None
        return Allocation(address, nbytes, raw)

    def upload(self, array: np.ndarray) -> Allocation:
        copy = aligned_copy(np.ascontiguousarray(array))
        return Allocation(copy.ctypes.data, copy.nbytes, copy)


class CudaDevice(Device):
    """The current CUDA GPU, through PyTorch: its caching allocator and its current stream,
    so that a graph's kernels order with the caller's torch work."""

    name = "cuda"

    def __init__(self) -> None:
        try:
            import torch
        except ImportError:
            raise TaskloomError("device='cuda' runs compiled graphs through PyTorch's CUDA tensors; install "
                                "torch with CUDA, or use device='emulator'") from None
        if not torch.cuda.is_available():
            raise TaskloomError("device='cuda' needs torch with CUDA, and torch.cuda.is_available() is False")
        self.torch = torch

    def allocate(self, nbytes: int, what: str, alignment: int = 256) -> Allocation:
        try:
            raw = self.torch.empty(nbytes + alignment, dtype=self.torch.uint8, device="cuda")
        except self.torch.cuda.OutOfMemoryError:
            raise AllocationError(f"the compiled graph cannot allocate {what}: {nbytes:,} bytes do not fit in "
                                  "the GPU's free memory") from None
        return Allocation((raw.data_ptr() + alignment - 1) // alignment * alignment, nbytes, raw)

    def upload(self, array: np.ndarray) -> Allocation:
        t = self.torch.from_numpy(np.ascontiguousarray(array)).cuda()
        return Allocation(t.data_ptr(), t.numel() * t.element_size(), t)

    def stream(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(int(self.torch.cuda.current_stream().cuda_stream))

    def entry_args(self) -> tuple[Any, ...]:
        return (self.stream(),)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def seconds(self, fn: Any, *args: Any) -> float:
        """Timed by CUDA events on the current stream."""
        start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
