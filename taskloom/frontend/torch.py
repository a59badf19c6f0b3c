"""PyTorch frontend: a ``torch.compile`` backend that turns a model into one native function.

    model = MyModel().eval()
    fast = torch.compile(model, backend="taskloom")                    # the installed entry point
    fast = torch.compile(model, backend="taskloom", options={"tune": 1, "fallback": True})
    fast = taskloom.torch.compile(model, target="cpu", tune=0)         # the same, as a helper
    y = fast(x)                                                        # torch tensors in and out

For each graph dynamo captures, the backend lowers it to core ATen operators with torch's
own decompositions (:mod:`~taskloom.frontend.torch_lower`), converts those to a taskloom
graph (:mod:`~taskloom.frontend.torch_convert`, through the converter registry of
:mod:`~taskloom.frontend.torch_aten`), and compiles that with :func:`taskloom.compile`.

What to know:

- It is for inference. Parameters and buffers become constants of the compiled graph; when
  one is changed in place or replaced, the next call compiles again with the new values.
- Shapes are static by default: a new input shape compiles a new graph (kept beside the
  others). With dynamic shapes one graph serves every size dynamo's guards let through
  (:mod:`~taskloom.frontend.torch_symbolic`), and a graph dynamo traces again that is an
  earlier graph at some sizes runs that graph's library (:mod:`~taskloom.frontend.torch_reuse`).
- Inputs must be CPU tensors; outputs are CPU torch tensors sharing memory with the
  arrays the native code wrote (DLPack, no copy).
- Operators without a converter, and nodes their converter refuses, run in PyTorch
  (``fallback=True``, the default): every other region is compiled and fused by taskloom, and
  the parts and the PyTorch calls run in order in one callable
  (:mod:`~taskloom.frontend.torch_fallback`). One :class:`FallbackWarning` line per graph
  sums up what fell back; :func:`fallbacks` lists each node and why. With ``fallback=False``
  the operators without a converter are all listed in one :class:`~taskloom.errors.FrontendError`.
- Errors: a model that ``taskloom.torch.compile`` compiled raises taskloom's own error (a
  :class:`~taskloom.errors.TaskloomError` subclass), with dynamo's ``BackendCompilerFailed``
  (whose traceback shows the user's frame) as its ``__cause__`` or, where a converter's
  own fault is the cause, as its ``dynamo_error``.
  ``torch.compile(model, backend="taskloom")`` leaves dynamo's wrapping in place: catch
  ``BackendCompilerFailed`` and read its ``inner_exception``, or call :func:`unwrap_error`.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import operator
import re
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
from torch.utils._pytree import TreeSpec, tree_unflatten

from taskloom.errors import ArgumentError, FrontendError, TargetError, TaskloomError
from taskloom.frontend.torch_aten import REGISTRY, register
from taskloom.frontend.torch_convert import Conversion, convert
from taskloom.frontend.torch_fallback import Fallback, SplitGraph, split, summary
from taskloom.frontend.torch_lower import lower_to_aten
from taskloom.frontend.torch_reuse import Binding, specializes
from taskloom.frontend.torch_symbolic import (fake_inputs, fixed_symbols, graph_is_symbolic, inline_scalar_reads,
                                              MAX_SIZE, ranges as symbol_ranges, ranges_of, symbol_names)

__all__ = ["Backend", "CompiledFunction", "Fallback", "FallbackWarning", "Options", "PerShapeWarning", "REGISTRY",
           "compile", "compile_module", "fallbacks", "register", "taskloom_backend", "unwrap_error"]


class _OptionsError(FrontendError):
    """Options that do not fit the model's inputs: raised even with ``fallback=True``."""


def _may_fall_back(options: "Options", error: Exception) -> bool:
    """Whether a graph that failed with ``error`` may run in PyTorch as a whole: with
    ``fallback=True``, unless the options or the target are what is wrong."""
    return options.fallback and not isinstance(error, (_OptionsError, TargetError))


class FallbackWarning(UserWarning):
    """Some nodes of a graph (or the whole graph) run in PyTorch because taskloom could not
    compile them (``fallback=True``)."""


class PerShapeWarning(UserWarning):
    """A graph dynamo gave with symbolic sizes does not compile for all sizes at once (a
    convolution's height and width, say): taskloom compiles it once per input shape."""


