"""The compiler pipeline. Today: eager execution of single operators (schedule, build, run)."""
from taskloom.compiler.eager import compile_task, execute_task

__all__ = ["compile_task", "execute_task"]
