"""Compiling a graph: fuse, schedule each group, plan memory, and build every kernel plus a
launcher into one shared library (a :class:`~taskloom.runtime.CompiledGraph`)."""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np

from taskloom.backend.build import build_library
from taskloom.backend.codegen_c import c_symbol
from taskloom.backend.codegen_cuda import cuda_param_type
from taskloom.backend.launcher import Call, Dispatch, Ref, cuda_launcher_source, launcher_source
from taskloom.errors import TaskloomError
from taskloom.graph.graph import Graph
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.compute import reads_at_own_index
from taskloom.ir.dtypes import DataType
from taskloom.compiler.collector import sparing_the_collector
from taskloom.compiler.dynamic import graph_symbols, ladder, sample_points, shape_entries
from taskloom.graph.tensor import Tensor
from taskloom.graph.fusion import FusedGroup, fuse_graph
from taskloom.runtime.compiled_graph import CompiledGraph
from taskloom.runtime.library_file import record_source
from taskloom.runtime.saved_file import graph_record
from taskloom.runtime.memory_plan import Buffer, plan_memory
from taskloom.compiler.drivers import schedule_kernel, schedule_variants
from taskloom.compiler.placement import Block, Placing, fill_task, find_placings, write_into
from taskloom.target import CudaTarget, get_target
from taskloom.tune.budget import Budget
from taskloom.target.base import Target


def _nbytes(t: Tensor) -> int:
    n = t.dtype.nbytes
    for d in t.shape:
        n *= int(d)
    return n


@sparing_the_collector
def compile_graph(graph: Graph, target: Target | str | None = None, *, tune: int = 0, fuse: bool = True,
                  optimize: bool = True, verbose: bool = False, budget: str | float | None = None,
                  layout: str = "auto", device: str | None = None,
                  ranges: dict[str, tuple[int, int]] | None = None) -> Any:
    """Compiles ``graph`` for ``target`` (default: this machine) into one native function:
    graph passes (``optimize``), fusion (``fuse``), scheduling, memory planning, one build.
    ``layout="auto"`` runs convolutions in NHWC where that pays
    (:mod:`taskloom.compiler.passes.layout`); ``"NCHW"`` keeps the graph's own layout.
    The seconds each phase took are in ``meta["timings"]`` (passes, fusion, schedule with any
    tuning, codegen, cc). With ``tune`` > 0, ``budget`` (``"2m"``, seconds) bounds the
    tuning: each kernel gets a share of what is left and keeps the best config so far.

    A CUDA target (``"cuda"``, ``"cuda:sm_90"``) gives a
    :class:`~taskloom.runtime.cuda_graph.CudaCompiledGraph` that runs on ``device``
    ``"cuda"`` (the GPU, the default) or ``"emulator"`` (the SIMT emulator, on the CPU).

    A graph whose inputs have symbolic dimensions compiles once for every value of its
    symbols, each in ``ranges`` (``{"batch": (1, 64)}``; by default 1 to 2**31 - 1): kernels
    take their sizes as arguments and each call plans the intermediates for its sizes."""
    started = time.perf_counter()
    tgt = get_target(target)
    cuda = isinstance(tgt, CudaTarget)
    if device is not None and not cuda:
        raise TaskloomError(f"compile(): device={device!r} applies to CUDA targets; {tgt.key()} runs on the CPU")
    if cuda and device in (None, "cuda"):
        from taskloom.runtime.cuda_module import require_gpu
        require_gpu()  # before any work: without a GPU the error says to use the emulator
    clock = Budget(budget)  # checks the budget before any work
    if tune not in (0, 1, 2):
        raise TaskloomError(f"compile(): tune={tune!r} is not a tuning level; use 0 (defaults), 1 (a small "
                            "search) or 2 (the whole schedule space)")
    if layout not in ("auto", "NCHW"):
        raise TaskloomError(f"compile(): layout={layout!r} is not a layout choice; use 'auto' (NHWC "
                            "convolutions where that pays) or 'NCHW' (the graph's own layout)")
    timings: dict[str, float] = {}  # seconds per phase, in meta["timings"]
    graph = _passes(graph, tgt, optimize, layout == "auto")
    symbols = graph_symbols(graph, ranges or {})
    timings["passes"] = time.perf_counter() - started
    phase = time.perf_counter()
    groups = fuse_graph(graph) if fuse else [FusedGroup.single(n) for n in graph.nodes]
    timings["fusion"] = time.perf_counter() - phase

    # whether each kernel's weight comes from beyond the caches on every call (the target
    # decides): True, the kernels prefetch them; "memory", from memory too, which the
    # analytic model then prices
    weight_bytes = sum(_nbytes(c) for c in graph.constants)
    weights_stream = tgt.streams_weights(weight_bytes) and ("memory" if tgt.weights_outgrow_l3(weight_bytes) else True)
    phase = time.perf_counter()
    points = sample_points(symbols) if symbols else []
    functions, calls, kernels, choices, places = _schedule_groups(
        graph, groups, tgt, tune, clock if budget is not None else None, weights_stream, points, list(symbols))
    timings["schedule"] = time.perf_counter() - phase
    arrays = [np.ascontiguousarray(c) for c in places.constants]
    meta = {"inputs": [{"name": t.name, "dtype": t.dtype.name, "shape": shape_entries(t.shape)}
                       for t in graph.inputs],
            "outputs": places.outputs_meta, "arena_bytes": places.arena_bytes,
            "memory": places.describe(), "kernels": kernels, "target": tgt.to_dict(),
            "status": True}  # status: see backend.launcher
    if symbols:
        meta["dynamic"] = {"symbols": [{"name": n, "min": lo, "max": hi, "ladder": ladder(lo, hi)}
                                       for n, (lo, hi) in symbols.items()],
                           "slots": places.slots, "variants": choices}
    if cuda:
        compiled = _finish_cuda(functions, calls, tgt, meta, arrays, timings, device or "cuda")
    else:
        compiled = _finish_cpu(functions, calls, tgt, meta, arrays, timings)
    if verbose:
        print(f"compiled {len(graph.nodes)} operators into {len(groups)} kernels in "
              f"{time.perf_counter() - started:.2f} s; {places.describe()}")
    return compiled


