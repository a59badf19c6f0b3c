"""C code generation, checked numerically through gcc on both vector ISAs."""
from __future__ import annotations

import math

import numpy as np
import pytest

import taskloom
from taskloom.backend.codegen_x86 import codegen_x86
from taskloom.errors import CodegenError
from taskloom.ir import (Function, Module, Var, cdiv, f16, f32, i32, vec, var)
from taskloom.ir import stmt as S
from taskloom.script import kernel
from taskloom.target import get_target, host_target

HOST = host_target()
TARGETS = ["cpu -isa=avx2"] + (["cpu -isa=avx512"] if HOST.has("avx512f") else [])


def make_vector_axpy(target):
    lanes = target.vector_lanes(f32)
    V = vec(f32, lanes)

    @kernel
    def axpy(N: i32, x: f32[N], y: f32[N], out: f32[N]):
        "out = 2 * x + y, one vector at a time, the tail masked"
        for c in range(cdiv(N, lanes)):
            n = min(N - c * lanes, lanes)
            "lanes past the end are masked off"
            xv = vload(x[c * lanes], lanes, n)
            yv = vload(y[c * lanes], lanes, n)
            vstore(out[c * lanes], fma(broadcast(2.0, lanes), xv, yv), n)
    return axpy


@pytest.mark.parametrize("spec", TARGETS)
@pytest.mark.parametrize("n", [1, 7, 8, 16, 17, 100])
def test_masked_vector_tails(spec, n):
    target = get_target(spec)
    mod = taskloom.build(make_vector_axpy(target), target)
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n + 16, 123.0, dtype=np.float32)  # the kernel must not write past out[n-1]
    mod["axpy"](x, y, out[:n])
    np.testing.assert_allclose(out[:n], 2 * x + y, rtol=1e-6)
    assert np.all(out[n:] == 123.0)


def make_row_softmax_parts(target):
    lanes = target.vector_lanes(f32)

    @kernel
    def row_stats(R: i32, C: i32, x: f32[R, C], mx: f32[R], sumexp: f32[R]):
        for r in parallel(R):
            m: f32 = -inf
            for c in range(C):
                m = max(m, x[r, c])
            acc: vec(f32, lanes) = broadcast(0.0, lanes)
            for c in range(cdiv(C, lanes)):
                n = min(C - c * lanes, lanes)
                e = exp(vload(x[r, c * lanes], lanes, n) - broadcast(m, lanes))
                "masked-off lanes load 0 and add exp(-m) each: subtracted below"
                acc = acc + e
            mx[r] = m
            sumexp[r] = reduce_add(acc) - cast(cdiv(C, lanes) * lanes - C, f32) * exp(0.0 - m)
    return row_stats


@pytest.mark.parametrize("spec", TARGETS)
def test_vector_exp_and_reduction(spec):
    target = get_target(spec)
    mod = taskloom.build(make_row_softmax_parts(target), target)
    x = np.random.default_rng(0).uniform(-20, 20, size=(5, 37)).astype(np.float32)
    mx, se = np.empty(5, np.float32), np.empty(5, np.float32)
    mod["row_stats"](x, mx, se)
    np.testing.assert_array_equal(mx, x.max(axis=1))
    np.testing.assert_allclose(se, np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1), rtol=2e-5)


@kernel
def scalar_math(N: i32, x: f32[N], out: f32[12, N]):
    for i in range(N):
        v = x[i]
        out[0, i] = exp(v)
        out[1, i] = log(abs(v) + 1.0)
        out[2, i] = sqrt(abs(v))
        out[3, i] = rsqrt(abs(v) + 1.0)
        out[4, i] = tanh(v)
        out[5, i] = erf(v)
        out[6, i] = sigmoid(v)
        out[7, i] = floor(v)
        out[8, i] = pow(abs(v), 1.5)
        out[9, i] = fma(v, v, 1.0)
        out[10, i] = min(v, 0.5) + max(v, -0.5)
        out[11, i] = select(v < 0.0, -v, v * 2.0)