@dataclass(frozen=True)
class Options:
    """The backend's options: ``target`` (a :class:`~taskloom.target.Target` or a string such
    as ``"cpu -isa=avx2"``; None is this machine), ``tune`` (0: predict schedules without
    measuring, 1: measure the best predicted, 2: measure the whole space), ``fallback``
    (True, the default: run the operators taskloom cannot compile in PyTorch instead of
    raising; False: raise), ``budget``
    (a bound on each graph's tuning time: ``"2m"``, ``"90s"`` or seconds; None is none),
    ``layout`` (``"auto"``: convolutions in NHWC where that pays; ``"NCHW"``: as traced) and
    ``device`` for CUDA targets (``"cuda"``, the GPU; ``"emulator"``, the SIMT emulator on
    CPU tensors). Without a target, CUDA inputs mean ``"cuda"`` (``"cuda -tf32"`` where torch
    allows tf32 for float32 matmuls)."""

    target: Any = None
    tune: int = 0
    fallback: bool = True
    budget: Any = None
    layout: str = "auto"
    device: Any = None

    def __post_init__(self) -> None:
        if self.device not in (None, "cuda", "emulator"):
            raise FrontendError(f"taskloom backend: option 'device'={self.device!r} is not valid (valid: 'cuda', "
                                "'emulator', for CUDA targets)")
        if isinstance(self.tune, bool) or self.tune not in (0, 1, 2):
            raise FrontendError(f"taskloom backend: option 'tune'={self.tune!r} is not valid (valid: 0, 1, 2)")
        if self.budget is not None:
            from taskloom.tune.budget import parse_budget
            try:
                parse_budget(self.budget)
            except ArgumentError as e:
                raise FrontendError(f"taskloom backend: option 'budget': {e}") from None
        if self.layout not in ("auto", "NCHW"):
            raise FrontendError(f"taskloom backend: option 'layout'={self.layout!r} is not valid (valid: 'auto', "
                                "'NCHW')")
        if not isinstance(self.fallback, bool):
            raise FrontendError(f"taskloom backend: option 'fallback'={self.fallback!r} must be True or False")
        if self.target is not None and not isinstance(self.target, str) and not hasattr(self.target, "key"):
            raise FrontendError(f"taskloom backend: option 'target'={self.target!r} must be None, a string "
                                "such as 'cpu' or a taskloom Target")

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None = None, mode: str | None = None,
              defaults: "Options | None" = None) -> "Options":
        """Options from ``torch.compile(..., options={...})`` over ``defaults``;
        ``mode='max-autotune'`` means tune=2 unless ``options`` set it."""
        given = dict(options or {})
        unknown = sorted(set(given) - {"target", "tune", "fallback", "budget", "layout", "device"})
        if unknown:
            raise FrontendError(f"taskloom backend: unknown option(s) {', '.join(map(repr, unknown))} "
                                "(valid: 'target', 'tune', 'fallback', 'budget', 'layout', 'device')")
        if mode is not None and mode.startswith("max-autotune") and "tune" not in given:
            given["tune"] = 2
        base = defaults or cls()
        return cls(**{**{"target": base.target, "tune": base.tune, "fallback": base.fallback,
                         "budget": base.budget, "layout": base.layout, "device": base.device}, **given})


def _is_runtime_input(node: torch.fx.Node, value: Any) -> bool:
    """Whether a dynamo placeholder is a real input, not a parameter, buffer or number (a
    Python float dynamo passes as a tensor, as it does with dynamic shapes)."""
    if not isinstance(value, torch.Tensor) or isinstance(value, torch.nn.Parameter) or _wrapped_float(node):
        return False
    source = getattr(node.meta.get("grapharg"), "source", None)
    while source is not None:  # reached through a module: its state
        kind = type(source).__name__
        if "NNModule" in kind or "ParamBuffer" in kind:
            return False
        source = getattr(source, "base", None)
    return True


def _wrapped_float(node: torch.fx.Node) -> bool:
    """Whether dynamo passes a Python float (a module's epsilon, ``math.pi``) as this tensor."""
    return bool(getattr(node.meta.get("grapharg"), "pass_arg_as_tensor", False))


def _input_name(node: torch.fx.Node, position: int) -> str:
    """A readable name for an input: dynamo's ``L_x_`` becomes ``x``."""
    name = re.sub(r"^[Ll]_", "", str(node.target)).strip("_")
    return name or f"input{position}"


def _concrete(value: Any) -> Any:
    """A symbolic size dynamo passes as an example (shapes marked dynamic) as its example value."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        hint = value.node.hint if value.node.has_hint() else None
        if hint is None:
            raise FrontendError(f"dynamo gave the symbolic size {value} without an example value")
        return type(hint)(hint)
    return value


def _version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # inference tensors keep no version counter
        return -1


class _Program:
    """One compiled specialization: the conversion, the native graph, and the state it froze."""

    def __init__(self, conversion: Conversion, compiled: Any, state: tuple[tuple, list]):
        self.conversion, self.compiled, self.state = conversion, compiled, state
        self._rebuild = _rebuilder(conversion.out_spec)

    def holds(self, state: tuple[tuple, list]) -> bool:
        """Whether ``state`` (tensors, versions) is the one this program froze. Called on every
        call with every parameter, so it stays in C loops (a model has hundreds of them)."""
        (mine, my_versions), (theirs, versions) = self.state, state
        return my_versions == versions and all(map(operator.is_, mine, theirs))

    def run(self, args: Sequence[Any]) -> Any:
        conv = self.conversion
        outs: Any = ()
        if self.compiled is not None:
            ins = []
            for p in conv.input_positions:
                t = args[p]
                if t.requires_grad:
                    t = t.detach()
                ins.append(t if t.is_contiguous() else t.contiguous())
            outs = self.compiled(*ins)
            if not isinstance(outs, tuple):
                outs = (outs,)
        return self._rebuild([outs[v] if kind == "graph" else v for kind, v in conv.leaves])


class _SplitProgram(_Program):
    """A specialization run as compiled parts and PyTorch calls (a :class:`SplitGraph`)."""

    def __init__(self, graph: SplitGraph, state: tuple[tuple, list]):  # (no conversion of the whole graph)
        self.split, self.state = graph, state

    def run(self, args: Sequence[Any]) -> Any:
        return self.split(args)


class _Reused(_Program):
    """A specialization run by an earlier graph's library: this graph is that graph at some of
    its sizes (:mod:`~taskloom.frontend.torch_reuse`), and ``binding`` makes its arguments."""

    def __init__(self, owner: "CompiledFunction", binding: Binding):  # (no conversion of its own)
        self.owner, self.binding = owner, binding

    def holds(self, state: tuple[tuple, list]) -> bool:
        return True  # (the owner checks its own state on each call)

    def run(self, args: Sequence[Any]) -> Any:
        return self.owner(*self.binding.arguments(args))


#: The compiled graphs with symbolic sizes a later graph may be served by (:meth:`CompiledFunction._reuse`).
_LIBRARIES: "weakref.WeakSet[CompiledFunction]" = weakref.WeakSet()


def _rebuilder(spec: TreeSpec) -> Callable[[list], Any]:
    """What turns the output leaves into torch's output structure. A graph's outputs are
    nearly always a flat tuple or list of tensors, which is built directly: the general
    ``tree_unflatten`` costs a few microseconds a call, as much as a small model's kernels."""
    children = [spec.child(i) for i in range(spec.num_children)] if spec.type in (tuple, list) else None
    if children is not None and all(c.is_leaf() for c in children):
        return spec.type
    return lambda leaves: tree_unflatten(leaves, spec)


