"""Statements, functions and modules: equality, validation, builders, visitor and rewriter."""
from __future__ import annotations

import pytest

from taskloom.errors import IRError
from taskloom.ir import (Assign, Barrier, Binary, BufferStore, Comment, Constant, Declare, Evaluate,
                         For, ForMapping, Function, If, Let, Module, Rewriter, SeqStmt, Var, VectorStore,
                         Visitor, astext, boolean, call, collect, const, f16, f32, f32x8, i32, i64,
                         repeat, seq, spatial, store, substitute, var, vload, vstore)
from taskloom.ir.stmt import pointer_param, tensor_param

M, N = var("M"), var("N")
i, j, w = var("i"), var("j"), var("w")
x = var("x", f32)


def make_function():
    """A small kernel built from scratch each call, so equal functions are separate objects."""
    M, N = var("M"), var("N")
    A, B = var("A", f32[M, N]), var("B", f32[M, N])
    i, j, t = var("i"), var("j"), var("t", f32)
    body = For(i, M, For(j, N, seq([
        Let(t, A[i, j] * 2.0),
        If(t < 0.0, store(B[i, j], 0.0), store(B[i, j], t)),
    ])), "parallel")
    return Function("relu2", (M, N, A, B), body, "cpu_kernel", (("block", 4),))


# ----------------------------------------------------------------------------- equality

def test_equal_functions_built_separately_are_equal_and_hash_equal():
    f, g = make_function(), make_function()
    assert f is not g
    assert f == g and hash(f) == hash(g)
    assert f.body == g.body and hash(f.body) == hash(g.body)
    assert len({f, g}) == 1


def test_functions_differing_anywhere_are_not_equal():
    f = make_function()
    assert f != Function("relu3", f.params, f.body, f.kind, f.attrs)
    assert f != Function(f.name, f.params, f.body, "host", f.attrs)
    assert f != Function(f.name, f.params, f.body, f.kind, (("block", 8),))
    assert f != Function(f.name, f.params[:2] + (f.params[3], f.params[2]), f.body, f.kind, f.attrs)
    serial = f.body.__class__(f.body.var, f.body.extent, f.body.body, "serial")
    assert f != f.with_body(serial)
    assert f == f.with_body(f.body)


def test_statements_differing_in_a_field_are_not_equal():
    A = var("A", f32[4])
    assert For(i, const(4), Evaluate(x)) != For(i, const(8), Evaluate(x))
    assert For(i, const(4), Evaluate(x)) != For(j, const(4), Evaluate(x))
    assert For(i, const(4), Evaluate(x), "unroll") != For(i, const(4), Evaluate(x), "vectorize")
    assert Declare(var("b", f32[4]), None, "shared") != Declare(var("b", f32[4]), None, "register")
    assert Let(x, const(1.0)) != Assign(x, const(1.0))
    assert store(A[0], 1.0) != store(A[1], 1.0)
    assert If(i < 4, Barrier()) != If(i < 4, Barrier(), Barrier())
    assert Comment("a") != Comment("b")
    assert Barrier() == Barrier() and hash(Barrier()) == hash(Barrier())


# ----------------------------------------------------------------------------- validation

def test_for_loop_validation():
    with pytest.raises(IRError, match="unknown loop kind 'parallel_for'"):
        For(i, const(4), Barrier(), "parallel_for")
    with pytest.raises(IRError, match="loop variable 'x' must be an integer, not f32"):
        For(x, const(4), Barrier())
    with pytest.raises(IRError, match="the extent of loop 'i' must be an integer"):
        For(i, const(2.5), Barrier())
    with pytest.raises(IRError, match="extent of loop 'i'"):
        For(i, var("A", f32[4]), Barrier())
    assert For(var("q", i64), var("n", i64), Barrier()).kind == "serial"


