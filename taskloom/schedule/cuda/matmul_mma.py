"""The CUDA matmul template on tensor cores: ``mma.sync`` fed by ``ldmatrix`` from swizzled
shared memory, filled by a multi-stage ``cp.async`` pipeline, the schedule written as task
mappings.

It serves the contractions :func:`~taskloom.schedule.contraction.match_contraction` reads
whose two factors are 16-bit floats (float16 or bfloat16, the same for both; a prologue's
arithmetic is rounded to that type, as the operator would do in half precision) by
``mma.sync`` m16n8k16, and, on a target that allows tf32 (``CudaTarget.tf32``), whose
factors are float32, by m16n8k8 on tf32. Any epilogue; an output of float32, float16 or
bfloat16. Products are summed in float32.

A block of ``warps`` warps computes a ``block_m x block_n`` tile of ``C`` (one batch element
per ``blockIdx.z``) in steps of ``block_k`` along ``K``:

1. **load**: each factor's tile goes into a shared buffer of ``stages`` slots. A factor that
   is a plain read, contiguous along one axis in rows whose starts are 16-byte aligned, is
   copied by ``cp.async`` in 16-byte chunks (consecutive threads on consecutive chunks, so
   a warp's reads coalesce; a chunk past ``M``, ``N`` or ``K`` is zero-filled, no branch);
   rows aligned to 8 or 4 bytes only are copied in pieces of that size. A convolution's
   window in NHWC, its channels a multiple of 8, is copied the same way a pixel's 8 channels
   at a time (inside the image, or zero-filled as padding: :func:`window_pieces`). Any other
   factor (an NCHW window, a prologue, an odd row of 16-bit elements) is computed element by
   element into the slot. The tile keeps the factor's contiguous axis
   contiguous: ``[m][k]`` for a row-major A, ``[k][m]`` for a transposed one, and the same
   for B; ``ldmatrix`` (with ``.trans`` where needed) turns either into the fragments.
   float32 elements cannot be transposed by ``ldmatrix``: a tf32 tile laid ``[k][m]`` is
   read by the lanes one element each, from a layout swizzled for that read.
2. **swizzle**: the 16-byte chunk ``c`` of row ``r`` is stored at chunk ``c ^ f(r)``, which
   puts any 8 consecutive rows of a chunk column in 8 different groups of 4 banks: the
   8 rows ``ldmatrix`` reads in one phase, and the chunks a warp's copies write, never
   share a bank.
3. **pipeline**: the slots of the first ``stages - 1`` steps are requested before the loop;
   each step waits for its own slot, requests the one ``stages - 1`` steps ahead (into the
   slot the previous step has finished reading: one barrier a step orders both), and
   multiplies.
4. **compute**: the warps are laid out ``spatial(*warps)`` over the block's tile, each
   warp ``repeat(mma_m, mma_n)`` over m16n8 tiles; for each 16 (tf32: 8) of ``K`` it loads
   its A and B fragments by ``ldmatrix.x4`` and issues ``mma_m * mma_n`` ``mma.sync``.
5. **store**: each accumulator through the epilogue, staged in a shared tile laid over the
   factors' (once every warp has read them) and copied into ``C`` 16 bytes a thread, or, where
   that does not apply (:meth:`_Kernel._stage_shape`), stored from the fragments; inside ``C`` only.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.arith import simplify_expr
from taskloom.ir.compute import Task
from taskloom.ir.dtypes import DataType, TensorType, bfloat16, float16, float32, index_type
from taskloom.ir.functor import collect, substitute
from taskloom.ir.index import row_major_offset, unravel
from taskloom.ir.mapping import repeat, spatial
from taskloom.schedule.contraction import Contraction, match_contraction
from taskloom.schedule.cuda.matmul import _k_contiguous, thin
from taskloom.schedule.cuda.rules import _Inline, _parameters
from taskloom.schedule.registry import Candidate, Scheduled
from taskloom.target.cuda import CudaTarget
from taskloom.transforms.names import NameGen

HALF_TYPES = (float16, bfloat16)
GROUPS = 8  # 16-byte bank groups in the 128 bytes of shared memory's 32 banks
STATIC_SHARED = 48 * 1024  # the most a kernel may declare statically; past it its tiles are dynamic
#: per factor type, the mma shape (float32: tf32); its K, and the fragments of A and B, are
#: the shape's (:data:`taskloom.ir.gpu.MMA_SHAPES`)
MMA_SHAPE = {float16: "m16n8k16", bfloat16: "m16n8k16", float32: "m16n8k8"}


@dataclass(frozen=True)
class MmaConfig:
    """A ``block_m x block_n`` tile of C in steps of ``block_k``, ``stages`` steps in flight;
    ``warps`` warps over (m, n), each a ``warp_m x warp_n`` tile of m16n8 mma tiles."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 32
    warps: tuple[int, int] = (2, 2)
    stages: int = 3

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (a tuning record's config); :meth:`from_dict` reverses it."""
        return {**dataclasses.asdict(self), "warps": list(self.warps)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MmaConfig":
        return cls(d["block_m"], d["block_n"], d["block_k"], tuple(d["warps"]), d["stages"])  # type: ignore[arg-type]

    @property
    def threads(self) -> int:
        return 32 * self.warps[0] * self.warps[1]

    @property
    def warp_tile(self) -> tuple[int, int]:
        return self.block_m // self.warps[0], self.block_n // self.warps[1]

    @property
    def mma_tiles(self) -> tuple[int, int]:
        """m16n8 tiles a warp computes, along m and n."""
        wm, wn = self.warp_tile
        return wm // 16, wn // 8

    def shared_bytes(self, element_bytes: int = 2) -> int:
        return self.stages * (self.block_m + self.block_n) * self.block_k * element_bytes

    def kernel(self, con: Contraction, name: str, dtype: DataType | None = None) -> S.Function:
        """The template's kernel of ``con`` with this config (:func:`mma_kernel`)."""
        return mma_kernel(con, self, name, dtype)

    def mapping(self):
        """The block's warps over its m16n8 tiles, as Hidet writes it."""
        return spatial(*self.warps) * repeat(*self.mma_tiles)

    def __str__(self) -> str:
        wm, wn = self.warp_tile
        return (f"{self.block_m}x{self.block_n}x{self.block_k}, {self.stages} stages, "
                f"warps {self.warps[0]}x{self.warps[1]} of {wm}x{wn}")


#: Two configs of the space (:mod:`taskloom.schedule.cuda.mma_model` holds all of it and
#: chooses): the large tile, and a small one; the benchmarks report both.
CONFIGS = (MmaConfig(), MmaConfig(64, 64, 32, (2, 2), 3))


def _valid(c: MmaConfig, chunk: int) -> None:
    wm, wn = c.warp_tile
    assert c.block_k % 16 == 0 and wm % 16 == 0 and wn % 16 == 0 and c.stages >= 2
    for rows, cols in ((c.block_m, c.block_k), (c.block_n, c.block_k)):
        assert (rows * cols // chunk) % c.threads == 0


# -- what a factor is --------------------------------------------------------------------

def _read_types(con: Contraction) -> set[DataType]:
    """The element types the two factors read."""
    return {r.type for f in (con.a, con.b) for r in collect(f, E.TensorElement)}  # type: ignore[attr-defined]


def half_type(con: Contraction) -> DataType | None:
    """The 16-bit type both factors read, or None when they read anything else."""
    types = _read_types(con)
    return types.pop() if len(types) == 1 and types <= set(HALF_TYPES) else None


def factor_type(con: Contraction, tf32: bool) -> DataType | None:
    """The type the tensor cores multiply ``con``'s factors in: their 16-bit type, or
    float32 (as tf32) where both read float32 and ``tf32`` allows it; None otherwise."""
    half = half_type(con)
    if half is not None or not tf32:
        return half
    return float32 if _read_types(con) == {float32} and con.a.type == float32 and con.b.type == float32 else None


@dataclass(frozen=True)
class _Factor:
    """One factor as the template reads it: ``outer`` is its axis of the tile (m for A, n
    for B); ``k_inner`` says whether its shared tile is ``[outer][k]`` (K contiguous) or
    ``[k][outer]``; ``copy`` the bytes of each ``cp.async`` that fills it (16, or 8 or 4
    where its rows are aligned to no more), 0 where its threads compute it element by element."""

    name: str
    expr: E.Expr
    outer: E.Var
    extent: int
    block: int
    k_inner: bool
    copy: int
    window: "_Window | None" = None


@dataclass(frozen=True)
class _Window:
    """A factor read whose pieces of ``chunk`` consecutive k, from a multiple of ``chunk``,
    are runs of one input's elements under one condition (an NHWC convolution's window: a
    pixel's channels, inside the image or all padding): the read of a piece's first element
    and that condition, both of ``start``, the piece's first k."""

    element: E.TensorElement
    cond: E.Expr | None
    start: E.Var


def window_pieces(expr: E.Expr, vk: E.Var, K: int, chunk: int, nbytes: int) -> _Window | None:
    """``expr``'s :class:`_Window` where every ``chunk`` consecutive values of ``vk`` from a
    multiple of ``chunk`` read ``chunk`` consecutive elements of one input of ``nbytes``,
    starting ``chunk``-aligned, under one condition whose else is zero; else None."""
    from taskloom.ir.compute import TensorInput
    from taskloom.schedule.vectorize import _AlignedDivMod, _strided_offset
    if K % chunk:
        return None  # (a piece would straddle K's end)
    start, lane = E.Var("k_start", vk.type), E.Var("k_lane", vk.type)
    value = simplify_expr(substitute(_AlignedDivMod(vk, start, chunk).visit(expr), {vk: start + lane}))
    conds = []
    while isinstance(value, (E.Select, E.Cast)):
        if isinstance(value, E.Select):
            if not (isinstance(value.b, E.Constant) and float(value.b.value) == 0.0):
                return None
            conds.append(value.cond)
            value = value.a
        else:
            value = value.value
    if not isinstance(value, E.TensorElement) or not isinstance(value.tensor, TensorInput) \
            or value.type.nbytes != nbytes or any(lane in E.free_vars(c) for c in conds):
        return None
    *outer, last = value.indices
    found = _strided_offset(last, lane)
    if any(lane in E.free_vars(i) for i in outer) or found is None or found[1] != 1:
        return None
    element = E.TensorElement(value.tensor, (*outer, found[0]))
    q = E.Var("k_piece", vk.type)  # the piece's start is a multiple of the chunk: chunk * q
    offset = substitute(E.as_expr(row_major_offset(element.indices, value.tensor.shape)), {start: q * chunk})
    if not multiple_of(simplify_expr(offset), chunk):
        return None
    return _Window(element, _all(*conds), start)


#: Batches whose every row start copies checks one by one; past it (or for a symbolic batch)
#: the start is proved aligned for every batch element at once (:func:`multiple_of`).
ALIGNMENT_CHECKS = 1024


def copies_rows(read: E.Expr, vb: E.Var, batch: int, row: E.Var, col: E.Var, cols: int,
                nbytes: int = 2, copy: int = 16, ragged: bool = False) -> bool:
    """Whether cp.async can copy ``read`` (a factor of ``vb < batch``, ``row`` and ``col``)
    in pieces of ``copy`` bytes: one tensor element of ``nbytes``, contiguous along ``col``
    (``cols`` of them, a whole number of pieces unless the caller copies a ``ragged`` last
    piece in part), whose rows start ``copy``-byte aligned in every batch element."""
    element = read.value if isinstance(read, E.Cast) else read
    chunk = copy // nbytes
    many = not isinstance(batch, int) or batch > ALIGNMENT_CHECKS  # a symbolic batch, or too many to try
    whole = isinstance(cols, int) and cols % chunk == 0  # (a symbolic length may not be)
    if not isinstance(element, E.TensorElement) or element.type.nbytes != nbytes or (not whole and not ragged):
        return False
    offset = E.as_expr(row_major_offset(element.indices, element.tensor.shape))
    at = lambda b, r, c: simplify_expr(substitute(offset, {vb: E.as_expr(b), row: r, col: c}))  # noqa: E731
    zero = E.as_expr(0)
    step = simplify_expr(at(0, row, col) - at(0, zero, zero) - row * _constant(at(0, E.as_expr(1), zero)) - col)
    if not (isinstance(step, E.Constant) and int(step.value) == 0) or _constant(at(0, E.as_expr(1), zero)) % chunk:
        return False
    if many:  # every batch element's start at once: a multiple of the piece whatever vb is
        return multiple_of(simplify_expr(substitute(offset, {row: zero, col: zero})), chunk)
    return all(_constant(at(b, zero, zero)) % chunk == 0 for b in range(batch))


def multiple_of(e: E.Expr, n: int) -> bool:
    """Whether integer expression ``e`` is a multiple of ``n`` for every value of its
    variables, as far as its sums and products show (False where they do not)."""
    if isinstance(e, E.Constant):
        return int(e.value) % n == 0
    if isinstance(e, E.Cast):
        return multiple_of(e.value, n)
    if isinstance(e, E.Binary) and e.op in ("add", "sub"):
        return multiple_of(e.a, n) and multiple_of(e.b, n)
    if isinstance(e, E.Binary) and e.op == "mod" and isinstance(e.b, E.Constant) and int(e.b.value) % n == 0:
        return multiple_of(e.a, n)  # (a - a % D is a multiple of D, so of n)
    if isinstance(e, E.Binary) and e.op == "mul":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(x, E.Constant) and multiple_of(y, n // math.gcd(int(x.value), n)):
                return True  # (x a multiple of n leaves y a multiple of 1: anything)
        return multiple_of(e.a, n) or multiple_of(e.b, n)
    return n == 1


def _constant(e: E.Expr) -> int:
    """An offset's value, or 1 (never aligned) when it is not a constant."""
    return int(e.value) if isinstance(e, E.Constant) else 1


def _factor(con: Contraction, name: str, expr: E.Expr, outer: E.Var, extent: int, block: int,
            nbytes: int) -> _Factor:
    """How to load ``expr``: by cp.async when it reads one tensor element, contiguous along
    k or along ``outer``, in rows that start aligned: 16 bytes a copy where rows allow, else
    8 or 4 (a float32 row of any length, a float16 one of even length), in that order of
    preference. A row may end inside a piece (a slice of a tensor whose rows were padded to
    16 bytes, :mod:`~taskloom.compiler.passes.pad_rows`): that piece copies what lies before
    the end and zero-fills the rest."""
    for copy in (16, 8, 4):
        for k_inner, row, col, cols in ((True, outer, con.vk, con.K), (False, con.vk, outer, extent)):
            if copy >= nbytes and copies_rows(expr, con.vb, con.batch, row, col, cols, nbytes, copy, ragged=True):
                return _Factor(name, expr, outer, extent, block, k_inner, copy)
    window = window_pieces(expr, con.vk, con.K, 16 // nbytes, nbytes) if isinstance(con.K, int) else None
    if window is not None:
        return _Factor(name, expr, outer, extent, block, True, 16, window)
    # computed element by element: K contiguous in the tile only where memory is
    return _Factor(name, expr, outer, extent, block, _k_contiguous(expr, con.vk, outer), 0)


def read_layouts(con: Contraction, nbytes: int) -> str:
    """How the template reads ``con``'s factors: ``k`` for a K-contiguous tile, ``x`` for an
    M- (N-) contiguous one, A then B (what a tuning record of the contraction depends on)."""
    return "".join("k" if _factor(con, name, expr, outer, extent, 16, nbytes).k_inner else "x"
                   for name, expr, outer, extent in (("A", con.a, con.vm, con.M), ("B", con.b, con.vn, con.N)))


def _all(*conditions: E.Expr | None) -> E.Expr | None:
    """The conjunction of the conditions that are not None; None when none is left."""
    left = [c for c in conditions if c is not None]
    return None if not left else left[0] if len(left) == 1 else E.logical_and(*left)


# -- the kernel ----------------------------------------------------------------------------

class _Tile:
    """A factor's shared buffer: ``stages`` slots of ``rows x cols`` elements, the 16-byte
    chunks of each row swizzled by the row's place among 8 (``r % 8``): with ``chunks``
    chunks a row, 8 rows span ``8 * chunks`` chunks, and ``c ^ f(r % 8)`` spreads a chunk
    column of any 8 consecutive rows over the 8 bank groups of 128 bytes.

    A tile whose lanes read single float32 elements (``lane_reads``: tf32 laid ``[k][x]``,
    where 4 rows of k by 8 of x make a fragment) swizzles by ``c ^ 2 (r % 4)`` instead: the
    two chunks of 8 x that the 4 rows read land in 8 different bank groups."""

    def __init__(self, var: E.Var, rows: int, cols: int, lane_reads: bool = False):
        self.var, self.rows, self.cols, self.lane_reads = var, rows, cols, lane_reads
        self.chunk = 16 // var.type.dtype.nbytes  # type: ignore[attr-defined]
        chunks = cols // self.chunk
        self.period, self.width = max(1, GROUPS // chunks), min(chunks, GROUPS)
        assert not lane_reads or chunks >= GROUPS

    def at(self, slot: E.Expr, r: E.Expr, c: E.Expr, phase: E.Expr | None = None) -> E.TensorElement:
        """Element ``(r, c)`` of ``slot`` (``c`` a chunk start plus a constant offset);
        ``phase`` is ``r % 8`` where the caller knows it more simply (the address then
        differs between unrolled copies by a constant, which the hardware adds for free)."""
        ch = self.chunk
        if self.lane_reads:
            chunk = (c // ch) ^ (r % 4 * 2)
        else:
            phase = r % 8 if phase is None else phase
            chunk = (c // ch) ^ (phase // self.period) if self.width > 1 else c // ch
        return E.TensorElement(self.var, (slot, r, chunk * ch + c % ch))

    def fragment_row(self, slot: E.Expr, lane: E.Expr, x0: E.Expr, kk: E.Expr, a_operand: bool,
                     k_rows: bool) -> E.TensorElement:
        """The row ``lane`` gives ``ldmatrix.x4`` for an A fragment (16 x 16 at ``x0`` along
        m and ``kk`` along k; 16 x 8 of tf32) or two B fragments (n8 tiles at ``x0`` and
        ``x0 + 8``); lane ``l`` gives row ``l % 8`` of matrix ``l // 8``: A's quarters (rows
        0-7, 8-15, then the next chunk of k), B's k halves of one n8 tile, then of the next.
        ``k_rows`` when the tile's rows run along k (it is then read with ``.trans``)."""
        q, rr = lane // 8, lane % 8
        if k_rows:  # 16-bit elements only: a chunk is 8 of them
            x_off, k_off = ((q % 2) * 8, (q // 2) * 8) if a_operand else ((q // 2) * 8, (q % 2) * 8)
            return self.at(slot, kk + k_off + rr, x0 + x_off, rr)
        x_off, k_off = ((q % 2) * 8, (q // 2) * self.chunk) if a_operand else ((q // 2) * 8, (q % 2) * self.chunk)
        return self.at(slot, x0 + x_off + rr, kk + k_off, rr)

    def fill(self, r: E.Var, col: E.Var, tid: E.Expr, threads: int, copy: int,
             body: Callable[[E.Expr], S.Stmt]) -> S.Stmt:
        """The loop that fills one slot: ``body(first)`` for row ``r`` and its ``first``
        column, consecutive threads along a row, each a piece of ``copy`` bytes or, where
        ``copy`` is 0, one element at a time."""
        piece = self.chunk * copy // 16 if copy else 1
        per_row = self.cols // piece
        lanes = min(per_row, threads)
        mapping = repeat(self.rows * lanes // threads, per_row // lanes) * spatial(threads // lanes, lanes)
        return S.ForMapping((r, col), mapping, tid, body(col * piece if piece > 1 else col))


#: The most float32 accumulators a thread of a config whose C is staged holds (see
#: :meth:`_Kernel._stage_shape`).
STAGED_ACCUMULATORS = 64


def stages_rows(block_n: int, nbytes: int, accumulators: int) -> bool:
    """Whether a block of C ``block_n`` elements of ``nbytes`` wide, from ``accumulators``
    float32 accumulators a thread, may be staged in shared memory: rows of whole 128-byte
    lines, no more accumulators than :data:`STAGED_ACCUMULATORS` (see :meth:`_Kernel._stage_shape`)."""
    return block_n * nbytes % 128 == 0 and accumulators <= STAGED_ACCUMULATORS


def staging_enabled() -> bool:
    """Whether C may be staged in shared memory (``TASKLOOM_STAGE_C=0`` keeps the stores from
    the fragments: what a GPU session times it against)."""
    return os.environ.get("TASKLOOM_STAGE_C", "1") != "0"


class _Kernel:
    """The phases of one kernel, sharing its names and variables."""

    m_stride = 16  # rows between a warp's m16 tiles
    staged: tuple[str, str | None] | None = None  # C's staging tile and the tile it is laid over, once built

    def __init__(self, con: Contraction, config: MmaConfig, dtype: DataType,
                 read: Callable[[E.Expr, dict], E.Expr], out: E.Var, names: NameGen):
        _valid(config, 16 // dtype.nbytes)
        self.con, self.c, self.dtype, self.read, self.out, self.names = con, config, dtype, read, out, names
        self.shape = MMA_SHAPE[dtype]
        self.kstep = int(self.shape.rsplit("k", 1)[1])
        _, a_elements, b_elements = gpu.MMA_SHAPES[self.shape]
        v = lambda n: E.Var(names.fresh(n), index_type)  # noqa: E731
        self.tid, self.warp, self.lane = v("tid"), v("warp"), v("lane")
        self.bm, self.bn, self.bz = v("bm"), v("bn"), v("batch")
        self.A = _factor(con, "A", con.a, con.vm, con.M, config.block_m, dtype.nbytes)
        self.B = _factor(con, "B", con.b, con.vn, con.N, config.block_n, dtype.nbytes)
        self.tiles = {f.name: self._tile(f) for f in (self.A, self.B)}
        mt, nt = config.mma_tiles
        reg = lambda n, t, *shape: E.Var(names.fresh(n), TensorType(t, tuple(E.as_expr(s) for s in shape)))  # noqa: E731
        self.a_frag, self.b_frag = reg("a_frag", dtype, mt, a_elements), reg("b_frag", dtype, nt, b_elements)
        self.acc = reg("acc", float32, mt, nt, 4)

    def describe(self, f: _Factor) -> str:
        """How the kernel loads ``f``, for its doc."""
        return _describe(f)

    def _lane_reads(self, f: _Factor) -> bool:
        """Whether the lanes read ``f``'s fragments element by element: tf32 laid [k][x]."""
        return self.dtype == float32 and not f.k_inner

    def _tile(self, f: _Factor) -> _Tile:
        rows, cols = (f.block, self.c.block_k) if f.k_inner else (self.c.block_k, f.block)
        shape = (E.as_expr(self.c.stages), E.as_expr(rows), E.as_expr(cols))
        var = E.Var(self.names.fresh(f"{f.name.lower()}_tile"), TensorType(self.dtype, shape))
        return _Tile(var, rows, cols, self._lane_reads(f))

    def _vars(self, *names: str) -> list[E.Var]:
        return [E.Var(self.names.fresh(n), index_type) for n in names]

    def body(self) -> S.Stmt:
        c = self.c
        steps = -(-self.con.K // c.block_k)
        declares = [S.Declare(t.var, scope="shared") for t in self.tiles.values()]
        declares += [S.Declare(b, scope="register") for b in (self.a_frag, self.b_frag, self.acc)]
        return S.seq([
            S.Let(self.tid, gpu.threadIdx.x), S.Let(self.warp, self.tid // 32), S.Let(self.lane, self.tid % 32),
            S.Let(self.bm, gpu.blockIdx.y * c.block_m), S.Let(self.bn, gpu.blockIdx.x * c.block_n),
            S.Let(self.bz, gpu.blockIdx.z), *declares, self._zero(),
            self._prologue(steps), self._main_loop(steps), self._store()])

    def _zero(self) -> S.Stmt:
        i, j, e = self._vars("i", "j", "e")
        mt, nt = self.c.mma_tiles
        zero = S.BufferStore(self.acc, (i, j, e), E.Constant(0.0, float32))
        return S.For(i, E.as_expr(mt), S.For(j, E.as_expr(nt), S.For(e, E.as_expr(4), zero, "unroll"), "unroll"),
                     "unroll")

    # -- load ----------------------------------------------------------------------------

    def _prologue(self, steps: int) -> S.Stmt:
        """The first ``stages - 1`` steps requested before the loop."""
        first = [S.seq([self._load(E.as_expr(s), E.as_expr(s)) if s < steps else S.seq([]), gpu.CpAsyncCommit()])
                 for s in range(self.c.stages - 1)]
        return S.seq([S.Comment(f"pipeline: request the first {self.c.stages - 1} steps"), *first])

    def _load(self, slot: E.Expr, step: E.Expr) -> S.Stmt:
        return S.seq([self._load_factor(f, slot, step) for f in (self.A, self.B)])

    def _load_factor(self, f: _Factor, slot: E.Expr, step: E.Expr) -> S.Stmt:
        """Step ``step``'s tile of ``f`` into ``slot``, consecutive threads along a row:
        16-byte chunks by cp.async, or single elements computed by the threads."""
        tile, c = self.tiles[f.name], self.c
        r, col = self._vars("r", "col")

        def body(first: E.Expr) -> S.Stmt:
            outer, kk = (r, first) if f.k_inner else (first, r)
            x, k = self._origin(f) + outer, step * c.block_k + kk
            x_in, k_in = self._inside(x, f.extent, f.block), self._inside(k, self.con.K, c.block_k)
            inside = _all(x_in, k_in)
            if f.window is not None:
                return self._window_piece(f, tile.at(slot, r, first), x, k, inside)
            if f.copy:  # a piece outside is zero-filled, its address clamped
                src = self._element(f, x if x_in is None else E.select(x_in, x, 0),
                                    k if k_in is None else E.select(k_in, k, 0))
                return gpu.CpAsync(tile.at(slot, r, first), src, f.copy, self._piece_bytes(f, x, k, x_in, k_in))
            value = self.read(f.expr, self._bindings(f, x, k))
            if inside is not None:
                value = E.select(inside, value, E.Constant(0.0, float32))
            return S.BufferStore(tile.var, tile.at(slot, r, first).indices, E.cast(value, self.dtype))
        return tile.fill(r, col, self.tid, c.threads, f.copy, body)

    def _window_piece(self, f: _Factor, dst: E.TensorElement, x: E.Expr, k: E.Expr, inside: E.Expr | None
                      ) -> S.Stmt:
        """One piece of a window (:class:`_Window`) by cp.async: its run of elements where the
        tile and the window's condition hold, else zeros, from a clamped address."""
        w = f.window
        assert w is not None
        bindings = {**self._bindings(f, x, k), w.start: k}
        cond = w.cond if w.cond is None else self.read(w.cond, bindings)
        holds = _all(inside, cond)
        src = self.read(w.element, bindings)
        assert isinstance(src, E.TensorElement)
        if holds is not None:
            src = E.TensorElement(src.tensor, tuple(E.select(holds, i, 0) for i in src.indices))
        return gpu.CpAsync(dst, src, f.copy, None if holds is None else E.select(holds, f.copy, 0))

    def _piece_bytes(self, f: _Factor, x: E.Expr, k: E.Expr, x_in: E.Expr | None, k_in: E.Expr | None
                     ) -> E.Expr | None:
        """The bytes a piece at ``(x, k)`` reads (None: all of them, always): all inside, none
        outside, and where the contiguous axis ends inside a piece, the bytes before its end."""
        inside = _all(x_in, k_in)
        col, end, row_in = (k, self.con.K, x_in) if f.k_inner else (x, f.extent, k_in)
        if end % (f.copy // self.dtype.nbytes) == 0:
            return None if inside is None else E.select(inside, f.copy, 0)
        left = (end - col) * self.dtype.nbytes
        part = E.select(col < end, E.select(left < f.copy, left, f.copy), 0)
        return part if row_in is None else E.select(row_in, part, 0)

    @staticmethod
    def _inside(i: E.Expr, extent: int, block: int) -> E.Expr | None:
        """``i < extent``, or None where tiles of ``block`` divide ``extent`` (always inside)."""
        return None if extent % block == 0 else i < extent

    def _origin(self, f: _Factor) -> E.Expr:
        return self.bm if f is self.A else self.bn

    def _bindings(self, f: _Factor, x: E.Expr, k: E.Expr) -> dict:
        return {self.con.vb: self.bz, f.outer: x, self.con.vk: k}

    def _element(self, f: _Factor, x: E.Expr, k: E.Expr) -> E.TensorElement:
        value = self.read(f.expr, self._bindings(f, x, k))
        return value.value if isinstance(value, E.Cast) else value

    # -- the main loop -------------------------------------------------------------------

    def _main_loop(self, steps: int) -> S.Stmt:
        """Each step: wait for its slot, request the step ``stages - 1`` ahead into the slot
        the last step read, multiply. The loop runs in groups of ``stages`` steps, unrolled,
        so that each step's slots are constants: every shared address is then a register
        set before the loop plus an immediate (a rotating slot had cost two integer
        instructions an ldmatrix). Fragments the lanes read (tf32 [k][x]) have an address
        each already, and the unrolled group spills: there the slots rotate in two counters."""
        c = self.c
        comment = S.Comment(f"steps of {c.block_k} along K, {c.stages - 1} requested ahead of the one multiplied")
        if self._lane_reads(self.A) or self._lane_reads(self.B):
            read, write, k0 = (E.Var(self.names.fresh(n), index_type) for n in ("read_slot", "write_slot", "k0"))
            advance = lambda v: S.Assign(v, E.select(v + 1 < c.stages, v + 1, E.as_expr(0)))  # noqa: E731
            return S.seq([comment, S.Declare(read, E.as_expr(0)), S.Declare(write, E.as_expr(c.stages - 1)),
                          S.For(k0, E.as_expr(steps), S.seq([self._step(k0, read, write, steps),
                                                              advance(read), advance(write)]))])
        groups, tail = divmod(steps, c.stages)
        kq, s, t = self._vars("kq", "s", "t")
        ahead = lambda slot: (slot + (c.stages - 1)) % c.stages  # noqa: E731
        return S.seq([
            comment, S.Comment(f"in groups of {c.stages}, one a slot"),
            *([S.For(kq, E.as_expr(groups), S.For(s, E.as_expr(c.stages),
                                                 self._step(kq * c.stages + s, s, ahead(s), steps), "unroll"))]
              if groups else []),
            *([S.For(t, E.as_expr(tail), self._step(groups * c.stages + t, t, ahead(t), steps), "unroll")]
              if tail else [])])

    def _step(self, k0: E.Expr, read: E.Expr, write: E.Expr, steps: int) -> S.Stmt:
        """Step ``k0``, which multiplies slot ``read`` (``k0 % stages``) and requests step
        ``k0 + stages - 1`` into slot ``write``."""
        c = self.c
        ahead = k0 + (c.stages - 1)
        return S.seq([gpu.CpAsyncWait(c.stages - 2), S.Barrier(),
                      S.If(ahead < steps, self._load(write, ahead)), gpu.CpAsyncCommit(), self._compute(read)])

    def _warp_tiles(self, body: Callable[[E.Expr, E.Expr], S.Stmt]) -> S.Stmt:
        """``body(wm, wn)``: the warp's place in the block's tile, in elements."""
        wi, wj = self._vars("wi", "wj")
        wm, wn = self.c.warp_tile
        return S.ForMapping((wi, wj), spatial(*self.c.warps), self.warp, body(wi * wm, wj * wn))

    def _fragment_address(self, f: _Factor, slot: E.Expr, x0: E.Expr, kk: E.Expr) -> E.TensorElement:
        """The row this lane gives ``ldmatrix.x4`` for ``f``'s fragments at ``x0``, ``kk``."""
        return self.tiles[f.name].fragment_row(slot, self.lane, x0, kk, f is self.A, not f.k_inner)

    def _compute(self, slot: E.Expr) -> S.Stmt:
        """For each mma's K of the step: the warp's fragments by ldmatrix (or by its lanes),
        then its mmas."""
        c = self.c
        mt, nt = c.mma_tiles
        ks, i, j = self._vars("ks", "i", "j")

        def warp(wm: E.Expr, wn: E.Expr) -> S.Stmt:
            kk = ks * self.kstep
            if self._lane_reads(self.A):
                load_a = S.For(i, E.as_expr(mt), self._lane_fragment(self.A, slot, wm + i * 16, kk, i), "unroll")
            else:
                load_a = S.For(i, E.as_expr(mt), gpu.Ldmatrix(
                    E.TensorElement(self.a_frag, (i, E.as_expr(0))),
                    self._fragment_address(self.A, slot, wm + i * 16, kk), 4, not self.A.k_inner), "unroll")
            if self._lane_reads(self.B):
                load_b = S.For(j, E.as_expr(nt), self._lane_fragment(self.B, slot, wn + j * 8, kk, j), "unroll")
            else:
                load_b = S.For(j, E.as_expr(nt // 2), gpu.Ldmatrix(
                    E.TensorElement(self.b_frag, (j * 2, E.as_expr(0))),
                    self._fragment_address(self.B, slot, wn + j * 16, kk), 4, not self.B.k_inner), "unroll")
            zero = E.as_expr(0)
            acc = E.TensorElement(self.acc, (i, j, zero))
            mma = gpu.MmaSync(acc, E.TensorElement(self.a_frag, (i, zero)), E.TensorElement(self.b_frag, (j, zero)),
                              acc, self.shape)
            mmas = S.For(i, E.as_expr(mt), S.For(j, E.as_expr(nt), mma, "unroll"), "unroll")
            return S.For(ks, E.as_expr(c.block_k // self.kstep), S.seq([load_a, load_b, *self._rounded(), mmas]),
                         "unroll")
        return S.seq([self._warp_tiles(warp), S.Comment("the slot is free once every warp passes the next barrier")])

    def _rounded(self) -> list[S.Stmt]:
        """tf32 fragments rounded to nearest (``cvt.rna``), as cuBLAS rounds them: the tensor
        cores would drop the low 13 bits, which biases every product toward zero."""
        if self.dtype != float32:
            return []
        i, e = self._vars("i", "e")
        out = []
        for frag in (self.a_frag, self.b_frag):
            tiles, count = (int(d.value) for d in frag.type.shape)  # type: ignore[union-attr]
            at = (i, e)
            out.append(S.For(i, E.as_expr(tiles), S.For(e, E.as_expr(count), S.BufferStore(
                frag, at, E.call("tf32_round", E.TensorElement(frag, at))), "unroll"), "unroll"))
        return out

    def _lane_fragment(self, f: _Factor, slot: E.Expr, x0: E.Expr, kk: E.Expr, tile: E.Var) -> S.Stmt:
        """A tf32 fragment read from a [k][x] tile by each lane, as m16n8k8 lays it out:
        A's ``a[e]`` at k ``t + 4 (e // 2)``, m ``g + 8 (e % 2)``; B's ``b[e]`` at k ``t + 4 e``,
        n ``g`` (``g = lane // 4``, ``t = lane % 4``)."""
        [e] = self._vars("e")
        g, t = self.lane // 4, self.lane % 4
        if f is self.A:
            frag, count, k, x = self.a_frag, 4, kk + t + (e // 2) * 4, x0 + (e % 2) * 8
        else:
            frag, count, k, x = self.b_frag, 2, kk + t + e * 4, x0
        # x is a multiple of 8 and k of 4 but for t: the chunk and the swizzle in simple terms
        buf = self.tiles[f.name]
        chunk = (x // buf.chunk + g // buf.chunk) ^ (t * 2)
        read = E.TensorElement(buf.var, (slot, k, chunk * buf.chunk + g % buf.chunk))
        return S.For(e, E.as_expr(count), S.BufferStore(frag, (tile, e), read), "unroll")

    # -- store ---------------------------------------------------------------------------

    def _store(self) -> S.Stmt:
        """Each accumulator through the epilogue into C: staged in shared memory and stored
        16 bytes a thread where :meth:`_stage_shape` allows, else straight from the
        fragments. A block whose tile lies inside C stores without a test; one on the edge
        tests each element (kept off the interior's path: hoisted, 128 tests would crowd the
        accumulators out of registers)."""
        stage = self._stage_shape()
        if stage is not None:
            return self._staged_store(*stage)
        return S.seq([S.Comment("store: the epilogue of each accumulator, inside C only"),
                      self._edged(lambda tested: self._warp_tiles(lambda wm, wn: self._stores(wm, wn, tested)))])

    def _edged(self, body: Callable[[bool], S.Stmt]) -> S.Stmt:
        """``body(False)`` for a block inside C, ``body(True)`` (each element tested) on its edge."""
        con, c = self.con, self.c
        edge = [cond for cond in (self._inside(self.bm + c.block_m - 1, con.M, c.block_m),
                                  self._inside(self.bn + c.block_n - 1, con.N, c.block_n)) if cond is not None]
        if not edge:
            return body(False)
        return S.If(E.logical_and(*edge) if len(edge) > 1 else edge[0], body(False), body(True))

    def _stage_shape(self) -> tuple[int, int] | None:
        """The shared tile C's block is staged in (``block_m`` rows, ``block_n`` columns and 8
        of pad), or None where the results leave straight from the fragments: rows of C not
        whole 16-byte runs, a staging tile larger than the factors' tiles it takes the place
        of (or, with a producer warpgroup, than the room its config keeps for it).

        From the fragments, a warp's request writes 8 rows of 16 bytes (8 half-used sectors);
        staged, each thread stores 16 consecutive bytes and a request 512, whole sectors. A
        row of C is whole 128-byte lines, so that a warp's reads of it back meet no bank
        conflict. Tiles of more than :data:`STAGED_ACCUMULATORS` a thread keep their stores:
        ptxas gave the largest Hopper tiles 30% more registers staged (198 against 154 a
        thread, 128x256) and one a spill, where their long K makes the store a small part."""
        nbytes = self.out.type.dtype.nbytes  # type: ignore[attr-defined]
        per = 16 // nbytes if nbytes in (2, 4) else 0
        last = simplify_expr(E.as_expr(self.con.output.shape[-1]))
        accumulators = math.prod(int(d.value) for d in self.acc.type.shape)  # type: ignore[attr-defined]
        if not staging_enabled() or not per or self.con.N % per or not E.is_const(last) or int(last.value) % per \
                or not stages_rows(self.c.block_n, nbytes, accumulators):
            return None
        # 8 elements of pad (16 bytes; 32 for float32 pairs, which a half-warp stores at once)
        # move each of the 8 rows a fragment store writes to banks of its own
        cols = self.c.block_n + 8
        return (self.c.block_m, cols) if self.c.block_m * cols * nbytes <= self.stage_room() else None

    def stage_room(self) -> int:
        """The bytes C's staging tile may take: the factors' tiles it is laid over."""
        return sum(math.prod(int(d.value) for d in t.var.type.shape)  # type: ignore[attr-defined]
                   for t in self.tiles.values()) * self.dtype.nbytes

    def _staged_store(self, rows: int, cols: int) -> S.Stmt:
        """The accumulators through the epilogue into a shared tile laid over the factors'
        (once every warp has read them), then the tile into C, 16 bytes a thread."""
        stage = self._stage_tile(rows, cols, self.tiles["A"].var.name)
        return S.seq([
            S.Comment("store: every warp is done with the factors' tiles; the results are staged in their place"),
            gpu.CpAsyncWait(0), S.Barrier(), S.Declare(stage, scope="shared"),
            self._edged(lambda tested: self._warp_tiles(lambda wm, wn: self._stores(wm, wn, tested, stage))),
            S.Barrier(), S.Comment("the staged tile into C, 16 bytes a thread"), self._copy_out(stage)])

    def _stage_tile(self, rows: int, cols: int, over: str | None) -> E.Var:
        """C's staging tile, laid ``over`` that buffer (or on shared memory of its own)."""
        stage = E.Var(self.names.fresh("c_stage"), TensorType(self.out.type.dtype,  # type: ignore[attr-defined]
                                                               (E.as_expr(rows), E.as_expr(cols))))
        self.staged = (stage.name, over)
        return stage

    def _copy_out(self, stage: E.Var, threads: int | None = None) -> S.Stmt:
        """The staged tile into C by the first ``threads`` threads (all by default), a 16-byte
        run at a time, consecutive threads on consecutive runs of a row; runs past C's edge
        are left."""
        con, c = self.con, self.c
        per = 16 // self.out.type.dtype.nbytes  # type: ignore[attr-defined]
        runs, threads = c.block_m * c.block_n // per, threads or c.threads
        t, q = self._vars("t", "q")
        r, col = q // (c.block_n // per), q % (c.block_n // per) * per
        m, n = self.bm + r, self.bn + col
        at = tuple(unravel((self.bz * con.M + m) * con.N + n, con.output.shape))
        copy: S.Stmt = gpu.VectorCopy(E.TensorElement(self.out, at), E.TensorElement(stage, (r, col)), 16)
        inside = _all(self._inside(m, con.M, c.block_m), self._inside(n, con.N, c.block_n),
                      None if runs % threads == 0 else q < runs)
        if inside is not None:
            copy = S.If(inside, copy)
        return S.For(t, E.as_expr(-(-runs // threads)), S.seq([S.Let(q, t * threads + self.tid), copy]))

    def _stores(self, wm: E.Expr, wn: E.Expr, tested: bool, stage: E.Var | None = None) -> S.Stmt:
        """The warp's accumulators into C (or into the ``stage`` tile, at their place in the
        block). Lane ``l`` holds rows ``l // 4`` and ``l // 4 + 8`` of each m16n8 tile,
        columns ``2 (l % 4)`` and the one after: where C's rows have an even length the two
        are adjacent and aligned to their pair, and leave in one store (a warp request then
        writes 8 sectors for 128 bytes, where single stores wrote 8 for 64)."""
        con = self.con
        mt, nt = self.c.mma_tiles
        i, j, h, e = self._vars("i", "j", "h", "e")
        g, t = self.lane // 4, self.lane % 4
        m_in, n_in = wm + i * self.m_stride + g + h * 8, wn + j * 8 + t * 2
        m, n = self.bm + m_in, self.bn + n_in

        def value(column: E.Expr, k: E.Expr) -> E.Expr:
            return self.read(con.epilogue, {con.vb: self.bz, con.vm: m, con.vn: column,
                                            con.acc: E.TensorElement(self.acc, (i, j, h * 2 + k))})

        def at(column: E.Expr) -> tuple:
            return tuple(unravel((self.bz * con.M + m) * con.N + column, con.output.shape))
        if stage is not None or con.N % 2 == 0:  # (C is staged only where N is even)
            dst = E.TensorElement(self.out, at(n)) if stage is None else E.TensorElement(stage, (m_in, n_in))
            store: S.Stmt = pair_store(dst, e, value(n + e, e), self.names)
            if tested:  # n is even and so is N: the pair is inside C or wholly outside
                store = S.If(E.logical_and(m < con.M, n < con.N), store)
        else:
            store = S.BufferStore(self.out, at(n + e), value(n + e, e))
            if tested:
                store = S.If(E.logical_and(m < con.M, n + e < con.N), store)
            store = S.For(e, E.as_expr(2), store, "unroll")
        return S.For(i, E.as_expr(mt), S.For(j, E.as_expr(nt), S.For(h, E.as_expr(2), store, "unroll"), "unroll"),
                     "unroll")


def pair_store(dst: E.TensorElement, e: E.Var, value: E.Expr, names: NameGen) -> S.Stmt:
    """``value`` for ``e`` = 0 and 1 into ``dst`` and the element after it in one store (a
    lane's two adjacent results of an mma; ``dst`` aligned to the pair)."""
    pair = E.Var(names.fresh("pair"), TensorType(dst.type, (E.as_expr(2),)))
    return S.seq([S.Declare(pair, scope="register"),
                  S.For(e, E.as_expr(2), S.BufferStore(pair, (e,), value), "unroll"),
                  gpu.VectorCopy(dst, E.TensorElement(pair, (E.as_expr(0),)), 2 * dst.type.nbytes)])


def _describe(f: _Factor) -> str:
    axis = "m" if f.name == "A" else "n"
    layout = f"[{axis}][k]" if f.k_inner else f"[k][{axis}]"
    how = "its threads" if not f.copy else "cp.async" if f.copy == 16 else f"cp.async of {f.copy} bytes"
    if f.window is not None:
        how = "cp.async of the window's runs"
    return f"{f.name} into {layout} by {how}"


def template_function(con: Contraction, cls: type, config: Any, dtype: DataType, name: str, template: str,
                      multiply: Callable[[Any], str]) -> tuple[S.Function, Any]:
    """The function of a tensor-core template's kernel (``cls``, a :class:`_Kernel`) of ``con``
    with ``config``: the task's inputs, then its output; its doc says how it multiplies
    (``multiply(kernel)``) and how it loads each factor. Returned with the kernel's phases."""
    names, params, tensors = _parameters(con.task)
    inline = _Inline(tensors)

    def read(expr: E.Expr, bindings: dict[E.Var, E.Expr]) -> E.Expr:
        return inline.visit(substitute(expr, bindings))
    kernel = cls(con, config, dtype, read, tensors[con.output], names)
    body = kernel.body()
    copies = "; ".join(kernel.describe(f) for f in (kernel.A, kernel.B))
    stored = "staged in shared memory, stored 16 bytes a thread" if kernel.staged else "stored from the fragments"
    doc = f"{con.task.name}: the CUDA matmul template (tensor cores, {multiply(kernel)}), {config}; {copies}; C {stored}"
    reuse = ((gpu.SHARED_REUSE, (kernel.staged,)),) if kernel.staged and kernel.staged[1] else ()
    return S.Function(name, tuple(params), body, attrs=(("doc", doc), ("template", template),
                                                        ("config", str(config)), *reuse)), kernel


def mma_kernel(con: Contraction, config: MmaConfig, name: str, dtype: DataType | None = None) -> S.Function:
    """The kernel of ``con`` with ``config``: the task's inputs, then its output. ``dtype``
    is the factors' type on the tensor cores (float32 for tf32); by default their 16-bit type."""
    dtype = dtype or half_type(con)
    if dtype is None:
        raise ValueError(f"{con.task.name}: the tensor-core template needs float16 or bfloat16 factors, "
                         "or float32 ones on a target that allows tf32")
    tf32 = " tf32" if dtype == float32 else ""
    fn, kernel = template_function(con, _Kernel, config, dtype, name, "matmul_mma",
                                   lambda k: f"mma.sync {k.shape}{tf32}")
    grid = (E.cdiv(con.N, config.block_n), E.cdiv(con.M, config.block_m), con.batch)
    tiles = config.shared_bytes(dtype.nbytes)
    # a staged C is laid over the tiles: they are dynamic shared memory then, in one run
    return gpu.cuda_kernel(fn, grid, (config.threads,), tiles if tiles > STATIC_SHARED or kernel.staged else 0)


def mma_candidate(task: Task, target: CudaTarget, constants: Mapping[int, np.ndarray] | None = None,
                  weights_stream: bool | str = False) -> Candidate | None:
    """The tensor-core templates' offer for a contraction of 16-bit factors (or float32 ones,
    where the target allows tf32) that is not thin (:func:`~taskloom.schedule.cuda.matmul.thin`);
    its config, an :class:`MmaConfig` or on ``sm_90a`` a
    :class:`~taskloom.schedule.cuda.matmul_wgmma.WgmmaConfig`, comes from
    :func:`taskloom.schedule.cuda.mma_model.choose`. N and K must be static; M and the
    batch may be symbols, which the kernel takes as sizes."""
    con = match_contraction(task, (float32, float16, bfloat16))
    # M and the batch may be symbolic (a dynamic graph's rows): the edges are predicated
    if con is None or not isinstance(con.N, int) or not isinstance(con.K, int) or thin(con):
        return None
    dtype = factor_type(con, target.tf32)
    if dtype is None:
        return None
    # a config builds its own kernel: mma.sync's here, or wgmma's (matmul_wgmma) on sm_90a
    return Candidate("matmul_mma", con, lambda config, name: Scheduled(config.kernel(con, name, dtype),
                                                                       tuple(range(len(task.inputs)))))
