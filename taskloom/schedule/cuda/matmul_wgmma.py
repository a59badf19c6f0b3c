"""The Hopper matmul template (``sm_90a``): warpgroup MMA (``wgmma.mma_async``) reading both
factors straight from 128-byte-swizzled shared memory, filled by a ``cp.async`` pipeline.

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
2. **pipeline**: ``stages - 2`` steps are requested ahead. Each step waits for its slot,
   fences the copies for the async proxy, passes one barrier (which also says every
   warpgroup has finished the step two back), requests a step into that slot, and issues
   its wgmmas without waiting for them: they run while the next step's barrier and
   copies go on, and are waited for (``wgmma.wait_group 1``) one step later.
3. **store**: as the ``mma.sync`` template's, each 16-row strip of a warp's accumulators
   laid out as m16n8 fragments (the wgmma accumulator layout is that, stacked).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import DataType, TensorType, float32, index_type
from taskloom.schedule.contraction import Contraction
from taskloom.schedule.cuda.matmul_mma import _factor, _Kernel, _Tile, half_type, template_function
from taskloom.transforms.names import NameGen

BLOCK_K = 64  # one 128-byte row of 16-bit elements: the swizzle's width
ATOM = 64  # M/N elements of an M/N-major atom's row
SWIZZLE_ALIGN = 1024  # the dynamic shared memory a launch adds, to start the tiles on 1024 bytes


@dataclass(frozen=True)
class WgmmaConfig:
    """A ``block_m x block_n`` tile of C in steps of 64 along K, ``stages`` slots of them,
    ``warpgroups`` warpgroups over m."""

    block_m: int = 128
    block_n: int = 128
    stages: int = 4
    warpgroups: int = 2

    block_k = BLOCK_K
    kind = "wgmma"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (a tuning record's config); :meth:`from_dict` reverses it."""
        return {**dataclasses.asdict(self), "kind": self.kind}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "WgmmaConfig":
        return cls(d["block_m"], d["block_n"], d["stages"], d["warpgroups"])

    @property
    def threads(self) -> int:
        return 128 * self.warpgroups

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
        return self.stages * (self.block_m + self.block_n) * self.block_k * element_bytes + SWIZZLE_ALIGN

    def kernel(self, con: Contraction, name: str, dtype: DataType | None = None) -> S.Function:
        """The template's kernel of ``con`` with this config (:func:`wgmma_kernel`)."""
        return wgmma_kernel(con, self, name, dtype)

    def valid(self) -> bool:
        """Whether the template can build it: whole wgmmas, whole atoms, at least three slots."""
        return (self.rows % 64 == 0 and self.block_n % ATOM == 0 and 64 <= self.block_n <= 256
                and self.stages >= 3)

    def __str__(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k}, {self.stages} stages, "
                f"{self.warpgroups} warpgroup{'s' * (self.warpgroups > 1)} of {self.rows}x{self.block_n} (wgmma)")


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
            S.Declare(self.acc, scope="register"), self._zero(),
            self._prologue(steps), self._main_loop(steps), gpu.WgmmaWait(self.acc, 0), self._store()])

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
        """Step ``k0``: its slot ``read`` landed and visible to the tensor cores, the slot of
        step ``k0 - 2`` (``write``) refilled with step ``k0 + stages - 2``, then the wgmmas."""
        ahead = k0 + (self.c.stages - 2)
        return S.seq([
            gpu.CpAsyncWait(self.c.stages - 3), gpu.FenceProxyAsync(), S.Barrier(),
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

    def _warp_tiles(self, body: Callable[[E.Expr, E.Expr], S.Stmt]) -> S.Stmt:
        """``body(wm, wn)``: the warp's first row in the block's tile (its warpgroup's rows,
        16 a warp), and column 0: a warpgroup's wgmmas span the whole ``block_n``."""
        return body(self.group * self.c.rows + self.warp % 4 * 16, E.as_expr(0))


def wgmma_kernel(con: Contraction, config: WgmmaConfig, name: str, dtype: DataType | None = None) -> S.Function:
    """The kernel of ``con`` with ``config``: the task's inputs, then its output."""
    dtype = dtype or half_type(con)
    if dtype is None:
        raise ValueError(f"{con.task.name}: the wgmma template needs float16 or bfloat16 factors")
    fn = template_function(con, _WgmmaKernel, config, dtype, name, "matmul_wgmma",
                           lambda k: f"wgmma m64n{config.block_n}k16")
    grid = (-(-con.N // config.block_n), -(-con.M // config.block_m), con.batch)
    return gpu.cuda_kernel(fn, grid, (config.threads,), config.shared_bytes(dtype.nbytes))
