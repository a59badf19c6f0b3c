"""``run_kernel``: a lowered ``cuda_kernel`` run on numpy arrays, blocks batched in lockstep."""
from __future__ import annotations

import functools
import sys
from typing import Any, Mapping, Sequence

import numpy as np

from taskloom.errors import ArgumentError
from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.ir import stmt as S
from taskloom.ir.dtypes import DataType, PointerType, TensorType
from taskloom.runtime.emulator import checks, memory, values
from taskloom.runtime.emulator.checks import EmulatorError
from taskloom.runtime.emulator.exprs import ExprCompiler
from taskloom.runtime.emulator.interpreter import Program
from taskloom.runtime.emulator.machine import WARP, Machine
from taskloom.runtime.emulator.report import EmulatorReport
from taskloom.runtime.status import out_of_range

#: Threads run together in one batch of blocks; larger grids run batch after batch.
MAX_LANES = 1 << 16
MAX_BLOCK_THREADS = 1024


@functools.lru_cache(maxsize=64)
def compile_kernel(fn: S.Function) -> Program:
    """``fn`` compiled for the emulator (once per function)."""
    if fn.kind != "cuda_kernel":
        raise EmulatorError(f"function '{fn.name}' is a {fn.kind}; the SIMT emulator runs cuda_kernel functions",
                            fn.name)
    return Program(fn)


def run_kernel(fn: S.Function, args: Sequence[Any] | Mapping[str, Any], *, check: bool = True,
               verbose: bool = False) -> EmulatorReport:
    """Runs the lowered CUDA kernel ``fn`` on the CPU; arrays are written in place.

    ``args`` are in parameter order (or a dict by name): numpy arrays for tensors and
    pointers, numbers for scalars. With ``check`` (the default), out-of-bounds accesses,
    barriers and warp collectives under divergence, shared-memory races and global
    elements two blocks meet on are
    :class:`EmulatorError`\\ s. Returns the launch's counters; ``verbose`` prints them.
    """
    program = compile_kernel(fn)
    scalars, buffers = bind_arguments(fn, args, watch=check)
    report = launch_report(fn, scalars)
    grid, block = report.grid, report.block
    blocks = grid[0] * grid[1] * grid[2]
    per_batch = max(1, MAX_LANES // (-(-block[0] * block[1] * block[2] // WARP) * WARP))
    failure = None
    with np.errstate(all="ignore"):  # the device raises no floating-point or division traps
        for first in range(0, blocks, per_batch):
            count = min(per_batch, blocks - first)
            st = Machine(fn.name, grid, block, first, count, check, report.counters)
            st.env.update(scalars)
            st.bufs.update(buffers)
            program.run(st)
            failure = failure or st.failure
    if verbose:
        print(report.summary())
    if failure is not None:  # as on the device: the launch completes, then its status is read
        raise out_of_range(*failure, f"kernel '{fn.name}' in the SIMT emulator")
    return report


def launch_report(fn: S.Function, scalars: dict[str, np.ndarray]) -> EmulatorReport:
    """An empty report of ``fn``'s launch, its extents evaluated and checked."""
    grid_e, block_e, dynamic_e = gpu.launch_dims(fn)
    grid = tuple(evaluate(fn, g, scalars, "grid") for g in grid_e)
    block = tuple(evaluate(fn, b, scalars, "block") for b in block_e)
    _check_launch(fn.name, grid, block)
    return EmulatorReport(fn.name, grid, block, evaluate(fn, dynamic_e, scalars, "dynamic_shared"))  # type: ignore[arg-type]


def _check_launch(name: str, grid: tuple, block: tuple) -> None:
    if min(block) < 1 or min(grid) < 0:
        raise EmulatorError(f"kernel '{name}': invalid launch, grid {grid} and block {block}", name)
    if block[0] * block[1] * block[2] > MAX_BLOCK_THREADS:
        raise EmulatorError(f"kernel '{name}': a block of {block} threads is more than the "
                            f"{MAX_BLOCK_THREADS} a CUDA block may have", name)


class _Uniform:
    """Just enough of a Machine to evaluate expressions of the scalar parameters."""

    def __init__(self, env: dict[str, np.ndarray]):
        self.env, self.index, self.bufs = env, {}, {}

    def count(self, *args: Any) -> None:
        pass


def evaluate(fn: S.Function, e: Any, scalars: dict[str, np.ndarray], what: str) -> int:
    """A launch extent (or a buffer's size): an expression of the scalar parameters."""
    try:
        value = ExprCompiler(fn.name).expr(E.as_expr(e))(_Uniform(scalars), None)  # type: ignore[arg-type]
        return int(np.asarray(value).reshape(-1)[0])
    except (EmulatorError, KeyError, AttributeError, TypeError, IndexError) as err:
        raise EmulatorError(f"kernel '{fn.name}': its {what} `{e!r}` is not an expression of its scalar "
                            f"parameters ({err})", fn.name) from None


# ----------------------------------------------------------------------------- arguments

def bind_arguments(fn: S.Function, args: Sequence[Any] | Mapping[str, Any], watch: bool = False
                   ) -> tuple[dict, dict]:
    """The scalar arguments as uniform values and the arrays as global buffers, by name;
    with ``watch``, each buffer the kernel writes watched for blocks that meet on an element."""
    if isinstance(args, Mapping):
        missing = [p.name for p in fn.params if p.name not in args]
        extra = [k for k in args if k not in {p.name for p in fn.params}]
        if missing or extra:
            raise ArgumentError(f"kernel '{fn.name}': arguments missing {missing}, unknown {extra}")
        args = [args[p.name] for p in fn.params]
    if len(args) != len(fn.params):
        names = ", ".join(p.name for p in fn.params)
        raise ArgumentError(f"kernel '{fn.name}' takes {len(fn.params)} arguments ({names}), got {len(args)}")
    scalars = {p.name: _scalar(fn, p, a) for p, a in zip(fn.params, args) if isinstance(p.type, DataType)}
    written = {t.name for t in gpu.written_tensors(fn.body) if isinstance(t, E.Var)}
    buffers = {p.name: _buffer(fn, p, a, scalars, p.name in written)
               for p, a in zip(fn.params, args) if not isinstance(p.type, DataType)}
    if watch:
        for name in written & set(buffers):
            buffers[name].races = checks.BlockRaceTracker(buffers[name].size)
    return scalars, buffers


def _scalar(fn: S.Function, p: E.Var, a: Any) -> np.ndarray:
    t: DataType = p.type  # type: ignore[assignment]
    if isinstance(a, np.ndarray) and a.size == 1:
        a = a.reshape(-1)[0]
    if not isinstance(a, (bool, int, float, np.generic)):
        raise ArgumentError(f"kernel '{fn.name}': argument '{p.name}' is a {t!r} scalar, got {type(a).__name__}")
    if t.is_integer():
        if isinstance(a, (float, np.floating)) or not t.min_value() <= int(a) <= t.max_value():
            raise ArgumentError(f"kernel '{fn.name}': argument '{p.name}' must be a {t.name}, got {a!r}")
    return values.constant(a.item() if isinstance(a, np.generic) else a, t)


def host_array(a: Any) -> np.ndarray | None:
    """``a`` as a numpy array where it is one or a CPU tensor (bfloat16 as its 16 bits, which
    numpy has no type for), else None."""
    if isinstance(a, np.ndarray):
        return a
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor) and a.device.type == "cpu":
        if a.dtype == torch.bfloat16:
            return a.detach().view(torch.int16).numpy().view(np.uint16)
        return a.detach().numpy()
    return None


