"""A candidate with run-time index checks is timed with a status to report to: its failed
checks (the worker's integer inputs are zeros, so ``ids - 1`` is out of range) write there,
not through a missing argument."""
from __future__ import annotations

from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.target import CpuTarget
from taskloom.tune import measure


def test_a_kernel_whose_checks_fail_is_measured():
    ids, table, out = E.Var("ids", T.int64[64]), E.Var("table", T.float32[8]), E.Var("out", T.float32[64])
    k = E.var("k")
    pos = E.index_check(ids[k] - 1, 8, "embedding(): 'indices'")
    fn = S.Function("pick", (ids, table, out), S.For(k, E.const(64), S.store(out[k], table[pos])))
    (m,) = measure([fn], [((64,), "int64"), ((8,), "float32"), ((64,), "float32")], CpuTarget.host(),
                   repeats=2, min_seconds=0.0, progress=False)
    assert m.ok, m
