"""Task mappings: which worker does which tasks, and in what order (Hidet, section 4).

A task mapping with ``n`` workers and task shape ``d`` gives each worker ``w in [0, n)`` an
ordered list of tasks, each an m-tuple inside ``d``.

    >>> repeat(2, 2).worker_tasks(0)
    [(0, 0), (0, 1), (1, 0), (1, 1)]
    >>> spatial(2, 2).worker_tasks(3)
    [(1, 1)]
    >>> m = spatial(4, 2) * repeat(2, 2) * spatial(4, 8) * repeat(4, 4)
    >>> m.num_workers, m.task_shape
    (256, (128, 128))

Composition ``f1 * f2`` has ``n1 * n2`` workers over the task shape ``d1 ⊙ d2`` and gives
worker ``w`` the tasks ``t1 ⊙ d2 + t2`` for ``t1`` in ``f1(w // n2)`` then ``t2`` in
``f2(w % n2)``. It is associative (chains are stored flat, so ``(a*b)*c == a*(b*c)``), not
commutative.

``ranks`` orders the axes: the axis of rank 0 varies slowest. ``ranks=[1, 0]`` walks a 2-D
grid column-major.

In a kernel, ``for i, j in m.on(worker)`` iterates a worker's tasks; lowering turns each
``repeat`` into loops and each ``spatial`` into index arithmetic on the worker expression.
"""
from __future__ import annotations

import itertools
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

from taskloom.errors import MappingError
from taskloom.ir.expr import Expr, ExprLike, as_expr
from taskloom.ir.node import Node

Dim = Union[int, Expr]
Task = tuple[int, ...]


def _prod(xs: Sequence[Dim]) -> Dim:
    out: Dim = 1
    for x in xs:
        if isinstance(x, int) and x == 1:
            continue
        out = out * x if not (isinstance(out, int) and out == 1) else x
    return out


def _check_dims(kind: str, shape: Sequence[Any]) -> tuple[Dim, ...]:
    if len(shape) == 0:
        raise MappingError(f"{kind}() needs at least one dimension")
    dims: list[Dim] = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, (int, Expr)):
            raise MappingError(f"{kind}() dimensions must be ints or integer expressions, got {d!r}")
        if isinstance(d, int) and d <= 0:
            raise MappingError(f"{kind}() dimensions must be positive, got {tuple(shape)}")
        dims.append(d)
    return tuple(dims)


def _check_ranks(kind: str, ndim: int, ranks: Sequence[int] | None) -> tuple[int, ...]:
    if ranks is None:
        return tuple(range(ndim))
    r = tuple(ranks)
    if not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) for x in r) \
            or sorted(r) != list(range(ndim)):
        raise MappingError(f"{kind}() ranks must be a permutation of 0..{ndim - 1}, got {list(r)}")
    return tuple(int(x) for x in r)


def _axis_order(ranks: tuple[int, ...]) -> list[int]:
    """Axes from slowest-varying (rank 0) to fastest."""
    return sorted(range(len(ranks)), key=lambda a: ranks[a])