def test_scalar_math_matches_numpy():
    from math import erf as math_erf
    x = np.linspace(-3, 3, 41, dtype=np.float32)
    out = np.empty((12, x.size), np.float32)
    taskloom.build(scalar_math)["scalar_math"](x, out)
    a = np.abs(x)
    want = [np.exp(x), np.log(a + 1), np.sqrt(a), 1 / np.sqrt(a + 1), np.tanh(x),
            np.array([math_erf(v) for v in x]), 1 / (1 + np.exp(-x)), np.floor(x), a ** 1.5,
            x * x + 1, np.minimum(x, 0.5) + np.maximum(x, -0.5), np.where(x < 0, -x, 2 * x)]
    for k, w in enumerate(want):
        np.testing.assert_allclose(out[k], w.astype(np.float32), rtol=2e-6, atol=1e-6, err_msg=f"row {k}")


@kernel
def int_ops(N: i32, a: i32[N], b: i32[N], out: i32[7, N]):
    for i in range(N):
        out[0, i] = a[i] // b[i]
        out[1, i] = a[i] % b[i]
        out[2, i] = a[i] & b[i]
        out[3, i] = a[i] | b[i]
        out[4, i] = a[i] ^ b[i]
        out[5, i] = (a[i] << 2) >> 1
        out[6, i] = select(a[i] < b[i] and not a[i] == 0, 1, 0)


def test_integer_ops_follow_c_semantics():
    a = np.array([7, -7, 7, -7, 0, 13], np.int32)
    b = np.array([2, 2, -2, -2, 3, 5], np.int32)
    out = np.empty((7, a.size), np.int32)
    taskloom.build(int_ops)["int_ops"](a, b, out)
    trunc_div = np.trunc(a / b).astype(np.int32)
    np.testing.assert_array_equal(out[0], trunc_div)
    np.testing.assert_array_equal(out[1], a - b * trunc_div)
    np.testing.assert_array_equal(out[2:5], [a & b, a | b, a ^ b])
    np.testing.assert_array_equal(out[5], (a << 2) >> 1)
    np.testing.assert_array_equal(out[6], ((a < b) & (a != 0)).astype(np.int32))


@kernel
def low_precision(N: i32, h: f16[N], x: f32[N], out: f32[2, N], hout: f16[N]):
    for i in range(N):
        out[0, i] = cast(h[i], f32) * 2.0
        out[1, i] = cast(cast(x[i], bf16) + cast(1.0, bf16), f32)
        hout[i] = h[i] * f16(0.5)


def _bf16_round(x: np.ndarray) -> np.ndarray:
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def test_float16_and_bfloat16():
    x = np.random.default_rng(1).standard_normal(33).astype(np.float32)
    h = x.astype(np.float16)
    out, hout = np.empty((2, 33), np.float32), np.empty(33, np.float16)
    taskloom.build(low_precision)["low_precision"](h, x, out, hout)
    np.testing.assert_array_equal(out[0], h.astype(np.float32) * 2)
    np.testing.assert_array_equal(out[1], _bf16_round(_bf16_round(x) + 1.0))
    np.testing.assert_array_equal(hout, h * np.float16(0.5))


def test_c_keywords_are_renamed_and_names_are_kept():
    double, char = Var("double", f32[4]), var("char")
    fn = Function("keywords", (double,),
                  S.For(char, taskloom.ir.const(4), S.store(double[char], taskloom.ir.cast(char, f32))))
    mod = taskloom.build(fn)
    a = np.zeros(4, np.float32)
    mod["keywords"](a)
    np.testing.assert_array_equal(a, [0, 1, 2, 3])
    src = open(mod.source_path).read()
    assert "double_[char_]" in src and "void keywords(float* __restrict__ double_)" in src


@kernel
def big_local(N: i32, x: f32[N], out: f32[N]):
    tmp = local_tensor(f32, [100000])
    for i in range(N):
        tmp[i] = x[i] + 1.0
    for i in range(N):
        out[i] = tmp[N - 1 - i]


