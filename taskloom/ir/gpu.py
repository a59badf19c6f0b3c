"""The IR's words for GPU kernels: thread and block indices, warp shuffles, and the
statements a fast CUDA kernel is made of.

A CUDA kernel is a :class:`~taskloom.ir.stmt.Function` of kind ``cuda_kernel`` whose
``grid`` and ``block`` attributes are its launch configuration (three extents each, ints or
expressions of the parameters) and ``dynamic_shared`` its dynamic shared memory in bytes
(:func:`cuda_kernel` makes one). Inside it:

- ``threadIdx.x``, ``blockIdx.y``, ``blockDim.x``, ``gridDim.x`` are primitives of no
  arguments (``thread_idx_x()`` ...); a task mapping's worker is any of them, or
  ``threadIdx.x // 32`` for a warp and ``threadIdx.x % 32`` for a lane.
- ``shfl_xor(v, mask)``, ``shfl_down(v, delta)``, ``shfl_up(v, delta)``, ``shfl_idx(v, lane)``
  read ``v`` from another lane of the warp (all 32 lanes take part);
  ``warp_sum(v)`` and ``warp_max(v)`` reduce it over the warp.
- Buffers declared in the ``shared`` scope are one per block, ``register`` one per thread;
  :class:`~taskloom.ir.stmt.Barrier` is ``__syncthreads()``.
- The statements below: atomics on global memory, wide (16-byte) copies, ``cp.async``
  with commit and wait groups, ``ldmatrix`` and ``mma.sync``; Hopper's ``wgmma`` with its
  fences and groups, TMA copies (of a kernel's tensor maps, :class:`TensorMap`) and the mbarriers they
  land on, and warp-specialized loops. Their operands are element references
  (``A[i, j]``), so flattening and fusion rewrite them as they rewrite loads and stores.

The CUDA dialect of the backend prints all of these; the SIMT emulator executes them.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from taskloom.errors import IRError
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import DataType, float16, float32, bfloat16, int32
from taskloom.ir.primitives import Primitive, register_primitive

AXES = ("x", "y", "z")
LAUNCH_ATTRS = ("grid", "block", "dynamic_shared")
#: primitive name -> CUDA built-in, for the 12 index primitives
INDEX_PRIMITIVES: dict[str, str] = {
    f"{kind}_{axis}": f"{cuda}.{axis}"
    for kind, cuda in (("thread_idx", "threadIdx"), ("block_idx", "blockIdx"),
                       ("block_dim", "blockDim"), ("grid_dim", "gridDim"))
    for axis in AXES
}
WARP_SIZE = 32
#: A kernel attribute: ``((buffer, reused), ...)``, shared buffers laid over the dynamic
#: shared memory of another declared before them, from its start (a matmul's output staged
#: where its factors' tiles were, once a barrier says they are read). The emulator keeps
#: them apart, which a program whose uses a barrier separates cannot tell.
SHARED_REUSE = "shared_reuse"

SHUFFLES = ("shfl_xor", "shfl_down", "shfl_up", "shfl_idx")
WARP_REDUCTIONS = ("warp_sum", "warp_max")


def _int32(args: tuple[E.Expr, ...]) -> DataType:
    return int32


def _shuffled(name: str):
    def rule(args: tuple[E.Expr, ...]) -> DataType:
        value, lane = args
        if not (isinstance(value.type, DataType) and value.type.nbytes == 4):
            raise IRError(f"{name}() moves 32-bit scalars between lanes, got {value.type!r}")
        if lane.type != int32:
            raise IRError(f"{name}()'s lane argument must be int32, got {lane.type!r}")
        return value.type
    return rule


def _reduced(name: str):
    def rule(args: tuple[E.Expr, ...]) -> DataType:
        t = args[0].type
        if not (isinstance(t, DataType) and t.nbytes == 4):
            raise IRError(f"{name}() reduces 32-bit scalars over a warp, got {t!r}")
        return t
    return rule


def _float32_only(args: tuple[E.Expr, ...]) -> DataType:
    if args[0].type != float32:
        raise IRError(f"tf32_round() rounds float32 values, got {args[0].type!r}")
    return float32


#: float32 rounded to tf32's 10 bits of mantissa, to nearest with ties away from zero
#: (``cvt.rna.tf32.f32``): what cuBLAS gives the tensor cores, where a plain float32 would
#: have its low 13 bits dropped
register_primitive(Primitive("tf32_round", 1, _float32_only, "float32 rounded to nearest tf32"))

for _name in INDEX_PRIMITIVES:
    register_primitive(Primitive(_name, 0, _int32, f"CUDA {INDEX_PRIMITIVES[_name]}"))
for _name in SHUFFLES:
    register_primitive(Primitive(_name, 2, _shuffled(_name), "a value from another lane of the warp"))
for _name in WARP_REDUCTIONS:
    register_primitive(Primitive(_name, 1, _reduced(_name), "a reduction over the warp's 32 lanes"))


class _Dim3:
    """``threadIdx`` and friends in kernel script: ``threadIdx.x`` is ``thread_idx_x()``."""

    def __init__(self, kind: str):
        self._kind = kind

    def __getattr__(self, axis: str) -> E.Expr:
        if axis not in AXES:
            raise AttributeError(axis)
        return E.call(f"{self._kind}_{axis}")


threadIdx, blockIdx = _Dim3("thread_idx"), _Dim3("block_idx")  # noqa: N816 - CUDA's names
blockDim, gridDim = _Dim3("block_dim"), _Dim3("grid_dim")  # noqa: N816


def _element(what: str, e: Any, dtypes: Sequence[DataType] | None = None) -> E.TensorElement:
    if not isinstance(e, E.TensorElement):
        raise IRError(f"{what} must be an element reference such as A[i, j], got {e!r}")
    if dtypes is not None and e.type not in dtypes:
        raise IRError(f"{what} must have elements of {' or '.join(t.name for t in dtypes)}, got {e.type!r}")
    return e


def _copy_operands(name: str, verb: str, dst: Any, src: Any, nbytes: int) -> None:
    """The checks of a copy of ``nbytes`` (4, 8 or 16) between two element references of
    one type, whole elements of it."""
    _element(f"{name}'s destination", dst)
    _element(f"{name}'s source", src)
    if nbytes not in (4, 8, 16):
        raise IRError(f"{name} {verb} 4, 8 or 16 bytes, not {nbytes}")
    if dst.type != src.type:
        raise IRError(f"{name} from {src.type!r} elements into {dst.type!r} ones")
    if nbytes % dst.type.nbytes:
        raise IRError(f"{name} of {nbytes} bytes splits a {dst.type!r} element")


@dataclass(frozen=True, eq=False, repr=False)
class AtomicAdd(S.Stmt):
    """``atomicAdd(&A[i], value)``: adds ``value`` to a global element, atomically."""

    ref: E.TensorElement
    value: E.Expr

    def __post_init__(self) -> None:
        _element("atomic_add's target", self.ref)
        object.__setattr__(self, "value", E.as_expr(self.value, self.ref.type))
        if self.value.type != self.ref.type:
            raise IRError(f"atomic_add of {self.value.type!r} into an element of {self.ref.type!r}")


@dataclass(frozen=True, eq=False, repr=False)
class VectorCopy(S.Stmt):
    """One wide access: ``nbytes`` (4, 8 or 16) from ``src`` to ``dst``, consecutive
    elements of each, as a single load and store (``ld.global.v4`` / ``st.global.v4`` for
    16 bytes). Both addresses must be aligned to ``nbytes``; a warp of 16-byte copies
    moves 512 bytes in one request where scalar accesses take four."""

    dst: E.TensorElement
    src: E.TensorElement
    nbytes: int = 16

    def __post_init__(self) -> None:
        _copy_operands("copy_vector", "moves", self.dst, self.src, self.nbytes)


@dataclass(frozen=True, eq=False, repr=False)
class CpAsync(S.Stmt):
    """``cp.async``: copies ``nbytes`` (4, 8 or 16) from global ``src`` to shared ``dst``
    without passing through registers. With ``src_bytes`` (an expression), only that many
    bytes are read and the rest of ``dst`` is zero-filled: an edge predicated without a
    branch. The copy lands only after :class:`CpAsyncWait` of its group."""

    dst: E.TensorElement
    src: E.TensorElement
    nbytes: int
    src_bytes: E.Expr | None = None

    def __post_init__(self) -> None:
        if self.src_bytes is not None:
            object.__setattr__(self, "src_bytes", E.as_expr(self.src_bytes, int32))
        _copy_operands("cp_async", "copies", self.dst, self.src, self.nbytes)


@dataclass(frozen=True, eq=False, repr=False)
class CpAsyncCommit(S.Stmt):
    """``cp.async.commit_group``: the copies issued since the last commit form a group."""


@dataclass(frozen=True, eq=False, repr=False)
class CpAsyncWait(S.Stmt):
    """``cp.async.wait_group n``: wait until at most ``n`` committed groups are in flight."""

    pending: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.pending, int) or self.pending < 0:
            raise IRError(f"cp_async_wait needs a count of pending groups >= 0, got {self.pending!r}")


@dataclass(frozen=True, eq=False, repr=False)
class Ldmatrix(S.Stmt):
    """``ldmatrix.sync.aligned.m8n8.x{num}[.trans].b16``: the warp loads ``num`` 8x8 matrices
    of 16-bit elements from shared memory; lane ``l`` gives the address of row ``l % 8`` of
    matrix ``l // 8`` (``src`` is that row's first element), and receives two elements of
    each matrix into ``dst`` (``2 * num`` consecutive elements of a register buffer), as the
    PTX ISA lays the fragments out. On float32 elements (tf32 fragments) a row is 4 of
    them and each lane receives one of each matrix; ``.trans`` would split them, so it is
    refused."""

    dst: E.TensorElement
    src: E.TensorElement
    num: int = 4
    trans: bool = False

    def __post_init__(self) -> None:
        _element("ldmatrix's destination", self.dst, (float16, bfloat16, float32))
        _element("ldmatrix's source", self.src, (self.dst.type,))
        if self.num not in (1, 2, 4):
            raise IRError(f"ldmatrix loads 1, 2 or 4 matrices, not {self.num}")
        if self.trans and self.dst.type == float32:
            raise IRError("ldmatrix .trans moves 16-bit elements; it would split float32 ones")


#: mma.sync shapes: (A, B) factor types, and the fragment elements a lane holds of A and B.
MMA_SHAPES: dict[str, tuple[tuple[DataType, ...], int, int]] = {
    "m16n8k16": ((float16, bfloat16), 8, 4),
    "m16n8k8": ((float32,), 4, 2),  # tf32: float32 registers, read by the tensor cores as tf32
}


@dataclass(frozen=True, eq=False, repr=False)
class MmaSync(S.Stmt):
    """``mma.sync.aligned.{shape}.row.col.f32...``: the warp computes ``D = A B + C`` on a
    16 x K A (row-major), a K x 8 B (column-major) and a 16x8 C/D of fp32; each lane holds
    its fragments in register buffers: of A and B 8 and 4 elements for ``m16n8k16`` (float16
    or bfloat16), 4 and 2 for ``m16n8k8`` (float32 registers that the tensor cores read as
    tf32: 10 bits of mantissa), and 4 of C and of D (``d`` may be ``c``)."""

    d: E.TensorElement
    a: E.TensorElement
    b: E.TensorElement
    c: E.TensorElement
    shape: str = "m16n8k16"

    def __post_init__(self) -> None:
        if self.shape not in MMA_SHAPES:
            raise IRError(f"mma_sync supports {' and '.join(MMA_SHAPES)}, not {self.shape!r}")
        _element("mma_sync's A fragment", self.a, MMA_SHAPES[self.shape][0])
        _element("mma_sync's B fragment", self.b, (self.a.type,))
        _element("mma_sync's C fragment", self.c, (float32,))
        _element("mma_sync's D fragment", self.d, (float32,))


#: wgmma shapes: m64nNk16 for N a multiple of 8 up to 256, 16-bit factors, float32 sums.
WGMMA_NS = tuple(range(8, 257, 8))
#: the swizzle a wgmma operand's shared layout uses: 128 bytes (the only one the template needs)
GMMA_SWIZZLE = 128
#: where a shared buffer that wgmma or TMA reads or writes with that swizzle starts: the
#: swizzle is of the shared address's bits 4-9
SWIZZLE_ALIGN = 1024


def wgmma_n(shape: str) -> int:
    """N of a ``m64n{N}k16`` wgmma shape; an IRError for any other shape."""
    m = shape.startswith("m64n") and shape.endswith("k16") and shape[4:-3]
    if not m or not m.isdigit() or int(m) not in WGMMA_NS:
        raise IRError(f"wgmma supports m64nNk16 for N a multiple of 8 up to 256, not {shape!r}")
    return int(m)


@dataclass(frozen=True, eq=False, repr=False)
class Wgmma(S.Stmt):
    """``wgmma.mma_async.sync.aligned.m64n{N}k16.f32``: the warpgroup (4 consecutive warps,
    128 threads) adds ``A B`` to its 64 x N float32 accumulators, ``N / 2`` a thread from
    ``d`` on (warp ``w`` holds rows ``16 w ..``, laid out as ``mma.sync``'s C for each 8
    columns). A (64 x 16) and B (16 x N) are read from shared memory, asynchronously,
    through descriptors of the 128-byte-swizzled canonical layouts: ``a`` and ``b`` are each
    operand's first element; ``*_major`` ``"k"`` for rows of 64 K-elements 128 bytes apart
    (8-row groups ``*_sbo`` bytes apart), ``"mn"`` for rows of 64 M- (N-) elements 128 bytes
    apart along K (8-row groups ``*_sbo`` apart, the next 64 of M or N ``*_lbo`` bytes on).
    The accumulators may be read, and the operands overwritten, only after
    :class:`WgmmaWait` of its group."""

    d: E.TensorElement
    a: E.TensorElement
    b: E.TensorElement
    shape: str = "m64n128k16"
    a_major: str = "k"
    b_major: str = "k"
    a_lbo: int = 16
    a_sbo: int = 1024
    b_lbo: int = 16
    b_sbo: int = 1024

    def __post_init__(self) -> None:
        wgmma_n(self.shape)
        _element("wgmma's A operand", self.a, (float16, bfloat16))
        _element("wgmma's B operand", self.b, (self.a.type,))
        _element("wgmma's accumulators", self.d, (float32,))
        for what, major in (("A", self.a_major), ("B", self.b_major)):
            if major not in ("k", "mn"):
                raise IRError(f"wgmma's {what} is K-major ('k') or M/N-major ('mn'), not {major!r}")
        for what, v in (("a_lbo", self.a_lbo), ("a_sbo", self.a_sbo), ("b_lbo", self.b_lbo), ("b_sbo", self.b_sbo)):
            if not isinstance(v, int) or v <= 0 or v % 16 or v >= 1 << 18:
                raise IRError(f"wgmma's {what} is a byte offset, a positive multiple of 16 below 2^18, not {v!r}")


@dataclass(frozen=True, eq=False, repr=False)
class WgmmaFence(S.Stmt):
    """``wgmma.fence.sync.aligned``: orders the warpgroup's earlier register writes (of
    ``acc``, a register buffer of accumulators) before the wgmmas that follow."""

    acc: E.Var


@dataclass(frozen=True, eq=False, repr=False)
class WgmmaCommit(S.Stmt):
    """``wgmma.commit_group.sync.aligned``: the wgmmas issued since the last commit form a group."""


@dataclass(frozen=True, eq=False, repr=False)
class WgmmaWait(S.Stmt):
    """``wgmma.wait_group.sync.aligned n``: wait until at most ``n`` committed groups are in
    flight; ``acc`` (the accumulators) is not read before it."""

    acc: E.Var
    pending: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.pending, int) or self.pending < 0:
            raise IRError(f"wgmma_wait needs a count of pending groups >= 0, got {self.pending!r}")


@dataclass(frozen=True, eq=False, repr=False)
class FenceProxyAsync(S.Stmt):
    """``fence.proxy.async.shared::cta``: this thread's writes of shared memory (stores and
    landed ``cp.async``) become visible to the async proxy that wgmma reads through."""


@dataclass(frozen=True)
class TensorMap:
    """A TMA descriptor (``CUtensorMap``) the launcher encodes for kernel parameter ``tensor``
    (a global tensor of 16-bit elements) and passes the kernel by value as ``name``: the
    tensor seen as ``dims`` (innermost first, in elements; the element ``(c0, c1, ..)`` at byte
    ``2 (c0 + c1 strides[0] / 2 + ..)``, ``strides`` in bytes, multiples of 16), copied in boxes
    of ``box`` (innermost first; the innermost 128 bytes at most) into shared memory with the
    128-byte swizzle. A box reaching past ``dims`` is filled with zeros there. An extent may
    be symbolic, the product of the kernel's size parameters and ints as text (``"batch*seq"``,
    a dynamic graph's rows), which the launcher and the emulator evaluate per launch."""

    name: str
    tensor: str
    dims: tuple[int | str, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]

    def __post_init__(self) -> None:
        if any(isinstance(d, str) and not _PRODUCT.fullmatch(d) for d in self.dims):
            raise IRError(f"tensor map '{self.name}': a symbolic extent is a product of size parameters and ints "
                          f"('batch*seq'), got {self.dims}")
        if not 1 <= len(self.dims) <= 5 or len(self.strides) != len(self.dims) - 1 or len(self.box) != len(self.dims):
            raise IRError(f"tensor map '{self.name}': 1 to 5 dims, a stride for each but the first, a box extent each")
        if any(s % 16 or s <= 0 for s in self.strides):
            raise IRError(f"tensor map '{self.name}': TMA needs strides that are positive multiples of 16 bytes, "
                          f"got {self.strides}")
        if self.box[0] * 2 > 128 or any(not 1 <= b <= 256 for b in self.box):
            raise IRError(f"tensor map '{self.name}': a box is 1-256 elements a side, its innermost 128 bytes "
                          f"at most with the 128-byte swizzle; got {self.box}")


