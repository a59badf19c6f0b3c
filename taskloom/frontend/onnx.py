"""ONNX models in: ``from_onnx(path_or_model)`` gives a compiled model, ``onnx_to_graph``
the taskloom graph before compiling.

    compiled = taskloom.onnx.from_onnx("model.onnx")          # or an onnx.ModelProto
    y = compiled(x)                                            # numpy arrays or torch tensors

Each node goes through the converter registered for its operator type and version
(:data:`REGISTRY`; see ``onnx_registry`` for how to add one). Initializers and ``Constant``
nodes become numpy constants; a node whose inputs are all constants is computed at once
with ONNX's own reference implementation (numpy), so the shape arithmetic exporters emit
(``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``) folds away on the static shapes and
a ``Reshape`` gets a constant target. Model inputs become ``taskloom.graph.input``s with
their static shapes, or the ``input_shapes`` given for symbolic ones.

A model is checked before it is converted (``onnx.checker`` and strict shape inference:
:func:`check_model`), so a malformed one is refused with ONNX's own diagnosis. Every
operator that cannot be converted is reported in one :class:`FrontendError`, with its
count, together with any node whose attributes or inputs taskloom does not support; a
converter's unexpected fault becomes such a line too, naming the node and chaining the
fault. Nothing but a :class:`~taskloom.errors.TaskloomError` leaves the conversion.

The ``onnx`` package is imported only when a model is converted (``pip install
'taskloom[onnx]'``).
"""
from __future__ import annotations

import os
import re
from collections import Counter
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

# the converters register themselves on import
from taskloom.frontend import onnx_elementwise, onnx_nn, onnx_resize, onnx_shape  # noqa: F401
from taskloom.frontend.onnx_registry import (ONNX_DTYPES, REGISTRY, ConstantPool, Converter, OnnxNode, Value,
                                             as_numpy, converter, is_const, shape_of, shape_text, taskloom_dtype)
from taskloom.errors import FrontendError, TaskloomError
from taskloom.frontend.onnx_symbolic import DATA_FIRST, evaluate, has_symbolic_shape, is_sizes
from taskloom.graph.graph import Graph
from taskloom.graph.tensor import Tensor, input as graph_input, symbol as graph_symbol
from taskloom.ir import dtypes as T

if TYPE_CHECKING:
    from taskloom.runtime.compiled_graph import CompiledGraph
    from taskloom.target import Target

__all__ = ["from_onnx", "onnx_to_graph", "load_model", "check_model", "REGISTRY", "converter", "Converter",
           "OnnxNode", "supported_ops"]

#: Operators whose output is random: never computed at conversion time.
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"}

InputShapes = Mapping[str, Sequence[int]] | Sequence[Sequence[int]] | None


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise FrontendError("the ONNX frontend needs the onnx package: pip install 'taskloom[onnx]'") from None
    return onnx


def supported_ops() -> dict[str, tuple[int, int]]:
    """Every operator type with a converter, and the operator versions it covers."""
    return {op: c.versions for op, c in sorted(REGISTRY.items())}


def load_model(path_or_model: Any) -> Any:
    """An ``onnx.ModelProto`` from a path, serialized bytes, or a ModelProto (returned as is).
    Bytes or a file that do not parse as a model are a :class:`FrontendError` naming them."""
    onnx = _onnx()
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model
    if isinstance(path_or_model, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(path_or_model))
        except Exception as e:
            raise FrontendError(f"the {len(path_or_model)} bytes given are not a serialized ONNX model "
                                f"({type(e).__name__}: {e}); pass the bytes of a .onnx file") from e
    if isinstance(path_or_model, (str, os.PathLike)):
        path = os.fspath(path_or_model)
        if not os.path.isfile(path):
            raise FrontendError(f"no ONNX model at {path!r}")
        if os.path.getsize(path) == 0:
            raise FrontendError(f"{path!r} is empty, not an ONNX model; export it again")
        try:
            return onnx.load(path)
        except Exception as e:
            raise FrontendError(f"{path!r} is not a readable ONNX model (corrupt or truncated: "
                                f"{type(e).__name__}: {e}); export it again") from e
    raise FrontendError(f"from_onnx() takes a path, bytes or an onnx.ModelProto, got {type(path_or_model).__name__}")