def _passes(graph: Graph, tgt: Target, optimize: bool, relayout: bool) -> Graph:
    """The graph passes, the layout pass where asked, and row padding for the GPU; inputs
    must have static shapes."""
    if optimize:
        from taskloom.compiler.passes import optimize as run_passes
        from taskloom.compiler.passes.attention import fuse_attention
        graph = run_passes(graph)
        fused = fuse_attention(graph, tgt)
        if fused is not graph:
            graph = run_passes(fused)
        if os.environ.get("TASKLOOM_MERGE_PRODUCTS", "1") != "0":
            # after the attention pass, which reads each projection's own product
            from taskloom.compiler.passes.sibling_products import merge_sibling_products
            graph = merge_sibling_products(graph)
        if relayout:
            from taskloom.compiler.passes.layout import choose_layout
            relaid = choose_layout(graph, tgt)
            if relaid is not graph:
                graph = run_passes(relaid)
        from taskloom.compiler.passes.pad_rows import pad_rows
        from taskloom.compiler.passes.split_k import split_k
        graph = pad_rows(split_k(graph, tgt), tgt)  # last: the other passes would fold their views away
    return graph


def _schedule_groups(graph: Graph, groups: list[FusedGroup], tgt: Target, tune: int, clock: Budget | None,
                     weights_stream: bool | str, points: list[dict[str, int]], symbols: list[str]
                     ) -> tuple[list[Any], list[Call | Dispatch], list[dict[str, Any]], list[list[int]], "_Places"]:
    """Each group's kernel (a symbolic template kernel's variants, at the sample ``points``),
    the launcher's call of it, what ``meta["kernels"]`` says of it, per kernel built in
    variants the variant at each point, and where every tensor lives. A kernel whose code is
    that of an earlier one (the same layer again in a deep model) is not built twice: its
    call runs the earlier one. A pad or concatenation whose inputs' kernels write them in
    place (:mod:`~taskloom.compiler.placement`) only fills the rest, or runs no kernel."""
    constants = {id(c) for c in graph.constants}
    placings = {p.group: p for p in find_placings(graph, groups)} if tgt.writes_blocks_in_place() else {}
    scheduled: dict[int, tuple[list[Any], list[int]]] = {}
    for g, group in enumerate(groups):
        if g not in placings:
            scheduled[g] = _variants(g, group, len(groups) - g, constants, tgt, tune, clock, weights_stream, points)
    views = _write_in_place(groups, scheduled, placings, tgt)
    for g in sorted(set(range(len(groups))) - scheduled.keys()):  # placings the producers could not serve
        scheduled[g] = _variants(g, groups[g], len(groups) - g, constants, tgt, tune, clock, weights_stream, points)
    places = _Places(graph, groups, symbols, views)
    functions: list[Any] = []
    built: dict[Any, Any] = {}  # a kernel's code (its name left out) -> the kernel built with it
    calls: list[Call | Dispatch] = []
    kernels: list[dict[str, Any]] = []
    choices: list[list[int]] = []
    for g, group in enumerate(groups):
        variants, table = scheduled[g]
        if not variants:  # a concatenation its inputs' kernels wrote
            continue
        note = f"{group.name}: {' + '.join(group.ops)}"
        group_calls = []
        for v in variants:
            outputs = [places.refs[id(t)] for t in group.outputs]
            if g in placings:  # a fill: each box a parameter, all the one result
                outputs = outputs * len(v.fn.tensor_params)
            args = _arguments(v.fn, places, [places.ref_of(group.inputs[x]) if isinstance(x, int)
                                             else places.constant_ref(x, same_as=True) for x in v.inputs] + outputs)
            own = _sharing_memory(v.fn, args, len(outputs))
            fn = built.setdefault(own.renamed(""), own)
            if fn is own:
                functions.append(fn)
            types = tuple(cuda_param_type(p) for p in fn.params) if isinstance(tgt, CudaTarget) else ()
            group_calls.append(Call(c_symbol(fn.name), args, note, fn.reports_status, types))
        if len(group_calls) == 1:
            calls.append(group_calls[0])
        else:
            calls.append(Dispatch(len(choices), tuple(group_calls), note))
            choices.append(table)
        kernels.append(_kernel_meta([v.fn for v in variants], group))
    return functions, calls, kernels, choices, places