_PRODUCT = re.compile(r"[A-Za-z_0-9]+(\*[A-Za-z_0-9]+)*")


def product_text(e: E.Expr) -> str | None:
    """``e`` as a tensor map's symbolic extent (``"batch*seq*64"``), where it is a product of
    variables and ints; else None."""
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, E.Constant) and isinstance(e.value, int):
        return str(e.value)
    if isinstance(e, E.Binary) and e.op == "mul":
        a, b = product_text(e.a), product_text(e.b)
        return None if a is None or b is None else f"{a}*{b}"
    return None


def map_extent(d: int | str, value_of: Callable[[str], int]) -> int:
    """A tensor map's extent ``d``, a symbolic one with each size parameter's ``value_of``."""
    if isinstance(d, int):
        return d
    return math.prod(int(f) if f.isdigit() else value_of(f) for f in d.split("*"))


def tensor_maps(fn: S.Function) -> tuple[TensorMap, ...]:
    """The TMA descriptors a CUDA kernel takes after its parameters: its ``tensor_maps``
    attribute, a tuple of ``(name, tensor, dims, strides, box)`` tuples (literals, so that
    kernel script writes them in ``@kernel(...)`` and saved kernels keep them)."""
    return tuple(t if isinstance(t, TensorMap) else TensorMap(*t) for t in fn.attr("tensor_maps", ()))


