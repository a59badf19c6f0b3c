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
With no B block to reuse, such a kernel walks all of K for each block of MC rows, so that
the partial sums between K blocks are one MC x NC block, not a core's whole band.

Edges need no padding copies: rows past M are read as row M-1 and never stored, columns
past N are packed as zeros and masked off when stored, and K's last block may be short
(the blocks are evened out first, :func:`k_block`). The tiles of C's last, partial row
and column of tiles run a micro-kernel of only their real rows and vectors, so those rows
and zero columns cost no FMAs.

A plain A (a matrix, a 1x1 convolution's NHWC input) is read in place instead when a block
has few column panels and a tile's rows do not crowd L1's sets (:func:`reads_a_in_place`):
the micro-kernel broadcasts ``A[b, m, k]`` itself, and no A block is copied. So is a
convolution's window over an input padded ahead (``a_window``): each row's base and each
run's offset are computed once, the k loop adds one a step, and all of K is one block, as
no A block shares L2 with B's panel (:func:`window_fits`).

The kernel is written in phases, each a piece of kernel script that a builder returns and
the loop nest splices in where it runs (:func:`_phase`): :func:`_pack_b`, :func:`_pack_a`,
then per column panel :func:`_panels`, and per register tile :func:`_tile` with the
micro-kernel (:func:`_micro_kernel`), the prefetches of B's next chunk (:func:`_prefetch_b`)
and of the next tile's lines of C (:func:`_prefetch_c`), and the store of C or of the partial sums (:func:`_store_tile`). The measurements behind
the choices made here are in bench/results/2026-11-25-design-measurements.md.

The template reads its operands only through the packing loops (scalar element reads of
``A[b, m, k]`` and ``B[b, k, n]``, copied a vector at a time, each copy starting at a
multiple of the vector length: the ``pack_aligned`` attribute), or by element or vector in
the micro-kernel when it reads one in place, and writes C only through the micro-kernel's
final vector stores (it may ask for a line of C ahead of them: a prefetch). That is the
whole contract post-scheduling fusion needs (:mod:`taskloom.schedule.post_fusion`): it
replaces those reads with the group's prologue and those stores with its epilogue, so the
template knows nothing about fusion. Partial
sums of an output tile when K spans several blocks live in a per-core buffer, never in C.
"""
from __future__ import annotations

from collections import namedtuple
from dataclasses import asdict, dataclass
from typing import Any, Callable, ClassVar

from taskloom.errors import ScheduleError
from taskloom.ir import cdiv, f32, vec
from taskloom.ir.index import round_up
from taskloom.ir import stmt as S
from taskloom.ir import expr as E
from taskloom.ir.printer import expr_text
from taskloom.runtime.aligned import aligned_empty
from taskloom.ir.mapping import spatial, repeat
from taskloom.script import kernel, parse_function
from taskloom.target.cpu import CpuTarget


@dataclass(frozen=True)
class MatmulConfig:
    """One point of the schedule space.

    ``mr`` x ``nv`` vectors is the register tile; ``kc``, ``mc``, ``nc`` are the K, M and N
    blocks; ``pm`` x ``pn`` cores split the rows and columns of C. ``exact_rows`` matters
    where M is symbolic: the last tile of rows gets a micro-kernel for each count of rows a
    call may leave, instead of one full tile whose extra rows are computed and dropped (what
    a variant serving a few rows needs; the others save the code).
    """

    mr: int
    nv: int
    kc: int
    mc: int
    nc: int
    pm: int
    pn: int
    exact_rows: bool = False

    #: the fields a record holds (exact_rows shapes only a kernel for symbolic rows, which is
    #: never timed or recorded)
    SIZES: ClassVar[tuple[str, ...]] = ("mr", "nv", "kc", "mc", "nc", "pm", "pn")

    def to_dict(self) -> dict[str, int]:
        d = asdict(self)
        if not self.exact_rows:
            del d["exact_rows"]
        return d

    @staticmethod
    def from_dict(d: dict) -> "MatmulConfig":
        return MatmulConfig(**{k: int(d[k]) for k in MatmulConfig.SIZES},
                            exact_rows=bool(d.get("exact_rows", False)))

    def __str__(self) -> str:
        return (f"tile {self.mr}x{self.nv}v, kc={self.kc} mc={self.mc} nc={self.nc}, "
                f"cores {self.pm}x{self.pn}" + (", exact last rows" if self.exact_rows else ""))


#: fp32 elements in a cache line (64 bytes on every x86 target taskloom builds for)
LINE_FLOATS = 16

#: A size: an int, or an expression of symbols (a kernel for every batch or sequence length).
Dim = "int | E.Expr"


def _size(d: object) -> Dim:
    """``d`` as an int where it is one (a constant expression folds), else the expression."""
    if isinstance(d, E.Expr):
        return int(d.value) if isinstance(d, E.Constant) else d
    return int(d)  # type: ignore[call-overload]


#: Multiply-adds below which a product runs on one core: waking the other cores costs more
#: than sharing so few saves.
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


def _bands(M: Dim, N: Dim, pm: int, pn: int, config: MatmulConfig, target: CpuTarget) -> tuple[Dim, Dim]:
    """The rows and columns of each core's band on a ``pm x pn`` grid, whole register tiles
    (expressions where the sizes are symbolic)."""
    return _round_up(cdiv(M, pm), config.mr), _round_up(cdiv(N, pn), config.nv * target.vector_lanes(f32))


def _round_up(x: Dim, m: int) -> Dim:
    return round_up(x, m) if isinstance(x, int) else cdiv(x, m) * m


def blocking(shape: tuple, config: MatmulConfig, target: CpuTarget,
             grid: tuple[int, int] | None = None) -> tuple[Dim, Dim, int, int, int]:
    """``(BAND_M, BAND_N, MC, NC, KC)``: each core's band of rows and columns, whole
    register tiles wide, and the config's blocks as ``shape = (Bt, M, N, K)`` clips them
    (no larger than the band or K; KC a multiple of the vector, so that packing copies start
    aligned when K spans several blocks, and evened out over K: :func:`k_block`). The
    template builds these and the analytic model
    prices them: ``blocking((1, 100, 70, 33), MatmulConfig(6, 4, 384, 678, 1024, 2, 1), t)
    == (54, 128, 54, 128, 33)`` with AVX-512.

    Symbolic sizes (``grid`` then gives the core grid) make symbolic bands, and the blocks
    the config's own, clipped at run time."""
    _, M, N, K = shape
    c, L = config, target.vector_lanes(f32)
    NR = c.nv * L
    band_m, band_n = _bands(M, N, *(grid or core_grid(shape, c, target)), c, target)
    mc, nc = round_up(c.mc, c.mr), round_up(c.nc, NR)
    return (band_m, band_n, min(mc, band_m) if isinstance(band_m, int) else mc,
            min(nc, band_n) if isinstance(band_n, int) else nc,
            k_block(K, c.kc, L) if isinstance(K, int) else round_up(c.kc, L))


def k_block(K: int, kc: int, lanes: int) -> int:
    """The K block for a config's ``kc``: as many blocks as ``kc`` needs, made as equal as
    whole vectors allow. A short last block costs a full pass over the partial sums and
    the packing loops' overheads for few FMAs. ``k_block(512, 144, 16) == 128``;
    never more blocks, nor a larger one, than ``kc`` itself gives."""
    kc = round_up(kc, lanes)
    if kc >= K:
        return K
    return round_up(cdiv(K, cdiv(K, kc)), lanes)


def window_fits(K: int, NR: int, target: CpuTarget) -> bool:
    """Whether a kernel reading A in place as a window (``a_window``) may take all of K in
    one block: a B panel of K x NR within L2. A window read in place packs no A block, so
    nothing else wants L2, and a second K block would cost a pass over the partial sums,
    which measured slower than packing the window; a larger panel packs it instead."""
    return K * NR * 4 <= target.l2_bytes


def matmul_program(shape: tuple, config: MatmulConfig, target: CpuTarget,
                   name: str = "matmul", prepacked_b: int = 0, b_vectorizes: bool = True,
                   prefetch_b: bool = False, a_stride: int | None = None, a_run: int = 0,
                   prefetch_c: bool = False, a_window: int = 0) -> S.Function:
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
    decides whether the micro-kernel reads A in place (:func:`reads_a_in_place`). ``a_run``
    (``R``) says that A, as fusion reads it, is contiguous along K in runs of ``R`` elements
    (a stem's window row of ``KW * C`` channels, ``R`` no multiple of the vector): a packed A
    is then copied a run at a time, each run's last vector masked where the run ends
    (the ``pack_a_run`` attribute), where K blocks start at multiples of ``R``. With
    ``prefetch_c``, each tile's k loop asks for the lines of C where the next tile of its
    panel will store, which fusion turns into the lines its epilogue reads there (a residual
    streaming from memory, in rows the hardware prefetcher does not follow: a tile reads a
    few lines of each of its rows). ``a_window`` (``R``) says that A, as fusion reads it,
    lies at ``row(b, m) + tap(k // R) + k % R`` with nothing to test (a convolution's window
    over an input padded ahead, :func:`~taskloom.schedule.contraction.a_window_run`): A is
    then read in place, no window copied, in one K block (where B's panel allows,
    :func:`window_fits`), and the k loop walks a run at a time, so that each row's base and
    each run's offset are computed once and a step adds one.

    Sizes may be expressions of symbols (one kernel for every batch or sequence length):
    the bands are then computed at run time on the config's own core grid, the last tile of
    rows is a full one, its rows past M computed and dropped, or with the config's
    ``exact_rows`` one for each count of rows a call may leave; every store is masked at N.
    (A graph compiler builds such a kernel with the configs chosen for several sizes and
    picks one per call.)

    >>> fn = matmul_program((1, 100, 70, 33), default_config(...), host_target())
    """
    p = _plan(shape, config, target, prepacked_b, b_vectorizes, prefetch_b, a_stride, a_run, prefetch_c, a_window)
    fn = _loop_nest(p)
    return S.Function(name, fn.params, fn.body, fn.kind, _attrs(p))


@dataclass(frozen=True)
class _Plan:
    """What the kernel is built from: ``shape`` blocked by a config for a target (the
    names of :func:`blocking`; ``L`` lanes a vector, ``NR = NV * L`` columns a panel), and
    the choices that follow: whether A and B are packed, whether B's chunks are prefetched
    (``PF_LINES`` lines every ``PF_STEPS`` steps of k, :func:`_prefetch_pace`)."""

    config: MatmulConfig
    Bt: Dim
    M: Dim
    N: Dim
    K: Dim
    L: int
    PM: int
    PN: int
    BAND_M: Dim
    BAND_N: Dim
    MC: int
    NC: int
    KC: int
    PB: int
    PACK_A: bool
    PACK_B: bool
    PF: bool
    PF_STEPS: int
    PF_LINES: int
    RUN: int = 0  # A packed by runs of this many elements along K (0: by whole vectors)
    PC: bool = False  # the k loop asks for the lines of C the next tile stores to
    WINDOW: int = 0  # A read in place as a window, K in runs of this many elements (0: not)

    MR = property(lambda p: p.config.mr)
    NV = property(lambda p: p.config.nv)
    NR = property(lambda p: p.config.nv * p.L)
    P = property(lambda p: p.PM * p.PN)
    KB = property(lambda p: cdiv(p.K, p.KC))
    KCP = property(lambda p: round_up(p.KC, p.L))  # A's packed rows are whole vectors long
    # B's panels packed ahead need no K block kept for every M block: each M block then walks
    # all of K, and its partial sums stay in L2 instead of a whole band's going round L3
    M_OUTER = property(lambda p: bool(p.PB))
    TILE_ROWS = property(lambda p: cdiv(p.MC if p.M_OUTER else p.BAND_M, p.MR))  # Cb's tiles a panel
    B_SHAPE = property(lambda p: (p.PB, cdiv(p.N, p.NR), p.K, p.NR) if p.PB else (p.Bt, p.K, p.N))

    @property
    def CB_SHAPE(self) -> tuple[int, int]:
        """The per-core buffer of partial sums between K blocks: one contiguous row per
        register tile, the tiles of a column panel in consecutive rows, so that a call's loads
        and stores walk consecutive lines, and so do consecutive calls; one element when K is
        one block."""
        if isinstance(self.KB, int) and self.KB == 1:
            return (1, 1)
        return (self.TILE_ROWS * (self.NC // self.NR), self.MR * self.NR)

    @property
    def M_EDGES(self) -> tuple[int, ...]:
        """The kinds of tile along M: 0 a full one of ``MR`` rows, ``r`` one of the last ``r``
        rows. A static M has at most one edge kind. A symbolic M has, with ``exact_rows``, every
        ``r`` below ``MR``, the one for a call's last rows chosen at run time (with 8-row tiles,
        21 rows would otherwise cost 24 rows' FMAs; tiles of the count's binary digits, 4 and
        1, cost a pass over B each, which a few rows feel), all storing through one loop
        (:func:`_last_rows`); without, only full tiles, the last one's rows past M reading
        row M - 1 (never stored)."""
        if not isinstance(self.M, int):
            if self.config.exact_rows:
                return (0, *range(1, self.MR))
            # packed A already repeats row M - 1 past M; A read in place needs a full last
            # tile of its own, its reads clamped (CLAMP_ROWS)
            return (0,) if self.PACK_A else (0, self.MR)
        return (0, self.M % self.MR) if self.M % self.MR else (0,)

    @property
    def CLAMP_ROWS(self) -> bool:
        """Whether the last tile of rows reads A's rows clamped to M - 1 (a full tile at a
        symbolic M's end, A read in place)."""
        return not isinstance(self.M, int) and not self.config.exact_rows and not self.PACK_A

    @property
    def N_EDGES(self) -> tuple[bool, ...]:
        if not isinstance(self.N, int):
            return (False,)  # every tile is NV vectors wide, its stores masked at N
        return (False, True) if 0 < cdiv(self.N % self.NR, self.L) < self.NV else (False,)

    @property
    def TILES(self) -> list[tuple[int, int, int, bool]]:
        """``(rows, vectors, m_edge, n_edge)`` of each kind of register tile: C's last row and
        column of tiles may be partial, and each gets a micro-kernel only as large as its real
        rows and vectors (at 512 x 512, 8 x 3 tiles would spend 3% of their FMAs on the zero
        columns of the last panel)."""
        nv_part = cdiv(self.N % self.NR, self.L) if isinstance(self.N, int) else self.NV
        return [(me or self.MR, nv_part if ne else self.NV, me, ne) for me in self.M_EDGES for ne in self.N_EDGES]


def _plan(shape: tuple, config: MatmulConfig, target: CpuTarget, prepacked_b: int,
          b_vectorizes: bool, prefetch_b: bool, a_stride: int | None, a_run: int = 0,
          prefetch_c: bool = False, a_window: int = 0) -> _Plan:
    """The plan of :func:`matmul_program`'s kernel, or a ScheduleError for what it cannot serve."""
    Bt, M, N, K = (_size(x) for x in shape)
    static = all(isinstance(d, int) for d in (Bt, M, N, K))
    if any(isinstance(d, int) and d < 1 for d in (Bt, M, N, K)):
        raise ScheduleError(f"matmul template: sizes must be positive, got (Bt, M, N, K)={shape}")
    c, L = config, target.vector_lanes(f32)
    if c.mr * c.nv + c.nv + 1 > target.num_vector_registers:
        raise ScheduleError(f"matmul template: a {c.mr}x{c.nv}-vector tile needs {c.mr * c.nv + c.nv + 1} vector "
                            f"registers; {target.name} has {target.num_vector_registers}")
    if prepacked_b not in (0, 1) and not (isinstance(Bt, int) and prepacked_b == Bt):
        raise ScheduleError(f"matmul template: prepacked_b={prepacked_b} must be 0 (B packed by the kernel), "
                            f"1 (one B for every batch) or the batch {Bt}")
    if prepacked_b and not all(isinstance(d, int) for d in (N, K)):
        raise ScheduleError(f"matmul template: B prepacked takes static N and K, got {N} and {K}")
    shape = (Bt, M, N, K)
    grid = core_grid(shape, c, target) if static else (c.pm, c.pn)
    BAND_M, BAND_N, MC, NC, KC = blocking(shape, c, target, grid)
    # a window read in place takes B's panels packed ahead: a B packed by the kernel would be
    # packed whole, all of K at once
    window = a_window if a_window > 1 and prepacked_b and window_fits(K, c.nv * L, target) else 0
    if window:
        KC = K
    # micro-kernel calls on one B panel, in a full MC block
    slivers = cdiv(min(MC, BAND_M) if isinstance(BAND_M, int) else MC, c.mr)
    # a band one tile high reads each panel once, in order, which the hardware prefetcher follows
    PF = bool(prepacked_b) and prefetch_b and slivers > 1
    # a band whose height is known only at run time asks for a line every step: at a few
    # rows (a short sequence) its slivers still ask for most of the next chunk, and a tall
    # band asks for it all in its first slivers (the pace of a static band of 3-4 slivers)
    PF_STEPS, PF_LINES = _prefetch_pace(KC, c.nv * L, slivers) if isinstance(BAND_M, int) else (1, 1)
    stride = (K if isinstance(K, int) else 0) if a_stride is None else a_stride
    pack_a = not window and not reads_a_in_place(shape, c, target, stride, grid)
    # runs need every K block to start at a run's start
    runs = pack_a and a_run > 1 and isinstance(K, int) and K % a_run == 0 and (KC >= K or KC % a_run == 0)
    return _Plan(c, Bt, M, N, K, L, *grid, BAND_M, BAND_N, MC, NC, KC, prepacked_b,
                 PACK_A=pack_a, PACK_B=not prepacked_b and not reads_b_in_place(shape, c, target, b_vectorizes, grid),
                 PF=PF, PF_STEPS=PF_STEPS, PF_LINES=PF_LINES, RUN=a_run if runs else 0, PC=prefetch_c,
                 WINDOW=window)


def _prefetch_pace(KC: int, NR: int, slivers: int) -> tuple[int, int]:
    """``(steps, lines)``: the micro-kernel asks for ``lines`` lines of the next chunk of B
    (KC x NR) every ``steps`` steps of k, the slowest pace at which the slivers of a full MC
    block ask for all of it; spread out, since requests made at once queue behind each other."""
    total = cdiv(KC * NR, LINE_FLOATS)
    return next((st, ln) for st, ln in ((2, 1), (1, 1), (1, 2), (1, 4), (1, 8), (1, 16))
                if cdiv(total * st, KC * ln) <= slivers or ln == 16)


def _attrs(p: _Plan) -> tuple[tuple[str, object], ...]:
    """The kernel's attributes: its template, config (as the plan runs it), shape and choices."""
    c = p.config
    on = f" (on {p.P} core{'s' if p.P > 1 else ''})" if p.P != c.pm * c.pn else ""
    blocks = (f", K in {p.KB} blocks of {p.KC}" if isinstance(p.KB, int) and p.KB > 1
              and p.KC != round_up(c.kc, p.L) else "")
    shape = tuple(d if isinstance(d, int) else expr_text(d) for d in (p.Bt, p.M, p.N, p.K))
    return (("template", "matmul_cpu"), ("config", str(c) + on + blocks), ("shape", shape),
            ("pack_aligned", True), ("pack_a_run", p.RUN), ("prepacked_b", p.PB), ("packs_a", p.PACK_A),
            ("packs_b", p.PACK_B), ("prefetch_b", p.PF), ("prefetch_c", p.PC), ("a_window", p.WINDOW))


def _phase(script: Callable[[], None]) -> S.Stmt:
    """Decorator: a parameterless kernel-script function becomes the statements it stands for,
    which a kernel splices in by calling the builder that returns them. Its names are the
    builder's: the enclosing kernel's IR variables and the plan's constants. A docstring
    becomes the comment at the head of the phase in the generated C."""
    fn = parse_function(script)
    doc = fn.attr("doc")
    return S.seq([S.Comment(doc), fn.body]) if doc else fn.body


class _Block(namedtuple("_Block", "A B C Ap Bp Cb b m_lo m0 mm m_hi n0 nn n_hi kb k0 kn")):
    """The kernel's tensors and where a core's loops stand, as IR values: batch ``b``; rows
    ``m0`` to ``m0 + mm`` of the band from ``m_lo`` to ``m_hi``; columns ``n0`` to
    ``n0 + nn`` of the band ending at ``n_hi``; K block ``kb``, ``kn`` steps from ``k0``.
    ``Ap`` and ``Bp`` (the packed blocks) are None for an operand read in place."""

    __slots__ = ()


def _loop_nest(p: _Plan) -> S.Function:
    """The kernel: each core's walk over its bands, batches and blocks, the phases spliced in."""
    Bt, M, N, K, B_SHAPE, P, PM, PN = p.Bt, p.M, p.N, p.K, p.B_SHAPE, p.P, p.PM, p.PN
    BAND_M, BAND_N, MC, NC, KC, KB, NR, KCP = p.BAND_M, p.BAND_N, p.MC, p.NC, p.KC, p.KB, p.NR, p.KCP
    PACK_A, PACK_B, CB_SHAPE, M_OUTER = p.PACK_A, p.PACK_B, p.CB_SHAPE, p.M_OUTER

    @kernel
    def matmul(A: f32[Bt, M, K], B: f32[B_SHAPE], C: f32[Bt, M, N]):
        for w in parallel(P):
            if PACK_A:
                Ap = local_tensor(f32, [MC, KCP])
            if PACK_B:
                Bp = local_tensor(f32, [NC // NR, KC, NR])
            Cb = local_tensor(f32, CB_SHAPE)
            for tm, tn in spatial(PM, PN).on(w):
                m_lo = tm * BAND_M
                m_hi = min(M, m_lo + BAND_M)
                n_lo = tn * BAND_N
                n_hi = min(N, n_lo + BAND_N)
                for b in range(Bt):
                    for nb in range(cdiv(BAND_N, NC)):
                        n0 = n_lo + nb * NC
                        nn = min(NC, n_hi - n0)
                        if M_OUTER:
                            for mb in range(cdiv(m_hi - m_lo, MC)):
                                m0 = m_lo + mb * MC
                                mm = min(MC, m_hi - m0)
                                for kb in range(KB):
                                    k0 = kb * KC
                                    kn = min(KC, K - k0)
                                    _block(p, _Block(A, B, C, Ap if PACK_A else None, None, Cb,
                                                     b, m_lo, m0, mm, m_hi, n0, nn, n_hi, kb, k0, kn))
                        else:
                            for kb in range(KB):
                                k0 = kb * KC
                                kn = min(KC, K - k0)
                                if PACK_B:
                                    _pack_b(p, B, Bp, b, n0, nn, n_hi, k0, kn)
                                for mb in range(cdiv(m_hi - m_lo, MC)):
                                    m0 = m_lo + mb * MC
                                    mm = min(MC, m_hi - m0)
                                    _block(p, _Block(A, B, C, Ap if PACK_A else None, Bp if PACK_B else None, Cb,
                                                     b, m_lo, m0, mm, m_hi, n0, nn, n_hi, kb, k0, kn))
    return matmul


def _block(p: _Plan, at: _Block) -> S.Stmt:
    """An MC x KC block of A (packed first, unless read in place) times its K block of B."""
    if p.PACK_A:
        return S.seq([_pack_a(p, at.A, at.Ap, at.b, at.m0, at.mm, at.k0, at.kn), _panels(p, at)])
    return _panels(p, at)


def _pack_b(p: _Plan, B: E.Var, Bp: E.Var, b: E.Expr, n0: E.Expr, nn: E.Expr, n_hi: E.Expr,
            k0: E.Expr, kn: E.Expr) -> S.Stmt:
    """Copies B's KC x NC block at ``(k0, n0)`` into ``Bp``'s NR-wide panels, a vector at a time."""
    L, NR, NV = p.L, p.NR, p.NV

    @_phase
    def pack_b():
        "pack B's KC x NC block into NR-wide panels; columns past N are zeros"
        for jr in range(cdiv(nn, NR)):
            for k in range(kn):
                for v in unroll(NV):
                    n = n0 + jr * NR + v * L
                    vstore(Bp[jr, k, v * L], vload(B[b, k0 + k, n], L, max(min(n_hi - n, L), 0)))
    return pack_b


def _pack_a(p: _Plan, A: E.Var, Ap: E.Var, b: E.Expr, m0: E.Expr, mm: E.Expr, k0: E.Expr,
            kn: E.Expr) -> S.Stmt:
    """Copies A's MC x KC block at ``(m0, k0)`` into ``Ap``, whole register tiles of rows."""
    L, M, MR, RUN = p.L, p.M, p.MR, p.RUN
    if RUN:
        return _pack_a_runs(p, A, Ap, b, m0, mm, k0, kn)

    @_phase
    def pack_a():
        "pack A's MC x KC block by vectors along K; rows past M repeat row M-1 (never stored)"
        for i in range(cdiv(mm, MR) * MR):
            for kv in range(kn // L):
                vstore(Ap[i, kv * L], vload(A[b, min(m0 + i, M - 1), k0 + kv * L], L))
            if kn % L != 0:
                kt = kn - kn % L
                vstore(Ap[i, kt], vload(A[b, min(m0 + i, M - 1), k0 + kt], L, kn % L))
    return pack_a


def _pack_a_runs(p: _Plan, A: E.Var, Ap: E.Var, b: E.Expr, m0: E.Expr, mm: E.Expr, k0: E.Expr,
                 kn: E.Expr) -> S.Stmt:
    """:func:`_pack_a` a run of ``RUN`` elements at a time (``a_run`` of :func:`matmul_program`):
    each vector of a run stops where the run does, so that fusion reads it as one load."""
    L, M, MR, RUN = p.L, p.M, p.MR, p.RUN
    RV = cdiv(RUN, L)

    @_phase
    def pack_a():
        "pack A's MC x KC block by runs along K (a window's row of pixels); rows past M repeat row M-1"
        for i in range(cdiv(mm, MR) * MR):
            for r in range(kn // RUN):
                for v in unroll(RV):
                    count = min(RUN - v * L, L)
                    vstore(Ap[i, r * RUN + v * L], vload(A[b, min(m0 + i, M - 1), k0 + r * RUN + v * L], L, count),
                           count)
    return pack_a


def _panels(p: _Plan, at: _Block) -> S.Stmt:
    """The block's column panels of B, and on each its register tiles of C: each runs the
    :func:`_tile` of its kind, and with ``PF`` asks for the chunk of B read after this one."""
    M, N, K, KC, KB, MR, NR, MC, NC, TILES, PF = p.M, p.N, p.K, p.KC, p.KB, p.MR, p.NR, p.MC, p.NC, p.TILES, p.PF
    M_OUTER, TILE_ROWS = p.M_OUTER, p.TILE_ROWS
    EXACT = not isinstance(M, int) and p.config.exact_rows
    WHOLE = [t for t in TILES if not t[2]]
    m_lo, m0, mm, m_hi, n0, nn, n_hi = at.m_lo, at.m0, at.mm, at.m_hi, at.n0, at.nn, at.n_hi
    kb, k0, kn = at.kb, at.k0, at.kn

    @_phase
    def panels():
        for jr in range(cdiv(nn, NR)):
            if PF:
                "the B chunk read after this one: the next panel, or the first of the next K block or N block"
                pf_last = jr + 1 == cdiv(nn, NR)
                if M_OUTER:  # after K's last block, K's first: of the next M block, or of the next N block
                    pf_wrap = kb + 1 == KB
                    pf_next_n = pf_wrap and m0 + MC >= m_hi and n0 + NC < n_hi
                    pf_end = pf_wrap and m0 + MC >= m_hi and n0 + NC >= n_hi
                    pf_panel = n0 // NR + jr + 1 if not pf_last else (n0 + NC) // NR if pf_next_n else n0 // NR
                    pf_row = k0 if not pf_last else 0 if pf_wrap else k0 + KC
                    pf_rows = kn if not pf_last else 0 if pf_end else min(KC, K) if pf_wrap else min(KC, K - k0 - KC)
                else:
                    pf_next_n = kb + 1 == KB and n0 + NC < n_hi
                    pf_panel = n0 // NR + jr + 1 if not pf_last else (n0 + NC) // NR if pf_next_n else n0 // NR
                    pf_row = k0 if not pf_last else 0 if pf_next_n else k0 + KC
                    pf_rows = kn if not pf_last else min(KC, K) if pf_next_n else \
                        (min(KC, K - k0 - KC) if kb + 1 < KB else 0)
                pf_lines = cdiv(pf_rows * NR, LINE_FLOATS)
            pfs = (pf_panel, pf_row, pf_lines) if PF else None
            at_n_edge = n0 + jr * NR + NR > N
            # the row of Cb of the block's first tile
            tiles0 = jr * TILE_ROWS if M_OUTER else jr * TILE_ROWS + (m0 - m_lo) // MR
            if EXACT:
                for ir in range(mm // MR):  # the whole tiles, with no test of rows
                    for tmr, tnv, m_edge, n_edge in WHOLE:
                        if _tile_case(p, True, at_n_edge, n_edge):
                            _tile(p, at, jr, ir, tiles0 + ir, pfs, tmr, tnv, n_edge)
                for tmr, tnv, m_edge, n_edge in WHOLE:
                    if _tile_case(p, True, at_n_edge, n_edge):
                        _last_rows(p, at, jr, tiles0 + mm // MR, pfs, tnv, n_edge)
            else:
                for ir in range(cdiv(mm, MR)):
                    at_m_edge = m0 + ir * MR + MR > M
                    for tmr, tnv, m_edge, n_edge in TILES:
                        if _tile_case(p, _edge_case(p.M_EDGES, at_m_edge, m_edge), at_n_edge, n_edge):
                            _tile(p, at, jr, ir, tiles0 + ir, pfs, tmr, tnv, bool(m_edge) or n_edge,
                                  bool(m_edge) and p.CLAMP_ROWS)
    return panels


def _last_rows(p: _Plan, at: _Block, jr: E.Expr, tile: E.Expr, pf: tuple | None, tnv: int,
               n_edge: bool) -> S.Stmt:
    """An ``exact_rows`` block's last ``mm % MR`` rows, fewer than a tile: the micro-kernel
    of their count, its sums put in a tile on the stack, then one loop over those rows that
    adds the partial sums and stores. The epilogue fusion puts in that store is then written
    once rather than once per count (it was most of such a kernel's code and build time)."""
    L, MR, HEIGHTS = p.L, p.MR, p.M_EDGES[1:]
    mm, ir = at.mm, at.mm // p.MR
    fvec = vec(f32, L)

    @_phase
    def last_rows():
        "the block's last rows, fewer than a tile: the tile of their count, its sums through the stack"
        rest = local_tensor(f32, [MR - 1, tnv * L])
        for h in HEIGHTS:
            if mm % MR == h:
                acc = register_tensor(fvec, [h, tnv])
                for i, v in repeat(h, tnv).on(0):
                    acc[i, v] = broadcast(0.0, L)
                _micro_kernel(p, at, jr, ir, pf, acc, h, tnv)
                _prefetch_rest(p, at, ir, pf)
                for i, v in repeat(h, tnv).on(0):
                    vstore(rest[i, v * L], acc[i, v])
        _store_rows(p, at, jr, tile, rest, tnv, n_edge)
    return last_rows


def _store_rows(p: _Plan, at: _Block, jr: E.Expr, tile: E.Expr, rest: E.Var, tnv: int, n_edge: bool) -> S.Stmt:
    """:func:`_store_tile` for the block's last ``mm % MR`` rows, their sums in ``rest``: a
    loop over the rows, so that the epilogue fusion puts here is written once."""
    L, MR, NR, KB = p.L, p.MR, p.NR, p.KB
    C, Cb, b, m0, mm, n0, n_hi, kb = at.C, at.Cb, at.b, at.m0, at.mm, at.n0, at.n_hi, at.kb

    @_phase
    def store_rows():
        if n_edge:
            "a tile at C's last columns: only its real vectors"
        for i in range(mm % MR):
            for v in unroll(tnv):
                if kb > 0:
                    vstore(rest[i, v * L], vload(rest[i, v * L], L) + vload(Cb[tile, i * NR + v * L], L))
                if kb == KB - 1:
                    n = n0 + jr * NR + v * L
                    vstore(C[b, m0 + mm // MR * MR + i, n], vload(rest[i, v * L], L), max(min(n_hi - n, L), 0))
                else:
                    vstore(Cb[tile, i * NR + v * L], vload(rest[i, v * L], L))
    return store_rows


def _edge_case(edges: tuple, at_edge: E.Expr, edge: Any) -> E.Expr | bool:
    """Whether a tile is of kind ``edge`` (true or not) among ``edges``, ``at_edge`` saying where it is."""
    return True if len(edges) == 1 else at_edge if edge else E.logical_not(at_edge)


def _tile_case(p: _Plan, m_case: E.Expr | bool, at_n_edge: E.Expr, n_edge: bool) -> E.Expr | bool:
    """Whether the tile at hand is the ``TILES`` entry for ``n_edge`` whose rows ``m_case`` holds for."""
    conds = [c for c in (m_case, _edge_case(p.N_EDGES, at_n_edge, n_edge)) if c is not True]
    return E.logical_and(*conds) if len(conds) > 1 else conds[0] if conds else True


def _tile(p: _Plan, at: _Block, jr: E.Expr, ir: E.Expr, tile: E.Expr, pf: tuple | None,
          tmr: int, tnv: int, edge: bool, clamp_rows: bool = False) -> S.Stmt:
    """Register tile ``ir`` on panel ``jr``, ``tmr`` rows by ``tnv`` vectors: accumulators from
    zero, the micro-kernel over the K block, the rest of B's next chunk after a short last
    block, and the store into C or into row ``tile`` of the partial sums. ``clamp_rows``: a
    full tile at a symbolic M's last rows, reading rows past M as row M - 1."""
    L = p.L
    fvec = vec(f32, L)

    @_phase
    def register_tile():
        if edge:
            "a tile at C's last rows or columns: only its real rows and vectors"
        # the accumulators start at zero and the partial sums are added after the k loop:
        # loaded first, they would hold up the first FMAs while they come from L2 or L3 (a
        # band's buffer is often larger than L2)
        acc = register_tensor(fvec, [tmr, tnv])
        for i, v in repeat(tmr, tnv).on(0):
            acc[i, v] = broadcast(0.0, L)
        _micro_kernel(p, at, jr, ir, pf, acc, tmr, tnv, clamp_rows)
        _prefetch_rest(p, at, ir, pf)
        _store_tile(p, at, jr, ir, tile, acc, tmr, tnv)
    return register_tile


def _prefetch_rest(p: _Plan, at: _Block, ir: E.Expr, pf: tuple | None) -> S.Stmt:
    """After tile ``ir``'s k loop over K's short last block, the prefetches of the steps it
    did not take (the next chunk has more lines than the block steps); nothing otherwise."""
    KC, kn = p.KC, at.kn
    if not (p.PF and p.K % p.KC != 0):  # (a prefetching kernel has B prepacked: K is an int)
        return S.seq([])

    @_phase
    def prefetch_rest():
        "K's short last block has fewer steps than the next chunk's lines: ask for the rest"
        for t in range(KC - kn):
            _prefetch_b(p, at, ir, kn + t, pf)
    return prefetch_rest


def _micro_kernel(p: _Plan, at: _Block, jr: E.Expr, ir: E.Expr, pf: tuple | None, acc: E.Var,
                  tmr: int, tnv: int, clamp_rows: bool = False) -> S.Stmt:
    """The tile's rank-1 updates over the K block (:func:`_rank1`), one a step of k; over a
    window read in place, a run of ``WINDOW`` steps at a time, so that the offset of each
    row's run is computed once a run and a step adds one."""
    kn, R = at.kn, p.WINDOW
    if R:
        @_phase
        def window_kernel():
            "the micro-kernel, A read in place from the window: a run of its K at a time"
            for run in range(kn // R):
                for step in range(R):
                    _rank1(p, at, jr, ir, pf, acc, tmr, tnv, clamp_rows, run * R + step)
        return window_kernel

    @_phase
    def micro_kernel():
        "the micro-kernel: MR x NV vector FMAs per k"
        for k in range(kn):
            _rank1(p, at, jr, ir, pf, acc, tmr, tnv, clamp_rows, k)
    return micro_kernel


def _rank1(p: _Plan, at: _Block, jr: E.Expr, ir: E.Expr, pf: tuple | None, acc: E.Var,
           tmr: int, tnv: int, clamp_rows: bool, k: E.Expr) -> S.Stmt:
    """Step ``k`` of the K block: ``tnv`` vectors of B's panel (a prepacked weight's, the
    packed block's, or B where it lies), ``tmr`` broadcasts of A (packed or in place) and
    ``tmr x tnv`` FMAs into ``acc``; with ``PF``, prefetches."""
    L, M, MR, NR, PB, PF, PC, PACK_A, PACK_B = p.L, p.M, p.MR, p.NR, p.PB, p.PF, p.PC, p.PACK_A, p.PACK_B
    A, B, Ap, Bp, b, m0, n0, n_hi, k0 = at.A, at.B, at.Ap, at.Bp, at.b, at.m0, at.n0, at.n_hi, at.k0
    fvec = vec(f32, L)

    @_phase
    def rank1():
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
            _prefetch_b(p, at, ir, k, pf)
        if PC:
            _prefetch_c(p, at, jr, ir, k, tnv)
        "one broadcast of A lives at a time: MR x NV + NV + 1 registers"
        for i in unroll(tmr):
            if PACK_A:  # (the row in 64 bits: each row's offset folds into the load's
                # displacement rather than taking a register of its own)
                a = broadcast(Ap[cast(ir * MR, i64) + i, k], L)
            elif clamp_rows:  # rows past a symbolic M read row M - 1 (never stored)
                a = broadcast(A[b, min(m0 + ir * MR + i, M - 1), k0 + k], L)
            else:  # a tile's rows of A, read where they lie (fusion may read them computed)
                a = broadcast(A[b, m0 + ir * MR + i, k0 + k], L)
            for v in unroll(tnv):
                acc[i, v] = fma(a, bv[v], acc[i, v])
    return rank1


def _prefetch_b(p: _Plan, at: _Block, ir: E.Expr, step: E.Expr, pf: tuple) -> S.Stmt:
    """The prefetches of tile ``ir`` at ``step`` of its k loop: ``PF_LINES`` lines of the next
    chunk ``pf = (panel, first row, lines)`` every ``PF_STEPS`` steps, so that the slivers
    on one panel share the chunk out."""
    KC, NR, PB, PF_STEPS, PF_LINES, B, b = p.KC, p.NR, p.PB, p.PF_STEPS, p.PF_LINES, at.B, at.b
    pf_panel, pf_row, pf_lines = pf

    @_phase
    def prefetch_b():
        if step % PF_STEPS == 0:
            for j in unroll(PF_LINES):
                line = (ir * KC + step) // PF_STEPS * PF_LINES + j
                if line < pf_lines:
                    e = line * LINE_FLOATS
                    prefetch(B[min(b, PB - 1), pf_panel, pf_row + e // NR, e % NR])
    return prefetch_b


def _prefetch_c(p: _Plan, at: _Block, jr: E.Expr, ir: E.Expr, step: E.Expr, tnv: int) -> S.Stmt:
    """At ``step`` of tile ``ir``'s k loop in the last K block, a line of C where tile
    ``ir + 1`` of the panel stores: one a step, row by row (rows and columns past C's edge
    clamped to it; the last tile of a block asks for the next block's first, a wasted hint)."""
    M, N, MR, NR, KB = p.M, p.N, p.MR, p.NR, p.KB
    C, b, m0, n0, kb = at.C, at.b, at.m0, at.n0, at.kb
    LINES = cdiv(tnv * p.L, LINE_FLOATS)  # a row's lines in the tile

    @_phase
    def prefetch_c():
        if kb == KB - 1:
            if step < MR * LINES:
                m = min(m0 + (ir + 1) * MR + step // LINES, M - 1)
                n = min(n0 + jr * NR + step % LINES * LINE_FLOATS, N - 1)
                prefetch(C[b, m, n])
    return prefetch_c


def _store_tile(p: _Plan, at: _Block, jr: E.Expr, ir: E.Expr, tile: E.Expr, acc: E.Var,
                tmr: int, tnv: int) -> S.Stmt:
    """``acc`` plus the partial sums of earlier K blocks: after the last block into C (rows
    past M dropped, columns past N masked off), before it into row ``tile`` of ``Cb``."""
    L, MR, NR, KB = p.L, p.MR, p.NR, p.KB
    C, Cb, b, m0, m_hi, n0, n_hi, kb = at.C, at.Cb, at.b, at.m0, at.m_hi, at.n0, at.n_hi, at.kb

    @_phase
    def store_tile():
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
    return store_tile


def reads_b_in_place(shape: tuple, config: MatmulConfig, target: CpuTarget,
                     b_vectorizes: bool = True, grid: tuple[int, int] | None = None) -> bool:
    """Whether the micro-kernel reads B where it lies instead of from packed panels: when a
    core's band is one row of register tiles (M at most MR: a vector times a matrix, a
    decode step, a small batch) and B copies by vectors, each element of B feeds one
    micro-kernel call, and packing would copy it once only to read it again. A B that
    fusion gathers or builds lane by lane (a convolution's window) is packed: its costly
    reads stay out of the FMA loop."""
    BAND_M = blocking(shape, config, target, grid)[0]
    return b_vectorizes and isinstance(BAND_M, int) and cdiv(BAND_M, config.mr) == 1


#: Bytes after which L1's set index repeats: 64 sets of 64-byte lines on every x86 core
#: taskloom targets (a 48 KiB 12-way and a 32 KiB 8-way L1 alike).
L1_SET_SPAN = 4096


def reads_a_in_place(shape: tuple, config: MatmulConfig, target: CpuTarget,
                     a_stride: int, grid: tuple[int, int] | None = None) -> bool:
    """Whether the micro-kernel broadcasts A's elements where they lie instead of from a
    packed MC x KC block. Packing copies every element of A once per K block, from L3 when A
    is large, before any FMA runs; reading in place skips that copy. It takes an A that fusion
    reads by plain copies, its rows ``a_stride`` elements apart (0: A is gathered or
    computed, and is packed), and two conditions, since every column panel of a block reads
    a tile's rows again, from L2, where a packed block is one contiguous stream:

    - at most four panels in a block (with more, those rereads outweigh the copy saved);
    - at most two of a tile's rows on the same L1 sets: rows of 512 or 1024 floats, or nine
      rows of 768, evict each other and the B panel.
    """
    if a_stride <= 0:
        return False
    _, _, _, NC, KC = blocking(shape, config, target, grid)
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
    NP, whole = cdiv(N, NR), N // NR
    # written in place, with no padded copy of B first: a model's weights are hundreds of MB,
    # and each new page costs a fault; aligned as the compiled graph keeps its constants, so
    # that it takes these as they are instead of copying them once more
    out = aligned_empty((PB, NP, K, NR), np.float32)
    out[:, :whole] = b[:, :, :whole * NR].reshape(PB, K, whole, NR).transpose(0, 2, 1, 3)
    if N % NR:
        out[:, whole] = 0
        out[:, whole, :, :N % NR] = b[:, :, whole * NR:]
    return out


def default_config(shape: tuple[int, int, int, int], target: CpuTarget) -> MatmulConfig:
    """The config for ``shape`` read off the target, before any tuning.

    The register tile does the most FMAs per load of A and B (MR x NV / (MR + NV)) that the
    register file allows: 6 x 4 vectors with 32 registers, 4 x 3 with 16. KC is what a
    two-vector-wide panel of B filling L1 allows (384 with 48 KiB of L1 and AVX-512: a
    longer K run is worth more than room in L1 beside the panel); an MC x KC block of A
    takes about half of L2; cores split the larger of M and N (so small-M shapes such as
    128 x 3072 split their columns).
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


#: The widest register tile of the space, in vectors (:func:`_tiles`).
WIDEST_TILE_VECTORS = 4

#: The N block of every config in the space: wider blocks gain next to nothing and lose
#: much once B's KC x NC block outgrows L2, so the space spends its points on tiles and
#: blocks instead.
NC_COLUMNS = 1024

#: The cost of packing one element, in FMA lanes: about a cycle for a gathered element (a
#: conv window), while a vector FMA does 16 lanes in half a cycle.
PACK_COST = 16


def _split_cores(P: int, M: int, N: int, mr: int, nr: int) -> tuple[int, int]:
    """The ``pm x pn`` core grid (``pm * pn == P``) with the least work per core: FMAs on
    its share of whole register tiles plus the packing of its rows of A and columns of B.
    Within 1% of the least, rows are split (the better split of square products)."""
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
      512), or the tile's own panel half or 3/4 of it (for a wide tile, KCs between the two-vector panel's);
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
    8-row tiles rather than 9)."""
    out = []
    for nv in range(2, WIDEST_TILE_VECTORS + 1):
        top = (regs - nv - 1) // nv
        for mr in range(top - 2, top + 1):
            if 1 <= mr <= 16 and mr * nv >= regs // 2:
                out.append((mr, nv))
    return out


def _kc(target: CpuTarget, fraction: float, nv: int = 2) -> int:
    """The K block whose ``nv``-vector-wide panel of B takes ``fraction`` of L1 (16 to 512)."""
    panel_row = nv * target.vector_lanes(f32) * 4
    return min(512, max(16, int(target.l1d_bytes * fraction) // panel_row // 16 * 16))