def _as_array(fn: S.Function, p: E.Var, a: Any) -> np.ndarray:
    array = host_array(a)
    if array is not None:
        return array
    raise ArgumentError(f"kernel '{fn.name}': argument '{p.name}' must be a numpy array (or a CPU tensor), "
                        f"got {type(a).__name__}")


def _buffer(fn: S.Function, p: E.Var, a: Any, scalars: dict, written: bool) -> memory.Buffer:
    t = p.type
    dtype: DataType = t.dtype if isinstance(t, TensorType) else t.base  # type: ignore[union-attr, assignment]
    arr = _as_array(fn, p, a)
    want = values.storage(dtype)
    if dtype.name == "bfloat16" and arr.dtype.name == "bfloat16" and arr.dtype.itemsize == 2:
        arr = arr.view(np.uint16)  # ml_dtypes' bfloat16: its bits, in place
    if arr.dtype != want:
        accepted = "bfloat16 (ml_dtypes) or uint16 bits" if dtype.name == "bfloat16" else want.name
        raise ArgumentError(f"kernel '{fn.name}': argument '{p.name}' must be {accepted}, got {arr.dtype.name}")
    if not arr.flags.c_contiguous:
        raise ArgumentError(f"kernel '{fn.name}': argument '{p.name}' is not contiguous; pass np.ascontiguousarray(x)")
    if written and not arr.flags.writeable:
        raise ArgumentError(f"kernel '{fn.name}': argument '{p.name}' is written by the kernel but read-only")
    if isinstance(t, TensorType):
        size = int(np.prod([evaluate(fn, d, scalars, f"shape of '{p.name}'") for d in t.shape]))
        if arr.size != size:
            raise ArgumentError(f"kernel '{fn.name}': argument '{p.name}' must have {size} elements "
                                f"({t!r}), got {arr.size} (shape {arr.shape})")
    elif not isinstance(t, PointerType):
        raise ArgumentError(f"kernel '{fn.name}': parameter '{p.name}' of type {t!r} cannot be emulated")
    return memory.Buffer(p.name, "global", dtype, arr.size, arr.reshape(-1))