def with_tensor_maps(fn: S.Function, maps: Sequence[TensorMap]) -> S.Function:
    """``fn`` taking TMA descriptors ``maps`` after its parameters."""
    attrs = tuple((k, v) for k, v in fn.attrs if k != "tensor_maps")
    if maps:
        attrs += (("tensor_maps", tuple(dataclasses.astuple(m) for m in maps)),)
    return S.Function(fn.name, fn.params, fn.body, fn.kind, attrs)


@dataclass(frozen=True, eq=False, repr=False)
class MbarrierInit(S.Stmt):
    """``mbarrier.init``: the shared barrier ``bar`` (one int64 element) expects ``count``
    arrivals a phase. Initialized by one thread, then made visible by :class:`FenceMbarrierInit`
    and a barrier."""

    bar: E.TensorElement
    count: int = 1


@dataclass(frozen=True, eq=False, repr=False)
class FenceMbarrierInit(S.Stmt):
    """``fence.mbarrier_init``: this thread's barrier initializations become visible to the
    other threads and to TMA."""


@dataclass(frozen=True, eq=False, repr=False)
class MbarrierExpectTx(S.Stmt):
    """``mbarrier.arrive.expect_tx``: the thread arrives on ``bar`` and says ``nbytes`` more
    will land on it (by :class:`TmaLoad`) before its phase completes."""

    bar: E.TensorElement
    nbytes: int


