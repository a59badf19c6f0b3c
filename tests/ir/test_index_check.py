"""The IR's run-time index check: its type, text, range, simplification, serialization and
the C it becomes (a call of the prelude's tl_index reporting to the function's status)."""
from __future__ import annotations

import numpy as np
import pytest

from taskloom.backend.codegen_x86 import codegen_x86
from taskloom.errors import IRError
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.arith import BoundAnalyzer, simplify_expr
from taskloom.ir.printer import astext
from taskloom.target import get_target
from taskloom.transforms import lower

n = E.var("n")
ids = E.Var("ids", T.int64[4])
small = E.Var("small", T.uint8[4])


def test_a_check_has_the_extents_type_and_needs_integers():
    c = E.index_check(ids[0], n, "embedding(): 'indices'")
    assert c.type == T.int32 and not c.wrap
    assert E.index_check(ids[0], E.const(2 ** 33), "x").type == T.int64  # a size past int32
    with pytest.raises(IRError, match="not an integer"):
        E.index_check(E.const(1.5), n, "x")
    assert astext(E.index_check(ids[1], 5, "gather(): 'index'", wrap=True)) == \
        "index_check(ids[1], 5, \"gather(): 'index'\", wrap=True)"


def test_its_range_is_the_dimension_whatever_the_data():
    assert BoundAnalyzer().bound(E.index_check(ids[0], 10, "x")) == (0, 9)
    assert BoundAnalyzer().bound(E.index_check(ids[0], n, "x")) == (0, None)


def test_a_check_that_cannot_fail_is_dropped():
    assert simplify_expr(E.index_check(E.const(3), 5, "x")) == E.const(3)
    assert simplify_expr(E.index_check(small[0], 256, "x")) == E.cast(small[0], T.int32)  # uint8 < 256
    kept = [E.index_check(E.const(7), 5, "x"), E.index_check(small[0], 255, "x"), E.index_check(ids[0], 5, "x")]
    assert [simplify_expr(c) for c in kept] == kept


def test_graphs_save_and_load_their_checks(tmp_path):
    from taskloom import ops
    from taskloom.graph import Graph, input
    from taskloom.graph.serialize import load_graph, save_graph
    i = input((3,), dtype="int64", name="i")
    g = Graph([i], [ops.embedding(i, np.ones((5, 2), np.float32), wrap=True)])
    save_graph(g, tmp_path / "g.tlg")
    assert load_graph(tmp_path / "g.tlg").nodes[0].task == g.nodes[0].task


def test_c_calls_the_prelude_with_the_status_and_a_comment():
    out = E.Var("out", T.float32[4])
    table = E.Var("table", T.float32[5])
    k = E.var("k")
    pos = E.index_check(ids[k], 5, "embedding(): 'indices'", wrap=True)
    fn = S.Function("pick", (ids, table, out), S.For(k, E.const(4), S.store(out[k], table[pos])))
    src = codegen_x86(S.Module((lower(fn),)), get_target("cpu -isa=avx2"))
    assert "tl_status* __restrict__ tl_st) {" in src
    assert "tl_index_wrap(ids[k], 5, tl_st, 1 /* embedding(): 'indices' */)" in src
    assert "const char* const taskloom_checks[] = {\n  \"embedding(): 'indices'\",\n};" in src
