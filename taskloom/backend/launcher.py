"""The launcher of a compiled graph: one C function that runs every kernel in order, so an
inference is one native call with no Python between operators.

    void taskloom_graph(void* const* w, void* const* in, void* const* out, char* arena, tl_status* st)

``w`` holds the constants, ``in`` the inputs and ``out`` the outputs (pointer tables the
runtime fills), ``arena`` the intermediates at their planned offsets, ``st`` the status
the kernels' run-time checks report to (see the C prelude): after a kernel whose check
failed, the launcher returns at once. A twin,

    void taskloom_graph_profile(void* const* w, void* const* in, void* const* out, char* arena, tl_status* st,
                                double* ms)

runs the same calls and writes each kernel's wall time in milliseconds to ``ms[k]``: what
``CompiledGraph.profile`` and ``taskloom bench model --profile`` report.

On a CUDA target the launcher is host code in the same ``.cu`` file, with device pointers
throughout (the arena and ``st`` in device memory too), a stream, and the CUDA error code
as its result (0 on success):

    int taskloom_graph(void* const* w, void* const* in, void* const* out, char* arena, tl_status* st,
                       void* stream)

It enqueues every kernel's ``launch_<kernel>`` on ``stream`` and returns at once; the
runtime reads ``st`` back when the stream is done.

A graph with symbolic dimensions (a dynamic graph) takes three more tables after ``st`` (and
before ``ms``): ``sym``, the symbols' values for this call, which kernels take as their size
arguments; ``off``, each intermediate's offset in the arena, planned per call from those
values; and ``var``, which variant of each kernel built in several (a :class:`Dispatch`)
runs at these sizes (:mod:`taskloom.runtime.shape_binding`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

ENTRY = "taskloom_graph"
PROFILE_ENTRY = "taskloom_graph_profile"


@dataclass(frozen=True)
class Ref:
    """Where a kernel argument lives: ``kind`` is 'w', 'in', 'out' or 'arena' (``index``: a
    table position or an arena offset), or in a dynamic graph 'slot' (an intermediate at the
    arena offset ``off[index]``) or 'sym' (a symbol's value, ``sym[index]``)."""

    kind: str
    index: int

    def c(self) -> str:
        if self.kind == "arena":
            return f"arena + {self.index}"
        if self.kind == "slot":
            return f"arena + off[{self.index}]"
        return f"{self.kind}[{self.index}]"


@dataclass(frozen=True)
class Call:
    symbol: str
    args: tuple[Ref, ...]
    note: str = ""
    status: bool = False  # the kernel has run-time checks and takes the status last
    types: tuple[str, ...] = ()  # each argument's C type, where the language needs casts (C++)


@dataclass(frozen=True)
class Dispatch:
    """Variants of one kernel (a dynamic graph's, configs chosen for different sizes): the
    launcher runs ``calls[var[choice]]``."""

    choice: int
    calls: tuple[Call, ...]
    note: str = ""


def _switch(c: Dispatch, invocation: Callable[[Call], str]) -> str:
    """A kernel built in variants: the one ``var`` names for this call's sizes."""
    cases = [f"    case {k}:{invocation(v)[1:]} break;" for k, v in enumerate(c.calls) if k]
    return "\n".join([f"  switch (var[{c.choice}]) {{", *cases, f"    default:{invocation(c.calls[0])[1:]}", "  }"])


def _invocation(c: Call | Dispatch) -> str:
    if isinstance(c, Dispatch):
        return _switch(c, _invocation)
    args = [_arg(r) for r in c.args] + (["st"] if c.status else [])
    call = f"  {c.symbol}({', '.join(args)});"
    return call + " if (st->check) return;" if c.status else call


def launcher_source(calls: Sequence[Call | Dispatch], dynamic: bool = False) -> str:
    """The C of the launcher and of its profiling twin for ``calls``, in order; ``dynamic``:
    the graph's sizes are symbols, read from the ``sym``, ``off`` and ``var`` tables."""
    invocations = [_invocation(c) for c in calls]
    params = "void* const* w, void* const* in, void* const* out, char* arena, tl_status* st"
    if dynamic:
        params += ", const int64_t* sym, const int64_t* off, const int64_t* var"
    lines = ["", f"void {ENTRY}({params}) {{"]
    for c, invocation in zip(calls, invocations):
        if c.note:
            lines.append(f"  // {c.note}")
        lines.append(invocation)
    lines += ["}", "", f"void {PROFILE_ENTRY}({params}, double* ms) {{", "  double t = omp_get_wtime(), now;"]
    for k, invocation in enumerate(invocations):
        lines += [invocation, f"  now = omp_get_wtime(); ms[{k}] = (now - t) * 1e3; t = now;"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _arg(r: Ref) -> str:
    return f"(void*)({r.c()})" if r.kind in ("arena", "slot") else r.c()


def cuda_launcher_source(calls: Sequence[Call | Dispatch], dynamic: bool = False) -> str:
    """The CUDA host code of a graph's launcher for ``calls`` (see above): each argument
    cast to the type of the kernel's parameter, the first launch error returned;
    ``dynamic`` as in :func:`launcher_source`."""
    params = "void* const* w, void* const* in, void* const* out, char* arena, tl_status* st"
    if dynamic:
        params += ", const int64_t* sym, const int64_t* off, const int64_t* var"
    lines = ["", f'extern "C" int {ENTRY}({params}, void* stream) {{', "  int error;"]
    for c in calls:
        if c.note:
            lines.append(f"  // {c.note}")
        lines.append(_cuda_invocation(c))
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def _cuda_invocation(c: Call | Dispatch) -> str:
    if isinstance(c, Dispatch):
        return _switch(c, _cuda_invocation)
    if len(c.types) != len(c.args):
        raise ValueError(f"launcher: call of {c.symbol} has {len(c.args)} arguments and {len(c.types)} types")
    args = [f"({t})({r.c()})" for r, t in zip(c.args, c.types)] + (["st"] if c.status else [])
    return f"  if ((error = launch_{c.symbol}({', '.join([*args, 'stream'])}))) return error;"