def _variants(g: int, group: FusedGroup, tasks_left: int, constants: set[int], tgt: Target, tune: int,
              clock: Budget | None, weights_stream: bool | str,
              points: list[dict[str, int]]) -> tuple[list[Any], list[int]]:
    """A group's kernel, or a symbolic template kernel's variants and which serves each point
    (tuning, if any, within its share of what is left of the budget for ``tasks_left`` kernels)."""
    deadline = clock.deadline(tasks_left=tasks_left) if clock is not None else None
    known = {k: t.numpy() for k, t in enumerate(group.inputs) if id(t) in constants}
    name = f"k{g}_{group.name}"
    if points and group.task.symbols():
        return schedule_variants(group.task, tgt, points, name, known, weights_stream, tune, deadline)
    return [schedule_kernel(group.task, tgt, name=name, tune=tune, deadline=deadline,
                            constants=known, weights_stream=weights_stream)], []


def _write_in_place(groups: list[FusedGroup], scheduled: dict[int, tuple[list[Any], list[int]]],
                    placings: dict[int, Placing], tgt: Target) -> dict[int, Tensor]:
    """For each placing whose inputs' kernels (every variant) can write them in place, those
    kernels rewritten to, and its own kernel a fill of the rest (none for a concatenation);
    the inputs so written, each with the tensor it lies in. The others are dropped from
    ``placings``, to copy as before."""
    made_by = {id(t): (g, k) for g, grp in enumerate(groups) for k, t in enumerate(grp.outputs)}
    views: dict[int, Tensor] = {}
    for g, p in list(placings.items()):
        rewritten: dict[int, list[Any]] = {}
        for key, block in p.blocks.items():
            gx, k = made_by[key]
            x = groups[gx].outputs[k]
            variants = rewritten.get(gx, scheduled[gx][0])
            new = [_placed(v, len(groups[gx].outputs), k, x.shape, block) for v in variants]
            if None in new:
                break
            rewritten[gx] = new
        else:
            fill = _fill(g, groups[g], p, tgt)
            if fill is not None:
                for gx, variants in rewritten.items():
                    scheduled[gx] = (variants, scheduled[gx][1])
                scheduled[g] = fill
                views.update({key: block.host for key, block in p.blocks.items()})
                continue
        del placings[g]
    return views


