"""C code generation for x86-64 from lowered IR (mappings lowered, buffers flattened).

CPU workers are OpenMP threads (``parallel`` loops); vector values are AVX-512 registers
(``__m512``, 16 x f32) or, on AVX2 machines, ``__m256`` (8 x f32), and vector operations
become the matching intrinsics. The output keeps the IR's names and comments so a reader
can find their kernel in it.

Vector bools (the result of comparing float vectors) are masks: ``__mmask16`` (one bit a
lane) for 16 lanes, and for 8 and 4 lanes ``__m256`` / ``__m128`` whose lanes are all ones
or all zeros, as ``_mm256_cmp_ps`` makes them. Any vector construct without a rule here is
a :class:`CodegenError`, never C that means something else.
"""
from __future__ import annotations

import json
import math

from taskloom.errors import CodegenError
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import DataType, PointerType, TensorType, Type, VectorType, dtype, index_type
from taskloom.ir.functor import collect
from taskloom.backend.c_prelude import PRELUDE
from taskloom.target.cpu import CpuTarget

_C_SCALAR = {"float64": "double", "float32": "float", "float16": "_Float16", "bfloat16": "tl_bf16",
             "int64": "int64_t", "int32": "int32_t", "int16": "int16_t", "int8": "int8_t",
             "uint8": "uint8_t", "bool": "bool"}
# (C type, intrinsic prefix, ISA flag needed) for each supported vector type
_C_VECTOR = {("float32", 16): ("__m512", "_mm512", "avx512f"),
             ("float32", 8): ("__m256", "_mm256", "avx2"),
             ("float32", 4): ("__m128", "_mm", "sse4_2"),
             ("bool", 16): ("__mmask16", "_mm512", "avx512f"),
             ("bool", 8): ("__m256", "_mm256", "avx2"),
             ("bool", 4): ("__m128", "_mm", "sse4_2")}
