"""Per-operator fallback of the ONNX frontend (``from_onnx(model, fallback=True)``): the
nodes taskloom cannot convert run in ONNX's reference implementation (numpy) between
compiled parts, in one callable.

The nodes that fall back are those without a converter and those whose converter refused
them. As in the torch frontend (:mod:`~taskloom.frontend.torch_fallback`), every other node
goes to a compiled part by its *level*, the largest number of fallen-back nodes on a path
from the inputs to it: the supported nodes of one level form one taskloom graph (fused as
usual), and the fallen-back nodes of level ``k`` run between the parts of levels ``k - 1``
and ``k``. A fallen-back node's outputs are shaped as ONNX's shape inference says, so the
parts after it compile for static shapes; a node whose output shapes inference cannot give
cannot fall back, and the conversion error names it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from taskloom.errors import FrontendError
from taskloom.frontend.fallback import Fallback, summary
from taskloom.frontend.onnx_registry import as_numpy
from taskloom.graph.graph import Graph
from taskloom.graph.tensor import Tensor, input as graph_input


class OnnxFallbackWarning(UserWarning):
    """Some nodes of an ONNX model run in ONNX's reference implementation, not compiled."""


@dataclass
class _Step:
    """One step of a call: a compiled part (``part`` with the value names it reads and
    writes) or one node run by the reference implementation."""

    node: Any = None
    part: Any = None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()


def levels(graph: Any, fell: dict[int, str], runtime: set[str]) -> list[int]:
    """Each node's level: the most fallen-back nodes on a path from the inputs to it (a
    fallen-back node counts itself); only values computed at run time carry a level."""
    value_level: dict[str, int] = {}
    out = []
    for k, node in enumerate(graph.node):
        base = max((value_level.get(n, 0) for n in node.input if n in runtime), default=0)
        level = base + (k in fell)
        out.append(level)
        for name in node.output:
            value_level[name] = level
    return out


def build(converter: Any, inputs: list[Tensor], compile_part: Any) -> "OnnxFallbackModel":
    """The model of a conversion that recorded fallen-back nodes (``converter.fell``):
    each level's supported nodes converted again as one graph whose inputs are the values
    earlier steps made, and compiled by ``compile_part(graph)``."""
    graph, env = converter.graph, converter.env
    runtime = {name for name, v in env.items() if isinstance(v, Tensor) and not v.is_concrete}
    level = levels(graph, converter.fell, runtime)
    needed_after: dict[str, int] = {}  # value -> the highest level of a node reading it
    for k, node in enumerate(graph.node):
        for name in node.input:
            needed_after[name] = max(needed_after.get(name, -1), level[k] + (k in converter.fell))
    outputs = [o.name for o in graph.output]
    constants = {name: v for name, v in env.items() if name not in runtime}
    steps: list[_Step] = []
    for lv in range(max(level, default=0) + 1):
        for k, node in enumerate(graph.node):
            if level[k] == lv and k in converter.fell:
                steps.append(_Step(node=node, reads=tuple(n for n in node.input if n in runtime),
                                   writes=tuple(o for o in node.output if o)))
        members = [k for k in range(len(graph.node)) if level[k] == lv and k not in converter.fell]
        if members:
            steps.append(_part(converter, members, runtime, constants, needed_after, outputs, lv, compile_part))
    fallbacks = [Fallback(graph.node[k].op_type, graph.node[k].name or f"#{k}", why) for k, why in converter.fell.items()]
    return OnnxFallbackModel([t.name for t in inputs], outputs, steps, fallbacks, constants, converter.opsets,
                             len(graph.node))


def _part(converter: Any, members: list[int], runtime: set[str], constants: dict, needed_after: dict,
          outputs: list[str], lv: int, compile_part: Any) -> _Step:
    """The compiled part of one level: its nodes converted from placeholders of what they read."""
    graph, first = converter.graph, converter.env
    made = {o for k in members for o in graph.node[k].output}
    reads = [n for k in members for n in graph.node[k].input if n in runtime and n not in made]
    reads = list(dict.fromkeys(reads))
    converter.env = {**constants, **{n: graph_input(tuple(first[n].shape), first[n].dtype, name=n) for n in reads}}
    for k in members:
        node = graph.node[k]
        label = f"node '{node.name}' ({node.op_type})" if node.name else f"node {k} ({node.op_type})"
        outs = converter._convert(node, label, [converter.env[n] if n else None for n in node.input])
        for name, v in zip(node.output, outs):
            if name:
                converter.env[name] = v
    writes = [n for n in dict.fromkeys(o for k in members for o in graph.node[k].output)
              if n and n in runtime and (needed_after.get(n, -1) > lv or n in outputs)]
    part_env, converter.env = converter.env, first
    tensors = [part_env[n] if isinstance(part_env[n], Tensor) else converter.pool.tensor(part_env[n], n) for n in writes]
    compiled = compile_part(Graph([part_env[n] for n in reads], tensors))
    return _Step(part=compiled, reads=tuple(reads), writes=tuple(writes))


class OnnxFallbackModel:
    """An ONNX model run as compiled parts with some nodes in ONNX's reference
    implementation between them: called like a compiled graph (numpy arrays in, out in the
    model's output order); ``fallbacks`` lists the nodes that run outside the parts."""

    def __init__(self, inputs: list[str], outputs: list[str], steps: list[_Step], fallbacks: list[Fallback],
                 constants: dict[str, Any], opsets: dict[str, int], total: int):
        self.inputs, self.outputs, self.steps, self.fallbacks = inputs, outputs, steps, fallbacks
        self.constants, self.opsets, self.total = constants, opsets, total
        self.parts = [s.part for s in steps if s.part is not None]
        self.meta = {"fallbacks": [str(f) for f in fallbacks], "parts": [p.meta for p in self.parts]}

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.inputs):
            raise FrontendError(f"the model takes {len(self.inputs)} inputs ({', '.join(self.inputs)}), got {len(args)}")
        values: dict[str, Any] = {**self.constants, **{n: np.asarray(a) for n, a in zip(self.inputs, args)}}
        for step in self.steps:
            if step.part is not None:
                got = step.part(*(values[n] for n in step.reads))
                got = got if isinstance(got, tuple) else (got,)
            else:
                got = self._reference(step, values)
            values.update(zip(step.writes, got))
        outs = tuple(as_numpy(values[n]) for n in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def _reference(self, step: _Step, values: dict[str, Any]) -> list[Any]:
        from onnx.reference import ReferenceEvaluator
        node = step.node
        feeds = {n: as_numpy(values[n]) for n in node.input if n}
        domain = "" if node.domain == "ai.onnx" else node.domain
        with np.errstate(all="ignore"):
            got = ReferenceEvaluator(node, opsets={domain: self.opsets.get(domain, 1)}).run(None, feeds)
        return [g for g, name in zip(got, node.output) if name]

    def save(self, path: Any) -> None:
        raise FrontendError("a model with nodes run outside the compiled graph cannot be saved as one file; "
                            f"its parts can ({len(self.parts)} in .parts), or give those nodes converters")


def warn(model: OnnxFallbackModel) -> None:
    """The one-line summary of what fell back, as a warning."""
    warnings.warn(summary(model.fallbacks, model.total, "ONNX nodes", "ONNX's reference implementation"),
                  OnnxFallbackWarning, stacklevel=3)