#: Models at least this large cannot be checked in memory (protobuf's limit); their file is.
_PROTO_LIMIT = 2**31 - 1


def check_model(model: Any, where: str = "the ONNX model", path: str | None = None) -> None:
    """Refuses a model that is not valid ONNX: ``onnx.checker.check_model`` and strict shape
    inference (each node's input types and shapes must fit its operator, declared shapes must
    agree with inferred ones), each failure a :class:`FrontendError` naming ``where``. A
    graph output declared without a shape, which the checker refuses but onnxruntime runs,
    is left to shape inference. A model too large to check in memory is checked from its
    file ``path``, where there is one."""
    onnx = _onnx()
    if not len(model.graph.output):
        raise FrontendError(f"{where} has no outputs: a model must declare at least one graph output")
    if model.ByteSize() > _PROTO_LIMIT:  # too large to check in memory: the file is checked
        if path is not None:
            _checked(lambda: onnx.checker.check_model(path), where)
        return
    checked = model
    shapeless = [k for k, vi in enumerate(model.graph.output)
                 if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]
    if shapeless:  # the checker sees the model without them
        checked = onnx.ModelProto()
        checked.CopyFrom(model)
        for k in reversed(shapeless):
            del checked.graph.output[k]
    _checked(lambda: onnx.checker.check_model(checked), where)
    _checked(lambda: onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True), where,
             "shape inference failed: ")


def _checked(check: Any, where: str, what: str = "") -> None:
    try:
        check()
    except Exception as e:
        raise FrontendError(f"{where} is not a valid ONNX model: {what}{_first_lines(e)}") from e


def _first_lines(e: Exception, limit: int = 6) -> str:
    """An exception's message, blank lines dropped, at most ``limit`` lines."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return "; ".join(lines[:limit]) or type(e).__name__


def from_onnx(path_or_model: Any, input_shapes: InputShapes = None, *,
              constants: Mapping[str, Any] | None = None, target: "Target | str | None" = None,
              verbose: bool = False, tune: int = 0, budget: "str | float | None" = None,
              layout: str = "auto", device: str | None = None,
              dynamic: Mapping[str, tuple[int, int]] | None = None, fallback: bool = False) -> "CompiledGraph":
    """Converts an ONNX model (a path, bytes or an ``onnx.ModelProto``) and compiles it for
    ``target`` (default: this machine).

    A dimension the model leaves symbolic (``dim_param`` ``"batch"``) stays symbolic: the
    compiled model takes every size of it, one library for all (the symbol's range from
    ``dynamic``, ``{"batch": (1, 64)}``, else any size), and the shape arithmetic exporters
    emit for it (``Shape -> Gather -> Concat -> Reshape``) is carried out on the symbols
    (:mod:`~taskloom.frontend.onnx_symbolic`). ``input_shapes`` fixes such inputs' shapes
    instead: ``{"input_ids": (1, 128)}``, or one shape per model input in order. ``constants`` fixes
    the values of model inputs that decide the computation's shape (a ``Reshape`` target or
    ``Slice`` bounds the model takes as inputs): ``{"shape": np.array([2, -1])}``; they are
    no longer inputs of the compiled model. When a model needs that, the error says which
    inputs (also as ``error.constant_inputs``). The compiled model is called with the
    remaining inputs (initializers excluded) in order. ``tune``, ``budget``, ``layout`` and
    ``device`` are :func:`taskloom.compile`'s.

    With ``fallback=True`` a node taskloom cannot convert runs in ONNX's reference
    implementation (numpy) instead of failing the model: the rest compiles in parts around
    it (:mod:`~taskloom.frontend.onnx_fallback`), one warning line says what fell back, and
    the result's ``fallbacks`` lists each node and why."""
    from taskloom.compiler.graph_compiler import compile_graph
    converter, graph = _converted(path_or_model, input_shapes, constants, fallback)
    symbolic = [t.name for t in converter.inputs if has_symbolic_shape(t)]
    if converter.fell:
        from taskloom.frontend import onnx_fallback
        if symbolic:
            raise _static_only(symbolic, "fallback=True: ", "the parts around nodes that fall back compile for "
                                                          "static shapes only")
        model = onnx_fallback.build(converter, converter.inputs, lambda part: compile_graph(
            part, target, verbose=verbose, tune=tune, budget=budget, layout=layout, device=device))
        onnx_fallback.warn(model)
        return model  # type: ignore[return-value]
    return compile_graph(graph, target,
                         verbose=verbose, tune=tune, budget=budget, layout=layout, device=device,
                         ranges=dict(dynamic) if dynamic else None)


