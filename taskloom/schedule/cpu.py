"""The CPU's schedulers: the matmul template for contractions, the rules for the rest.

A (fused) task that reads as a contraction (:mod:`taskloom.schedule.contraction`) gets the
matmul template (:mod:`taskloom.schedule.templates.matmul_cpu`) with the config a driver
chooses, and its prologues and epilogues through post-scheduling fusion; contractions the
template would serve badly, such as a matrix-vector product, and every other task go to
:func:`~taskloom.schedule.rule_based_cpu.schedule_task`. When the graph compiler says which
task inputs are constants, a contraction whose B reads only constants gets B packed at
compile time (:mod:`taskloom.schedule.prepack`). Both register for target kind ``"cpu"``.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from taskloom.ir import cdiv
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.compute import Task
from taskloom.ir.dtypes import float32
from taskloom.ir.functor import collect
from taskloom.ir.printer import expr_text
from taskloom.schedule.contraction import (Contraction, a_row_stride, a_window_run, b_vectorizes, kinds_cost,
                                           match_contraction)
from taskloom.schedule.post_fusion import flat_prologue_a, fuse_contraction, fused_arg_specs, inputs_beside_panels
from taskloom.schedule.prepack import constant_b
from taskloom.schedule.registry import Candidate, Scheduled, register_rules, register_template
from taskloom.schedule.rule_based_cpu import schedule_task
from taskloom.schedule.templates.attention_cpu import attention_candidate
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program, pack_b_panels
from taskloom.schedule.vectorize import run_length, vectorize_expr
from taskloom.target.cpu import CpuTarget


def pack_kinds(con, target: CpuTarget) -> tuple[str, str]:
    """How post-scheduling fusion packs A and B of the fused contraction ``con``: ``copy``
    (a contiguous vector copy), ``vec`` (lanes computed as vectors), ``gather`` (strided
    vector gathers), ``run<R>`` (A by contiguous runs of R elements of K, a stem's window
    row: :func:`a_run_length`) or ``lane<N>`` (element by element, the scalar prologue
    having N nodes). They are part of a workload's record key, so the cost model can price
    records of tasks it cannot rebuild."""
    L = target.vector_lanes(float32)

    def kind(expr: E.Expr, along: E.Var) -> str:
        vector = vectorize_expr(expr, along, E.Var("pack_start", along.type), L, None, aligned=True)
        if vector is None:
            if along is con.vk:
                run = run_length(flat_prologue_a(con), con.vk, L)
                if run:
                    return f"run{run}"
            return f"lane{len(collect(expr, E.Expr))}"
        if isinstance(vector, E.VectorLoad) and vector.stride == 1:
            return "copy"
        gathers = isinstance(vector, E.VectorLoad) or any(n.stride != 1 for n in collect(vector, E.VectorLoad))
        return "gather" if gathers else "vec"

    return kind(con.a, con.vk), kind(con.b, con.vn)


def epilogue_reads_rows(con: Contraction) -> bool:
    """Whether ``con``'s epilogue reads a tensor that differs from row to row (a residual):
    the template then asks for its lines a tile ahead (``prefetch_c``)."""
    return any(con.vm in E.free_vars(i) for e in collect(con.epilogue, E.TensorElement) for i in e.indices)


def a_run_length(a_kind: str) -> int:
    """How long a run of K the matmul template copies A by (``a_run`` of
    :func:`~taskloom.schedule.templates.matmul_cpu.matmul_program`) for A's pack kind: R of
    ``run<R>`` (where A reads contiguously, :func:`~taskloom.schedule.vectorize.run_length`);
    else 0."""
    return int(a_kind[3:]) if a_kind.startswith("run") else 0


def pack_costs(con, target: CpuTarget) -> tuple[float, float]:
    """Cycles per vector of packing A and B for the fused contraction ``con``."""
    return kinds_cost(pack_kinds(con, target), target.vector_lanes(float32))


def template_serves(con: Contraction, target: CpuTarget) -> bool:
    """Whether the matmul template beats the rule-based schedule on ``con``: it needs a
    vector of columns to fill its register tile, and a few rows, or one row whose B copies
    by vectors, as the template's one-row tiles read it in place
    (:func:`~taskloom.schedule.templates.matmul_cpu.reads_b_in_place`), which beats a
    reduction down B's columns. A vector times a transposed operand is a row reduction,
    which the rule-based scheduler vectorizes along K."""
    lanes = target.vector_lanes(float32)
    _, M, N, K = con.hint
    if N < lanes // 2 or K < 2:
        return False
    if M >= 2:
        return True
    return b_vectorizes(kinds_cost(pack_kinds(con, target), lanes), lanes)


def workload_key(con: Contraction, kinds: tuple[str, str]) -> str:
    """The tuning record key of a fused contraction: its sizes, how its operands pack
    (:func:`pack_kinds`, which the cost model reads back), and a digest
    of what its prologue reads and its epilogue computes (a conv's window packs slower than
    a matrix): ``matmul_cpu/1x64x3136x576/packlane12+lane79/<digest>``."""
    a, b = kinds
    text = f"{expr_text(con.a)}|{expr_text(con.b)}|{expr_text(con.epilogue)}"
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return "matmul_cpu/" + "x".join(str(d) for d in con.hint) + f"/pack{a}+{b}/" + digest


@dataclass(frozen=True)
class Tunable:
    """What tuning a fused contraction needs: its record key, its operands' pack costs, the
    fused kernel of a config (named ``fused`` unless told otherwise), the kernel's
    arguments (or config -> its arguments, when B comes as panels shaped by the config) and
    the distance between A's rows as it reads them (:func:`a_row_stride`); ``b_streams``: B
    is a weight packed ahead that the graph's other weights evict between calls (the
    analytic model then reads it from memory)."""

    con: Contraction
    workload: str
    pack: tuple[float, float]
    kernel: Callable[..., S.Function]
    args: list[tuple[tuple[int, ...], str]] | Callable[[MatmulConfig], list[tuple[tuple[int, ...], str]]]
    a_stride: int = 0
    b_streams: bool = False


@functools.lru_cache(maxsize=256)
def _fused_kernel(con: Contraction, c: MatmulConfig, target: CpuTarget, in_place: bool, prepacked_b: int,
                  prefetch_b: bool, a_stride: int, a_run: int, a_window: int) -> S.Function:
    """The template's kernel for ``c`` with ``con``'s group fused in, named ``fused``. Kept: a
    deep model asks for the same one once per layer (contractions compare by structure), and
    building it is most of a compile's scheduling time."""
    return fuse_contraction(matmul_program(con.shape, c, target, name="fused", b_vectorizes=in_place,
                                           prepacked_b=prepacked_b, prefetch_b=prefetch_b, a_stride=a_stride,
                                           a_run=a_run, prefetch_c=epilogue_reads_rows(con), a_window=a_window), con)


