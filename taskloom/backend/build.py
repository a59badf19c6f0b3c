"""From IR functions to a built shared library: lower, generate C, compile (cached)."""
from __future__ import annotations

import contextlib
import ctypes
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from taskloom.backend.cache import BuildCache
from taskloom.backend.codegen_c import c_symbol
from taskloom.backend.codegen_cuda import codegen_cuda
from taskloom.backend.codegen_x86 import codegen_x86_pieces
from taskloom.backend.compiler import compile_shared_library
from taskloom.backend.nvcc import KernelResources, compile_cuda_library
from taskloom.errors import CodegenError, LoadError, TaskloomError
from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import DataType, PointerType, TensorType
from taskloom.ir.printer import expr_text
from taskloom.target import get_cpu_target
from taskloom.target.base import Target
from taskloom.target.cuda import CudaTarget
from taskloom import transforms


@dataclass(frozen=True)
class BuiltLibrary:
    """A compiled shared library and what is needed to call it."""

    lib_path: Path
    source_path: Path
    signatures: list[dict[str, Any]]
    target: Target


def _dim(d: E.Expr, params: set[str], where: str) -> int | str:
    if isinstance(d, E.Constant):
        return int(d.value)
    missing = {v.name for v in E.free_vars(d)} - params
    if missing:
        raise CodegenError(f"{where}: its shape uses {sorted(missing)}, which are not parameters; "
                           "every symbol in a parameter's shape must be a scalar parameter too")
    return d.name if isinstance(d, E.Var) else expr_text(d)


def signature(fn: S.Function) -> dict[str, Any]:
    """The calling signature the runtime checks arguments against (JSON-able)."""
    written = gpu.written_tensors(fn.body)
    scalars = {p.name for p in fn.params if isinstance(p.type, DataType)}
    params = []
    for p in fn.params:
        t = p.type
        if isinstance(t, DataType):
            params.append({"name": p.name, "kind": "scalar", "dtype": t.name})
        elif isinstance(t, TensorType):
            where = f"kernel '{fn.name}', parameter '{p.name}'"
            params.append({"name": p.name, "kind": "tensor", "dtype": t.dtype.name,  # type: ignore[union-attr]
                           "shape": [_dim(d, scalars, where) for d in t.shape], "written": p in written})
        elif isinstance(t, PointerType):
            params.append({"name": p.name, "kind": "pointer", "dtype": t.base.name,  # type: ignore[union-attr]
                           "written": p in written})
        else:
            raise CodegenError(f"kernel '{fn.name}': parameter '{p.name}' has type {t!r}, which cannot be passed")
    return {"name": fn.name, "symbol": c_symbol(fn.name), "params": params}


def build_library(functions: S.Function | S.Module | Sequence[S.Function], target: Target | str | None = None,
                  *, name: str | None = None, cache: BuildCache | None = None,
                  extra_source: str = "", timings: dict[str, float] | None = None,
                  load_check: bool = False) -> BuiltLibrary:
    """Lowers ``functions``, generates C for ``target`` (default: this machine) and builds it.

    The build is content-addressed: building the same functions for the same target again
    costs no compiler run. ``extra_source`` is C appended to the generated code (a graph's
    launcher). ``timings``, when given, receives the seconds spent in ``"codegen"`` (lowering
    and C generation) and ``"cc"`` (the C compiler, or the cache lookup that replaced it).
    ``load_check``: load the library here (a caller about to load it anyway); a cached one
    that fails to load is dropped from the cache and built again, once.
    """
    tgt = get_cpu_target(target, "taskloom.build")
    fns = list(functions.functions if isinstance(functions, S.Module)
               else [functions] if isinstance(functions, S.Function) else functions)
    started = time.perf_counter()
    sigs = _signatures(fns)
    module = S.Module(tuple(transforms.lower(f) for f in fns))
    pieces = codegen_x86_pieces(module, tgt) + ([extra_source.strip("\n")] if extra_source else [])
    generated = time.perf_counter()

    def compile_() -> Path:
        return compile_shared_library(pieces, tgt, name=name or fns[0].name, cache=cache,
                                      meta={"signatures": sigs})
    lib = _loadable(compile_, cache) if load_check else compile_()
    if timings is not None:
        timings["codegen"] = generated - started
        timings["cc"] = time.perf_counter() - generated
    return BuiltLibrary(lib, lib.parent / "source.c", sigs, tgt)