class CompiledFunction:
    """What the backend gives dynamo for one captured graph: called with the graph's
    arguments, it runs the native code and returns torch's output structure.

    ``compiled_graph`` is the :class:`~taskloom.runtime.compiled_graph.CompiledGraph` built
    last (its ``meta['kernels']`` tells how the operators were fused), ``graph`` the taskloom
    graph it was compiled from, and ``aten_graph`` the ATen graph that was converted. When
    nodes fall back to PyTorch, those two are None and ``compiled_graphs`` lists the compiled
    parts in the order they run; ``fallbacks`` lists the nodes PyTorch runs (a
    :class:`~taskloom.frontend.torch_fallback.Fallback` each). ``per_shape`` says why the
    graph's symbolic sizes were given up for a compile per shape (empty while they are kept).
    ``reuses`` is the earlier :class:`CompiledFunction` whose library runs this graph, where
    dynamo traced again for a guard on a size (a batch of 1) and this graph turned out to be
    the earlier one at that size (:mod:`~taskloom.frontend.torch_reuse`): nothing is compiled.
    """

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options,
                 dims: Mapping[int, Mapping[int, str]] | None = None, reuse: bool = True):
        # (torch.compile(dynamic=False) asks for a specialized compile of each shape: no reuse)
        self.gm, self.options = gm, options
        self._may_reuse = reuse and torch._dynamo.config.automatic_dynamic_shapes
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(example_inputs):
            raise FrontendError(f"dynamo gave {len(example_inputs)} example inputs for a graph with "
                                f"{len(placeholders)} placeholders")
        self._is_input = [_is_runtime_input(n, a) for n, a in zip(placeholders, example_inputs)]
        # positions of the inputs, of the frozen tensors (parameters, buffers) and of other values
        self._inputs_at = [k for k, i in enumerate(self._is_input) if i]
        self._state_at = [k for k, (i, a) in enumerate(zip(self._is_input, example_inputs))
                          if not i and isinstance(a, torch.Tensor)]
        self._values_at = [k for k, (i, a) in enumerate(zip(self._is_input, example_inputs))
                           if not i and not isinstance(a, torch.Tensor)]
        self._names = [_input_name(n, k) for k, n in enumerate(placeholders)]
        self._targets = [str(n.target) for n in placeholders]  # (what pairs two graphs' placeholders)
        self.reuses: CompiledFunction | None = None
        # dynamo's sizes are symbols (dynamic=True, or a dimension seen to change): one
        # compiled graph serves every size its guards let through
        self.symbolic = graph_is_symbolic(gm)
        fakes = fake_inputs(gm) if self.symbolic else []
        self._symbol_names = {**fixed_symbols(fakes), **(symbol_names([fakes[k] for k in self._inputs_at], dims)
                                                           if fakes and dims else {})}
        # from 1 where dynamo's range starts at 2 only because it specializes a size of 1: a
        # graph dynamo traces for that size may then run this one's library (_reuse)
        self._ranges = {name: (1 if low == 2 and self._may_reuse else low, high) for name, (low, high) in
                        (symbol_ranges(fakes, self._symbol_names) if self.symbolic else {}).items()}
        # Python floats dynamo passes as new tensors each call (with dynamic shapes): the
        # program inlines their values, so they key it by value
        self._scalars_at = [k for k, n in enumerate(placeholders) if _wrapped_float(n)]
        self._state_at = [k for k in self._state_at if k not in self._scalars_at]
        self._programs: dict[Any, _Program | Callable] = {}
        self.compiled_graph: Any = None
        self.compiled_graphs: list[Any] = []
        self.fallbacks: list[Fallback] = []
        self.graph: Any = None
        self.aten_graph: torch.fx.GraphModule | None = None
        self.per_shape = ""  # why symbolic sizes were given up, if they were
        # compile now, at compile time, not on the first call
        concrete = [_concrete(a) for a in example_inputs]
        try:
            self._specialize(concrete, allow_fallback=False)
        except Exception as e:
            if not self.symbolic or isinstance(e, (_OptionsError, TargetError)):
                raise
            self._compile_per_shape(e)
            self._specialize(concrete, allow_fallback=False)
        if self.symbolic and self.compiled_graph is not None and self.reuses is None:
            _LIBRARIES.add(self)

    def _compile_per_shape(self, error: Exception) -> None:
        """Gives up the symbolic sizes that ``error`` refused: each input shape compiles a
        program of its own, as with ``dynamic=False``, and one warning says so."""
        self.per_shape = f"{type(error).__name__}: {_first_line(error)}"
        warnings.warn(f"taskloom: this graph does not compile for every size at once ({self.per_shape}); it "
                      "compiles once per input shape instead. Mark only the dimensions that vary dynamic "
                      "(torch._dynamo.mark_dynamic(x, 0) for the batch) to compile once", PerShapeWarning,
                      stacklevel=4)
        self.symbolic, self._ranges, self._symbol_names = False, {}, {}

    def _key(self, args: Sequence[Any]) -> tuple:
        # the float32 matmul precision picks tf32 for CUDA inputs with no target (see _target)
        precision = torch.get_float32_matmul_precision()
        if self.symbolic:  # sizes vary within one program; the symbols' values are no key
            return (tuple(args[k].dtype for k in self._inputs_at),
                    tuple(args[k] for k in self._values_at if not isinstance(args[k], (int, torch.SymInt))),
                    tuple(args[k].item() for k in self._scalars_at), precision)
        return (tuple((tuple(args[k].shape), args[k].dtype) for k in self._inputs_at),
                tuple(args[k] for k in self._values_at), precision)

    def _state(self, args: Sequence[Any]) -> tuple[tuple, list]:
        """The parameters and buffers a program freezes as constants, and their versions (an
        in-place change bumps a tensor's version)."""
        tensors = tuple(map(args.__getitem__, self._state_at))
        try:
            versions = [t._version for t in tensors]
        except RuntimeError:  # an inference tensor among them keeps no version counter
            versions = [_version(t) for t in tensors]
        return tensors, versions

    def _specialize(self, args: Sequence[Any], allow_fallback: bool = True) -> _Program | Callable:
        key = self._key(args)
        program = self._programs.get(key)
        if isinstance(program, _Program) and program.holds(self._state(args)):
            return program
        if program is not None and not isinstance(program, _Program):
            return program  # this shape falls back to eager
        try:
            program = self._build(args)
        except Exception as e:
            if not (allow_fallback and _may_fall_back(self.options, e)):
                raise
            self.fallbacks = [_warn_fallback(e)]
            program = self.gm.forward
        self._programs[key] = program
        return program

    def _build(self, args: Sequence[Any]) -> _Program:
        try:
            if self._scalars_at:
                inline_scalar_reads(self.gm, args, self._scalars_at)
            aten_gm = lower_to_aten(self.gm, args, symbolic=self.symbolic)
        except Exception as e:
            raise FrontendError(f"torch could not lower the captured graph to core ATen operators "
                                f"({type(e).__name__}: {_first_line(e)})") from e
        reused = self._reuse(aten_gm, args) if self._may_reuse else None
        if reused is not None:
            return reused
        try:
            conversion = convert(aten_gm, args, self._is_input, self._names, self._symbol_names)
        except FrontendError as e:  # operators without a converter, or a node its converter refused
            if not self.options.fallback or not (getattr(e, "unsupported", None) or getattr(e, "node_name", None)):
                raise
            try:
                return self._build_split(aten_gm, args, e)
            except Exception:
                if not self.symbolic:
                    raise
                raise e from None  # the converter's refusal says why these sizes cannot stay symbolic
        compiled = None if conversion.graph is None else self._compile(conversion.graph, args)
        self.aten_graph, self.graph, self.compiled_graph = aten_gm, conversion.graph, compiled
        self.compiled_graphs, self.fallbacks = ([] if compiled is None else [compiled]), []
        return _Program(conversion, compiled, self._state(args))

    def _reuse(self, aten_gm: torch.fx.GraphModule, args: Sequence[Any]) -> _Program | None:
        """A program that runs an earlier graph's library, when this graph is that graph at
        some of its sizes and that library serves them with the state (parameters) it holds."""
        for other in list(_LIBRARIES):
            if other is self or other.options != self.options or other.aten_graph is None or not other.symbolic:
                continue
            try:
                binding = specializes(other.aten_graph, other._targets, other._served_range, aten_gm, self._targets,
                                      self._is_input)
            except Exception as e:  # (a comparison that failed costs a compile, never the graph)
                warnings.warn(f"taskloom: this graph was not compared with an earlier one ({type(e).__name__}: "
                              f"{_first_line(e)}); it compiles on its own", stacklevel=2)
                return None
            if binding is None:
                continue
            theirs = binding.arguments(args)
            program = other._programs.get(other._key(theirs))
            if not (type(program) is _Program and program.holds(other._state(theirs))):
                continue
            self.reuses, self.aten_graph, self.graph = other, aten_gm, other.graph
            self.compiled_graph, self.compiled_graphs, self.fallbacks = other.compiled_graph, [other.compiled_graph], []
            return _Reused(other, binding)
        return None

    def _served_range(self, symbol: str) -> tuple[int, int] | None:
        """The range of sizes this graph's library was compiled for, of dynamo's ``symbol``."""
        name = self._symbol_names.get(symbol, symbol)
        return (name, name) if isinstance(name, int) else self._ranges.get(name)

    def _build_split(self, aten_gm: torch.fx.GraphModule, args: Sequence[Any], error: FrontendError) -> _SplitProgram:
        """The program of a graph some of whose nodes run in PyTorch, with the warning saying which."""
        graph, fell, total = split(aten_gm, args, self._is_input, self._names, lambda g: self._compile(g, args),
                                   error)
        warnings.warn(summary(fell, total), FallbackWarning, stacklevel=2)
        self.aten_graph, self.graph, self.compiled_graph = aten_gm, None, None
        self.compiled_graphs, self.fallbacks = graph.compiled_graphs, fell
        return _SplitProgram(graph, self._state(args))

    def _compile(self, graph: Any, args: Sequence[Any]) -> Any:
        from taskloom.compiler.graph_compiler import compile_graph
        return compile_graph(graph, target=self._target(args), tune=self.options.tune, budget=self.options.budget,
                             layout=self.options.layout, device=self.options.device,
                             ranges=ranges_of(graph, self._ranges))

    def _target(self, args: Sequence[Any]) -> Any:
        """The option's target; without one, the GPU's where the inputs are CUDA tensors (or
        the emulator runs), with tf32 where torch allows it for float32 matmuls
        (``torch.set_float32_matmul_precision("high")``), else this machine's CPU. CUDA
        inputs need a CUDA target."""
        on_gpu = any(isinstance(args[k], torch.Tensor) and args[k].is_cuda for k in self._inputs_at)
        target = self.options.target
        if target is None and (on_gpu or self.options.device is not None):
            if self.options.device == "emulator":
                raise _OptionsError("taskloom backend: option device='emulator' needs a CUDA target naming the "
                                    "architecture to emulate, e.g. options={'target': 'cuda:sm_90', ...}")
            return gpu_target()
        if on_gpu and not str(getattr(target, "kind", target)).startswith("cuda"):
            raise _OptionsError(f"taskloom backend: the inputs are CUDA tensors and the target is {target!r}; "
                                "pass target='cuda' (or None), or move the inputs to the CPU")
        return target

    def __call__(self, *args: Any) -> Any:
        program = self._specialize(args)
        return program.run(args) if isinstance(program, _Program) else program(*args)


