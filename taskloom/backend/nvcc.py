"""The CUDA compiler driver: generated CUDA C++ in, cached shared library out, with ptxas's
report of what each kernel uses.

``nvcc`` builds the kernels for the target's architecture and the host code that launches
them into one shared library (the CUDA runtime linked statically, so loading it needs no
GPU and no toolkit; running it needs the driver). Where nvcc is not installed, NVRTC and
the CUDA runtime from PyPI build the same file (:mod:`taskloom.backend.nvrtc`;
``TASKLOOM_CUDA_COMPILER`` picks one). ptxas's verbose report (registers, spill bytes,
shared memory, barriers per kernel) is parsed and kept in the cache entry's metadata;
:func:`check_resources` refuses a kernel that needs more than the target has before
anything is launched.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from taskloom.backend import nvrtc
from taskloom.backend.cache import BuildCache
from taskloom.backend.compiler import DEFAULT_TIMEOUT_S, build_cached
from taskloom.errors import CompileError, ResourceError
from taskloom.target.cuda import CudaTarget

BASE_FLAGS: tuple[str, ...] = ("-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", "-Xptxas", "-v")
_MISSING = ("install the CUDA toolkit (nvcc) or set NVCC to its path; a machine without it can still "
            "load and run a model compiled elsewhere")


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reports for one kernel: registers per thread, spilled bytes, static shared
    memory in bytes, barriers and stack frame."""

    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared_bytes: int = 0
    barriers: int = 0
    stack_bytes: int = 0

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)


def nvcc_command() -> list[str]:
    """``$NVCC`` split like a shell would, else ``nvcc`` from the PATH or the usual places."""
    return _installed_nvcc() or ["nvcc"]


def _installed_nvcc() -> list[str] | None:
    """``$NVCC``, or the nvcc found on the PATH or in the usual places; None where none is."""
    given = shlex.split(os.environ.get("NVCC", ""))
    if given:
        return given
    found = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).exists()), None)
    return [found] if found else None


@functools.lru_cache(maxsize=None)
def nvcc_version(command: tuple[str, ...] | None = None) -> str:
    """The release line of ``nvcc --version``; part of every CUDA build's cache key."""
    argv = list(command or nvcc_command())
    try:
        done = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompileError(f"cannot run {shlex.join(argv)!r} ({exc}); {_MISSING}") from None
    lines = [l for l in done.stdout.splitlines() if "release" in l]
    if done.returncode != 0 or not lines:
        raise CompileError(f"{shlex.join(argv)} --version failed (exit {done.returncode}); {_MISSING}",
                           compiler_output=done.stderr)
    return lines[0].strip()


def cuda_flags(target: CudaTarget, extra_flags: Sequence[str] = ()) -> list[str]:
    """Every nvcc flag of a build for ``target``, in command-line order."""
    return [*BASE_FLAGS, *target.nvcc_flags(), *extra_flags]


def cuda_compiler() -> str:
    """Which compiler builds CUDA here: ``$TASKLOOM_CUDA_COMPILER`` (``nvcc`` or ``nvrtc``),
    else nvcc where it is installed, else NVRTC from PyPI where that is
    (:mod:`taskloom.backend.nvrtc`), else nvcc (whose absence the build then reports)."""
    asked = os.environ.get("TASKLOOM_CUDA_COMPILER", "")
    if asked:
        if asked not in ("nvcc", "nvrtc"):
            raise CompileError(f"TASKLOOM_CUDA_COMPILER={asked!r} names no CUDA compiler; use 'nvcc' or 'nvrtc'")
        return asked
    if _installed_nvcc():
        return "nvcc"
    return "nvrtc" if nvrtc.problem() is None else "nvcc"


