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

**The model** prices a config on a contraction (batch, M, N, K) after Roller, from the tiles
and the target alone: the busiest SM runs ``ceil(blocks / SMs)`` blocks, as many at once as
its registers, shared memory and threads hold (:func:`blocks_per_sm`, the registers
estimated from the tile, :func:`registers`), in rounds. A round costs a load's latency to
fill the pipeline, its k-steps, and the store of its tiles; a k-step costs the most of

- the tensor cores: the round's multiply-adds on the busiest of the SM's four sub-partitions
  (a warp keeps to one; a block of two warps leaves half the tensor cores idle, and a
  warpgroup's wgmma spans all four at twice ``mma.sync``'s rate on Hopper),
- one warp's own step: its mma time and the latency nothing hides when it is alone on its
  sub-partition (ldmatrix to mma, the barrier, the pipeline's wait),
- the round's tile reads at the SM's share of the L2 bandwidth, and
- the pipeline: a step requested ``stages - 1`` steps ahead (wgmma: ``stages - 2``, one
  group stays in flight) must arrive within them.

The whole is at least the DRAM time of reading each factor once and writing C.
:data:`HARDWARE` holds the rates and latencies per architecture: NVIDIA's published peaks,
derated and given latencies by the H100 kernels Nsight Compute timed
(``bench/results/2026-11-27-h100-first-run.md``; :data:`ANCHORS` pins them). They rank
configs and forecast times; a tuning record, once measured, takes precedence.
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from taskloom.schedule.contraction import Contraction
from taskloom.ir.dtypes import float32
from taskloom.schedule.cuda import occupancy
from taskloom.schedule.cuda.matmul_mma import MmaConfig, factor_type
from taskloom.schedule.cuda.matmul_wgmma import WgmmaConfig
from taskloom.target.cuda import CudaTarget

#: the most shared memory a config may take: one block of it fits an SM of every architecture
#: here, two fit sm_90's 228 KiB
SHARED_LIMIT = 96 * 1024
MAX_WARP_TILE = 64 * 64
#: the most float32 accumulators a thread of a wgmma config holds (past it, registers spill)
MAX_ACCUMULATORS = 128
TensorCoreConfig = MmaConfig | WgmmaConfig


@dataclass(frozen=True)
class Product:
    """The sizes the model prices: a :class:`~taskloom.schedule.contraction.Contraction`'s,
    or these where there is none yet (a split being weighed, a benchmark's shape)."""

    batch: int
    M: int
    N: int
    K: int


@dataclass(frozen=True)
class Hardware:
    """What the model prices with, per SM and in its clock cycles."""

    mma_rate: float      # 16-bit multiply-adds an SM's tensor cores do a clock with mma.sync
    wgmma_rate: float    # the same with wgmma (0: none)
    l2_bytes: float      # bytes an SM reads from L2 a clock
    load_latency: int    # a tile's request to its arrival in shared memory
    step_latency: int    # what a k-step of a warp alone on its sub-partition leaves exposed
    wgmma_step_latency: int  # the same for a warpgroup's asynchronous wgmma step
    block_overhead: int  # a block's start, and its accumulators' store past the last step


#: per compute-capability major. Rates: NVIDIA's dense fp16 peaks (A100 312, H100 SXM 989
#: TFLOP/s; Hopper's mma.sync at half its wgmma rate) times 0.93, what the H100's 4096³
#: kernel sustained of the model's time; mma.sync's step latency: the H100's 128x3072x768
#: kernel's 24 steps of one warp to a sub-partition (9.5 us where the tensor cores needed
#: 3.4). Not measured yet: wgmma's step latency (a guess), and sm_80's latencies (the H100's).
HARDWARE = {8: Hardware(952, 0, 32, 700, 370, 0, 1500),
            9: Hardware(952, 1905, 48, 700, 370, 150, 1500)}
#: the kernels Nsight Compute timed on an H100 (one launch each, SM clock as found), which
#: :data:`HARDWARE` was set from: (arch, (batch, M, N, K), config, cycles measured)
ANCHORS = (("sm_90a", Product(1, 4096, 4096, 4096), MmaConfig(128, 128, 32, (2, 2), 4), round(333.7e-6 * 1.71e9)),
           ("sm_90a", Product(1, 128, 3072, 768), MmaConfig(64, 64, 32, (1, 2), 4), round(9.54e-6 * 1.81e9)))


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


#: a thread's registers as ptxas (CUDA 13) allots them, fit by least squares over the space
#: built for two products (128³, and 512³ with an epilogue): for mma.sync per (major, factor
#: bytes), (accumulators, fragment registers a k-step loads, stages, constant); for wgmma per
#: copy, (accumulators, stages, constant). (16-bit mma.sync refit once C was staged through
#: shared memory, which takes registers off many configs; the stages' term fit below zero
#: then, and is left out.)
MMA_REGISTERS = {(8, 2): (1.14, 1.22, 0, 34), (9, 2): (1.25, 0.63, 0, 29), (4,): (1.23, 0.42, 1.75, 45.5)}
WGMMA_REGISTERS = {"cp.async": (1.24, 0.1, 31), "tma": (1.05, 2.7, 19)}


def sizes(con: "Contraction | Product") -> Product:
    """What the model prices ``con`` at: its sizes, a symbolic one at its hint."""
    return con if isinstance(con, Product) else Product(*con.hint)


def hardware(target: CudaTarget) -> Hardware:
    """The model's numbers for ``target``'s architecture."""
    return HARDWARE.get(target.compute_capability[0], HARDWARE[8])


def registers(c: TensorCoreConfig, element_bytes: int = 2, major: int = 9) -> int:
    """A thread's registers as ptxas allots them for ``c`` on compute capability ``major``,
    estimated from its tile before anything is built (within about 20 of ptxas's count on
    average; a test holds the estimate to ptxas over the space). At most 255: past it ptxas
    spills."""
    if isinstance(c, WgmmaConfig):
        if c.specialized:  # ptxas reports the launch's share of setmaxnreg's 232 and 40
            return 168 if c.warpgroups == 2 and c.accumulators > 32 else round(1.2 * c.accumulators + 16)
        per_acc, per_stage, base = WGMMA_REGISTERS["tma" if c.tma else "cp.async"]
        return min(255, round(per_acc * c.accumulators + per_stage * c.stages + base))
    wm, wn = c.warp_tile
    fragments = (wm // 16 * 4 + wn // 8 * 2) * element_bytes // 2
    per_acc, per_fragment, per_stage, base = MMA_REGISTERS[(4,) if element_bytes == 4 else (min(major, 9), 2)]
    return min(255, round(per_acc * wm * wn / 32 + per_fragment * fragments + per_stage * c.stages + base))


def blocks_per_sm(c: TensorCoreConfig, target: CudaTarget, element_bytes: int = 2) -> int:
    """The blocks of ``c`` an SM of ``target`` holds at once (0: none fits), by
    :func:`~taskloom.schedule.cuda.occupancy.blocks_per_sm`."""
    return occupancy.blocks_per_sm(target, c.threads, registers(c, element_bytes, target.compute_capability[0]),
                                   c.shared_bytes(element_bytes))


def cycles(con: "Contraction | Product", c: TensorCoreConfig, target: CudaTarget, element_bytes: int = 2) -> float:
    """The model's clock cycles for ``con`` with ``c`` on ``target``, its factors of
    ``element_bytes`` (4: tf32, at half the 16-bit rate); see the module docstring."""
    return cycle_parts(con, c, target, element_bytes)["total"]


def cycle_parts(con: "Contraction | Product", c: TensorCoreConfig, target: CudaTarget,
                element_bytes: int = 2) -> dict[str, float]:
    """:func:`cycles` and the parts it is the most of: a k-step's ``tensor``, ``alone``,
    ``reads`` and ``latency`` bounds, the ``rounds`` of blocks the busiest SM runs and the
    ``together`` it holds at once, the SM's ``sm`` cycles and the ``dram`` bound (what the
    learned ranker reads as features, :mod:`taskloom.tune.cuda_ranker`)."""
    con = sizes(con)
    hw = hardware(target)
    wgmma = isinstance(c, WgmmaConfig)
    rate = hw.wgmma_rate if wgmma else hw.mma_rate if element_bytes == 2 else hw.mma_rate / 2
    warps = 4 * c.warpgroups if wgmma else c.threads // 32  # the warps that multiply
    blocks = math.ceil(con.M / c.block_m) * math.ceil(con.N / c.block_n) * con.batch
    per_sm = math.ceil(blocks / target.num_sms)
    together = min(per_sm, max(blocks_per_sm(c, target, element_bytes), 1))
    steps = math.ceil(con.K / c.block_k)
    warp_step = c.block_m * c.block_n * c.block_k / warps / (rate / 4)  # a warp's mma time a step
    tensor = math.ceil(together * warps / 4) * warp_step
    alone = warp_step + (hw.wgmma_step_latency if wgmma else hw.step_latency)
    reads = together * (c.block_m + c.block_n) * c.block_k * element_bytes / hw.l2_bytes
    ahead = max(c.stages - (2 if wgmma else 1), 1)
    latency = hw.load_latency / ahead
    step = max(tensor, alone, reads, latency)
    stores = together * c.block_m * c.block_n * element_bytes / hw.l2_bytes
    rounds = math.ceil(per_sm / together)
    sm = rounds * (hw.load_latency + steps * step + stores + hw.block_overhead)
    dram = (con.M * con.K + con.K * con.N + con.M * con.N) * con.batch * element_bytes
    dram_cycles = dram / (target.dram_gbs * 1e3 / target.clock_mhz)
    return {"tensor": tensor, "alone": alone, "reads": reads, "latency": latency, "step": step, "stores": stores,
            "rounds": rounds, "together": together, "blocks": blocks, "steps": steps, "sm": sm,
            "dram": dram_cycles, "total": max(sm, dram_cycles)}


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


def choose(con: "Contraction | Product", target: CudaTarget, at: Product | None = None) -> TensorCoreConfig:
    """The config of least modelled time for ``con`` (at the sizes ``at``, where a dynamic
    graph's symbols take them); ties go to the larger tile, then more stages, then a
    producer warpgroup, then TMA (which the model does not price: they take the copies off
    the threads that multiply)."""
    nbytes = element_bytes(con, target)
    return min(target_space(target, nbytes), key=lambda c: rank(at or con, c, target, nbytes))


def rank(con: "Contraction | Product", c: TensorCoreConfig, target: CudaTarget, nbytes: int) -> tuple:
    """The order :func:`choose` takes configs in: modelled time, then the tie-breaks."""
    return (cycles(con, c, target, nbytes), -c.block_m * c.block_n, -c.stages, -getattr(c, "specialized", False),
            -getattr(c, "tma", False))