def gpu_target() -> str:
    """The target of CUDA inputs when the options name none: this machine's GPU, with tf32
    products where torch allows them for float32 matmuls (a precision other than "highest",
    ``torch.set_float32_matmul_precision("high")``)."""
    return "cuda -tf32" if torch.get_float32_matmul_precision() != "highest" else "cuda"


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else ""


def unwrap_error(error: BaseException) -> BaseException:
    """The taskloom error inside dynamo's ``BackendCompilerFailed`` (what
    ``torch.compile(model, backend="taskloom")`` raises when taskloom refuses a graph); any
    other exception as it is. Dynamo's error becomes the taskloom error's ``__cause__``
    unless that already holds the fault behind it (a converter's own exception), and is
    its ``dynamo_error`` either way."""
    from torch._dynamo.exc import BackendCompilerFailed
    inner = getattr(error, "inner_exception", None)
    if not isinstance(error, BackendCompilerFailed) or not isinstance(inner, TaskloomError):
        return error
    error.__context__ = None  # (dynamo raised it while handling the inner error: no cycle)
    error.__suppress_context__ = True
    inner.dynamo_error = error  # type: ignore[attr-defined]
    if inner.__cause__ is None:
        inner.__cause__ = error
    return inner


def _raising_taskloom_errors(fn: Callable, size_oblivious: bool = False) -> Callable:
    """``fn`` (a function torch.compile made) raising taskloom errors out of dynamo's
    ``BackendCompilerFailed``; with ``size_oblivious``, its first call traced with a size of 1
    as symbolic as any other, where the model's code does not branch on it: one graph serves
    a batch of 1 and of 8, where dynamo would otherwise specialize on the 1. Later calls that
    trace again (a guard failed) trace as dynamo does: there, a dimension dynamo made dynamic
    because it changed between calls may be one of size 1 that broadcasts (an attention
    mask's heads), which a size-oblivious trace cannot broadcast."""
    from torch._dynamo.exc import BackendCompilerFailed
    first = [size_oblivious]

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        # (and a float the model holds, an epsilon or a scale, is a constant rather than a
        # tensor made on every call: taskloom inlines such a value anyway)
        sizes, floats = ((torch.fx.experimental._config.patch(backed_size_oblivious=True),
                          torch._dynamo.config.patch(specialize_float=True)) if first[0]
                         else (contextlib.nullcontext(), contextlib.nullcontext()))
        try:
            with sizes, floats:
                out = fn(*args, **kwargs)
            first[0] = False
            return out
        except BackendCompilerFailed as e:
            inner = unwrap_error(e)
            if inner is e:
                raise
            raise inner from inner.__cause__
    return call