@dataclass(frozen=True, eq=False, repr=False)
class MbarrierWait(S.Stmt):
    """Waits until the phase of ``bar`` of parity ``phase`` (0 or 1) has completed
    (``mbarrier.try_wait.parity`` until it answers yes)."""

    bar: E.TensorElement
    phase: E.Expr

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase", E.as_expr(self.phase, int32))


@dataclass(frozen=True, eq=False, repr=False)
class TmaLoad(S.Stmt):
    """``cp.async.bulk.tensor``: one box of tensor map ``tmap`` at ``coords`` (innermost
    first, in elements; may reach past the tensor, whose outside is zeros) into shared
    memory at ``dst`` (1024-byte aligned), swizzled by 128 bytes; its bytes land on ``bar``."""

    dst: E.TensorElement
    tmap: str
    coords: tuple[E.Expr, ...]
    bar: E.TensorElement

    def __post_init__(self) -> None:
        object.__setattr__(self, "coords", tuple(E.as_expr(c, int32) for c in self.coords))
        _element("tma_load's destination", self.dst, (float16, bfloat16))


@dataclass(frozen=True, eq=False, repr=False)
class MbarrierArrive(S.Stmt):
    """``mbarrier.arrive``: each executing thread arrives on ``bar``."""

    bar: E.TensorElement


