"""PyTorch models in: ``taskloom.torch.compile(model)`` (``torch.compile`` with the
``taskloom`` backend), ``compile_module`` for one traced graph, ``register`` for converters
of your own, ``fallbacks`` for what runs in PyTorch; see :mod:`taskloom.frontend.torch`.
Importing it imports torch."""
from taskloom.frontend.torch import (REGISTRY, Backend, CompiledFunction, Fallback, FallbackWarning, Options,
                                     PerShapeWarning, compile, compile_module, fallbacks, register,
                                     taskloom_backend, unwrap_error)

__all__ = ["Backend", "CompiledFunction", "Fallback", "FallbackWarning", "Options", "PerShapeWarning", "REGISTRY",
           "compile", "compile_module", "fallbacks", "register", "taskloom_backend", "unwrap_error"]