def _warn_fallback(error: Exception) -> Fallback:
    """Warns that a whole graph runs in eager PyTorch because of ``error``; what :func:`fallbacks` lists for it."""
    why = f"{type(error).__name__}: {_first_line(error)}"
    warnings.warn(f"taskloom: the whole graph runs in eager PyTorch (fallback=True): {why}", FallbackWarning,
                  stacklevel=3)
    return Fallback("graph", "", why)


class Backend:
    """A dynamo backend with fixed :class:`Options`; ``torch.compile(model, backend=Backend(tune=1))``.
    ``compiled`` lists the :class:`CompiledFunction` of every graph it compiled, in order;
    ``fallbacks`` what of them runs in PyTorch. With ``reuse`` (the default), a graph dynamo
    traces again for a guard on a size runs an earlier graph's library where it is that graph
    at that size (:attr:`CompiledFunction.reuses`), compiling nothing."""

    __name__ = "taskloom"  # how dynamo names the backend in its messages

    def __init__(self, *, target: Any = None, tune: int = 0, fallback: bool = True, budget: Any = None,
                 layout: str = "auto", device: str | None = None, dims: Mapping[int, Mapping[int, str]] | None = None,
                 reuse: bool = True):
        self.options = Options(target, tune, fallback, budget, layout, device)
        self.dims = dims  # names of the inputs' symbolic dimensions, by position (compile_module's dynamic=)
        self.reuse = reuse  # whether a graph may run an earlier graph's library (CompiledFunction.reuses)
        self.compiled: list[CompiledFunction] = []
        self._eager_graphs: list[Fallback] = []  # graphs that run in PyTorch as a whole

    @property
    def fallbacks(self) -> list[Fallback]:
        """The nodes (or whole graphs) that run in PyTorch, over every graph compiled so far."""
        return [f for fn in self.compiled for f in fn.fallbacks] + self._eager_graphs

    @property
    def libraries(self) -> int:
        """How many programs the graphs so far built: one per graph and input pattern, less
        those that run an earlier graph's library (:attr:`CompiledFunction.reuses`)."""
        return sum(not isinstance(p, _Reused) for fn in self.compiled for p in fn._programs.values())

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 options: Mapping[str, Any] | None = None, mode: str | None = None) -> Callable:
        opts = Options.parse(options, mode, defaults=self.options) if options or mode else self.options
        try:
            fn = CompiledFunction(gm, example_inputs, opts, self.dims, self.reuse)
        except Exception as e:
            if not _may_fall_back(opts, e):
                raise
            self._eager_graphs.append(_warn_fallback(e))
            return gm.forward
        self.compiled.append(fn)
        return fn


