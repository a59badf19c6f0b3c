"""The eager executor hook: the compiler registers the function that runs a task on
concrete tensors, so that graph code never imports the compiler (which imports it)."""
from __future__ import annotations

from typing import Callable, Sequence

from taskloom.errors import OpError
from taskloom.graph.tensor import Tensor
from taskloom.ir.compute import Task

EagerExecutor = Callable[[Task, Sequence[Tensor]], list[Tensor]]
_executor: list[EagerExecutor] = []


def set_eager_executor(fn: EagerExecutor) -> None:
    """Registers the function that compiles (cached) and runs a task on concrete tensors."""
    _executor[:] = [fn]


def run_eager(task: Task, inputs: Sequence[Tensor]) -> list[Tensor]:
    if not _executor:
        raise OpError("no eager executor is registered; `import taskloom` registers the compiler's")
    return _executor[0](task, inputs)
