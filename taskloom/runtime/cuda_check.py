"""Each kernel of a compiled CUDA graph checked by itself, on the GPU or in the emulator: the
tool for a model whose result is wrong on the GPU though every kernel passes its own tests.

The graph's calls run one at a time, in the launcher's order, each twice from the same
inputs: first with the buffers it writes filled with 0xFF bytes (NaN in every float type),
then, inputs restored, with 0x00. Bytes that hold the first fill after the first run and the
second after the second are ones the kernel never wrote; others that differ between the runs
are a race (or a read of memory no one wrote). The emulator runs blocks in lockstep, so a
hazard between blocks shows only on the GPU; this finds which kernel has it.

    from taskloom.runtime.cuda_check import check_kernels, format_checks
    print(format_checks(check_kernels(compiled, *inputs)))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taskloom.ir import expr as E
from taskloom.ir import gpu
from taskloom.runtime.cuda_graph import call_sizes, place


@dataclass
class KernelCheck:
    """One call's findings: per buffer it writes, the elements it left unwritten and those
    that differed between two runs from the same inputs."""

    call: int
    kernel: str
    unwritten: dict[str, int] = field(default_factory=dict)
    unstable: dict[str, int] = field(default_factory=dict)
    #: with ``emulate``: per buffer, the largest difference from the emulator's result on the
    #: same inputs, relative to the largest magnitude there
    emulator_diff: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.unwritten and not self.unstable and \
            all(d <= EMULATOR_TOLERANCE for d in self.emulator_diff.values())


def check_kernels(graph: Any, *args: Any, emulate: bool = False) -> list[KernelCheck]:
    """Runs every call of ``graph`` (a :class:`~taskloom.runtime.cuda_graph.CudaCompiledGraph`)
    by itself, twice, on its device; a :class:`KernelCheck` per call. The graph's outputs are
    left as the second runs wrote them. ``emulate``: each call also runs in the emulator from
    the same inputs, and its results are compared (slow for large kernels)."""
    binding = graph._binder.bind([tuple(np.shape(a)) for a in args]) if graph._binder is not None else None
    memory = _GpuMemory(graph, args, binding) if graph.device == "cuda" else _HostMemory(graph, args, binding)
    checks = []
    for number, call in enumerate(graph._calls(binding)):
        fn = graph._kernels[call["kernel"]]
        sizes = call_sizes(call, fn, binding)
        argv = [memory.arg(kind, index, p, fn, sizes) for (kind, index), p in zip(call["args"], fn.params)]
        written = {t.name for t in gpu.written_tensors(fn.body) if isinstance(t, E.Var)}
        tensors = [(p.name, a) for p, a in zip(fn.params, argv) if not isinstance(a, int)]  # (not a size)
        kept = [memory.copy(a) for _, a in tensors]
        outs = [(name, a) for name, a in tensors if name in written]
        runs = []
        for fill in (0xFF, 0x00):
            for (_, a), before in zip(tensors, kept):
                memory.assign(a, before)
            for _, a in outs:
                memory.fill(a, fill)
            memory.launch(fn, argv)
            runs.append([memory.host_bytes(a) for _, a in outs])
        check = KernelCheck(number, fn.name)
        for (name, _), first, second in zip(outs, *runs):  # (elements, bytes each)
            unwritten = (first == 0xFF).all(axis=1) & (second == 0x00).all(axis=1)
            if unwritten.any():
                check.unwritten[name] = int(unwritten.sum())
            unstable = int(((first != second).any(axis=1) & ~unwritten).sum())
            if unstable:
                check.unstable[name] = unstable
        if emulate:
            check.emulator_diff = _against_emulator(fn, memory, argv, tensors, kept, outs)
        checks.append(check)
    return checks


def _against_emulator(fn: Any, memory: Any, argv: list[Any], tensors: list, kept: list, outs: list
                      ) -> dict[str, float]:
    """The call run in the emulator on host copies of its inputs (its outputs zero-filled, as
    the device's second run began), against what the device wrote: per output, the largest
    difference relative to the largest magnitude."""
    from taskloom.runtime.emulator import run_kernel
    from taskloom.runtime.emulator.values import to_value
    host = dict(zip((name for name, _ in tensors), (memory.host_array(b) for b in kept)))
    for name, _ in outs:
        host[name].reshape(-1).view(np.uint8)[:] = 0
    run_kernel(fn, [host.get(p.name, a) for p, a in zip(fn.params, argv)])
    diffs, wrote = {}, dict(outs)
    for p in fn.params:
        if p.name in wrote:
            dtype = p.type.dtype
            want = to_value(host[p.name].reshape(-1), dtype).astype(np.float64)
            got = to_value(memory.host_array(wrote[p.name]).reshape(-1), dtype).astype(np.float64)
            scale = max(float(np.nanmax(np.abs(want), initial=0.0)), 1e-30)
            diffs[p.name] = float(np.nanmax(np.abs(got - want), initial=0.0)) / scale
    return diffs


def format_checks(checks: list[KernelCheck]) -> str:
    """One line a call: the kernel, and what it left unwritten or computed differently twice."""
    lines = []
    for c in checks:
        found = [f"{n}: {k:,} elements unwritten" for n, k in c.unwritten.items()] + \
                [f"{n}: {k:,} elements differ between two runs" for n, k in c.unstable.items()] + \
                [f"{n}: {d:.2g} from the emulator" for n, d in c.emulator_diff.items() if d > EMULATOR_TOLERANCE]
        lines.append(f"{c.call:4d} {c.kernel:40s} {'; '.join(found) or 'ok'}")
    return "\n".join(lines)


#: A difference from the emulator past this (relative) is reported: float16 sums land in a
#: different order on the device
EMULATOR_TOLERANCE = 1e-2


class _HostMemory:
    """The emulator's arrays: the graph's own host arena, inputs, outputs and constants."""

    def __init__(self, graph: Any, args: Any, binding: Any):
        self.graph, self.binding = graph, binding
        self.tables = graph._emulator_tables(args, binding)

    def arg(self, kind: str, index: int, p: Any, fn: Any, sizes: dict[str, Any]) -> Any:
        return self.graph._emulator_arg(self.tables, kind, index, p, fn, sizes, self.binding)

    def launch(self, fn: Any, argv: list[Any]) -> None:
        from taskloom.runtime.emulator import run_kernel
        run_kernel(fn, argv)

    @staticmethod
    def copy(a: np.ndarray) -> np.ndarray:
        return a.copy()

    @staticmethod
    def assign(a: np.ndarray, b: np.ndarray) -> None:
        a[...] = b

    @staticmethod
    def fill(a: np.ndarray, byte: int) -> None:
        a.reshape(-1).view(np.uint8)[:] = byte

    @staticmethod
    def host_bytes(a: np.ndarray) -> np.ndarray:
        """The elements' bytes, a row each."""
        return a.reshape(-1).view(np.uint8).reshape(-1, a.itemsize).copy()

    @staticmethod
    def host_array(a: np.ndarray) -> np.ndarray:
        return a.copy()


class _GpuMemory:
    """The GPU's tensors: the graph's arena and constants, the inputs and new outputs; each
    intermediate a typed view of the arena at its place."""

    def __init__(self, graph: Any, args: Any, binding: Any):
        state = graph._gpu
        self.graph, self.binding, self.state, self.torch = graph, binding, state, state.torch
        state.fit_arena(binding)
        self.ins = [state.device_input(spec, a, binding) for spec, a in zip(graph.inputs, args)]
        self.outs = state.empty_outputs([(o["dtype"], s) for o, s in zip(graph.outputs, graph.output_shapes(binding))])

    def arg(self, kind: str, index: int, p: Any, fn: Any, sizes: dict[str, Any]) -> Any:
        if kind == "sym":
            return int(self.binding.sym[index])
        if kind in ("in", "out"):
            return (self.ins if kind == "in" else self.outs)[index]
        if kind == "w":
            return self.state.constants[index]
        start, nbytes = place(kind, index, p, fn, sizes, self.binding)
        arena = self.state.arena
        first = arena.ptr - arena.owner.data_ptr() + start
        return arena.owner[first:first + nbytes].view(self.state.torch_dtype(p.type.dtype.name))

    def launch(self, fn: Any, argv: list[Any]) -> None:
        self.state.module[fn.name]._launch(argv)

    @staticmethod
    def copy(a: Any) -> Any:
        return a.clone()

    @staticmethod
    def assign(a: Any, b: Any) -> None:
        a.copy_(b)

    def fill(self, a: Any, byte: int) -> None:
        a.reshape(-1).view(self.torch.uint8).fill_(byte)

    def host_bytes(self, a: Any) -> np.ndarray:
        """The elements' bytes, a row each."""
        return a.reshape(-1).view(self.torch.uint8).cpu().numpy().reshape(-1, a.element_size())

    def host_array(self, a: Any) -> np.ndarray:
        """A host copy in the emulator's storage (bfloat16 as its bits)."""
        from taskloom.runtime.emulator.launch import host_array
        return host_array(a.detach().cpu()).copy()


__all__ = ["KernelCheck", "check_kernels", "format_checks"]
