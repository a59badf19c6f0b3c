"""Expressions: structural equality and hashing, type inference, errors, builders."""
from __future__ import annotations

import math
import pickle
import subprocess
import sys

import pytest

from taskloom.errors import IRError
from taskloom.ir import (Binary, Broadcast, Call, Cast, Constant, Select, TensorElement, Unary, Var,
                         VectorLoad, bf16, boolean, broadcast, call, cast, cdiv, const, eq, f16, f32,
                         f32x4, f32x8, f64, free_vars, i8, i16, i32, i64, is_const, logical_and,
                         logical_not, logical_or, maximum, minimum, ne, ptr, select, u8, var, vec, vload)
from taskloom.ir.dtypes import dtype, promote

i, j, k = var("i"), var("j"), var("k")
x, y = var("x", f32), var("y", f32)
A = var("A", f32[16, 8])
P = var("P", ptr(f32))


def evaluate(e, env):
    """The value of an integer expression (C semantics for // and %, operands non-negative here)."""
    if isinstance(e, Constant):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, Binary):
        a, b = evaluate(e.a, env), evaluate(e.b, env)
        return {"add": a + b, "sub": a - b, "mul": a * b, "div": int(a / b) if b else None,
                "mod": math.fmod(a, b) if b else None}[e.op]
    raise TypeError(type(e).__name__)


# ----------------------------------------------------------------------------- equality and hashing

def test_equal_trees_built_separately_are_equal_and_hash_equal():
    def build():
        a, b = var("a"), var("b")
        return select(a < b, (a * 4 + b) // 2, minimum(a, b) % 3)
    e1, e2 = build(), build()
    assert e1 is not e2
    assert e1 == e2 and not (e1 != e2)
    assert hash(e1) == hash(e2)
    assert {e1: "v"}[e2] == "v"
    assert len({e1, e2}) == 1


def test_tensor_elements_and_calls_compare_structurally():
    assert A[i, j] == var("A", f32[16, 8])[var("i"), var("j")]
    assert call("exp", x) == call("exp", var("x", f32))
    assert vload(A[i, 0], 8) == vload(var("A", f32[16, 8])[i, 0], 8)
    assert vload(A[i, 0], 8) != vload(A[i, 0], 4)
    assert vload(A[i, 0], 8, 3) != vload(A[i, 0], 8)


@pytest.mark.parametrize("a, b", [
    (const(1), const(2)),
    (const(1), const(1, i64)),
    (const(1.0), const(1.0, f64)),
    (const(1), const(1.0)),
    (const(True), const(1)),
    (const(0.0), const(-0.0)),
    (var("x", f32), var("x", f16)),
    (var("x", f32), var("z", f32)),
    (var("A", f32[16, 8]), var("A", f32[8, 16])),
    (var("A", f32[16, 8]), var("A", f16[16, 8])),
    (i + j, j + i),
    (i - j, i + j),
    (i + 1, i + 2),
    (i < j, i <= j),
    (-i, ~i),
    (cast(i, f32), cast(i, f16)),
    (A[i, j], A[j, i]),
    (call("exp", x), call("log", x)),
    (broadcast(x, 4), broadcast(x, 8)),
])
def test_differing_trees_are_not_equal(a, b):
    assert a != b and not (a == b)


def test_constants_are_normalised_to_their_type():
    assert const(2, f32).value == 2.0 and isinstance(const(2, f32).value, float)
    assert const(2.0, i32).value == 2 and isinstance(const(2.0, i32).value, int)
    assert const(3, boolean).value is True
    assert const(2.0, "int32") == const(2)
    with pytest.raises(IRError, match="not an integer"):
        Constant(2.5, i32)
    with pytest.raises(IRError, match="scalar type"):
        Constant(1, f32x4)


def test_nan_constants_are_equal_and_zero_signs_differ():
    a, b = const(float("nan")), const(math.nan)
    assert a == b and hash(a) == hash(b)
    assert const(-0.0) != const(0.0)
    assert const(0.0) == const(0.0, f32) and hash(const(0.0)) == hash(const(0.0, f32))


def test_a_pickled_tree_equals_a_fresh_one_in_another_process():
    # string hashes differ between processes, so a cached hash must not travel with the tree
    e = (var("a") + 1) * var("b")
    hash(e)
    code = ("import pickle, sys\nfrom taskloom.ir import var\n"
            "e = pickle.loads(sys.stdin.buffer.read())\n"
            "f = (var('a') + 1) * var('b')\n"
            "print(e == f, hash(e) == hash(f), f in {e})")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(e), capture_output=True,
                             env={"PYTHONHASHSEED": seed}, check=True).stdout.decode().split()
        assert out == ["True", "True", "True"]
    assert pickle.loads(pickle.dumps(e)) == e