def taskloom_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                     options: Mapping[str, Any] | None = None, mode: str | None = None) -> Callable:
    """The ``torch_dynamo_backends`` entry point named ``"taskloom"``: compiles one dynamo graph.
    ``options`` (from ``torch.compile(..., options={...})``) may set ``target``, ``tune``,
    ``fallback``, ``budget``, ``layout`` and ``device`` (see :class:`Options`)."""
    opts = Options.parse(options, mode)
    return Backend(target=opts.target, tune=opts.tune, fallback=opts.fallback,
                   budget=opts.budget, layout=opts.layout, device=opts.device)(gm, example_inputs)


def compile_module(model: Any, example_inputs: tuple[Any, ...], *, target: Any = None, tune: int = 0,
                   budget: Any = None, layout: str = "auto", device: str | None = None,
                   dynamic: Mapping[str | int, Mapping[int, Any]] | None = None) -> Any:
    """``model`` traced on ``example_inputs`` into one :class:`~taskloom.runtime.CompiledGraph`
    (what ``taskloom.compile(model, example_inputs)`` returns): savable, called with the
    same inputs in order. The model must capture as one graph whose outputs it computes;
    for anything else (graph breaks, outputs that are inputs), use :func:`compile`.

    ``dynamic`` makes dimensions of the inputs symbolic, one compiled graph for every size:
    ``{"x": {0: "batch", 1: "seq"}}`` names them by input (the forward's parameter name, or
    its position) and dimension; ``{"x": {0: ("batch", 1, 64)}}`` gives a range too (by
    default 1 to 2**31 - 1). Dimensions given one name must be equal in every call."""
    dims = dynamic_dims(model, example_inputs, dynamic)
    tensors = [k for k, x in enumerate(example_inputs) if isinstance(x, torch.Tensor)]
    backend = Backend(target=target, tune=tune, fallback=False, budget=budget, layout=layout, device=device,
                      reuse=False,  # (the library returned is this graph's own, for its declared ranges)
                      dims={tensors.index(k): {d: n for d, (n, _, _) in named.items()} for k, named in dims.items()})
    inputs = _marked(example_inputs, dims)
    # every module of a class shares its forward's code, and each capture adds an entry to
    # that code's cache until the module is collected: past dynamo's recompile limit (8), a
    # capture with fullgraph=True fails, so compiling a ninth model of a class in one
    # process would. A capture runs once; the limit guards against recompiling in a loop.
    limits = {"recompile_limit": max(torch._dynamo.config.recompile_limit, 1 << 16),
              "accumulated_recompile_limit": max(torch._dynamo.config.accumulated_recompile_limit, 1 << 16)}
    # sizes of 1 stay symbolic (dynamo would specialize them): one graph serves 1 and up; and
    # torch's choice of its own convolution code (NNPACK from a batch of 16) guards nothing
    symbolic = contextlib.ExitStack()
    if dims:
        symbolic.enter_context(torch.fx.experimental._config.patch(backed_size_oblivious=True))
        symbolic.enter_context(torch.backends.nnpack.flags(enabled=False))
        symbolic.enter_context(_quiet("torch._guards"))  # (a violated range is raised below, once)
    try:
        traced = torch.compile(model, backend=backend, dynamic=None if dims else False, fullgraph=True)
        with torch.inference_mode(), torch._dynamo.config.patch(**limits), symbolic, warnings.catch_warnings():
            warnings.simplefilter("ignore", PerShapeWarning)  # (raised below as an error)
            traced(*inputs)
    except torch._dynamo.exc.Unsupported as e:
        raise FrontendError(f"compile(): the model does not trace as one graph ({e}); "
                            "use taskloom.torch.compile(model) for models with graph breaks") from None
    except torch._dynamo.exc.BackendCompilerFailed as e:
        inner = unwrap_error(e)
        if inner is e:
            raise
        raise inner from inner.__cause__
    except torch.fx.experimental.symbolic_shapes.ConstraintViolationError as e:
        raise FrontendError(f"compile(): the model does not allow every size of the dimensions dynamic= names: "
                            f"{_constraint_text(e)}") from None
    (fn,) = backend.compiled
    if fn.per_shape:
        raise FrontendError(f"compile(): the model does not compile with the symbolic dimensions dynamic= names "
                            f"({fn.per_shape})")
    compiled = fn.compiled_graph
    program = next(iter(fn._programs.values()))
    conv = program.conversion
    shapes = [tuple(dims.get(k, {}).get(d, (size,))[0] for d, size in enumerate(x.shape))
              for k, x in enumerate(example_inputs) if isinstance(x, torch.Tensor)]
    if (compiled is None or any(kind != "graph" for kind, _ in conv.leaves)
            or [tuple(i["shape"]) for i in compiled.inputs] != shapes):
        raise FrontendError("compile(): the model's outputs are not all computed from its tensor inputs in "
                            "order; use taskloom.torch.compile(model), which handles any output structure")
    return compiled