@functools.lru_cache(maxsize=256)  # (a deep model asks once per layer)
def tunable(con: Contraction, target: CpuTarget, prepacked_b: int = 0, prefetch_b: bool = False,
            b_streams: bool = False) -> Tunable:
    """The :class:`Tunable` of ``con`` on ``target``: the kernel as a compiled graph runs it,
    taking B's panels packed at compile time when B is a weight (``prepacked_b``: how many
    batches of B, see :func:`~taskloom.schedule.templates.matmul_cpu.matmul_program`), and
    prefetching them when the graph's weights stream (``prefetch_b``; ``b_streams``: from
    memory). Such a kernel packs no B, which changes its best config: its records have a key
    of their own (``/prepacked``)."""
    kinds = pack_kinds(con, target)
    lanes = target.vector_lanes(float32)
    pack = kinds_cost(kinds, lanes)
    in_place = b_vectorizes(pack, lanes)
    a_stride = a_row_stride(con, kinds[0])
    a_run = a_run_length(kinds[0])
    a_window = a_window_run(con)

    def fused(c: MatmulConfig, name: str = "fused") -> S.Function:
        return _fused_kernel(con, c, target, in_place, prepacked_b, prefetch_b, a_stride, a_run,
                             a_window).renamed(name)
    if not con.timeable:  # a kernel for symbolic sizes is not timed: no arguments to time it with
        key = workload_key(con, kinds) + ("/prepacked" if prepacked_b else "")
        return Tunable(con, key, (pack[0], 0.0) if prepacked_b else pack, fused, [], a_stride,
                       bool(prepacked_b) and b_streams)
    specs = fused_arg_specs(con)
    if not prepacked_b:
        return Tunable(con, workload_key(con, kinds), pack, fused, specs, a_stride)
    _, _, N, K = con.shape
    beside = [specs[k] for k in inputs_beside_panels(con)]

    def args(c: MatmulConfig) -> list[tuple[tuple[int, ...], str]]:
        nr = c.nv * lanes
        return [*beside, ((prepacked_b, cdiv(N, nr), K, nr), "float32"), specs[-1]]
    return Tunable(con, workload_key(con, kinds) + "/prepacked", (pack[0], 0.0), fused, args, a_stride, b_streams)


def task_tunable(task: Task, target: CpuTarget, constants: Mapping[int, np.ndarray] | None = None,
                 weights_stream: bool | str = False) -> tuple[Tunable, np.ndarray | None] | None:
    """The :class:`Tunable` of ``task`` as a compiled graph schedules it, and B evaluated
    from the ``constants`` among its inputs (to be packed now; None when B reads an input),
    or None when the matmul template does not serve the task."""
    con = match_contraction(task)
    if con is None or not template_serves(con, target):
        return None
    b = constant_b(con, constants) if constants else None
    return tunable(con, target, prepacked_b=0 if b is None else b.shape[0], prefetch_b=bool(weights_stream),
                   b_streams=weights_stream == "memory"), b


def matmul_candidate(task: Task, target: CpuTarget, constants: Mapping[int, np.ndarray] | None = None,
                     weights_stream: bool | str = False) -> Candidate | None:
    """The matmul template's offer for ``task``: its :class:`Tunable`, and the kernel of a
    config, taking B's panels packed now when B reads only constants."""
    found = task_tunable(task, target, constants, weights_stream)
    if found is None:
        return None
    t, b = found

    panels: dict[int, np.ndarray] = {}  # B packed for a tile width (variants of a kernel share one)

    def build(config: MatmulConfig, name: str) -> Scheduled:
        fn = t.kernel(config, name)  # the kernel tuning times, as it is built here
        if b is None:
            return Scheduled(fn, tuple(range(len(task.inputs))))
        if config.nv not in panels:
            panels[config.nv] = pack_b_panels(b, config, target)
        return Scheduled(fn, (*fn.attr("inputs"), panels[config.nv]))
    return Candidate("matmul_cpu", t, build)


register_template("cpu", "matmul_cpu", matmul_candidate)
register_template("cpu", "attention_cpu", attention_candidate)
register_rules("cpu", schedule_task)
