"""Index checks move out of the loops that do not change them, and only those every
iteration runs: one under an if, in a branch of a select, or reading a tensor the loop
writes stays where it is."""
from __future__ import annotations

from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.functor import collect
from taskloom.transforms import hoist_checks

ids, W, out = E.Var("ids", T.int64[8]), E.Var("W", T.float32[40]), E.Var("out", T.float32[32])
i, j = E.var("i"), E.var("j")


def check(index: E.Expr) -> E.IndexCheck:
    return E.index_check(index, 10, "embedding(): 'indices'")


def fn(body: S.Stmt) -> S.Function:
    return S.Function("f", (ids, W, out), body)


def lets(f: S.Function) -> list[S.Let]:
    return collect(f.body, S.Let)  # type: ignore[return-value]


def test_a_rows_check_runs_once_per_row_and_the_tail_reads_it_too():
    row = check(ids[i]) * 4
    inner = S.For(j, E.const(3), S.store(out[i * 4 + j], W[row + j]))
    tail = S.If(i < 7, S.store(out[i * 4 + 3], W[row + 3]))
    f = hoist_checks(fn(S.For(i, E.const(8), S.seq([inner, tail]))))
    (let,) = lets(f)
    assert let.value == check(ids[i]) and len(collect(f.body, E.IndexCheck)) == 1
    outer = f.body
    assert isinstance(outer, S.For) and outer.body.stmts[0] == let  # inside the row loop, before the inner one


def test_checks_that_an_iteration_may_skip_stay():
    guarded = S.For(j, E.const(3), S.If(j < 2, S.store(out[j], W[check(ids[i])])))
    branch = S.For(j, E.const(3), S.store(out[j], E.select(j < 2, W[check(ids[i])], 0.0)))
    for body in (guarded, branch):
        f = hoist_checks(fn(S.For(i, E.const(8), body)))
        assert not lets(f), f


def test_a_check_reading_what_the_loop_writes_stays():
    scratch = E.Var("scratch", T.int64[1])
    body = S.seq([S.store(scratch[0], E.cast(j, T.int64)), S.store(out[j], W[check(scratch[0])])])
    f = hoist_checks(S.Function("f", (ids, W, out, scratch), S.For(j, E.const(3), body)))
    assert not lets(f)