def _loadable(compile_: Callable[[], Path], cache: BuildCache | None) -> Path:
    """The library ``compile_`` builds or finds cached, loaded once to see that it loads; one
    that does not is dropped from the cache and built again, and if that fails too, an error."""
    lib = compile_()
    if _load_error(lib, cache) is None:
        return lib
    lib = compile_()
    error = _load_error(lib, cache)
    if error is not None:
        raise LoadError(f"the library built at {lib} cannot be loaded even after building it again: "
                        f"{error}; check that the C compiler's OpenMP runtime (libgomp) is installed and "
                        "that the cache directory (TASKLOOM_CACHE_DIR) allows running code")
    return lib


def _load_error(lib: Path, cache: BuildCache | None) -> OSError | None:
    """None if ``lib`` loads; else the error, with its cache entry removed."""
    try:
        ctypes.CDLL(str(lib.resolve()))
        return None
    except OSError as exc:
        cache = cache or BuildCache.default()
        with contextlib.suppress(TaskloomError):  # TaskloomError: not a cache entry's folder
            if lib.name == "lib.so" and cache.entry_path(lib.parent.name) == lib.parent:
                cache.remove(lib.parent.name)
        return exc


@dataclass(frozen=True)
class BuiltCudaLibrary:
    """A CUDA library built by nvcc: its path and source, each kernel's call signature, what
    ptxas reported it uses, and the lowered kernels themselves (what the emulator runs)."""

    lib_path: Path
    source_path: Path
    signatures: list[dict[str, Any]]
    target: CudaTarget
    resources: dict[str, KernelResources]
    kernels: tuple[S.Function, ...]


def _host_only(source: str) -> str:
    """``source`` (host code) hidden from NVRTC, which compiles the device code alone."""
    return f"\n#if !defined(__CUDACC_RTC__)\n{source}\n#endif\n" if source else ""


def _signatures(fns: Sequence[S.Function]) -> list[dict[str, Any]]:
    """Each function's call signature; ``status`` where the kernel takes a status last, for
    its run-time checks to report to."""
    sigs = [signature(f) for f in fns]
    for sig, f in zip(sigs, fns):
        if f.reports_status:
            sig["status"] = True
    return sigs


def build_cuda_library(functions: S.Function | S.Module | Sequence[S.Function], target: CudaTarget, *,
                       name: str | None = None, cache: BuildCache | None = None, extra_source: str = "",
                       timings: dict[str, float] | None = None,
                       lowered: Sequence[S.Function] | None = None) -> BuiltCudaLibrary:
    """Lowers ``cuda_kernel`` functions, renders them as CUDA C++ and builds them with nvcc
    for ``target`` (cached by content, like CPU builds). ``extra_source`` is CUDA C++
    appended (a graph's launcher); ``timings`` receives ``"codegen"`` and ``"cc"`` seconds;
    ``lowered``: the functions already lowered, in order (a caller that needed them first)."""
    fns = list(functions.functions if isinstance(functions, S.Module)
               else [functions] if isinstance(functions, S.Function) else functions)
    started = time.perf_counter()
    sigs = _signatures(fns)
    lowered = tuple(lowered) if lowered is not None else tuple(transforms.lower(f) for f in fns)
    source = codegen_cuda(S.Module(lowered), target) + _host_only(extra_source)
    generated = time.perf_counter()
    lib, resources = compile_cuda_library(source, target, name=name or fns[0].name, cache=cache,
                                          meta={"signatures": sigs})
    if timings is not None:
        timings["codegen"] = generated - started
        timings["cc"] = time.perf_counter() - generated
    return BuiltCudaLibrary(lib, lib.parent / "source.cu", sigs, target, resources, lowered)