def _unravel(w: Any, shape: tuple[Dim, ...], ranks: tuple[int, ...]) -> tuple[Any, ...]:
    """The task that index ``w`` names when the grid is walked in ``ranks`` order."""
    task: list[Any] = [0] * len(shape)
    stride: Any = 1
    for axis in reversed(_axis_order(ranks)):
        d = shape[axis]
        if isinstance(d, int) and d == 1:
            task[axis] = 0  # a unit axis: no index arithmetic at all
        else:
            task[axis] = (w // stride) % d if not (isinstance(stride, int) and stride == 1) else w % d
        stride = stride * d
    return tuple(task)


class TaskMapping(Node):
    """Base of task mappings. Compose with ``*``; iterate in a kernel with :meth:`on`."""

    __slots__ = ()

    @property
    def num_workers(self) -> Dim:
        raise NotImplementedError

    @property
    def task_shape(self) -> tuple[Dim, ...]:
        raise NotImplementedError

    def _tasks(self, w: int) -> list[Task]:
        raise NotImplementedError

    def atoms(self) -> tuple["TaskMapping", ...]:
        return (self,)

    def __mul__(self, other: "TaskMapping") -> "TaskMapping":
        if not isinstance(other, TaskMapping):
            return NotImplemented
        if len(self.task_shape) != len(other.task_shape):
            raise MappingError(f"cannot compose {self!r} ({len(self.task_shape)}-D tasks) with "
                               f"{other!r} ({len(other.task_shape)}-D tasks); dimensions must match")
        return Composed(self.atoms() + other.atoms())

    def worker_tasks(self, w: int) -> list[Task]:
        """The ordered tasks of worker ``w``, as tuples of ints."""
        n = self.num_workers
        if not isinstance(n, int) or not all(isinstance(d, int) for d in self.task_shape):
            raise MappingError(f"worker_tasks() needs a mapping with static shapes, {self!r} is symbolic")
        if not (isinstance(w, int) and 0 <= w < n):
            raise MappingError(f"worker {w!r} is out of range for {self!r} with {n} workers")
        return self._tasks(w)

    def on(self, worker: ExprLike) -> "MappingIter":
        """``for i, j in mapping.on(worker)`` in a kernel; the worker is an IR expression."""
        return MappingIter(self, as_expr(worker))

    def __repr__(self) -> str:
        from taskloom.ir.printer import astext
        return astext(self)


@dataclass(frozen=True, eq=False, repr=False)
class Spatial(TaskMapping):
    """``prod(shape)`` workers, one task each: worker ``w`` takes the unravelling of ``w``."""

    shape: tuple[Dim, ...]
    ranks: tuple[int, ...]

    @property
    def num_workers(self) -> Dim:
        return _prod(self.shape)

    @property
    def task_shape(self) -> tuple[Dim, ...]:
        return self.shape

    def _tasks(self, w: int) -> list[Task]:
        return [_unravel(w, self.shape, self.ranks)]


@dataclass(frozen=True, eq=False, repr=False)
class Repeat(TaskMapping):
    """One worker doing every task of the grid, walked in ``ranks`` order."""

    shape: tuple[Dim, ...]
    ranks: tuple[int, ...]

    @property
    def num_workers(self) -> Dim:
        return 1

    @property
    def task_shape(self) -> tuple[Dim, ...]:
        return self.shape

    def _tasks(self, w: int) -> list[Task]:
        order = _axis_order(self.ranks)
        out = []
        for point in itertools.product(*(range(self.shape[a]) for a in order)):  # type: ignore[arg-type]
            task = [0] * len(self.shape)
            for a, v in zip(order, point):
                task[a] = v
            out.append(tuple(task))
        return out


@dataclass(frozen=True, eq=False, repr=False)
class Custom(TaskMapping):
    """A mapping given by a function ``fn(w) -> list of tasks``.

    ``fn`` is called with an int in :meth:`worker_tasks` and with an IR expression when a
    kernel is lowered, so write it with arithmetic operators only (``w // 4``, ``w % 4``).
    """

    shape: tuple[Dim, ...]
    workers: Dim
    fn: Callable[[Any], Sequence[Sequence[Any]]]

    @property
    def num_workers(self) -> Dim:
        return self.workers

    @property
    def task_shape(self) -> tuple[Dim, ...]:
        return self.shape

    def _tasks(self, w: int) -> list[Task]:
        tasks = [tuple(int(x) for x in t) for t in self.fn(w)]
        for t in tasks:
            if len(t) != len(self.shape) or not all(0 <= x < d for x, d in zip(t, self.shape)):  # type: ignore[operator]
                raise MappingError(f"custom mapping gave worker {w} the task {t}, outside {self.shape}")
        return tasks


@dataclass(frozen=True, eq=False, repr=False)
class Composed(TaskMapping):
    """``parts[0] * parts[1] * ...``, stored flat so that composition is associative."""

    parts: tuple[TaskMapping, ...]

    def atoms(self) -> tuple[TaskMapping, ...]:
        return self.parts

    @property
    def num_workers(self) -> Dim:
        return _prod([p.num_workers for p in self.parts])

    @property
    def task_shape(self) -> tuple[Dim, ...]:
        return tuple(_prod(ds) for ds in zip(*(p.task_shape for p in self.parts)))

    def _tasks(self, w: int) -> list[Task]:
        head, tail = self.parts[0], self.parts[1:]
        rest: TaskMapping = tail[0] if len(tail) == 1 else Composed(tail)
        n2, d2 = rest.num_workers, rest.task_shape
        return [tuple(a * d + b for a, d, b in zip(t1, d2, t2))  # type: ignore[misc]
                for t1 in head._tasks(w // n2) for t2 in rest._tasks(w % n2)]  # type: ignore[operator]


@dataclass(frozen=True)
class MappingIter:
    """What ``mapping.on(worker)`` returns: the pair a ``ForMapping`` loop is built from."""

    mapping: TaskMapping
    worker: Expr


def spatial(*shape: Dim, ranks: Sequence[int] | None = None) -> Spatial:
    """``prod(shape)`` workers each doing one task: worker ``w`` takes the unravelling of ``w``."""
    dims = _check_dims("spatial", shape)
    return Spatial(dims, _check_ranks("spatial", len(dims), ranks))


def repeat(*shape: Dim, ranks: Sequence[int] | None = None) -> Repeat:
    """One worker doing all ``prod(shape)`` tasks in order (row-major unless ``ranks`` says otherwise)."""
    dims = _check_dims("repeat", shape)
    return Repeat(dims, _check_ranks("repeat", len(dims), ranks))


def custom(task_shape: Sequence[Dim], num_workers: Dim, fn: Callable[[Any], Sequence[Sequence[Any]]]) -> Custom:
    """A mapping defined by ``fn(w) -> [task, ...]`` (see :class:`Custom`)."""
    dims = _check_dims("custom", task_shape)
    if isinstance(num_workers, int) and num_workers <= 0:
        raise MappingError(f"custom() needs a positive number of workers, got {num_workers}")
    return Custom(dims, num_workers, fn)


def covers_exactly_once(m: TaskMapping) -> bool:
    """Whether the workers of ``m`` together do every task of its grid exactly once."""
    seen = [t for w in range(m.num_workers) for t in m.worker_tasks(w)]  # type: ignore[arg-type]
    return len(seen) == math.prod(m.task_shape) and set(seen) == set(itertools.product(*map(range, m.task_shape)))  # type: ignore[arg-type]
