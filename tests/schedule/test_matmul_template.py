"""The x86 matmul template: every class of config in the space, odd shapes, both ISAs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import taskloom
from taskloom.errors import ScheduleError
from taskloom.schedule.templates import matmul_cpu
from taskloom.ir import cdiv, f32
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.functor import Rewriter
from taskloom.schedule.templates.matmul_cpu import (LINE_FLOATS, MatmulConfig, blocking, core_grid, default_config,
                                                    k_block, matmul_program, matmul_space, pack_b_panels,
                                                    reads_a_in_place, reads_b_in_place)
from taskloom.ir.index import round_up
from taskloom.target import CpuTarget, get_target, host_target

HOST = host_target()
AVX2 = get_target("cpu -isa=avx2")
AVX512 = CpuTarget("avx512 box", 2, {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"},
                   l1d_bytes=48 * 1024, l2_bytes=2 * 1024 ** 2)


@pytest.fixture(autouse=True)
def every_product_shares_its_cores(monkeypatch):
    """The shapes here are small, to test fast; products that small would run on one core
    (SERIAL_FMAS), and the bands of each core grid would go untested."""
    monkeypatch.setattr(matmul_cpu, "SERIAL_FMAS", 0)


def run(shape, config, target, prepacked_b=0, prefetch_b=False, a_stride=None, prefetch_c=False):
    """The template's product against numpy; with ``prepacked_b`` (1: one B for every batch,
    or the batch), B is handed over as prepacked panels; ``a_stride=0`` makes it pack A."""
    Bt, M, N, K = shape
    rng = np.random.default_rng(sum(shape))
    A = rng.standard_normal((Bt, M, K), dtype=np.float32)
    B = rng.standard_normal((prepacked_b or Bt, K, N), dtype=np.float32)
    C = np.full((Bt, M, N), np.nan, dtype=np.float32)
    program = matmul_program(shape, config, target, prepacked_b=prepacked_b, prefetch_b=prefetch_b,
                             a_stride=a_stride, prefetch_c=prefetch_c)
    b_arg = pack_b_panels(B, config, target) if prepacked_b else B
    taskloom.build(program, target)["matmul"](A, b_arg, C)
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
            run(shape, config, target, prefetch_c=True)  # the hints stay inside C at every edge


@given(K=st.integers(1, 5000), kc=st.integers(1, 600), lanes=st.sampled_from([8, 16]))
def test_k_blocks_are_even_and_never_more_or_larger(K, kc, lanes):
    """The K block evens out the config's: whole vectors (or all of K), the same number of
    blocks, none larger, and a last block at least as long as the config's own would leave."""
    KC, own = k_block(K, kc, lanes), min(round_up(kc, lanes), K)
    assert KC == K or KC % lanes == 0
    assert KC <= own and cdiv(K, KC) == cdiv(K, own)
    assert K - (cdiv(K, KC) - 1) * KC >= K - (cdiv(K, own) - 1) * own


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_evened_k_blocks_compute_the_product(target):
    """K = 300 in blocks of 144 would end with 12; evened out they are 112, 112 and 76
    (AVX-512) or 104, 104 and 92 (AVX2)."""
    config = MatmulConfig(4, 2, 144, 64, 1024, 1, target.num_cores)
    KC = blocking((1, 13, 37, 300), config, target)[4]
    assert KC == {16: 112, 8: 104}[target.vector_lanes(taskloom.ir.f32)]
    assert f"K in 3 blocks of {KC}" in dict(matmul_program((1, 13, 37, 300), config, target).attrs)["config"]
    run((1, 13, 37, 300), config, target)


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_one_row_of_tiles_reads_b_in_place(target):
    """A core's band one register tile high reads B where it lies (no packing loop) and gets
    the same numbers: ragged columns, K in several blocks, a batch, rows split over cores; a
    band two tiles high packs B."""
    lanes = target.vector_lanes(taskloom.ir.f32)
    P = target.num_cores
    for config, shape in ((MatmulConfig(4, 2, 16, 8, 2 * lanes, 1, P), (1, 1, 5 * lanes + 3, 50)),
                          (MatmulConfig(4, 2, 16, 8, 2 * lanes, 1, P), (2, 3, 2 * lanes - 1, 33)),
                          (MatmulConfig(4, 3, 8, 8, 3 * lanes, P, 1), (1, 4 * P - 1, lanes + 1, 19)),
                          (MatmulConfig(1, 4, 32, 8, 4 * lanes, 1, P), (1, 1, 9 * lanes - 2, 70))):
        assert reads_b_in_place(shape, config, target)
        assert matmul_program(shape, config, target).attr("packs_b") is False
        run(shape, config, target)
    tall = MatmulConfig(4, 2, 16, 8, 2 * lanes, 1, P)
    assert not reads_b_in_place((1, 5, 64, 64), tall, target)
    assert matmul_program((1, 5, 64, 64), tall, target).attr("packs_b") is True


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_packed_and_in_place_a_on_sampled_configs(target):
    """A packed into blocks (told it does not copy plainly) and A read where it lies give
    the same numbers on every tile and core grid: rows past M, K in several blocks, a batch."""
    lanes = target.vector_lanes(taskloom.ir.f32)
    small = MatmulConfig(3, 2, 16, 6, 2 * lanes, target.num_cores, 1)
    for k, config in enumerate([small, *sample(matmul_space(target), 6)]):
        for shape in SHAPES[k % 2::2]:
            for a_stride in (0, shape[3]):
                program = matmul_program(shape, config, target, a_stride=a_stride)
                assert program.attr("packs_a") is not reads_a_in_place(shape, config, target, a_stride)
                run(shape, config, target, a_stride=a_stride)


