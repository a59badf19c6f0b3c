"""The kernel-script parser: what it accepts, the IR it builds, and where its errors point."""
from __future__ import annotations

import importlib.util
import inspect
import sys
import textwrap

import pytest

from taskloom.errors import ScriptError
from taskloom.ir import (Assign, Barrier, Binary, BufferStore, Call, Comment, Constant, Declare,
                         Evaluate, For, ForMapping, If, Let, SeqStmt, Var, VectorStore, astext,
                         boolean, cdiv, collect, const, f16, f32, f32x8, i32, i64, ptr, repeat, spatial,
                         substitute, var)
from taskloom.script import kernel, parse_function, parse_source

TILE = 4
WARP_MAPPING = spatial(2, 2) * repeat(2, 2)


def tile_index(i, j):
    """A parse-time helper: called with IR expressions, returns one."""
    return i * TILE + j


def split(i):
    return i // TILE, i % TILE


def evaluate(e, env):
    """The value of a small integer expression."""
    if isinstance(e, Constant):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    a, b = evaluate(e.a, env), evaluate(e.b, env)
    ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a // b,
           "mod": lambda: a % b}
    return ops[e.op]()


def body_stmts(f):
    return list(f.body.stmts) if isinstance(f.body, SeqStmt) else [f.body]


# ----------------------------------------------------------------------------- parsing features

def test_parameters_become_typed_variables_and_shapes_may_name_later_scalars():
    @kernel
    def k(A: f32[M, N], M: i32, N: i32, P: ptr(f16), V: f32x8[4], flag: boolean):
        pass

    M, N = var("M"), var("N")
    assert [p.name for p in k.params] == ["A", "M", "N", "P", "V", "flag"]
    assert k.params[0] == var("A", f32[M, N])
    assert k.params[3].type == ptr(f16)
    assert k.params[4].type == f32x8[4]
    assert k.params[5].type == boolean
    assert k.kind == "cpu_kernel" and k.name == "k"
    assert k.body == SeqStmt(())


