"""The GPU analytic model: it reproduces the H100 kernels it was set from, prices occupancy,
idle tensor cores, pipeline depth and DRAM as the module says, and estimates registers as
ptxas allots them (the estimate is checked against ptxas where the space is built)."""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import pytest

from taskloom.backend.nvcc import KernelResources
from taskloom.schedule.cuda import occupancy
from taskloom.schedule.cuda.matmul_mma import MmaConfig
from taskloom.schedule.cuda.matmul_wgmma import WgmmaConfig
from taskloom.schedule.cuda.mma_model import (ANCHORS, Product, TensorCoreConfig, blocks_per_sm, choose, cycles,
                                              registers)
from taskloom.target import CudaTarget

H100 = CudaTarget.from_arch("sm_90a")
A100 = CudaTarget.from_arch("sm_80")
BERT = Product(1, 128, 3072, 768)


def assert_registers_estimated(configs: Sequence[TensorCoreConfig], used: Mapping[str, KernelResources],
                               target: CudaTarget, element_bytes: int = 2, prefix: str = "k") -> None:
    """:func:`registers` against ptxas's report for kernels ``<prefix><i>`` of ``configs``:
    off by at most 24 on average, and where ptxas's count holds an SM to four blocks or
    fewer, the estimate's blocks an SM within one of them."""
    major, errors = target.compute_capability[0], []
    for i, c in enumerate(configs):
        actual = used[f"{prefix}{i}"].registers
        errors.append(abs(registers(c, element_bytes, major) - actual))
        measured = occupancy.blocks_per_sm(target, c.threads, actual, c.shared_bytes(element_bytes))
        if measured <= 4:
            assert abs(blocks_per_sm(c, target, element_bytes) - measured) <= 1, (c, actual)
    assert sum(errors) / len(errors) <= 24, max(zip(errors, map(str, configs)))


@pytest.mark.parametrize("arch, con, config, measured", ANCHORS, ids=["4096^3", "128x3072x768"])
def test_the_model_reproduces_the_kernels_it_was_set_from(arch, con, config, measured):
    assert cycles(con, config, CudaTarget.from_arch(arch)) == pytest.approx(measured, rel=0.08)


def test_occupancy_counts_registers_by_the_warp_and_shared_memory_with_its_reserve():
    # the 4096^3 anchor's kernel: 210 registers, 64 KiB of tiles; Nsight Compute saw 2 blocks an SM
    assert occupancy.blocks_per_sm(H100, 128, 210, 64 * 1024) == 2
    assert occupancy.blocks_per_sm(H100, 256, 32, 0) == 8  # threads and registers both allow 8
    assert occupancy.blocks_per_sm(H100, 32, 16, 0) == 32  # the block slots
    assert occupancy.blocks_per_sm(H100, 128, 64, 113 * 1024) == 2  # 2 x (113 + 1) KiB of 228
    assert occupancy.blocks_per_sm(H100, 128, 64, 114 * 1024) == 1
    assert occupancy.blocks_per_sm(H100, 1024, 255, 0) == 0  # no block of it fits
    assert occupancy.blocks_per_sm(CudaTarget.from_arch("sm_86"), 32, 16, 0) == 16


def test_a_block_of_two_warps_leaves_half_the_tensor_cores_idle():
    """At one block an SM (BERT's 96 tiles), two warps keep two of four sub-partitions busy
    (each step's exposed latency, the same for both, is most of the rest)."""
    two, four = MmaConfig(64, 64, 32, (1, 2), 4), MmaConfig(64, 64, 32, (2, 2), 4)
    assert cycles(BERT, two, H100) > 1.2 * cycles(BERT, four, H100)
    # with blocks to spare, several share an SM and fill its sub-partitions either way
    big = Product(1, 8192, 8192, 1024)
    assert cycles(big, two, H100) == pytest.approx(cycles(big, four, H100), rel=0.05)


def test_the_small_products_pick_keeps_every_tensor_core_busy():
    for target in (A100, dataclasses.replace(H100, arch="sm_90")):  # mma.sync alone
        pick = choose(BERT, target)
        assert pick.threads >= 128 and cycles(BERT, pick, target) < cycles(BERT, MmaConfig(64, 64, 32, (1, 2), 4),
                                                                           target)


def test_a_shallow_pipeline_exposes_the_loads_latency():
    shallow, deep = MmaConfig(32, 32, 32, (2, 2), 2), MmaConfig(32, 32, 32, (2, 2), 4)
    assert cycles(BERT, shallow, H100) > 1.5 * cycles(BERT, deep, H100)


def test_a_product_that_streams_a_large_factor_is_priced_at_dram_bandwidth():
    con = Product(1, 16384, 16, 16384)
    dram_bytes = (16384 * 16384 + 16384 * 16 + 16384 * 16) * 2
    per_clock = H100.dram_gbs * 1e3 / H100.clock_mhz
    assert cycles(con, MmaConfig(128, 32, 32, (2, 2), 4), H100) == pytest.approx(dram_bytes / per_clock)


def test_wgmma_prices_a_warpgroup_over_all_four_sub_partitions():
    one, two = WgmmaConfig(128, 128, 4, 1, True, True), WgmmaConfig(128, 128, 4, 2, True, True)
    big = Product(1, 4096, 4096, 4096)
    # a warpgroup's wgmma uses the whole SM: one of 128 rows is as fast as two of 64
    assert cycles(big, one, H100) == pytest.approx(cycles(big, two, H100), rel=0.1)
    assert cycles(big, two, H100) < cycles(big, MmaConfig(128, 128, 32, (2, 2), 4), H100) / 1.5
