"""Graph level: tensors (concrete and symbolic) and, with the graph compiler, graphs."""
from taskloom.graph.eager import capture_tasks, run_eager, set_eager_executor
from taskloom.graph.tensor import Tensor, asarray, from_torch, symbol

__all__ = ["Tensor", "asarray", "from_torch", "symbol", "capture_tasks", "run_eager", "set_eager_executor"]