def test_for_mapping_validation():
    m = spatial(2, 2) * repeat(2, 2)
    s = ForMapping((i, j), m, w, Barrier())
    assert s.mapping == m
    with pytest.raises(IRError, match=r"has 2 task dimensions but the loop binds 1 variable"):
        ForMapping((i,), m, w, Barrier())
    with pytest.raises(IRError, match="worker of spatial.* must be an integer"):
        ForMapping((i, j), m, x, Barrier())


def test_if_needs_a_bool_condition():
    with pytest.raises(IRError, match="an if condition must be bool"):
        If(i, Barrier())
    with pytest.raises(IRError, match="must be bool"):
        If(vload(var("A", f32[16])[i], 8) < 1.0, Barrier())


def test_let_declare_assign_check_types():
    with pytest.raises(IRError, match="let x: f32 is given a value of type i32"):
        Let(x, i)
    with pytest.raises(IRError, match="assigning a value of type i32 to 'x: f32'"):
        Assign(x, i + 1)
    with pytest.raises(IRError, match="is initialised with type f16"):
        Declare(x, const(1.0, f16))
    with pytest.raises(IRError, match="buffer 'b' cannot have an initial value"):
        Declare(var("b", f32[4]), const(0.0))
    with pytest.raises(IRError, match="unknown memory scope 'texture'"):
        Declare(var("b", f32[4]), None, "texture")
    for scope in ("global", "shared", "local", "register"):
        assert Declare(var("b", f32[4]), None, scope).scope == scope


def test_buffer_store_checks_types_and_indices():
    A = var("A", f32[M, N])
    with pytest.raises(IRError, match="storing a value of type i32 into 'A' whose elements are f32"):
        BufferStore(A, (i, j), i)
    with pytest.raises(IRError, match="store of tensor 'A' with 1 indices"):
        BufferStore(A, (i,), x)
    with pytest.raises(IRError, match="not an integer"):
        BufferStore(A, (i, x), x)
    with pytest.raises(IRError, match="can only store to an element access"):
        store(A, 1.0)
    s = store(A[i, j], 1)
    assert s == BufferStore(A, (i, j), Constant(1.0, f32))
    P = pointer_param("P", f32)
    assert store(P[i], x) == BufferStore(P, (i,), x)


def test_vector_store_checks():
    A = var("A", f32[64])
    v = vload(A[i], 8)
    s = vstore(A[i], v, 64 - i)
    assert isinstance(s, VectorStore) and s.count == 64 - i
    assert vstore(A[i], v, 3).count == Constant(3, i32)
    assert vstore(A[i], v).count is None
    with pytest.raises(IRError, match=r"vector store of f32 into 'A'"):
        vstore(A[i], x)
    with pytest.raises(IRError, match="vector store of f16x8"):
        vstore(A[i], vload(var("H", f16[64])[i], 8))
    with pytest.raises(IRError, match="lane count .* not an integer"):
        vstore(A[i], v, 2.0)
    with pytest.raises(IRError, match="vstore.. takes an element access"):
        vstore(A, v)


def test_function_validation():
    body = Barrier()
    with pytest.raises(IRError, match=r"function 'f' has duplicate parameter\(s\) \['M'\]"):
        Function("f", (M, N, var("M")), body)
    with pytest.raises(IRError, match="duplicate parameter"):
        Function("f", (M, var("M", i64)), body)
    with pytest.raises(IRError, match="unknown function kind 'gpu'; expected one of"):
        Function("f", (M,), body, "gpu")
    with pytest.raises(IRError, match="parameter 'v' of 'f' is a vector"):
        Function("f", (var("v", f32x8),), body)
    for kind in ("host", "cpu_kernel", "cuda_kernel"):
        assert Function("f", (M,), body, kind).kind == kind


def test_function_attributes():
    f = make_function()
    assert f.attr("block") == 4
    assert f.attr("missing") is None and f.attr("missing", 7) == 7


