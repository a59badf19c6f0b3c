"""Which tensor-core matmul config to build, without measuring: the template's space and an
analytic model of its time (Roller's construction: price each tile from the hardware's
rates, take the cheapest).

**The space** is every :class:`~taskloom.schedule.cuda.matmul_mma.MmaConfig` of block tiles
32-128 on a side, one to four warps of at most 64 x 64 (the accumulators of a larger warp
tile outgrow the registers), steps of 32 along K, two to four stages, whose tiles fit 96 KiB
of shared memory (dynamic past 48 KiB) and whose copies divide evenly among its threads.
tf32 tiles, of float32, take twice the bytes, and their warps keep to 64 rows of m and their
pipelines to three or four stages (the others spill a few registers in ptxas).

On ``sm_90a`` the space also holds the Hopper template's configs
(:class:`~taskloom.schedule.cuda.matmul_wgmma.WgmmaConfig`, 16-bit factors): tiles of 64-256
on a side in steps of 64 along K, one or two warpgroups of at most 128 accumulators a thread,
three to five stages within the shared memory a block may opt in to, the factors copied by
``cp.async``, by TMA, or by TMA from a producer warpgroup of their own.

**The model** prices a config on a contraction (batch, M, N, K) as the busiest SM's time:
its share of the blocks (``ceil(blocks / SMs)``, so a tile that leaves SMs idle, or a last
wave of one block, costs what it costs), each block the larger of

- its tensor-core time: the padded tile's multiply-adds at the SM's mma rate (wgmma's twice
  ``mma.sync``'s on Hopper), and
- its load time: the A and B tiles it reads, at the SM's share of the L2 bandwidth.

Small tiles fill more SMs but read more bytes per multiply-add; the model weighs the two.
The rates are per-architecture estimates from NVIDIA's published peaks (dense fp16
``mma.sync``, tf32 at half of it; Hopper's ``mma.sync`` taken at half its ``wgmma`` peak), not
measurements: they rank configs, and a tuning record, once measured, takes precedence.
"""
from __future__ import annotations

import itertools
import math
import os
from typing import Any, Mapping

from taskloom.schedule.contraction import Contraction
from taskloom.ir.dtypes import float32
from taskloom.schedule.cuda.matmul_mma import MmaConfig, factor_type
from taskloom.schedule.cuda.matmul_wgmma import WgmmaConfig
from taskloom.target.cuda import CudaTarget

#: the most shared memory a config may take: one block of it fits an SM of every architecture
#: here, two fit sm_90's 228 KiB (the model does not count the blocks an SM holds at once)
SHARED_LIMIT = 96 * 1024
MAX_WARP_TILE = 64 * 64
#: per compute-capability major: (fp16 multiply-adds an SM's tensor cores do a clock with
#: mma.sync, bytes an SM reads from L2 a clock)
RATES = {8: (1024, 32), 9: (1024, 48)}
WGMMA_RATE = 2048  # fp16 multiply-adds an H100 SM's tensor cores do a clock with wgmma
#: the most float32 accumulators a thread of a wgmma config holds (past it, registers spill)
MAX_ACCUMULATORS = 128
TensorCoreConfig = MmaConfig | WgmmaConfig


