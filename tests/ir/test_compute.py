"""Compute definitions: building them, the class read off a definition, and inverse index maps.

Definitions are written the way an operator library writes them (``lambda *i:`` over the
output grid, numpy broadcasting, reshape by unravelling the row-major offset). Inverse maps
are checked numerically: for every element of the input, the output element the inverse
names must read exactly that input element, and the inverse must be a bijection onto the
output grid.
"""
from __future__ import annotations

import itertools
import math
import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taskloom.errors import IRError, TaskloomError
from taskloom.ir import (Binary, Cast, Constant, Select, TensorElement, Unary, Var, call, cast, collect,
                         const, f32, i64, logical_and, select, var)
from taskloom.ir.compute import (ANCHOR_TEMPLATES, REDUCE_KINDS, GridCompute, ReduceCompute, Task,
                                 TensorInput, bijective_inputs, classify, compute, has_reduction, inline,
                                 inverse_map, reduce, tensor_input)


# ----------------------------------------------------------------------------- a C evaluator

def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


_BINARY = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": c_div,
    "mod": lambda a, b: a - b * c_div(a, b), "min": min, "max": max,
    "lt": operator.lt, "le": operator.le, "eq": operator.eq, "ne": operator.ne,
    "and": lambda a, b: a and b, "or": lambda a, b: a or b,
}


def ev(e, env):
    """The value of an integer (index) expression under ``env`` (Var -> int), as C computes it."""
    if isinstance(e, Constant):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Binary):
        return _BINARY[e.op](ev(e.a, env), ev(e.b, env))
    if isinstance(e, Unary):
        v = ev(e.a, env)
        return -v if e.op == "neg" else (not v) if e.op == "not" else ~v
    if isinstance(e, Cast):
        assert e.dtype.is_integer(), e
        return int(ev(e.value, env))
    if isinstance(e, Select):
        return ev(e.a, env) if ev(e.cond, env) else ev(e.b, env)
    raise TypeError(f"cannot evaluate {type(e).__name__} `{e}`")