def _placed(v: Any, outputs: int, k: int, shape: tuple[Any, ...], block: Block) -> Any:
    """Scheduled kernel ``v`` writing its output ``k`` (of ``outputs``) into ``block``; None if it cannot."""
    fn = write_into(v.fn, len(v.fn.tensor_params) - outputs + k, shape, block)
    return None if fn is None else dataclasses.replace(v, fn=fn)


def _fill(g: int, group: FusedGroup, p: Placing, tgt: Target) -> tuple[list[Any], list[int]] | None:
    """The kernel writing a placing's boxes into its result (no kernel when there are none)."""
    if not p.boxes:
        return [], []
    name = f"k{g}_{group.name}_border"
    v = schedule_kernel(fill_task(p, name), tgt, name=name)
    for k, (offsets, dims) in enumerate(p.boxes):
        v = _placed(v, len(p.boxes), k, dims, Block(p.host, offsets))
        if v is None:
            return None
    return [v], []


def _sharing_memory(fn: Any, args: tuple[Ref, ...], outputs: int) -> Any:
    """``fn``, told which of its tensor parameters ``args`` puts in one buffer with a result
    (its last ``outputs`` tensors) -- a result written over an input -- so that code
    generation promises no ``restrict`` for them; ``fn`` itself when none does."""
    tensors = [(p, a) for p, a in zip(fn.params, args) if not isinstance(p.type, DataType)]
    written = {a for _, a in tensors[len(tensors) - outputs:]}
    shared = tuple(p.name for p, a in tensors if a in written and [b for _, b in tensors].count(a) > 1)
    if not shared:
        return fn
    return S.Function(fn.name, fn.params, fn.body, fn.kind, (*fn.attrs, ("shares_memory", shared)))


def _arguments(fn: Any, places: "_Places", tensors: list[Ref]) -> tuple[Ref, ...]:
    """The launcher's arguments of kernel ``fn``: ``tensors`` for its tensor parameters in
    order, and for each size parameter the symbol of that name."""
    if len(fn.tensor_params) != len(tensors):
        raise TaskloomError(f"kernel {fn.name} takes {len(fn.tensor_params)} tensors; its group gives {len(tensors)}")
    it = iter(tensors)
    return tuple(places.symbol_ref(p.name, fn.name) if isinstance(p.type, DataType) else next(it)
                 for p in fn.params)


