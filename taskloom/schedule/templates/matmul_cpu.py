"""The x86 matmul template: ``C[b] = A[b] @ B[b]`` for fp32, any sizes, one config.

The schedule lives in the program (GotoBLAS's loop nest, written with task mappings):

- ``spatial(PM, PN)`` hands each core a band of rows and a band of columns of C;
- in its band a core walks blocks of NC columns and KC steps of K; for each it packs the
  KC x NC block of B into NR-wide panels (a panel is read KC x NR at a time by the
  micro-kernel and stays in L1), then walks blocks of MC rows, packing each MC x KC block
  of A (it stays in L2);
- the micro-kernel keeps an MR x NR tile of C in vector registers (``repeat(MR, NV)``
  accumulators) and adds one rank-1 update per k: NV vector loads of the B panel, MR
  broadcasts of A, MR * NV fused multiply-adds.

A weight B is packed into its panels at compile time instead, and when a model's weights
outgrow the caches the slivers on one panel ask for the next one into L2 (``prefetch_b``):
each panel then comes from memory, and the hardware prefetcher stops at every 4 KiB page.

Edges need no padding copies: rows past M are read as row M-1 and never stored, columns
past N are packed as zeros and masked off when stored, and K's last block may be short
(the blocks are evened out first, :func:`k_block`). The
tiles of C's last, partial row and column of tiles run a micro-kernel of only their real
rows and vectors, so those rows and zero columns cost no FMAs.

A plain A (a matrix, a 1x1 convolution's NHWC input) is read in place instead when a block
has few column panels and a tile's rows do not crowd L1's sets (:func:`reads_a_in_place`):
the micro-kernel broadcasts ``A[b, m, k]`` itself, and no A block is copied.

The template reads its operands only through the packing loops (scalar element reads of
``A[b, m, k]`` and ``B[b, k, n]``, copied a vector at a time, each copy starting at a multiple of the vector
length: the ``pack_aligned`` attribute), or by element or vector in the micro-kernel when it
reads one in place, and writes C only through the micro-kernel's final vector stores. That is the whole contract post-scheduling fusion needs
(:mod:`taskloom.schedule.post_fusion`): it replaces those reads with the group's prologue
and those stores with its epilogue, so the template knows nothing about fusion. Partial
sums of an output tile when K spans several blocks live in a per-core buffer, never in C.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from taskloom.errors import ScheduleError
from taskloom.ir import cdiv, f32, vec
from taskloom.ir.index import round_up
from taskloom.ir import stmt as S
from taskloom.ir import expr as E
from taskloom.ir.mapping import spatial, repeat
from taskloom.script import kernel
from taskloom.target.cpu import CpuTarget


@dataclass(frozen=True)
class MatmulConfig:
    """One point of the schedule space.

    ``mr`` x ``nv`` vectors is the register tile; ``kc``, ``mc``, ``nc`` are the K, M and N
    blocks; ``pm`` x ``pn`` cores split the rows and columns of C.
    """

    mr: int
    nv: int
    kc: int
    mc: int
    nc: int
    pm: int
    pn: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "MatmulConfig":
        return MatmulConfig(**{k: int(d[k]) for k in ("mr", "nv", "kc", "mc", "nc", "pm", "pn")})

    def __str__(self) -> str:
        return (f"tile {self.mr}x{self.nv}v, kc={self.kc} mc={self.mc} nc={self.nc}, "
                f"cores {self.pm}x{self.pn}")


#: fp32 elements in a cache line (64 bytes on every x86 target taskloom builds for)
LINE_FLOATS = 16

#: Multiply-adds below which a product runs on one core: waking the others costs about half
#: a microsecond, what one core takes for some 50 000 (8 x 64 x 64 through three linears:
#: 1.7 us on one core, 3.1 on two; 64 x 64 x 64 is faster on two, measured).
SERIAL_FMAS = 1 << 16


def core_grid(shape: tuple[int, int, int, int], config: MatmulConfig, target: CpuTarget) -> tuple[int, int]:
    """The ``(PM, PN)`` grid of cores the kernel runs on: the config's, less the rows or columns
    of cores left without a band (one row times a matrix on a 2 x 1 grid keeps one core), or
    one core for a product too small to share (SERIAL_FMAS)."""
    Bt, M, N, K = shape
    if Bt * M * N * K < SERIAL_FMAS:
        return 1, 1
    band_m, band_n = _bands(M, N, config.pm, config.pn, config, target)
    return cdiv(M, band_m), cdiv(N, band_n)


def _bands(M: int, N: int, pm: int, pn: int, config: MatmulConfig, target: CpuTarget) -> tuple[int, int]:
    """The rows and columns of each core's band on a ``pm x pn`` grid, whole register tiles."""
    return round_up(cdiv(M, pm), config.mr), round_up(cdiv(N, pn), config.nv * target.vector_lanes(f32))


