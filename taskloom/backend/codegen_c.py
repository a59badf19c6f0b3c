"""The C-family renderer: lowered IR (mappings lowered, buffers flattened) as C.

What every dialect shares is here: names, scalar types and literals, expressions with
minimal parentheses, control flow, declarations, run-time index checks and the table of
what they guard. A dialect subclasses :class:`CFamilyCodegen` and spells what differs
through its hooks (:meth:`~CFamilyCodegen.ctype`, :meth:`~CFamilyCodegen.loop_pragma`,
:meth:`~CFamilyCodegen.declare_buffer`, the ``vector_*`` methods, :meth:`~CFamilyCodegen.function`):
:mod:`taskloom.backend.codegen_x86` for CPUs, :mod:`taskloom.backend.codegen_cuda` for
GPUs. The output keeps the IR's names and comments so a reader can find their kernel in
it; a construct without a rule is a :class:`CodegenError`, never C that means something
else.
"""
from __future__ import annotations

import json
import math
from typing import Any

from taskloom.errors import CodegenError
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import DataType, PointerType, TensorType, Type, VectorType, dtype, index_type
from taskloom.ir.functor import collect
from taskloom.target.base import Target

_C_SCALAR = {"float64": "double", "float32": "float", "float16": "_Float16", "bfloat16": "tl_bf16",
             "int64": "int64_t", "int32": "int32_t", "int16": "int16_t", "int8": "int8_t",
             "uint8": "uint8_t", "bool": "bool"}
