"""The printer writes kernel-script text that parses back to the same IR."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskloom.ir import (Comment, Function, Module, SeqStmt, astext, boolean, call, cast, cdiv, const,
                         custom, eq, f16, f32, i32, i64, logical_and, logical_not, logical_or, maximum,
                         minimum, ne, repeat, select, spatial, store, var)
from taskloom.script import kernel, parse_source

MR, NR, LANES = 4, 16, 8


def rows(w):
    return [(w, j) for j in range(4)]


@kernel
def loops(M: i32, N: i32, A: f32[M, N], B: f32[M, N]):
    """Loops of every kind."""
    for i in parallel(M):
        for j in range(N):
            B[i, j] = A[i, j]
        for j in unroll(MR):
            B[i, j] = B[i, j] + 1.0
        for j in vectorize(LANES):
            B[i, j] = B[i, j] * 2.0
        for j in range(1, N, 3):
            B[i, j] = 0.0
        for j in range(2, N):
            B[i, j] = -B[i, j]


@kernel
def mappings(A: f32[128, 128], B: f32[16, 4], C: f32[8]):
    for w in parallel(256):
        for i, j in (spatial(4, 2) * repeat(2, 2) * spatial(4, 8) * repeat(4, 4)).on(w):
            A[i, j] = 0.0
    for w in range(4):
        for i, j in (spatial(2, 2, ranks=[1, 0]) * repeat(8, 2, ranks=[1, 0])).on(w):
            B[i, j] = 1.0
        for i, j in repeat(4, 2, ranks=[1, 0]).on(w // 2):
            B[i, j] = 2.0
        for i in spatial(4).on(w):
            C[i] = 3.0


@kernel
def custom_mapping(A: f32[4, 4]):
    for w in range(4):
        for i, j in custom([4, 4], 4, rows).on(w):
            A[i, j] = 1.0


@kernel
def control(N: i32, A: f32[N], flags: i32[N]):
    for i in range(N):
        if flags[i] == 0:
            A[i] = 0.0
        elif flags[i] == 1 or flags[i] == 3:
            A[i] = 1.0
        elif not (flags[i] < 10 and i != 2):
            pass
        else:
            A[i] = A[i] * A[i]
        if i >= 4:
            A[i] = 5.0


@kernel
def variables(N: i32, A: f32[N], out: f32[1]):
    t = A[0] * 2.0
    acc = 0.0
    for k in range(N):
        acc = acc + t * A[k]
    s: f32 = 1.0
    s += acc
    c: i32
    c = N - 1
    flag: boolean = c < 4
    idx = c // 2
    out[0] = select(flag, s, acc) + cast(idx, f32)


@kernel
def buffers(N: i32, A: f32[N]):
    g = global_tensor(f32, [N])
    sh = shared_tensor(f32, [16, MR])
    loc = local_tensor(i32, [4])
    reg = register_tensor(f32x8, [MR])
    for i in range(4):
        loc[i] = i * 2
        sh[i, i] = A[i]
        g[i] = sh[i, 0] + cast(loc[i], f32)
        reg[i] = vload(A[i * 8], 8)


@kernel
def vectors(N: i32, A: f32[N], B: f32[N], s: f32[1]):
    for c in range(cdiv(N, LANES)):
        v = vload(A[c * LANES], LANES, N - c * LANES)
        prefetch(A[c * LANES + LANES])
        u = fma(v, broadcast(2.0, LANES), v)
        vstore(B[c * LANES], u, N - c * LANES)
        vstore(B[c * LANES], v * 3.0 + u)
        s[0] = reduce_add(u) + reduce_max(v)


@kernel
def primitives(N: i32, A: f32[N], H: f16[N], Q: i64[N], R: i32[N]):
    for i in range(N):
        x = A[i]
        A[i] = exp(x) + sqrt(abs(x)) * tanh(x) - x ** 2.0 + pow(x, 0.5) + sigmoid(-x)
        H[i] = f16(x) + f16(1.5)
        Q[i] = i64(i) * i64(3) + Q[i] % 7
        R[i] = min(i, N - 1) + max(R[i], 0) + abs(R[i])
        A[i] = min(A[i], 6.0)
        R[i] = cast(x, i32) + cast(H[i], i32)


@kernel
def operators(a: i32, b: i32, c: i32, x: f32, y: f32, out: i32[4], fout: f32[2], bout: boolean[2]):
    out[0] = (a - (b - c)) + a // (b * c) + -(a + b) + a % (b % c) + (a - b) * c
    out[1] = (a & 3) | (b << 2) ^ ~c + (a >> 1)
    out[2] = a - b - c + (a * b) // c
    out[3] = select(a < b, a, b) + select(not (a < b and c != 0), 1, 2)
    fout[0] = x / (y / x) - (x - y) * -x + x / y / x + (x % y)
    fout[1] = -(x * y) + -x * y
    bout[0] = not (a < b and c == 0) or a <= b
    bout[1] = (a < b) == (b < c)


@kernel(kind="cuda_kernel", grid="(N + 127) // 128", block=128)
def cuda_style(N: i32, A: f32[N], P: ptr(f32)):
    """A kernel with a launch configuration, a pointer, a barrier and comments."""
    "a comment"
    t = blockIdx.x * 128 + threadIdx.x
    P[t] = A[t]
    barrier()
    exp(A[t])


@kernel(kind="host")
def empty(N: i32):
    pass


HAND_WRITTEN = [loops, mappings, control, variables, buffers, vectors, primitives, operators, cuda_style,
                empty]


@pytest.mark.parametrize("f", HAND_WRITTEN, ids=lambda f: f.name)
def test_printed_kernels_parse_back_to_the_same_ir(f):
    text = astext(f)
    g = parse_source(text)
    assert g == f
    assert astext(g) == text


def test_custom_mapping_round_trips_with_its_function_in_scope():
    text = astext(custom_mapping)
    assert "for i, j in custom([4, 4], 4, rows).on(w):" in text
    assert parse_source(text, {"rows": rows}) == custom_mapping


def test_printed_text_of_loops_and_mappings():
    text = astext(loops)
    assert text.splitlines()[:4] == [
        "@kernel",
        "def loops(M: i32, N: i32, A: f32[M, N], B: f32[M, N]):",
        "    'Loops of every kind.'",
        "    for i in parallel(M):",
    ]
    assert "        for j in unroll(4):" in text
    assert "        for j in vectorize(8):" in text
    assert "        for j_k in range((N - 1 + 2) // 3):\n            j = 1 + j_k * 3" in text
    text = astext(mappings)
    assert "for i, j in (spatial(4, 2) * repeat(2, 2) * spatial(4, 8) * repeat(4, 4)).on(w):" in text
    assert "for i, j in (spatial(2, 2, ranks=[1, 0]) * repeat(8, 2, ranks=[1, 0])).on(w):" in text
    assert "for i, j in repeat(4, 2, ranks=[1, 0]).on(w // 2):" in text
    assert "for i in spatial(4).on(w):" in text


def test_printed_text_of_precedence_sensitive_expressions():
    lines = astext(operators).splitlines()
    assert "    out[0] = a - (b - c) + a // (b * c) + -(a + b) + a % (b % c) + (a - b) * c" in lines
    assert "    out[1] = a & 3 | b << 2 ^ ~c + (a >> 1)" in lines
    assert "    out[2] = a - b - c + a * b // c" in lines
    assert "    bout[0] = not (a < b and c == 0) or a <= b" in lines
    assert "    bout[1] = (a < b) == (b < c)" in lines
    assert "    fout[0] = x / (y / x) - (x - y) * -x + x / y / x + x % y" in lines


def test_printed_text_of_declarations_and_buffers():
    text = astext(variables)
    assert "    t = A[0] * 2.0" in text
    assert "    acc: f32 = 0.0" in text
    assert "    c: i32\n    c = N - 1" in text
    assert "    s = s + acc" in text
    text = astext(buffers)
    for line in ("g = global_tensor(f32, [N])", "sh = shared_tensor(f32, [16, 4])",
                 "loc = local_tensor(i32, [4])", "reg = register_tensor(f32x8, [4])"):
        assert "    " + line in text
    text = astext(cuda_style)
    assert text.startswith("@kernel(kind='cuda_kernel', grid=('(N + 127) // 128', 1, 1), block=(128, 1, 1), "
                           "dynamic_shared=0)\ndef cuda_style(N: i32, A: f32[N], P: ptr(f32)):")


def test_a_leading_comment_is_not_read_back_as_a_docstring():
    A = var("A", f32[4])
    f = Function("g", (A,), Comment("hello"))
    assert parse_source(astext(f)) == f
    f = Function("g", (A,), SeqStmt((Comment("hello"), store(A[0], 1.0))))
    g = parse_source(astext(f))
    assert g == f and g.attr("doc") is None
    f = Function("g", (A,), SeqStmt((Comment("hello"), store(A[0], 1.0))), attrs=(("doc", "Doc."),))
    assert parse_source(astext(f)) == f


def test_special_float_constants_round_trip():
    A = var("A", f32[4])
    H = var("H", f16[4])
    body = SeqStmt((store(A[0], float("inf")), store(A[1], -float("inf")), store(A[2], float("nan")),
                    store(A[3], -0.0), store(H[0], float("nan")), store(H[1], 1e-7)))
    f = Function("special", (A, H), body)
    assert parse_source(astext(f)) == f


def test_module_text_joins_its_functions():
    text = astext(Module((loops, control)))
    assert text == astext(loops) + "\n\n\n" + astext(control)


# ----------------------------------------------------------------------------- random expressions

INT_VARS = [var(n) for n in ("a", "b", "c")]
FLOAT_VARS = [var(n, f32) for n in ("x", "y", "z")]
P = var("p", boolean)
Q = var("q", i64)
H = var("h", f16)

int_consts = st.integers(-50, 50).map(const)
float_consts = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False, width=32),
    st.sampled_from([float("inf"), float("-inf"), float("nan"), -0.0, 1e-30, 3e38]),
).map(const)

INT_BINARY = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b, "&": lambda a, b: a & b,
    "|": lambda a, b: a | b, "^": lambda a, b: a ^ b, "<<": lambda a, b: a << b,
    ">>": lambda a, b: a >> b, "min": minimum, "max": maximum,
}
FLOAT_BINARY = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b, "%": lambda a, b: a % b, "min": minimum, "max": maximum,
    "pow": lambda a, b: call("pow", a, b),
}
COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
           ">=": lambda a, b: a >= b, "==": eq, "!=": ne}


def _operands(draw, sub, consts):
    """Two operands of which at least one mentions a variable (constant-only arithmetic is
    folded by the parser, so it never appears in parsed IR)."""
    a = draw(sub)
    shape = draw(st.sampled_from(["ee", "ec", "ce"]))
    if shape == "ee":
        return a, draw(sub)
    c = draw(consts)
    return (a, c) if shape == "ec" else (c, a)


@st.composite
def int_exprs(draw, depth=4):
    if depth == 0 or draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from(INT_VARS))
    sub = int_exprs(depth - 1)
    kind = draw(st.sampled_from(["bin", "bin", "bin", "unary", "select", "cast", "call"]))
    if kind == "bin":
        op = draw(st.sampled_from(sorted(INT_BINARY)))
        return INT_BINARY[op](*_operands(draw, sub, int_consts))
    if kind == "unary":
        return draw(st.sampled_from([lambda e: -e, lambda e: ~e]))(draw(sub))
    if kind == "select":
        return select(draw(bool_exprs(depth - 1)), *_operands(draw, sub, int_consts))
    if kind == "cast":
        return cast(draw(float_exprs(depth - 1)), i32)
    return call("abs", draw(sub))


@st.composite
def float_exprs(draw, depth=4):
    if depth == 0 or draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from(FLOAT_VARS))
    sub = float_exprs(depth - 1)
    kind = draw(st.sampled_from(["bin", "bin", "bin", "unary", "select", "cast", "call"]))
    if kind == "bin":
        op = draw(st.sampled_from(sorted(FLOAT_BINARY)))
        return FLOAT_BINARY[op](*_operands(draw, sub, float_consts))
    if kind == "unary":
        return -draw(sub)
    if kind == "select":
        return select(draw(bool_exprs(depth - 1)), *_operands(draw, sub, float_consts))
    if kind == "cast":
        return cast(draw(int_exprs(depth - 1)), f32)
    fn = draw(st.sampled_from(["exp", "sqrt", "tanh", "fma"]))
    args = [draw(sub) for _ in range(3 if fn == "fma" else 1)]
    return call(fn, *args)


@st.composite
def bool_exprs(draw, depth=3):
    if depth <= 0 or draw(st.integers(0, 5)) == 0:
        return P
    kind = draw(st.sampled_from(["cmp_int", "cmp_float", "and", "or", "not", "eq"]))
    if kind in ("cmp_int", "cmp_float"):
        sub, consts = (int_exprs(depth - 1), int_consts) if kind == "cmp_int" else (float_exprs(depth - 1), float_consts)
        op = draw(st.sampled_from(sorted(COMPARE)))
        return COMPARE[op](*_operands(draw, sub, consts))
    sub = bool_exprs(depth - 1)
    if kind == "not":
        return logical_not(draw(sub))
    if kind == "eq":
        return draw(st.sampled_from([eq, ne]))(draw(sub), draw(sub))
    return (logical_and if kind == "and" else logical_or)(draw(sub), draw(sub))


@st.composite
def wide_exprs(draw):
    """i64 and f16 arithmetic, where constants print with their type (``i64(3)``, ``f16(1.5)``)."""
    if draw(st.booleans()):
        e = Q + cast(draw(int_exprs(2)), i64)
        return e * draw(st.integers(-9, 9)) - draw(st.sampled_from([Q, Q // 3, -Q]))
    e = H + cast(draw(float_exprs(2)), f16)
    return e * draw(st.floats(-4, 4, allow_nan=False, width=16)) / draw(st.sampled_from([H, H - 1.5, -H]))


def embed(e):
    """``e`` stored by a kernel whose parameters are every variable the trees may use."""
    outs = {i32: var("oi", i32[1]), f32: var("of", f32[1]), boolean: var("ob", boolean[1]),
            i64: var("oq", i64[1]), f16: var("oh", f16[1])}
    out = outs[e.type]
    params = (*INT_VARS, *FLOAT_VARS, P, Q, H, out)
    return Function("k", params, store(out[0], e))


def check_round_trip(e):
    f = embed(e)
    text = astext(f)
    g = parse_source(text)
    assert g == f, f"printed as:\n{text}\nparsed back as:\n{astext(g)}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(int_exprs())
def test_random_integer_expressions_round_trip(e):
    check_round_trip(e)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(float_exprs())
def test_random_float_expressions_round_trip(e):
    check_round_trip(e)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bool_exprs(depth=4))
def test_random_bool_expressions_round_trip(e):
    check_round_trip(e)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wide_exprs())
def test_random_wide_typed_expressions_round_trip(e):
    check_round_trip(e)


@pytest.mark.parametrize("build", [
    lambda a, b, c: a - (b - c),
    lambda a, b, c: a // (b * c),
    lambda a, b, c: (a // b) * c,
    lambda a, b, c: -(a + b),
    lambda a, b, c: -a + b,
    lambda a, b, c: -(-a),
    lambda a, b, c: ~(-a),
    lambda a, b, c: a << (b + c),
    lambda a, b, c: (a << b) + c,
    lambda a, b, c: a & (b | c),
    lambda a, b, c: (a ^ b) & c,
    lambda a, b, c: a - const(-3),
    lambda a, b, c: const(-3) * a,
    lambda a, b, c: const(-3) % (a - b),
    lambda a, b, c: minimum(a, b) - maximum(b, -c),
    lambda a, b, c: select(logical_not(logical_and(a < b, logical_or(b < c, P))), a, b),
    lambda a, b, c: select(eq(logical_not(P), a < b), a, b),
    lambda a, b, c: select(logical_and(P, logical_and(P, a < b)), a, b),
    lambda a, b, c: select(logical_or(logical_or(P, a < b), P), a, b),
    lambda a, b, c: select(eq(eq(a, b), P), c, a),
])
def test_precedence_sensitive_expressions_round_trip(build):
    check_round_trip(build(*INT_VARS))