def _fits(c: MmaConfig, element_bytes: int, shared: int) -> bool:
    wm, wn = c.warp_tile
    if wm % 16 or wn % 16 or wm * wn > MAX_WARP_TILE or c.shared_bytes(element_bytes) > shared:
        return False
    if element_bytes == 4 and (wm > 64 or c.stages == 2):  # in tf32 these spill a few registers
        return False
    chunk = 16 // element_bytes
    return all((rows * c.block_k // chunk) % c.threads == 0 for rows in (c.block_m, c.block_n))


def space(element_bytes: int = 2, shared: int = SHARED_LIMIT) -> list[MmaConfig]:
    """Every config of the template's space for factors of ``element_bytes`` (2, or 4 for
    tf32) whose tiles fit ``shared`` bytes (see the module docstring)."""
    out = []
    for bm, bn, warps, stages in itertools.product((32, 64, 128), (32, 64, 128), ((1, 1), (1, 2), (2, 1), (2, 2)),
                                                   (2, 3, 4)):
        c = MmaConfig(bm, bn, 32, warps, stages)
        if bm >= 16 * warps[0] and bn >= 16 * warps[1] and _fits(c, element_bytes, shared):
            out.append(c)
    return out


def wgmma_space(shared: int) -> list[WgmmaConfig]:
    """Every config of the Hopper template whose tiles fit ``shared`` bytes (see the module
    docstring)."""
    out = []
    for bm, bn, groups, stages, (tma, producer) in itertools.product(
            (64, 128, 256), (64, 128, 256), (1, 2), (3, 4, 5), ((False, False), (True, False), (True, True))):
        c = WgmmaConfig(bm, bn, stages, groups, tma, producer)
        if c.valid() and c.accumulators <= MAX_ACCUMULATORS and c.shared_bytes() <= shared:
            out.append(c)
    return out


def cycles(con: Contraction, c: TensorCoreConfig, target: CudaTarget, element_bytes: int = 2) -> float:
    """The model's clock cycles for ``con`` with ``c`` on ``target``, its factors of
    ``element_bytes`` (4: tf32, at half the 16-bit rate)."""
    macs, l2 = RATES.get(target.compute_capability[0], RATES[8])
    macs = WGMMA_RATE if isinstance(c, WgmmaConfig) else macs if element_bytes == 2 else macs // 2
    blocks = math.ceil(con.M / c.block_m) * math.ceil(con.N / c.block_n) * con.batch
    k = math.ceil(con.K / c.block_k) * c.block_k
    compute = c.block_m * c.block_n * k / macs
    loads = (c.block_m + c.block_n) * k * element_bytes / l2
    # one step requested ahead leaves a load exposed each step (mma.sync requests stages - 1
    # ahead, wgmma stages - 2); one warp leaves mma idle on the copies
    ahead = c.stages - (2 if isinstance(c, WgmmaConfig) else 1)
    exposed = (1.25 if ahead < 2 else 1.0) * (1.2 if c.threads == 32 else 1.0)
    return math.ceil(blocks / target.num_sms) * max(compute, loads) * exposed


def element_bytes(con: Contraction, target: CudaTarget) -> int:
    """Bytes of a factor element in ``con``'s tiles on ``target``: 4 for tf32, else 2."""
    return 4 if target.tf32 and factor_type(con, True) == float32 else 2


def target_space(target: CudaTarget, nbytes: int) -> list[TensorCoreConfig]:
    """The configs of factors of ``nbytes`` whose tiles fit ``target``'s shared memory:
    ``mma.sync``'s, and on ``sm_90a`` for 16-bit factors wgmma's too."""
    configs: list[TensorCoreConfig] = list(space(nbytes, min(SHARED_LIMIT, target.shared_memory_per_block)))
    if target.has_wgmma() and nbytes == 2 and wgmma_enabled():
        configs += wgmma_space(target.shared_memory_per_block)
    return configs


def wgmma_enabled() -> bool:
    """Whether ``sm_90a`` builds may use wgmma (``TASKLOOM_WGMMA=0`` keeps them on ``mma.sync``)."""
    return os.environ.get("TASKLOOM_WGMMA", "1") != "0"


def config_from_dict(d: Mapping[str, Any]) -> TensorCoreConfig:
    """A tuning record's config, of either template."""
    return WgmmaConfig.from_dict(d) if d.get("kind") == "wgmma" else MmaConfig.from_dict(d)


def choose(con: Contraction, target: CudaTarget) -> TensorCoreConfig:
    """The config of least modelled time; ties go to the larger tile, then more stages, then
    a producer warpgroup, then TMA (which the model does not price: they take the copies off
    the threads that multiply)."""
    nbytes = element_bytes(con, target)
    return min(target_space(target, nbytes), key=lambda c: rank(con, c, target, nbytes))


def rank(con: Contraction, c: TensorCoreConfig, target: CudaTarget, nbytes: int) -> tuple:
    """The order :func:`choose` takes configs in: modelled time, then the tie-breaks."""
    return (cycles(con, c, target, nbytes), -c.block_m * c.block_n, -c.stages, -getattr(c, "specialized", False),
            -getattr(c, "tma", False))
