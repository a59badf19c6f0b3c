"""The compiler pipeline. Today: eager execution of single operators (schedule, build, run)."""
from taskloom.compiler.eager import compile_task, execute_task
from taskloom.compiler.graph_compiler import compile_graph

__all__ = ["compile_graph", "compile_task", "execute_task"]