@dataclass(frozen=True, eq=False, repr=False)
class WarpSpecialized(S.Stmt):
    """A pipeline of ``steps`` steps (``var`` counts them) whose two roles run at once on
    different warps: the threads where ``producer`` holds run ``producer_step`` after
    ``producer_wait``, the others ``consumer_step`` after ``consumer_wait`` (each wait an
    :class:`MbarrierWait`, of ``var``), with ``consumer_setup`` before their steps and
    ``consumer_finish`` after (so that what only the consumers hold, their accumulators,
    lives in their branch alone). Each role's warpgroups first set their register budget
    (``setmaxnreg``: the producers give registers up, the consumers take them); of the
    producers only those where ``leader`` holds run the steps. The roles meet only at
    mbarriers: no barrier() may be inside."""

    var: E.Var
    steps: E.Expr
    producer: E.Expr
    leader: E.Expr
    producer_wait: MbarrierWait
    producer_step: S.Stmt
    consumer_wait: MbarrierWait
    consumer_step: S.Stmt
    consumer_setup: S.Stmt
    consumer_finish: S.Stmt
    producer_registers: int = 40
    consumer_registers: int = 232

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", E.as_expr(self.steps, int32))
        for v in (self.producer_registers, self.consumer_registers):
            if not (isinstance(v, int) and 24 <= v <= 256 and v % 8 == 0):
                raise IRError(f"setmaxnreg takes a multiple of 8 from 24 to 256 registers, not {v!r}")


