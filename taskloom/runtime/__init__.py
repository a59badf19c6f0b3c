"""Runtime: load built libraries and call their kernels on numpy arrays or DLPack tensors, in place."""
from taskloom.runtime.dlpack import ArrayView, array_view, as_torch, describe_value, to_dlpack_compatible
from taskloom.runtime.module import Kernel, Module, load_module
from taskloom.runtime.signature import Param, Signature, parse_signature

__all__ = ["ArrayView", "Kernel", "Module", "Param", "Signature", "array_view", "as_torch",
           "describe_value", "load_module", "parse_signature", "to_dlpack_compatible"]
