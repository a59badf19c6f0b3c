"""The CUDA attention template: ``softmax(score(q kᵀ)) v`` in one kernel on tensor cores,
the scores never leaving registers (an online softmax over blocks of keys).

It serves the tasks :func:`~taskloom.schedule.attention.match_attention` reads whose ``q``,
``k`` and ``v`` are 16-bit floats (float16 or bfloat16, all the same) with head sizes that
are multiples of 16 up to 128, with any mask, scale, causal test and epilogue the group
fused. A block of four warps takes 64 queries of one batch element (``blockIdx.y``), each
warp 16 of them, and walks the keys 64 at a time:

1. **load**: the block's queries once, then each block of keys and values, into swizzled
   shared tiles (by ``cp.async`` where a factor is a plain aligned read, else computed by
   the threads); with room for two key blocks, the next is requested before the current
   one is used.
2. **scores**: each warp's 16 x 64 scores by ``mma.sync``, its query fragments loaded
   once, the keys' by ``ldmatrix`` (K's rows are the B operand's columns), then
   ``score()`` applied element by element (keys past the end score -inf).
3. **online softmax**: each lane holds two rows' values; the rows' maxima meet across the
   four lanes that share a row by two shuffles; the running output and sum are rescaled by
   ``exp(old max - new max)`` and the scores become ``exp(score - max)``.
4. **values**: the probabilities, rounded to 16 bits, are already the A fragments of the
   next product (an m16n8 accumulator pair is an m16k16 A fragment), so ``P V`` is
   ``mma.sync`` with V's fragments by ``ldmatrix.trans``.
5. **store**: each row's sum meets across its four lanes; each output element is divided
   by it and stored through the epilogue, for the queries that exist.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.compute import Task
from taskloom.ir.dtypes import DataType, TensorType, float32, index_type
from taskloom.ir.functor import substitute
from taskloom.ir.index import unravel
from taskloom.schedule.attention import Attention, half_type, match_attention
from taskloom.schedule.cuda.matmul_mma import _Tile, copies_rows, pair_store
from taskloom.schedule.cuda.rules import _Inline, _parameters
from taskloom.schedule.registry import Candidate, Scheduled
from taskloom.target.cuda import CudaTarget
from taskloom.transforms.names import NameGen

WARPS = 4
THREADS = 32 * WARPS
BLOCK_Q = 16 * WARPS  # queries a block: 16 a warp
BLOCK_K = 64  # keys a step
MAX_HEAD = 128
STATIC_SHARED = 48 * 1024
LOG2E = math.log2(math.e)


def stages_for(att: Attention) -> int:
    """Two key blocks in flight where both fit the static shared memory with the queries."""
    tile = lambda rows, cols: rows * cols * 2  # noqa: E731
    two = tile(BLOCK_Q, att.D) + 2 * (tile(BLOCK_K, att.D) + tile(BLOCK_K, att.Ev))
    return 2 if two <= STATIC_SHARED else 1


class _Kernel:
    """The phases of one attention kernel, sharing its names and variables."""

    def __init__(self, att: Attention, dtype: DataType, read: Callable[[E.Expr, dict], E.Expr], out: E.Var,
                 names: NameGen):
        self.att, self.dtype, self.read, self.out, self.names = att, dtype, read, out, names
        self.stages = stages_for(att)
        v = lambda n: E.Var(names.fresh(n), index_type)  # noqa: E731
        self.tid, self.warp, self.lane, self.q0, self.bz, self.kb = v("tid"), v("warp"), v("lane"), v("q0"), \
            v("batch"), v("kb")
        shared = lambda n, slots, rows, cols: _Tile(E.Var(names.fresh(n), TensorType(dtype, tuple(  # noqa: E731
            E.as_expr(x) for x in (slots, rows, cols)))), rows, cols)
        self.q_tile = shared("q_tile", 1, BLOCK_Q, att.D)
        self.k_tile = shared("k_tile", self.stages, BLOCK_K, att.D)
        self.v_tile = shared("v_tile", self.stages, BLOCK_K, att.Ev)
        reg = lambda n, t, *shape: E.Var(names.fresh(n), TensorType(t, tuple(E.as_expr(x) for x in shape)))  # noqa: E731
        self.q_frag = reg("q_frag", dtype, att.D // 16, 8)
        self.kv_frag = reg("kv_frag", dtype, 2, 4)  # two n8 tiles of K or V
        self.p_frag = reg("p_frag", dtype, BLOCK_K // 16, 8)
        self.s_acc = reg("s_acc", float32, BLOCK_K // 8, 4)
        self.o_acc = reg("o_acc", float32, att.Ev // 8, 4)
        self.row_max, self.row_sum = reg("row_max", float32, 2), reg("row_sum", float32, 2)
        f = lambda n: E.Var(names.fresh(n), float32)  # noqa: E731
        self.m_new, self.m_use, self.corr, self.other = f("m_new"), f("m_use"), f("corr"), f("other")

    def _vars(self, *names: str) -> list[E.Var]:
        return [E.Var(self.names.fresh(n), index_type) for n in names]

    def body(self) -> S.Stmt:
        att = self.att
        steps: E.Expr = E.as_expr(E.cdiv(att.S, BLOCK_K))
        if att.causal:  # the key blocks past the block's last query hold only masked scores
            steps = E.minimum(steps, (self.q0 + (BLOCK_Q + BLOCK_K - 1)) // BLOCK_K)
        declares = [S.Declare(t.var, scope="shared") for t in (self.q_tile, self.k_tile, self.v_tile)]
        declares += [S.Declare(b, scope="register") for b in (self.q_frag, self.kv_frag, self.p_frag, self.s_acc,
                                                              self.o_acc, self.row_max, self.row_sum)]
        init = S.seq([self._fill(self.o_acc, 0.0), self._fill(self.row_max, -math.inf), self._fill(self.row_sum, 0.0)])
        return S.seq([
            S.Let(self.tid, gpu.threadIdx.x), S.Let(self.warp, self.tid // 32), S.Let(self.lane, self.tid % 32),
            S.Let(self.q0, gpu.blockIdx.x * BLOCK_Q), S.Let(self.bz, gpu.blockIdx.y), *declares, init,
            S.Comment("the block's queries, then its first block of keys and values"),
            self._load(self.q_tile, E.as_expr(0), att.q, self.q0, att.vi, att.L, att.vd),
            *([self._load_keys(E.as_expr(0), E.as_expr(0)), gpu.CpAsyncCommit()] if self.stages == 2 else
              [gpu.CpAsyncCommit()]),
            gpu.CpAsyncWait(0), S.Barrier(), self._query_fragments(),
            S.Comment(f"the keys {BLOCK_K} at a time: scores, online softmax, the values' product"
                      + (" (up to the block's last query: the attention is causal)" if att.causal else "")),
            S.For(self.kb, steps, self._step(steps)),
            self._store()])

    def _fill(self, buf: E.Var, value: float) -> S.Stmt:
        idx = self._vars(*("x" for _ in buf.type.shape))  # type: ignore[union-attr]
        body: S.Stmt = S.BufferStore(buf, tuple(idx), E.Constant(value, float32))
        for i, d in reversed(list(zip(idx, buf.type.shape))):  # type: ignore[union-attr]
            body = S.For(i, d, body, "unroll")
        return body

    # -- load ----------------------------------------------------------------------------

    def _load(self, tile: _Tile, slot: E.Expr, factor: E.Expr, row0: E.Expr, row_var: E.Var, rows: int,
              col_var: E.Var) -> S.Stmt:
        """``factor`` at rows ``row0 + r`` (``r`` < the tile's rows, 0 past ``rows``) and every
        column into ``slot`` of ``tile``: 16-byte chunks by cp.async, or element by element."""
        att = self.att
        copy = copies_rows(factor, att.vb, att.batch, row_var, col_var, tile.cols)
        r, c = self._vars("r", "c")
        inside = row0 + r < rows

        def body(first: E.Expr) -> S.Stmt:
            at = lambda row: {att.vb: self.bz, row_var: row, col_var: first}  # noqa: E731
            if copy:
                value = self.read(factor, at(E.select(inside, row0 + r, 0)))
                src = value.value if isinstance(value, E.Cast) else value
                return gpu.CpAsync(tile.at(slot, r, first), src, 16, E.select(inside, 16, 0))
            value = E.select(inside, self.read(factor, at(row0 + r)), E.Constant(0.0, float32))
            return S.BufferStore(tile.var, tile.at(slot, r, first).indices, E.cast(value, self.dtype))
        return tile.fill(r, c, self.tid, THREADS, 16 if copy else 0, body)

    def _load_keys(self, slot: E.Expr, block: E.Expr) -> S.Stmt:
        att, j0 = self.att, block * BLOCK_K
        return S.seq([self._load(self.k_tile, slot, att.k, j0, att.vj, att.S, att.vd),
                      self._load(self.v_tile, slot, att.v, j0, att.vj, att.S, att.ve)])

    # -- fragments -----------------------------------------------------------------------

    def _query_fragments(self) -> S.Stmt:
        (kk,) = self._vars("kk")
        load = gpu.Ldmatrix(E.TensorElement(self.q_frag, (kk, E.as_expr(0))),
                            self.q_tile.fragment_row(E.as_expr(0), self.lane, self.warp * 16, kk * 16, True, False), 4)
        return S.seq([S.Comment("each warp's 16 queries as A fragments, kept in registers"),
                      S.For(kk, E.as_expr(self.att.D // 16), load, "unroll")])

    # -- one block of keys ---------------------------------------------------------------

    def _step(self, steps: E.Expr) -> S.Stmt:
        slot = self.kb % self.stages if self.stages == 2 else E.as_expr(0)
        if self.stages == 2:
            nxt = self.kb + 1
            wait = S.seq([gpu.CpAsyncWait(0), S.Barrier(),
                          S.If(nxt < steps, self._load_keys(nxt % 2, nxt)), gpu.CpAsyncCommit()])
            after: S.Stmt = S.seq([])
        else:
            wait = S.seq([self._load_keys(E.as_expr(0), self.kb), gpu.CpAsyncCommit(), gpu.CpAsyncWait(0),
                          S.Barrier()])
            after = S.Barrier()
        return S.seq([wait, self._scores(slot), self._softmax(), self._values(slot), after])

    def _scores(self, slot: E.Expr) -> S.Stmt:
        """The warp's 16 x 64 scores: q kᵀ by mma, then ``score()`` per element."""
        att = self.att
        n, kk, e = self._vars("n", "kk", "e")
        zero = E.as_expr(0)
        clear = self._fill(self.s_acc, 0.0)
        pair = S.seq([gpu.Ldmatrix(E.TensorElement(self.kv_frag, (zero, zero)),
                                   self.k_tile.fragment_row(slot, self.lane, n * 16, kk * 16, False, False), 4),
                      *[gpu.MmaSync(E.TensorElement(self.s_acc, (n * 2 + h, zero)),
                                    E.TensorElement(self.q_frag, (kk, zero)),
                                    E.TensorElement(self.kv_frag, (E.as_expr(h), zero)),
                                    E.TensorElement(self.s_acc, (n * 2 + h, zero))) for h in range(2)]])
        product = S.For(kk, E.as_expr(att.D // 16), S.For(n, E.as_expr(BLOCK_K // 16), pair, "unroll"), "unroll")
        i, j = self._query(e), self.kb * BLOCK_K + n * 8 + (self.lane % 4) * 2 + e % 2
        acc = E.TensorElement(self.s_acc, (n, e))
        # rows past L and keys past S read the mask at the last ones (their scores are not used)
        value = self.read(att.score, {att.vb: self.bz, att.vi: _clamp(i, att.L, BLOCK_Q),
                                      att.vj: _clamp(j, att.S, BLOCK_K), att.acc: acc})
        if not isinstance(att.S, int) or att.S % BLOCK_K:  # a ragged last block of keys, or maybe one
            value = E.select(j < att.S, value, E.Constant(-math.inf, float32))
        scored = S.For(n, E.as_expr(BLOCK_K // 8), S.For(e, E.as_expr(4), S.BufferStore(self.s_acc, (n, e), value),
                                                          "unroll"), "unroll")
        return S.seq([S.Comment("scores: q kᵀ on tensor cores, then the scale, the mask, the causal test"),
                      clear, product, scored])

    def _query(self, e: E.Expr) -> E.Expr:
        """The query of accumulator element ``e`` of this lane: rows ``lane // 4`` and + 8."""
        return self.q0 + self.warp * 16 + self.lane // 4 + (e // 2) * 8

    def _softmax(self) -> S.Stmt:
        """Each of the lane's two rows: the new maximum (over the quad by shuffles), the
        running sum and output rescaled, the scores made probabilities. ``exp(x)`` is
        ``exp2(x log2 e)``, one multiply-add and one hardware exp2 an element."""
        h, n, x = self._vars("h", "n", "x")
        m = self.m_new
        s = lambda n_, x_: E.TensorElement(self.s_acc, (n_, h * 2 + x_))  # noqa: E731
        old = E.TensorElement(self.row_max, (h,))
        # a NaN score leaves the max alone; its probability is NaN, and so is the row's output
        local = [S.Assign(m, old), S.For(n, E.as_expr(BLOCK_K // 8), S.For(x, E.as_expr(2), S.Assign(
            m, E.select(s(n, x) > m, s(n, x), m)), "unroll"), "unroll")]
        for d in (1, 2):  # every lane shuffles, then chooses: a shuffle never sits in a branch
            local += [S.Assign(self.other, gpu.shuffle("shfl_xor", m, d)),
                      S.Assign(m, E.select(self.other > m, self.other, m))]
        # a row masked so far has max -inf: its probabilities are 0 and nothing is rescaled
        minus_inf = E.Constant(-math.inf, float32)
        local += [S.Assign(self.m_use, E.select(E.eq(m, minus_inf), E.Constant(0.0, float32), m * LOG2E)),
                  S.Assign(self.corr, E.call("exp2", old * LOG2E - self.m_use)),
                  S.BufferStore(self.row_max, (h,), m)]
        total = E.TensorElement(self.row_sum, (h,))
        local += [S.BufferStore(self.row_sum, (h,), total * self.corr),
                  S.For(n, E.as_expr(BLOCK_K // 8), S.For(x, E.as_expr(2), S.seq([
                      S.BufferStore(self.s_acc, (n, h * 2 + x), E.call("exp2", s(n, x) * LOG2E - self.m_use)),
                      S.BufferStore(self.row_sum, (h,), total + s(n, x))]), "unroll"), "unroll"),
                  S.For(n, E.as_expr(self.att.Ev // 8), S.For(x, E.as_expr(2), S.BufferStore(
                      self.o_acc, (n, h * 2 + x), E.TensorElement(self.o_acc, (n, h * 2 + x)) * self.corr),
                      "unroll"), "unroll")]
        decl = [S.Declare(v, E.Constant(0.0, float32)) for v in (self.m_new, self.m_use, self.corr, self.other)]
        return S.seq([S.Comment("online softmax: each row's max over its quad, the running sums rescaled"),
                      *decl, S.For(h, E.as_expr(2), S.seq(local), "unroll")])

    def _values(self, slot: E.Expr) -> S.Stmt:
        """The probabilities as A fragments (no data movement between lanes), times V."""
        att = self.att
        kk, a, n = self._vars("kk", "a", "n")
        zero = E.as_expr(0)
        to_a = S.For(kk, E.as_expr(BLOCK_K // 16), S.For(a, E.as_expr(8), S.BufferStore(
            self.p_frag, (kk, a), E.cast(E.TensorElement(self.s_acc, (kk * 2 + a // 4, a % 4)), self.dtype)),
            "unroll"), "unroll")
        pair = S.seq([gpu.Ldmatrix(E.TensorElement(self.kv_frag, (zero, zero)),
                                   self.v_tile.fragment_row(slot, self.lane, n * 16, kk * 16, False, True), 4, True),
                      *[gpu.MmaSync(E.TensorElement(self.o_acc, (n * 2 + h, zero)),
                                    E.TensorElement(self.p_frag, (kk, zero)),
                                    E.TensorElement(self.kv_frag, (E.as_expr(h), zero)),
                                    E.TensorElement(self.o_acc, (n * 2 + h, zero))) for h in range(2)]])
        product = S.For(kk, E.as_expr(BLOCK_K // 16), S.For(n, E.as_expr(att.Ev // 16), pair, "unroll"), "unroll")
        return S.seq([S.Comment("the values: P (as A fragments) times V on tensor cores"), to_a, product])

    # -- store ---------------------------------------------------------------------------

    def _store(self) -> S.Stmt:
        att = self.att
        h, n, e, half = self._vars("h", "n", "e", "half")
        total = E.TensorElement(self.row_sum, (h,))
        sums = S.For(h, E.as_expr(2), S.seq([S.BufferStore(self.row_sum, (h,), total + gpu.shuffle("shfl_xor", total, d))
                                             for d in (1, 2)]), "unroll")
        # the lane's two adjacent columns of a row leave in one store (head sizes are even)
        i, col = self._query(half * 2), n * 8 + (self.lane % 4) * 2
        row_total = E.TensorElement(self.row_sum, (half,))
        o = E.TensorElement(self.o_acc, (n, half * 2 + e)) / (E.maximum(row_total, 1.0) if att.masked_zero else row_total)
        value = self.read(att.epilogue, {att.vb: self.bz, att.vi: i, att.ve: col + e, att.o: o})
        index = unravel((self.bz * att.L + i) * att.Ev + col, att.output.shape)
        store = S.If(i < att.L, pair_store(E.TensorElement(self.out, tuple(index)), e, value, self.names))
        return S.seq([S.Comment("store: each row's sum over its quad; the output divided by it, for real queries"),
                      sums, S.For(n, E.as_expr(att.Ev // 8), S.For(half, E.as_expr(2), store, "unroll"), "unroll")])


def _clamp(i: E.Expr, extent: int, block: int) -> E.Expr:
    """``min(i, extent - 1)``, or ``i`` where blocks of ``block`` divide ``extent``."""
    return i if extent % block == 0 else E.select(i < extent, i, extent - 1)


def attention_kernel(att: Attention, name: str) -> S.Function:
    """The kernel of ``att`` (16-bit q, k, v): the task's inputs, then its output."""
    dtype = half_type(att)
    if dtype is None or not _serves(att):
        raise ValueError(f"{att.task.name}: the attention template needs 16-bit q, k, v and head sizes "
                         f"that are multiples of 16 up to {MAX_HEAD}")
    names, params, tensors = _parameters(att.task)
    inline = _Inline(tensors)

    def read(expr: E.Expr, bindings: dict[E.Var, E.Expr]) -> E.Expr:
        return inline.visit(substitute(expr, bindings))
    kernel = _Kernel(att, dtype, read, tensors[att.output], names)
    doc = (f"{att.task.name}: the CUDA attention template (tensor cores, online softmax), {BLOCK_Q} queries a "
           f"block, keys {BLOCK_K} a step, {kernel.stages} key block(s) in shared memory")
    fn = S.Function(name, tuple(params), kernel.body(), attrs=(("doc", doc), ("template", "attention_cuda")))
    return gpu.cuda_kernel(fn, (E.cdiv(att.L, BLOCK_Q), att.batch), (THREADS,))


def _serves(att: Attention) -> bool:
    return all(x % 16 == 0 and x <= MAX_HEAD for x in (att.D, att.Ev))


def attention_candidate(task: Task, target: CudaTarget, constants: Mapping[int, np.ndarray] | None = None,
                        weights_stream: bool | str = False) -> Candidate | None:
    """The template's offer for an attention of 16-bit q, k, v with head sizes it serves
    (its batch and lengths may be symbols, which the kernel takes as sizes)."""
    att = match_attention(task)
    if att is None or half_type(att) is None or not _serves(att):
        return None
    return Candidate("attention_cuda", att,
                     lambda config, name: Scheduled(attention_kernel(att, name), tuple(range(len(task.inputs)))))