def test_the_evaluator_truncates_toward_zero_like_c():
    x = var("x")
    assert ev(x // 2, {x: -7}) == -3 and ev(x % 2, {x: -7}) == -1
    assert ev(x // 2, {x: 7}) == 3 and ev(x % 3, {x: 7}) == 1
    assert ev(select(x < 0, x * 3, x - 1), {x: -2}) == -6


def check_inverse(task: Task, inp: TensorInput, sizes=None, inv=None) -> None:
    """The inverse map of ``task`` in ``inp`` (or ``inv``) is right on every element; ``sizes``
    gives the symbols their values."""
    sizes = dict(sizes or {})
    inv = inverse_map(task, inp) if inv is None else inv
    assert inv is not None, f"{task.name} is not bijective in {inp.name}"
    names, image = inv
    (out,) = task.outputs
    in_shape = [ev(d, sizes) for d in inp.shape]
    out_shape = [ev(d, sizes) for d in out.shape]
    assert len(names) == len(in_shape) and len(image) == len(out_shape)
    reads = [r for r in collect(inline(out.value), TensorElement) if r.tensor == inp]
    assert reads
    seen = set()
    for idx in itertools.product(*(range(d) for d in in_shape)):
        o = tuple(ev(e, {**sizes, **dict(zip(names, idx))}) for e in image)
        assert all(0 <= a < d for a, d in zip(o, out_shape)), (idx, o, out_shape)
        at = {**sizes, **dict(zip(out.axes, o))}
        for r in reads:
            assert tuple(ev(i, at) for i in r.indices) == idx, (idx, o, r)
        seen.add(o)
    # injective into the grid, and as many elements as the grid: onto it
    assert len(seen) == math.prod(in_shape) == math.prod(out_shape)


def test_check_inverse_rejects_a_wrong_map():
    # the checker itself catches an inverse that names the wrong element, or leaves the grid
    A = tensor_input("A", f32, [2, 3])
    task = Task("t", [A], [transpose(A)])
    check_inverse(task, A)
    names, image = inverse_map(task, A)
    with pytest.raises(AssertionError):
        check_inverse(task, A, inv=(names, (image[0], (image[1] + 1) % 2)))
    with pytest.raises(AssertionError):
        check_inverse(task, A, inv=(names, (image[0], image[1] * 0)))
    with pytest.raises(AssertionError):
        check_inverse(task, A, inv=(names, (image[0], image[1] + 1)))


# ----------------------------------------------------------------------------- an operator library

def unary(X, fn, name="unary"):
    return compute(name, X.shape, lambda *i: fn(X[i]))


def _broadcast_index(shape, n, i):
    """The element of an operand of ``shape`` read at output index ``i`` (numpy broadcasting)."""
    r = len(shape)
    return tuple(0 if isinstance(d, Constant) and d.value == 1 else i[n - r + k] for k, d in enumerate(shape))


def _broadcast_shape(a, b):
    n = max(len(a), len(b))
    a = (const(1),) * (n - len(a)) + tuple(a)
    b = (const(1),) * (n - len(b)) + tuple(b)
    return [y if isinstance(x, Constant) and x.value == 1 else x for x, y in zip(a, b)]


def binary(A, B, fn, name="binary"):
    shape = _broadcast_shape(A.shape, B.shape)
    n = len(shape)
    return compute(name, shape, lambda *i: fn(A[_broadcast_index(A.shape, n, i)],
                                              B[_broadcast_index(B.shape, n, i)]))


def permute(X, perm):
    shape = [X.shape[p] for p in perm]

    def fn(*i):
        idx = [None] * len(perm)
        for k, p in enumerate(perm):
            idx[p] = i[k]
        return X[tuple(idx)]
    return compute("permute", shape, fn)


def transpose(X):
    return compute("transpose", [X.shape[1], X.shape[0]], lambda i, j: X[j, i])


def reshape(X, shape):
    """The general reshape: unravel the output element's row-major offset into X's shape."""
    shape = [d if not isinstance(d, int) else const(d) for d in shape]

    def fn(*i):
        off = i[0] if i else const(0)
        for a, d in zip(i[1:], shape[1:]):
            off = off * d + a
        idx = []
        for k in reversed(range(len(X.shape))):
            idx.append(off % X.shape[k] if k else off)
            off = off // X.shape[k]
        return X[tuple(reversed(idx))]
    return compute("reshape", shape, fn)


def flatten(X, start=1):
    """Flatten the axes from ``start`` on, written directly (not through the offset)."""
    inner = X.shape[start:]
    size = math.prod(d.value for d in inner)

    def fn(*i):
        j, idx = i[start], []
        for k, d in enumerate(inner):
            stride = math.prod(x.value for x in inner[k + 1:])
            q = j // stride if stride != 1 else j
            idx.append(q % d.value if k else q)
        return X[tuple(i[:start]) + tuple(idx)]
    return compute("flatten", [*X.shape[:start], size], fn)


def slice_(X, axis, start, stop, step):
    n = -(-(stop - start) // step)
    shape = list(X.shape)
    shape[axis] = n

    def fn(*i):
        idx = list(i)
        idx[axis] = start + i[axis] * step if step != 1 else i[axis] + start
        return X[tuple(idx)]
    return compute("slice", shape, fn)


def pad(X, lo, hi, value=0.0):
    shape = [d + a + b for d, a, b in zip(X.shape, lo, hi)]

    def fn(*i):
        inside = logical_and(*[logical_and(i[k] >= lo[k], i[k] < lo[k] + X.shape[k]) for k in range(len(i))])
        return select(inside, X[tuple(i[k] - lo[k] for k in range(len(i)))], value)
    return compute("pad", shape, fn)


def concat(A, B, axis):
    shape = list(A.shape)
    shape[axis] = A.shape[axis] + B.shape[axis]

    def fn(*i):
        j = list(i)
        j[axis] = i[axis] - A.shape[axis]
        return select(i[axis] < A.shape[axis], A[i], B[tuple(j)])
    return compute("concat", shape, fn)


def sum_axis(X, axis, kind="sum", keepdim=False):
    shape = [d for k, d in enumerate(X.shape) if k != axis]
    if keepdim:
        shape.insert(axis, 1)

    def fn(*i):
        outer = list(i)
        if keepdim:
            del outer[axis]

        def body(k):
            return X[tuple(outer[:axis]) + (k,) + tuple(outer[axis:])]
        return reduce([X.shape[axis]], body, kind)
    return compute(kind, shape, fn)


def softmax(X):
    M, N = X.shape
    mx = compute("mx", [M], lambda i: reduce([N], lambda k: X[i, k], "max"))
    e = compute("e", [M, N], lambda i, j: call("exp", X[i, j] - mx[i]))
    s = compute("s", [M], lambda i: reduce([N], lambda k: e[i, k], "sum"))
    out = compute("softmax", [M, N], lambda i, j: e[i, j] / s[i])
    return mx, e, s, out


def gelu(X):
    return unary(X, lambda x: x * 0.5 * (1.0 + call("erf", x * 0.7071067811865476)), "gelu")


def task_of(name, inputs, out, **attrs):
    return Task(name, inputs, [out], attrs)


# ----------------------------------------------------------------------------- building definitions

def test_axes_take_the_lambda_parameter_names():
    A = tensor_input("A", f32, [4, 5])
    C = compute("C", [4, 5], lambda row, col: A[row, col] * 2.0)
    assert [a.name for a in C.axes] == ["row", "col"]
    assert C.value == A[C.axes] * 2.0
    R = reduce([5], lambda col_k: A[0, col_k])
    assert [a.name for a in R.axes] == ["col_k"]


def test_star_args_give_default_axis_names():
    A = tensor_input("A", f32, [2, 3, 4])
    C = compute("C", A.shape, lambda *i: A[i])
    assert [a.name for a in C.axes] == ["i0", "i1", "i2"]
    R = reduce([3, 4], lambda *k: A[(0,) + k])
    assert [a.name for a in R.axes] == ["k0", "k1"]


def test_zero_dimensional_compute():
    A = tensor_input("A", f32, [4])
    C = compute("C", [], lambda: A[3])
    assert C.axes == () and C.shape == () and C.dtype == f32
    assert classify(Task("last", [A], [C])) == "injective"


def test_symbolic_shapes():
    M = var("M")
    A = tensor_input("A", f32, [M, 8])
    C = compute("C", [M, 8], lambda i, j: A[i, j] + 1.0)
    assert A.shape == (M, const(8)) and C.shape == (M, const(8))
    assert C.type.shape == (M, const(8)) and C.dtype == f32
    assert Task("inc", [A], [C]).symbols() == [M]


def test_sizes_computed_from_other_sizes_are_folded():
    """A convolution's output size from its input's (``(56 + 2 - 3) // 1 + 1``) is 56, so
    that nodes over the same grid compare equal; a symbolic size keeps its symbol."""
    H, S = const(56), var("S")
    C = compute("C", [(H + 2 - 3) // 1 + 1, S + 1 - 1], lambda i, j: i + j)
    assert C.shape == (const(56), S)


def test_symbols_in_order_of_first_appearance():
    N, M, K, P = var("N"), var("M"), var("K"), var("P")
    A = tensor_input("A", f32, [N, M])
    B = tensor_input("B", f32, [M, K])
    C = compute("C", [N, K], lambda i, j: reduce([M], lambda k: A[i, k] * B[k, j]))
    assert Task("matmul", [A, B], [C]).symbols() == [N, M, K]
    # a symbol of an output's shape only is a symbol of the task too
    D = compute("D", [N, M, P], lambda i, j, k: A[i, j])
    assert Task("expand", [A], [D]).symbols() == [N, M, P]
    # within one dimension: by name
    S, Bt = var("S"), var("B")
    X = tensor_input("X", f32, [S * Bt, 4])
    Y = compute("Y", X.shape, lambda i, j: X[i, j])
    assert Task("id", [X], [Y]).symbols() == [Bt, S]
    assert Task("static", [tensor_input("Z", f32, [2])], [compute("o", [2], lambda i: const(1.0))]).symbols() == []


@pytest.mark.parametrize("kind", ["sum", "max", "min", "mean", "prod"])
def test_reduce_kinds_keep_the_value_type(kind):
    A = tensor_input("A", f32, [3, 5])
    R = reduce([5], lambda k: A[0, k], kind)
    assert isinstance(R, ReduceCompute) and R.kind == kind and R.type == f32
    C = compute("r", [3], lambda i: reduce([5], lambda k: A[i, k], kind))
    assert C.dtype == f32
    Ai = tensor_input("Ai", "int32", [5])
    assert reduce([5], lambda k: Ai[k], kind).type == Ai.dtype


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
def test_arg_reductions_give_int64(kind):
    A = tensor_input("A", f32, [3, 5])
    C = compute(kind, [3], lambda i: reduce([5], lambda k: A[i, k], kind))
    assert C.dtype == i64
    assert classify(Task(kind, [A], [C])) == "reduction"


def test_all_reduce_kinds_are_known():
    assert set(REDUCE_KINDS) == {"sum", "max", "min", "mean", "prod", "argmax", "argmin"}


def test_wrong_arity_is_an_ir_error():
    A = tensor_input("A", f32, [4, 4])
    with pytest.raises(IRError, match="2-D definition takes 1 argument"):
        compute("C", [4, 4], lambda i: A[i, i])
    with pytest.raises(IRError, match="1-D definition takes 2 argument"):
        compute("C", [4], lambda i, j: A[i, j])
    with pytest.raises(IRError, match="1-D definition takes 0 argument"):
        compute("C", [4], lambda: A[0, 0])
    with pytest.raises(IRError, match="2-D definition takes 1 argument"):
        reduce([4, 4], lambda k: A[k, k])
    assert issubclass(IRError, TaskloomError)


def test_unknown_reduce_kind():
    A = tensor_input("A", f32, [4])
    with pytest.raises(IRError, match="unknown reduction 'median'"):
        reduce([4], lambda k: A[k], "median")


def test_argmax_over_two_axes():
    A = tensor_input("A", f32, [4, 4])
    with pytest.raises(IRError, match="argmax reduces exactly one axis, got 2"):
        reduce([4, 4], lambda a, b: A[a, b], "argmax")
    with pytest.raises(IRError, match="argmin reduces exactly one axis"):
        reduce([4, 4], lambda a, b: A[a, b], "argmin")


def test_reading_a_tensor_that_is_not_an_input():
    A = tensor_input("A", f32, [4])
    B = tensor_input("B", f32, [4])
    C = compute("C", [4], lambda i: A[i] + B[i])
    with pytest.raises(IRError, match="compute 'C' reads 'B'"):
        Task("add", [A], [C])
    # also when only an intermediate reads it, and when it is read in an index
    D = compute("D", [4], lambda i: C[i] * 2.0)
    with pytest.raises(IRError, match="compute 'C' reads 'B'"):
        Task("add2", [A], [D])
    idx = tensor_input("idx", i64, [4])
    G = compute("G", [4], lambda i: A[idx[i]])
    with pytest.raises(IRError, match="reads 'idx'"):
        Task("gather", [A], [G])
    Task("gather", [A, idx], [G])  # fine with it


def diamond(A):
    B = unary(A, lambda x: call("exp", x), "B")
    C = unary(B, lambda x: x + 1.0, "C")
    D = unary(B, lambda x: x * 2.0, "D")
    E = binary(C, D, lambda x, y: x + y, "E")
    return B, C, D, E


def test_computes_of_a_diamond_in_topological_order():
    A = tensor_input("A", f32, [3, 4])
    B, C, D, E = diamond(A)
    order = Task("diamond", [A], [E]).computes()
    assert order == [B, C, D, E]
    # two outputs sharing the intermediates: each node once, producers first
    F = unary(C, lambda x: -x, "F")
    order = Task("two", [A], [F, E]).computes()
    assert sorted(n.name for n in order) == ["B", "C", "D", "E", "F"] and len(order) == 5
    pos = {n.name: k for k, n in enumerate(order)}
    for consumer, producers in {"C": "B", "D": "B", "E": "CD", "F": "C"}.items():
        assert all(pos[p] < pos[consumer] for p in producers)


def test_softmax_dag_computes():
    A = tensor_input("A", f32, [3, 7])
    mx, e, s, out = softmax(A)
    order = Task("softmax", [A], [out]).computes()
    assert set(order) == {mx, e, s, out} and len(order) == 4
    pos = {n.name: k for k, n in enumerate(order)}
    assert pos["mx"] < pos["e"] < pos["s"] < pos["softmax"]


@pytest.mark.timeout(20)
def test_a_long_chain_of_diamonds_builds_in_linear_time():
    A = tensor_input("A", f32, [4])
    X, nodes = A, []
    for _ in range(40):
        B, C, D, X = diamond(X)
        nodes += [B, C, D, X]
    task = Task("chain", [A], [X])
    assert task.computes() == nodes
    assert not has_reduction(task)


def test_inline_reads_only_inputs():
    A = tensor_input("A", f32, [3, 4])
    *_, E = diamond(A)
    v = inline(E.value)
    assert {r.tensor for r in collect(v, TensorElement)} == {A}
    assert not collect(v, GridCompute)
    # a transpose of a transpose reads the element it started from
    T = transpose(transpose(A))
    assert inline(T.value) == A[T.axes]


# ----------------------------------------------------------------------------- classification

def test_elementwise_unary_is_bijective():
    A = tensor_input("A", f32, [3, 5])
    for fn in (lambda x: call("exp", x), lambda x: -x, lambda x: cast(x, "float16"),
               lambda x: call("sigmoid", x) * 2.0 + 1.0):
        t = task_of("unary", [A], unary(A, fn))
        assert classify(t) == "bijective"
        assert bijective_inputs(t) == [A]
        check_inverse(t, A)


def test_unary_ops_reading_their_element_more_than_once_are_bijective():
    A = tensor_input("A", f32, [3, 5])
    cases = {
        "gelu": gelu(A),
        "silu": unary(A, lambda x: x * call("sigmoid", x)),
        "relu": unary(A, lambda x: select(x > 0.0, x, 0.0)),
        "leaky_relu": unary(A, lambda x: select(x > 0.0, x, x * 0.01)),
        "square": binary(A, A, lambda x, y: x * y),
    }
    for name, out in cases.items():
        t = task_of(name, [A], out)
        assert classify(t) == "bijective", name
        check_inverse(t, A)


def test_reading_two_different_elements_is_not_bijective():
    A = tensor_input("A", f32, [6])
    t = task_of("mix", [A], compute("mix", [6], lambda i: A[i] + A[5 - i]))
    assert classify(t) == "injective" and inverse_map(t, A) is None
    t = task_of("shift", [A], compute("shift", [6], lambda i: A[i] + A[i % 3]))
    assert inverse_map(t, A) is None


def test_elementwise_binary_same_shapes_is_bijective():
    A = tensor_input("A", f32, [3, 4])
    B = tensor_input("B", f32, [3, 4])
    t = task_of("add", [A, B], binary(A, B, lambda x, y: x + y))
    assert classify(t) == "bijective"
    assert bijective_inputs(t) == [A, B]
    check_inverse(t, A)
    check_inverse(t, B)


@pytest.mark.parametrize("a_shape,b_shape", [([3, 4], [4]), ([3, 4], [1, 4]), ([3, 4], [3, 1]),
                                             ([2, 3, 4], [3, 1]), ([3, 4], [])])
def test_binary_with_a_broadcast_operand_is_injective(a_shape, b_shape):
    A = tensor_input("A", f32, a_shape)
    B = tensor_input("B", f32, b_shape)
    for inputs in ([A, B], [B, A]):
        t = task_of("add", inputs, binary(inputs[0], inputs[1], lambda x, y: x + y))
        assert classify(t) == "injective"
        assert bijective_inputs(t) == [A]
        assert inverse_map(t, B) is None
        check_inverse(t, A)


def test_diamond_of_elementwise_ops_is_bijective():
    A = tensor_input("A", f32, [3, 4])
    *_, E = diamond(A)
    t = task_of("diamond", [A], E)
    assert classify(t) == "bijective"
    check_inverse(t, A)


@pytest.mark.parametrize("shape,perm", [([3, 5], (1, 0)), ([2, 3, 4], (2, 0, 1)), ([2, 3, 4], (0, 2, 1)),
                                        ([2, 3, 2, 5], (3, 1, 0, 2)), ([2, 1, 3, 2], (1, 3, 2, 0))])
def test_permute_is_bijective(shape, perm):
    A = tensor_input("A", f32, shape)
    t = task_of("permute", [A], permute(A, perm))
    assert classify(t) == "bijective"
    check_inverse(t, A)


def test_transpose_is_bijective():
    A = tensor_input("A", f32, [3, 5])
    t = task_of("transpose", [A], transpose(A))
    assert classify(t) == "bijective"
    names, image = inverse_map(t, A)
    assert image == (names[1], names[0])
    check_inverse(t, A)


def test_symbolic_transpose_is_bijective():
    M, N = var("M"), var("N")
    A = tensor_input("A", f32, [M, N])
    t = task_of("transpose", [A], transpose(A))
    assert classify(t) == "bijective"
    check_inverse(t, A, {M: 3, N: 2})


@pytest.mark.parametrize("src,dst", [([6, 4], [24]), ([24], [2, 3, 4]), ([2, 3, 4], [4, 6]),
                                     ([4, 6], [2, 3, 4]), ([2, 3, 4], [24]), ([6, 4], [4, 6]),
                                     ([3, 4], [3, 1, 4]), ([3, 1, 4], [3, 4]), ([1], []), ([], [1, 1])])
def test_static_reshape_is_bijective(src, dst):
    A = tensor_input("A", f32, src)
    t = task_of("reshape", [A], reshape(A, dst))
    assert classify(t) == "bijective"
    check_inverse(t, A)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_unsqueeze_and_squeeze_written_directly_are_bijective(axis):
    A = tensor_input("A", f32, [3, 4])
    shape = [3, 4]
    shape.insert(axis, 1)
    t = task_of("unsqueeze", [A], compute("unsqueeze", shape, lambda *i: A[i[:axis] + i[axis + 1:]]))
    assert classify(t) == "bijective"
    check_inverse(t, A)
    U = tensor_input("U", f32, shape)
    t = task_of("squeeze", [U], compute("squeeze", [3, 4], lambda i, j: U[(i, j)[:axis] + (0,) + (i, j)[axis:]]))
    assert classify(t) == "bijective"
    check_inverse(t, U)
    S = tensor_input("S", f32, [])
    t = task_of("unsqueeze0", [S], compute("unsqueeze0", [1, 1], lambda i, j: S[()]))
    assert classify(t) == "bijective"
    check_inverse(t, S)


def test_symbolic_reshape_split_and_merge_are_bijective():
    S = var("S")
    A = tensor_input("A", f32, [S, 768])
    split = task_of("split_heads", [A], reshape(A, [S, 12, 64]))
    assert classify(split) == "bijective"
    check_inverse(split, A, {S: 2})
    H = tensor_input("H", f32, [S, 12, 64])
    merge = task_of("merge_heads", [H], reshape(H, [S, 768]))
    assert classify(merge) == "bijective"
    check_inverse(merge, H, {S: 2})
    # the split written directly, as a library might
    direct = task_of("split", [A], compute("split", [S, 12, 64], lambda s, h, d: A[s, h * 64 + d]))
    assert classify(direct) == "bijective"
    check_inverse(direct, A, {S: 1})


def test_symbolic_reshape_to_a_different_size_is_not_bijective():
    S = var("S")
    A = tensor_input("A", f32, [S, 768])
    t = task_of("half", [A], compute("half", [S, 12, 32], lambda s, h, d: A[s, h * 64 + d]))
    assert classify(t) == "injective"


@pytest.mark.parametrize("shape,start", [([2, 3, 4], 1), ([2, 3, 4], 0), ([2, 3, 4, 5], 2), ([3, 1, 2], 1)])
def test_flatten_is_bijective(shape, start):
    A = tensor_input("A", f32, shape)
    t = task_of("flatten", [A], flatten(A, start))
    assert classify(t) == "bijective"
    check_inverse(t, A)


@pytest.mark.parametrize("axis,start,stop,step", [(0, 1, 5, 1), (1, 0, 6, 2), (1, 1, 6, 2), (0, 0, 4, 1),
                                                  (1, 2, 5, 3)])
def test_slice_is_injective(axis, start, stop, step):
    A = tensor_input("A", f32, [5, 6])
    t = task_of("slice", [A], slice_(A, axis, start, stop, step))
    assert classify(t) == "injective"
    assert inverse_map(t, A) is None and bijective_inputs(t) == []


def test_broadcast_and_expand_are_injective():
    A = tensor_input("A", f32, [1, 4])
    t = task_of("expand", [A], compute("expand", [3, 4], lambda i, j: A[0, j]))
    assert classify(t) == "injective"
    B = tensor_input("B", f32, [4])
    t = task_of("broadcast_to", [B], compute("broadcast_to", [2, 3, 4], lambda i, j, k: B[k]))
    assert classify(t) == "injective"
    N = var("N")
    C = tensor_input("C", f32, [N])
    t = task_of("expand", [C], compute("expand", [var("M"), N], lambda i, j: C[j]))
    assert classify(t) == "injective"
    t = task_of("tile", [B], compute("tile", [8], lambda i: B[i % 4]))
    assert classify(t) == "injective"


def test_pad_is_injective():
    A = tensor_input("A", f32, [3, 4])
    for lo, hi in [((1, 1), (1, 1)), ((0, 2), (0, 0)), ((0, 0), (1, 0))]:
        t = task_of("pad", [A], pad(A, lo, hi))
        assert classify(t) == "injective", (lo, hi)
        assert inverse_map(t, A) is None
    # padding by nothing is the identity, but written with a select the read is conditional
    t = task_of("pad0", [A], pad(A, (0, 0), (0, 0)))
    assert classify(t) == "injective"


@pytest.mark.parametrize("axis", [0, 1])
def test_concat_is_injective(axis):
    A = tensor_input("A", f32, [2, 3])
    B = tensor_input("B", f32, [4, 3] if axis == 0 else [2, 5])
    t = task_of("concat", [A, B], concat(A, B, axis))
    assert classify(t) == "injective"
    assert bijective_inputs(t) == []


def test_gather_index_select_and_embedding_are_injective():
    data = tensor_input("data", f32, [5, 3])
    idx = tensor_input("idx", i64, [4])
    t = task_of("index_select", [data, idx], compute("index_select", [4, 3], lambda i, j: data[idx[i], j]))
    assert classify(t) == "injective" and bijective_inputs(t) == []
    t = task_of("index_select1", [data, idx], compute("index_select1", [5, 4], lambda i, j: data[i, idx[j]]))
    assert classify(t) == "injective" and bijective_inputs(t) == []
    # torch.gather: the index has the output's shape, so each index element feeds one output element
    gidx = tensor_input("gidx", i64, [5, 3])
    t = task_of("gather", [data, gidx], compute("gather", [5, 3], lambda i, j: data[i, gidx[i, j]]))
    assert classify(t) == "injective"
    assert inverse_map(t, data) is None and bijective_inputs(t) == [gidx]
    # a gather whose data-dependent index happens to cover a same-sized output
    perm = tensor_input("perm", i64, [5])
    row = tensor_input("row", f32, [5])
    t = task_of("shuffle", [row, perm], compute("shuffle", [5], lambda i: row[perm[i]]))
    assert classify(t) == "injective" and inverse_map(t, row) is None
    W = tensor_input("W", f32, [10, 8])
    ids = tensor_input("ids", i64, [2, 3])
    t = task_of("embedding", [W, ids], compute("embedding", [2, 3, 8], lambda b, s, d: W[ids[b, s], d]))
    assert classify(t) == "injective" and bijective_inputs(t) == []


def test_where_is_injective():
    c = tensor_input("c", "bool", [3, 4])
    a = tensor_input("a", f32, [3, 4])
    b = tensor_input("b", f32, [3, 4])
    t = task_of("where", [c, a, b], compute("where", [3, 4], lambda i, j: select(c[i, j], a[i, j], b[i, j])))
    assert classify(t) == "injective"
    assert inverse_map(t, a) is None and inverse_map(t, b) is None
    # every element of the condition is read once, unconditionally
    assert bijective_inputs(t) == [c]
    check_inverse(t, c)


@pytest.mark.parametrize("kind", ["sum", "mean", "max"])
@pytest.mark.parametrize("axis", [0, 1])
def test_reduction_over_an_axis(kind, axis):
    A = tensor_input("A", f32, [3, 5])
    for keepdim in (False, True):
        t = task_of(kind, [A], sum_axis(A, axis, kind, keepdim))
        assert has_reduction(t)
        assert classify(t) == "reduction"
        assert inverse_map(t, A) is None


def test_softmax_dag_is_a_reduction():
    A = tensor_input("A", f32, [3, 7])
    *_, out = softmax(A)
    t = task_of("softmax", [A], out)
    assert has_reduction(t)
    assert classify(t) == "reduction"
    assert inverse_map(t, A) is None and bijective_inputs(t) == []


@pytest.fixture
def anchor_templates():
    saved = set(ANCHOR_TEMPLATES)
    yield ANCHOR_TEMPLATES
    ANCHOR_TEMPLATES.clear()
    ANCHOR_TEMPLATES.update(saved)


def matmul_task(name="matmul"):
    A = tensor_input("A", f32, [4, 6])
    B = tensor_input("B", f32, [6, 5])
    C = compute("C", [4, 5], lambda i, j: reduce([6], lambda k: A[i, k] * B[k, j]))
    return Task(name, [A, B], [C])


def test_a_task_with_a_template_is_an_anchor(anchor_templates):
    name = "test_compute_matmul"
    assert name not in anchor_templates
    t = matmul_task(name)
    assert classify(t) == "reduction"
    anchor_templates.add(name)
    assert classify(t) == "anchor"
    # an anchor's name wins over an elementwise definition too
    A = tensor_input("A", f32, [4])
    assert classify(Task(name, [A], [unary(A, lambda x: -x)])) == "anchor"
    anchor_templates.discard(name)
    assert classify(t) == "reduction"


def test_a_task_without_outputs_is_opaque():
    A = tensor_input("A", f32, [4])
    assert classify(Task("sink", [A], [])) == "opaque"
    assert bijective_inputs(Task("sink", [A], [])) == []


def test_a_task_without_inputs_is_injective():
    t = Task("arange", [], [compute("arange", [5], lambda i: cast(i, f32))])
    assert classify(t) == "injective"


def test_multi_output_tasks_are_not_bijective():
    A = tensor_input("A", f32, [4])
    t = Task("two", [A], [unary(A, lambda x: -x, "n"), unary(A, lambda x: x * 2.0, "d")])
    assert inverse_map(t, A) is None and classify(t) == "injective"


def test_input_names_that_are_not_identifiers():
    for name in ["x.1", "0", "input/0:0"]:
        A = tensor_input(name, f32, [2, 3])
        t = task_of("t", [A], transpose(A))
        assert classify(t) == "bijective", name
        names, _ = inverse_map(t, A)
        assert all(n.name.isidentifier() for n in names)
        check_inverse(t, A)


# ----------------------------------------------------------------------------- properties

@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_permutations_are_bijective(data):
    rank = data.draw(st.integers(2, 4))
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    perm = data.draw(st.permutations(range(rank)))
    A = tensor_input("A", f32, shape)
    t = task_of("permute", [A], permute(A, perm))
    assert classify(t) == "bijective"
    check_inverse(t, A)


def _factorization(data, primes):
    k = data.draw(st.integers(1, 4))
    slots = data.draw(st.lists(st.integers(0, k - 1), min_size=len(primes), max_size=len(primes)))
    dims = [1] * k
    for p, s in zip(primes, slots):
        dims[s] *= p
    return dims


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_random_reshapes_are_bijective(data):
    primes = data.draw(st.lists(st.sampled_from([2, 2, 3, 3, 5, 7]), max_size=6)
                       .filter(lambda ps: math.prod(ps) <= 420))
    src, dst = _factorization(data, primes), _factorization(data, primes)
    A = tensor_input("A", f32, src)
    t = task_of("reshape", [A], reshape(A, dst))
    assert classify(t) == "bijective", (src, dst)
    check_inverse(t, A)


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_random_slices_dropping_elements_are_never_bijective(data):
    rank = data.draw(st.integers(1, 3))
    shape = data.draw(st.lists(st.integers(2, 6), min_size=rank, max_size=rank))
    axis = data.draw(st.integers(0, rank - 1))
    n = shape[axis]
    step = data.draw(st.integers(1, 3))
    start = data.draw(st.integers(0 if step > 1 else 1, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    A = tensor_input("A", f32, shape)
    t = task_of("slice", [A], slice_(A, axis, start, stop, step))
    assert t.outputs[0].shape[axis].value < n
    assert classify(t) == "injective"
    assert inverse_map(t, A) is None and bijective_inputs(t) == []


# ----------------------------------------------------------------------------- written over

def test_reads_at_own_index():
    """A result may be written over an input it reads only at its own element's index, outside
    any reduction: an epilogue's residual, both factors of ``r * r``; not a transposed read,
    one inside a reduction, a broadcast nor an input of another shape."""
    from taskloom.ir.compute import reads_at_own_index
    r, x, b = tensor_input("r", f32, [4, 6]), tensor_input("x", f32, [4, 5]), tensor_input("b", f32, [6])
    w, s = tensor_input("w", f32, [5, 6]), tensor_input("s", f32, [6, 4])
    out = compute("out", [4, 6], lambda i, j: reduce([5], lambda k: x[i, k] * w[k, j]) + b[j] + r[i, j])
    task = Task("matmul_add", [x, w, b, r], [out])
    assert reads_at_own_index(task, r) and not reads_at_own_index(task, x) and not reads_at_own_index(task, b)
    assert reads_at_own_index(Task("square", [r], [compute("sq", [4, 6], lambda i, j: r[i, j] * r[i, j])]), r)
    total = compute("total", [4, 6], lambda i, j: r[i, j] - reduce([6], lambda k: r[i, k]))
    assert not reads_at_own_index(Task("centre", [r], [total]), r)
    mean = compute("mean", [4], lambda i: reduce([6], lambda k: r[i, k]))
    through = compute("through", [4, 6], lambda i, j: r[i, j] * mean[i])  # a reduction of r, read again
    assert not reads_at_own_index(Task("scaled", [r], [through]), r)
    flip = Task("flip", [s, r], [compute("flip", [4, 6], lambda i, j: s[j, i] + r[i, j])])
    assert not reads_at_own_index(flip, s) and reads_at_own_index(flip, r)
    # a batch of one is read at 0, which is its own index; a row of another is not
    one = tensor_input("one", f32, [1, 6])
    assert reads_at_own_index(Task("one", [one], [compute("o", [1, 6], lambda b, j: one[0, j] * 2.0)]), one)
    assert not reads_at_own_index(Task("row", [r], [compute("row", [4, 6], lambda i, j: r[0, j] + r[i, j])]), r)
