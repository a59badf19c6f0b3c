"""ONNX models in: ``taskloom.onnx.from_onnx(path_or_model)`` converts and compiles one.

The ``onnx`` package is needed only when a model is converted (``pip install
'taskloom[onnx]'``); see :mod:`taskloom.frontend.onnx`.
"""
from taskloom.frontend.onnx import from_onnx, onnx_to_graph, supported_ops

__all__ = ["from_onnx", "onnx_to_graph", "supported_ops"]
