"""The CUDA dialect of the C-family renderer: lowered ``cuda_kernel`` functions as CUDA C++.

Expressions and control flow print as the C renderer prints them; what differs is said
here: 16-bit floats are ``__half`` and ``__nv_bfloat16``; ``threadIdx.x`` and friends,
warp shuffles and reductions are CUDA built-ins; ``shared`` buffers are ``__shared__``
arrays; a barrier is ``__syncthreads()``; ``cp.async``, ``ldmatrix`` and ``mma.sync`` call
the PTX wrappers of the prelude. Every kernel gets a host launcher,

    extern "C" int launch_<kernel>(<the kernel's parameters>, void* stream)

which computes the grid and block from the scalar parameters, launches on ``stream`` and
returns the CUDA error code (0 on success), so the runtime needs no CUDA headers of its own.
A kernel with run-time index checks and its launcher take a ``tl_status*`` (device memory)
after the parameters; the library's ``taskloom_status_new`` and ``taskloom_status_take``
make one and read it back, and its ``taskloom_checks`` says what each check guards.
"""
from __future__ import annotations

import os

from taskloom.backend.codegen_c import (ATOM, STATUS, CFamilyCodegen, c_name, c_symbol, c_type, checks_table,
                                        float_literal)
from taskloom.backend.cuda_prelude import CUDA_PRELUDE, wgmma_wrapper
from taskloom.errors import CodegenError
from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import DataType, PointerType, TensorType, Type, VectorType, float32
from taskloom.ir.functor import collect
from taskloom.target.cuda import CudaTarget

_HALF = {"float16": "__half", "bfloat16": "__nv_bfloat16"}
#: the PTX of a kernel's first statement under programmatic dependent launch
PDL_WAIT = 'asm volatile("griddepcontrol.wait;\\n" ::: "memory");'


def dependent_launch(target: CudaTarget) -> bool:
    """Whether kernels launch as programmatic dependents of the kernel before them on the
    stream (``TASKLOOM_PDL=1``, compute capability 9.0 and later): each launches while the
    one before finishes, and waits at its first statement (``griddepcontrol.wait``) until
    that one has completed and its writes are visible, so the launch's latency overlaps the
    previous kernel's tail. Off by default until timed on a GPU."""
    return os.environ.get("TASKLOOM_PDL", "0") == "1" and target.compute_capability >= (9, 0)
#: a tensor-core factor type as PTX names it (float32 factors go as tf32)
_PTX_TYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}
_SHUFFLE = {"shfl_xor": "__shfl_xor_sync", "shfl_down": "__shfl_down_sync", "shfl_up": "__shfl_up_sync",
            "shfl_idx": "__shfl_sync"}
LAUNCH_PREFIX = "launch_"


