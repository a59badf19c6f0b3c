"""PyTorch models in: ``taskloom.torch.compile(model)`` (``torch.compile`` with the
``taskloom`` backend), ``compile_module`` for one traced graph, ``register`` for converters
of your own; see :mod:`taskloom.frontend.torch`. Importing it imports torch."""
from taskloom.frontend.torch import (REGISTRY, Backend, CompiledFunction, FallbackWarning, Options, compile,
                                     compile_module, register, taskloom_backend, unwrap_error)

__all__ = ["Backend", "CompiledFunction", "FallbackWarning", "Options", "REGISTRY", "compile", "compile_module",
           "register", "taskloom_backend", "unwrap_error"]
