"""NVRTC: building CUDA without the CUDA toolkit.

A machine with PyTorch's CUDA wheels has NVIDIA's runtime compiler and CUDA runtime from
PyPI (``nvidia-cuda-nvrtc``, ``nvidia-cuda-runtime``) but usually no ``nvcc``. There a
generated ``.cu`` file is built in two steps (see the prelude in
:mod:`taskloom.backend.cuda_prelude`, which guards each part for its compiler):

1. NVRTC, through ``cuda-bindings``, compiles the device code to a cubin for the target's
   architecture, with ptxas's verbose report (the same lines nvcc prints);
2. the host's C++ compiler builds the launchers into a shared library that embeds the cubin
   and links the CUDA runtime from PyPI; the first launch loads the kernels from it
   (``cudaLibraryLoadData``) and each is launched by ``cudaLaunchKernel``.

Step 1 runs as ``python -m taskloom.backend.nvrtc SOURCE CUBIN --arch sm_90a --include DIR``,
a compiler command like any other, so a build's timeout and error reporting are the same.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import shutil
import sys
from pathlib import Path

#: what to install when NVRTC is wanted and missing
MISSING = ("install the CUDA toolkit (nvcc), or NVIDIA's runtime compiler and runtime from PyPI: "
           "pip install cuda-bindings nvidia-cuda-nvrtc nvidia-cuda-runtime (PyTorch's CUDA wheels bring "
           "the last two)")


@functools.lru_cache(maxsize=None)
def runtime_dirs() -> tuple[Path, Path] | None:
    """The include and library folders of the CUDA runtime from PyPI (``nvidia/cu13`` in
    CUDA 13's wheels, ``nvidia/cuda_runtime`` in CUDA 12's), or None."""
    try:
        import nvidia
    except ImportError:
        return None
    for base in map(Path, getattr(nvidia, "__path__", [])):
        for sub in ("cu13", "cuda_runtime"):
            include, lib = base / sub / "include", base / sub / "lib"
            if (include / "cuda_runtime.h").is_file() and any(lib.glob("libcudart.so.*")):
                return include, lib
    return None


def problem() -> str | None:
    """Why NVRTC cannot build here (None when it can)."""
    try:
        importlib.import_module("cuda.bindings.nvrtc")
    except ImportError:
        return "cuda-bindings is not installed"
    if runtime_dirs() is None:
        return "the CUDA runtime's headers and library (nvidia-cuda-runtime) are not installed"
    if host_compiler() is None:
        return "no C++ compiler (g++, or $CXX) is installed"
    return None


def host_compiler() -> str | None:
    """``$CXX``, else ``g++`` from the PATH."""
    return os.environ.get("CXX") or shutil.which("g++")


@functools.lru_cache(maxsize=None)
def version() -> str:
    """``NVRTC 13.5``: part of the cache key of every build it makes."""
    from cuda.bindings import nvrtc
    err, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, err, "nvrtcVersion")
    return f"NVRTC {major}.{minor}"


def library_name(lib: Path) -> str:
    """The CUDA runtime's versioned file name in ``lib`` (``libcudart.so.13``)."""
    return sorted(p.name for p in lib.glob("libcudart.so.*"))[0]


def compile_cubin(source: bytes, arch: str, include: Path) -> tuple[bytes | None, str]:
    """NVRTC on ``source`` for ``arch``: the cubin (None on failure) and NVRTC's log."""
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(source, b"source.cu", 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        options = [f"--gpu-architecture={arch}".encode(), b"-std=c++17", b"--ptxas-options=-v",
                   f"--include-path={include}".encode()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), options)
        log = _log(nvrtc, prog)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return None, log
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(nvrtc, err, "nvrtcGetCUBIN")
        return cubin, log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _log(nvrtc, prog) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, log)
    return log.rstrip(b"\0").decode(errors="replace")


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")


def main(argv: list[str] | None = None) -> int:
    """The build step: SOURCE to CUBIN, NVRTC's log on stdout; exit 1 when it fails."""
    parser = argparse.ArgumentParser(prog="python -m taskloom.backend.nvrtc", description=main.__doc__)
    parser.add_argument("source", type=Path)
    parser.add_argument("cubin", type=Path)
    parser.add_argument("--arch", required=True)
    parser.add_argument("--include", type=Path, required=True)
    args = parser.parse_args(argv)
    cubin, log = compile_cubin(args.source.read_bytes(), args.arch, args.include)
    print(log.replace("source.cu", str(args.source)), end="" if log.endswith("\n") else "\n")
    if cubin is None:
        return 1
    args.cubin.write_bytes(cubin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
