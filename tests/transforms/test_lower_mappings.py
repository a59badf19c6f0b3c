"""Lowering of task-mapping loops, checked end to end: a kernel records the tasks each
worker visits, in order, and the record must equal ``worker_tasks`` exactly."""
from __future__ import annotations

import numpy as np
import pytest

import taskloom
from taskloom.ir import (ForMapping, Function, Var, collect, custom, f32, i32, repeat, spatial, store,
                         var)
from taskloom.ir import stmt as S
from taskloom.transforms import lower_mappings


def record_kernel(m, name: str = "record") -> Function:
    """``out[w, c] = flat task id`` for the c-th task of worker w."""
    n = m.num_workers
    d = m.task_shape
    per = len(m.worker_tasks(0))
    out = Var("out", i32[n, per])
    w, c = var("w"), Var("c", i32)
    tvars = tuple(var(f"t{a}") for a in range(len(d)))
    flat = tvars[0]
    for a in range(1, len(d)):
        flat = flat * d[a] + tvars[a]
    body = S.seq([S.Declare(c, taskloom.ir.const(0)),
                  ForMapping(tvars, m, w, S.seq([store(out[w, c], flat), S.Assign(c, c + 1)]))])
    return Function(name, (out,), S.For(w, taskloom.ir.const(n), body, "parallel"))


def expected(m) -> np.ndarray:
    d = m.task_shape
    rows = []
    for w in range(m.num_workers):
        rows.append([int(np.ravel_multi_index(t, d)) for t in m.worker_tasks(w)])
    return np.array(rows, dtype=np.int32)


MAPPINGS = [
    repeat(3, 4),
    repeat(3, 4, ranks=[1, 0]),
    spatial(2, 3),
    spatial(2, 3, ranks=[1, 0]),
    spatial(2, 2) * repeat(2, 3),
    repeat(2, 3) * spatial(2, 2),
    spatial(4, 2) * repeat(2, 2) * spatial(2, 2) * repeat(2, 2),
    spatial(2, 1, ranks=[1, 0]) * repeat(3, 2, ranks=[1, 0]) * spatial(3, 2),
    repeat(2, 2, 2, ranks=[2, 0, 1]) * spatial(2, 1, 3),
    spatial(3) * custom([4], 2, lambda w: [(w,), (w + 2,)]),
]


def test_lowered_loops_visit_exactly_the_mapped_tasks_in_order():
    fns = [record_kernel(m, f"record{k}") for k, m in enumerate(MAPPINGS)]
    mod = taskloom.build(fns, name="mapping_records")
    for k, m in enumerate(MAPPINGS):
        want = expected(m)
        got = np.full_like(want, -1)
        mod[f"record{k}"](got)
        np.testing.assert_array_equal(got, want, err_msg=f"mapping {m!r}")


def test_lowering_leaves_no_mapping_and_names_repeat_loops_after_the_task_vars():
    i, j = var("i"), var("j")
    A = Var("A", f32[4, 8])
    fn = Function("f", (A,), ForMapping((i, j), repeat(4, 8), taskloom.ir.const(0), store(A[i, j], 1.0)))
    low = lower_mappings(fn)
    assert not collect(low, ForMapping)
    loops = collect(low, S.For)
    assert [l.var.name for l in loops] == ["i", "j"]
    assert [l.kind for l in loops] == ["unroll", "unroll"]


def test_symbolic_repeat_extent_becomes_a_serial_loop():
    N = var("N")
    A = Var("A", f32[N])
    i, w = var("i"), var("w")
    m = spatial(2) * repeat(taskloom.ir.cdiv(N, 2))
    body = S.For(w, taskloom.ir.const(2),
                 ForMapping((i,), m, w, S.If(i < N, store(A[i], taskloom.ir.cast(i, f32)))), "parallel")
    fn = Function("iota", (N, A), body)
    loops = collect(lower_mappings(fn), S.For)
    assert [l.kind for l in loops] == ["parallel", "serial"]
    mod = taskloom.build(fn)
    for n in (1, 2, 7, 64):
        a = np.full(n, -1.0, dtype=np.float32)
        mod["iota"](a)  # N is read off the array
        np.testing.assert_array_equal(a, np.arange(n, dtype=np.float32))