def test_large_local_buffer_lives_in_the_threads_scratch():
    mod = taskloom.build(big_local)
    x = np.arange(10, dtype=np.float32)
    out = np.empty_like(x)
    mod["big_local"](x, out)
    np.testing.assert_array_equal(out, x[::-1] + 1)
    src = open(mod.source_path).read()
    assert "float* tmp = (float*)tl_scratch_take(" in src and "tl_scratch_give(tmp);" in src


@kernel
def banded(N: i32, x: f32[N], out: f32[N]):
    """Three large buffers per core, as the matmul template's panels and partial sums, and
    one of the caller's around the parallel region."""
    whole = local_tensor(f32, [N])
    for i in range(N):
        whole[i] = x[i] * 2.0
    for w in parallel(2):
        p = local_tensor(f32, [30000])
        q = local_tensor(f32, [70000])
        r = local_tensor(f32, [N])
        for i in range(N):
            p[i % 30000] = whole[i]
            q[i % 70000] = p[i % 30000] + 1.0
            r[i] = q[i % 70000] + w
        for i in range(N):
            if i % 2 == w:
                out[i] = r[i]


def _minor_faults() -> int:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


@pytest.mark.parametrize("sizes", [(200_000, 200_000), (50_000, 300_000, 20_000)])
def test_scratch_is_reused_between_calls_and_grows_with_the_size(sizes):
    """Buffers taken in nested order (the caller's around each core's three) give the right
    answer at sizes that grow and shrink, and once the scratch has grown, calls fault no
    pages in (each would otherwise fault in hundreds)."""
    fn = taskloom.build(banded)["banded"]
    for n in sizes:
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        out = np.empty_like(x)
        for _ in range(3):
            fn(x, out)
        np.testing.assert_array_equal(out, 2 * x + 1 + (np.arange(n) % 2).astype(np.float32))
    x = np.ones(max(sizes), np.float32)
    out = np.empty_like(x)
    fn(x, out)
    # the process's count: another thread of the test process (a pool a previous test left
    # running) may fault now and then, so the fewest of three tries counts
    faults = []
    for _ in range(3):
        before = _minor_faults()
        for _ in range(20):
            fn(x, out)
        faults.append(_minor_faults() - before)
    assert min(faults) < 20, faults  # from the heap, freed and taken again: ~200 in 20 calls


def test_scratch_is_per_thread():
    """Python threads calling one kernel at once each get their own scratch."""
    from concurrent.futures import ThreadPoolExecutor
    fn = taskloom.build(banded)["banded"]

    def run(n: int) -> bool:
        x = np.full(n, float(n), np.float32)
        out = np.empty_like(x)
        for _ in range(5):
            fn(x, out)
            if not np.array_equal(out, 2 * x + 1 + (np.arange(n) % 2).astype(np.float32)):
                return False
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(run, [90_000, 100_000, 110_000, 120_000] * 2))


def test_readable_source_keeps_names_docstring_and_comments():
    target = get_target("cpu -isa=avx2")
    mod = taskloom.build(make_vector_axpy(target), target)
    src = open(mod.source_path).read()
    assert "void axpy(int32_t N, const float* __restrict__ x, const float* __restrict__ y, " \
           "float* __restrict__ out)" in src
    assert "/*\n * out = 2 * x + y, one vector at a time, the tail masked\n */\nvoid axpy" in src
    assert "// lanes past the end are masked off" in src
    assert "_mm256_maskload_ps" in src and "_mm512" not in src.split("void axpy")[1]


def test_prefetch_is_a_hint_into_l2_and_changes_nothing():
    @kernel
    def copy_ahead(N: i32, A: f32[N], B: f32[N]):
        for i in range(N):
            prefetch(A[i + 16])  # past the end at the last lines: a hint never faults
            B[i] = A[i]
    mod = taskloom.build(copy_ahead, HOST)
    assert "__builtin_prefetch(&A[i + 16], 0, 2);" in open(mod.source_path).read()
    a = np.arange(40, dtype=np.float32)
    b = np.zeros_like(a)
    mod["copy_ahead"](40, a, b)
    np.testing.assert_array_equal(a, b)


