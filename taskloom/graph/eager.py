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


class capture_tasks:
    """Records the task of every operator applied inside the ``with`` block (they still
    run), e.g. to benchmark an operator's kernel or inspect its definition::

        with capture_tasks() as tasks:
            taskloom.ops.softmax(x)
        task, inputs = tasks[0]
    """

    def __init__(self) -> None:
        self.records: list[tuple[Task, list[Tensor]]] = []
        self._saved: list[EagerExecutor] = []

    def __enter__(self) -> list[tuple[Task, list[Tensor]]]:
        self._saved = list(_executor)
        inner = self._saved[0] if self._saved else None

        def record(task: Task, inputs: Sequence[Tensor]) -> list[Tensor]:
            self.records.append((task, list(inputs)))
            if inner is None:
                raise OpError("no eager executor is registered")
            return inner(task, inputs)
        _executor[:] = [record]
        return self.records

    def __exit__(self, *exc: object) -> None:
        _executor[:] = self._saved