class _Places:
    """Where every tensor of a compiled graph lives: an input, an output, a constant (numbered
    as first used; a weight whose only reader takes it prepacked is never numbered) or a place
    among the intermediates, planned from the groups' lifetimes: an arena offset, or in a
    dynamic graph (``symbols``) a slot whose offset each call plans for its sizes."""

    def __init__(self, graph: Graph, groups: list[FusedGroup], symbols: list[str] | None = None,
                 views: dict[int, Tensor] | None = None):
        self.symbols = symbols or []
        self.views = views or {}  # a tensor written in place into another (compiler.placement) -> that one
        self.placed = set(self.views) | {id(h) for h in self.views.values()}
        self.refs: dict[int, Ref] = {id(t): Ref("in", k) for k, t in enumerate(graph.inputs)}
        self.constants: list[np.ndarray] = []
        self.graph_constants = {id(c): c for c in graph.constants}
        self.outputs_meta: list[dict[str, Any]] = []
        for k, t in enumerate(graph.outputs):
            spec = {"name": f"output{k}", "dtype": t.dtype.name, "shape": shape_entries(t.shape),
                    "copy_of": None}
            if id(t) in self.graph_constants:
                self.ref_of(t)
            if id(t) in self.refs:  # an input, a constant or an earlier output returned again: copied
                r = self.refs[id(t)]
                spec["copy_of"] = [r.kind, r.index]
            else:
                self.refs[id(t)] = Ref("out", k)
            self.outputs_meta.append(spec)
        self.slots: list[dict[str, Any]] = []
        self.plan = self._plan(groups)

    def _plan(self, groups: list[FusedGroup]) -> Any:
        """Arena offsets (or slots) for the intermediates, from their lifetimes in group order."""
        produced: dict[int, int] = {}
        last_use: dict[int, int] = {}
        tensors: dict[int, Tensor] = {}
        for g, group in enumerate(groups):
            for t in group.inputs:
                last_use[id(t)] = g
            for t in group.outputs:
                produced[id(t)] = g
                tensors[id(t)] = t
        over = self._written_over(groups, produced, last_use)
        self.written_over = len(over)
        root = {key: key for key in produced}
        for key in produced:  # in group order: a result written over one written over another
            if key in over:
                root[key] = root[over[key]]
        for key, host in self.views.items():
            root[key] = id(host)
        lives: dict[int, tuple[int, int]] = {}  # each buffer's first and last group, its tensors together
        for key, g in produced.items():
            if key not in self.refs and root[key] not in self.refs:
                first, last = lives.get(root[key], (g, g))
                lives[root[key]] = (min(first, g), max(last, last_use.get(key, g), g))
        if self.symbols:
            for key, (first, last) in lives.items():
                t = tensors[key]
                self.refs[key] = Ref("slot", len(self.slots))
                self.slots.append({"elements": _elements_text(t.shape), "itemsize": t.dtype.nbytes,
                                   "first": first, "last": last})
        else:
            plan = plan_memory([Buffer(key, _nbytes(tensors[key]), first, last)
                                for key, (first, last) in lives.items()])
            for key, offset in plan.offsets.items():
                self.refs[key] = Ref("arena", offset)
        for key in produced:
            if key not in self.refs:
                self.refs[key] = self.refs[root[key]]
        return None if self.symbols else plan

    def _written_over(self, groups: list[FusedGroup], produced: dict[int, int], last_use: dict[int, int]
                      ) -> dict[int, int]:
        """The results a kernel may write over one of its inputs, each with that input: an
        intermediate of the same shape and type that dies in that kernel and that its one
        result reads only at its own index (:func:`~taskloom.ir.compute.reads_at_own_index`:
        a residual added after a convolution). They share a buffer: one fewer stream of
        lines into the caches, and a smaller arena."""
        over: dict[int, int] = {}
        taken: set[int] = set()
        for g, group in enumerate(groups):
            if len(group.outputs) != 1 or id(group.outputs[0]) in self.refs or id(group.outputs[0]) in self.placed:
                continue
            t = group.outputs[0]
            for r in dict.fromkeys(group.inputs):  # each tensor once, in order
                key = id(r)
                if (key in self.refs or key not in produced or key in taken or last_use.get(key) != g or key in self.placed
                        or r.dtype != t.dtype or shape_entries(r.shape) != shape_entries(t.shape)):
                    continue
                if all(reads_at_own_index(group.task, p) for p, x in zip(group.task.inputs, group.inputs) if x is r):
                    over[id(t)] = key
                    taken.add(key)
                    break
        return over

    @property
    def arena_bytes(self) -> int:
        """The arena of a static graph; a dynamic one's grows to what its calls need."""
        return self.plan.arena_bytes if self.plan is not None else 0

    def describe(self) -> str:
        over = f"; {self.written_over} written over an input" if self.written_over else ""
        if self.views:
            hosts = len({id(h) for h in self.views.values()})
            over += f"; {len(self.views)} written in place into {hosts} padded or joined tensors"
        if self.plan is not None:
            return self.plan.describe() + over
        return f"{len(self.slots)} intermediates planned per call for the sizes of {', '.join(self.symbols)}{over}"

    def symbol_ref(self, name: str, kernel: str) -> Ref:
        if name not in self.symbols:
            raise TaskloomError(f"kernel {kernel} takes the size {name}, which is no symbol of the graph's inputs "
                                f"({', '.join(self.symbols) or 'none'})")
        return Ref("sym", self.symbols.index(name))

    def constant_ref(self, value: np.ndarray, key: int | None = None, same_as: bool = False) -> Ref:
        """The table entry of a constant; ``same_as``: reuse the last entry when it holds equal
        values (a weight packed alike for two variants of a kernel)."""
        if key is not None and key in self.refs:
            return self.refs[key]
        if same_as and self.constants and _equal(self.constants[-1], value):
            return Ref("w", len(self.constants) - 1)
        self.constants.append(value)
        ref = Ref("w", len(self.constants) - 1)
        if key is not None:
            self.refs[key] = ref
        return ref

    def ref_of(self, t: Tensor) -> Ref:
        return self.constant_ref(t.numpy(), id(t)) if id(t) in self.graph_constants else self.refs[id(t)]


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a is b or (a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b)))


