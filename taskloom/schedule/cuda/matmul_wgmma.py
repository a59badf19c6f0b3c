"""The Hopper matmul template (``sm_90a``): warpgroup MMA (``wgmma.mma_async``) reading both
factors straight from 128-byte-swizzled shared memory, filled by TMA or by ``cp.async``.

It serves what :mod:`~taskloom.schedule.cuda.matmul_mma` serves in 16-bit floats (float16 or
bfloat16 factors, any prologue and epilogue, predicated edges, batches), and shares its
loads, its edges and its store; what differs is the multiply. ``mma.sync`` runs at half of
Hopper's tensor-core rate and needs every fragment moved into registers by ``ldmatrix``;
``wgmma`` runs at the full rate, its operands read by the tensor cores from shared memory
through descriptors, its accumulators in the registers of 128 threads at once.

A block of ``warpgroups`` warpgroups (128 threads each) computes a ``block_m x block_n``
tile of ``C`` in steps of 64 along ``K``; warpgroup ``w`` owns rows ``w * block_m /
warpgroups ..``, in wgmmas of 64 rows by ``block_n`` (m64n{block_n}k16, four a step):

1. **layout**: each factor's tile is kept in the canonical layout wgmma reads. A factor
   contiguous along K (A row-major, a linear's weight) is *K-major*: rows of its 64 K
   elements, 128 bytes each. One contiguous along M or N (B row-major) is *M/N-major*:
   rows along K of 64 M (N) elements, the next 64 of M (N) a whole ``64 x 64`` atom on.
   Either way the 16-byte chunk ``c`` of row ``r`` lies at chunk ``c ^ (r % 8)`` (the
   swizzle wgmma expects of the shared address; the tiles start on 1024 bytes), so the
   copies of a warp and the tensor cores' reads spread over all banks.
2. **copies**: with ``tma`` (the config's choice), a factor that is one tensor parameter
   read whole (rows 16-byte aligned) is copied by TMA: the launcher encodes its tensor map
   each launch, and thread 0 issues one box a K-major tile, one an
   atom of an M/N-major one, whose bytes land on the slot's mbarrier; TMA writes the
   128-byte swizzle itself and fills what lies past the tensor with zeros, so the edges
   need no predicate. Any other factor (a convolution's window, a prologue) is copied by
   the threads' ``cp.async`` as in the ``mma.sync`` template, or computed.
3. **pipeline**: ``stages - 2`` steps are requested ahead. Each step waits for its slot
   (its ``cp.async`` groups, fenced for the async proxy that wgmma reads through; its
   mbarrier's phase), passes one barrier (which also says every warpgroup has finished
   the step two back), requests a step into that slot, and issues its wgmmas without
   waiting for them: they run while the next step's barrier and copies go on, and are
   waited for (``wgmma.wait_group 1``) one step later. Every warpgroup takes both roles.
4. **a producer warpgroup** (``specialized``, both factors by TMA): one more warpgroup
   asks to give its registers up (``setmaxnreg``; ptxas honours that only in a kernel
   declaring one block an SM, which these do not, so both roles keep the launch's
   registers) and its first thread fills the slots as fast as they are freed, each slot's
   *full* mbarrier taking the bytes; the consumer warpgroups wait for a slot to be full,
   issue its wgmmas, wait for all of them (``wgmma.wait_group 0``), and arrive on the step
   before's *free* mbarrier.
   Freeing a slot with this step's wgmmas still in flight, as soon as ``wait_group 1``
   says the step before's are done, computed wrong results on an H200 (though the PTX ISA
   allows it; bench/results/2026-11-28-h200-run.md), so a slot is freed only once the
   wgmmas of the step after it are done too. No barrier is passed in the loop: the roles
   meet at the mbarriers only.
5. **store**: as the ``mma.sync`` template's, each 16-row strip of a warp's accumulators
   laid out as m16n8 fragments (the wgmma accumulator layout is that, stacked). With a
   producer warpgroup the consumers stage C in shared memory the config keeps for it (the
   producer may still be in its loop, so not over the tiles), and after the roles end and a
   barrier, copy it into C (the producers, their registers given up, take no part).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.arith import simplify_expr
from taskloom.ir.dtypes import DataType, TensorType, float32, index_type, int64
from taskloom.ir.functor import substitute
from taskloom.ir.index import row_major_offset
from taskloom.schedule.contraction import Contraction
from taskloom.schedule.cuda.matmul_mma import (ALIGNMENT_CHECKS, _factor, _Kernel, _Tile, half_type, stages_rows,
                                               template_function)
from taskloom.transforms.names import NameGen

BLOCK_K = 64  # one 128-byte row of 16-bit elements: the swizzle's width
ATOM = 64  # M/N elements of an M/N-major atom's row


@dataclass(frozen=True)
class WgmmaConfig:
    """A ``block_m x block_n`` tile of C in steps of 64 along K, ``stages`` slots of them,
    ``warpgroups`` warpgroups over m."""

    block_m: int = 128
    block_n: int = 128
    stages: int = 4
    warpgroups: int = 2
    tma: bool = True  # factors read whole from a tensor are copied by TMA, the rest by cp.async
    specialized: bool = False  # TMA issued by a producer warpgroup of its own (both factors by TMA)

    block_k = BLOCK_K
    kind = "wgmma"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (a tuning record's config); :meth:`from_dict` reverses it."""
        return {**dataclasses.asdict(self), "kind": self.kind}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "WgmmaConfig":
        return cls(d["block_m"], d["block_n"], d["stages"], d["warpgroups"], d.get("tma", False),
                   d.get("specialized", False))

    @property
    def threads(self) -> int:
        """The consumers' warpgroups, and with ``specialized`` the producers' one."""
        return 128 * (self.warpgroups + self.specialized)

    @property
    def rows(self) -> int:
        """The rows of C a warpgroup computes."""
        return self.block_m // self.warpgroups

    @property
    def mma_tiles(self) -> tuple[int, int]:
        """A warp's accumulators as m16n8 tiles: one 16-row strip per wgmma of its
        warpgroup, ``block_n / 8`` along n."""
        return self.rows // 64, self.block_n // 8

    @property
    def accumulators(self) -> int:
        """float32 accumulators a thread holds."""
        return self.rows // 64 * self.block_n // 2

    def shared_bytes(self, element_bytes: int = 2) -> int:
        """The tiles, the alignment's slack, with TMA a 1024-byte place for the mbarriers, and
        with a producer warpgroup the room for C's staging tile (:meth:`staging_bytes`)."""
        tiles = self.stages * (self.block_m + self.block_n) * self.block_k * element_bytes
        return tiles + gpu.SWIZZLE_ALIGN * (1 + self.tma + self.specialized) + self.staging_bytes()

    def staging_bytes(self) -> int:
        """With a producer warpgroup, the shared memory kept for staging a 16-bit C (its rows
        padded by 8, on a 1024-byte boundary), where the template stages it
        (:func:`~taskloom.schedule.cuda.matmul_mma.stages_rows`); else 0 (the tiles hold it)."""
        if not self.specialized or not stages_rows(self.block_n, 2, self.accumulators):
            return 0
        return self.block_m * (self.block_n + 8) * 2 + gpu.SWIZZLE_ALIGN

    def kernel(self, con: Contraction, name: str, dtype: DataType | None = None) -> S.Function:
        """The template's kernel of ``con`` with this config (:func:`wgmma_kernel`)."""
        return wgmma_kernel(con, self, name, dtype)

    def valid(self) -> bool:
        """Whether the template can build it: whole wgmmas, whole atoms, at least three slots."""
        return (self.rows % 64 == 0 and self.block_n % ATOM == 0 and 64 <= self.block_n <= 256
                and self.stages >= 3 and (self.tma or not self.specialized))

    def __str__(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k}, {self.stages} stages, "
                f"{self.warpgroups} warpgroup{'s' * (self.warpgroups > 1)} of {self.rows}x{self.block_n} "
                f"(wgmma{', TMA' if self.tma else ''}{' from a producer warpgroup' if self.specialized else ''})")