def test_vector_wider_than_the_target_is_a_clear_error():
    avx2 = get_target("cpu -isa=avx2")
    wide = make_vector_axpy(get_target("cpu -isa=avx512")) if HOST.has("avx512f") else None
    if wide is None:
        pytest.skip("needs a 16-lane kernel; built only where AVX-512 exists")
    with pytest.raises(CodegenError, match=r"f32x16.*avx512f.*vector_lanes"):
        taskloom.build(wide, avx2)


def test_a_barrier_in_a_cpu_kernel_is_rejected():
    @kernel
    def two_phases(A: f32[8]):
        for w in parallel(2):
            A[w] = 1.0
            barrier()
            A[w + 2] = A[1 - w]
    with pytest.raises(CodegenError, match=r"two_phases.*barrier\(\) is for CUDA kernels"):
        taskloom.build(two_phases, HOST)


def test_cuda_kernel_and_unlowered_ir_are_rejected():
    A = Var("A", f32[4, 4])
    i = var("i")
    fn = Function("k", (A,), S.For(i, taskloom.ir.const(4), S.store(A[i, i], 1.0)), kind="cuda_kernel")
    with pytest.raises(CodegenError, match="CUDA kernel"):
        codegen_x86(Module((fn,)), HOST)
    cpu = Function("k", (A,), fn.body)
    with pytest.raises(CodegenError, match="not flattened"):
        codegen_x86(Module((cpu,)), HOST)


def make_reductions(target):
    lanes = target.vector_lanes(f32)

    @kernel
    def reductions(x: f32[lanes], out: f32[3]):
        v = vload(x[0], lanes)
        out[0] = reduce_add(v)
        out[1] = reduce_max(v)
        out[2] = reduce_min(abs(v))
    return reductions


@pytest.mark.parametrize("spec", TARGETS)
def test_vector_reductions(spec):
    target = get_target(spec)
    lanes = target.vector_lanes(f32)
    x = np.random.default_rng(3).standard_normal(lanes).astype(np.float32)
    out = np.empty(3, np.float32)
    taskloom.build(make_reductions(target), target)["reductions"](x, out)
    np.testing.assert_allclose(out, [x.sum(), x.max(), np.abs(x).min()], rtol=1e-6)


def test_a_kernel_named_like_a_libc_function_gets_its_own_symbol():
    @kernel
    def exp(N: i32, x: f32[N], y: f32[N]):
        for i in range(N):
            y[i] = exp(x[i])

    mod = taskloom.build(exp)
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    y = np.empty_like(x)
    mod["exp"](x, y)
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)
    assert "void exp_kernel(" in open(mod.source_path).read()


def make_nan_minmax(target):
    lanes = target.vector_lanes(f32)

    @kernel
    def nan_minmax(x: f32[lanes], y: f32[lanes], out: f32[2, lanes], red: f32[4]):
        a = vload(x[0], lanes)
        b = vload(y[0], lanes)
        vstore(out[0, 0], max(a, b))
        vstore(out[1, 0], min(a, b))
        red[0] = reduce_max(a)
        red[1] = reduce_min(a)
        red[2] = max(x[1], y[1])
        red[3] = min(x[2], y[2])
    return nan_minmax


@pytest.mark.parametrize("spec", TARGETS)
def test_min_and_max_propagate_nan_from_either_operand(spec):
    target = get_target(spec)
    lanes = target.vector_lanes(f32)
    x = np.arange(lanes, dtype=np.float32)
    y = np.full(lanes, 3.0, np.float32)
    x[1], y[2] = np.nan, np.nan       # NaN first in lane 1, second in lane 2
    out, red = np.empty((2, lanes), np.float32), np.empty(4, np.float32)
    taskloom.build(make_nan_minmax(target), target)["nan_minmax"](x, y, out, red)
    np.testing.assert_array_equal(out[0], np.maximum(x, y))
    np.testing.assert_array_equal(out[1], np.minimum(x, y))
    assert np.isnan(red).all()