class _CudaKernelCodegen(CFamilyCodegen):
    def __init__(self, fn: S.Function, target: CudaTarget, checks: list[str] | None = None):
        super().__init__(fn, target, checks)
        self.where = f"CUDA kernel '{fn.name}'"
        self.written = gpu.written_tensors(fn.body)
        dynamic = gpu.launch_dims(fn)[2]
        # with dynamic shared memory of a static size, the shared buffers are laid out in it
        # (past 48 KiB a kernel's shared memory can only be dynamic): the next free byte, and the size
        self.dynamic_offset, self.dynamic_bytes = 0, int(dynamic.value) if E.is_const(dynamic) else None  # type: ignore[attr-defined]
        # wgmma's and TMA's 128-byte swizzle is of the shared address itself: their buffers start
        # on 1024 bytes (dynamic shared memory is aligned in the kernel, out of 1024 bytes the launch adds)
        self.shared_align = gpu.SWIZZLE_ALIGN if collect(fn.body, (gpu.Wgmma, gpu.TmaLoad)) else 16
        # a shared buffer that reuses another's bytes once that one is dead (gpu.SHARED_REUSE),
        # and where each shared buffer starts in the dynamic shared memory
        self.reuse = dict(fn.attr(gpu.SHARED_REUSE, ()))
        self.shared_starts: dict[str, int] = {}

    def ctype(self, t: Type, where: str = "") -> str:
        if isinstance(t, DataType) and t.name in _HALF:
            return _HALF[t.name]
        if isinstance(t, (PointerType, TensorType)):
            base = t.base if isinstance(t, PointerType) else t.dtype
            return self.ctype(base, where) + "*"
        if isinstance(t, VectorType):
            raise CodegenError(f"{where or self.where}: the CUDA backend has no vector type {t!r} yet")
        return c_type(t, where)

    def constant(self, c: E.Constant) -> tuple[str, int]:
        if c.type.name == "float16":
            return f"__float2half({float_literal(float(c.value), float32)})", ATOM
        return super().constant(c)

    def call(self, e: E.Call) -> str:
        if e.func in gpu.INDEX_PRIMITIVES:
            return f"(int32_t){gpu.INDEX_PRIMITIVES[e.func]}"
        args = [self.expr(a) for a in e.args]
        if e.func in _SHUFFLE:
            return f"{_SHUFFLE[e.func]}(0xffffffffu, {args[0]}, {args[1]})"
        if e.func in gpu.WARP_REDUCTIONS:
            return f"tl_{e.func}({args[0]})"
        if e.func == "tf32_round":
            return f"tl_tf32_round({args[0]})"
        if e.func == "exp2" and e.type == float32:
            return f"tl_exp2_f32({args[0]})"
        return super().call(e)

    # ----------------------------------------------------------------- statements
    def stmt(self, s: S.Stmt, d: int) -> None:
        if isinstance(s, S.For) and s.kind == "parallel":
            raise CodegenError(f"{self.where}: a parallel loop is a CPU construct; a CUDA kernel's "
                               "workers are its threads (map tasks onto threadIdx.x)")
        if isinstance(s, S.Barrier):
            self.emit(d, "__syncthreads();")
        elif isinstance(s, gpu.AtomicAdd):
            self.emit(d, f"atomicAdd(&{self.expr(s.ref)}, {self.expr(s.value)});")
        elif isinstance(s, gpu.VectorCopy):
            self.emit(d, f"tl_copy<{s.nbytes}>(&{self.expr(s.dst)}, &{self.expr(s.src)});")
        elif isinstance(s, gpu.CpAsync):
            src_bytes = s.nbytes if s.src_bytes is None else self.expr(s.src_bytes)
            self.emit(d, f"tl_cp_async<{s.nbytes}>(&{self.expr(s.dst)}, &{self.expr(s.src)}, {src_bytes});")
        elif isinstance(s, gpu.CpAsyncCommit):
            self.emit(d, "tl_cp_async_commit();")
        elif isinstance(s, gpu.CpAsyncWait):
            self.emit(d, f"tl_cp_async_wait<{s.pending}>();")
        elif isinstance(s, gpu.Ldmatrix):
            trans = "true" if s.trans else "false"
            self.emit(d, f"tl_ldmatrix<{s.num}, {trans}>(&{self.expr(s.dst)}, &{self.expr(s.src)});")
        elif isinstance(s, gpu.MmaSync):
            kind = _PTX_TYPE[s.a.type.name]
            operands = ", ".join(f"&{self.expr(x)}" for x in (s.d, s.a, s.b, s.c))
            self.emit(d, f"tl_mma_{s.shape}_{kind}({operands});")
        elif isinstance(s, gpu.Wgmma):
            if not self.target.has_wgmma():
                raise CodegenError(f"{self.where}: wgmma is Hopper's (sm_90a); the target is {self.target.arch}")
            kind = _PTX_TYPE[s.a.type.name]
            trans = f"{int(s.a_major == 'mn')}, {int(s.b_major == 'mn')}"
            a = f"tl_gmma_desc(&{self.expr(s.a)}, {s.a_lbo}, {s.a_sbo})"
            b = f"tl_gmma_desc(&{self.expr(s.b)}, {s.b_lbo}, {s.b_sbo})"
            self.emit(d, f"tl_wgmma_{s.shape}_{kind}<{trans}>(&{self.expr(s.d)}, {a}, {b});")
        elif isinstance(s, gpu.WgmmaFence):
            self.emit(d, f"tl_fence_operands<{self._registers(s.acc)}>({c_name(s.acc.name)});")
            self.emit(d, 'asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");')
        elif isinstance(s, gpu.WgmmaCommit):
            self.emit(d, 'asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");')
        elif isinstance(s, gpu.WgmmaWait):
            self.emit(d, f'asm volatile("wgmma.wait_group.sync.aligned %0;\\n" :: "n"({s.pending}) : "memory");')
            self.emit(d, f"tl_fence_operands<{self._registers(s.acc)}>({c_name(s.acc.name)});")
        elif isinstance(s, gpu.MbarrierInit):
            self.emit(d, f"tl_mbarrier_init(&{self.expr(s.bar)}, {s.count});")
        elif isinstance(s, gpu.FenceMbarrierInit):
            self.emit(d, "tl_fence_mbarrier_init();")
        elif isinstance(s, gpu.MbarrierExpectTx):
            self.emit(d, f"tl_mbarrier_expect_tx(&{self.expr(s.bar)}, {s.nbytes});")
        elif isinstance(s, gpu.MbarrierArrive):
            self.emit(d, f"tl_mbarrier_arrive(&{self.expr(s.bar)});")
        elif isinstance(s, gpu.WarpSpecialized):
            self.warp_specialized(s, d)
        elif isinstance(s, gpu.MbarrierWait):
            self.emit(d, f"tl_mbarrier_wait(&{self.expr(s.bar)}, {self.expr(s.phase)});")
        elif isinstance(s, gpu.TmaLoad):
            if s.tmap not in {t.name for t in gpu.tensor_maps(self.fn)}:
                raise CodegenError(f"{self.where}: tma_load names tensor map '{s.tmap}', which the kernel lacks")
            coords = ", ".join(self.expr(c) for c in s.coords)
            self.emit(d, f"tl_tma_load_{len(s.coords)}d(&{self.expr(s.dst)}, &{c_name(s.tmap)}, {coords}, "
                         f"&{self.expr(s.bar)});")
        elif isinstance(s, gpu.FenceProxyAsync):
            self.emit(d, 'asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");')
        else:
            super().stmt(s, d)

    def warp_specialized(self, s: gpu.WarpSpecialized, d: int) -> None:
        """The two roles as two branches, each its warpgroups' register budget, then its loop."""
        var = f"{self.ctype(s.var.type)} {c_name(s.var.name)}"
        loop = f"for ({var} = 0; {c_name(s.var.name)} < {self.expr(s.steps)}; ++{c_name(s.var.name)}) {{"
        self.emit(d, f"if ({self.expr(s.producer)}) {{  // the producers: copies")
        self.emit(d + 1, f'asm volatile("setmaxnreg.dec.sync.aligned.u32 {s.producer_registers};\\n");')
        self.emit(d + 1, f"if ({self.expr(s.leader)}) {{")
        self.emit(d + 2, loop)
        self.stmt(s.producer_wait, d + 3)
        self.block(s.producer_step, d + 3)
        self.emit(d + 2, "}")
        self.emit(d + 1, "}")
        self.emit(d, "} else {  // the consumers: wgmma")
        self.emit(d + 1, f'asm volatile("setmaxnreg.inc.sync.aligned.u32 {s.consumer_registers};\\n");')
        self.block(s.consumer_setup, d + 1)
        self.emit(d + 1, loop)
        self.stmt(s.consumer_wait, d + 2)
        self.block(s.consumer_step, d + 2)
        self.emit(d + 1, "}")
        self.block(s.consumer_finish, d + 1)
        self.emit(d, "}")

    def _registers(self, acc: E.Var) -> int:
        """The elements of a register buffer of accumulators (a wgmma fence names them all)."""
        size = acc.type.shape[0] if isinstance(acc.type, TensorType) else None
        if size is None or not E.is_const(size):
            raise CodegenError(f"{self.where}: wgmma's accumulators '{acc.name}' need a static size")
        return int(size.value)  # type: ignore[attr-defined]

    def loop_pragma(self, s: S.For) -> str | None:
        # a vectorize loop is a serial loop in one thread; it keeps the simd hint the C
        # renderer always gave it, which nvcc ignores
        return "#pragma omp simd" if s.kind == "vectorize" else super().loop_pragma(s)

    def unroll_pragma(self, s: S.For) -> str:
        return f"#pragma unroll {s.extent.value}" if E.is_const(s.extent) else "#pragma unroll"  # type: ignore[attr-defined]

    def declare_buffer(self, s: S.Declare, d: int) -> None:
        """A shared or register array: a CUDA kernel's buffers have static sizes."""
        t = s.var.type
        assert isinstance(t, TensorType)
        if s.scope == "global":
            raise CodegenError(f"{self.where}: buffer '{s.var.name}' is declared in global scope; a CUDA "
                               "kernel gets global memory as a parameter")
        size = t.shape[0]
        if not E.is_const(size):
            raise CodegenError(f"{self.where}: buffer '{s.var.name}' has the symbolic size {size!r}; "
                               "shared and register buffers need a static size")
        ctype, name = self.ctype(t.dtype, self.where), c_name(s.var.name)
        if s.scope == "shared" and s.var.name in self.reuse:
            self.reused_buffer(s.var.name, ctype, int(size.value) * t.dtype.nbytes, d)  # type: ignore[attr-defined]
            return
        if s.scope == "shared" and self.dynamic_bytes:
            self.dynamic_buffer(s.var.name, ctype, int(size.value) * t.dtype.nbytes, d)  # type: ignore[attr-defined]
            return
        prefix = "__shared__ " if s.scope == "shared" else ""
        # a 16-byte access (cp.async, ldmatrix, copy_vector) may start at [0]
        align = f" __align__({self.shared_align if s.scope == 'shared' else 16})"
        self.emit(d, f"{prefix}{ctype}{align} {name}[{size.value}];  // {s.scope}")  # type: ignore[attr-defined]

    def declares_shared(self) -> bool:
        return any(x.scope == "shared" for x in collect(self.fn.body, S.Declare))  # type: ignore[attr-defined]

    def dynamic_buffer(self, name: str, ctype: str, nbytes: int, d: int) -> None:
        """A shared buffer at the next 16-byte (wgmma: 1024-byte) boundary of the kernel's
        dynamic shared memory."""
        assert self.dynamic_bytes is not None
        align = self.shared_align
        start = -(-self.dynamic_offset // align) * align
        self.dynamic_offset = start + nbytes
        self.shared_starts[name] = start
        if self.dynamic_offset > self.dynamic_bytes - (align if align > 16 else 0):
            raise CodegenError(f"{self.where}: shared buffer '{name}' ends at byte {self.dynamic_offset} of the "
                               f"dynamic shared memory, which the launch sizes at {self.dynamic_bytes} bytes")
        self.emit(d, f"{ctype}* const {c_name(name)} = ({ctype}*)(tl_dynamic_shared + {start});  // shared, dynamic")

    def reused_buffer(self, name: str, ctype: str, nbytes: int, d: int) -> None:
        """A shared buffer laid over the dynamic shared memory of the one it reuses, from that
        one's start (the kernel passes a barrier between their uses)."""
        other = self.reuse[name]
        if not self.dynamic_bytes or other not in self.shared_starts:
            raise CodegenError(f"{self.where}: shared buffer '{name}' reuses '{other}', which is not a buffer of "
                               "the kernel's dynamic shared memory declared before it")
        start = self.shared_starts[other]
        if start + nbytes > self.dynamic_bytes:
            raise CodegenError(f"{self.where}: shared buffer '{name}' would end at byte {start + nbytes} of the "
                               f"dynamic shared memory, which the launch sizes at {self.dynamic_bytes} bytes")
        self.emit(d, f"{ctype}* const {c_name(name)} = ({ctype}*)(tl_dynamic_shared + {start});  "
                     f"// shared, over {c_name(other)} and what follows it")

    # ----------------------------------------------------------------- function
    def function(self) -> str:
        grid, block, dynamic = gpu.launch_dims(self.fn)
        threads = _static_product(block)
        bounds = f"__launch_bounds__({threads}) " if threads is not None else ""
        self.emit_doc()
        params = self.param_list()
        symbol = c_symbol(self.fn.name)
        maps = gpu.tensor_maps(self.fn)
        if maps and not self.target.has_wgmma():
            raise CodegenError(f"{self.where}: TMA is Hopper's (sm_90a); the target is {self.target.arch}")
        # TMA descriptors follow the parameters, by value: the launcher encodes them
        kernel_params = ", ".join([params] * bool(params) + [f"const __grid_constant__ tl_tensor_map {c_name(t.name)}"
                                                              for t in maps])
        self.emit(0, "#if defined(__CUDACC__)")
        self.emit(0, f'extern "C" __global__ void {bounds}{symbol}({kernel_params}) {{')
        if self.dynamic_bytes and self.declares_shared() and self.shared_align > 16:
            a = self.shared_align
            self.emit(1, f"extern __shared__ __align__({a}) unsigned char tl_dynamic_raw[];")
            self.emit(1, f"unsigned char* const tl_dynamic_shared = tl_dynamic_raw + "
                         f"(({a}u - (unsigned)__cvta_generic_to_shared(tl_dynamic_raw)) % {a}u);")
        elif self.dynamic_bytes and self.declares_shared():
            self.emit(1, "extern __shared__ __align__(16) unsigned char tl_dynamic_shared[];")
        if dependent_launch(self.target):
            self.emit(1, f"{PDL_WAIT}  // launched early: wait for the kernel before")
        self.block(self.fn.body, 1)
        self.emit(0, "}")
        self.emit(0, "#endif")
        self.lines.append("")
        self.launcher(symbol, params, grid, block, dynamic)
        return "\n".join(self.lines)

    def launcher(self, symbol: str, params: str, grid: tuple, block: tuple, dynamic: E.Expr) -> None:
        """The host function that launches the kernel on a stream and returns the error code:
        by ``<<<>>>`` where nvcc builds it, else from the cubin NVRTC built (the prelude's
        ``tl_kernel``)."""
        maps = gpu.tensor_maps(self.fn)
        names = [c_name(p.name) for p in self.fn.params] + ([STATUS] if self.fn.reports_status else [])
        sep = ", " if names else ""
        args = ", ".join(names)
        self.emit(0, "#if !defined(__CUDACC_RTC__)")
        self.emit(0, f'extern "C" int {LAUNCH_PREFIX}{symbol}({params if args else ""}{sep}void* stream) {{')
        self.emit(1, f"const dim3 grid({', '.join(self.expr(g) for g in grid)});")
        self.emit(1, f"const dim3 block({', '.join(self.expr(b) for b in block)});")
        self.emit(1, f"const size_t shared_bytes = (size_t)({self.expr(dynamic)});")
        # ::kernel, the global one: a parameter may have the kernel's name (an output named after its op)
        self.either([f"const void* const fn = (const void*)::{symbol};"],
                    ["static cudaKernel_t kernel = nullptr;",
                     f'if (kernel == nullptr) {{ int e = tl_kernel("{symbol}", &kernel); if (e) return e; }}',
                     "const void* const fn = (const void*)kernel;"])
        # above 48 KiB a kernel must opt in: once a device, so that a launch captured into a
        # CUDA graph (after one that was not) makes no other call
        self.emit(1, "if (shared_bytes > 48 * 1024) {")
        self.emit(2, "static size_t opted[TL_DEVICES];")
        self.emit(2, "int device = 0;")
        self.emit(2, "cudaGetDevice(&device);")
        self.emit(2, "if (device >= TL_DEVICES || opted[device] < shared_bytes) {")
        self.emit(3, "int e = (int)cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                     "(int)shared_bytes);")
        self.emit(3, "if (e) return e;")
        self.emit(3, "if (device < TL_DEVICES) opted[device] = shared_bytes;")
        self.emit(2, "}")
        self.emit(1, "}")
        self.emit(1, "if (grid.x == 0 || grid.y == 0 || grid.z == 0) return 0;  // nothing to do")
        for t in maps:
            self.tensor_map(t)
        names += [c_name(t.name) for t in maps]
        args = ", ".join(names)
        argv = f"void* argv[] = {{{', '.join(f'(void*)&{n}' for n in names) or 'nullptr'}}};"
        if dependent_launch(self.target):
            self.emit(1, argv)
            self.emit(1, "cudaLaunchAttribute dependent[1];")
            self.emit(1, "dependent[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;")
            self.emit(1, "dependent[0].val.programmaticStreamSerializationAllowed = 1;")
            self.emit(1, "cudaLaunchConfig_t config = {grid, block, shared_bytes, (cudaStream_t)stream, dependent, 1};")
            self.emit(1, "return (int)cudaLaunchKernelExC(&config, fn, argv);")
        else:
            self.either([f"::{symbol}<<<grid, block, shared_bytes, (cudaStream_t)stream>>>({args});",
                         "return (int)cudaGetLastError();"],
                        [argv, "return (int)cudaLaunchKernel(fn, grid, block, argv, shared_bytes, (cudaStream_t)stream);"])
        self.emit(0, "}")
        self.emit(0, "#endif")

    def tensor_map(self, t: gpu.TensorMap) -> None:
        """The launcher's encoding of TMA descriptor ``t`` over its tensor's pointer."""
        tensor = next(p for p in self.fn.params if p.name == t.tensor)
        code = {"float16": 6, "bfloat16": 9}[tensor.type.dtype.name]  # type: ignore[union-attr]
        name = c_name(t.name)
        self.emit(1, f"tl_tensor_map {name};  // {t.tensor} as {' x '.join(map(str, t.dims))}, "
                     f"boxes of {' x '.join(map(str, t.box))}")
        self.emit(1, "{")
        self.emit(2, f"const unsigned long long dims[] = {{{', '.join(map(_extent_text, t.dims))}}};")
        self.emit(2, f"const unsigned long long strides[] = {{{', '.join(f'{x}ull' for x in t.strides) or '0'}}};")
        self.emit(2, f"const unsigned box[] = {{{', '.join(map(str, t.box))}}};")
        self.emit(2, f"int e = tl_encode_tensor_map(&{name}, {code}, {len(t.dims)}, (void*){c_name(t.tensor)}, "
                     "dims, strides, box);")
        self.emit(2, "if (e) return e;")
        self.emit(1, "}")

    def either(self, by_nvcc: list[str], beside_nvrtc: list[str]) -> None:
        """Lines for nvcc's build, else for the host's compiler beside NVRTC's."""
        self.emit(0, "#if defined(__CUDACC__)")
        for line in by_nvcc:
            self.emit(1, line)
        self.emit(0, "#else")
        for line in beside_nvrtc:
            self.emit(1, line)
        self.emit(0, "#endif")


def _extent_text(d: int | str) -> str:
    """A tensor map's extent in C: an int, or a product of the kernel's size parameters."""
    if isinstance(d, int):
        return f"{d}ull"
    return " * ".join(f"{f}ull" if f.isdigit() else f"(unsigned long long){c_name(f)}" for f in d.split("*"))


def cuda_param_type(p: E.Var) -> str:
    """The CUDA C++ type of a kernel's parameter ``p`` (without ``const``), which a graph's
    launcher casts the entries of its tables to: a buffer's pointer type, or a size's
    integer type (a dynamic graph's symbol)."""
    t = p.type
    if isinstance(t, DataType) and t.is_integer():
        return c_type(t, p.name)
    if not isinstance(t, (TensorType, PointerType)):
        raise CodegenError(f"parameter '{p.name}' is a {t!r} scalar; a compiled graph's kernels take buffers "
                           "and integer sizes only")
    base = t.dtype if isinstance(t, TensorType) else t.base
    return f"{_HALF.get(base.name, None) or c_type(base, p.name)}*"  # type: ignore[union-attr]


def _static_product(extents: tuple) -> int | None:
    total = 1
    for x in extents:
        if not E.is_const(x):
            return None
        total *= int(x.value)
    return total


def codegen_cuda(module: S.Module, target: CudaTarget) -> str:
    """The CUDA C++ translation unit for a lowered module of ``cuda_kernel`` functions."""
    parts = [f"// Generated by taskloom for {target.name} ({target.key()}).", CUDA_PRELUDE]
    wgmmas = sorted({(gpu.wgmma_n(s.shape), s.a.type.name) for f in module.functions for s in collect(f.body, gpu.Wgmma)})
    parts += [wgmma_wrapper(n, _PTX_TYPE[t], _HALF[t]) for n, t in wgmmas]
    checks: list[str] = []
    for f in module.functions:
        if f.kind != "cuda_kernel":
            raise CodegenError(f"function '{f.name}' is a {f.kind}; the CUDA backend builds cuda_kernel functions")
        parts.append(_CudaKernelCodegen(f, target, checks).function())
    if checks:
        parts.append('extern "C" ' + checks_table(checks))
    return "\n\n".join(parts) + "\n"
