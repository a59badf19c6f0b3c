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
    from taskloom.runtime import Module

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


__all__ = ["build", "ops", "Tensor", "asarray", "from_torch", "TaskloomError", "CpuTarget", "get_target",
           "host_target", "__version__"]