def blocking(shape: tuple[int, int, int, int], config: MatmulConfig,
             target: CpuTarget) -> tuple[int, int, int, int, int]:
    """``(BAND_M, BAND_N, MC, NC, KC)``: each core's band of rows and columns, whole
    register tiles wide, and the config's blocks as ``shape = (Bt, M, N, K)`` clips them
    (no larger than the band or K; KC a multiple of the vector, so that packing copies start
    aligned when K spans several blocks, and evened out over K: :func:`k_block`). The
    template builds these and the analytic model
    prices them: ``blocking((1, 100, 70, 33), MatmulConfig(6, 4, 384, 678, 1024, 2, 1), t)
    == (54, 128, 54, 128, 33)`` with AVX-512."""
    _, M, N, K = shape
    c, L = config, target.vector_lanes(f32)
    NR = c.nv * L
    band_m, band_n = _bands(M, N, *core_grid(shape, c, target), c, target)
    return (band_m, band_n, min(round_up(c.mc, c.mr), band_m), min(round_up(c.nc, NR), band_n),
            k_block(K, c.kc, L))


def k_block(K: int, kc: int, lanes: int) -> int:
    """The K block for a config's ``kc``: as many blocks as ``kc`` needs, made as equal as
    whole vectors allow. A short last block costs a full pass over the partial sums and
    the packing loops' overheads for few FMAs: at 512³, four blocks of 128 ran 2.5-3.3%
    faster than three of 144 and one of 80 (measured). ``k_block(512, 144, 16) == 128``;
    never more blocks, nor a larger one, than ``kc`` itself gives."""
    kc = round_up(kc, lanes)
    if kc >= K:
        return K
    return round_up(cdiv(K, cdiv(K, kc)), lanes)