_C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern
    float for goto if inline int long register restrict return short signed sizeof static struct
    switch typedef union unsigned void volatile while bool true false""".split())
# C operator precedence (higher binds tighter) for readable, minimal parentheses
_C_BIN = {"or": ("||", 3), "and": ("&&", 4), "bitor": ("|", 5), "bitxor": ("^", 6),
          "bitand": ("&", 7), "eq": ("==", 8), "ne": ("!=", 8), "lt": ("<", 9), "le": ("<=", 9),
          "shl": ("<<", 10), "shr": (">>", 10), "add": ("+", 11), "sub": ("-", 11),
          "mul": ("*", 12), "div": ("/", 12), "mod": ("%", 12)}
#: The precedence of an expression that never needs parentheses (a name, a call, an element).
ATOM = 15
_SCALAR_MATH = {"exp": "exp", "exp2": "exp2", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf",
                "floor": "floor", "ceil": "ceil", "sin": "sin", "cos": "cos", "pow": "pow",
                "fma": "fma", "abs": "fabs", "atan2": "atan2", "round": "nearbyint",  # (halves to even)
                **{f: f for f in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log10")}}


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
    """The C spelling of a scalar type or a pointer to one (a dialect adds its vector types)."""
    if isinstance(t, DataType):
        return _C_SCALAR[t.name]
    if isinstance(t, (PointerType, TensorType)):
        base = t.base if isinstance(t, PointerType) else t.dtype
        return c_type(base, where) + "*"
    raise CodegenError(f"{where}: no C type for {t!r}")


def float_literal(v: float, t: DataType) -> str:
    """The C literal of float ``v`` of type ``t`` (16-bit floats converted from a float)."""
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


class CFamilyCodegen:
    """Renders one lowered function as C; a dialect overrides the hooks where it differs.

    ``checks`` is the library's list of run-time checks, shared by its functions and
    numbered from 1 in the order they are met.
    """

    def __init__(self, fn: S.Function, target: Target, checks: list[str] | None = None):
        self.fn = fn
        self.target = target
        self.checks = [] if checks is None else checks  # the library's checks, numbered from 1
        self.lines: list[str] = []
        self.heap_buffers: list[list[str]] = []  # per open block: what releases its buffers at its end
        self.where = f"kernel '{fn.name}'"
        self.written = {s.tensor for s in collect(fn.body, (S.BufferStore, S.VectorStore))}  # type: ignore[attr-defined]

    def ctype(self, t: Type, where: str = "") -> str:
        """The C spelling of type ``t`` (a dialect spells some differently)."""
        return c_type(t, where)

    # ----------------------------------------------------------------- expressions
    def expr(self, e: E.Expr) -> str:
        """The C text of expression ``e``."""
        return self._expr(e)[0]

    def _paren(self, e: E.Expr, prec: int) -> str:
        text, p = self._expr(e)
        return text if p >= prec else f"({text})"

    def _expr(self, e: E.Expr) -> tuple[str, int]:
        """The C text of ``e`` and the precedence of its outermost operator."""
        if isinstance(e, E.Var):
            return c_name(e.name), ATOM
        if isinstance(e, E.Constant):
            return self.constant(e)
        if isinstance(e.type, VectorType) and not isinstance(e, (E.TensorElement, E.VectorLoad, E.Call)):
            return self.vector_op(e), ATOM
        if isinstance(e, E.Binary):
            return self.binary(e)
        if isinstance(e, E.Unary):
            sym = {"neg": "-", "not": "!", "bitnot": "~"}[e.op]
            return f"{sym}{self._paren(e.a, 14)}", 14
        if isinstance(e, E.Cast):
            return self.cast(e)
        if isinstance(e, E.Select):
            if isinstance(e.cond.type, VectorType):
                raise CodegenError(f"{self.where}: select() with the vector condition `{e.cond!r}` needs vector "
                                   f"branches of {e.cond.type.lanes} lanes, got {e.type!r} in `{e!r}`")
            return f"{self._paren(e.cond, 3)} ? {self._paren(e.a, 3)} : {self._paren(e.b, 2)}", 2
        if isinstance(e, E.TensorElement):
            return f"{self._paren(e.tensor, ATOM)}[{self.index(e)}]", ATOM
        if isinstance(e, E.VectorLoad):
            return self.vector_load(e), ATOM
        if isinstance(e, E.Call):
            return self.call(e), ATOM
        if isinstance(e, E.IndexCheck):
            return self.index_check(e)
        raise CodegenError(f"{self.where}: the C backend cannot emit {type(e).__name__} `{e!r}`")

    def binary(self, e: E.Binary) -> tuple[str, int]:
        """A scalar binary operator: C's own, or a prelude helper where C has none."""
        t = e.a.type
        if isinstance(t, DataType) and t.name == "bfloat16":
            return self.bf16_binary(e), ATOM
        if e.op in ("min", "max"):
            return f"tl_{e.op}_{t.short}({self.expr(e.a)}, {self.expr(e.b)})", ATOM  # type: ignore[union-attr]
        if e.op == "mod" and isinstance(t, DataType) and t.is_float():
            return f"fmod{'f' if t.name == 'float32' else ''}({self.expr(e.a)}, {self.expr(e.b)})", ATOM
        sym, p = _C_BIN[e.op]
        return f"{self._paren(e.a, p)} {sym} {self._paren(e.b, p + 1)}", p

    def cast(self, e: E.Cast) -> tuple[str, int]:
        """A scalar conversion; bfloat16 goes through float."""
        src, dst = e.value.type, e.dtype
        if isinstance(src, DataType) and src.name == "bfloat16":
            inner = f"tl_bf16_to_f32({self.expr(e.value)})"
            return (inner, ATOM) if dst.name == "float32" else (f"(({self.ctype(dst)}){inner})", ATOM)
        if dst.name == "bfloat16":
            return f"tl_f32_to_bf16((float){self._paren(e.value, 14)})", ATOM
        return f"({self.ctype(dst)}){self._paren(e.value, 14)}", 14

    def index(self, e: E.TensorElement | E.VectorLoad | S.BufferStore | S.VectorStore | S.Prefetch) -> str:
        """The flat index of an access (buffers are flattened before code generation)."""
        if len(e.indices) != 1:
            raise CodegenError(f"{self.where}: access to {E._name(e.tensor)} is not flattened; "
                               "run taskloom.transforms.lower first")
        return self.expr(e.indices[0])

    def constant(self, c: E.Constant) -> tuple[str, int]:
        """A literal of the constant's type."""
        t = c.type
        if t.is_float():
            text = float_literal(c.value, t)  # type: ignore[arg-type]
        elif t.is_bool():
            text = "true" if c.value else "false"
        elif t.name == "int64":
            text = f"INT64_C({c.value})"
        elif t == index_type:
            text = str(c.value)
        else:
            text = f"(({self.ctype(t)}){c.value})"
        return text, (14 if text.startswith("-") else ATOM)

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
            return call, ATOM
        return f"({self.ctype(e.type)}){call}", 14

    def bf16_binary(self, e: E.Binary) -> str:
        """A bfloat16 operator, computed in float and rounded back (comparisons stay bool)."""
        a, b = f"tl_bf16_to_f32({self.expr(e.a)})", f"tl_bf16_to_f32({self.expr(e.b)})"
        if e.op in ("min", "max"):
            f = f"tl_{e.op}_f32({a}, {b})"
        else:
            f = f"({a} {_C_BIN[e.op][0]} {b})"
        return f if e.op in ("lt", "le", "eq", "ne") else f"tl_f32_to_bf16({f})"

    def call(self, e: E.Call) -> str:
        """A primitive call: the C math library or a prelude helper."""
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
            return f"tl_f32_to_bf16({inner})" if t.name == "bfloat16" else f"({self.ctype(t, self.where)}){inner}"
        return self._float_call(e.func, t.name, args)

    @staticmethod
    def _float_call(func: str, dtype: str, args: str) -> str:
        suffix = "f" if dtype == "float32" else ""
        if func == "rsqrt":
            return f"(1.0{suffix} / sqrt{suffix}({args}))"
        if func == "sigmoid":
            return f"tl_sigmoid_{'f32' if suffix else 'f64'}({args})"
        return f"{_SCALAR_MATH[func]}{suffix}({args})"

    def _address(self, tensor: E.Expr, index: str) -> str:
        return f"&{self._paren(tensor, ATOM)}[{index}]"

    # ------------------------------------------------ vectors: a dialect with vector registers
    def no_vectors(self, what: Any) -> CodegenError:
        """The error for a vector construct in a dialect without vector types."""
        return CodegenError(f"{self.where}: the C backend cannot emit {type(what).__name__} `{what!r}`; "
                            "this dialect has no vector types")

    def vector_op(self, e: E.Expr) -> str:
        """A vector-typed operator, broadcast, select or cast."""
        raise self.no_vectors(e)

    def vector_call(self, e: E.Call, t: VectorType, args: str) -> str:
        """A primitive call on vectors of type ``t``; ``args`` are rendered already."""
        raise self.no_vectors(e)

    def vector_load(self, e: E.VectorLoad) -> str:
        raise self.no_vectors(e)

    def vector_store(self, s: S.VectorStore) -> str:
        """The statement that stores a vector (with its semicolon)."""
        raise self.no_vectors(s)

    # ----------------------------------------------------------------- statements
    def emit(self, depth: int, text: str) -> None:
        """Append one line, indented ``depth`` levels."""
        self.lines.append("  " * depth + text)

    def block(self, s: S.Stmt, depth: int) -> None:
        """Statement ``s`` as a block: the buffers it takes are released at its end."""
        self.heap_buffers.append([])
        self.stmt(s, depth)
        for release in reversed(self.heap_buffers.pop()):
            self.emit(depth, release)

    def stmt(self, s: S.Stmt, d: int) -> None:
        """Statement ``s`` at depth ``d``."""
        if isinstance(s, S.SeqStmt):
            for x in s.stmts:
                self.stmt(x, d)
        elif isinstance(s, S.For):
            v, n = c_name(s.var.name), self.expr(s.extent)
            pragma = self.loop_pragma(s)
            if pragma is not None:
                self.emit(d, pragma)
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
            self.emit(d, f"{self._paren(s.tensor, ATOM)}[{self.index(s)}] = {self.expr(s.value)};")
        elif isinstance(s, S.VectorStore):
            self.emit(d, self.vector_store(s))
        elif isinstance(s, S.Evaluate):
            self.emit(d, f"{self.expr(s.expr)};")
        elif isinstance(s, S.Prefetch):  # for reading, into L2 (locality 2)
            self.emit(d, f"__builtin_prefetch({self._address(s.tensor, self.index(s))}, 0, 2);")
        elif isinstance(s, S.Comment):
            for line in s.text.splitlines() or [""]:
                self.emit(d, f"// {line}")
        else:
            raise CodegenError(f"{self.where}: the C backend cannot emit {type(s).__name__}")

    def loop_pragma(self, s: S.For) -> str | None:
        """The pragma line before loop ``s``, if its kind asks for one."""
        return self.unroll_pragma(s) if s.kind == "unroll" else None

    def unroll_pragma(self, s: S.For) -> str:
        """The pragma that asks the compiler to unroll loop ``s``."""
        return f"#pragma GCC unroll {s.extent.value if E.is_const(s.extent) else 8}"  # type: ignore[attr-defined]

    def declare(self, s: S.Declare, d: int) -> None:
        """A mutable scalar, or a buffer (:meth:`declare_buffer`)."""
        t, name = s.var.type, c_name(s.var.name)
        if isinstance(t, TensorType):
            self.declare_buffer(s, d)
            return
        init = "" if s.init is None else f" = {self.expr(s.init)}"
        self.emit(d, f"{self.ctype(t, self.where)} {name}{init};")

    def declare_buffer(self, s: S.Declare, d: int) -> None:
        """A local buffer: where its memory comes from is the dialect's to say."""
        raise CodegenError(f"{self.where}: the C backend cannot declare buffer '{s.var.name}' ({s.scope}) "
                           "in this dialect")

    # ----------------------------------------------------------------- function
    def param(self, p: E.Var) -> str:
        """One parameter; a buffer the function only reads is ``const``, and one the launcher
        may pass as another's memory (a result written over an input: the ``shares_memory``
        attribute) is not ``restrict``."""
        t = p.type
        if isinstance(t, (TensorType, PointerType)):
            const = "" if p in self.written else "const "
            restrict = "" if p.name in self.fn.attr("shares_memory", ()) else " __restrict__"
            return f"{const}{self.ctype(t, self.where)}{restrict} {c_name(p.name)}"
        return f"{self.ctype(t, self.where)} {c_name(p.name)}"

    def emit_doc(self) -> None:
        """The function's ``doc`` attribute as a block comment."""
        doc = self.fn.attr("doc")
        if doc:
            self.lines += ["/*", *(f" * {l}".rstrip() for l in doc.splitlines()), " */"]

    def param_list(self) -> str:
        """The parameter list: the function's parameters, then the status where it checks."""
        return ", ".join([self.param(p) for p in self.fn.params]
                         + ([f"tl_status* __restrict__ {STATUS}"] if self.fn.reports_status else [])) or "void"

    def function(self) -> str:
        self.emit_doc()
        self.emit(0, f"void {c_symbol(self.fn.name)}({self.param_list()}) {{")
        self.block(self.fn.body, 1)
        self.emit(0, "}")
        return "\n".join(self.lines)


def checks_table(checks: list[str]) -> str:
    """The C table of what each run-time check guards, which the runtime reads when a
    status reports a failure."""
    rows = "".join(f"\n  {json.dumps(what)}," for what in checks)
    return (f"/* What each run-time check guards, by number (a status's check - 1). */\n"
            f"const char* const {CHECKS_SYMBOL}[] = {{{rows}\n}};")