def test_a_is_read_in_place_in_blocks_of_few_panels_and_uncrowded_sets():
    """A plain A is read in place when a block has at most four column panels and at most
    two of a tile's rows share an L1 set; more panels, rows 512 floats apart, nine rows 768
    apart, or an A that does not copy plainly, and A is packed (16-lane vectors, whatever the host)."""
    c64 = MatmulConfig(6, 4, 144, 906, 1024, 2, 1)
    assert reads_a_in_place((1, 3136, 64, 256), c64, AVX512, 256)  # one panel, rows 1 KiB apart
    assert reads_a_in_place((1, 3136, 256, 64), c64, AVX512, 64)  # four panels, rows 256 bytes apart
    assert not reads_a_in_place((1, 1568, 512, 64), c64, AVX512, 64)  # eight panels
    assert not reads_a_in_place((1, 784, 128, 512), c64, AVX512, 512)  # three rows on the same sets
    assert not reads_a_in_place((1, 289, 192, 768), MatmulConfig(9, 3, 192, 675, 1024, 1, 2), AVX512, 768)
    assert not reads_a_in_place((1, 3136, 64, 256), c64, AVX512, 0)
    assert matmul_program((1, 512, 512, 512), c64, AVX512).attr("packs_a") is True
    assert matmul_program((1, 3136, 64, 256), c64, AVX512).attr("packs_a") is False


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_prepacked_b_on_sampled_configs(target):
    """B read from panels packed ahead of time: every tile and core grid, edges in M, N and
    K, K in several blocks, one B shared by a batch and one B per batch."""
    for k, config in enumerate(sample(matmul_space(target), 8)):
        for shape in SHAPES[k % 3::3]:
            run(shape, config, target, prepacked_b=1)
    lanes = target.vector_lanes(taskloom.ir.f32)
    small = MatmulConfig(3, 2, 16, 6, 2 * lanes, target.num_cores, 1)
    run((2, 23, 5 * lanes + 3, 50), small, target, prepacked_b=2)
    run((3, 9, 2 * lanes - 1, 33), small, target, prepacked_b=1)


MARGIN = 4096  # elements of the trace on either side of B's panels


def prefetched(shape, config, target, prepacked_b):
    """The offsets into B's panels (flat) that the kernel asks the cache for, found by running
    it with each prefetch turned into a store of 1 into a trace laid out like the panels,
    with MARGIN elements on either side; the second result counts the stores that missed B."""
    program = matmul_program(shape, config, target, prepacked_b=prepacked_b, prefetch_b=True)
    B = program.params[1]
    dims = [int(d.value) for d in B.type.shape]
    trace = E.Var("trace", f32[2 * MARGIN + int(np.prod(dims))])

    class Trace(Rewriter):
        def visit_Prefetch(self, s):
            assert s.tensor is B
            flat = s.indices[0]
            for d, i in zip(dims[1:], s.indices[1:]):
                flat = flat * d + i
            return S.BufferStore(trace, (flat + MARGIN,), E.const(1.0, f32))

    traced = S.Function("traced", (*program.params, trace), Trace().visit(program.body), program.kind)
    Bt, M, N, K = shape
    hits = np.zeros(trace.type.shape[0].value, np.float32)
    taskloom.build(traced, target)["traced"](np.ones((Bt, M, K), np.float32), np.zeros(dims, np.float32),
                                             np.zeros((Bt, M, N), np.float32), hits)
    inside = hits[MARGIN:-MARGIN]
    return set(np.flatnonzero(inside)), int(hits[:MARGIN].sum() + hits[-MARGIN:].sum())