# ----------------------------------------------------------------------------- the conversion

def onnx_to_graph(model: Any, input_shapes: InputShapes = None, *,
                  constants: Mapping[str, Any] | None = None) -> Graph:
    """The taskloom graph of an ONNX model (a path, bytes or an ``onnx.ModelProto``); see
    :func:`from_onnx`. Raises one :class:`FrontendError` listing every operator without a
    converter (with counts) and every node that cannot be converted."""
    return _converted(model, input_shapes, constants)[1]


def _converted(model: Any, input_shapes: InputShapes = None, constants: Mapping[str, Any] | None = None,
               fallback: bool = False) -> tuple["_Converter", Graph]:
    """The converter after converting ``model`` (with ``fallback``: the nodes it cannot
    convert in its ``fell``) and the graph it made."""
    onnx = _onnx()
    path = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    where = repr(path) if path is not None else "the ONNX model"
    model = load_model(model)
    check_model(model, where, path)
    try:
        if model.functions:
            from onnx import inliner
            model = inliner.inline_local_functions(model)
        converter = _Converter(onnx, model)
        return converter, converter.run(input_shapes, dict(constants or {}), fallback)
    except TaskloomError:
        raise
    except Exception as e:  # a fault outside any one node: still a FrontendError
        raise FrontendError(f"cannot convert {where}: {type(e).__name__}: {e}") from e


def _static_only(symbolic: list[str], prefix: str, why: str) -> FrontendError:
    """The error for inputs with symbolic dimensions where ``why`` needs static shapes."""
    return FrontendError(f"{prefix}model input(s) {', '.join(repr(n) for n in symbolic)} have symbolic dimensions, "
                         f"and {why}: fix them with input_shapes={{'{symbolic[0]}': (...), ...}}")


def _symbol_name(dim: str, input_name: str, axis: int) -> str:
    """The symbol of a symbolic dimension: its ``dim_param`` as an identifier, or for an
    unnamed one ``<input>_<axis>``."""
    name = dim if dim != "?" else f"{input_name}_{axis}"
    name = re.sub(r"\W", "_", name)
    return name if name[:1].isalpha() or name[:1] == "_" else f"d_{name}"


def inferred_types(model: Any) -> dict[str, tuple[tuple[int, ...] | None, int]]:
    """Each value's static shape (None where a size is not known) and element type code, by
    ONNX's shape inference."""
    from onnx import shape_inference
    graph = shape_inference.infer_shapes(model).graph
    out: dict[str, tuple[tuple[int, ...] | None, int]] = {}
    for vi in (*graph.value_info, *graph.output, *graph.input):
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] \
            if tt.HasField("shape") else None
        out[vi.name] = (None if dims is None or None in dims else tuple(dims), int(tt.elem_type))
    return out