def matmul_program(shape: tuple[int, int, int, int], config: MatmulConfig, target: CpuTarget,
                   name: str = "matmul", prepacked_b: int = 0, b_vectorizes: bool = True,
                   prefetch_b: bool = False, a_stride: int | None = None) -> S.Function:
    """The kernel ``name(A: f32[Bt, M, K], B: f32[Bt, K, N], C: f32[Bt, M, N])`` for
    ``shape = (Bt, M, N, K)``, scheduled by ``config`` for ``target``.

    With ``prepacked_b`` (1, or ``Bt``: how many batches B has), B arrives already in the
    panels the micro-kernel reads, ``B: f32[prepacked_b, cdiv(N, NR), K, NR]``
    (:func:`pack_b_panels`, done once when B is a weight), and the kernel packs only A.
    ``b_vectorizes`` says whether B, as fusion will read it, copies by vectors (an input in
    order, or vector arithmetic on one): only then may a band one tile high read B in place
    (:func:`reads_b_in_place`); a gathered or lane-by-lane B is packed. ``a_stride`` is the
    distance in elements between two rows of A as fusion reads it when A copies plainly
    (``K`` for a row-major matrix, the default; 0 when A is gathered or computed): it
    decides whether the micro-kernel reads A in place (:func:`reads_a_in_place`).

    >>> fn = matmul_program((1, 100, 70, 33), default_config(...), host_target())
    """
    Bt, M, N, K = (int(x) for x in shape)
    if min(Bt, M, N, K) < 1:
        raise ScheduleError(f"matmul template: sizes must be positive, got (Bt, M, N, K)={shape}")
    c = config
    L = target.vector_lanes(f32)
    MR, NV = c.mr, c.nv
    NR = NV * L
    if MR * NV + NV + 1 > target.num_vector_registers:
        raise ScheduleError(f"matmul template: a {MR}x{NV}-vector tile needs {MR * NV + NV + 1} vector registers; "
                            f"{target.name} has {target.num_vector_registers}")
    PM, PN = core_grid((Bt, M, N, K), c, target)
    P = PM * PN
    BAND_M, BAND_N, MC, NC, KC = blocking((Bt, M, N, K), c, target)
    KB = cdiv(K, KC)
    KCP = round_up(KC, L)  # A's packed rows are whole vectors long
    # partial sums of the band's tiles between K blocks, one contiguous row per register
    # tile, the tiles of a column panel in consecutive rows (a call's loads and stores walk
    # consecutive lines, and so do consecutive calls: 1-3% faster than rows of C's shape,
    # measured); one row when K is one block
    CB_ROWS, CB_COLS = (cdiv(BAND_M, MR) * (NC // NR), MR * NR) if KB > 1 else (1, 1)
    fvec = vec(f32, L)
    if prepacked_b not in (0, 1, Bt):
        raise ScheduleError(f"matmul template: prepacked_b={prepacked_b} must be 0 (B packed by the kernel), "
                            f"1 (one B for every batch) or the batch {Bt}")
    PB = prepacked_b
    B_SHAPE = (PB, cdiv(N, NR), K, NR) if PB else (Bt, K, N)
    PACK_B = not PB and not reads_b_in_place((Bt, M, N, K), c, target, b_vectorizes)
    PACK_A = not reads_a_in_place((Bt, M, N, K), c, target, K if a_stride is None else a_stride)
    SLIVERS = cdiv(min(MC, BAND_M), MR)  # micro-kernel calls on one B panel, in a full MC block
    # a band one tile high reads each panel once, in order, which the hardware prefetcher
    # follows (1 x 768 x 768: 10% slower with the hints when B is in L2, 2% faster from memory)
    PF = bool(PB) and prefetch_b and SLIVERS > 1
    # spread the next panel's lines over the micro-kernel calls of this one: one line every
    # PF_STEPS steps of k, PF_LINES at a time, so that the slivers of a full MC block ask for
    # all of it (half a line a step over 2 x NV calls measured best: asked for in one call,
    # the requests queue behind each other)
    PF_TOTAL = cdiv(KC * NR, LINE_FLOATS)
    PF_STEPS, PF_LINES = next((st, ln) for st, ln in ((2, 1), (1, 1), (1, 2), (1, 4), (1, 8), (1, 16))
                              if cdiv(PF_TOTAL * st, KC * ln) <= SLIVERS or ln == 16)
    # C's last row of tiles and last column of tiles may be partial; each gets a micro-kernel
    # only as large as its real rows and vectors (at 512 x 512, 8 x 3 tiles would spend 3% of
    # their FMAs on the zero columns of the last panel)
    M_PART, NV_PART = M % MR, cdiv(N % NR, L)
    M_EDGES = (False, True) if M_PART else (False,)
    N_EDGES = (False, True) if 0 < NV_PART < NV else (False,)
    TILES = [(M_PART if me else MR, NV_PART if ne else NV, me, ne) for me in M_EDGES for ne in N_EDGES]

    def tile_case(at_m_edge: E.Expr, at_n_edge: E.Expr, m_edge: bool, n_edge: bool) -> E.Expr | bool:
        """Whether the tile at hand is the ``TILES`` entry for ``(m_edge, n_edge)``."""
        conds = [at if edge else E.logical_not(at)
                 for at, edge, edges in ((at_m_edge, m_edge, M_EDGES), (at_n_edge, n_edge, N_EDGES)) if len(edges) > 1]
        return E.logical_and(*conds) if conds else True

    @kernel
    def matmul(A: f32[Bt, M, K], B: f32[B_SHAPE], C: f32[Bt, M, N]):
        for w in parallel(P):
            if PACK_A:
                Ap = local_tensor(f32, [MC, KCP])
            if PACK_B:
                Bp = local_tensor(f32, [NC // NR, KC, NR])
            Cb = local_tensor(f32, [CB_ROWS, CB_COLS])
            for tm, tn in spatial(PM, PN).on(w):
                m_lo = tm * BAND_M
                m_hi = min(M, m_lo + BAND_M)
                n_lo = tn * BAND_N
                n_hi = min(N, n_lo + BAND_N)
                for b in range(Bt):
                    for nb in range(cdiv(BAND_N, NC)):
                        n0 = n_lo + nb * NC
                        nn = min(NC, n_hi - n0)
                        for kb in range(KB):
                            k0 = kb * KC
                            kn = min(KC, K - k0)
                            if PACK_B:
                                "pack B's KC x NC block into NR-wide panels; columns past N are zeros"
                                for jr in range(cdiv(nn, NR)):
                                    for k in range(kn):
                                        for v in unroll(NV):
                                            n = n0 + jr * NR + v * L
                                            vstore(Bp[jr, k, v * L], vload(B[b, k0 + k, n], L, max(min(n_hi - n, L), 0)))
                            for mb in range(cdiv(m_hi - m_lo, MC)):
                                m0 = m_lo + mb * MC
                                mm = min(MC, m_hi - m0)
                                if PACK_A:
                                    "pack A's MC x KC block by vectors along K; rows past M repeat row M-1 (never stored)"
                                    for i in range(cdiv(mm, MR) * MR):
                                        for kv in range(kn // L):
                                            vstore(Ap[i, kv * L], vload(A[b, min(m0 + i, M - 1), k0 + kv * L], L))
                                        if kn % L != 0:
                                            kt = kn - kn % L
                                            vstore(Ap[i, kt], vload(A[b, min(m0 + i, M - 1), k0 + kt], L, kn % L))
                                for jr in range(cdiv(nn, NR)):
                                    if PF:
                                        "the B chunk read after this one: the next panel, or the first of the next K block or N block"
                                        pf_last = jr + 1 == cdiv(nn, NR)
                                        pf_next_n = kb + 1 == KB and n0 + NC < n_hi
                                        pf_panel = n0 // NR + jr + 1 if not pf_last else (n0 + NC) // NR if pf_next_n else n0 // NR
                                        pf_row = k0 if not pf_last else 0 if pf_next_n else k0 + KC
                                        pf_rows = kn if not pf_last else min(KC, K) if pf_next_n else \
                                            (min(KC, K - k0 - KC) if kb + 1 < KB else 0)
                                        pf_lines = cdiv(pf_rows * NR, LINE_FLOATS)
                                    for ir in range(cdiv(mm, MR)):
                                        tile = jr * cdiv(BAND_M, MR) + (m0 - m_lo) // MR + ir  # its row of Cb
                                        for tmr, tnv, m_edge, n_edge in TILES:
                                            if tile_case(m0 + ir * MR + MR > M, n0 + jr * NR + NR > N, m_edge, n_edge):
                                                if m_edge or n_edge:
                                                    "a tile at C's last rows or columns: only its real rows and vectors"
                                                # the accumulators start at zero and the partial sums are added after
                                                # the k loop: loaded first, they would hold up the first FMAs while
                                                # they come from L2 or L3 (a band's buffer is often larger than L2)
                                                acc = register_tensor(fvec, [tmr, tnv])
                                                for i, v in repeat(tmr, tnv).on(0):
                                                    acc[i, v] = broadcast(0.0, L)
                                                "the micro-kernel: MR x NV vector FMAs per k"
                                                for k in range(kn):
                                                    bv = register_tensor(fvec, [tnv])
                                                    for v in unroll(tnv):
                                                        if PB:  # B's weight panel, packed once at compile time
                                                            bv[v] = vload(B[min(b, PB - 1), n0 // NR + jr, k0 + k, v * L], L)
                                                        elif not PACK_B:  # one row of tiles: B read once, where it lies
                                                            n = n0 + jr * NR + v * L
                                                            bv[v] = vload(B[b, k0 + k, n], L, max(min(n_hi - n, L), 0))
                                                        else:
                                                            bv[v] = vload(Bp[jr, k, v * L], L)
                                                    if PF:
                                                        if k % PF_STEPS == 0:
                                                            for j in unroll(PF_LINES):
                                                                line = (ir * KC + k) // PF_STEPS * PF_LINES + j
                                                                if line < pf_lines:
                                                                    e = line * LINE_FLOATS
                                                                    prefetch(B[min(b, PB - 1), pf_panel, pf_row + e // NR, e % NR])
                                                    "one broadcast of A lives at a time: MR x NV + NV + 1 registers"
                                                    for i in unroll(tmr):
                                                        if PACK_A:
                                                            a = broadcast(Ap[ir * MR + i, k], L)
                                                        else:  # a tile's rows of A, read where they lie
                                                            a = broadcast(A[b, m0 + ir * MR + i, k0 + k], L)
                                                        for v in unroll(tnv):
                                                            acc[i, v] = fma(a, bv[v], acc[i, v])
                                                if PF and K % KC != 0:
                                                    "K's short last block has fewer steps than the next chunk's lines: ask for the rest"
                                                    for t in range(KC - kn):
                                                        if (kn + t) % PF_STEPS == 0:
                                                            for j in unroll(PF_LINES):
                                                                line = (ir * KC + kn + t) // PF_STEPS * PF_LINES + j
                                                                if line < pf_lines:
                                                                    e = line * LINE_FLOATS
                                                                    prefetch(B[min(b, PB - 1), pf_panel, pf_row + e // NR, e % NR])
                                                for i, v in repeat(tmr, tnv).on(0):
                                                    if kb > 0:
                                                        acc[i, v] = acc[i, v] + vload(Cb[tile, i * NR + v * L], L)
                                                    m = m0 + ir * MR + i
                                                    if kb == KB - 1:
                                                        if m < m_hi:
                                                            n = n0 + jr * NR + v * L
                                                            vstore(C[b, m, n], acc[i, v], max(min(n_hi - n, L), 0))
                                                    else:
                                                        vstore(Cb[tile, i * NR + v * L], acc[i, v])

    fn = matmul
    return S.Function(name, fn.params, fn.body, fn.kind,
                      (("template", "matmul_cpu"),
                       ("config", str(c) + (f" (on {P} core{'s' if P > 1 else ''})" if P != c.pm * c.pn else "")
                        + (f", K in {KB} blocks of {KC}" if KB > 1 and KC != round_up(c.kc, L) else "")),
                       ("shape", (Bt, M, N, K)),
                       ("pack_aligned", True), ("prepacked_b", PB), ("packs_a", PACK_A), ("packs_b", PACK_B),
                       ("prefetch_b", PF)))


def reads_b_in_place(shape: tuple[int, int, int, int], config: MatmulConfig, target: CpuTarget,
                     b_vectorizes: bool = True) -> bool:
    """Whether the micro-kernel reads B where it lies instead of from packed panels: when a
    core's band is one row of register tiles (M at most MR: a vector times a matrix, a
    decode step, a small batch) and B copies by vectors, each element of B feeds one
    micro-kernel call, and packing would copy it once only to read it again (4 x 768 x 768
    and 8 x 768 x 768: 1.5-1.6x faster in place, measured). A B that fusion gathers or
    builds lane by lane (a convolution's window) is packed: its costly reads stay out of
    the FMA loop."""
    BAND_M = blocking(shape, config, target)[0]
    return b_vectorizes and cdiv(BAND_M, config.mr) == 1


#: Bytes after which L1's set index repeats: 64 sets of 64-byte lines on every x86 core
#: taskloom targets (a 48 KiB 12-way and a 32 KiB 8-way L1 alike).
L1_SET_SPAN = 4096


def reads_a_in_place(shape: tuple[int, int, int, int], config: MatmulConfig, target: CpuTarget,
                     a_stride: int) -> bool:
    """Whether the micro-kernel broadcasts A's elements where they lie instead of from a
    packed MC x KC block. Packing copies every element of A once per K block, from L3 when A
    is large, before any FMA runs; reading in place skips that copy (3136 x 64 x 256: 25%
    faster, 3136 x 64 x 64: 15%, 3136 x 256 x 64: 5%, measured). It takes an A that fusion
    reads by plain copies, its rows ``a_stride`` elements apart (0: A is gathered or
    computed, and is packed), and two conditions, since every column panel of a block reads
    a tile's rows again, from L2, where a packed block is one contiguous stream:

    - at most four panels in a block (ResNet-50's 196 x 1024 x 256, eight panels a core:
      20-29% slower in place, measured);
    - at most two of a tile's rows on the same L1 sets: rows of 512 or 1024 floats, or nine
      rows of 768, evict each other and the B panel (Inception-V3's 289 x 192 x 768 in 9-row
      tiles, two panels: 16% slower in place, measured).
    """
    if a_stride <= 0:
        return False
    _, _, _, NC, KC = blocking(shape, config, target)
    if cdiv(NC, config.nv * target.vector_lanes(f32)) > 4:
        return False
    sets = L1_SET_SPAN // (LINE_FLOATS * 4)
    rows_on = [0] * sets
    for i in range(config.mr):
        first = (i * a_stride * 4) % L1_SET_SPAN // (LINE_FLOATS * 4)
        for line in range(cdiv(KC, LINE_FLOATS) + 1):  # + 1: a row need not start on a line
            rows_on[(first + line) % sets] += 1
    return max(rows_on) <= 2


def pack_b_panels(b: "np.ndarray", config: MatmulConfig, target: CpuTarget) -> "np.ndarray":
    """B (``[PB, K, N]``) in the panels the prepacked micro-kernel reads:
    ``[PB, cdiv(N, NR), K, NR]``, columns past N zero. Done once, when B is a weight."""
    import numpy as np
    PB, K, N = b.shape
    NR = config.nv * target.vector_lanes(f32)
    NP = cdiv(N, NR)
    padded = np.zeros((PB, K, NP * NR), np.float32)
    padded[:, :, :N] = b
    return np.ascontiguousarray(padded.reshape(PB, K, NP, NR).transpose(0, 2, 1, 3))


def default_config(shape: tuple[int, int, int, int], target: CpuTarget) -> MatmulConfig:
    """The config for ``shape`` read off the target, before any tuning.

    The register tile does the most FMAs per load of A and B (MR x NV / (MR + NV)) that the
    register file allows: 6 x 4 vectors with 32 registers, 4 x 3 with 16. KC is what a
    two-vector-wide panel of B fitting L1 allows (384 with 48 KiB of L1 and AVX-512: the
    longer K run beats a panel resident in L1, measured); an MC x KC block of A takes about
    half of L2; cores split
    the larger of M and N (so small-M shapes such as 128 x 3072 split their columns).
    """
    Bt, M, N, K = shape
    L = target.vector_lanes(f32)
    regs = target.num_vector_registers
    mr, nv = max(_tiles(regs), key=lambda t: (t[0] * t[1] / (t[0] + t[1]), t[0] * t[1]))
    if M < mr:  # a thin A: fewer rows per tile, wider tiles
        mr = max(1, M)
        nv = max(1, min(4, (regs - 1) // (mr + 1)))
    kc = _kc(target, 1.0)
    mc = max(mr, (target.l2_bytes // 2) // (kc * 4) // mr * mr)
    nc = max(nv * L, 4096 // (nv * L) * (nv * L))
    P = target.num_cores
    pm, pn = _split_cores(P, M, N, mr, nv * L)
    return MatmulConfig(mr, nv, kc, mc, nc, pm, pn)


#: The N block of every config in the space: a block of 4096 columns never beat 1024 by
#: more than 0.4% on the 31 tasks recorded in bench/results/2026-11-22-tune-model-clean and
#: lost by up to 22% (B's KC x NC block outgrows L2), so the space spends its points on
#: tiles and blocks instead.
NC_COLUMNS = 1024

#: The cost of packing one element, in FMA lanes: about a cycle for a gathered element (a
#: conv window), while a vector FMA does 16 lanes in half a cycle.
PACK_COST = 16


def _split_cores(P: int, M: int, N: int, mr: int, nr: int) -> tuple[int, int]:
    """The ``pm x pn`` core grid (``pm * pn == P``) with the least work per core: FMAs on
    its share of whole register tiles plus the packing of its rows of A and columns of B.
    Within 1% of the least, rows are split (measured faster on square products)."""
    costs = {}
    for pm in (d for d in range(1, P + 1) if P % d == 0):
        pn = P // pm
        rows, cols = cdiv(cdiv(M, mr), pm) * mr, cdiv(cdiv(N, nr), pn) * nr
        # per step of K, a core does rows x cols FMA lanes and packs rows + cols elements
        costs[(pm, pn)] = rows * cols + PACK_COST * (rows + cols)
    least = min(costs.values())
    return max((g for g, c in costs.items() if c <= 1.01 * least), key=lambda g: g[0])


def matmul_space(target: CpuTarget) -> list[MatmulConfig]:
    """The hardware-centric schedule space: every config is derived from the target alone
    (register file, L1, L2, core count), never from the input size, and there are at most
    about 200 of them.

    - register tiles of MR x NV vectors (NV of 2 to 4, three heights each) whose
      accumulators fill at least half the register file (enough independent FMAs to hide
      their latency) and leave NV + 1 registers for the panel of B and a broadcast of A;
    - KC so that a two-vector-wide KC panel of B takes 1/4, 1/2, 3/4 or all of L1 (at most
      512), or the tile's own panel half or 3/4 of it (at 512³, 6 x 4 tiles ran 5% faster
      with KC 128-144 than with 96 or 192, measured);
    - MC so that an MC x KC block of A takes 1/4 or 1/2 of L2;
    - NC of NC_COLUMNS;
    - every split of the cores into a PM x PN grid.
    """
    L2, regs, P = target.l2_bytes, target.num_vector_registers, target.num_cores
    tiles = _tiles(regs)
    grids = [(pm, P // pm) for pm in range(1, P + 1) if P % pm == 0]
    space = []
    for mr, nv in tiles:
        kcs = sorted({_kc(target, f) for f in (0.25, 0.5, 0.75, 1.0)} |
                     {_kc(target, f, nv) for f in (0.5, 0.75)})
        for kc in kcs:
            mcs = sorted({max(mr, int(L2 * f) // (kc * 4) // mr * mr) for f in (0.25, 0.5)})
            for mc in mcs:
                for pm, pn in grids:
                    space.append(MatmulConfig(mr, nv, kc, mc, NC_COLUMNS, pm, pn))
    return space


def _tiles(regs: int) -> list[tuple[int, int]]:
    """Register tiles ``(MR, NV)``, NV of 2 to 4 vectors (one vector per row would need a
    broadcast per FMA), whose accumulators fill at least half the register file (enough
    independent FMAs to hide their latency) and leave NV + 1 registers for the panel of B
    and a broadcast of A. Each width comes in the three tallest heights: rows past M are
    computed and thrown away, so the model picks the height that wastes least (M = 128 in
    8-row tiles rather than 9: 5-8% faster on BERT's products, measured)."""
    out = []
    for nv in (2, 3, 4):
        top = (regs - nv - 1) // nv
        for mr in range(top - 2, top + 1):
            if 1 <= mr <= 16 and mr * nv >= regs // 2:
                out.append((mr, nv))
    return out


def _kc(target: CpuTarget, fraction: float, nv: int = 2) -> int:
    """The K block whose ``nv``-vector-wide panel of B takes ``fraction`` of L1 (16 to 512)."""
    panel_row = nv * target.vector_lanes(f32) * 4
    return min(512, max(16, int(target.l1d_bytes * fraction) // panel_row // 16 * 16))