def dynamic_dims(model: Any, example_inputs: Sequence[Any],
                 dynamic: Mapping[str | int, Mapping[int, Any]] | None) -> dict[int, dict[int, tuple[str, int, int]]]:
    """``compile_module``'s ``dynamic=`` checked against the model's inputs: for each input
    position, each symbolic dimension's (name, lowest, highest)."""
    if not dynamic:
        return {}
    if not isinstance(dynamic, Mapping):
        raise ArgumentError(f"compile(): dynamic= maps inputs to their symbolic dimensions, "
                            f"{{'x': {{0: 'batch'}}}}; got {dynamic!r}")
    params = _parameter_names(model, len(example_inputs))
    out: dict[int, dict[int, tuple[str, int, int]]] = {}
    for key, named in dynamic.items():
        k = key if isinstance(key, int) and not isinstance(key, bool) else params.index(key) if key in params else -1
        if not 0 <= k < len(example_inputs):
            raise ArgumentError(f"compile(): dynamic= names input {key!r}, which the model does not take (its "
                                f"inputs: {', '.join(map(repr, params))}, or positions 0 to {len(example_inputs) - 1})")
        x = example_inputs[k]
        if not isinstance(x, torch.Tensor) or not isinstance(named, Mapping):
            raise ArgumentError(f"compile(): dynamic= for input {key!r} must map dimensions of a tensor to names, "
                                f"{{0: 'batch'}}; got {named!r} for a {type(x).__name__}")
        out[k] = {_axis(key, d, x.ndim): _symbol(key, d, spec, int(x.shape[d if d >= 0 else d + x.ndim]))
                  for d, spec in named.items()}
    return _one_range_per_name(out)


def _one_range_per_name(dims: dict[int, dict[int, tuple[str, int, int]]]) -> dict[int, dict[int, tuple[str, int, int]]]:
    """A name given a range in one place has it everywhere (dynamo needs the dimensions it
    finds equal to have one range); two different ranges for one name are an error."""
    given: dict[str, tuple[int, int]] = {}
    for named in dims.values():
        for name, low, high in named.values():
            if (low, high) != (1, MAX_SIZE) and given.setdefault(name, (low, high)) != (low, high):
                raise ArgumentError(f"compile(): dynamic= gives {name!r} two ranges, {given[name]} and "
                                    f"{(low, high)}; give it one")
    return {k: {d: (n, *given.get(n, (lo, hi))) for d, (n, lo, hi) in named.items()} for k, named in dims.items()}