def _shape_arithmetic(op_type: str, ins: list[Any]) -> bool:
    """Whether a node computes on symbolic sizes only: ``Shape`` or ``Size`` of a tensor
    with symbolic dimensions, or an operator of :class:`Sizes` and constants."""
    if op_type in ("Shape", "Size"):
        return bool(ins) and has_symbolic_shape(ins[0])
    if op_type in DATA_FIRST and not (ins and is_sizes(ins[0])):
        return False  # a constant's slice, gather, reshape: the operator's, however symbolic its bounds
    return any(is_sizes(v) for v in ins) and all(v is None or is_sizes(v) or is_const(v) for v in ins)


def _inputs_behind(t: Tensor) -> set[str]:
    """The names of the graph inputs a traced tensor is computed from."""
    found: set[str] = set()
    seen: set[int] = set()
    stack = [t]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.producer is not None:
            stack.extend(v.producer[0].inputs)
        elif not v.is_concrete and v.name:
            found.add(v.name)
    return found


def _constant_if_known(v: Value) -> Value:
    """Concrete tensors as numpy arrays, and empty tensors (which hold no data) as empty
    constants, so that no kernel is built for them."""
    if isinstance(v, Tensor):
        if v.is_concrete:
            return as_numpy(v)
        if 0 in v.shape and v.dtype.numpy is not None:
            return np.zeros(tuple(int(d) for d in v.shape), dtype=v.dtype.numpy)
    return v


class _Unsupported(Exception):
    """A node no converter handles: the key its count is reported under."""