def test_closure_constants_are_folded_at_parse_time():
    def make(mr, nr):
        @kernel
        def k(C: f32[mr, nr]):
            for i in range(mr):
                for j in unroll(nr * 2):
                    C[i, j // 2] = 0.0
        return k

    k = make(3, 5)
    assert k.params[0].type == f32[3, 5]
    outer = k.body
    assert outer.extent == const(3) and outer.body.extent == const(10) and outer.body.kind == "unroll"
    assert make(3, 5) == k and make(4, 5) != k


def test_names_only_annotations_use_come_from_the_defining_scope():
    """Under ``from __future__ import annotations`` a shape named only in an annotation is
    no closure variable; the scope that applies ``@kernel`` still provides it."""
    def make(packed):
        SHAPE = (2, 3, 4) if packed else (6, 4)

        @kernel(kind="cpu_kernel")
        def k(B: f32[SHAPE]):
            if packed:
                B[0, 0, 0] = 1.0
            else:
                B[0, 0] = 1.0
        return k

    assert make(True).params[0].type == f32[2, 3, 4]
    assert make(False).params[0].type == f32[6, 4]


def test_python_helpers_and_mappings_bound_to_names():
    @kernel
    def k(A: f32[16], B: f32[8, 8]):
        m = spatial(2, 2) * repeat(2, 2)
        for w in range(4):
            for i, j in m.on(w):
                A[tile_index(i, j)] = 1.0
            for i, j in WARP_MAPPING.on(w):
                q, r = split(i * 4 + j)
                B[q, r] = 2.0

    loops = collect(k, ForMapping)
    assert [f.mapping for f in loops] == [spatial(2, 2) * repeat(2, 2), WARP_MAPPING]
    i, j = var("i"), var("j")
    first = loops[0].body
    assert first == BufferStore(var("A", f32[16]), (i * 4 + j,), const(1.0))
    lets = collect(loops[1], Let)
    assert [l.var.name for l in lets] == ["q", "r"]
    assert lets[0].value == (i * 4 + j) // 4 and lets[1].value == (i * 4 + j) % 4


def test_loop_kinds_and_mapping_loops():
    @kernel
    def k(N: i32, A: f32[N]):
        for a in parallel(N):
            for b in vectorize(8):
                for c in spatial(4).on(a):
                    A[c] = 0.0

    assert k.body.kind == "parallel" and k.body.body.kind == "vectorize"
    fm = k.body.body.body
    assert isinstance(fm, ForMapping) and fm.worker == var("a") and fm.vars == (var("c"),)


@pytest.mark.parametrize("start, stop, step", [(1, 10, 3), (2, 11, 3), (0, 10, 4), (5, 6, 1), (3, 3, 2), (0, 17, 1)])
def test_range_with_start_stop_step_visits_the_same_values_as_python(start, stop, step):
    @kernel
    def k(N: i32, A: f32[N]):
        for i in range(start, N, step):
            A[i] = 0.0

    loop = k.body
    assert isinstance(loop, For) and loop.var.name == "i_k"
    let = loop.body.stmts[0]
    assert let.var == var("i")
    extent = evaluate(loop.extent, {"N": stop})
    values = [evaluate(substitute(let.value, {loop.var: const(c)}), {}) for c in range(extent)]
    assert values == list(range(start, stop, step))


def test_range_with_static_bounds_has_a_static_extent():
    @kernel
    def k(A: f32[16]):
        for i in range(2, 16, 5):
            A[i] = 0.0

    assert k.body.extent == const(3)


def test_tuple_targets():
    @kernel
    def k(A: f32[4], B: f32[4]):
        a, b = A[0], B[0]
        c, d = split(7)
        A[1], B[1] = b, a
        A[c], B[d] = 1.0, 2.0

    s = body_stmts(k)
    # c and d hold Python numbers: they stay parse-time constants, not IR variables
    assert [type(x) for x in s] == [Let, Let, BufferStore, BufferStore, BufferStore, BufferStore]
    assert s[0] == Let(var("a", f32), var("A", f32[4])[0])
    assert s[2] == BufferStore(var("A", f32[4]), (const(1),), var("b", f32))
    assert s[4].indices == (const(1),) and s[5].indices == (const(3),)


def test_augmented_assignment_to_scalars_and_buffer_elements():
    @kernel
    def k(N: i32, A: f32[N], C: f32[4, 4]):
        acc = 0.0
        for i in range(N):
            acc += A[i]
            C[i % 4, i // 4] += acc * 2.0
        C[0, 0] -= acc

    acc = var("acc", f32)
    s = body_stmts(k)
    assert s[0] == Declare(acc, const(0.0))
    loop = s[1].body.stmts
    assert loop[0] == Assign(acc, acc + var("A", f32[var("N")])[var("i")])
    C = var("C", f32[4, 4])
    i = var("i")
    assert loop[1] == BufferStore(C, (i % 4, i // 4), C[i % 4, i // 4] + acc * 2.0)
    assert s[2] == BufferStore(C, (const(0), const(0)), C[0, 0] - acc)


def test_annotated_declarations_and_reassignment():
    @kernel
    def k(A: f32[2], B: i32[1]):
        x: f32 = 1.0
        x = x * 2.0
        n: i32
        n = 3
        m = 5
        v: f32x8 = broadcast(0.0, 8)
        A[0] = x
        B[0] = n + m

    s = body_stmts(k)
    x, n = var("x", f32), var("n", i32)
    assert s[0] == Declare(x, const(1.0)) and s[1] == Assign(x, x * 2.0)
    assert s[2] == Declare(n) and s[3] == Assign(n, const(3))
    # `m = 5` binds a parse-time constant: no statement, and B[0] = n + 5
    assert s[4].var.type == f32x8
    assert s[6] == BufferStore(var("B", i32[1]), (const(0),), n + 5)


def test_compile_time_if_keeps_only_the_chosen_branch():
    def make(use_bias, mode):
        @kernel
        def k(A: f32[4], bias: f32[4]):
            for i in range(4):
                if use_bias:
                    A[i] = A[i] + bias[i]
                else:
                    A[i] = A[i] * 2.0
                if mode == "relu" and use_bias:
                    A[i] = max(A[i], 0.0)
        return k

    with_bias, without = make(True, "relu"), make(False, "relu")
    assert not collect(with_bias, If) and not collect(without, If)
    assert "A[i] = A[i] + bias[i]" in astext(with_bias) and "max(A[i], 0.0)" in astext(with_bias)
    assert "A[i] = A[i] * 2.0" in astext(without) and "max" not in astext(without)
    assert "bias[i]" not in astext(without)


def test_runtime_if_elif_else():
    @kernel
    def k(N: i32, A: f32[N]):
        for i in range(N):
            if i < 2:
                A[i] = 0.0
            elif i == 2 or i > 8:
                A[i] = 1.0
            else:
                pass

    outer = k.body.body
    assert isinstance(outer, If) and outer.cond == (var("i") < 2)
    assert isinstance(outer.else_body, If) and outer.else_body.else_body == SeqStmt(())


def test_docstrings_become_the_doc_attribute_and_later_strings_comments():
    @kernel
    def k(A: f32[4]):
        """Sets A.

        Every element.
        """
        "a note"
        A[0] = 1.0

    assert k.attr("doc") == "Sets A.\n\nEvery element."
    assert body_stmts(k)[0] == Comment("a note")


def test_shape_attribute_of_a_tensor():
    @kernel
    def k(A: f32[M, 8], M: i32):
        for i in range(A.shape[0]):
            for j in range(A.shape[1]):
                A[i, j] = 0.0

    assert k.body.extent == var("M")
    assert k.body.body.extent == const(8)


def test_builtins_vectors_primitives_casts():
    @kernel
    def k(N: i32, A: f32[N], H: f16[N], Q: i64[N]):
        for c in range(cdiv(N, 8)):
            v = vload(A[c * 8], 8, N - c * 8)
            vstore(A[c * 8], fma(v, v, broadcast(1.0, 8)), N - c * 8)
            A[c] = reduce_add(v) + exp(A[c]) ** 2.0
            H[c] = f16(A[c]) + f16(0.5)
            Q[c] = i64(c) + cast(A[c], i64)
            A[c] = select(c < 3, A[c], -A[c]) + min(A[c], 1.0) + (1.0 if TILE > 2 else 2.0)
            barrier()

    N = var("N")
    loop = k.body
    assert loop.extent == cdiv(N, 8)
    s = loop.body.stmts
    assert isinstance(s[0], Let) and s[0].value.count == N - var("c") * 8
    assert isinstance(s[1], VectorStore) and s[1].count == N - var("c") * 8
    assert isinstance(s[2].value, Binary) and s[2].value.b == Call("pow", (Call("exp", (var("A", f32[N])[var("c")],)), const(2.0)))
    assert s[3].value.b == Constant(0.5, f16)
    assert s[4].value.a.dtype == i64
    assert s[5].value.b == const(1.0)
    assert s[6] == Barrier()


def test_expression_statements_become_evaluate():
    @kernel
    def k(x: f32):
        exp(x)

    assert k.body == Evaluate(Call("exp", (var("x", f32),)))


def test_decorator_keywords_become_kind_name_and_attributes():
    block = (16, 8)

    @kernel(kind="cuda_kernel", name="renamed", grid=2, block=block, note="hi")
    def k(A: f32[4]):
        pass

    assert k.kind == "cuda_kernel" and k.name == "renamed"
    assert [int(b.value) for b in k.attr("block")] == [16, 8, 1] and k.attr("note") == "hi"
    again = parse_source(astext(k))
    assert again == k


def test_parse_source_reads_decorator_keywords():
    f = parse_source("""
        @kernel(kind='host', block=4)
        def g(N: i32):
            pass
    """)
    assert f.kind == "host" and f.attr("block") == 4 and f.name == "g"


def test_compile_time_loops_over_python_sequences_are_unrolled():
    @kernel
    def k(A: f32[8]):
        for t in (1, 3, 5):
            A[t] = 0.0

    assert [s.indices[0] for s in collect(k, BufferStore)] == [const(1), const(3), const(5)]


# ----------------------------------------------------------------------------- errors

def expect_error(fn, *fragments):
    """Parses ``fn``; it must fail on the single source line marked ``# error`` and the message must
    name the file, that line, the line's text and each fragment."""
    lines, start = inspect.getsourcelines(fn)
    marked = [(start + n, line.strip()) for n, line in enumerate(lines) if "# error" in line]
    assert len(marked) == 1
    lineno, text = marked[0]
    with pytest.raises(ScriptError) as info:
        parse_function(fn)
    err = info.value
    message = str(err)
    assert err.filename == __file__
    assert err.lineno == lineno, message
    assert f"{__file__}:{lineno}: " in message
    assert message.splitlines()[-1] == "    " + text
    for fragment in fragments:
        assert fragment in message
    return err


def test_while_is_unsupported():
    def k(N: i32, A: f32[N]):
        i = 0
        while i < N:  # error
            A[i] = 0.0
    expect_error(k, "`While` statements are not supported in a kernel")


def test_return_is_unsupported():
    def k(A: f32[4]):
        A[0] = 1.0
        return A  # error
    expect_error(k, "`Return` statements are not supported")


def test_slices_are_unsupported():
    def k(A: f32[8], B: f32[8]):
        for i in range(8):
            B[i] = 0.0
        B[0] = A[0:4]  # error
    expect_error(k, "`A[0:4]`: slices are not supported")


def test_lambda_is_unsupported():
    def k(A: f32[8]):
        f = lambda v: v * 2.0  # error  # noqa: E731
        A[0] = f(A[0])
    expect_error(k, "Lambda expressions are not supported")


def test_unannotated_parameter():
    def k(A: f32[8],
          n):  # error
        pass
    expect_error(k, "parameter 'n' needs a type annotation")


def test_default_arguments_are_rejected():
    def k(A: f32[8], n: i32 = 3):  # error
        pass
    expect_error(k, "plain annotated names")


def test_unknown_name_in_a_nested_block():
    def k(N: i32, A: f32[N]):
        for i in range(N):
            if i < 4:
                A[i] = 0.0
            else:
                A[i] = undefined_thing * 2.0  # error  # noqa: F821
    expect_error(k, "name 'undefined_thing' is not defined")


def test_an_error_in_a_multi_line_statement_points_at_the_offending_line():
    def k(A: f32[4]):
        A[0] = (A[1] +
                missing_name * 2.0)  # error  # noqa: F821
    expect_error(k, "name 'missing_name' is not defined")


def test_unknown_name_in_an_annotation():
    def k(A: f32[Q]):  # error  # noqa: F821
        pass
    expect_error(k, "name 'Q' is not defined")


def test_storing_the_wrong_type():
    def k(A: f32[4], B: i32[4]):
        B[0] = A[0]  # error
    expect_error(k, "'B[0]' has type i32 but is given a value of type f32; use cast()")


def test_integer_true_division():
    def k(N: i32, A: f32[N]):
        for i in range(N):
            A[i] = A[i // 2]
            A[i / 2] = 0.0  # error
    expect_error(k, "`/` on integers", "use `//`")


def test_float_index():
    def k(A: f32[4], x: f32):
        A[x] = 1.0  # error
    expect_error(k, "index x has type f32, not an integer")


def test_wrong_number_of_indices():
    def k(A: f32[4, 4]):
        A[1] = 0.0  # error
    expect_error(k, "tensor 'A' with 1 indices; it has 2 dimensions")


def test_non_bool_if_condition():
    def k(A: f32[4], n: i32):
        if n:  # error
            A[0] = 1.0
    expect_error(k, "'if condition' has type boolean but is given a value of type i32")


def test_mismatched_let_reassignment():
    def k(A: f32[4]):
        x: f32 = 0.0
        x = 3 < 4.0 + A[0]  # error
    expect_error(k, "'x' has type f32 but is given a value of type boolean")


def test_assigning_a_parameter_or_loop_variable():
    def k(N: i32, A: f32[N]):
        A[0] = 1.0
        N = N + 1  # error
    expect_error(k, "'N' is a parameter, a loop variable", "`N_: i32 = N`")

    def k2(A: f32[4]):
        for i in range(4):
            i = i + 1  # error
    expect_error(k2, "'i' is a parameter, a loop variable")


def test_assigning_a_buffer():
    def k(A: f32[4]):
        A = 1.0  # error
    expect_error(k, "cannot assign to buffer 'A'")


def test_mapping_with_the_wrong_number_of_loop_variables():
    def k(A: f32[4, 4]):
        for w in range(4):
            for i in spatial(2, 2).on(w):  # error
                A[i, 0] = 0.0
    expect_error(k, "has 2 task dimensions but the loop binds 1 variable")


def test_invalid_mapping_in_a_kernel():
    def k(A: f32[4, 4]):
        for w in range(4):
            for i, j in (spatial(2, 2) * repeat(2)).on(w):  # error
                A[i, j] = 0.0
    expect_error(k, "cannot compose spatial(2, 2)", "dimensions must match")


def test_loop_over_something_else():
    def k(A: f32[4]):
        for i in A:  # error
            pass
    expect_error(k, "cannot loop over", "use range()")


def test_range_with_a_bad_step():
    def k(A: f32[4]):
        for i in range(0, 4, 0):  # error
            A[i] = 0.0
    expect_error(k, "range() step must be a positive int, got 0")


def test_float_loop_extent():
    def k(A: f32[4]):
        for i in range(2.5):  # error
            A[0] = 0.0
    expect_error(k, "the extent of loop 'i' must be an integer")


def test_failing_parse_time_helper():
    def helper(v):
        raise ValueError("helper refused")

    def k(A: f32[4]):
        A[0] = 1.0
        A[1] = helper(A[0])  # error
    expect_error(k, "ValueError: helper refused")


def test_unknown_primitive_argument_types():
    def k(A: i32[4]):
        A[0] = exp(A[1])  # error
    expect_error(k, "exp() needs float arguments, got i32")


def test_bad_buffer_declaration():
    def k(A: f32[4]):
        b = shared_tensor([4], f32)  # error
    expect_error(k, "shared_tensor(dtype, [d0, d1, ...]) declares a buffer")


def test_chained_assignment():
    def k(A: f32[4]):
        a = b = A[0]  # error
    expect_error(k, "chained assignment")


def test_non_literal_decorator_keywords_are_taken_from_the_decorator_call():
    kind = "host"
    shape = (2, 2)

    @kernel(kind=kind, tile=shape)
    def k(A: f32[4]):
        pass

    assert k.kind == "host" and k.attr("tile") == (2, 2)
    with pytest.raises(ScriptError, match=r"<src>:2: decorator argument tile=shape must be a literal"):
        parse_source("@kernel(kind='host',\n         tile=shape)\ndef k(A: f32[4]):\n    pass\n",
                     filename="<src>")


def test_errors_in_parse_source_count_lines_from_the_source_and_offset():
    src = textwrap.dedent("""\
        @kernel
        def k(A: f32[4]):
            A[0] = 1.0
            while True:
                pass
    """)
    with pytest.raises(ScriptError) as info:
        parse_source(src, filename="kern.py")
    assert info.value.lineno == 4
    assert str(info.value) == "kern.py:4: `While` statements are not supported in a kernel\n    while True:"
    with pytest.raises(ScriptError) as info:
        parse_source(src, filename="kern.py", line_offset=10)
    assert info.value.lineno == 14 and str(info.value).startswith("kern.py:14: ")


def test_syntax_errors_point_at_their_line():
    with pytest.raises(ScriptError) as info:
        parse_source("def k(A: f32[4]):\n    A[0] = = 1.0\n", filename="bad.py")
    assert info.value.lineno == 2
    assert str(info.value).startswith("bad.py:2: invalid Python syntax")


def test_source_without_a_function():
    with pytest.raises(ScriptError, match="no function definition found"):
        parse_source("x = 1\n")


def test_errors_in_a_kernel_module_name_its_file_and_line(tmp_path):
    path = tmp_path / "bad_kernels.py"
    path.write_text(textwrap.dedent("""\
        from __future__ import annotations
        from taskloom.ir import f32, i32
        from taskloom.script import kernel

        SCALE = 2.0


        def build():
            @kernel
            def scale(N: i32, A: f32[N]):
                for i in range(N):
                    A[i] = A[i] * SCALE
                    A[i:] = 0.0
            return scale
    """))
    spec = importlib.util.spec_from_file_location("bad_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(ScriptError) as info:
        mod.build()
    err = info.value
    assert (err.filename, err.lineno) == (str(path), 13)
    assert str(err) == f"{path}:13: `A[i:]`: slices are not supported; index single elements\n    A[i:] = 0.0"


def test_a_kernel_module_that_parses_round_trips(tmp_path):
    path = tmp_path / "good_kernels.py"
    path.write_text(textwrap.dedent("""\
        from __future__ import annotations
        from taskloom.ir import f32, i32, spatial, repeat
        from taskloom.script import kernel

        MR = 2


        @kernel
        def fill(M: i32, N: i32, A: f32[M, N]):
            for w in parallel(4):
                for i, j in (spatial(2, 2) * repeat(MR, 1)).on(w):
                    if i < M and j < N:
                        A[i, j] = 1.0
    """))
    spec = importlib.util.spec_from_file_location("good_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.pop("good_kernels", None)
    spec.loader.exec_module(mod)
    f = mod.fill
    assert parse_source(astext(f)) == f
    assert collect(f, ForMapping)[0].mapping == spatial(2, 2) * repeat(2, 1)


def test_names_bound_in_a_compile_time_branch_stay_visible():
    def make(use_bias):
        @kernel
        def k(A: f32[4], bias: f32[4]):
            for i in range(4):
                if use_bias:
                    b = bias[i]
                else:
                    b = 0.0
                A[i] = A[i] + b
        return k

    with_bias, without = make(True), make(False)
    assert "A[i] = A[i] + b" in astext(with_bias) and "b = bias[i]" in astext(with_bias)
    assert "A[i] = A[i] + 0.0" in astext(without)