def cuda_build_key(source: str, flags: Sequence[str], target: CudaTarget, compiler: str = "nvcc") -> str:
    """The cache key of a CUDA build: sha256 of the source, flags, compiler release and target."""
    parts = {"source": source, "flags": list(flags), "nvcc": _release(compiler), "target": target.key()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _release(compiler: str) -> str:
    return nvcc_version() if compiler == "nvcc" else nvrtc.version()


def compile_cuda_library(source: str, target: CudaTarget, *, name: str = "module",
                         extra_flags: Sequence[str] = (), cache: BuildCache | None = None,
                         meta: Mapping[str, Any] | None = None,
                         timeout: float = DEFAULT_TIMEOUT_S) -> tuple[Path, dict[str, KernelResources]]:
    """Build CUDA ``source`` into a shared library for ``target``: its path and each kernel's
    resources as ptxas reported them (kept in the cache entry, so a cache hit has them too).
    Cached by :func:`cuda_build_key`; a failure is a :class:`CompileError` with nvcc's
    output and the path of the kept source."""
    cache = cache or BuildCache.default()
    compiler = cuda_compiler()
    flags = cuda_flags(target, extra_flags) if compiler == "nvcc" else _nvrtc_flags(target, extra_flags)
    key = cuda_build_key(source, flags, target, compiler)
    entry = cache.lookup(key)
    if entry is not None:
        return entry.lib_path, {k: KernelResources(**v) for k, v in entry.meta.get("resources", {}).items()}
    steps = _nvcc_steps(flags) if compiler == "nvcc" else _nvrtc_steps(target, extra_flags)
    info = {"flags": flags, "compiler": _release(compiler), "target": target.key(), **(meta or {})}
    found: dict[str, KernelResources] = {}

    def describe(output: str) -> dict[str, Any]:
        found.update(parse_ptxas_report(output))
        return {"resources": {k: asdict(v) for k, v in found.items()}}
    missing = _MISSING if compiler == "nvcc" else nvrtc.MISSING
    lib = build_cached(cache, key, name, source, "source.cu", steps, info, timeout, missing, describe)
    return lib, found


def _nvcc_steps(flags: Sequence[str]) -> Any:
    command = nvcc_command()
    return lambda src, lib: [[[*command, *flags, "-o", str(lib), str(src)]]]


#: the host compiler's flags beside NVRTC
HOST_FLAGS: tuple[str, ...] = ("-O2", "-std=c++17", "-shared", "-fPIC", "-x", "c++")


def _nvrtc_flags(target: CudaTarget, extra_flags: Sequence[str]) -> list[str]:
    return ["nvrtc", f"--gpu-architecture={target.arch}", *HOST_FLAGS, *extra_flags]


def _nvrtc_steps(target: CudaTarget, extra_flags: Sequence[str]) -> Any:
    """NVRTC to a cubin beside the source, then the host compiler to the library."""
    import sys
    problem = nvrtc.problem()
    if problem is not None:
        raise CompileError(f"cannot build CUDA with NVRTC here: {problem}; {nvrtc.MISSING}")
    include, libdir = nvrtc.runtime_dirs()  # type: ignore[misc]

    def steps(src: Path, lib: Path) -> list[list[list[str]]]:
        cubin = src.with_suffix(".cubin")
        device = [sys.executable, "-m", "taskloom.backend.nvrtc", str(src), str(cubin), "--arch", target.arch,
                  "--include", str(include)]
        host = [*shlex.split(str(nvrtc.host_compiler())), *HOST_FLAGS, *extra_flags, f"-I{include}",
                f'-DTL_CUBIN="{cubin}"', str(src), f"-L{libdir}", f"-l:{nvrtc.library_name(libdir)}",
                f"-Wl,-rpath,{libdir}", "-o", str(lib)]
        return [[device], [host]]
    return steps



_ENTRY = re.compile(r"ptxas info\s*: (?:Compiling entry function|Function properties for) '?([\w$.]+)'?")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, \d+ bytes cumulative stack size)?"
                   r"(?:, (\d+) bytes smem)?")


def parse_ptxas_report(text: str) -> dict[str, KernelResources]:
    """Each kernel's resources from ``nvcc -Xptxas -v`` output, by kernel name."""
    found: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = m.group(1)
            found.setdefault(current, {})
            continue
        if current is None:
            continue
        if m := _FRAME.search(line):
            found[current].update(stack_bytes=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif m := _USED.search(line):
            found[current].update(registers=int(m[1]), barriers=int(m[2] or 0), shared_bytes=int(m[3] or 0))
    return {k: KernelResources(**v) for k, v in found.items()}


def check_resources(kernel: str, used: KernelResources, target: CudaTarget, threads_per_block: int,
                    dynamic_shared_bytes: int = 0) -> None:
    """Refuse a launch the target cannot make: too many threads, more registers than a
    block of ``threads_per_block`` can have, or more shared memory than a block may use."""
    if threads_per_block > target.max_threads_per_block:
        raise ResourceError(f"kernel {kernel!r} launches {threads_per_block} threads per block; "
                            f"{target.name} allows {target.max_threads_per_block}")
    if used.registers * threads_per_block > target.registers_per_sm:
        raise ResourceError(f"kernel {kernel!r} uses {used.registers} registers per thread, "
                            f"{used.registers * threads_per_block} for a block of {threads_per_block}; "
                            f"an SM of {target.name} has {target.registers_per_sm}: use smaller blocks "
                            f"or fewer registers (__launch_bounds__)")
    shared = used.shared_bytes + dynamic_shared_bytes
    if shared > target.shared_memory_per_block:
        raise ResourceError(f"kernel {kernel!r} needs {shared} bytes of shared memory "
                            f"({used.shared_bytes} static + {dynamic_shared_bytes} dynamic); a block on "
                            f"{target.name} may use {target.shared_memory_per_block}")