def chunks_after_the_first(shape, config, target, prepacked_b):
    """Each line of B's panels a core reads after its first chunk (KC rows of one panel),
    as its offset into the panels: what the kernel should have asked for ahead of time.
    Prepacked panels are read M block by M block, each over all of K."""
    Bt, M, N, K = shape
    NR = config.nv * target.vector_lanes(f32)
    PM, PN = core_grid(shape, config, target)
    BAND_M, BAND_N, MC, NC, KC = blocking(shape, config, target)
    lines = set()
    for tm, tn in ((tm, tn) for tm in range(PM) for tn in range(PN)):
        n_lo, n_hi = tn * BAND_N, min(N, (tn + 1) * BAND_N)
        m_blocks = cdiv(min(BAND_M, M - tm * BAND_M), MC)
        for b in range(Bt):
            order = [(n0 // NR + jr, k0) for n0 in range(n_lo, n_hi, NC) for _ in range(m_blocks)
                     for k0 in range(0, K, KC) for jr in range(cdiv(min(NC, n_hi - n0), NR))]
            for panel, k0 in order[1:]:
                start = ((min(b, prepacked_b - 1) * cdiv(N, NR) + panel) * K + k0) * NR
                lines |= set(range(start, start + min(KC, K - k0) * NR, LINE_FLOATS))
    return lines


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_prefetch_asks_for_each_next_panel_and_nothing_else(target):
    """With a streamed weight, the slivers working on one panel of B ask for the next one's
    lines (the next panel, the first of the next K block, of the next M block, of the next N block):
    every line each core reads after its first chunk, and nothing outside the panels. Full
    MC blocks, so that each panel has all its slivers; ragged N and K; grids both ways; a
    batch with one B each. The numbers stay right."""
    lanes = target.vector_lanes(f32)
    P = target.num_cores
    for config, shape, pb in ((MatmulConfig(3, 2, 16, 6, 2 * lanes, P, 1), (1, 12 * P, 5 * lanes + 3, 50), 1),
                              (MatmulConfig(2, 3, 16, 4, 3 * lanes, 1, P), (1, 8, 7 * lanes + 5, 37), 1),
                              (MatmulConfig(4, 1, 8, 8, 2 * lanes, P, 1), (2, 8 * P, 3 * lanes - 2, 29), 2)):
        assert matmul_program(shape, config, target, prepacked_b=pb, prefetch_b=True).attr("prefetch_b")
        asked, stray = prefetched(shape, config, target, pb)
        assert stray == 0
        assert asked == chunks_after_the_first(shape, config, target, pb), config
        run(shape, config, target, prepacked_b=pb, prefetch_b=True)


def test_prefetch_only_for_panels_read_more_than_once():
    """A band one tile high reads each panel once, in order (the hardware prefetcher's
    case), and B packed by the kernel is already in L2: neither gets prefetches."""
    config = MatmulConfig(4, 2, 16, 8, 32, 1, 1)
    assert not matmul_program((1, 4, 64, 64), config, HOST, prepacked_b=1, prefetch_b=True).attr("prefetch_b")
    assert not matmul_program((1, 9, 64, 64), config, HOST, prefetch_b=True).attr("prefetch_b")
    assert matmul_program((1, 9, 64, 64), config, HOST, prepacked_b=1, prefetch_b=True).attr("prefetch_b")


def test_prepacked_panels_layout_and_bad_batches():
    config = MatmulConfig(2, 2, 16, 4, 32, 1, 1)
    B = np.arange(2 * 3 * 40, dtype=np.float32).reshape(2, 3, 40)
    panels = pack_b_panels(B, config, HOST)
    nr = 2 * HOST.vector_lanes(taskloom.ir.f32)
    assert panels.shape == (2, -(-40 // nr), 3, nr)
    assert panels[1, 0, 2, 5] == B[1, 2, 5] and panels[0, 1, 1, 0] == B[0, 1, nr]
    assert np.all(panels[:, -1, :, 40 - nr * (panels.shape[1] - 1):] == 0)  # columns past N are zeros
    with pytest.raises(ScheduleError, match="prepacked_b=2"):
        matmul_program((3, 8, 8, 8), config, HOST, prepacked_b=2)


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


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_cores_without_a_band_are_not_woken(target, monkeypatch):
    """A product too small to share runs on one core, and a grid row or column of cores left
    without a band drops out: the kernel then has no parallel region to wake a team for."""
    monkeypatch.setattr(matmul_cpu, "SERIAL_FMAS", 1 << 16)
    lanes = target.vector_lanes(taskloom.ir.f32)
    P = target.num_cores
    grid = MatmulConfig(4, 2, 16, 8, 2 * lanes, P, 1)
    assert core_grid((1, 8, 64, 64), grid, target) == (1, 1)  # 32 768 FMAs
    assert core_grid((1, 1, 2048, 64), grid, target) == (1, 1)  # one row of tiles: no second band
    assert core_grid((1, 64, 2048, 64), grid, target) == (P, 1)
    assert core_grid((1, 1, 2048, 64), MatmulConfig(4, 2, 16, 8, 2 * lanes, 1, P), target) == (1, P)
    for shape in ((1, 8, 64, 64), (1, 1, 2048, 64)):
        program = matmul_program(shape, grid, target)
        assert "omp parallel" not in taskloom.build(program, target).source_path.read_text()
        run(shape, grid, target)
    if P > 1:
        shared = matmul_program((1, 64, 2048, 64), grid, target)
        assert "omp parallel" in taskloom.build(shared, target).source_path.read_text()
