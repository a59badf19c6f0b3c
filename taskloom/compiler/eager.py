"""Eager execution: a task on concrete tensors is scheduled, built (cached in memory and on
disk) and run, and its outputs come back as concrete tensors."""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np

from taskloom.backend.build import build_library
from taskloom.errors import AllocationError, OpError
from taskloom.graph.eager import set_eager_executor
from taskloom.graph.tensor import Tensor
from taskloom.ops.base import check_size
from taskloom.ir import expr as E
from taskloom.ir.compute import Task
from taskloom.ir.functor import substitute
from taskloom.runtime import Kernel, load_module
from taskloom.schedule.rule_based_cpu import schedule_task
from taskloom.target.base import Target
from taskloom.target.cpu import host_target
from taskloom.ir.arith import simplify_expr

#: Kernels kept loaded in this process; older ones are dropped (the disk cache keeps them).
MAX_LOADED = 512
_loaded: OrderedDict[tuple[Task, str], Kernel] = OrderedDict()


def compile_task(task: Task, target: Target | None = None) -> Kernel:
    """The loaded kernel of ``task`` for ``target`` (default: this machine), built once."""
    tgt = target or host_target()
    key = (task, tgt.key())
    kernel = _loaded.get(key)
    if kernel is None:
        fn = schedule_task(task, tgt)
        lib = build_library(fn, tgt, load_check=True)
        kernel = load_module(lib.lib_path, lib.signatures, lib.source_path)[fn.name]
        _loaded[key] = kernel
        if len(_loaded) > MAX_LOADED:
            _loaded.popitem(last=False)
    else:
        _loaded.move_to_end(key)
    return kernel


def _bind_symbols(task: Task, inputs: Sequence[Tensor]) -> dict[E.Var, E.Expr]:
    binding: dict[E.Var, E.Expr] = {}
    for placeholder, t in zip(task.inputs, inputs):
        for d, n in zip(placeholder.shape, t.shape):
            if isinstance(d, E.Var):
                binding[d] = E.as_expr(int(n))
    return binding


def _concrete(shape: Sequence[E.Expr], binding: dict[E.Var, E.Expr], op: str) -> tuple[int, ...]:
    out = []
    for d in shape:
        v = simplify_expr(substitute(d, binding))
        if not isinstance(v, E.Constant):
            raise OpError(f"{op}(): output dimension {d!r} does not follow from the input shapes")
        if v.value < 0:
            raise OpError(f"{op}(): the arguments give a negative output size {v.value}")
        out.append(int(v.value))
    return tuple(out)


def execute_task(task: Task, inputs: Sequence[Tensor]) -> list[Tensor]:
    """Runs ``task`` on concrete ``inputs`` and returns its outputs."""
    binding = _bind_symbols(task, inputs)
    outs = []
    for o in task.outputs:
        dt = o.dtype
        if dt.numpy is None:
            raise OpError(f"{task.name}(): results of type {dt.name} cannot be held by numpy yet")
        shape = _concrete(o.shape, binding, task.name)
        check_size(task.name, "its result", shape, dt)
        try:
            outs.append(np.empty(shape, dtype=dt.numpy))
        except MemoryError:
            raise AllocationError(f"{task.name}(): its result of shape {shape} ({dt.name}) does not fit in "
                                  "this machine's memory") from None
    if any(a.size for a in outs):  # (empty outputs alone need no kernel)
        compile_task(task)(*[t.numpy() for t in inputs], *outs)
    return [Tensor(a.shape, o.dtype, a) for a, o in zip(outs, task.outputs)]


set_eager_executor(execute_task)
