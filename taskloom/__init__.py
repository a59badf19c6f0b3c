"""taskloom: a deep learning compiler built on task mappings and post-scheduling fusion.

    import taskloom
    from taskloom.script import kernel

    module = taskloom.build(my_kernel)          # lower, generate C, compile (cached), load
    module["my_kernel"](a, b, c)                # numpy arrays or torch tensors, no copies
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from taskloom.errors import TaskloomError
from taskloom.target import CpuTarget, get_target, host_target
from taskloom.graph import Tensor, asarray, from_torch
from taskloom import compiler as _compiler  # registers the eager executor
from taskloom import ops

if TYPE_CHECKING:
    from taskloom.ir.stmt import Function, Module as IRModule
    from taskloom.graph import Graph
    from taskloom.runtime import Module
    from taskloom.runtime.compiled_graph import CompiledGraph

__version__ = "0.1.0"


def build(functions: "Function | IRModule | Sequence[Function]", target: CpuTarget | str | None = None,
          *, name: str | None = None) -> "Module":
    """Builds IR functions (e.g. from ``@kernel``) for ``target`` (default: this machine) and
    loads them. Builds are cached by content, so a second build of the same code is free.
    """
    from taskloom.backend.build import build_library
    from taskloom.runtime import load_module
    lib = build_library(functions, target, name=name)
    return load_module(lib.lib_path, lib.signatures, lib.source_path)


def compile(graph: "Graph", target: CpuTarget | str | None = None, *, tune: int = 0,  # noqa: A001
            fuse: bool = True, optimize: bool = True, verbose: bool = False) -> "CompiledGraph":
    """Compiles a graph (``taskloom.graph.Graph``) into one native function: graph passes,
    operators fused, every kernel and a launcher in one shared library, intermediates in one
    planned arena.

    ``tune`` picks how template kernels (matmul, convolution) choose their schedule: 0 takes
    the default for the target (or a record from an earlier tuning run), 1 measures a small
    part of the schedule space, 2 all of it; measured results are kept in the tuning records
    and reused by later compiles on this machine.
    """
    from taskloom.compiler.graph_compiler import compile_graph
    return compile_graph(graph, target, tune=tune, fuse=fuse, optimize=optimize, verbose=verbose)


def load(path: str) -> "CompiledGraph":
    """Loads a model saved with ``CompiledGraph.save`` (numpy only; no torch or onnx needed).
    A saved model holds native code: load only files from a source you trust."""
    from taskloom.runtime.compiled_graph import CompiledGraph
    return CompiledGraph.load(path)


__all__ = ["build", "compile", "load", "ops", "Tensor", "asarray", "from_torch", "TaskloomError", "CpuTarget", "get_target",
           "host_target", "__version__"]


#: Submodules imported on first use: ``taskloom.torch`` is the PyTorch frontend, so that
#: ``import taskloom`` never imports torch.
_LAZY_MODULES = {"torch": "taskloom.frontend.torch", "onnx": "taskloom.onnx"}


def __getattr__(name: str) -> object:
    if name in _LAZY_MODULES:
        import importlib
        return importlib.import_module(_LAZY_MODULES[name])
    raise AttributeError(f"module 'taskloom' has no attribute {name!r}")