class _Converter:
    def __init__(self, onnx: Any, model: Any):
        self.onnx = onnx
        self.model = model
        self.graph = model.graph
        self.opsets = {("" if imp.domain == "ai.onnx" else imp.domain): int(imp.version)
                       for imp in model.opset_import}
        self.pool = ConstantPool()
        self.env: dict[str, Value] = {}
        self._versions: dict[tuple[str, str], int | None] = {}

    # ------------------------------------------------------------------ entry
    def run(self, input_shapes: InputShapes, constants: dict[str, Any], fallback: bool = False) -> Graph:
        """Converts every node; raises one FrontendError for all that cannot be. With
        ``fallback``, a node that cannot be converted is recorded in ``self.fell`` (node
        index -> why) and its outputs become inputs of the graph, shaped as ONNX's shape
        inference says (see :mod:`~taskloom.frontend.onnx_fallback`)."""
        self.fell: dict[int, str] = {}
        inferred = inferred_types(self.model) if fallback else {}
        from onnx import numpy_helper
        g = self.graph
        if len(g.sparse_initializer):
            raise FrontendError("sparse initializers are not supported; store them dense")
        for init in g.initializer:
            try:
                self.env[init.name] = numpy_helper.to_array(init)
            except Exception as e:
                raise FrontendError(f"initializer '{init.name}' does not hold a readable tensor of its dims "
                                    f"{list(init.dims)} ({type(e).__name__}: {e})") from e
        self._fix_inputs(constants)
        inputs = self._inputs(input_shapes)
        for t in inputs:
            self.env[t.name] = t  # type: ignore[index]
        demanded: set[str] = set()  # model inputs a converter needs as constants

        unsupported: Counter[str] = Counter()
        problems: list[str] = []
        cause: Exception | None = None  # the first fault that was not a taskloom error
        failed: set[str] = set()  # values whose producer could not be converted
        for k, node in enumerate(g.node):
            label = f"node '{node.name}' ({node.op_type})" if node.name else \
                f"node {k} ({node.op_type} -> {', '.join(repr(o) for o in node.output if o)})"
            ins: list[Value | None] = []
            blocked = False
            for name in node.input:
                if name == "":
                    ins.append(None)
                elif name in self.env:
                    ins.append(self.env[name])
                else:
                    blocked = True
                    if name not in failed:
                        problems.append(f"{label}: input '{name}' is not defined before the node")
            outs: list[Value] | None = None
            if blocked:  # its inputs failed; still list its operator if it has no converter
                missing = self._missing_converter(node)
                if missing:
                    unsupported[missing] += 1
            else:
                try:
                    outs = self._convert(node, label, ins)
                except _Unsupported as e:
                    unsupported[str(e)] += 1
                except TaskloomError as e:  # a converter's or an operator's objection
                    if isinstance(getattr(e, "needs_constant", None), Tensor):
                        demanded.update(_inputs_behind(e.needs_constant))  # type: ignore[attr-defined]
                    msg = str(e)
                    problems.append(msg if msg.startswith(label) else f"{label}: {msg}")
                except Exception as e:  # a converter's own fault on inputs it did not expect
                    cause = cause or e
                    problems.append(f"{label}: cannot be converted ({type(e).__name__}: {e}); check its "
                                    "attributes and the shapes and types of its inputs")
            if outs is None and fallback and not blocked:
                outs = self._fall_back(k, node, label, inferred, unsupported, problems)
            if outs is None:
                failed.update(o for o in node.output if o)
                continue
            for name, v in zip(node.output, outs):
                if name:
                    self.env[name] = v
        outputs = self._outputs(problems) if not unsupported and not problems else []
        if unsupported or problems:
            if demanded:
                names = ", ".join(repr(d) for d in sorted(demanded))
                problems.append(f"model input(s) {names} decide shapes or axes: fix their values with "
                                "constants={name: array}")
            err = FrontendError(self._report(unsupported, problems))
            err.constant_inputs = sorted(demanded)  # type: ignore[attr-defined]
            raise err from cause
        self.inputs = inputs
        placeholders = [v for k in self.fell for v in (self.env.get(o) for o in g.node[k].output) if isinstance(v, Tensor)]
        return Graph(inputs + placeholders, outputs)  # (with fallen-back nodes: only to read, not to compile)

    def _fall_back(self, k: int, node: Any, label: str, inferred: dict, unsupported: Counter[str],
                   problems: list[str]) -> list[Value] | None:
        """The node's outputs as graph inputs shaped by shape inference, the failure just
        recorded (the last entry of ``unsupported`` or ``problems``) taken back as its reason;
        None where an output's type or shape is not known."""
        missing = self._missing_converter(node)
        reason = "unsupported op" if missing else problems[-1].removeprefix(label + ": ")
        outs: list[Value] = []
        for name in node.output:
            shape, code = inferred.get(name, (None, None))
            if name and (shape is None or code not in ONNX_DTYPES):
                problems.append(f"{label}: cannot run it outside the compiled graph: ONNX's shape inference "
                                f"gives no static shape and type for its output '{name}'")
                return None
            outs.append(graph_input(shape, ONNX_DTYPES[code], name=name) if name else np.zeros(0))
        if missing:
            unsupported[missing] -= 1
            if unsupported[missing] == 0:
                del unsupported[missing]
        else:
            problems.pop()
        self.fell[k] = reason
        return outs

    def _fix_inputs(self, constants: dict[str, Any]) -> None:
        """Model inputs given values in ``constants`` become constants of those values."""
        declared = {vi.name: vi for vi in self.graph.input}
        for name, value in constants.items():
            vi = declared.get(name)
            if vi is None:
                raise FrontendError(f"constants names '{name}', which is not a model input "
                                    f"(inputs: {', '.join(repr(k) for k in declared)})")
            arr = np.asarray(value)
            tt = vi.type.tensor_type
            if tt.elem_type in ONNX_DTYPES and tt.elem_type != 16:
                arr = arr.astype(T.dtype(ONNX_DTYPES[tt.elem_type]).numpy)
            self.env[name] = arr

    # ------------------------------------------------------------------ inputs and outputs
    def _inputs(self, input_shapes: InputShapes) -> list[Tensor]:
        declared = [vi for vi in self.graph.input if vi.name not in self.env]
        given: dict[str, Sequence[int]] = {}
        if isinstance(input_shapes, Mapping):
            unknown = set(input_shapes) - {vi.name for vi in declared}
            if unknown:
                names = ", ".join(repr(vi.name) for vi in declared)
                raise FrontendError(f"input_shapes names {sorted(unknown)}, which are not model inputs (inputs: {names})")
            given = dict(input_shapes)
        elif input_shapes is not None:
            shapes = list(input_shapes)
            if len(shapes) != len(declared):
                raise FrontendError(f"input_shapes holds {len(shapes)} shapes but the model has {len(declared)} inputs")
            given = {vi.name: s for vi, s in zip(declared, shapes)}
        out, errors = [], []
        for vi in declared:
            where = f"model input '{vi.name}'"
            if not vi.type.HasField("tensor_type"):
                errors.append(f"{where} is not a tensor (sequences, maps and optionals are not supported)")
                continue
            tt = vi.type.tensor_type
            dims: list[int | str] | None = None
            if tt.HasField("shape"):
                dims = [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
            shape = given.get(vi.name)
            if shape is not None:
                shape = [int(s) for s in shape]
                if dims is not None and (len(dims) != len(shape) or any(
                        isinstance(d, int) and d != s for d, s in zip(dims, shape))):
                    errors.append(f"{where} has shape {dims} in the model; input_shapes gives {shape}, which "
                                  "does not fit it")
                    continue
            elif dims is None:
                errors.append(f"{where} has an unknown rank; give its static shape: "
                              f"input_shapes={{'{vi.name}': (...)}}")
                continue
            else:  # a named dimension stays a symbol of that name (one size for all inputs naming it)
                shape = [d if isinstance(d, int) else graph_symbol(_symbol_name(d, vi.name, k))
                         for k, d in enumerate(dims)]  # type: ignore[assignment]
            try:
                dt = taskloom_dtype(tt.elem_type, where)
            except FrontendError as e:
                errors.append(str(e))
                continue
            symbolic = any(not isinstance(d, int) for d in shape)
            out.append(Tensor(tuple(shape), dt, name=vi.name) if symbolic  # type: ignore[arg-type]
                       else graph_input(tuple(shape), dt, name=vi.name))
        if errors:
            raise FrontendError("cannot create the model's inputs:\n  " + "\n  ".join(errors))
        return out

    def _outputs(self, problems: list[str]) -> list[Tensor]:
        outs = []
        for vi in self.graph.output:
            v = self.env.get(vi.name)
            if v is None:
                problems.append(f"model output '{vi.name}' is not computed by any node")
                continue
            t = v if isinstance(v, Tensor) else self.pool.tensor(v, f"model output '{vi.name}'")
            tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
            if tt is not None and tt.elem_type:
                want = taskloom_dtype(tt.elem_type, f"model output '{vi.name}'")
                if want != t.dtype:
                    problems.append(f"model output '{vi.name}' came out as {t.dtype.name}, but the model "
                                    f"declares {want.name}")
            if tt is not None and tt.HasField("shape"):
                dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
                shape = shape_of(t)
                if len(dims) != len(shape) or any(d is not None and isinstance(s, int) and d != s
                                                  for d, s in zip(dims, shape)):
                    problems.append(f"model output '{vi.name}' came out with shape {shape_text(shape)}, but the model "
                                    f"declares {[d if d is not None else '?' for d in dims]}")
            outs.append(t)
        return outs

    # ------------------------------------------------------------------ one node
    def _version(self, op_type: str, domain: str) -> int | None:
        key = (op_type, domain)
        if key not in self._versions:
            opset = self.opsets.get(domain)
            version = None
            if opset is not None:
                try:
                    version = int(self.onnx.defs.get_schema(op_type, opset, domain).since_version)
                except Exception:
                    version = None
            self._versions[key] = version
        return self._versions[key]

    def _missing_converter(self, node: Any) -> str | None:
        """How the report names a node's operator when no converter handles it, else None."""
        domain = "" if node.domain == "ai.onnx" else node.domain
        version = self._version(node.op_type, domain)
        where = f"{domain}." if domain else ""
        if version is None:
            return (f"{where}{node.op_type} (not in opset {self.opsets[domain]})" if domain in self.opsets
                    else f"{where}{node.op_type} (domain not imported)")
        conv = REGISTRY.get(node.op_type) if domain == "" else None
        if conv is None or not conv.supports(version):
            return f"{where}{node.op_type} (version {version})"
        return None

    def _convert(self, node: Any, label: str, ins: list[Value | None]) -> list[Value]:
        domain = "" if node.domain == "ai.onnx" else node.domain
        version = self._version(node.op_type, domain)
        if version is not None and domain == "" and _shape_arithmetic(node.op_type, ins):
            symbolic = evaluate(node.op_type, ins, self._attrs(node, label), label)
            if symbolic is not None:
                return symbolic
        if version is not None and all(v is None or is_const(v) for v in ins) and node.op_type not in _NO_FOLD:
            folded = self._fold(node, ins, domain)
            if folded is not None:
                return folded
        missing = self._missing_converter(node)
        if missing:
            raise _Unsupported(missing)
        conv = REGISTRY[node.op_type]
        args = OnnxNode(node.op_type, label, version, ins, self._attrs(node, label), list(node.output), self.pool)
        result = conv.fn(args)
        outs = list(result) if isinstance(result, (list, tuple)) else [result]
        wanted = [k for k, name in enumerate(node.output) if name]
        if wanted and wanted[-1] >= len(outs):
            raise FrontendError(f"{label}: output {wanted[-1]} is read by the model but not supported")
        return [_constant_if_known(v) for v in outs]

    def _fold(self, node: Any, ins: list[Value | None], domain: str) -> list[Value] | None:
        """The outputs of a node whose inputs are all constants, by ONNX's reference
        implementation; None where it cannot compute them (the converter then runs)."""
        from onnx.reference import ReferenceEvaluator
        feeds = {name: as_numpy(v) for name, v in zip(node.input, ins) if name}
        try:
            evaluator = ReferenceEvaluator(node, opsets={domain: self.opsets[domain]})
            with np.errstate(all="ignore"):  # log(0) = -inf and the like are results, not faults
                outs = evaluator.run(None, feeds)
        except Exception:
            return None
        result: list[Value] = []
        for o in outs:
            arr = np.asarray(o)
            if arr.dtype == object:
                return None
            result.append(arr)
        return result

    def _attrs(self, node: Any, label: str) -> dict[str, Any]:
        from onnx import AttributeProto, helper, numpy_helper
        out: dict[str, Any] = {}
        for a in node.attribute:
            if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                raise FrontendError(f"{label}: attribute '{a.name}' holds a subgraph; control flow "
                                    "(If, Loop, Scan) is not supported")
            if a.type == AttributeProto.UNDEFINED:
                raise FrontendError(f"{label}: attribute '{a.name}' has no type (a malformed attribute)")
            v = helper.get_attribute_value(a)
            if a.type == AttributeProto.TENSOR:
                v = numpy_helper.to_array(v)
            elif a.type == AttributeProto.TENSORS:
                v = [numpy_helper.to_array(t) for t in v]
            elif a.type == AttributeProto.STRING:
                v = v.decode()
            elif a.type == AttributeProto.STRINGS:
                v = [s.decode() for s in v]
            elif a.type == AttributeProto.SPARSE_TENSOR:
                v = None
            out[a.name] = v
        return out

    # ------------------------------------------------------------------ the report
    def _report(self, unsupported: Counter[str], problems: list[str]) -> str:
        name = self.graph.name or "unnamed"
        lines = [f"cannot convert the ONNX model (graph '{name}'):"]
        if unsupported:
            listed = ", ".join(f"{op} x{count}" for op, count in sorted(unsupported.items()))
            lines.append(f"  {len(unsupported)} operator type(s) without a converter: {listed}")
            lines.append("  (supported: " + ", ".join(sorted(REGISTRY)) + "; add one with "
                         "taskloom.frontend.onnx.converter)")
        lines += [f"  {p}" for p in problems]
        return "\n".join(lines)

