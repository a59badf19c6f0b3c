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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

ENTRY = "taskloom_graph"
PROFILE_ENTRY = "taskloom_graph_profile"


@dataclass(frozen=True)
class Ref:
    """Where a kernel argument lives: ``kind`` is 'w', 'in', 'out' or 'arena'; ``index`` is a
    table position or an arena offset."""

    kind: str
    index: int

    def c(self) -> str:
        return f"arena + {self.index}" if self.kind == "arena" else f"{self.kind}[{self.index}]"


@dataclass(frozen=True)
class Call:
    symbol: str
    args: tuple[Ref, ...]
    note: str = ""
    status: bool = False  # the kernel has run-time checks and takes the status last


def _invocation(c: Call) -> str:
    args = [_arg(r) for r in c.args] + (["st"] if c.status else [])
    call = f"  {c.symbol}({', '.join(args)});"
    return call + " if (st->check) return;" if c.status else call


def launcher_source(calls: Sequence[Call]) -> str:
    """The C of the launcher and of its profiling twin for ``calls``, in order."""
    invocations = [_invocation(c) for c in calls]
    params = "void* const* w, void* const* in, void* const* out, char* arena, tl_status* st"
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
    return f"(void*)({r.c()})" if r.kind == "arena" else r.c()
