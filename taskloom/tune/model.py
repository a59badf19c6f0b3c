"""The analytic performance model: a matmul-template config's time from the config and
the hardware alone, with nothing built or run.

``tune=0`` builds only the model's top choice (:func:`best_config`). The model follows the
template's loop nest (:mod:`taskloom.schedule.templates.matmul_cpu`) for the busiest core
of the ``PM x PN`` grid, as Roller prices an rTile by the traffic of each memory level:

- **micro-kernel**: each call does ``kn`` rank-1 updates of an ``MR x NV``-vector tile. A
  step costs the larger of its FMAs (two FMA ports) and its loads (``NV`` vectors of B and
  ``MR`` broadcasts of A, two load ports) plus a share of the smaller, at the per-core FMA
  rate the probe measured with every core busy; a call adds the accumulators' set-up and
  stores. Padded rows and columns
  at the edges (a 2039 matrix in 6-row tiles computes 2040 rows) are computed, so they cost.
- **traffic**: the B panel (``KC x NR``) is reused by every row tile; when it, the A
  micro-panel and the tile of partial sums do not fit L1's ways together
  (:func:`l1_keeps_panel`) it streams from L2 on every call, at a share of the
  probed L2 bandwidth. The A micro-panel streams from L2 on every call.
  When the B block (``KC x NC``) does not fit L2 it comes back from L3 for every block of
  rows. Each call takes the longest of its compute and its streams (they overlap).
- **partial sums**: when K spans several blocks, every call reads and writes its tile of
  the band's partial-sum buffer (``BAND_M x NC``), from L2, L3 or DRAM as that buffer fits
  (small K blocks on a 4096 x 4096 product stream 32 MiB of partial sums per block); with
  B's panels packed ahead the template walks all of K for each M block, and the buffer is
  ``MC x NC``.
- **packing**: every element of A is packed once per column block, of B once per band (a
  band one tile high reads B in place, and so does a plain A in blocks of few column panels
  whose rows spread over L1's sets: only their reads count); a
  packed element costs its reads from wherever the operand lives (L2, L3 or DRAM, sized
  by the operand against the caches, DRAM shared by the busy cores) and the copy itself,
  which is cheap for a contiguous vector copy and about a cycle per element for a prologue
  that packs lane by lane (a 3x3 convolution's window: :func:`~taskloom.schedule.cpu.pack_costs`).
- **balance**: the busiest core's band is what counts; a grid with idle cores or ragged
  bands predicts slower. Grids the model prices within 1% of each other are a tie, which
  goes to the grid splitting more rows (:func:`rank`).

Rejected before anything is built: tiles that need more vector registers than the target
has, an A block or B panel larger than L2. A B panel larger than L1 is priced (its L2
stream), not rejected: on a 48 KiB L1 the 6 x 4-vector tile with KC = 384 (a 96 KiB panel)
measured fastest, the L2 keeping up with a prefetched stream.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from taskloom.ir import cdiv
from taskloom.ir.dtypes import float32
from taskloom.schedule.templates.matmul_cpu import (L1_SET_SPAN, MatmulConfig, blocking, default_config,
                                                     matmul_space, reads_a_in_place, reads_b_in_place)
from taskloom.schedule.contraction import DEFAULT_PACK, b_vectorizes, plain_a_stride
from taskloom.target.cpu import CpuTarget
from taskloom.tune.probe_cpu import HardwareProfile, profile_for

#: Vector FMA and load ports per core: two of each on every AVX2 and AVX-512 core we target.
FMA_PORTS, LOAD_PORTS = 2, 2
#: The share of a k step's loads (or FMAs, whichever are fewer) that the other does not
#: hide: tiles doing more FMAs per load run closer to peak (6 x 4 vectors beats 4 x 4).
#: Fitted, with L2_STREAM_SHARE and LANE_NODES_PER_CYCLE, on half of the tasks of
#: bench/tune_model.py (a grid search; the other half validates): nothing is hidden.
LOAD_OVERLAP = 1.0
#: The share of the probed L2 read bandwidth a stream inside the micro-kernel gets (the
#: probe reads with nothing else running; the kernel's L1 loads compete with the refills).
L2_STREAM_SHARE = 0.15
#: Cycles a micro-kernel call spends outside its k loop besides the accumulators: loop and
#: address set-up, the branch on the K block.
CALL_OVERHEAD_CYCLES = 12
#: A fork-join of the parallel region with the team awake, as it is between a graph's
#: kernels; none when the kernel runs on one core. The measurements behind this and the
#: other choices noted here are in bench/results/2026-11-25-design-measurements.md.
PARALLEL_OVERHEAD_S = 0.5e-6
#: Predicted times this close to the fastest are a tie, broken for the grid that splits more
#: rows (see rank).
GRID_TIE = 0.01


@dataclass(frozen=True)
class Prediction:
    """The predicted seconds of one config, what they are made of, or why it is rejected."""

    seconds: float
    parts: dict[str, float] = field(default_factory=dict)
    rejected: str | None = None

    @property
    def ok(self) -> bool:
        return self.rejected is None


def l1_keeps_panel(b_panel: int, a_panel: int, c_tile: int, target: CpuTarget) -> bool:
    """Whether a micro-kernel call's B panel (``b_panel`` bytes) stays in L1 from call to
    call. Each thing a call touches is contiguous and so fills its share of L1's sets
    evenly: a block of ``n`` bytes takes ``cdiv(n, L1_SET_SPAN)`` ways of the sets it
    touches. The panel, the A micro-panel and the tile of partial sums (``c_tile``: read and
    written by every call when K spans several blocks, else 0) must fit in the ways L1 has
    together: counted by bytes alone, a panel that fills L1 to the last line looks as if it
    stays, and it does not."""
    ways = target.l1d_bytes // L1_SET_SPAN
    return sum(cdiv(n, L1_SET_SPAN) for n in (b_panel, a_panel, c_tile)) <= ways


def _blocks(extent: int, block: int) -> list[int]:
    """The sizes of ``extent`` cut into ``block``-sized pieces."""
    return [min(block, extent - s) for s in range(0, extent, block)]


def predict(shape: tuple[int, int, int, int], config: MatmulConfig, target: CpuTarget,
            profile: HardwareProfile | None = None, pack: tuple[float, float] = DEFAULT_PACK,
            a_stride: int | None = None, b_streams: bool = False) -> Prediction:
    """The predicted seconds of the matmul template running ``shape = (Bt, M, N, K)`` with
    ``config`` on ``target``. ``pack`` is the cost in cycles of packing one vector of A and
    of B (see :func:`~taskloom.schedule.cpu.pack_costs`); ``profile`` defaults to the target's probe or estimate;
    ``a_stride`` is the distance between A's rows as the kernel reads them (default
    :func:`~taskloom.schedule.contraction.plain_a_stride`). ``b_streams``: B is a weight of
    a graph whose weights outgrow the caches, which the other kernels evict before the next
    call, so that each core reads its band of B from memory (however small B is).

    >>> predict((1, 512, 512, 512), default_config((1, 512, 512, 512), t), t).seconds
    """
    p = profile or profile_for(target)
    Bt, M, N, K = (int(x) for x in shape)
    c = config
    L = target.vector_lanes(float32)
    MR, NV, NR = c.mr, c.nv, c.nv * L
    regs = MR * NV + NV + 1
    if regs > target.num_vector_registers:
        return Prediction(float("inf"), rejected=f"the {MR}x{NV} tile needs {regs} vector registers, "
                                                 f"the target has {target.num_vector_registers}")
    P = c.pm * c.pn
    if P > target.num_cores:
        return Prediction(float("inf"), rejected=f"a {c.pm}x{c.pn} grid needs {P} cores, the target has "
                                                 f"{target.num_cores}")
    BAND_M, BAND_N, MC, NC, KC = blocking((Bt, M, N, K), c, target)  # as the template builds them
    a_block, b_panel, b_block = MC * KC * 4, KC * NR * 4, KC * NC * 4
    if a_block > target.l2_bytes:
        return Prediction(float("inf"), rejected=f"the {MC}x{KC} block of A ({a_block} B) overflows L2 "
                                                 f"({target.l2_bytes} B)")
    if b_panel > target.l2_bytes:
        return Prediction(float("inf"), rejected=f"the {KC}x{NR} panel of B ({b_panel} B) overflows L2")

    # the busiest core: the first band of each axis is full-sized
    rows, cols = min(BAND_M, M), min(BAND_N, N)
    busy = cdiv(M, BAND_M) * cdiv(N, BAND_N)
    row_tiles = sum(cdiv(mm, MR) for mm in _blocks(rows, MC))
    col_blocks = _blocks(cols, NC)
    col_tiles = sum(cdiv(nn, NR) for nn in col_blocks)
    k_blocks = _blocks(K, KC)

    # seconds per cycle at the all-core FMA rate: FMA_PORTS vector FMAs of L lanes per cycle
    per_core_flops = p.fma_gflops_all * 1e9 / max(1, target.num_cores)
    cycle = 2 * L * FMA_PORTS / per_core_flops
    l1, l2 = p.l1_gbs * 1e9, p.l2_gbs * 1e9
    l3 = p.l3_gbs * 1e9 / max(1, busy)
    mem = min(p.mem_gbs, busy * p.mem_gbs_core) * 1e9 / busy

    def source_bandwidth(nbytes: int, stream: bool = False) -> float:
        """The bandwidth of the level an operand of ``nbytes`` is read from (``stream``: by
        the micro-kernel, which gets only a share of L2's)."""
        if nbytes <= target.l2_bytes // 2:
            return l2 * (L2_STREAM_SHARE if stream else 1.0)
        if nbytes * busy <= target.l3_bytes // 2:
            return l3
        return mem

    fma_cycles, load_cycles = MR * NV / FMA_PORTS, (MR + NV) / LOAD_PORTS
    step_cycles = max(fma_cycles, load_cycles) + LOAD_OVERLAP * min(fma_cycles, load_cycles)
    call_cycles = CALL_OVERHEAD_CYCLES + 2 * MR * NV / LOAD_PORTS  # accumulators in and out
    # the B panel stays in L1 only if what else a call touches leaves it room in every set
    # (:func:`l1_keeps_panel`); a B read in place is read once, from where it lies (priced
    # with the packing below)
    in_place = reads_b_in_place(shape, c, target, b_vectorizes(pack, L))
    a_in_place = reads_a_in_place(shape, c, target, plain_a_stride(shape, pack) if a_stride is None else a_stride)
    # a tile of the band's partial sums, read and written by every call when K spans
    # several blocks (priced below)
    partial_tile = MR * NR * 4 if len(k_blocks) > 1 else 0
    b_from_l2 = not in_place and not l1_keeps_panel(b_panel, MR * KC * 4, partial_tile, target)
    l2_stream = l2 * L2_STREAM_SHARE
    kernel = 0.0
    for kn in k_blocks:
        compute = (kn * step_cycles + call_cycles) * cycle
        l2_bytes = 4 * kn * (MR + (NR if b_from_l2 else 0))
        l1_bytes = 4 * kn * (MR + NR)
        kernel += max(compute, l2_bytes / l2_stream, l1_bytes / l1)
    # C's last, partial row or column of tiles is priced as full tiles: the template gives
    # them micro-kernels only as large as their real rows and vectors, but those hide less
    # of the FMA latency and load more per FMA, so they cost more than their FMAs say
    kernel *= Bt * row_tiles * col_tiles
    # partial sums between K blocks: each call reads and writes its tile of the band's
    # BAND_M x NC buffer, which lives wherever that buffer fits; B's panels packed ahead (no
    # packing cost for B) are walked over all of K for each M block, which keeps only
    # MC x NC partial sums, and reads the whole K x NC of B again for the next M block
    m_outer = pack[1] == 0.0
    partials = 0.0
    if partial_tile:
        tile_bytes = partial_tile * (2 * len(k_blocks) - 2)  # in after the first block, out before the last
        buffer_rows = min(MC, rows) if m_outer else rows
        partials = Bt * row_tiles * col_tiles * tile_bytes / source_bandwidth(buffer_rows * NC * 4, stream=True)
    # B blocks that do not fit L2 come back from L3 for every block of rows
    refetch = 0.0
    if (K * NC * 4 if m_outer else b_block) > target.l2_bytes // 2 and not in_place:
        refetch = Bt * len(_blocks(rows, MC)) * K * col_tiles * NR * 4 / l3
    # packing: each element of A once per block of columns, of B once per band
    a_elems = Bt * len(col_blocks) * K * row_tiles * MR
    b_elems = Bt * K * col_tiles * NR
    a_src = source_bandwidth(M * K * 4)
    b_src = mem if b_streams else source_bandwidth(K * N * 4)
    copy_a = 0.0 if a_in_place else pack[0]  # A read in place: its reads alone
    pack_a = a_elems * copy_a * cycle / L + a_elems * 4 / a_src
    copy_b = 0.0 if in_place else pack[1]  # one row of tiles: B is not copied
    pack_b = b_elems * copy_b * cycle / L + b_elems * 4 / b_src
    parts = {"kernel": kernel, "partials": partials, "refetch": refetch, "pack_a": pack_a, "pack_b": pack_b,
             "overhead": PARALLEL_OVERHEAD_S if busy > 1 else 0.0}
    return Prediction(sum(parts.values()), parts)


def effective(shape: tuple[int, int, int, int], config: MatmulConfig, target: CpuTarget) -> tuple[int, ...]:
    """What ``config`` builds for ``shape``: blocks clipped to the cores' bands and to K as the
    template clips them. Two configs with the same effective blocking build the same program
    (an MC of 678 or of 1359 rows on a 256-row band), so only one of them is worth measuring."""
    _, _, mc, nc, kc = blocking(shape, config, target)
    return (config.mr, config.nv, kc, mc, nc, config.pm, config.pn)


def candidates(shape: tuple[int, int, int, int], target: CpuTarget) -> list[MatmulConfig]:
    """The configs the model ranks: the shape's default and the target's space, one config
    per distinct program (:func:`effective`)."""
    seen, out = set(), []
    for c in (default_config(shape, target), *matmul_space(target)):
        key = effective(shape, c, target)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def rank(shape: tuple[int, int, int, int], target: CpuTarget, configs: list[MatmulConfig] | None = None,
         pack: tuple[float, float] = DEFAULT_PACK, profile: HardwareProfile | None = None,
         a_stride: int | None = None, b_streams: bool = False) -> list[tuple[MatmulConfig, Prediction]]:
    """``configs`` (default: :func:`candidates`) with their predictions (:func:`predict`),
    fastest first; rejected configs are left out.

    The head is the exception: among the configs predicted within ``GRID_TIE`` of the
    fastest, the one whose grid splits the most rows. A square product split by rows or by
    columns is the same work to the model, and rows ran faster: 512³ 4.3% (geometric mean
    of 23 configs in both grids, bench/results/2026-11-22-tune-model-clean) and 3.5-3.7%
    side by side; 1024³ to 4096³ level (the rule ``default_config`` follows too)."""
    profile = profile or profile_for(target)
    scored = [(c, predict(shape, c, target, profile, pack, a_stride, b_streams))
              for c in (configs or candidates(shape, target))]
    ranked = sorted((s for s in scored if s[1].ok), key=lambda s: s[1].seconds)
    if ranked:
        # predictions within GRID_TIE of the fastest are a tie the model cannot call; in a
        # tie the grid that splits more rows goes first
        ties = [s for s in ranked if s[1].seconds <= ranked[0][1].seconds * (1 + GRID_TIE)]
        first = max(ties, key=lambda s: s[0].pm)
        ranked.remove(first)
        ranked.insert(0, first)
    return ranked


@functools.lru_cache(maxsize=4096)
def _best(shape: tuple[int, int, int, int], target: CpuTarget, pack: tuple[float, float],
          profile: HardwareProfile, a_stride: int | None, b_streams: bool) -> MatmulConfig:
    ranked = rank(shape, target, pack=pack, profile=profile, a_stride=a_stride, b_streams=b_streams)
    return ranked[0][0] if ranked else default_config(shape, target)


def best_config(shape: tuple[int, int, int, int], target: CpuTarget, pack: tuple[float, float] = DEFAULT_PACK,
                a_stride: int | None = None, b_streams: bool = False) -> MatmulConfig:
    """The model's top choice for ``shape`` on ``target``: what ``tune=0`` builds."""
    return _best(tuple(int(x) for x in shape), target, pack, profile_for(target), a_stride, b_streams)