def _elements_text(shape: Any) -> str:
    """The number of elements of ``shape`` as an expression's text."""
    n: Any = E.as_expr(1)
    for d in shape:
        n = n * d
    return str(shape_entries([n])[0])


def _kernel_meta(fns: list[Any], group: FusedGroup) -> dict[str, Any]:
    """What ``meta["kernels"]`` says of one kernel: its operators and how it was scheduled
    (each variant's schedule, for a kernel built in several)."""
    return {"name": fns[0].name, "ops": group.ops, "category": group.category,
            "anchor": group.anchor.op if group.anchor is not None else group.ops[0],
            "schedule": "; ".join(_schedule_text(fn) for fn in fns)}


def _schedule_text(fn: Any) -> str:
    if not fn.attr("template"):
        return "rule-based"
    return (f"{fn.attr('template')}: {fn.attr('config')}" + (", B prepacked" if fn.attr("prepacked_b") else "")
            + (" and prefetched" if fn.attr("prefetch_b") else ""))


def _finish_cpu(functions: list, calls: list[Call], tgt: Target, meta: dict[str, Any], arrays: list[np.ndarray],
                timings: dict[str, float]) -> CompiledGraph:
    """One C library: the kernels, the launcher and the record a saved file is checked against."""
    record = record_source(graph_record(meta, [(c.dtype.name, c.shape) for c in arrays]))
    lib = build_library(functions, tgt, name="graph",
                        extra_source=launcher_source(calls, "dynamic" in meta) + record,
                        timings=timings, load_check=True)
    meta.update(source=str(lib.source_path), timings=timings)
    return CompiledGraph(lib.lib_path, meta, arrays)


def _finish_cuda(functions: list, calls: list[Call | Dispatch], tgt: Any, meta: dict[str, Any], arrays: list[np.ndarray],
                 timings: dict[str, float], device: str) -> Any:
    """One CUDA library: the kernels and the host launcher, run on ``device``."""
    from taskloom.backend.build import build_cuda_library
    from taskloom.ir.printer import astext
    from taskloom.runtime.cuda_graph import CudaCompiledGraph
    from taskloom.transforms import lower
    # what the emulator runs, kept in the meta (and a saved file): each kernel lowered, as text;
    # the build takes the same lowered kernels
    lowered = [lower(f) for f in functions]
    names = {c_symbol(f.name): f.name for f in functions}  # (a call may run a kernel built for an earlier group)

    def entry(c: Call) -> dict[str, Any]:
        return {"kernel": names[c.symbol], "args": [[r.kind, r.index] for r in c.args]}
    meta.update(calls=[{"choice": c.choice, "variants": [entry(v) for v in c.calls]} if isinstance(c, Dispatch)
                       else entry(c) for c in calls],
                kernel_ir=[astext(f) for f in lowered])
    record = record_source(graph_record(meta, [(c.dtype.name, c.shape) for c in arrays]))
    built = build_cuda_library(functions, tgt, name="graph",
                               extra_source=cuda_launcher_source(calls, "dynamic" in meta) + record,
                               timings=timings, lowered=lowered)
    meta.update(source=str(built.source_path), timings=timings)
    return CudaCompiledGraph(built, meta, arrays, device)
