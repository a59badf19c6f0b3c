"""Graph level: tensors (concrete and symbolic) and, with the graph compiler, graphs."""
from taskloom.graph.eager import capture_tasks, run_eager, set_eager_executor
from taskloom.graph.graph import Graph, GraphError, Node
from taskloom.graph.tensor import Tensor, asarray, from_torch, input, symbol
from taskloom.graph.serialize import load_graph, save_graph

__all__ = ["Graph", "GraphError", "Node", "Tensor", "asarray", "from_torch", "input", "symbol", "capture_tasks", "run_eager", "set_eager_executor",
           "load_graph", "save_graph"]