# ----------------------------------------------------------------------------- type inference

def test_arithmetic_keeps_the_operand_type_and_comparisons_give_bool():
    assert (i + j).type == i32
    assert (x * y).type == f32
    assert (i < j).type == boolean
    assert eq(x, y).type == boolean and ne(i, 3).type == boolean
    assert logical_and(i < j, j < k).type == boolean


def test_mixed_integer_widths_promote_to_the_wider():
    q = var("q", i64)
    e = i + q
    assert e.type == i64
    assert e == Binary("add", Cast(i, i64), q)
    assert (q * i).type == i64
    assert (var("s", i16) + var("t", i8)).type == i16


def test_int_and_float_literals_take_the_other_side_or_promote():
    assert i + 1 == Binary("add", i, Constant(1, i32))
    assert x + 1 == Binary("add", x, Constant(1.0, f32))
    e = i + 1.5
    assert e.type == f32
    assert e == Binary("add", Cast(i, f32), Constant(1.5, f32))
    assert (var("h", f16) * 2.0) == Binary("mul", var("h", f16), Constant(2.0, f16))
    assert (2 - i) == Binary("sub", Constant(2, i32), i)


def test_int_and_float_variables_promote_to_float():
    e = i * x
    assert e.type == f32 and e == Binary("mul", Cast(i, f32), x)
    assert (var("h", f16) + var("b", bf16)).type == bf16
    assert (var("h", f16) + var("d", f64)).type == f64


def test_promotion_order():
    assert promote(boolean, u8) == u8
    assert promote(u8, i8) == i8
    assert promote(i32, i64) == i64
    assert promote(i64, f16) == f16
    assert promote(f32, f16) == f32
    assert promote(f64, f32) == f64


def test_vector_and_scalar_meet_by_broadcast():
    v = vload(A[i, 0], 8)
    assert v.type == f32x8
    e = v + x
    assert e.type == f32x8
    assert e == Binary("add", v, Broadcast(x, 8))
    assert x * v == Binary("mul", Broadcast(x, 8), v)
    assert v * 2 == Binary("mul", v, Broadcast(Constant(2.0, f32), 8))
    assert (v < x).type == vec(boolean, 8)


def test_vector_and_integer_scalar_cast_only_the_scalar():
    v = vload(A[i, 0], 8)
    e = v + i
    assert e.type == f32x8
    assert e == Binary("add", v, Broadcast(Cast(i, f32), 8))


def test_element_access_types():
    assert A[i, j].type == f32
    assert P[i].type == f32
    assert var("V", f32x8[4])[i].type == f32x8


def test_gt_and_ge_swap_their_operands():
    assert (i > j) == Binary("lt", j, i)
    assert (i >= j) == Binary("le", j, i)
    assert (i > 3) == Binary("lt", Constant(3, i32), i)


# ----------------------------------------------------------------------------- construction errors

def test_mismatched_operand_types_raise():
    with pytest.raises(IRError, match="different types i32 and f32; cast one of them"):
        Binary("add", i, x)
    with pytest.raises(IRError, match="unknown binary operator 'pow'"):
        Binary("pow", i, j)
    with pytest.raises(IRError, match="vector operands of different widths"):
        vload(A[i, 0], 8) + vload(A[i, 0], 4)
    with pytest.raises(IRError, match="expected a scalar or vector value"):
        A + 1


@pytest.mark.parametrize("index", [x, 1.5, i < j])
def test_non_integer_indices_raise(index):
    with pytest.raises(IRError, match="not an integer"):
        A[index, 0]
    with pytest.raises(IRError, match="not an integer"):
        P[index]


def test_wrong_number_of_indices_raises():
    with pytest.raises(IRError, match=r"tensor 'A' with 1 indices; it has 2 dimensions f32\[16, 8\]"):
        A[i]
    with pytest.raises(IRError, match="with 3 indices"):
        A[i, j, k]
    with pytest.raises(IRError, match="pointer 'P' needs exactly one index"):
        P[i, j]
    with pytest.raises(IRError, match="is not a tensor or pointer"):
        i[0]