# Predicates of float vector comparisons. The quiet ordered ones are false when a lane is
# NaN, like C's <, <= and ==; != is unordered-or-not-equal, true for NaN as in C.
_CMP_PREDICATE = {"lt": "_CMP_LT_OQ", "le": "_CMP_LE_OQ", "eq": "_CMP_EQ_OQ", "ne": "_CMP_NEQ_UQ"}
# SSE's fixed-predicate compares give the same lane results for f32x4 without needing AVX.
_SSE_CMP = {"lt": "_mm_cmplt_ps", "le": "_mm_cmple_ps", "eq": "_mm_cmpeq_ps", "ne": "_mm_cmpneq_ps"}
_C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern
    float for goto if inline int long register restrict return short signed sizeof static struct
    switch typedef union unsigned void volatile while bool true false""".split())
# C operator precedence (higher binds tighter) for readable, minimal parentheses
_C_BIN = {"or": ("||", 3), "and": ("&&", 4), "bitor": ("|", 5), "bitxor": ("^", 6),
          "bitand": ("&", 7), "eq": ("==", 8), "ne": ("!=", 8), "lt": ("<", 9), "le": ("<=", 9),
          "shl": ("<<", 10), "shr": (">>", 10), "add": ("+", 11), "sub": ("-", 11),
          "mul": ("*", 12), "div": ("/", 12), "mod": ("%", 12)}
_ATOM = 15
_SCALAR_MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf",
                "floor": "floor", "ceil": "ceil", "sin": "sin", "cos": "cos", "pow": "pow",
                "fma": "fma", "abs": "fabs"}
_VECTOR_MATH = {"sqrt", "rsqrt", "fma", "abs", "exp", "log", "tanh", "erf", "sigmoid", "floor", "ceil",
                "pow", "reduce_add", "reduce_max", "reduce_min"}
# f32x4 primitives that are plain SSE instructions; the others need AVX2 and FMA.
_SSE_VECTOR_MATH = {"sqrt", "rsqrt", "floor", "ceil"}
#: Local buffers up to this many bytes live on the stack; larger ones in the thread's scratch
#: (``tl_scratch_take`` in the prelude), kept between calls.
STACK_LIMIT = 64 * 1024


# Names the headers of every generated file declare: a kernel may not take them as its symbol.
_C_LIBRARY = frozenset("""exp expf exp2 expm1 log logf log2 log10 log1p sqrt sqrtf cbrt pow powf abs labs
    fabs fabsf floor floorf ceil ceilf round trunc fmod remainder sin cos tan asin acos atan atan2
    sinh cosh tanh asinh acosh atanh erf erff erfc tgamma lgamma fma fmax fmin hypot ldexp frexp
    modf copysign nan isnan isinf signbit div ldiv free malloc calloc realloc aligned_alloc exit
    abort atexit rand srand qsort bsearch atoi atof strtol strtod getenv system min max main""".split())


def c_symbol(name: str) -> str:
    """The exported C symbol of a function named ``name``: the name itself unless a C keyword or
    a library function has it (an operator called ``exp`` is exported as ``exp_kernel``)."""
    return f"{name}_kernel" if name in _C_KEYWORDS or name in _C_LIBRARY or name.startswith("_") else name


def c_name(name: str) -> str:
    """The C identifier for an IR name (C keywords get a trailing underscore)."""
    return name + "_" if name in _C_KEYWORDS else name


def c_type(t: Type, where: str = "") -> str:
    if isinstance(t, DataType):
        return _C_SCALAR[t.name]
    if isinstance(t, VectorType):
        return _vector_info(t, where)[0]
    if isinstance(t, (PointerType, TensorType)):
        base = t.base if isinstance(t, PointerType) else t.dtype
        return c_type(base, where) + "*"
    raise CodegenError(f"{where}: no C type for {t!r}")


def _vector_info(t: VectorType, where: str) -> tuple[str, str, str]:
    info = _C_VECTOR.get((t.base.name, t.lanes))
    if info is None:
        supported = ", ".join(repr(VectorType(dtype(b), n)) for b, n in _C_VECTOR)
        raise CodegenError(f"{where}: the C backend has no vector type {t!r}; supported: {supported}")
    return info


def _is_mask(t: Type) -> bool:
    return isinstance(t, VectorType) and t.base.is_bool()


def _float_literal(v: float, t: DataType) -> str:
    if math.isnan(v):
        text = "NAN"
    elif math.isinf(v):
        text = "INFINITY" if v > 0 else "(-INFINITY)"
    else:
        text = repr(v)
        if "e" not in text and "." not in text:
            text += ".0"
        if t.name != "float64":
            text += "f"
    if t.name == "float16":
        return f"((_Float16){text})"
    if t.name == "bfloat16":
        return f"tl_f32_to_bf16({text})"
    return text


#: The name of the status parameter of a function with run-time checks (see the prelude).
STATUS = "tl_st"
#: The table of what each check of a library guards: ``taskloom_checks[check - 1]``.
CHECKS_SYMBOL = "taskloom_checks"


class _FunctionCodegen:
    def __init__(self, fn: S.Function, target: CpuTarget, checks: list[str] | None = None):
        self.fn = fn
        self.target = target
        self.checks = [] if checks is None else checks  # the library's checks, numbered from 1
        self.lines: list[str] = []
        self.heap_buffers: list[list[str]] = []
        self.where = f"kernel '{fn.name}'"
        self.written = {s.tensor for s in collect(fn.body, (S.BufferStore, S.VectorStore))}  # type: ignore[attr-defined]

    def ctype(self, t: Type, where: str = "") -> str:
        """The C spelling of type ``t`` (a dialect spells some differently)."""
        return c_type(t, where)

    # ----------------------------------------------------------------- expressions
    def expr(self, e: E.Expr) -> str:
        return self._expr(e)[0]

    def _paren(self, e: E.Expr, prec: int) -> str:
        text, p = self._expr(e)
        return text if p >= prec else f"({text})"

    def _expr(self, e: E.Expr) -> tuple[str, int]:
        if isinstance(e, E.Var):
            return c_name(e.name), _ATOM
        if isinstance(e, E.Constant):
            return self.constant(e)
        if isinstance(e.type, VectorType) and not isinstance(e, (E.TensorElement, E.VectorLoad, E.Call)):
            return self.vector_op(e), _ATOM
        if isinstance(e, E.Binary):
            t = e.a.type
            if isinstance(t, DataType) and t.name == "bfloat16":
                return self.bf16_binary(e), _ATOM
            if e.op in ("min", "max"):
                return f"tl_{e.op}_{t.short}({self.expr(e.a)}, {self.expr(e.b)})", _ATOM  # type: ignore[union-attr]
            if e.op == "mod" and isinstance(t, DataType) and t.is_float():
                return f"fmod{'f' if t.name == 'float32' else ''}({self.expr(e.a)}, {self.expr(e.b)})", _ATOM
            sym, p = _C_BIN[e.op]
            return f"{self._paren(e.a, p)} {sym} {self._paren(e.b, p + 1)}", p
        if isinstance(e, E.Unary):
            sym = {"neg": "-", "not": "!", "bitnot": "~"}[e.op]
            return f"{sym}{self._paren(e.a, 14)}", 14
        if isinstance(e, E.Cast):
            src, dst = e.value.type, e.dtype
            if isinstance(src, DataType) and src.name == "bfloat16":
                inner = f"tl_bf16_to_f32({self.expr(e.value)})"
                return (inner, _ATOM) if dst.name == "float32" else (f"(({self.ctype(dst)}){inner})", _ATOM)
            if dst.name == "bfloat16":
                return f"tl_f32_to_bf16((float){self._paren(e.value, 14)})", _ATOM
            return f"({self.ctype(dst)}){self._paren(e.value, 14)}", 14
        if isinstance(e, E.Select):
            if isinstance(e.cond.type, VectorType):
                raise CodegenError(f"{self.where}: select() with the vector condition `{e.cond!r}` needs vector "
                                   f"branches of {e.cond.type.lanes} lanes, got {e.type!r} in `{e!r}`")
            return f"{self._paren(e.cond, 3)} ? {self._paren(e.a, 3)} : {self._paren(e.b, 2)}", 2
        if isinstance(e, E.TensorElement):
            return f"{self._paren(e.tensor, _ATOM)}[{self.index(e)}]", _ATOM
        if isinstance(e, E.VectorLoad):
            return self.vector_load(e), _ATOM
        if isinstance(e, E.Call):
            return self.call(e), _ATOM
        if isinstance(e, E.IndexCheck):
            return self.index_check(e)
        raise CodegenError(f"{self.where}: the C backend cannot emit {type(e).__name__} `{e!r}`")

    def index(self, e: E.TensorElement | E.VectorLoad | S.BufferStore | S.VectorStore | S.Prefetch) -> str:
        if len(e.indices) != 1:
            raise CodegenError(f"{self.where}: access to {E._name(e.tensor)} is not flattened; "
                               "run taskloom.transforms.lower first")
        return self.expr(e.indices[0])

    def constant(self, c: E.Constant) -> tuple[str, int]:
        t = c.type
        if t.is_float():
            text = _float_literal(c.value, t)  # type: ignore[arg-type]
        elif t.is_bool():
            text = "true" if c.value else "false"
        elif t.name == "int64":
            text = f"INT64_C({c.value})"
        elif t == index_type:
            text = str(c.value)
        else:
            text = f"(({self.ctype(t)}){c.value})"
        return text, (14 if text.startswith("-") else _ATOM)

    def check_number(self, what: str) -> int:
        """The number of the library's check ``what`` (the same text, the same number)."""
        if what not in self.checks:
            self.checks.append(what)
        return self.checks.index(what) + 1

    def index_check(self, e: E.IndexCheck) -> tuple[str, int]:
        """A call of the prelude's ``tl_index``, which reports a bad index to ``tl_st``."""
        number = self.check_number(e.what)
        note = e.what.replace("*/", "* /")
        call = (f"tl_index{'_wrap' if e.wrap else ''}({self.expr(e.value)}, {self.expr(e.extent)}, "
                f"{STATUS}, {number} /* {note} */)")
        if e.type == dtype("int64"):
            return call, _ATOM
        return f"({self.ctype(e.type)}){call}", 14

    def bf16_binary(self, e: E.Binary) -> str:
        a, b = f"tl_bf16_to_f32({self.expr(e.a)})", f"tl_bf16_to_f32({self.expr(e.b)})"
        if e.op in ("min", "max"):
            f = f"tl_{e.op}_f32({a}, {b})"
        else:
            f = f"({a} {_C_BIN[e.op][0]} {b})"
        return f if e.op in ("lt", "le", "eq", "ne") else f"tl_f32_to_bf16({f})"

    def call(self, e: E.Call) -> str:
        args = ", ".join(self.expr(a) for a in e.args)
        t = e.args[0].type
        if isinstance(t, VectorType):
            return self.vector_call(e, t, args)
        assert isinstance(t, DataType)
        if e.func in ("reduce_add", "reduce_max", "reduce_min"):
            raise CodegenError(f"{self.where}: {e.func}() needs a vector argument")
        if t.is_integer():
            if e.func != "abs":
                raise CodegenError(f"{self.where}: {e.func}() on integers is not supported")
            return f"tl_abs_{t.short}({args})"
        if t.name in ("float16", "bfloat16"):
            conv = [f"tl_bf16_to_f32({self.expr(a)})" if t.name == "bfloat16" else f"(float){self._paren(a, 14)}"
                    for a in e.args]
            inner = self._float_call(e.func, "float32", ", ".join(conv))
            return f"tl_f32_to_bf16({inner})" if t.name == "bfloat16" else f"(_Float16){inner}"
        return self._float_call(e.func, t.name, args)

    @staticmethod
    def _float_call(func: str, dtype: str, args: str) -> str:
        suffix = "f" if dtype == "float32" else ""
        if func == "rsqrt":
            return f"(1.0{suffix} / sqrt{suffix}({args}))"
        if func == "sigmoid":
            return f"tl_sigmoid_{'f32' if suffix else 'f64'}({args})"
        return f"{_SCALAR_MATH[func]}{suffix}({args})"

    def vinfo(self, t: VectorType) -> tuple[str, str, str]:
        info = _vector_info(t, self.where)
        if not self.target.has(info[2]):
            raise CodegenError(f"{self.where}: {t!r} vectors need {info[2]}, which target {self.target.key()} "
                               f"lacks; choose lanes with target.vector_lanes(dtype)")
        return info

    def vector_call(self, e: E.Call, t: VectorType, args: str) -> str:
        if e.func not in _VECTOR_MATH:
            raise CodegenError(f"{self.where}: {e.func}() on vectors {t!r} is not supported by the "
                               f"C backend (vector primitives: {', '.join(sorted(_VECTOR_MATH))})")
        if t.base.name != "float32":
            raise CodegenError(f"{self.where}: {e.func}() on {t!r} vectors is not supported by the C backend; "
                               f"vector primitives take f32 vectors (in `{e!r}`)")
        ctype, prefix, _ = self.vinfo(t)
        if t.lanes == 4 and e.func not in _SSE_VECTOR_MATH and not (self.target.has("avx2") and self.target.has("fma")):
            raise CodegenError(f"{self.where}: {e.func}() on f32x4 vectors needs avx2 and fma, which target "
                               f"{self.target.key()} lacks")
        if e.func == "sqrt":
            return f"{prefix}_sqrt_ps({args})"
        if e.func == "rsqrt":  # exact 1/sqrt, not the 12-bit rsqrt estimate
            return f"{prefix}_div_ps({prefix}_set1_ps(1.0f), {prefix}_sqrt_ps({args}))"
        if e.func == "fma":
            return f"{prefix}_fmadd_ps({args})"
        if e.func in ("floor", "ceil"):
            if t.lanes == 16:
                mode = "_MM_FROUND_TO_NEG_INF" if e.func == "floor" else "_MM_FROUND_TO_POS_INF"
                return f"_mm512_roundscale_ps({args}, {mode} | _MM_FROUND_NO_EXC)"
            return f"{prefix}_{e.func}_ps({args})"
        return f"tl_{e.func}_f32x{t.lanes}({args})"

    def vector_op(self, e: E.Expr) -> str:
        t = e.type
        assert isinstance(t, VectorType)
        if isinstance(e, E.Cast):
            return self.vector_cast(e, t)
        ctype, prefix, _ = self.vinfo(t)
        if isinstance(e, E.Broadcast):
            return self.vector_broadcast(e, t, prefix)
        if isinstance(e, E.Select):
            return self.vector_select(e, t, prefix)
        if isinstance(e, E.Binary) and _is_mask(e.a.type):
            return self.mask_binary(e, t, prefix)
        if isinstance(e, E.Unary) and _is_mask(t) and e.op == "not":
            return self.mask_not(self.expr(e.a), t, prefix)
        operand = e.a.type if isinstance(e, (E.Binary, E.Unary)) else t
        if isinstance(operand, VectorType) and operand.base.name == "float32":
            if isinstance(e, E.Binary) and e.op in ("add", "sub", "mul", "div"):
                return f"{prefix}_{e.op}_ps({self.expr(e.a)}, {self.expr(e.b)})"
            if isinstance(e, E.Binary) and e.op in ("min", "max"):  # NaN-propagating, from the prelude
                return f"tl_{e.op}_f32x{t.lanes}({self.expr(e.a)}, {self.expr(e.b)})"
            if isinstance(e, E.Binary) and e.op in _CMP_PREDICATE:
                return self.vector_compare(e.op, self.expr(e.a), self.expr(e.b), t.lanes, prefix)
            if isinstance(e, E.Unary) and e.op == "neg":  # flips the sign bit: -(0.0) is -0.0
                neg = "tl_xor_f32x16" if t.lanes == 16 else f"{prefix}_xor_ps"
                return f"{neg}({self.expr(e.a)}, {prefix}_set1_ps(-0.0f))"
        what = f"the operator `{e.op}`" if isinstance(e, (E.Binary, E.Unary)) else type(e).__name__
        operands = f"{operand!r} operands" if isinstance(e, (E.Binary, E.Unary)) else f"{t!r} vectors"
        raise CodegenError(f"{self.where}: {what} on {operands} is not supported by the C backend (in `{e!r}`)")

    @staticmethod
    def vector_compare(op: str, a: str, b: str, lanes: int, prefix: str) -> str:
        if lanes == 16:
            return f"_mm512_cmp_ps_mask({a}, {b}, {_CMP_PREDICATE[op]})"
        if lanes == 4:
            return f"{_SSE_CMP[op]}({a}, {b})"
        return f"{prefix}_cmp_ps({a}, {b}, {_CMP_PREDICATE[op]})"

    @staticmethod
    def _all_ones(prefix: str) -> str:
        bits = "si256" if prefix == "_mm256" else "si128"
        return f"{prefix}_cast{bits}_ps({prefix}_set1_epi32(-1))"

    def mask_not(self, a: str, t: VectorType, prefix: str) -> str:
        if t.lanes == 16:
            return f"_knot_mask16({a})"
        return f"{prefix}_xor_ps({a}, {self._all_ones(prefix)})"

    def mask_binary(self, e: E.Binary, t: VectorType, prefix: str) -> str:
        a, b = self.expr(e.a), self.expr(e.b)
        if t.lanes == 16:
            k = {"and": "_kand_mask16", "or": "_kor_mask16", "eq": "_kxnor_mask16", "ne": "_kxor_mask16"}.get(e.op)
            if k is not None:
                return f"{k}({a}, {b})"
        elif e.op in ("and", "or"):
            return f"{prefix}_{e.op}_ps({a}, {b})"
        elif e.op in ("eq", "ne"):
            differ = f"{prefix}_xor_ps({a}, {b})"
            return differ if e.op == "ne" else self.mask_not(differ, t, prefix)
        raise CodegenError(f"{self.where}: the operator `{e.op}` on vector bools {e.a.type!r} is not supported by "
                           f"the C backend; masks combine with and, or, not, == and != (in `{e!r}`)")

    def vector_broadcast(self, e: E.Broadcast, t: VectorType, prefix: str) -> str:
        v = self.expr(e.value)
        if t.base.name == "float32":
            return f"{prefix}_set1_ps({v})"
        # a bool splat: every lane all ones (true) or all zeros (false)
        if t.lanes == 16:
            return f"({self._paren(e.value, 3)} ? (__mmask16)0xffff : (__mmask16)0)"
        bits = "si256" if prefix == "_mm256" else "si128"
        return f"{prefix}_cast{bits}_ps({prefix}_set1_epi32(-(int32_t){self._paren(e.value, 14)}))"

    def vector_select(self, e: E.Select, t: VectorType, prefix: str) -> str:
        c, a, b = self.expr(e.cond), self.expr(e.a), self.expr(e.b)
        ct = e.cond.type
        if not isinstance(ct, VectorType):
            return f"({self._paren(e.cond, 3)} ? {self._paren(e.a, 3)} : {self._paren(e.b, 2)})"
        if ct.lanes != t.lanes:
            raise CodegenError(f"{self.where}: select() with a {ct!r} condition and {t!r} branches; the lane "
                               f"counts must match (in `{e!r}`)")
        if t.lanes == 16:
            if _is_mask(t):
                return f"_kor_mask16(_kand_mask16({c}, {a}), _kandn_mask16({c}, {b}))"
            return f"_mm512_mask_blend_ps({c}, {b}, {a})"
        return f"{prefix}_blendv_ps({b}, {a}, {c})"  # masks are all-ones lanes, so this also selects masks

    def vector_cast(self, e: E.Cast, t: VectorType) -> str:
        src = e.value.type
        if not ((_is_mask(src) and t.base.name == "float32")
                or (_is_mask(t) and isinstance(src, VectorType) and src.base.name == "float32")):
            raise CodegenError(f"{self.where}: a cast from {src!r} to {t!r} is not supported by the C backend; "
                               f"vector casts are between f32 and bool vectors (in `{e!r}`)")
        ctype, prefix, _ = self.vinfo(t)
        v = self.expr(e.value)
        if _is_mask(src):  # true -> 1.0, false -> 0.0
            if t.lanes == 16:
                return f"_mm512_maskz_mov_ps({v}, _mm512_set1_ps(1.0f))"
            return f"{prefix}_and_ps({v}, {prefix}_set1_ps(1.0f))"
        return self.vector_compare("ne", v, f"{prefix}_setzero_ps()", t.lanes, prefix)  # x != 0: NaN is true

    def _f32_vector(self, t: Type, what: str) -> None:
        if not (isinstance(t, VectorType) and t.base.name == "float32"):
            raise CodegenError(f"{self.where}: {what} of {t!r} vectors is not supported by the C backend; "
                               "only f32 vectors are loaded and stored (turn a mask into floats with "
                               "select(mask, 1.0, 0.0))")

    def _address(self, tensor: E.Expr, index: str) -> str:
        return f"&{self._paren(tensor, _ATOM)}[{index}]"

    def vector_load(self, e: E.VectorLoad) -> str:
        self._f32_vector(e.type, "a vector load")
        ctype, prefix, _ = self.vinfo(e.type)  # type: ignore[arg-type]
        addr = self._address(e.tensor, self.index(e))
        if e.stride != 1:
            return self._gather(e, addr)
        if e.count is None:
            return f"{prefix}_loadu_ps({addr})"
        if e.lanes == 16:
            return f"_mm512_maskz_loadu_ps(tl_mask16({self.expr(e.count)}), {addr})"
        return f"{prefix}_maskload_ps({addr}, tl_mask{e.lanes}({self.expr(e.count)}))"

    def _gather(self, e: E.VectorLoad, addr: str) -> str:
        """Every ``stride``-th element: one gather with constant offsets (AVX2 and AVX-512)."""
        if e.lanes not in (8, 16):
            raise CodegenError(f"{self.where}: a strided vector load needs 8 or 16 lanes (AVX2 or AVX-512), "
                               f"got {e.lanes}")
        offsets = ", ".join(str(k * e.stride) for k in range(e.lanes))
        if e.lanes == 16:
            idx = f"_mm512_setr_epi32({offsets})"
            if e.count is None:
                return f"_mm512_i32gather_ps({idx}, {addr}, 4)"
            return f"_mm512_mask_i32gather_ps(_mm512_setzero_ps(), tl_mask16({self.expr(e.count)}), {idx}, {addr}, 4)"
        idx = f"_mm256_setr_epi32({offsets})"
        if e.count is None:
            return f"_mm256_i32gather_ps({addr}, {idx}, 4)"
        return (f"_mm256_mask_i32gather_ps(_mm256_setzero_ps(), {addr}, {idx}, "
                f"_mm256_castsi256_ps(tl_mask8({self.expr(e.count)})), 4)")

    def vector_store(self, s: S.VectorStore) -> str:
        t = s.value.type
        self._f32_vector(t, "a vector store")
        ctype, prefix, _ = self.vinfo(t)  # type: ignore[arg-type]
        addr = self._address(s.tensor, self.index(s))
        v = self.expr(s.value)
        if s.count is None:
            return f"{prefix}_storeu_ps({addr}, {v});"
        if t.lanes == 16:  # type: ignore[union-attr]
            return f"_mm512_mask_storeu_ps({addr}, tl_mask16({self.expr(s.count)}), {v});"
        return f"{prefix}_maskstore_ps({addr}, tl_mask{t.lanes}({self.expr(s.count)}), {v});"  # type: ignore[union-attr]

    # ----------------------------------------------------------------- statements
    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def block(self, s: S.Stmt, depth: int) -> None:
        self.heap_buffers.append([])
        self.stmt(s, depth)
        for release in reversed(self.heap_buffers.pop()):
            self.emit(depth, release)

    def stmt(self, s: S.Stmt, d: int) -> None:
        if isinstance(s, S.SeqStmt):
            for x in s.stmts:
                self.stmt(x, d)
        elif isinstance(s, S.For):
            v, n = c_name(s.var.name), self.expr(s.extent)
            if s.kind == "parallel" and not E.is_const(s.extent, 1):  # one worker: no team to wake
                self.emit(d, "#pragma omp parallel for schedule(static)")
            elif s.kind == "unroll":
                self.emit(d, self.unroll_pragma(s))
            elif s.kind == "vectorize":
                self.emit(d, "#pragma omp simd")
            self.emit(d, f"for ({self.ctype(s.var.type)} {v} = 0; {v} < {n}; ++{v}) {{")
            self.block(s.body, d + 1)
            self.emit(d, "}")
        elif isinstance(s, S.ForMapping):
            raise CodegenError(f"{self.where}: a task-mapping loop reached code generation; "
                               "run taskloom.transforms.lower first")
        elif isinstance(s, S.If):
            self.emit(d, f"if ({self.expr(s.cond)}) {{")
            self.block(s.then_body, d + 1)
            if s.else_body is not None:
                self.emit(d, "} else {")
                self.block(s.else_body, d + 1)
            self.emit(d, "}")
        elif isinstance(s, S.Let):
            self.emit(d, f"const {self.ctype(s.var.type, self.where)} {c_name(s.var.name)} = {self.expr(s.value)};")
        elif isinstance(s, S.Declare):
            self.declare(s, d)
        elif isinstance(s, S.Assign):
            self.emit(d, f"{c_name(s.var.name)} = {self.expr(s.value)};")
        elif isinstance(s, S.BufferStore):
            self.emit(d, f"{self._paren(s.tensor, _ATOM)}[{self.index(s)}] = {self.expr(s.value)};")
        elif isinstance(s, S.VectorStore):
            self.emit(d, self.vector_store(s))
        elif isinstance(s, S.Evaluate):
            self.emit(d, f"{self.expr(s.expr)};")
        elif isinstance(s, S.Prefetch):  # for reading, into L2 (locality 2: prefetcht1 on x86)
            self.emit(d, f"__builtin_prefetch({self._address(s.tensor, self.index(s))}, 0, 2);")
        elif isinstance(s, S.Barrier):
            raise CodegenError(f"{self.where}: barrier() is for CUDA kernels; a CPU kernel's parallel loop is an "
                               "OpenMP worksharing loop, whose iterations cannot wait for each other (split "
                               "the loop in two where the barrier is)")
        elif isinstance(s, S.Comment):
            for line in s.text.splitlines() or [""]:
                self.emit(d, f"// {line}")
        else:
            raise CodegenError(f"{self.where}: the C backend cannot emit {type(s).__name__}")

    def unroll_pragma(self, s: S.For) -> str:
        """The pragma that asks the compiler to unroll loop ``s``."""
        return f"#pragma GCC unroll {s.extent.value if E.is_const(s.extent) else 8}"  # type: ignore[attr-defined]

    def declare(self, s: S.Declare, d: int) -> None:
        t, name = s.var.type, c_name(s.var.name)
        if not isinstance(t, TensorType):
            init = "" if s.init is None else f" = {self.expr(s.init)}"
            self.emit(d, f"{self.ctype(t, self.where)} {name}{init};")
            return
        elem = self.ctype(t.dtype, self.where)
        size = t.shape[0]
        nbytes = size.value * t.dtype.nbytes if E.is_const(size) else None  # type: ignore[attr-defined]
        if s.scope != "global" and nbytes is not None and nbytes <= STACK_LIMIT:
            self.emit(d, f"{elem} {name}[{size.value}] __attribute__((aligned(64)));  // {s.scope}")  # type: ignore[attr-defined]
            return
        n = self.expr(size)
        bytes_expr = f"tl_round_up((size_t)({n}) * sizeof({elem}), 64)"
        if s.scope != "global" and nbytes is None:
            # a symbolic size: a stack array when small (no scratch call per loop
            # iteration), the thread's scratch when large (thread stacks are small)
            limit = STACK_LIMIT // t.dtype.nbytes
            self.emit(d, f"{elem} {name}_stack[({n}) <= {limit} ? ({n}) : 1] __attribute__((aligned(64)));")
            self.emit(d, f"{elem}* {name} = ({n}) <= {limit} ? {name}_stack : ({elem}*)tl_scratch_take({bytes_expr});")
            self.heap_buffers[-1].append(f"if ({name} != {name}_stack) tl_scratch_give({name});")
            return
        why = "global scope" if s.scope == "global" else "too large for the stack"
        self.emit(d, f"{elem}* {name} = ({elem}*)tl_scratch_take({bytes_expr});  // {why}: the thread's scratch")
        self.heap_buffers[-1].append(f"tl_scratch_give({name});")

    # ----------------------------------------------------------------- function
    def param(self, p: E.Var) -> str:
        t = p.type
        if isinstance(t, (TensorType, PointerType)):
            const = "" if p in self.written else "const "
            return f"{const}{self.ctype(t, self.where)} __restrict__ {c_name(p.name)}"
        return f"{self.ctype(t, self.where)} {c_name(p.name)}"

    def function(self) -> str:
        if self.fn.kind == "cuda_kernel":
            raise CodegenError(f"{self.where} is a CUDA kernel; the C backend builds CPU kernels and host code")
        doc = self.fn.attr("doc")
        if doc:
            self.lines += ["/*", *(f" * {l}".rstrip() for l in doc.splitlines()), " */"]
        params = ", ".join([self.param(p) for p in self.fn.params]
                           + ([f"tl_status* __restrict__ {STATUS}"] if self.fn.reports_status else [])) or "void"
        self.emit(0, f"void {c_symbol(self.fn.name)}({params}) {{")
        self.block(self.fn.body, 1)
        self.emit(0, "}")
        return "\n".join(self.lines)


def checks_table(checks: list[str]) -> str:
    """The C table of what each run-time check guards, which the runtime reads when a
    status reports a failure."""
    rows = "".join(f"\n  {json.dumps(what)}," for what in checks)
    return (f"/* What each run-time check guards, by number (a status's check - 1). */\n"
            f"const char* const {CHECKS_SYMBOL}[] = {{{rows}\n}};")


def codegen_c(module: S.Module, target: CpuTarget) -> str:
    """The C translation unit for a lowered module, for ``target``'s ISA."""
    parts = [f"// Generated by taskloom for {target.name} ({target.key()}).", PRELUDE]
    checks: list[str] = []
    parts += [_FunctionCodegen(f, target, checks).function() for f in module.functions]
    if checks:
        parts.append(checks_table(checks))
    parts.append("void taskloom_set_num_threads(int n) { omp_set_num_threads(n > 0 ? n : 1); }\n"
                 "int taskloom_get_num_threads(void) { return omp_get_max_threads(); }")
    return "\n\n".join(parts) + "\n"
