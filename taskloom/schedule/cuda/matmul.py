"""The CUDA matmul template on CUDA cores: shared-memory tiles, each thread a tile of
outputs in registers, the schedule written as task mappings.

It serves every task :func:`~taskloom.schedule.contraction.match_contraction` reads as a
batched matmul (matmul, linear, batch_matmul, an NCHW convolution read as img2col) with
its prologue and epilogue fused: the factors are read through their expressions when a
tile is loaded, and the epilogue is applied to each accumulator as it is stored. Half-
precision factors (float16, bfloat16) are converted as they are loaded: the tiles, the
products and the sums are float32, and the epilogue rounds the result to the output's type.

A block of 256 threads computes a ``block_m x block_n`` tile of ``C``, one batch element
at a time (``blockIdx.z``), in steps of ``block_k`` along ``K``:

1. **load**: the threads copy ``A[bm:+block_m, k0:+block_k]`` into shared memory as
   ``As[k][m]`` and ``B[k0:+block_k, bn:+block_n]`` as ``Bs[k][n]``. Consecutive threads
   take consecutive elements of memory (along K for a row-major A or a linear layer's
   weight, along N for a row-major B), so a warp's loads coalesce; the tiles' rows are
   padded by 4 floats so the stores fall in 32 banks either way. Elements past ``M``,
   ``N`` or ``K`` load as 0: every shape works, primes included.
2. **compute**: for each ``k`` of the step, every thread reads its rows of ``As`` and its
   columns of ``Bs`` into registers and adds their outer product to its accumulators. The
   thread tile is Hidet's composed mapping ``spatial(warps) * spatial(lanes) *
   repeat(thread tile)``: a warp's lanes read 4 and 8 distinct addresses of ``As`` and
   ``Bs`` (broadcasts, no bank conflicts).
3. **store**: each accumulator, through the epilogue, to ``C`` where it lies inside.

Tensor cores (``mma.sync``), ``cp.async`` pipelines and split-K are the next template's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import TensorType, bfloat16, float16, float32, index_type
from taskloom.ir.functor import collect, substitute
from taskloom.ir.index import unravel
from taskloom.ir.mapping import repeat, spatial
from taskloom.ir.compute import Task
from taskloom.schedule.contraction import Contraction, match_contraction
from taskloom.schedule.cuda.rules import _Inline, _parameters
from taskloom.schedule.registry import Candidate, Scheduled
from taskloom.target.cuda import CudaTarget
from taskloom.transforms.names import NameGen

THREADS = 256


@dataclass(frozen=True)
class SimtConfig:
    """A block tile of ``block_m x block_n`` outputs in steps of ``block_k``; the block's
    8 warps laid out ``warps`` over (m, n), each warp's 32 lanes ``lanes``, and each thread
    a ``thread_m x thread_n`` tile."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 8
    warps: tuple[int, int] = (4, 2)
    lanes: tuple[int, int] = (4, 8)

    @property
    def thread_tile(self) -> tuple[int, int]:
        return (self.block_m // (self.warps[0] * self.lanes[0]), self.block_n // (self.warps[1] * self.lanes[1]))

    def mapping(self):
        """The block's threads over its tile, as Hidet writes it."""
        return spatial(*self.warps) * spatial(*self.lanes) * repeat(*self.thread_tile)

    def __str__(self) -> str:
        tm, tn = self.thread_tile
        return f"{self.block_m}x{self.block_n}x{self.block_k}, {tm}x{tn} a thread"


#: The configs on offer: a large tile, and a small one for matmuls of few tiles.
CONFIGS = (SimtConfig(), SimtConfig(32, 32, 8, (4, 2), (4, 8)))


def fill_the_gpu(con: Contraction, num_sms: int, big, small):
    """``big`` (a config with ``block_m`` and ``block_n``) unless its tiles leave some of
    the GPU's SMs without a block; then ``small``."""
    batch, M, N, _ = con.hint  # a symbolic size at its hint
    blocks = -(-M // big.block_m) * -(-N // big.block_n) * batch
    return big if blocks >= num_sms else small


def choose_config(con: Contraction, num_sms: int) -> SimtConfig:
    """The large tile unless it leaves SMs without a block."""
    return fill_the_gpu(con, num_sms, *CONFIGS)


def _valid(config: SimtConfig) -> None:
    tm, tn = config.thread_tile
    assert config.warps[0] * config.warps[1] * 32 == THREADS and config.lanes[0] * config.lanes[1] == 32
    assert tm * config.warps[0] * config.lanes[0] == config.block_m and tn * config.warps[1] * config.lanes[1] == config.block_n
    assert (config.block_m * config.block_k) % THREADS == 0 and (config.block_k * config.block_n) % THREADS == 0


class _Kernel:
    """The phases of one kernel, sharing its names and variables."""

    def __init__(self, con: Contraction, config: SimtConfig, read: Callable[[E.Expr, dict], E.Expr], out: E.Var,
                 names: NameGen):
        _valid(config)
        self.con, self.c, self.read, self.out, self.names = con, config, read, out, names
        v = lambda n: E.Var(names.fresh(n), index_type)  # noqa: E731
        self.tid, self.bm, self.bn, self.bz, self.k0 = v("tid"), v("bm"), v("bn"), v("batch"), v("k0")
        pad = 4  # rows padded: a warp storing 8 values of k for 4 positions hits 32 banks
        buffer = lambda n, r, c: E.Var(names.fresh(n), TensorType(float32, (E.as_expr(r), E.as_expr(c))))  # noqa: E731
        self.As = buffer("As", config.block_k, config.block_m + pad)
        self.Bs = buffer("Bs", config.block_k, config.block_n + pad)
        tm, tn = config.thread_tile
        self.acc = buffer("acc", tm, tn)
        self.a_frag = E.Var(names.fresh("a_frag"), TensorType(float32, (E.as_expr(tm),)))
        self.b_frag = E.Var(names.fresh("b_frag"), TensorType(float32, (E.as_expr(tn),)))

    def body(self) -> S.Stmt:
        c = self.c
        tm, tn = c.thread_tile
        steps = E.as_expr(-(-self.con.K // c.block_k))
        return S.seq([
            S.Let(self.tid, gpu.threadIdx.x),
            S.Let(self.bm, gpu.blockIdx.y * c.block_m), S.Let(self.bn, gpu.blockIdx.x * c.block_n),
            S.Let(self.bz, gpu.blockIdx.z),
            S.Declare(self.As, scope="shared"), S.Declare(self.Bs, scope="shared"),
            S.Declare(self.acc, scope="register"),
            S.Declare(self.a_frag, scope="register"), S.Declare(self.b_frag, scope="register"),
            self._zero(),
            S.Comment(f"steps of {c.block_k} along K: load the tiles, then accumulate their product"),
            S.For(self.k0, steps, S.seq([self._load(), S.Barrier(), self._compute(), S.Barrier()])),
            self._store()])

    def _zero(self) -> S.Stmt:
        i, j = self._vars("i", "j")
        tm, tn = self.c.thread_tile
        zero = S.BufferStore(self.acc, (i, j), E.Constant(0.0, float32))
        return S.For(i, E.as_expr(tm), S.For(j, E.as_expr(tn), zero, "unroll"), "unroll")

    def _vars(self, *names: str) -> list[E.Var]:
        return [E.Var(self.names.fresh(n), index_type) for n in names]

    def _load(self) -> S.Stmt:
        """Both tiles into shared memory, 0 past the edges of M, N and K."""
        c, con = self.c, self.con

        def a(k: E.Expr, m: E.Expr) -> E.Expr:
            inside = E.logical_and(m < con.M, k < con.K)
            return E.select(inside, self.read(con.a, {con.vb: self.bz, con.vm: m, con.vk: k}), E.Constant(0.0, float32))

        def b(k: E.Expr, n: E.Expr) -> E.Expr:
            inside = E.logical_and(k < con.K, n < con.N)
            return E.select(inside, self.read(con.b, {con.vb: self.bz, con.vk: k, con.vn: n}), E.Constant(0.0, float32))
        return S.seq([S.Comment("load: A into As[k][m], B into Bs[k][n], consecutive threads along the axis "
                                "each is contiguous in"),
                      self._tile(self.As, self.bm, c.block_m, _k_contiguous(con.a, con.vk, con.vm), a),
                      self._tile(self.Bs, self.bn, c.block_n, _k_contiguous(con.b, con.vk, con.vn), b)])

    def _tile(self, buf: E.Var, base: E.Expr, width: int, along_k: bool,
              value: "Callable[[E.Expr, E.Expr], E.Expr]") -> S.Stmt:
        """``buf[k][x] = value(k0 + k, base + x)`` for the step's ``block_k x width`` tile.
        Consecutive threads take consecutive ``k`` when the operand is contiguous along K (a
        warp reads 4 rows of 8), else consecutive ``x``; either way a warp's loads coalesce,
        and the rows' padding keeps its stores in distinct banks."""
        c = self.c
        k, x = self._vars("k", "x")
        if along_k:
            lanes = THREADS // c.block_k  # positions along x a pass covers
            mapping, order = repeat(width // lanes, 1) * spatial(lanes, c.block_k), (x, k)
        else:
            lanes = THREADS // width
            mapping, order = repeat(c.block_k // lanes, 1) * spatial(lanes, width), (k, x)
        store = S.BufferStore(buf, (k, x), value(self.k0 * c.block_k + k, base + x))
        return S.ForMapping(order, mapping, self.tid, store)

    def _thread_tile(self, body: "Callable[[E.Expr, E.Expr], S.Stmt]", rows: bool = True,
                     cols: bool = True) -> S.Stmt:
        """``body(i, j)`` for each element ``(i, j)`` of the thread's tile (only its first
        column, or row, where ``cols`` or ``rows`` is False): the thread's place in the
        block is the spatial part of the mapping, its tile the repeat, unrolled so every
        register index is a constant."""
        c = self.c
        tm, tn = c.thread_tile
        R, C, i, j = self._vars("R", "C", "i", "j")
        self._place = (R, C)  # what _row and _col read inside body
        inner = body(i if rows else E.as_expr(0), j if cols else E.as_expr(0))
        if cols:
            inner = S.For(j, E.as_expr(tn), inner, "unroll")
        if rows:
            inner = S.For(i, E.as_expr(tm), inner, "unroll")
        return S.ForMapping((R, C), spatial(*c.warps) * spatial(*c.lanes), self.tid, inner)

    def _row(self, i: E.Expr) -> E.Expr:
        return self._place[0] * self.c.thread_tile[0] + i

    def _col(self, j: E.Expr) -> E.Expr:
        return self._place[1] * self.c.thread_tile[1] + j

    def _compute(self) -> S.Stmt:
        """Each k of the step: the thread's rows and columns into registers, their outer
        product added to its accumulators."""
        (k,) = self._vars("k")
        rows = self._thread_tile(lambda i, j: S.BufferStore(self.a_frag, (i,), E.TensorElement(self.As, (k, self._row(i)))),
                                 cols=False)
        cols = self._thread_tile(lambda i, j: S.BufferStore(self.b_frag, (j,), E.TensorElement(self.Bs, (k, self._col(j)))),
                                 rows=False)
        fma = self._thread_tile(lambda i, j: S.BufferStore(
            self.acc, (i, j), E.TensorElement(self.acc, (i, j))
            + E.TensorElement(self.a_frag, (i,)) * E.TensorElement(self.b_frag, (j,))))
        return S.For(k, E.as_expr(self.c.block_k), S.seq([rows, cols, fma]), "unroll")

    def _store(self) -> S.Stmt:
        """Each accumulator through the epilogue into C, where it lies inside."""
        con = self.con

        def store(i: E.Expr, j: E.Expr) -> S.Stmt:
            m, n = self.bm + self._row(i), self.bn + self._col(j)
            value = self.read(con.epilogue, {con.vb: self.bz, con.vm: m, con.vn: n,
                                             con.acc: E.TensorElement(self.acc, (i, j))})
            index = unravel((self.bz * con.M + m) * con.N + n, con.output.shape)
            return S.If(E.logical_and(m < con.M, n < con.N), S.BufferStore(self.out, tuple(index), value))
        return S.seq([S.Comment("store: the epilogue of each accumulator, inside C only"), self._thread_tile(store)])


def _k_contiguous(operand: E.Expr, vk: E.Var, other: E.Var) -> bool:
    """Whether ``operand`` (a factor of the contraction) reads memory contiguous along K:
    the innermost index of its first read depends on ``vk`` and not on ``other``."""
    for read in collect(operand, E.TensorElement):
        last = E.free_vars(read.indices[-1])  # type: ignore[attr-defined]
        if vk in last or other in last:
            return vk in last and other not in last
    return False


def matmul_kernel(con: Contraction, config: SimtConfig, name: str) -> S.Function:
    """The kernel of ``con`` with ``config``: the task's inputs, then its output."""
    names, params, tensors = _parameters(con.task)
    inline = _Inline(tensors)

    def read(expr: E.Expr, bindings: dict[E.Var, E.Expr]) -> E.Expr:
        return inline.visit(substitute(expr, bindings))
    body = _Kernel(con, config, read, tensors[con.output], names).body()
    doc = f"{con.task.name}: the CUDA matmul template (CUDA cores), {config}"
    fn = S.Function(name, tuple(params), body, attrs=(("doc", doc), ("template", "matmul_cuda"),
                                                       ("config", str(config))))
    grid = (E.cdiv(con.N, config.block_n), E.cdiv(con.M, config.block_m), con.batch)
    return gpu.cuda_kernel(fn, grid, (THREADS,))


#: A contraction with fewer rows or columns than this, summing at most THIN_K products an
#: output, fills a tile too little to pay for it (a depthwise 3x3 convolution: one row, K 9,
#: 2% of a 32 x 128 x 32 tensor-core tile): a thread an output, its products in a loop, does
#: only the work there is.
THIN_SIDE, THIN_K = 16, 64


def thin(con: Contraction) -> bool:
    """Whether ``con`` is left to the rules rather than a matmul template (see THIN_SIDE)."""
    _, M, N, K = con.hint  # a symbolic size at its hint
    return min(M, N) < THIN_SIDE and K <= THIN_K


def matmul_candidate(task: Task, target: CudaTarget, constants: Mapping[int, np.ndarray] | None = None,
                     weights_stream: bool | str = False) -> Candidate | None:
    """The template's offer for a contraction that is not :func:`thin`; its config comes
    from :func:`choose_config`."""
    con = match_contraction(task, (float32, float16, bfloat16))
    # M and the batch may be symbolic (a dynamic graph's rows): the edges are predicated
    if con is None or not isinstance(con.N, int) or not isinstance(con.K, int) or thin(con):
        return None
    return Candidate("matmul_cuda", con,
                     lambda config, name: Scheduled(matmul_kernel(con, config, name), tuple(range(len(task.inputs)))))
