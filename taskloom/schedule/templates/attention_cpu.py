"""The x86 attention template: ``softmax(score(q kᵀ)) v`` in one kernel, the scores of a
block of queries never leaving L1 (an online softmax over blocks of keys).

It serves the float32 attentions :func:`~taskloom.schedule.attention.match_attention` reads,
with any mask, scale, causal test, prologue (a head split) and epilogue the group fused.
**Queries run in the vector lanes**: a block of ``QV`` vectors of queries (32 on AVX-512)
keeps its queries transposed (``Qt[d, i]``), so every per-query quantity -- a score row's
maximum, its sum, the rescaling of the output -- is a lane-wise vector operation with no
horizontal reduction, and ``k`` and ``v`` are read where they lie, one broadcast element at a
time. Each core takes blocks of queries in turn; per block it

1. **packs** the block's queries transposed (rows past the end repeat the last query, never
   stored), and starts the output ``Ot[e, i]``, each query's running maximum and sum;
2. walks the keys ``BK`` at a time (up to the block's last query when causal), and for each:
   - **scores**: ``JR`` keys x ``QV`` vectors of scores in registers, one FMA per key and
     vector per feature, then ``score()`` (scale, mask, causal test) applied as vectors;
     keys past the end score -inf;
   - **softmax**: each query's new maximum, the correction ``exp(old max - new max)``, the
     scores turned into ``exp(score - max)`` in place and their sum;
   - **values**: ``Ot`` scaled by the correction and added ``ER`` features x ``QV`` vectors
     at a time, one FMA per key, value feature and vector;
3. **stores** each output element divided by its query's sum, through the epilogue.

A query whose every score is masked has sum 0: its output is NaN, or zeros where the
operator says so (the sum taken as at least 1, which every other query's is).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from taskloom.errors import ScheduleError
from taskloom.ir import cdiv, f32, vec
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.arith import simplify_expr
from taskloom.ir.compute import Task
from taskloom.ir.dtypes import float32, index_type
from taskloom.ir.functor import collect, substitute
from taskloom.schedule.attention import Attention, match_attention
from taskloom.schedule.post_fusion import _FlatReads, _flat_var, _param_names
from taskloom.schedule.registry import Candidate, Scheduled
from taskloom.schedule.templates.matmul_cpu import _phase  # (phases are written as that template's are)
from taskloom.schedule.vectorize import vectorize_expr
from taskloom.target.cpu import CpuTarget


@dataclass(frozen=True)
class AttentionConfig:
    """``qv`` vectors of queries a block; ``jr`` keys x ``qv`` vectors of scores and ``er``
    value features x ``qv`` vectors of output in registers; keys ``bk`` a step."""

    qv: int
    jr: int
    er: int
    bk: int

    def __str__(self) -> str:
        return f"qv{self.qv}_jr{self.jr}_er{self.er}_bk{self.bk}"


def choose_config(att: Attention, target: CpuTarget, length: int | None = None) -> AttentionConfig:
    """The block shape for ``att``: two vectors of queries (one when the queries fit in
    one), register tiles that leave room for the operand vectors, and 64 keys a step (the
    block's scores, its queries and its output then take 24 KiB of L1 at 32 queries and
    head size 64), fewer when there are fewer keys. ``length``: the number of queries to
    choose for where ``att.L`` is symbolic (a variant's sample point)."""
    lanes, regs = target.vector_lanes(f32), target.num_vector_registers
    length = att.L if length is None else length
    qv = 1 if isinstance(length, int) and length <= lanes else 2  # (a symbolic length: two)
    tile = 8 if regs >= 32 else 4  # tile x qv accumulators, qv operand vectors and a broadcast
    return AttentionConfig(qv, tile, tile, min(64, cdiv(att.S, tile) * tile) if isinstance(att.S, int) else 64)


@dataclass(frozen=True)
class _Plan:
    """What the kernel is built from: the attention and its config, the vector's lanes, how
    many cores share the blocks of queries, and the attention's expressions over the
    kernel's flat parameters (the causal test left out of ``score``: the kernel applies it)."""

    att: Attention
    config: AttentionConfig
    lanes: int
    P: int
    q: E.Expr
    k: E.Expr
    v: E.Expr
    score: E.Expr
    epilogue: E.Expr
    out: E.Var

    BQ = property(lambda p: p.config.qv * p.lanes)
    NQB = property(lambda p: cdiv(p.att.L, p.BQ))


def _plan(att: Attention, config: AttentionConfig, target: CpuTarget, params: dict, out: E.Var) -> _Plan:
    lanes = target.vector_lanes(f32)
    c = config
    if c.jr * c.qv + c.qv + 1 > target.num_vector_registers or c.er * c.qv + c.qv + 1 > target.num_vector_registers:
        raise ScheduleError(f"attention template: config {c} needs more than the "
                            f"{target.num_vector_registers} vector registers of {target.name}")
    if c.bk % c.jr:
        raise ScheduleError(f"attention template: config {c}: keys a step (bk) must be a multiple of jr")
    flat = _FlatReads(params)
    last = lambda n: n - 1 if isinstance(n, int) else None  # noqa: E731
    bounds = {att.vb: (0, last(att.batch)), att.vi: (0, last(att.L)), att.vj: (0, last(att.S)),
              att.vd: (0, att.D - 1), att.ve: (0, att.Ev - 1), **{v: (1, None) for v in att.task.symbols()}}
    s = lambda e: simplify_expr(flat.visit(e), bounds)  # noqa: E731
    # the causal test is applied by the kernel, block by block; the rest of the score as vectors
    score = att.score.a if att.causal else att.score  # type: ignore[attr-defined]
    items = att.batch * cdiv(att.L, c.qv * lanes)
    cores = min(target.num_cores, items) if isinstance(items, int) else target.num_cores
    return _Plan(att, c, lanes, cores, s(att.q), s(att.k), s(att.v), s(score), s(att.epilogue), out)


def _body(p: _Plan) -> S.Stmt:
    """Each core's walk over its blocks of queries, the phases spliced in."""
    att, c = p.att, p.config
    P, BQ, NQB, BK, D, Ev, S_ = p.P, p.BQ, p.NQB, c.bk, att.D, att.Ev, att.S
    ITEMS = att.batch * NQB

    @_phase
    def blocks():
        for w in parallel(P):
            Qt = local_tensor(f32, [D, BQ])
            St = local_tensor(f32, [BK, BQ])
            Ot = local_tensor(f32, [Ev, BQ])
            run = local_tensor(f32, [3, BQ])  # each query's running maximum, sum, and correction
            for t in range(cdiv(ITEMS - w, P)):
                item = w + t * P  # (blocks dealt in turn: causal blocks differ in work)
                b = item // NQB
                i0 = item % NQB * BQ
                _start(p, Qt, Ot, run, b, i0)
                for kb in range(_steps(p, i0)):
                    j0 = kb * BK
                    jn = min(BK, S_ - j0)
                    _scores(p, Qt, St, b, i0, j0, jn)
                    _softmax(p, St, run, jn)
                    _values(p, St, Ot, run, b, j0, jn)
                _store(p, Ot, run, b, i0)
    return blocks


def _steps(p: _Plan, i0: E.Expr) -> E.Expr:
    """Key blocks a query block walks: all, or when causal those up to its last query."""
    steps = E.as_expr(cdiv(p.att.S, p.config.bk))
    if not p.att.causal:
        return steps
    last = E.minimum(i0 + (p.BQ - 1), p.att.L - 1)
    return E.minimum(steps, last // p.config.bk + 1)


def _start(p: _Plan, Qt: E.Var, Ot: E.Var, run: E.Var, b: E.Expr, i0: E.Expr) -> S.Stmt:
    att, L, BQ, D, Ev, Lq = p.att, p.lanes, p.BQ, p.att.D, p.att.Ev, p.att.L
    q_at = lambda i, d: substitute(p.q, {att.vb: b, att.vi: i, att.vd: d})  # noqa: E731

    @_phase
    def start():
        "the block's queries transposed (rows past the end repeat the last); output, maxima and sums start"
        for d in range(D):
            for i in range(BQ):
                Qt[d, i] = q_at(min(i0 + i, Lq - 1), d)
        for e in range(Ev):
            for i in range(BQ // L):
                vstore(Ot[e, i * L], broadcast(0.0, L))
        for i in range(BQ // L):
            vstore(run[0, i * L], broadcast(-inf, L))
            vstore(run[1, i * L], broadcast(0.0, L))
    return start


def _scores(p: _Plan, Qt: E.Var, St: E.Var, b: E.Expr, i0: E.Expr, j0: E.Expr, jn: E.Expr) -> S.Stmt:
    att, c, L = p.att, p.config, p.lanes
    QV, JR, D, S_ = c.qv, c.jr, att.D, att.S
    k_at = lambda j, d: substitute(p.k, {att.vb: b, att.vj: j, att.vd: d})  # noqa: E731
    fvec = vec(f32, L)

    @_phase
    def scores():
        "the scores: JR keys x QV vectors of queries in registers, an FMA per key, vector and feature"
        for jt in range(cdiv(jn, JR)):
            s_acc = register_tensor(fvec, [JR, QV])
            for r, v in repeat(JR, QV).on(0):
                s_acc[r, v] = broadcast(0.0, L)
            for d in range(D):
                qv = register_tensor(fvec, [QV])
                for v in unroll(QV):
                    qv[v] = vload(Qt[d, v * L], L)
                for r in unroll(JR):
                    kr = broadcast(k_at(min(j0 + jt * JR + r, S_ - 1), d), L)  # keys past the end: the last
                    for v in unroll(QV):
                        s_acc[r, v] = fma(kr, qv[v], s_acc[r, v])
            _score_tile(p, St, s_acc, b, i0, j0, jt * JR)
        if p.att.causal:
            _causal(p, St, i0, j0, jn)
    return scores


def _score_tile(p: _Plan, St: E.Var, acc: E.Var, b: E.Expr, i0: E.Expr, j0: E.Expr, jt: E.Expr) -> S.Stmt:
    """The tile's sums through ``score()`` into ``St``: as vectors along the queries where
    the score vectorizes (a scale, a mask broadcast over the queries), else lane by lane;
    keys past the end are -inf."""
    att, c, L = p.att, p.config, p.lanes
    body: list[S.Stmt] = []
    for r in range(c.jr):
        j = j0 + jt + r
        score = substitute(p.score, {att.vb: b, att.vj: j})
        for v in range(c.qv):
            at, start = E.TensorElement(acc, (E.as_expr(r), E.as_expr(v))), i0 + v * L
            row = (jt + r, E.as_expr(v * L))
            sv = E.Var(f"score{r}_{v}", at.type)
            # lanes past the last query load nothing: their scores are never stored
            count = None if _divides(p.BQ, att.L) else E.maximum(E.minimum(att.L - start, L), 0)
            vector = vectorize_expr(score, att.vi, start, L, count, vectors={att.acc: sv})
            if vector is None:
                body.append(_score_lanes(p, St, at, row, score, start, j))
                continue
            if not _divides(c.jr, att.S):
                vector = E.Select(j < att.S, vector, E.Broadcast(E.const(-math.inf, float32), L))
            body.append(S.seq([S.Let(sv, at), S.VectorStore(St, row, vector)]))
    return S.seq(body)


def _score_lanes(p: _Plan, St: E.Var, at: E.Expr, row: tuple, score: E.Expr, start: E.Expr, j: E.Expr) -> S.Stmt:
    """One vector of scores through ``score()`` lane by lane (a mask that varies along the
    queries is gathered); lanes past the last query read its mask; keys past the end are -inf."""
    att, L = p.att, p.lanes
    lane = E.Var("lane", index_type)
    jrow, col = row
    value = substitute(score, {att.vi: E.minimum(start + lane, att.L - 1),
                               att.acc: E.TensorElement(St, (jrow, col + lane))})
    if not _divides(p.config.jr, att.S):
        value = E.Select(j < att.S, value, E.const(-math.inf, float32))
    return S.seq([S.Comment("the score lane by lane: it does not vectorize along the queries"),
                  S.VectorStore(St, row, at), S.For(lane, E.as_expr(L), S.BufferStore(St, (jrow, col + lane), value))])


def _causal(p: _Plan, St: E.Var, i0: E.Expr, j0: E.Expr, jn: E.Expr) -> S.Stmt:
    BQ = p.BQ

    @_phase
    def causal():
        "causal: a key after the query scores -inf (only blocks that cross the diagonal)"
        if j0 + jn - 1 > i0:
            for j in range(jn):
                for i in range(BQ):
                    if j0 + j > i0 + i:
                        St[j, i] = -inf
    return causal


def _softmax(p: _Plan, St: E.Var, run: E.Var, jn: E.Expr) -> S.Stmt:
    QV, L = p.config.qv, p.lanes

    @_phase
    def softmax():
        "online softmax, lane-wise: new maxima, the correction of the old sums, exp(score - max) and its sum"
        for v in unroll(QV):
            old = vload(run[0, v * L], L)
            top = old
            for j in range(jn):
                top = max(top, vload(St[j, v * L], L))
            # a query whose scores so far are all -inf subtracts 0, so that exp gives 0, not NaN
            base = select(top == broadcast(-inf, L), broadcast(0.0, L), top)
            corr = exp(old - base)
            total = broadcast(0.0, L)
            for j in range(jn):
                e = exp(vload(St[j, v * L], L) - base)
                vstore(St[j, v * L], e)
                total = total + e
            vstore(run[0, v * L], top)
            vstore(run[1, v * L], vload(run[1, v * L], L) * corr + total)
            vstore(run[2, v * L], corr)
    return softmax


def _values(p: _Plan, St: E.Var, Ot: E.Var, run: E.Var, b: E.Expr, j0: E.Expr, jn: E.Expr) -> S.Stmt:
    """``Ot`` times the correction, plus the block's probabilities times ``v``: whole tiles
    of ``ER`` features, then the features left over."""
    er, Ev = p.config.er, p.att.Ev
    tiles = [_value_tile(p, St, Ot, run, b, j0, jn, E.as_expr(0), er, Ev // er)] if Ev >= er else []
    if Ev % er:
        tail = _value_tile(p, St, Ot, run, b, j0, jn, E.as_expr(Ev - Ev % er), Ev % er, 1)
        # (its one tile's loop goes away: its registers are renamed beside the full tiles')
        tiles.append(substitute(tail, {d.var: E.Var(d.var.name + "_tail", d.var.type) for d in collect(tail, S.Declare)}))
    return S.seq(tiles)


def _value_tile(p: _Plan, St: E.Var, Ot: E.Var, run: E.Var, b: E.Expr, j0: E.Expr, jn: E.Expr,
                e0: E.Expr, ER: int, count: int) -> S.Stmt:
    att, QV, L = p.att, p.config.qv, p.lanes
    v_at = lambda j, e: substitute(p.v, {att.vb: b, att.vj: j, att.ve: e})  # noqa: E731
    fvec = vec(f32, L)

    @_phase
    def values():
        "the values: ER features x QV vectors of the output in registers, an FMA per key, feature and vector"
        for et in range(count):
            o_acc = register_tensor(fvec, [ER, QV])
            for r, v in repeat(ER, QV).on(0):
                o_acc[r, v] = vload(Ot[e0 + et * ER + r, v * L], L) * vload(run[2, v * L], L)
            for j in range(jn):
                pv = register_tensor(fvec, [QV])
                for v in unroll(QV):
                    pv[v] = vload(St[j, v * L], L)
                for r in unroll(ER):
                    vr = broadcast(v_at(j0 + j, e0 + et * ER + r), L)
                    for v in unroll(QV):
                        o_acc[r, v] = fma(vr, pv[v], o_acc[r, v])
            for r, v in repeat(ER, QV).on(0):
                vstore(Ot[e0 + et * ER + r, v * L], o_acc[r, v])
    return values


def _store(p: _Plan, Ot: E.Var, run: E.Var, b: E.Expr, i0: E.Expr) -> S.Stmt:
    att, BQ, Ev = p.att, p.BQ, p.att.Ev
    i, e = E.Var("i", index_type), E.Var("e", index_type)
    total = E.TensorElement(run, (E.as_expr(1), i))
    o = E.TensorElement(Ot, (e, i)) / (E.maximum(total, 1.0) if att.masked_zero else total)
    value = substitute(p.epilogue, {att.vb: b, att.vi: i0 + i, att.ve: e, att.o: o})
    offset = simplify_expr((b * att.L + i0 + i) * Ev + e)
    store = S.BufferStore(p.out, (offset,), value)
    rows = E.as_expr(BQ) if _divides(BQ, att.L) else E.minimum(BQ, att.L - i0)
    return S.seq([S.Comment("store: each output element over its query's sum, through the epilogue"),
                  S.For(i, rows, S.For(e, E.as_expr(Ev), store))])


def _divides(block: int, n: Any) -> bool:
    """Whether blocks of ``block`` tile ``n`` exactly (never said of a symbolic size)."""
    return isinstance(n, int) and n % block == 0


def serves(att: Attention) -> bool:
    """Whether the template serves ``att``: ``q``, ``k`` and ``v`` read float32 tensors only."""
    return all(r.type == float32 for f in (att.q, att.k, att.v) for r in collect(f, E.TensorElement))  # type: ignore[attr-defined]


def attention_kernel(att: Attention, config: AttentionConfig, target: CpuTarget, name: str) -> S.Function:
    """The kernel of ``att`` for ``target``: the task's inputs, then its output, each flat."""
    return _kernel(att, config, target).renamed(name)


@functools.lru_cache(maxsize=256)  # (a deep model asks once per layer; attentions compare by structure)
def _kernel(att: Attention, config: AttentionConfig, target: CpuTarget, name: str = "attention") -> S.Function:
    if not serves(att):
        raise ScheduleError(f"{att.task.name}: the CPU attention template takes float32 q, k and v")
    # built over stand-ins first, so the tensors' names can keep clear of the kernel's own
    tensors = (*att.task.inputs, att.output)
    stand_in = [_flat_var(f"tl_param{k}", t.type) for k, t in enumerate(tensors)]  # type: ignore[arg-type]
    p = _plan(att, config, target, dict(zip(att.task.inputs, stand_in)), stand_in[-1])
    body = _body(p)
    names = _param_names(att, {v.name for v in collect(body, E.Var)})  # type: ignore[attr-defined]
    params = [_flat_var(n, t.type) for t, n in zip(tensors, names)]  # type: ignore[arg-type]
    doc = (f"{att.task.name}: the CPU attention template (online softmax, queries in the vector lanes), "
           f"{p.BQ} queries a block, keys {config.bk} a step, config {config}")
    return S.Function(name, (*att.task.symbols(), *params), substitute(body, dict(zip(stand_in, params))),
                      attrs=(("doc", doc), ("template", "attention_cpu"), ("config", str(config))))


def attention_candidate(task: Task, target: CpuTarget, constants: Mapping[int, np.ndarray] | None = None,
                        weights_stream: bool | str = False) -> Candidate | None:
    """The template's offer for a float32 attention; the config is :func:`choose_config`'s."""
    att = match_attention(task)
    if att is None or not serves(att):
        return None
    return Candidate("attention_cpu", att, lambda config, name: Scheduled(
        attention_kernel(att, config, target, name), tuple(range(len(task.inputs)))))
