"""Vector comparisons, masks, select and vector math in the C backend, checked against numpy.

Every kernel walks its arrays one vector at a time with a masked tail, on AVX2 (f32x8 and
f32x4) and, where the machine has it, AVX-512 (f32x16).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import taskloom
from taskloom.errors import CodegenError
from taskloom.ir import Function, Var, boolean, call, cdiv, f32, i32, vec
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.script import kernel
from taskloom.target import get_target, host_target

HOST = host_target()
TARGETS = ["cpu -isa=avx2"] + (["cpu -isa=avx512"] if HOST.has("avx512f") else [])
# (target, lanes): every vector width the backend emits
VARIANTS = [("cpu -isa=avx2", 8), ("cpu -isa=avx2", 4)] + \
           ([("cpu -isa=avx512", 16)] if HOST.has("avx512f") else [])
VARIANT_IDS = [f"{spec.split('=')[1]}-f32x{lanes}" for spec, lanes in VARIANTS]

FLT_TINY = float(np.finfo(np.float32).tiny)
DENORMAL_STEP = 2.0 ** -149


# ----------------------------------------------------------------------------- masks and select

def make_relu(lanes):
    @kernel
    def relu(N: i32, x: f32[N], out: f32[N]):
        for c in range(cdiv(N, lanes)):
            n = min(N - c * lanes, lanes)
            v = vload(x[c * lanes], lanes, n)
            vstore(out[c * lanes], select(v > 0.0, v, 0.0), n)
    return relu


def make_where(lanes):
    @kernel
    def where(N: i32, lo: f32, hi: f32, x: f32[N], y: f32[N], out: f32[N]):
        for c in range(cdiv(N, lanes)):
            n = min(N - c * lanes, lanes)
            xv = vload(x[c * lanes], lanes, n)
            yv = vload(y[c * lanes], lanes, n)
            inside = xv > lo and xv < hi
            keep = inside or not yv <= 0.0
            vstore(out[c * lanes], select(keep, xv * yv, yv - xv), n)
    return where


def make_compare_all(lanes):
    @kernel
    def compare_all(N: i32, x: f32[N], y: f32[N], out: f32[8, N]):
        for c in range(cdiv(N, lanes)):
            n = min(N - c * lanes, lanes)
            xv = vload(x[c * lanes], lanes, n)
            yv = vload(y[c * lanes], lanes, n)
            one = broadcast(1.0, lanes)
            zero = broadcast(0.0, lanes)
            vstore(out[0, c * lanes], select(xv < yv, one, zero), n)
            vstore(out[1, c * lanes], select(xv <= yv, one, zero), n)
            vstore(out[2, c * lanes], select(xv == yv, one, zero), n)
            vstore(out[3, c * lanes], select(xv != yv, one, zero), n)
            vstore(out[4, c * lanes], select(xv >= yv, one, zero), n)
            "masks compared with masks: == is xnor, != is xor"
            vstore(out[5, c * lanes], select((xv < 0.0) == (yv < 0.0), one, zero), n)
            vstore(out[6, c * lanes], select((xv < 0.0) != (yv < 0.0), one, zero), n)
            "a select of masks, then the mask as 1.0 / 0.0"
            vstore(out[7, c * lanes], cast(select(xv < yv, xv < 0.0, yv < 0.0), f32), n)
    return compare_all


def make_mask_casts(lanes):
    @kernel
    def mask_casts(N: i32, flag: i32, x: f32[N], out: f32[3, N]):
        for c in range(cdiv(N, lanes)):
            n = min(N - c * lanes, lanes)
            xv = vload(x[c * lanes], lanes, n)
            "x != 0 as a mask (NaN counts as true, as in C), back to floats"
            vstore(out[0, c * lanes], cast(cast(xv, boolean), f32), n)
            "a scalar bool splatted into a mask"
            vstore(out[1, c * lanes], select(flag > 0 and xv < 0.0, -xv, xv), n)
            "a scalar condition choosing between whole vectors"
            vstore(out[2, c * lanes], select(flag > 0, xv + 1.0, xv - 1.0), n)
    return mask_casts


def _with_nans(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    x[::5] = np.nan
    x[1::7] = 0.0
    return x


@functools.lru_cache(maxsize=None)
def _build(spec, lanes, maker):
    return taskloom.build(maker(lanes), get_target(spec))


@pytest.mark.parametrize("spec, lanes", VARIANTS, ids=VARIANT_IDS)
def test_relu_via_select(spec, lanes):
    x = _with_nans(37, 0)
    out = np.full(37 + 16, 7.0, np.float32)
    _build(spec, lanes, make_relu)["relu"](x, out[:37])
    np.testing.assert_array_equal(out[:37], np.where(x > 0, x, np.float32(0)))  # NaN > 0 is false
    assert np.all(out[37:] == 7.0)


@pytest.mark.parametrize("spec, lanes", VARIANTS, ids=VARIANT_IDS)
def test_where_with_conditions_combined_by_and_or_not(spec, lanes):
    x, y = _with_nans(37, 1), _with_nans(37, 2)[::-1].copy()
    out = np.empty(37, np.float32)
    _build(spec, lanes, make_where)["where"](37, np.float32(-0.5), np.float32(1.0), x, y, out)
    with np.errstate(invalid="ignore"):
        keep = ((x > -0.5) & (x < 1.0)) | ~(y <= 0)
    np.testing.assert_array_equal(out, np.where(keep, x * y, y - x))


@pytest.mark.parametrize("spec, lanes", VARIANTS, ids=VARIANT_IDS)
def test_every_comparison_follows_c_on_nan(spec, lanes):
    x, y = _with_nans(37, 3), _with_nans(37, 4)
    y[::3] = x[::3]  # equal pairs, NaN pairs included
    out = np.empty((8, 37), np.float32)
    _build(spec, lanes, make_compare_all)["compare_all"](x, y, out)
    want = [x < y, x <= y, x == y, x != y, x >= y, (x < 0) == (y < 0), (x < 0) != (y < 0),
            np.where(x < y, x < 0, y < 0)]
    for k, w in enumerate(want):
        np.testing.assert_array_equal(out[k], w.astype(np.float32), err_msg=f"row {k}")


@pytest.mark.parametrize("spec, lanes", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("flag", [0, 1])
def test_mask_casts_and_scalar_conditions(spec, lanes, flag):
    x = _with_nans(37, 5)
    out = np.empty((3, 37), np.float32)
    _build(spec, lanes, make_mask_casts)["mask_casts"](37, flag, x, out)
    np.testing.assert_array_equal(out[0], (x != 0).astype(np.float32))
    np.testing.assert_array_equal(out[1], np.where(x < 0, -x, x) if flag else x)
    np.testing.assert_array_equal(out[2], x + 1 if flag else x - 1)


def test_masks_have_a_c_type_per_isa():
    from taskloom.backend.codegen_x86 import c_type
    assert [c_type(vec(boolean, n)) for n in (16, 8, 4)] == ["__mmask16", "__m256", "__m128"]
    if "cpu -isa=avx512" in TARGETS:
        src = open(_build("cpu -isa=avx512", 16, make_where).source_path).read()
        assert "const __mmask16 inside = _kand_mask16(_mm512_cmp_ps_mask(" in src
        assert "_CMP_LT_OQ" in src and "_mm512_mask_blend_ps(keep, " in src
    src = open(_build("cpu -isa=avx2", 8, make_where).source_path).read()
    assert "const __m256 inside = _mm256_and_ps(_mm256_cmp_ps(" in src and "_mm256_blendv_ps(" in src


# ----------------------------------------------------------------------------- vector math

UNARY = ("exp", "log", "tanh", "erf", "sigmoid", "floor", "ceil", "rsqrt")


def make_unary(lanes, func):
    op = lambda v: call(func, v)  # noqa: E731

    @kernel(name=f"vec_{func}")
    def unary(N: i32, x: f32[N], out: f32[N]):
        for c in range(cdiv(N, lanes)):
            n = min(N - c * lanes, lanes)
            vstore(out[c * lanes], op(vload(x[c * lanes], lanes, n)), n)
    return unary


def make_pow(lanes):
    @kernel
    def vpow(N: i32, a: f32[N], b: f32[N], out: f32[N]):
        for c in range(cdiv(N, lanes)):
            n = min(N - c * lanes, lanes)
            vstore(out[c * lanes], vload(a[c * lanes], lanes, n) ** vload(b[c * lanes], lanes, n), n)
    return vpow


@functools.lru_cache(maxsize=None)
def _math_module(spec, lanes):
    """One library per ISA holding a kernel per function, so one compiler run serves them all."""
    return taskloom.build([make_unary(lanes, f) for f in UNARY] + [make_pow(lanes)], get_target(spec))


SPECIALS = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 1e-45, -1e-45, FLT_TINY,
                       0.625, -0.625, 1.0 - 2 ** -24, 3.92, 9.5, 88.72, 88.73, -87.34, -103.9, -104.0,
                       -200.0, 1e30, -1e30, 3.4028235e38])


@functools.lru_cache(maxsize=None)
def _unary_inputs() -> np.ndarray:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, size=100_000, dtype=np.uint64).astype(np.uint32)
    dense = np.linspace(-12.0, 12.0, 120_001, dtype=np.float32)  # every branch point is inside
    x = np.concatenate([bits.view(np.float32), dense, dense / 97, SPECIALS])
    assert x.size % 16 and x.size % 8, "an odd length exercises the masked tail"
    return x


def _erf(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)


REFERENCES = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
              "erf": _erf, "floor": np.floor, "ceil": np.ceil, "rsqrt": lambda x: 1 / np.sqrt(x)}
# (relative, absolute) error bounds against float64; the absolute part covers denormal results
BOUNDS = {"exp": (4e-7, DENORMAL_STEP), "log": (4e-7, 0.0), "tanh": (4e-7, DENORMAL_STEP),
          "sigmoid": (4e-7, DENORMAL_STEP), "erf": (0.0, 3e-7), "floor": (0.0, 0.0),
          "ceil": (0.0, 0.0), "rsqrt": (2.4e-7, 0.0), "pow": (4e-7, DENORMAL_STEP)}


def check_against(name: str, out: np.ndarray, ref: np.ndarray, x: np.ndarray | None = None) -> None:
    """Asserts the error bounds of ``name``: NaN, inf and overflow exactly, the rest within BOUNDS."""
    with np.errstate(over="ignore"):
        ref32 = ref.astype(np.float32)
    special = ~np.isfinite(ref32)
    np.testing.assert_array_equal(out[special], ref32[special], err_msg=f"{name} on special values")
    rtol, atol = BOUNDS[name]
    ok = ~special
    err = np.abs(out[ok].astype(np.float64) - ref[ok])
    excess = err - (rtol * np.abs(ref[ok]) + atol)
    worst = int(np.argmax(excess))
    where = f"({x[ok][worst]!r})" if x is not None else f" (element {np.flatnonzero(ok)[worst]})"
    assert excess[worst] <= 0, f"{name}{where} = {out[ok][worst]!r}, want {ref[ok][worst]!r}"


@pytest.mark.parametrize("spec, lanes", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("name", UNARY)
def test_vector_math_accuracy(spec, lanes, name):
    x = _unary_inputs()
    out = np.full(x.size + 16, 7.0, np.float32)
    _math_module(spec, lanes)[f"vec_{name}"](x, out[:x.size])
    assert np.all(out[x.size:] == 7.0), "the masked tail wrote past the end"
    out = out[:x.size]
    with np.errstate(all="ignore"):
        ref = REFERENCES[name](x.astype(np.float64))
    check_against(name, out, ref, x)
    if name in ("tanh", "erf", "floor", "ceil"):  # odd or sign-keeping: -0 stays -0
        np.testing.assert_array_equal(np.signbit(out[x == 0]), np.signbit(x[x == 0]))


@pytest.mark.parametrize("spec, lanes", VARIANTS, ids=VARIANT_IDS)
def test_vector_math_special_values(spec, lanes):
    mod = _math_module(spec, lanes)
    x = np.float32([np.inf, -np.inf, np.nan, 0.0, -0.0, -1.0, 1e-45])

    def run(name):
        out = np.empty_like(x)
        mod[f"vec_{name}"](x, out)
        return out

    np.testing.assert_array_equal(run("exp")[:3], [np.inf, 0.0, np.nan])
    np.testing.assert_array_equal(run("log")[:6], [np.inf, np.nan, np.nan, -np.inf, -np.inf, np.nan])
    np.testing.assert_array_equal(run("tanh")[:3], [1.0, -1.0, np.nan])
    np.testing.assert_array_equal(run("sigmoid")[:5], [1.0, 0.0, np.nan, 0.5, 0.5])
    np.testing.assert_array_equal(run("erf")[:3], [1.0, -1.0, np.nan])
    np.testing.assert_array_equal(run("rsqrt")[:6], [0.0, np.nan, np.nan, np.inf, -np.inf, np.nan])


@functools.lru_cache(maxsize=None)
def _pow_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    n = 100_001
    a = np.abs(rng.integers(0, 2 ** 32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32))
    a[~np.isfinite(a)] = 1.5
    # exponents that keep most results inside the float range, where the relative bound bites
    target = rng.uniform(-105.0, 90.0, size=n)
    with np.errstate(all="ignore"):
        b = np.where(np.abs(np.log(a.astype(np.float64))) > 1e-3, target / np.log(a.astype(np.float64)),
                     rng.uniform(-100, 100, size=n)).astype(np.float32)
    neg = np.arange(n) % 5 == 0  # negative bases with integer exponents
    a[neg] = -rng.uniform(0.25, 4.0, size=neg.sum()).astype(np.float32)
    b[neg] = np.round(rng.uniform(-60, 60, size=neg.sum()))
    # C's table of special cases: every pair of these
    sa = np.float32([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, np.inf, -np.inf, np.nan, 1e-45])
    sb = np.float32([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0, 3.0, np.inf, -np.inf, np.nan, 1e30])
    A, B = (v.ravel() for v in np.meshgrid(sa, sb))
    return np.concatenate([a, A]).astype(np.float32), np.concatenate([b, B]).astype(np.float32)


@pytest.mark.parametrize("spec, lanes", VARIANTS, ids=VARIANT_IDS)
def test_vector_pow_matches_c_pow(spec, lanes):
    a, b = _pow_inputs()
    out = np.empty_like(a)
    _math_module(spec, lanes)["vpow"](a, b, out)
    with np.errstate(all="ignore"):
        ref = np.power(a.astype(np.float64), b.astype(np.float64))
    check_against("pow", out, ref)
    zero_or_inf = (ref == 0) | np.isinf(ref)  # signed zeros and infinities, as C's pow gives them
    np.testing.assert_array_equal(np.signbit(out[zero_or_inf]), np.signbit(ref[zero_or_inf]))


# ----------------------------------------------------------------------------- clear errors

def _vector_kernel(lanes, body):
    """``out[0:lanes] = body(x[0:lanes])`` as IR, for constructs the script would not build."""
    x, out = Var("x", f32[lanes]), Var("out", f32[lanes])
    v = E.vload(x[0], lanes)
    return Function("k", (x, out), S.vstore(out[0], body(v)))


@pytest.mark.parametrize("body, match", [
    (lambda v: call("sin", v), r"sin\(\) on vectors f32x8"),
    (lambda v: E.binary("mod", v, v), r"operator `mod` on f32x8"),
    (lambda v: E.select(E.binary("lt", v < 0.0, v < 1.0), v, v), r"operator `lt` on vector bools"),
    (lambda v: E.cast(E.cast(v, i32), f32), r"cast from i32x8 to f32x8"),
    (lambda v: E.select(call("abs", v < 0.0), v, v), r"abs\(\) on booleanx8 vectors"),
])
def test_unsupported_vector_constructs_are_named(body, match):
    with pytest.raises(CodegenError, match=match):
        taskloom.build(_vector_kernel(8, body), get_target("cpu -isa=avx2"))


def test_a_vector_condition_needs_vector_branches():
    x, out = Var("x", f32[8]), Var("out", f32[8])
    v = E.vload(x[0], 8)
    scalar_branches = Function("k", (x, out), S.store(out[0], E.Select(v < 0.0, x[0], x[1])))
    with pytest.raises(CodegenError, match=r"vector condition .* needs vector branches"):
        taskloom.build(scalar_branches, "cpu -isa=avx2")


def test_f32x4_math_needs_avx2():
    sse = get_target("cpu -isa=sse4_2")
    with pytest.raises(CodegenError, match=r"tanh\(\) on f32x4 vectors needs avx2"):
        taskloom.build(_vector_kernel(4, lambda v: call("tanh", v)), sse)
    from taskloom.backend.codegen_x86 import codegen_x86
    from taskloom import transforms
    src = codegen_x86(taskloom.ir.Module((transforms.lower(_vector_kernel(4, lambda v: call("floor", v))),)), sse)
    assert "_mm_floor_ps(" in src
