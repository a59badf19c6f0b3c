"""The C compiler driver: generated C source in, cached shared library out."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from taskloom.backend.cache import BuildCache
from taskloom.errors import CompileError
from taskloom.target.base import Target
from taskloom.target.cpu import host_target

BASE_FLAGS: tuple[str, ...] = ("-O3", "-fopenmp", "-shared", "-fPIC", "-std=gnu11")
LINK_FLAGS: tuple[str, ...] = ("-lm",)
DEFAULT_TIMEOUT_S = 600.0


def compiler_command() -> list[str]:
    """The C compiler as an argument list: ``$CC`` split like a shell would, else ``gcc``."""
    return shlex.split(os.environ.get("CC", "")) or ["gcc"]


def compiler_version() -> str:
    """First line of ``$CC --version``; part of every build's cache key."""
    return _version_of(tuple(compiler_command()))


@functools.lru_cache(maxsize=None)
def _version_of(command: tuple[str, ...]) -> str:
    try:
        done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompileError(f"cannot run the C compiler {shlex.join(command)!r} ({exc}); "
                           f"install gcc or set CC to a C compiler") from None
    if done.returncode != 0:
        raise CompileError(f"{shlex.join(command)} --version failed (exit {done.returncode}); "
                           f"set CC to a working C compiler", compiler_output=done.stderr)
    lines = done.stdout.strip().splitlines()
    return lines[0] if lines else shlex.join(command)


def build_flags(target: Target, extra_flags: Sequence[str] = ()) -> list[str]:
    """Every compiler flag of a build for ``target`` (a CPU target, which says its gcc
    flags), in command-line order."""
    return [*BASE_FLAGS, *target.cflags(), *extra_flags]  # type: ignore[attr-defined]


#: A library of at least this many kernels is built with gcc's link-time optimizer in
#: parallel partitions (``-flto=auto``): the code generation of a large graph spreads over the
#: cores; a smaller one builds faster in one piece.
PARALLEL_BUILD_KERNELS = 8


def parallel_flags(kernels: int) -> list[str]:
    """Extra flags that spread the build of a library of ``kernels`` kernels over the
    cores: gcc's parallel link-time code generation, for a large library, when ``$CC`` is gcc."""
    if kernels < PARALLEL_BUILD_KERNELS or "gcc" not in compiler_version().lower():
        return []
    return ["-flto=auto"]


def build_key(source: str, flags: Sequence[str], target: Target) -> str:
    """The cache key of a build: sha256 of the source, the flags and the compiler version."""
    parts: dict[str, Any] = {"source": source, "flags": list(flags), "link": list(LINK_FLAGS),
                             "compiler": compiler_version(), "target": target.key()}
    if "-march=native" in flags:
        # -march=native means something else on another machine sharing the cache.
        host = host_target()
        parts["host"] = [host.name, host.key()]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def compile_shared_library(source: str, target: Target, *, name: str = "module",
                           extra_flags: Sequence[str] = (), cache: BuildCache | None = None,
                           meta: Mapping[str, Any] | None = None,
                           timeout: float = DEFAULT_TIMEOUT_S) -> Path:
    """Build ``source`` into a shared library for ``target`` and return its path.

    Builds are cached by :func:`build_key`; on a hit no compiler runs. ``meta`` (JSON-able,
    e.g. kernel signatures) is stored beside the library. On failure a
    :class:`CompileError` carries the compiler's output and the path of the kept source.
    """
    cache = cache or BuildCache.default()
    flags = build_flags(target, extra_flags)
    key = build_key(source, flags, target)
    entry = cache.lookup(key)
    if entry is not None:
        return entry.lib_path

    command = compiler_command()

    def run(src: Path, lib: Path) -> list[str]:
        return [*command, *flags, "-o", str(lib), str(src), *LINK_FLAGS]
    info = {"flags": flags, "compiler": compiler_version(), "target": target.key(), **(meta or {})}
    return build_cached(cache, key, name, source, "source.c", run, info, timeout,
                        missing="install gcc or set CC to a C compiler")


def build_cached(cache: BuildCache, key: str, name: str, source: str, source_name: str,
                 argv: Callable[[Path, Path], list[str]], info: Mapping[str, Any], timeout: float,
                 missing: str, describe: Callable[[str], Mapping[str, Any]] | None = None) -> Path:
    """Run the compiler command ``argv(source path, library path)`` on ``source`` in a
    scratch directory and store the library under ``key`` with ``info`` and what
    ``describe(compiler output)`` adds to it; return the library's path. A failure keeps the source (``cache.failed_path``) and raises a
    :class:`CompileError` with the compiler's output pointing at it; ``missing`` says what
    to install when the compiler cannot be run."""
    with cache.scratch_dir() as scratch:
        src, lib = Path(scratch) / source_name, Path(scratch) / "lib.so"
        src.write_text(source)
        command = argv(src, lib)
        started = time.perf_counter()
        suffix = Path(source_name).suffix
        kept = cache.failed_path(key, name, suffix)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            cache.save_failed(key, name, source, f"timed out after {timeout:g} s:\n{shlex.join(command)}\n", suffix)
            raise CompileError(f"compiling {name!r} timed out after {timeout:g} s", str(kept)) from None
        except OSError as exc:
            cache.save_failed(key, name, source, str(exc), suffix)
            raise CompileError(f"cannot run {command[0]!r} ({exc}); {missing}", str(kept)) from None
        # Point the compiler's file:line references at the kept copy, not the scratch file.
        output = (done.stderr + done.stdout).replace(str(src), str(kept))
        if done.returncode != 0 or not lib.is_file():
            cache.save_failed(key, name, source, f"{shlex.join(command)}\n{output}", suffix)
            raise CompileError(f"{command[0]} failed to compile {name!r} (exit {done.returncode})",
                               str(kept), output)
        full = {"name": name, "created": time.time(),
                "compile_seconds": round(time.perf_counter() - started, 3), **info,
                **(describe(output) if describe else {})}
        entry = cache.store(key, {source_name: source, "lib.so": lib}, full)
    return entry.lib_path