def test_true_division_of_integers_raises_and_floor_division_of_floats_raises():
    with pytest.raises(IRError, match="`/` on integers .* use `//`"):
        i / j
    with pytest.raises(IRError, match="`/` on integers"):
        i / 2
    with pytest.raises(IRError, match="`//` needs integers, got f32"):
        x // y
    assert (x / 2).type == f32
    assert (i // 2).type == i32


def test_a_python_truth_value_of_an_expression_raises():
    with pytest.raises(IRError, match="no Python truth value"):
        bool(i < j)
    with pytest.raises(IRError, match="select"):
        if i:
            pass


def test_operator_type_rules():
    with pytest.raises(IRError, match="bitand needs integer operands, got f32"):
        x & y
    with pytest.raises(IRError, match="shl needs integer"):
        x << 1
    with pytest.raises(IRError, match="and needs bool operands, got i32"):
        logical_and(i, j)
    with pytest.raises(IRError, match="or needs bool"):
        logical_or(x, y)
    with pytest.raises(IRError, match="`not` needs a bool operand, got i32"):
        logical_not(i)
    with pytest.raises(IRError, match="`not` needs a bool operand"):
        logical_not(const(5))
    with pytest.raises(IRError, match="`~` needs an integer operand, got f32"):
        ~x
    with pytest.raises(IRError, match="`~` needs an integer"):
        ~const(1.5)
    with pytest.raises(IRError, match="unknown unary operator"):
        Unary("abs", i)
    assert (x % y).type == f32  # fmod


def test_select_errors():
    with pytest.raises(IRError, match="bool condition"):
        select(i, x, y)
    with pytest.raises(IRError, match="branches have types i32 and f32"):
        Select(i < j, i, x)
    assert select(i < j, i, 0) == Select(i < j, i, Constant(0, i32))
    assert select(i < j, x, 1).type == f32


def test_call_errors():
    with pytest.raises(IRError, match="unknown primitive 'expo'"):
        call("expo", x)
    with pytest.raises(IRError, match=r"fma\(\) takes 3 argument\(s\), got 2"):
        call("fma", x, y)
    with pytest.raises(IRError, match=r"exp\(\) needs float arguments, got i32"):
        call("exp", i)
    with pytest.raises(IRError, match="reduces a vector to a scalar"):
        call("reduce_add", x)
    with pytest.raises(IRError, match="must match"):
        call("pow", x, var("h", f16))


def test_variable_and_vector_construction_errors():
    with pytest.raises(IRError, match="not an identifier"):
        var("1x")
    with pytest.raises(IRError, match="at least 2 lanes"):
        vec(f32, 1)
    with pytest.raises(IRError, match="at least 2 lanes"):
        vload(A[i, 0], 1)
    with pytest.raises(IRError, match="at least 2 lanes"):
        broadcast(x, 0)
    with pytest.raises(IRError, match="needs a scalar"):
        broadcast(vload(A[i, 0], 8), 2)
    with pytest.raises(IRError, match="unknown data type 'float8'"):
        dtype("float8")
    with pytest.raises(IRError, match="cannot use"):
        i + "1"


# ----------------------------------------------------------------------------- builders

@pytest.mark.parametrize("value, to, expect", [
    (3, f32, Constant(3.0, f32)),
    (3.7, i32, Constant(3, i32)),
    (-3.7, i32, Constant(-3, i32)),
    (2.5, f16, Constant(2.5, f16)),
    (300, u8, Constant(44, u8)),
    (-1, u8, Constant(255, u8)),
    (200, i8, Constant(-56, i8)),
    (Constant(2 ** 32 + 5, i64), i32, Constant(5, i32)),
    (Constant(-129, i16), i8, Constant(127, i8)),
    (0.0, boolean, Constant(False, boolean)),
    (7, boolean, Constant(True, boolean)),
    (True, i32, Constant(1, i32)),
])
def test_cast_folds_constants_as_c_converts(value, to, expect):
    e = cast(value if isinstance(value, Constant) else const(value), to)
    assert e == expect
    assert type(e.value) is type(expect.value)


def test_cast_of_an_expression_builds_a_cast_and_a_no_op_cast_vanishes():
    assert cast(i, "int64") == Cast(i, i64) and cast(i, i64).type == i64
    assert cast(x, f32) is x
    assert cast(i, "i32") is i
    v = vload(A[i, 0], 8)
    assert cast(v, f32) is v
    assert cast(v, f16).type == vec(f16, 8)
    assert cast(const(float("inf")), i32) == Cast(Constant(float("inf"), f32), i32)


def test_unary_builders_fold_constants():
    assert -const(3) == Constant(-3, i32)
    assert ~const(5) == Constant(-6, i32)
    assert logical_not(const(True)) == Constant(False, boolean)
    assert -const(1.5, f16) == Constant(-1.5, f16)
    assert -i == Unary("neg", i)
    assert ~i == Unary("bitnot", i)


def test_min_max_and_logic_builders():
    assert minimum(i, 3) == Binary("min", i, Constant(3, i32))
    assert maximum(x, 0) == Binary("max", x, Constant(0.0, f32))
    a, b, c = i < j, j < k, i < k
    assert logical_and(a, b, c) == Binary("and", Binary("and", a, b), c)
    assert logical_or(a, b) == Binary("or", a, b)


def test_cdiv_of_ints_and_of_expressions():
    assert cdiv(7, 3) == 3 and cdiv(6, 3) == 2 and cdiv(0, 4) == 0 and cdiv(1, 8) == 1
    n = var("n")
    e = cdiv(n, 4)
    assert e == Binary("div", Binary("add", n, Constant(3, i32)), Constant(4, i32))
    for value in range(0, 40):
        assert evaluate(e, {"n": value}) == -(-value // 4)
    m = var("m")
    e = cdiv(n, m)
    assert e == Binary("div", Binary("add", n, Binary("sub", m, Constant(1, i32))), m)
    for a in range(0, 20):
        for b in range(1, 6):
            assert evaluate(e, {"n": a, "m": b}) == -(-a // b)


def test_vload_builder():
    v = vload(A[i, j], 8)
    assert isinstance(v, VectorLoad)
    assert (v.tensor, v.indices, v.lanes, v.count) == (A, (i, j), 8, None)
    assert v.type == f32x8
    w = vload(A[i, j], 8, 16 - j)
    assert w.count == 16 - j
    assert vload(A[i, j], 8, 3).count == Constant(3, i32)
    assert vload(P[i], 4).type == f32x4


def test_vload_errors():
    with pytest.raises(IRError, match="takes an element access"):
        vload(A, 8)
    with pytest.raises(IRError, match="lane count 2.5 has type f32, not an integer"):
        vload(A[i, j], 8, 2.5)
    with pytest.raises(IRError, match="whose elements are f32x8"):
        vload(var("V", f32x8[4])[i], 8)


def test_const_and_as_expr_defaults():
    assert const(1).type == i32
    assert const(1.0).type == f32
    assert const(True).type == boolean
    assert const(1, "i64").type == i64
    assert is_const(const(3)) and is_const(const(3), 3) and not is_const(const(3), 4)
    assert not is_const(i)


def test_free_vars():
    assert free_vars(A[i, j] * x + 1.0) == {A, i, j, x}
    assert free_vars(const(1)) == set()


def test_calls_take_the_type_of_their_first_expression():
    assert call("fma", x, y, 1) == Call("fma", (x, y, Constant(1.0, f32)))
    v = vload(A[i, 0], 8)
    assert call("fma", v, v, v).type == f32x8
    assert call("reduce_add", v).type == f32
    assert call("abs", i).type == i32


def test_printing_of_expressions():
    a, b, c = var("a"), var("b"), var("c")
    assert repr(a - (b - c)) == "a - (b - c)"
    assert repr((a - b) - c) == "a - b - c"
    assert repr(a // (b * c)) == "a // (b * c)"
    assert repr(-(a + b)) == "-(a + b)"
    assert repr(logical_not(logical_and(a < b, b < c))) == "not (a < b and b < c)"
    assert repr(eq(a < b, b < c)) == "(a < b) == (b < c)"
    assert repr(A[i, j] * 2.0) == "A[i, j] * 2.0"
    assert repr(var("q", i64) + 5) == "q + i64(5)"
    assert repr(cast(i, f16)) == "cast(i, f16)"
    assert repr(TensorElement(A, (i, j))) == "A[i, j]"
