"""The x86-64 dialect of the C-family renderer: CPU kernels as C with OpenMP and intrinsics.

CPU workers are OpenMP threads (``parallel`` loops); vector values are AVX-512 registers
(``__m512``, 16 x f32) or, on AVX2 machines, ``__m256`` (8 x f32), and vector operations
become the matching intrinsics. Local buffers too large for the stack come from the
thread's scratch block of the prelude (:mod:`taskloom.backend.c_prelude`).

Vector bools (the result of comparing float vectors) are masks: ``__mmask16`` (one bit a
lane) for 16 lanes, and for 8 and 4 lanes ``__m256`` / ``__m128`` whose lanes are all ones
or all zeros, as ``_mm256_cmp_ps`` makes them. Any vector construct without a rule here is
a :class:`CodegenError`, never C that means something else.
"""
from __future__ import annotations

from taskloom.backend import codegen_c as base
from taskloom.backend.c_prelude import PRELUDE
from taskloom.backend.c_units import join_pieces
from taskloom.backend.codegen_c import CFamilyCodegen, checks_table
from taskloom.errors import CodegenError
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import PointerType, TensorType, Type, VectorType, dtype
from taskloom.target.cpu import CpuTarget

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
_VECTOR_MATH = {"sqrt", "rsqrt", "fma", "abs", "exp", "log", "tanh", "erf", "sigmoid", "floor", "ceil",
                "pow", "reduce_add", "reduce_max", "reduce_min"}
# f32x4 primitives that are plain SSE instructions; the others need AVX2 and FMA.
_SSE_VECTOR_MATH = {"sqrt", "rsqrt", "floor", "ceil"}
#: Local buffers up to this many bytes live on the stack; larger ones in the thread's scratch
#: (``tl_scratch_take`` in the prelude), kept between calls.
STACK_LIMIT = 64 * 1024


def c_type(t: Type, where: str = "") -> str:
    """The C spelling of ``t`` on x86: the C family's types and the vector registers."""
    if isinstance(t, VectorType):
        return _vector_info(t, where)[0]
    if isinstance(t, PointerType):
        return c_type(t.base, where) + "*"
    return base.c_type(t, where)


def _vector_info(t: VectorType, where: str) -> tuple[str, str, str]:
    """(C type, intrinsic prefix, ISA flag needed) of vector type ``t``."""
    info = _C_VECTOR.get((t.base.name, t.lanes))
    if info is None:
        supported = ", ".join(repr(VectorType(dtype(b), n)) for b, n in _C_VECTOR)
        raise CodegenError(f"{where}: the C backend has no vector type {t!r}; supported: {supported}")
    return info


def _is_mask(t: Type) -> bool:
    return isinstance(t, VectorType) and t.base.is_bool()


class X86Codegen(CFamilyCodegen):
    """One CPU function as C for an x86-64 target: OpenMP loops, vector intrinsics of the
    target's ISA, large local buffers in the thread's scratch."""

    target: CpuTarget

    def ctype(self, t: Type, where: str = "") -> str:
        """The C spelling of ``t``, vector registers included."""
        return c_type(t, where)

    # ----------------------------------------------------------------- vectors
    def vinfo(self, t: VectorType) -> tuple[str, str, str]:
        """:func:`_vector_info` of ``t``, which the target's ISA must have."""
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
        """A float vector comparison, as a mask."""
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
        """The complement of mask ``a``."""
        if t.lanes == 16:
            return f"_knot_mask16({a})"
        return f"{prefix}_xor_ps({a}, {self._all_ones(prefix)})"

    def mask_binary(self, e: E.Binary, t: VectorType, prefix: str) -> str:
        """Masks combined by and, or, == or !=."""
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
        """A scalar in every lane."""
        v = self.expr(e.value)
        if t.base.name == "float32":
            return f"{prefix}_set1_ps({v})"
        # a bool splat: every lane all ones (true) or all zeros (false)
        if t.lanes == 16:
            return f"({self._paren(e.value, 3)} ? (__mmask16)0xffff : (__mmask16)0)"
        bits = "si256" if prefix == "_mm256" else "si128"
        return f"{prefix}_cast{bits}_ps({prefix}_set1_epi32(-(int32_t){self._paren(e.value, 14)}))"

    def vector_select(self, e: E.Select, t: VectorType, prefix: str) -> str:
        """Lanes of ``e.a`` where the condition holds, else of ``e.b``."""
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
        """A mask as 0.0/1.0 floats, or floats as the mask of their non-zero lanes."""
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
        """Refuse a load or store of anything but f32 vectors."""
        if not (isinstance(t, VectorType) and t.base.name == "float32"):
            raise CodegenError(f"{self.where}: {what} of {t!r} vectors is not supported by the C backend; "
                               "only f32 vectors are loaded and stored (turn a mask into floats with "
                               "select(mask, 1.0, 0.0))")

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
    def stmt(self, s: S.Stmt, d: int) -> None:
        if isinstance(s, S.Barrier):
            raise CodegenError(f"{self.where}: barrier() is for CUDA kernels; a CPU kernel's parallel loop is an "
                               "OpenMP worksharing loop, whose iterations cannot wait for each other (split "
                               "the loop in two where the barrier is)")
        super().stmt(s, d)

    def loop_pragma(self, s: S.For) -> str | None:
        if s.kind == "parallel":  # one worker: no team to wake
            return None if E.is_const(s.extent, 1) else "#pragma omp parallel for schedule(static)"
        if s.kind == "vectorize":
            return "#pragma omp simd"
        return super().loop_pragma(s)

    def declare_buffer(self, s: S.Declare, d: int) -> None:
        """A local buffer on the stack when small and static, else in the thread's scratch."""
        t, name = s.var.type, base.c_name(s.var.name)
        assert isinstance(t, TensorType)
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
    def function(self) -> str:
        if self.fn.kind == "cuda_kernel":
            raise CodegenError(f"{self.where} is a CUDA kernel; the C backend builds CPU kernels and host code")
        return super().function()


def codegen_x86(module: S.Module, target: CpuTarget) -> str:
    """The C translation unit of a lowered module of CPU functions, for ``target``'s ISA."""
    return join_pieces(codegen_x86_pieces(module, target))


def codegen_x86_pieces(module: S.Module, target: CpuTarget) -> list[str]:
    """:func:`codegen_x86`'s source as its top-level pieces: the prelude, each function, then
    the library's tables and thread settings (what :mod:`taskloom.backend.c_units` splits into
    translation units)."""
    checks: list[str] = []
    pieces = [f"// Generated by taskloom for {target.name} ({target.key()}).\n\n{PRELUDE}"]
    pieces += [X86Codegen(f, target, checks).function() for f in module.functions]
    tail = [checks_table(checks)] if checks else []
    tail.append("void taskloom_set_num_threads(int n) { omp_set_num_threads(n > 0 ? n : 1); }\n"
                "int taskloom_get_num_threads(void) { return omp_get_max_threads(); }")
    return pieces + ["\n\n".join(tail)]