def written_tensors(body: S.Stmt) -> set[E.Expr]:
    """The tensors a body writes: by stores, and through the GPU statements' destinations."""
    from taskloom.ir.functor import collect
    found = {s.tensor for s in collect(body, (S.BufferStore, S.VectorStore))}  # type: ignore[attr-defined]
    for s in collect(body, (AtomicAdd, CpAsync, VectorCopy, Ldmatrix, MmaSync, Wgmma, TmaLoad)):
        ref = s.ref if isinstance(s, AtomicAdd) else s.d if isinstance(s, (MmaSync, Wgmma)) else s.dst  # type: ignore[attr-defined]
        found.add(ref.tensor)
    return found


def cuda_kernel(fn: S.Function, grid: Sequence[Any], block: Sequence[Any], dynamic_shared: Any = 0) -> S.Function:
    """``fn`` as a CUDA kernel launched on ``grid`` blocks of ``block`` threads (one to three
    extents each; ints or expressions of the parameters)."""
    def dims(what: str, extents: Sequence[Any]) -> tuple[E.Expr, ...]:
        extents = tuple(extents) if isinstance(extents, (tuple, list)) else (extents,)
        if not 1 <= len(extents) <= 3:
            raise IRError(f"a CUDA kernel's {what} has one to three extents, got {extents!r}")
        return tuple(E.as_expr(x, int32) for x in extents) + (E.as_expr(1, int32),) * (3 - len(extents))
    attrs = dict(fn.attrs)
    attrs.update(grid=dims("grid", grid), block=dims("block", block), dynamic_shared=E.as_expr(dynamic_shared, int32))
    return S.Function(fn.name, fn.params, fn.body, "cuda_kernel", tuple(attrs.items()))


