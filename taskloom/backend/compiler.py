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

from taskloom.backend.c_units import build_cores, join_pieces, split_units, unit_count
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


def build_key(source: str, flags: Sequence[str], target: Target) -> str:
    """The cache key of a build: sha256 of the source, the flags and the compiler version."""
    parts: dict[str, Any] = {"source": source, "flags": list(flags), "link": list(LINK_FLAGS),
                             "compiler": compiler_version(), "target": target.key()}
    if "-march=native" in flags:
        # -march=native means something else on another machine sharing the cache.
        host = host_target()
        parts["host"] = [host.name, host.key()]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def compile_shared_library(source: str | Sequence[str], target: Target, *, name: str = "module",
                           extra_flags: Sequence[str] = (), cache: BuildCache | None = None,
                           meta: Mapping[str, Any] | None = None,
                           timeout: float = DEFAULT_TIMEOUT_S) -> Path:
    """Build ``source`` into a shared library for ``target`` and return its path.

    ``source`` is the C text, or its top-level pieces, the prelude first
    (:func:`~taskloom.backend.codegen_x86.codegen_x86_pieces`), from which a large library
    builds as several translation units side by side (:mod:`taskloom.backend.c_units`).
    Builds are cached by :func:`build_key` of the whole text; on a hit no compiler runs.
    ``meta`` (JSON-able, e.g. kernel signatures) is stored beside the library. On failure a
    :class:`CompileError` carries the compiler's output and the path of the kept source.
    """
    cache = cache or BuildCache.default()
    pieces = None if isinstance(source, str) else list(source)
    text = source if isinstance(source, str) else join_pieces(source)
    flags = build_flags(target, extra_flags)
    key = build_key(text, flags, target)
    entry = cache.lookup(key)
    if entry is not None:
        return entry.lib_path

    command = compiler_command()
    units = unit_count(pieces, build_cores()) if pieces else 1

    def steps(src: Path, lib: Path) -> list[list[list[str]]]:
        if units == 1:
            return [[[*command, *flags, "-o", str(lib), str(src), *LINK_FLAGS]]]
        objects = []
        for u, unit in enumerate(split_units(pieces, units, str(src))):  # type: ignore[arg-type]
            (src.parent / f"unit{u}.c").write_text(unit)
            objects.append(src.parent / f"unit{u}.o")
        compile_each = [[*command, *flags, "-c", "-o", str(o), str(o.with_suffix(".c"))] for o in objects]
        return [compile_each, [[*command, *flags, "-o", str(lib), *map(str, objects), *LINK_FLAGS]]]
    info = {"flags": flags, "compiler": compiler_version(), "target": target.key(), "units": units, **(meta or {})}
    return build_cached(cache, key, name, text, "source.c", steps, info, timeout,
                        missing="install gcc or set CC to a C compiler")


def build_cached(cache: BuildCache, key: str, name: str, source: str, source_name: str,
                 steps: Callable[[Path, Path], list[list[list[str]]]], info: Mapping[str, Any], timeout: float,
                 missing: str, describe: Callable[[str], Mapping[str, Any]] | None = None) -> Path:
    """Run the compiler commands ``steps(source path, library path)`` on ``source`` in a
    scratch directory (in steps, the commands of a step side by side) and store the library
    under ``key`` with ``info`` and what ``describe(compiler output)`` adds to it; return the
    library's path. A failure keeps the source (``cache.failed_path``) and raises a
    :class:`CompileError` with the compiler's output pointing at it; ``missing`` says what
    to install when the compiler cannot be run."""
    with cache.scratch_dir() as scratch:
        src, lib = Path(scratch) / source_name, Path(scratch) / "lib.so"
        src.write_text(source)
        started = time.perf_counter()
        suffix = Path(source_name).suffix
        kept = cache.failed_path(key, name, suffix)
        output = ""
        for step in steps(src, lib):
            shown = "\n".join(shlex.join(c) for c in step)
            try:
                code, out = run_side_by_side(step, started + timeout - time.perf_counter())
            except subprocess.TimeoutExpired:
                cache.save_failed(key, name, source, f"timed out after {timeout:g} s:\n{shown}\n", suffix)
                raise CompileError(f"compiling {name!r} timed out after {timeout:g} s", str(kept)) from None
            except OSError as exc:
                cache.save_failed(key, name, source, str(exc), suffix)
                raise CompileError(f"cannot run {step[0][0]!r} ({exc}); {missing}", str(kept)) from None
            # Point the compiler's file:line references at the kept copy, not the scratch file.
            output += out.replace(str(src), str(kept))
            if code != 0:
                break
        if code != 0 or not lib.is_file():
            cache.save_failed(key, name, source, f"{shown}\n{output}", suffix)
            raise CompileError(f"{step[0][0]} failed to compile {name!r} (exit {code})", str(kept), output)
        full = {"name": name, "created": time.time(),
                "compile_seconds": round(time.perf_counter() - started, 3), **info,
                **(describe(output) if describe else {})}
        entry = cache.store(key, {source_name: source, "lib.so": lib}, full)
    return entry.lib_path


def run_side_by_side(commands: Sequence[list[str]], timeout: float) -> tuple[int, str]:
    """Run ``commands`` at once and wait for all: the first nonzero exit status (0 if none)
    and their stderr and stdout, in order. Past ``timeout`` seconds every one still running
    is killed and :class:`subprocess.TimeoutExpired` raised."""
    running: list[subprocess.Popen] = []
    try:
        for c in commands:
            running.append(subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        deadline = time.perf_counter() + timeout
        done = [p.communicate(timeout=max(deadline - time.perf_counter(), 0.001)) for p in running]
    finally:
        for p in running:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = [p.returncode for p in running if p.returncode]
    return (codes[0] if codes else 0), "".join(err + out for out, err in done)