def _parameter_names(model: Any, count: int) -> list[str]:
    """The names of the first ``count`` parameters of the model's forward (or the function)."""
    try:
        params = list(inspect.signature(getattr(model, "forward", model)).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return names[:count] + [str(k) for k in range(len(names), count)]


def _axis(key: Any, d: Any, ndim: int) -> int:
    if not isinstance(d, int) or isinstance(d, bool) or not -ndim <= d < ndim:
        raise ArgumentError(f"compile(): dynamic= names dimension {d!r} of input {key!r}, which has {ndim} "
                            "dimensions")
    return d % ndim


def _symbol(key: Any, d: int, spec: Any, size: int) -> tuple[str, int, int]:
    """A dimension's (name, lowest, highest) from ``"batch"`` or ``("batch", 1, 64)``."""
    if isinstance(spec, str):
        name, low, high = spec, 1, MAX_SIZE
    elif isinstance(spec, (tuple, list)) and len(spec) == 3:
        name, low, high = spec
    else:
        name, low, high = None, 0, 0
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high))
    if not isinstance(name, str) or not name.isidentifier() or not ints or not 1 <= low <= high <= MAX_SIZE:
        raise ArgumentError(f"compile(): dynamic= for dimension {d} of input {key!r} must be a name, 'batch', or "
                            f"a name and a range, ('batch', 1, 64), with 1 <= lowest <= highest <= {MAX_SIZE}; "
                            f"got {spec!r}")
    if not low <= size <= high:
        raise ArgumentError(f"compile(): the example input {key!r} has {size} in dimension {d}, outside the range "
                            f"{low} to {high} that dynamic= gives {name!r}")
    return name, low, high


def _marked(example_inputs: Sequence[Any], dims: Mapping[int, Mapping[int, tuple[str, int, int]]]) -> list[Any]:
    """The example inputs with the dimensions ``dims`` names marked dynamic for dynamo (on new
    tensor objects over the same data, so that the caller's tensors stay unmarked)."""
    out = list(example_inputs)
    for k, named in dims.items():
        out[k] = out[k].detach()
        for d, (_, low, high) in named.items():
            torch._dynamo.mark_dynamic(out[k], d, min=low, max=high)
    return out


@contextlib.contextmanager
def _quiet(logger: str) -> Any:
    """``logger``'s records dropped for the duration (dynamo logs an error it also raises)."""
    log = logging.getLogger(logger)
    level, log.level = log.level, logging.CRITICAL + 1
    try:
        yield
    finally:
        log.level = level


def _constraint_text(error: Exception) -> str:
    """dynamo's constraint violation as one line: what the model's code requires of the sizes."""
    text = str(error)
    guard = re.search(r"satisfy the generated guard (.*?)\.?$", text, re.M)
    if guard:
        need = f"the model's code requires {guard.group(1)}"
    elif "specialized it to be a constant" in text:
        need = "the model's code fixes a dimension to its example size"
    else:
        return _first_line(error)
    need = re.sub(r"L\['(\w+)'\]\.size\(\)\[(\d+)\]", r"input '\1' dimension \2", need)
    return (f"{need}. Give each dimension a range its code allows (('seq', 2, 512)) and an example size "
            "other than 1, or compile with taskloom.torch.compile(model, dynamic=True), which compiles a graph "
            "per case")


def compile(model: Any, *, target: Any = None, tune: int = 0, fallback: bool = True,  # noqa: A001
            dynamic: bool | None = False, fullgraph: bool = False, budget: Any = None,
            layout: str = "auto") -> Any:
    """``torch.compile(model, backend=Backend(target, tune, fallback, budget, layout))``: the
    model (or function) compiled by taskloom when first called. Shapes are static by
    default (``dynamic=False``); each new input shape compiles again. Operators taskloom
    cannot compile run in PyTorch (:func:`fallbacks` lists them); with ``fallback=False``
    they raise a :class:`~taskloom.errors.TaskloomError` (dynamo's ``BackendCompilerFailed``
    chained as its cause)."""
    backend = Backend(target=target, tune=tune, fallback=fallback, budget=budget, layout=layout)
    compiled = torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=fullgraph)
    # taskloom's errors come out as themselves, not wrapped in dynamo's BackendCompilerFailed
    if isinstance(compiled, torch.nn.Module):  # dynamo's OptimizedModule: its forward is the compiled call
        compiled.forward = _raising_taskloom_errors(compiled.forward, dynamic is True)
    else:
        compiled = _raising_taskloom_errors(compiled, dynamic is True)
    # what fallbacks() reads; on the wrapper itself (dynamo's OptimizedModule hands attribute
    # writes to the model, which another compile of the same model would overwrite)
    compiled.__dict__["taskloom_backend"] = backend
    return compiled


def fallbacks(compiled: Any) -> list[Fallback]:
    """What runs in PyTorch in ``compiled`` (made by :func:`compile`; or a :class:`Backend` or
    :class:`CompiledFunction`), over every graph compiled so far: one
    :class:`~taskloom.frontend.torch_fallback.Fallback` (``op``, ``node``, ``reason``) a node,
    or one for a graph that runs in PyTorch as a whole."""
    if isinstance(compiled, (Backend, CompiledFunction)):
        return list(compiled.fallbacks)
    backend = getattr(compiled, "taskloom_backend", None)
    if not isinstance(backend, Backend):
        raise FrontendError(f"fallbacks(): {type(compiled).__name__} was not made by taskloom.torch.compile; "
                            "pass what it returned, or the Backend given to torch.compile")
    return backend.fallbacks
