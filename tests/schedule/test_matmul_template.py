"""The x86 matmul template: every class of config in the space, odd shapes, both ISAs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import taskloom
from taskloom.errors import ScheduleError
from taskloom.schedule.templates.matmul_cpu import (MatmulConfig, default_config, matmul_program,
                                                    matmul_space)
from taskloom.target import get_target, host_target

HOST = host_target()
AVX2 = get_target("cpu -isa=avx2")


def run(shape, config, target):
    Bt, M, N, K = shape
    rng = np.random.default_rng(sum(shape))
    A = rng.standard_normal((Bt, M, K), dtype=np.float32)
    B = rng.standard_normal((Bt, K, N), dtype=np.float32)
    C = np.full((Bt, M, N), np.nan, dtype=np.float32)
    taskloom.build(matmul_program(shape, config, target), target)["matmul"](A, B, C)
    ref = np.matmul(A.astype(np.float64), B.astype(np.float64))
    np.testing.assert_allclose(C, ref, rtol=1e-4, atol=1e-4 * np.sqrt(K))


def sample(space, n):
    """``n`` configs spread over the space, every tile shape and core grid among them."""
    picked = {}
    for c in space:
        picked.setdefault((c.mr, c.nv), c)
        picked.setdefault((c.pm, c.pn), c)
    step = max(1, len(space) // n)
    return list({id(c): c for c in [*picked.values(), *space[::step]]}.values())


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_space_is_hardware_centric_and_small(target):
    space = matmul_space(target)
    assert 20 <= len(space) <= 200
    assert len({(c.mr, c.nv, c.kc, c.mc, c.nc, c.pm, c.pn) for c in space}) == len(space)
    for c in space:
        assert c.mr * c.nv + c.nv + 1 <= target.num_vector_registers
        assert c.kc * 2 * target.vector_lanes(taskloom.ir.f32) * 4 <= target.l1d_bytes
        assert c.pm * c.pn == target.num_cores


# shapes with 1s, primes, sizes just past a tile or a block, and a batch
SHAPES = [(1, 1, 1, 1), (1, 1, 37, 5), (1, 13, 1, 7), (1, 17, 29, 1), (1, 31, 47, 131),
          (2, 29, 67, 53), (1, 97, 33, 389), (3, 8, 16, 16)]


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_sampled_configs_on_odd_shapes(target):
    for k, config in enumerate(sample(matmul_space(target), 10)):
        for shape in SHAPES[k % 3::3]:
            run(shape, config, target)


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_small_blocks_exercise_every_edge(target):
    """Blocks far smaller than the shape: many K blocks (partial sums), M and N blocks with
    ragged ends, bands that split unevenly over the cores."""
    lanes = target.vector_lanes(taskloom.ir.f32)
    for config in (MatmulConfig(3, 2, 16, 6, 2 * lanes, target.num_cores, 1),
                   MatmulConfig(2, 3, 7, 4, 3 * lanes, 1, target.num_cores)):
        for shape in ((1, 23, 5 * lanes + 3, 50), (2, 9, 2 * lanes - 1, 33)):
            run(shape, config, target)


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 70), st.integers(1, 70), st.integers(1, 90), st.integers(1, 2))
def test_default_config_any_shape(M, N, K, Bt):
    shape = (Bt, M, N, K)
    run(shape, default_config(shape, HOST), HOST)


def test_default_config_follows_the_target():
    wide = default_config((1, 1024, 1024, 1024), HOST)
    narrow = default_config((1, 1024, 1024, 1024), AVX2)
    assert narrow.mr * narrow.nv + narrow.nv + 1 <= 16
    assert wide.mr * wide.nv + wide.nv + 1 <= HOST.num_vector_registers
    # a wide, short product splits its columns over the cores, a tall one its rows
    assert default_config((1, 16, 3072, 768), HOST).pn == HOST.num_cores
    assert default_config((1, 3072, 16, 768), HOST).pm == HOST.num_cores


def test_bad_config_is_a_clear_error():
    with pytest.raises(ScheduleError, match="vector registers"):
        matmul_program((1, 8, 8, 8), MatmulConfig(16, 4, 64, 64, 64, 1, 1), AVX2)
    with pytest.raises(ScheduleError, match="positive"):
        matmul_program((1, 0, 8, 8), default_config((1, 1, 8, 8), HOST), HOST)
