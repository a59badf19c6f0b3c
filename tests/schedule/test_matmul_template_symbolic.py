"""The x86 matmul template with symbolic sizes: one kernel, every size, against numpy."""
from __future__ import annotations

import re

import numpy as np
import pytest

import taskloom
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program, pack_b_panels
from taskloom.target import get_target, host_target

HOST = host_target()
AVX2 = get_target("cpu -isa=avx2")
Bt, M, N, K = (E.var(n) for n in ("Bt", "M", "N", "K"))


def kernel(shape, config, target, **kw):
    """The template's program with its symbols as leading size parameters, loaded."""
    program = matmul_program(shape, config, target, **kw)
    sizes = [v for v in (Bt, M, N, K) if any(v is d for d in shape)]
    fn = S.Function("matmul", (*sizes, *program.params), program.body, program.kind, program.attrs)
    return taskloom.build(fn, target)["matmul"], program


def check(fn, shape, config, target, prepacked_b=0):
    bt, m, n, k = shape
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    A = rng.standard_normal((bt, m, k), dtype=np.float32)
    B = rng.standard_normal((prepacked_b or bt, k, n), dtype=np.float32)
    C = np.full((bt, m, n), np.nan, dtype=np.float32)
    fn(A, pack_b_panels(B, config, target) if prepacked_b else B, C)
    np.testing.assert_allclose(C, np.matmul(A.astype(np.float64), B.astype(np.float64)), rtol=1e-4,
                               atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
@pytest.mark.parametrize("a_stride", [None, 0], ids=["A-in-place", "A-packed"])
def test_symbolic_rows_take_every_size(target, a_stride):
    """A linear layer's kernel: rows symbolic, B a prepacked weight, A read in place or
    packed; the last tile of rows is a full one (rows past M clamped, never stored) or, with
    ``exact_rows``, one of each count of rows a call may leave, which computes none past M."""
    lanes = target.vector_lanes(taskloom.ir.f32)
    for exact in (False, True):
        config = MatmulConfig(6, 2, 4 * lanes, 12, 4 * lanes, target.num_cores, 1, exact_rows=exact)
        fn, program = kernel((1, M, 3 * lanes + 5, 40), config, target, prepacked_b=1, a_stride=a_stride)
        assert program.attr("packs_a") == (a_stride == 0)
        tiles = re.findall(r"acc = register_tensor\(f32x\d+, \[(\d+), 2\]\)", str(program))
        assert sorted(set(map(int, tiles))) == ([1, 2, 3, 4, 5, 6] if exact else [6])
        # C is stored in two places (where fusion writes the epilogue): the whole tiles, and
        # one loop over the last rows whichever count's tile summed them (exact rows), or
        # the clamped last tile (A read in place)
        assert str(program).count("vstore(C[") == (2 if exact or a_stride is None else 1)
        for rows in (1, 2, 3, 5, 6, 7, 8, 13, 23, 64):
            check(fn, (1, rows, 3 * lanes + 5, 40), config, target, prepacked_b=1)


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_symbolic_batch_columns_and_depth(target):
    """Attention's products: batch, columns and K symbolic (K in several blocks, columns
    past N masked); on either core grid."""
    lanes = target.vector_lanes(taskloom.ir.f32)
    for config in (MatmulConfig(3, 2, 2 * lanes, 6, 2 * lanes, target.num_cores, 1),
                   MatmulConfig(4, 1, lanes, 8, 2 * lanes, 1, target.num_cores)):
        fn, _ = kernel((Bt, M, N, K), config, target)
        for shape in ((1, 1, 1, 1), (2, 7, 3, 5), (3, 13, 2 * lanes + 1, 3 * lanes + 2), (1, 40, 70, 9)):
            check(fn, shape, config, target)


def test_symbolic_sizes_keep_the_configs_grid():
    """The bands follow the config's grid at run time: with a 2 x 1 grid, rows split over the
    cores, whatever M turns out to be (a 1-row call leaves one core idle)."""
    config = MatmulConfig(4, 2, 64, 8, 64, 2, 1)
    program = matmul_program((1, M, 32, 32), config, HOST)
    assert "cores 2x1" in program.attr("config")
    assert program.attr("shape") == (1, "M", 32, 32)


def test_prepacked_b_needs_static_columns_and_depth():
    config = MatmulConfig(4, 2, 64, 8, 64, 1, 1)
    with pytest.raises(taskloom.errors.ScheduleError, match="B prepacked takes static N and K"):
        matmul_program((1, M, N, 32), config, HOST, prepacked_b=1)


def test_symbolic_rows_prefetch_the_next_chunk_every_step():
    """A band whose height comes at run time asks for a line of B's next chunk at every step
    of k, so that a few rows (a short sequence) still bring in most of it; a static band of
    many slivers spreads its requests over every other step."""
    lanes = HOST.vector_lanes(taskloom.ir.f32)
    config = MatmulConfig(4, 2, 64, 256, 4 * lanes, 1, 1)
    fn, program = kernel((1, M, 4 * lanes, 128), config, HOST, prepacked_b=1, prefetch_b=True)
    text = str(program)
    assert "prefetch" in text and "k % 2 == 0" not in text
    static = str(matmul_program((1, 256, 4 * lanes, 128), config, HOST, prepacked_b=1, prefetch_b=True))
    assert "k % 2 == 0" in static
    for rows in (3, 21, 300):
        check(fn, (1, rows, 4 * lanes, 128), config, HOST, prepacked_b=1)