def launch_dims(fn: S.Function) -> tuple[tuple[E.Expr, ...], tuple[E.Expr, ...], E.Expr]:
    """``(grid, block, dynamic shared bytes)`` of a CUDA kernel."""
    if fn.kind != "cuda_kernel":
        raise IRError(f"function '{fn.name}' is a {fn.kind}, not a cuda_kernel")
    return fn.attr("grid"), fn.attr("block"), fn.attr("dynamic_shared", E.as_expr(0, int32))


def shuffle(kind: str, value: Any, lane: Any) -> E.Call:
    """``shfl_xor(value, 1)``: the lane argument is an int32 whatever ``value``'s type."""
    return E.Call(kind, (E.as_expr(value), E.as_expr(lane, int32)))


#: Kernel script's GPU statements, by the name a kernel calls them with.
STATEMENTS: dict[str, Any] = {
    "atomic_add": AtomicAdd, "copy_vector": VectorCopy, "cp_async": CpAsync, "cp_async_commit": CpAsyncCommit,
    "cp_async_wait": CpAsyncWait, "ldmatrix": Ldmatrix, "mma_sync": MmaSync, "wgmma": Wgmma,
    "wgmma_fence": WgmmaFence, "wgmma_commit": WgmmaCommit, "wgmma_wait": WgmmaWait,
    "fence_proxy_async": FenceProxyAsync, "mbarrier_init": MbarrierInit, "fence_mbarrier_init": FenceMbarrierInit,
    "mbarrier_expect_tx": MbarrierExpectTx, "mbarrier_wait": MbarrierWait, "tma_load": TmaLoad,
    "mbarrier_arrive": MbarrierArrive,
}
#: Every GPU call kernel script builds here rather than as a plain primitive call.
SCRIPT_CALLS: dict[str, Any] = {**STATEMENTS, **{k: functools.partial(shuffle, k) for k in SHUFFLES}}

def statement_text(s: S.Stmt, text: Any) -> str | None:
    """A GPU statement as kernel script (``text`` prints an expression); None for others."""
    name = next((n for n, cls in STATEMENTS.items() if type(s) is cls), None)
    if name is None:
        return None
    args = []
    for k, f in enumerate(dataclasses.fields(s)):
        value = getattr(s, f.name)
        defaulted = f.default is not dataclasses.MISSING
        if k and defaulted and not isinstance(value, E.Expr) and value == f.default:
            continue  # an option left as it is (the first argument is always written)
        shown = text(value) if isinstance(value, E.Expr) else repr(value)
        args.append(f"{f.name}={shown}" if k and defaulted else shown)
    return f"{name}({', '.join(args)})"


#: The names kernel script knows for the GPU (see :mod:`taskloom.script.parser`).
SCRIPT_NAMES: dict[str, Any] = {"threadIdx": threadIdx, "blockIdx": blockIdx, "blockDim": blockDim,
                                "gridDim": gridDim}
