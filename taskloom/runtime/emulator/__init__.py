"""The SIMT emulator: taskloom's CUDA kernels run on the CPU, from the lowered IR the CUDA
code generator prints, vectorized across threads with numpy, checked and counted as they run.

    report = run_kernel(taskloom.transforms.lower(fn), [N, x, y])   # arrays written in place
    print(report.summary())                                          # sectors, bank conflicts, ...

A value is an array over the threads of a batch of blocks; control flow is a mask; shared
memory is an array per block, registers an array per thread; a barrier is a lockstep
point; warp primitives act on groups of 32 lanes; ``ldmatrix`` and ``mma.sync`` follow the
PTX ISA's fragment layouts lane by lane. Fresh shared memory, registers and uninitialized
variables hold garbage (0xFF bytes), as on the device. With ``check=True`` out-of-bounds
accesses, barriers and warp collectives under divergence, shared-memory races within a
barrier interval, global elements two blocks of a launch meet on (one writing), and a wgmma
reading what no proxy or wgmma fence made visible to it raise :class:`EmulatorError`
naming the kernel, buffer, index, thread and block.
"""
from taskloom.runtime.emulator.checks import DivergenceError, EmulatorError, OutOfBoundsError, RaceError
from taskloom.runtime.emulator.counters import INSTRUCTION_CLASSES, Counters
from taskloom.runtime.emulator.launch import compile_kernel, run_kernel
from taskloom.runtime.emulator.report import EmulatorReport

__all__ = ["Counters", "DivergenceError", "EmulatorError", "EmulatorReport", "INSTRUCTION_CLASSES",
           "OutOfBoundsError", "RaceError", "compile_kernel", "run_kernel"]
