"""taskloom: a deep learning compiler built on task mappings and post-scheduling fusion.

    import taskloom
    from taskloom.script import kernel

    module = taskloom.build(my_kernel)          # lower, generate C, compile (cached), load
    module["my_kernel"](a, b, c)                # numpy arrays or torch tensors, no copies
"""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, Sequence

from taskloom.errors import ArgumentError, TaskloomError
from taskloom.target import CpuTarget, CudaTarget, Target, get_target, host_target
from taskloom.graph import Tensor, asarray, from_torch
from taskloom import compiler as _compiler  # registers the eager executor
from taskloom import ops

if TYPE_CHECKING:
    from taskloom.ir.stmt import Function, Module as IRModule
    from taskloom.graph import Graph
    from taskloom.runtime import Module
    from taskloom.runtime.compiled_graph import CompiledGraph

__version__ = "0.1.0"


def build(functions: "Function | IRModule | Sequence[Function]", target: Target | str | None = None,
          *, name: str | None = None, device: str | None = None) -> "Module":
    """Builds IR functions (e.g. from ``@kernel``) for ``target`` (default: this machine) and
    loads them. Builds are cached by content, so a second build of the same code is free.

    CUDA kernels (``target="cuda"`` or ``"cuda:sm_90"``) are built with nvcc and run on the
    GPU (``device="cuda"``, the default) or in the SIMT emulator on the CPU
    (``device="emulator"``), which checks memory accesses and barriers as it runs.
    """
    from taskloom.backend.build import build_library
    from taskloom.runtime import load_module
    tgt = get_target(target)
    if tgt.kind == "cuda":
        from taskloom.backend.build import build_cuda_library
        from taskloom.runtime.cuda_module import CudaModule
        return CudaModule(build_cuda_library(functions, tgt, name=name), device or "cuda")
    if device not in (None, "cpu"):
        raise ArgumentError(f"build(): device={device!r} is for CUDA targets; a CPU build runs on the CPU")
    lib = build_library(functions, tgt, name=name, load_check=True)
    return load_module(lib.lib_path, lib.signatures, lib.source_path)


def compile(model: Any, example_inputs: Any = None, target: Target | str | None = None, *,  # noqa: A001
            tune: int = 0, fuse: bool = True, optimize: bool = True, verbose: bool = False,
            budget: str | float | None = None, layout: str = "auto", device: str | None = None,
            dynamic: dict[Any, Any] | None = None) -> "CompiledGraph":
    """Compiles a model into one native function: graph passes, operators fused, every kernel
    and a launcher in one shared library, intermediates in one planned arena.

    ``model`` is a taskloom ``Graph``, a torch module or function (traced on
    ``example_inputs``, a tensor or a tuple of them; it must be one graph with no breaks),
    or an ONNX model (a path or a ``ModelProto``).

        compiled = taskloom.compile(torch_model.eval(), (torch.randn(1, 3, 224, 224),))

    ``tune`` picks how template kernels (matmul, convolution) choose their schedule: 0 takes
    the analytic model's choice for the target (or a record from an earlier tuning run) and
    measures nothing, 1 measures what the learned cost model ranks best (about a fifth of
    the schedule space at most), 2 all of it; measured results are kept in the tuning
    records and reused by later compiles on this machine. ``budget`` (``"2m"``, ``"90s"``
    or seconds) bounds the tuning time: it stops with the best configs found so far.
    ``layout="auto"`` runs convolutions in NHWC where that pays (the inputs and outputs keep
    the model's layout); ``"NCHW"`` keeps the model's layout throughout.

    For a CUDA target (``"cuda"``, ``"cuda:sm_90"``) the result runs on ``device="cuda"``
    (the GPU, the default) or ``device="emulator"`` (every kernel in the SIMT emulator, on
    the CPU).

    ``dynamic`` compiles once for every size of the dimensions that vary, and a call outside
    a dimension's range raises an error naming the input and the range:

    - a torch model: ``{"x": {0: "batch", 1: "seq"}}`` names symbolic dimensions by input
      (the forward's parameter, or its position) and axis; ``{"x": {0: ("batch", 1, 64)}}``
      gives a range too (by default 1 to 2**31 - 1);
    - a Graph whose inputs have symbolic dimensions (``taskloom.graph.symbol("batch")``), or
      an ONNX model with named dimensions (``dim_param``): ``{"batch": (1, 64)}`` gives a
      symbol's range.
    """
    from taskloom.compiler.graph_compiler import compile_graph
    from taskloom.graph import Graph
    if isinstance(model, Graph):
        if example_inputs is not None:
            raise ArgumentError(f"compile(): a Graph takes no example_inputs (got {example_inputs!r}); "
                                "pass the target by keyword: compile(graph, target=...)")
        return compile_graph(model, target, tune=tune, fuse=fuse, optimize=optimize, verbose=verbose,
                             budget=budget, layout=layout, device=device, ranges=dynamic)
    kind = type(model).__module__.split(".")[0]
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        kind = "torch"  # a module defined anywhere, taskloom's own benchmark models included
    if kind == "taskloom":
        raise ArgumentError(f"compile() takes a Graph, a torch module or an ONNX model; got a "
                            f"{type(model).__name__}, which is {'already compiled' if hasattr(model, 'save') else 'none of them'}")
    if isinstance(model, (str, os.PathLike)) or kind == "onnx":
        from taskloom.frontend.onnx import from_onnx
        return from_onnx(model, target=target, tune=tune, budget=budget, layout=layout, device=device,
                         dynamic=dynamic)
    if kind == "torch" or callable(model):
        if example_inputs is None:
            raise ArgumentError("compile(): a torch model needs example_inputs (a tensor or a tuple of tensors) "
                                "to trace it")
        from taskloom.frontend.torch import compile_module
        inputs = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        return compile_module(model, tuple(inputs), target=target, tune=tune, budget=budget, layout=layout,
                              device=device, dynamic=dynamic)
    raise ArgumentError(f"compile() takes a Graph, a torch module or an ONNX model, got {type(model).__name__}")


def load(path: str | os.PathLike, *, key: str | bytes | None = None, device: str | None = None) -> "CompiledGraph":
    """Loads a model saved with ``CompiledGraph.save`` (numpy only; no torch or onnx needed).
    A saved model holds native code and its checksum finds only accidental damage: load files
    from a source you trust, or files saved with ``save(path, key=...)`` with the same ``key``.
    A model compiled for CUDA loads on ``device="cuda"`` (the GPU, the default) or
    ``"emulator"``."""
    from taskloom.runtime.compiled_graph import CompiledGraph
    return CompiledGraph.load(path, key=key, device=device)


__all__ = ["build", "compile", "load", "ops", "Tensor", "asarray", "from_torch", "TaskloomError", "Target", "CpuTarget", "CudaTarget", "get_target",
           "host_target", "__version__"]


#: Submodules imported on first use: ``taskloom.torch`` is the PyTorch frontend, so that
#: ``import taskloom`` never imports torch.
_LAZY_MODULES = {"torch": "taskloom.torch", "onnx": "taskloom.onnx"}


def __getattr__(name: str) -> object:
    if name in _LAZY_MODULES:
        import importlib
        return importlib.import_module(_LAZY_MODULES[name])
    raise AttributeError(f"module 'taskloom' has no attribute {name!r}")