def test_module_validation_and_lookup():
    f = make_function()
    g = Function("other", (), Barrier())
    m = Module((f, g))
    assert m["other"] is g and m["relu2"] is f
    with pytest.raises(KeyError):
        m["nope"]
    with pytest.raises(IRError, match="same name"):
        Module((f, make_function()))
    assert Module((f, g)) == Module((make_function(), Function("other", (), Barrier())))
    assert Module((f, g)) != Module((g, f))


# ----------------------------------------------------------------------------- seq

def test_seq_flattens_and_collapses():
    a, b, c = Barrier(), Comment("c"), Evaluate(x)
    assert seq([a]) is a
    assert seq([a, None, seq([b, c])]) == SeqStmt((a, b, c))
    assert seq([]) == SeqStmt(())
    assert seq([None, b]) is b


# ----------------------------------------------------------------------------- visitor, rewriter

def test_visitor_walks_every_node():
    class CountStores(Visitor):
        def __init__(self):
            self.stores, self.loads = 0, 0

        def visit_BufferStore(self, s):
            self.stores += 1
            self.generic_visit(s)

        def visit_TensorElement(self, e):
            self.loads += 1
            self.generic_visit(e)

    v = CountStores()
    v.visit(make_function())
    assert (v.stores, v.loads) == (2, 1)


def test_rewriter_replaces_nodes_and_keeps_unchanged_subtrees():
    class Double(Rewriter):
        def visit_Constant(self, c):
            return Constant(c.value * 2, c.type) if c.type == f32 else c

    f = make_function()
    g = Double().visit(f)
    assert g != f
    assert "A[i, j] * 4.0" in astext(g)
    assert g.params is f.params
    unchanged = Rewriter().visit(f)
    assert unchanged is f


def test_rewriter_rebuilds_a_tree_with_new_types():
    class ToF16(Rewriter):
        def visit_Var(self, v):
            return Var(v.name, f16) if v.type == f32 else self.generic_visit(v)

    e = ToF16().visit(x * var("y", f32))
    assert e.type == f16
    with pytest.raises(IRError):
        ToF16().visit(Binary("add", x, Constant(1.0, f32)))


def test_substitute_replaces_variables_including_tensor_shapes():
    f = make_function()
    M, N = f.params[0], f.params[1]
    body = substitute(f.body, {M: const(8), N: const(16)})
    assert body.extent == const(8) and body.body.extent == const(16)
    loads = collect(body, Var)
    A = next(v for v in loads if v.name == "A")
    assert A.type == f32[8, 16]
    assert substitute(f.body, {}) is f.body
    assert substitute(var("k") * 2 + var("k"), {var("k"): var("m")}) == var("m") * 2 + var("m")


def test_collect_in_pre_order():
    f = make_function()
    assert [s.var.name for s in collect(f, For)] == ["i", "j"]
    stores = collect(f.body, BufferStore)
    assert [astext(s) for s in stores] == ["B[i, j] = 0.0", "B[i, j] = t"]


def test_printing_of_statements():
    A = tensor_param("A", f32, [M])
    assert astext(For(i, M, store(A[i], 0.0), "unroll")) == "for i in unroll(M):\n    A[i] = 0.0"
    assert astext(Declare(var("buf", f32[4, 8]), None, "shared")) == "buf = shared_tensor(f32, [4, 8])"
    assert astext(Declare(x, const(0.0))) == "x: f32 = 0.0"
    assert astext(Declare(var("c", boolean))) == "c: boolean"
    assert astext(ForMapping((i, j), spatial(2, 2) * repeat(2, 2), w, Barrier())) == \
        "for i, j in (spatial(2, 2) * repeat(2, 2)).on(w):\n    barrier()"
    assert astext(If(i < M, SeqStmt(()), Evaluate(call("exp", x)))) == \
        "if i < M:\n    pass\nelse:\n    exp(x)"
    assert astext(If(i < 1, Barrier(), If(i < 2, Barrier(), Comment("no")))) == \
        "if i < 1:\n    barrier()\nelif i < 2:\n    barrier()\nelse:\n    'no'"