class _GmmaTile(_Tile):
    """A factor's shared buffer in wgmma's canonical layout: ``stages`` slots of
    ``rows x cols`` (``cols`` the contiguous axis: K for a K-major tile, whose ``cols`` is
    64), stored as ``cols / 64`` atoms of ``rows`` rows of 128 bytes."""

    def __init__(self, var: E.Var, rows: int, cols: int, k_major: bool):
        super().__init__(var, rows, cols)
        self.k_major = k_major

    def at(self, slot: E.Expr, r: E.Expr, c: E.Expr, phase: E.Expr | None = None) -> E.TensorElement:
        """Element ``(r, c)`` of ``slot``, its chunk swizzled by ``r % 8``."""
        chunk = (c % ATOM // 8) ^ (r % 8 if phase is None else phase)
        return E.TensorElement(self.var, (slot, c // ATOM, r, chunk * 8 + c % 8))

    def start(self, slot: E.Expr, r: E.Expr, c: E.Expr) -> E.TensorElement:
        """Where a wgmma operand starts (the descriptor's address: not swizzled)."""
        return E.TensorElement(self.var, (slot, c // ATOM, r, c % ATOM))

    def offsets(self) -> dict[str, int]:
        """The descriptor's byte offsets: the next 8 rows (SBO), the next atom (LBO)."""
        return {"lbo": self.rows * 128 if not self.k_major else 16, "sbo": 8 * 128}


class _WgmmaKernel(_Kernel):
    """The phases of one kernel; loads, edges and stores are the ``mma.sync`` kernel's."""

    m_stride = 64  # rows between a warp's 16-row strips: one wgmma's 64 rows

    def __init__(self, con: Contraction, config: WgmmaConfig, dtype: DataType,
                 read: Callable[[E.Expr, dict], E.Expr], out: E.Var, names: NameGen):
        assert config.valid(), config
        self.con, self.c, self.dtype, self.read, self.out, self.names = con, config, dtype, read, out, names
        v = lambda n: E.Var(names.fresh(n), index_type)  # noqa: E731
        self.tid, self.warp, self.lane, self.group = v("tid"), v("warp"), v("lane"), v("warpgroup")
        self.bm, self.bn, self.bz = v("bm"), v("bn"), v("batch")
        self.A = _factor(con, "A", con.a, con.vm, con.M, config.block_m, dtype.nbytes)
        self.B = _factor(con, "B", con.b, con.vn, con.N, config.block_n, dtype.nbytes)
        self.tiles = {f.name: self._tile(f) for f in (self.A, self.B)}
        mt, nt = config.mma_tiles
        self.acc = E.Var(names.fresh("acc"), TensorType(float32, tuple(E.as_expr(s) for s in (mt, nt, 4))))
        self.maps = {f.name: self._tensor_map(f) for f in (self.A, self.B)}
        # one mbarrier a slot: its TMA copies' bytes land on it; with a producer, one more a
        # slot that the consumers arrive on when they are done reading it
        self.bars = E.Var(names.fresh("full"), TensorType(int64, (E.as_expr(config.stages),)))
        self.free = E.Var(names.fresh("free"), TensorType(int64, (E.as_expr(config.stages),)))

    # -- TMA -----------------------------------------------------------------------------

    def _tensor_map(self, f: Any) -> gpu.TensorMap | None:
        """The TMA descriptor of ``f`` where the config asks for TMA and ``f`` is one tensor
        parameter read whole: rows of its contiguous axis ``row_stride`` elements apart from
        the tensor's start, batches ``batch_stride`` apart (16-byte multiples: what cp.async
        of 16 bytes needed already). A dynamic graph's symbolic rows are an extent the
        launcher evaluates (a product of sizes); a symbolic batch gets no map."""
        extent = f.extent if isinstance(f.extent, int) else gpu.product_text(E.as_expr(f.extent))
        if not self.c.tma or f.copy != 16 or f.window is not None or not isinstance(self.con.batch, int) \
                or extent is None:
            return None
        r, col = E.Var("r", index_type), E.Var("col", index_type)
        element = self._element(f, *((r, col) if f.k_inner else (col, r)))
        if not isinstance(element.tensor, E.Var):
            return None
        offset = E.as_expr(row_major_offset(element.indices, element.tensor.type.shape))  # type: ignore[union-attr]

        def at(b: int, row: int, c: int) -> int | None:
            v = simplify_expr(substitute(offset, {self.bz: E.as_expr(b), r: E.as_expr(row), col: E.as_expr(c)}))
            return int(v.value) if isinstance(v, E.Constant) else None
        row_stride, batch_stride = at(0, 1, 0), at(1, 0, 0) if self.con.batch > 1 else 0
        if at(0, 0, 0) != 0 or row_stride is None or batch_stride is None or \
                any(at(b, 0, 0) != b * batch_stride for b in range(min(self.con.batch, ALIGNMENT_CHECKS))):
            return None
        cols, rows = (self.con.K, extent) if f.k_inner else (extent, self.con.K)
        if not isinstance(cols, int):
            return None  # (M-contiguous rows of symbolic length: their stride is symbolic too)
        if rows == 1:  # one row: its stride is never taken, but the map needs one
            row_stride = -(-cols // 8) * 8
        strides = (row_stride * 2,) + ((batch_stride * 2,) if self.con.batch > 1 else ())
        dims = (cols, rows) + ((self.con.batch,) if self.con.batch > 1 else ())
        box = (ATOM, f.block if f.k_inner else BLOCK_K) + ((1,) if self.con.batch > 1 else ())
        if any(x % 16 or x <= 0 for x in strides):
            return None
        return gpu.TensorMap(f"{f.name.lower()}_map", element.tensor.name, dims, strides, box)

    def describe(self, f: Any) -> str:
        return super().describe(f).replace("by cp.async", "by TMA") if self.maps[f.name] else super().describe(f)

    def _tma(self, slot: E.Expr, step: E.Expr) -> S.Stmt:
        """Thread 0's TMA copies of step ``step`` into ``slot``: the bytes they bring, then a
        box for a K-major tile, a box an atom of 64 for an M/N-major one."""
        copies = []
        nbytes = 0
        for f in (self.A, self.B):
            tmap = self.maps[f.name]
            if tmap is None:
                continue
            tile, origin, k0 = self.tiles[f.name], self._origin(f), step * BLOCK_K
            batch = (self.bz,) if self.con.batch > 1 else ()
            if f.k_inner:
                copies.append(gpu.TmaLoad(tile.start(slot, E.as_expr(0), E.as_expr(0)), tmap.name,
                                          (k0, origin) + batch, E.TensorElement(self.bars, (slot,))))
            else:
                copies += [gpu.TmaLoad(tile.start(slot, E.as_expr(0), E.as_expr(j * ATOM)), tmap.name,
                                       (origin + j * ATOM, k0) + batch, E.TensorElement(self.bars, (slot,)))
                           for j in range(f.block // ATOM)]
            nbytes += f.block * BLOCK_K * self.dtype.nbytes
        return S.seq([gpu.MbarrierExpectTx(E.TensorElement(self.bars, (slot,)), nbytes), *copies])

    def _load(self, slot: E.Expr, step: E.Expr) -> S.Stmt:
        copied = [self._load_factor(f, slot, step) for f in (self.A, self.B) if self.maps[f.name] is None]
        return S.seq(copied + ([S.If(E.eq(self.tid, 0), self._tma(slot, step))] if self._uses_tma else []))

    @property
    def _uses_tma(self) -> bool:
        return any(m is not None for m in self.maps.values())

    @property
    def _uses_cp_async(self) -> bool:
        return any(m is None for m in self.maps.values())

    @property
    def specialized(self) -> bool:
        """Whether a producer warpgroup issues the copies: the config asks, and both factors
        go by TMA (else its warpgroup waits idle and the threads copy as without it)."""
        return self.c.specialized and all(m is not None for m in self.maps.values())

    def _init_barriers(self) -> S.Stmt:
        if not self._uses_tma:
            return S.seq([])
        stages = range(self.c.stages)
        inits = [gpu.MbarrierInit(E.TensorElement(self.bars, (E.as_expr(s),)), 1) for s in stages]
        if self.specialized:  # each consumer warpgroup frees a slot once its wgmmas have read it
            inits += [gpu.MbarrierInit(E.TensorElement(self.free, (E.as_expr(s),)), self.c.warpgroups) for s in stages]
        return S.seq([S.If(E.eq(self.tid, 0), S.seq([*inits, gpu.FenceMbarrierInit()])), S.Barrier()])

    def _specialized(self, steps: int) -> S.Stmt:
        """The pipeline with roles: the producer warpgroup's first thread waits for a slot to
        be free and fills it by TMA, as far ahead as the slots allow; the consumers wait for
        a slot to be full, issue its wgmmas, wait for them, and free the step before's slot."""
        c, [k] = self.c, self._vars("k")
        slot, use = k % c.stages, k // c.stages
        bar = lambda v, i: E.TensorElement(v, (i,))  # noqa: E731
        consumers = c.warpgroups * 128
        free_last = S.If(E.logical_and(k > 0, E.eq(self.tid % 128, 0)),
                         gpu.MbarrierArrive(bar(self.free, (k + (c.stages - 1)) % c.stages)))
        shape = self._stage_shape()
        stage = None if shape is None else self._stage_tile(*shape, None)
        if stage is None:
            finish, after = self._store(), []
        else:  # the consumers stage C in room of its own, and store it once all have staged
            finish = S.seq([S.Comment("store: the results staged in shared memory of their own"),
                            self._edged(lambda tested: self._warp_tiles(
                                lambda wm, wn: self._stores(wm, wn, tested, stage)))])
            # (not the producers: setmaxnreg may have left them too few registers for it)
            after = [S.Barrier(), S.Comment("the staged tile into C, 16 bytes a thread, by the consumers"),
                     S.If(self.tid < consumers, self._copy_out(stage, consumers))]
        return S.seq([
            *([S.Declare(stage, scope="shared")] if stage is not None else []),
            S.Comment(f"a producer warpgroup fills the {c.stages} slots by TMA; the consumers multiply"),
            gpu.WarpSpecialized(
                k, steps, self.tid >= consumers, E.eq(self.tid, consumers),
                # a slot's first use waits for nothing: the phase before a barrier's first counts as done
                gpu.MbarrierWait(bar(self.free, slot), (use + 1) % 2), self._tma(slot, k),
                gpu.MbarrierWait(bar(self.bars, slot), use % 2),
                S.seq([self._multiply(slot), gpu.WgmmaWait(self.acc, 0), free_last]),
                # the accumulators live in the consumers' branch alone
                self._zero(), S.seq([gpu.WgmmaWait(self.acc, 0), finish])),
            *after])

    def _tile(self, f: Any) -> _GmmaTile:
        rows, cols = (f.block, BLOCK_K) if f.k_inner else (BLOCK_K, f.block)
        shape = tuple(E.as_expr(s) for s in (self.c.stages, cols // ATOM, rows, ATOM))
        var = E.Var(self.names.fresh(f"{f.name.lower()}_tile"), TensorType(self.dtype, shape))
        return _GmmaTile(var, rows, cols, f.k_inner)

    def body(self) -> S.Stmt:
        c = self.c
        steps = -(-self.con.K // c.block_k)
        return S.seq([
            S.Let(self.tid, gpu.threadIdx.x), S.Let(self.warp, self.tid // 32), S.Let(self.lane, self.tid % 32),
            S.Let(self.group, self.tid // 128),
            S.Let(self.bm, gpu.blockIdx.y * c.block_m), S.Let(self.bn, gpu.blockIdx.x * c.block_n),
            S.Let(self.bz, gpu.blockIdx.z), *[S.Declare(t.var, scope="shared") for t in self.tiles.values()],
            *([S.Declare(self.bars, scope="shared")] if self._uses_tma else []),
            *([S.Declare(self.free, scope="shared")] if self.specialized else []),
            S.Declare(self.acc, scope="register"), *([] if self.specialized else [self._zero()]), self._init_barriers(),
            *([self._specialized(steps)] if self.specialized else
              [self._prologue(steps), self._main_loop(steps), gpu.WgmmaWait(self.acc, 0), self._store()])])

    def _prologue(self, steps: int) -> S.Stmt:
        ahead = self.c.stages - 2
        first = [S.seq([self._load(E.as_expr(s), E.as_expr(s)) if s < steps else S.seq([]), gpu.CpAsyncCommit()])
                 for s in range(ahead)]
        return S.seq([S.Comment(f"pipeline: request the first {ahead} steps"), *first])

    def _main_loop(self, steps: int) -> S.Stmt:
        """The steps in groups of ``stages``, unrolled, so that each step's slots are constants."""
        c = self.c
        groups, tail = divmod(steps, c.stages)
        kq, s, t = self._vars("kq", "s", "t")
        ahead = lambda slot: (slot + (c.stages - 2)) % c.stages  # noqa: E731
        return S.seq([
            S.Comment(f"steps of {c.block_k} along K, {c.stages - 2} requested ahead, one wgmma group in flight"),
            *([S.For(kq, E.as_expr(groups), S.For(s, E.as_expr(c.stages),
                                                 self._step(kq * c.stages + s, s, ahead(s), steps), "unroll"))]
              if groups else []),
            *([S.For(t, E.as_expr(tail), self._step(groups * c.stages + t, t, ahead(t), steps), "unroll")]
              if tail else [])])

    def _step(self, k0: E.Expr, read: E.Expr, write: E.Expr, steps: int) -> S.Stmt:
        """Step ``k0``: its slot ``read`` landed and visible to the tensor cores (its cp.async
        copies waited for and fenced, its TMA copies' barrier passed in this use's phase),
        the slot of step ``k0 - 2`` (``write``) refilled with step ``k0 + stages - 2``, then
        the wgmmas."""
        ahead = k0 + (self.c.stages - 2)
        landed = [gpu.CpAsyncWait(self.c.stages - 3), gpu.FenceProxyAsync()] if self._uses_cp_async else []
        if self._uses_tma:
            landed.append(gpu.MbarrierWait(E.TensorElement(self.bars, (read,)), k0 // self.c.stages % 2))
        return S.seq([
            *landed, S.Barrier(),
            S.If(ahead < steps, self._load(write, ahead)), gpu.CpAsyncCommit(),
            self._multiply(read),
            S.Comment("the wgmmas of the step before are done: its slot is free after the next barrier"),
            gpu.WgmmaWait(self.acc, 1)])

    def _multiply(self, slot: E.Expr) -> S.Stmt:
        """The warpgroup's wgmmas of one step: for each of its 64-row strips, four of K 16."""
        mt, _ = self.c.mma_tiles
        i, kk = self._vars("i", "kk")
        a, b = self.tiles["A"], self.tiles["B"]
        row = self.group * self.c.rows + i * 64
        a_at = a.start(slot, row, kk * 16) if a.k_major else a.start(slot, kk * 16, row)
        b_at = b.start(slot, E.as_expr(0), kk * 16) if b.k_major else b.start(slot, kk * 16, E.as_expr(0))
        zero = E.as_expr(0)
        mma = gpu.Wgmma(E.TensorElement(self.acc, (i, zero, zero)), a_at, b_at, f"m64n{self.c.block_n}k16",
                        "k" if a.k_major else "mn", "k" if b.k_major else "mn",
                        a.offsets()["lbo"], a.offsets()["sbo"], b.offsets()["lbo"], b.offsets()["sbo"])
        return S.seq([gpu.WgmmaFence(self.acc),
                      S.For(i, E.as_expr(mt), S.For(kk, E.as_expr(BLOCK_K // 16), mma, "unroll"), "unroll"),
                      gpu.WgmmaCommit()])

    def stage_room(self) -> int:
        """With a producer warpgroup, the room the config keeps for C's staging tile (the
        consumers stage while the producer may still be in its loop: not over the tiles)."""
        return max(self.c.staging_bytes() - gpu.SWIZZLE_ALIGN, 0) if self.specialized else super().stage_room()

    def _warp_tiles(self, body: Callable[[E.Expr, E.Expr], S.Stmt]) -> S.Stmt:
        """``body(wm, wn)``: the warp's first row in the block's tile (its warpgroup's rows,
        16 a warp), and column 0: a warpgroup's wgmmas span the whole ``block_n``."""
        return body(self.group * self.c.rows + self.warp % 4 * 16, E.as_expr(0))


def wgmma_kernel(con: Contraction, config: WgmmaConfig, name: str, dtype: DataType | None = None) -> S.Function:
    """The kernel of ``con`` with ``config``: the task's inputs, then its output."""
    dtype = dtype or half_type(con)
    if dtype is None:
        raise ValueError(f"{con.task.name}: the wgmma template needs float16 or bfloat16 factors")
    fn, kernel = template_function(con, _WgmmaKernel, config, dtype, name, "matmul_wgmma",
                                   lambda k: f"wgmma m64n{config.block_n}k16")
    if config.specialized and not kernel.specialized:  # a factor is not copied by TMA: no producer
        return wgmma_kernel(con, dataclasses.replace(config, specialized=False), name, dtype)
    fn = gpu.with_tensor_maps(fn, [m for m in kernel.maps.values() if m is not None])
    grid = (E.cdiv(con.N, config.block_n), E.cdiv(con.M, config.block_m), con.batch)
    return gpu.cuda_kernel(fn, grid, (config.threads,), config.shared_bytes(dtype.nbytes))
