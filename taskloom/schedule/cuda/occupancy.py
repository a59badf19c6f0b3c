"""How many blocks of a kernel an SM holds at once: the least of what its registers, shared
memory, threads and block slots allow (CUDA's occupancy calculation).

Registers are allotted a warp at a time in units of 256 (a thread's count rounded up to 8),
and each block's shared memory takes 1 KiB more that the system reserves (sm_80 on).
"""
from __future__ import annotations

import math

from taskloom.target.cuda import CudaTarget

MAX_BLOCKS_PER_SM = 32  # sm_80 and sm_90 alike (sm_86 and sm_89: 16)
REGISTER_UNIT = 256
RESERVED_SHARED = 1024


def max_blocks(target: CudaTarget) -> int:
    """The block slots of an SM of ``target``."""
    return 16 if target.compute_capability in ((8, 6), (8, 9)) else MAX_BLOCKS_PER_SM


def blocks_per_sm(target: CudaTarget, threads: int, registers: int, shared_bytes: int) -> int:
    """Blocks of ``threads`` threads, each using ``registers`` a thread and ``shared_bytes`` of
    shared memory, that one SM of ``target`` runs at once; 0 where not even one fits."""
    warps = math.ceil(threads / target.warp_size)
    per_warp = math.ceil(registers * target.warp_size / REGISTER_UNIT) * REGISTER_UNIT
    by_registers = target.registers_per_sm // (per_warp * warps) if registers else max_blocks(target)
    by_shared = target.shared_memory_per_sm // (shared_bytes + RESERVED_SHARED)
    by_threads = target.max_threads_per_sm // threads
    return min(by_registers, by_shared, by_threads, max_blocks(target))
