"""Mutation fuzzing of the ONNX frontend (run by ``test_onnx_fuzz.py``).

A mutant is one of a few small valid models (:data:`SEEDS`) with one to three random
changes (:data:`MUTATIONS`: attributes, input dims, initializers, operator types, inputs,
edges, the opset) and, now and then, its serialized bytes truncated or flipped. Mutant
``i`` of seed ``s`` is always the same model (:func:`mutant`), so any finding is replayed by
its number.

Each mutant goes through ``taskloom.onnx.from_onnx`` and, where it compiles, runs on
random inputs next to onnxruntime. Its outcome is one of :data:`OUTCOMES`:

- ``match``: taskloom compiled it and agrees with onnxruntime (or, where infinities or NaNs
  are in play, with onnx's reference implementation: onnxruntime's convolution skips the
  padding, so ``inf * 0`` there is no NaN for it);
- ``taskloom_error``: taskloom raised a TaskloomError (while converting, compiling or
  running); ``refused_ort_runs`` counts those onnxruntime runs, for information;
- ``accepted_ort_refused``: taskloom compiled and ran it, onnxruntime refused it. Allowed
  when taskloom's outputs are what the model declares (dtype, and shape where declared) and
  what onnx's reference implementation computes: ONNX's checker and strict shape inference
  passed the model, so what onnxruntime objects to is a limit of its own (a reflect pad
  wider than the axis, which numpy mirrors again; a per-channel parameter given as a
  scalar, which broadcasts). Otherwise, and where the reference fails too (an index out
  of range, say), it is a mismatch: taskloom should have refused it;
- failures: ``other_exception`` (anything but a TaskloomError from taskloom),
  ``mismatch`` (outputs differ from onnxruntime's), and, seen by the parent process,
  ``crash`` (the worker died: a signal) and ``hang`` (no answer within the time limit).

:func:`run_fuzz` runs a batch in a worker process (``python -m tests.frontend.onnx_fuzz``),
so that a crash or a hang is recorded and the batch goes on after it.
"""
from __future__ import annotations

import json
import os
import random
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUTCOMES = ("match", "taskloom_error", "accepted_ort_refused", "other_exception", "mismatch", "crash", "hang")
FAILURES = ("other_exception", "mismatch", "crash", "hang")

# ----------------------------------------------------------------------------- seed models


def _f32(name: str, shape: list[int]) -> Any:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _init(name: str, arr: Any) -> Any:
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes: list, inputs: list, outputs: list, inits: list, opset: int = 17) -> onnx.ModelProto:
    for k, n in enumerate(nodes):
        n.name = n.name or f"n{k}_{n.op_type}"
    graph = helper.make_graph(nodes, "seed", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def seed_mlp() -> onnx.ModelProto:
    """Gemm, Relu, MatMul, Add, Relu."""
    r = np.random.default_rng(1)
    nodes = [helper.make_node("Gemm", ["x", "w1", "c1"], ["h"], transB=1, alpha=1.0, beta=1.0),
             helper.make_node("Relu", ["h"], ["hr"]),
             helper.make_node("MatMul", ["hr", "w2"], ["m"]),
             helper.make_node("Add", ["m", "b2"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    inits = [_init("w1", _rand(r, 5, 4)), _init("c1", _rand(r, 5)), _init("w2", _rand(r, 5, 3)),
             _init("b2", _rand(r, 3))]
    return _model(nodes, [_f32("x", [2, 4])], [_f32("y", [2, 3])], inits)


def seed_conv() -> onnx.ModelProto:
    """Conv, BatchNormalization, Relu, MaxPool."""
    r = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=[1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"], epsilon=1e-5),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    inits = [_init("w", _rand(r, 3, 2, 3, 3)), _init("b", _rand(r, 3)), _init("scale", r.uniform(0.5, 1.5, 3)
                                                                              .astype(np.float32)),
             _init("bias", _rand(r, 3)), _init("mean", _rand(r, 3)),
             _init("var", r.uniform(0.5, 2.0, 3).astype(np.float32))]
    return _model(nodes, [_f32("x", [1, 2, 5, 5])], [_f32("y", [1, 3, 2, 2])], inits)


def seed_shapes() -> onnx.ModelProto:
    """Reshape, Transpose, Concat, Gather."""
    r = np.random.default_rng(3)
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
             helper.make_node("Concat", ["t", "k"], ["c"], axis=1),
             helper.make_node("Gather", ["c", "idx"], ["y"], axis=0)]
    inits = [_init("shape", np.array([6, 4], np.int64)), _init("k", _rand(r, 4, 2)),
             _init("idx", np.array([[0, 3], [1, 2]], np.int64))]
    return _model(nodes, [_f32("x", [2, 3, 4])], [_f32("y", [2, 2, 8])], inits)


def seed_norm() -> onnx.ModelProto:
    """Softmax, LayerNormalization, ReduceMean, Sub."""
    r = np.random.default_rng(4)
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("ReduceMean", ["n"], ["m"], axes=[1], keepdims=1),
             helper.make_node("Sub", ["n", "m"], ["y"])]
    inits = [_init("g", _rand(r, 8)), _init("b", _rand(r, 8))]
    return _model(nodes, [_f32("x", [2, 3, 8])], [_f32("y", [2, 3, 8])], inits)


def seed_slice_pad() -> onnx.ModelProto:
    """Slice, Pad, Unsqueeze, Flatten."""
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"]),
             helper.make_node("Pad", ["s", "pads", "value"], ["p"], mode="constant"),
             helper.make_node("Unsqueeze", ["p", "uaxes"], ["u"]),
             helper.make_node("Flatten", ["u"], ["y"], axis=2)]
    inits = [_init("starts", np.array([1], np.int64)), _init("ends", np.array([5], np.int64)),
             _init("axes", np.array([2], np.int64)), _init("steps", np.array([2], np.int64)),
             _init("pads", np.array([0, 1, 0, 0, 1, 2], np.int64)), _init("value", np.array(0.5, np.float32)),
             _init("uaxes", np.array([0], np.int64))]
    return _model(nodes, [_f32("x", [2, 3, 6])], [_f32("y", [2, 20])], inits)


def seed_embed() -> onnx.ModelProto:
    """Gather of a table by indices the model takes, ReduceSum, Mul."""
    r = np.random.default_rng(5)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
             helper.make_node("ReduceSum", ["e", "raxes"], ["s"], keepdims=0),
             helper.make_node("Mul", ["s", "k"], ["y"])]
    inits = [_init("table", _rand(r, 5, 4)), _init("raxes", np.array([1], np.int64)), _init("k", _rand(r, 4))]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])
    return _model(nodes, [ids], [_f32("y", [2, 4])], inits, opset=13)


def seed_scatter() -> onnx.ModelProto:
    """ScatterElements at indices the model takes (duplicates add up), then GatherND."""
    r = np.random.default_rng(6)
    nodes = [helper.make_node("ScatterElements", ["x", "ids", "upd"], ["s"], axis=0, reduction="add"),
             helper.make_node("GatherND", ["s", "coords"], ["y"])]
    inits = [_init("upd", _rand(r, 2, 3)), _init("coords", np.array([[3, 0], [1, -1], [0, 2]], np.int64))]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])
    return _model(nodes, [_f32("x", [4, 3]), ids], [_f32("y", [3])], inits, opset=16)


SEEDS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mlp": seed_mlp, "conv": seed_conv, "shapes": seed_shapes, "norm": seed_norm, "slice_pad": seed_slice_pad,
    "embed": seed_embed, "scatter": seed_scatter}

# ----------------------------------------------------------------------------- mutations

UNARY = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Softmax", "Identity", "Sqrt", "Log", "Floor", "Erf",
         "LeakyRelu", "HardSwish", "Softplus", "Sign", "Reciprocal", "Flatten", "Transpose", "GlobalAveragePool"]
BINARY = ["Add", "Sub", "Mul", "Div", "MatMul", "Max", "Min", "Pow", "PRelu", "Equal", "Reshape", "Gather",
          "Expand", "Tile", "Unsqueeze", "Squeeze", "ReduceSum", "GatherND"]
OTHER = ["Conv", "MaxPool", "AveragePool", "Gemm", "Concat", "Slice", "Pad", "LayerNormalization",
         "BatchNormalization", "InstanceNormalization", "Split", "Where", "Clip", "Cast", "Shape", "ReduceMean",
         "ReduceMax", "ArgMax", "Trilu", "CumSum", "Hardmax", "Einsum", "ScatterElements", "ScatterND"]
EXTRA_ATTRS: dict[str, list[tuple[str, Any]]] = {
    "Gemm": [("transA", 1), ("transB", 0), ("alpha", 0.5), ("beta", 2.0), ("beta", 0.0)],
    "Conv": [("group", 2), ("dilations", [2, 2]), ("auto_pad", "SAME_UPPER"), ("auto_pad", "VALID"),
             ("strides", [2, 1]), ("pads", [0, 1, 2, 0]), ("kernel_shape", [2, 3])],
    "MaxPool": [("ceil_mode", 1), ("pads", [1, 1, 0, 0]), ("dilations", [2, 1]), ("auto_pad", "SAME_LOWER"),
                ("storage_order", 1), ("strides", [1, 2])],
    "AveragePool": [("count_include_pad", 1), ("ceil_mode", 1), ("pads", [1, 0, 1, 0])],
    "Softmax": [("axis", 0), ("axis", 1), ("axis", -2)],
    "LayerNormalization": [("axis", 1), ("axis", 0), ("epsilon", 0.1), ("stash_type", 10)],
    "BatchNormalization": [("epsilon", 0.5), ("momentum", 0.1), ("training_mode", 1)],
    "Gather": [("axis", 1), ("axis", -1), ("axis", 2)],
    "Concat": [("axis", 0), ("axis", -1)],
    "Transpose": [("perm", [0, 2, 1]), ("perm", [1, 0]), ("perm", [0, 0])],
    "Pad": [("mode", "reflect"), ("mode", "edge"), ("mode", "wrap")],
    "Reshape": [("allowzero", 1)],
    "Flatten": [("axis", 0), ("axis", -1), ("axis", 3)],
    "ReduceMean": [("keepdims", 0), ("axes", [0, 2]), ("axes", [-1])],
    "LeakyRelu": [("alpha", 0.3)],
    "Relu": [("alpha", 1.0)],
}
STRINGS = {"auto_pad": [b"NOTSET", b"SAME_UPPER", b"SAME_LOWER", b"VALID", b"bogus"],
           "mode": [b"constant", b"reflect", b"edge", b"wrap", b"bogus"]}


def _values(g: Any) -> list[str]:
    """Every value name a node may read: graph inputs, initializers, node outputs."""
    return [v.name for v in g.input] + [t.name for t in g.initializer] + [o for n in g.node for o in n.output if o]


def mutate_attribute(rng: random.Random, m: onnx.ModelProto) -> str | None:
    """Change an attribute's value: ints moved or dropped, floats and strings replaced."""
    nodes = [n for n in m.graph.node if n.attribute]
    if not nodes:
        return None
    n = rng.choice(nodes)
    a = rng.choice(list(n.attribute))
    if a.type == onnx.AttributeProto.INT:
        a.i = rng.choice([-2, -1, 0, 1, 2, 3, 4])
    elif a.type == onnx.AttributeProto.INTS:
        ints = list(a.ints)
        how = rng.randrange(4)
        if how == 0 and ints:
            ints[rng.randrange(len(ints))] = rng.randint(-2, 4)
        elif how == 1 and ints:
            del ints[rng.randrange(len(ints))]
        elif how == 2:
            ints.append(rng.randint(-1, 3))
        else:
            rng.shuffle(ints)
        del a.ints[:]
        a.ints.extend(ints)
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = rng.choice([0.0, -1.0, 1e-3, 0.5, 2.0, 1e6])
    elif a.type == onnx.AttributeProto.STRING:
        a.s = rng.choice(STRINGS.get(a.name, [b"", b"bogus"]))
    else:
        return None
    return f"attribute {n.name}.{a.name} = {helper.get_attribute_value(a)!r}"


def add_attribute(rng: random.Random, m: onnx.ModelProto) -> str | None:
    """Set an attribute the node's operator knows (or one it does not) to another value."""
    nodes = [n for n in m.graph.node if n.op_type in EXTRA_ATTRS]
    if not nodes:
        return None
    n = rng.choice(nodes)
    name, value = rng.choice(EXTRA_ATTRS[n.op_type])
    kept = [a for a in n.attribute if a.name != name]
    del n.attribute[:]
    n.attribute.extend(kept + [helper.make_attribute(name, value)])
    return f"attribute {n.name}.{name} set to {value!r}"


def drop_attribute(rng: random.Random, m: onnx.ModelProto) -> str | None:
    nodes = [n for n in m.graph.node if n.attribute]
    if not nodes:
        return None
    n = rng.choice(nodes)
    k = rng.randrange(len(n.attribute))
    name = n.attribute[k].name
    del n.attribute[k]
    return f"attribute {n.name}.{name} removed"


def mutate_input_dims(rng: random.Random, m: onnx.ModelProto) -> str | None:
    """Change a dim of a model input, its rank, or its element type."""
    vi = rng.choice(list(m.graph.input))
    tt = vi.type.tensor_type
    dims = tt.shape.dim
    how = rng.randrange(5)
    if how <= 1 and len(dims):
        d = dims[rng.randrange(len(dims))]
        d.dim_value = rng.choice([1, 2, 3, 4, 5, 6, 0]) if how == 0 else max(1, d.dim_value + rng.choice([-1, 1]))
    elif how == 2:
        tt.shape.dim.add().dim_value = rng.randint(1, 3)
    elif how == 3 and len(dims) > 1:
        del tt.shape.dim[rng.randrange(len(dims))]
    else:
        tt.elem_type = rng.choice([TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.INT32,
                                   TensorProto.BOOL])
    return f"input {vi.name}: {helper.printable_value_info(vi)}"


def relax_outputs(rng: random.Random, m: onnx.ModelProto) -> str | None:
    """Forget the declared shape of the outputs (inference finds it), so that mutants whose
    shapes change are not all refused for disagreeing with the declaration."""
    for vi in m.graph.output:
        vi.type.tensor_type.ClearField("shape")
    return "output shapes cleared"


def _int_values(rng: random.Random, shape: tuple[int, ...]) -> np.ndarray:
    return np.array([rng.randint(-2, 4) for _ in range(int(np.prod(shape)))], np.int64).reshape(shape)


def mutate_initializer(rng: random.Random, m: onnx.ModelProto) -> str | None:
    """Change an initializer's values, shape or element type."""
    inits = list(m.graph.initializer)
    k = rng.randrange(len(inits))
    init = inits[k]
    arr = numpy_helper.to_array(init)
    how = rng.randrange(3)
    if how == 0:  # values
        arr = arr.copy()
        flat = arr.reshape(-1)
        if flat.size:
            j = rng.randrange(flat.size)
            if arr.dtype.kind in "iu":
                flat[j] = rng.choice([-7, -3, -1, 0, 1, 2, 3, 5, 7])
            elif arr.dtype.kind == "f":
                flat[j] = rng.choice([0.0, -1.0, 1e3, float("nan"), float("inf")])
    elif how == 1:  # shape
        shape = list(arr.shape)
        choice = rng.randrange(3)
        if choice == 0 and shape:
            j = rng.randrange(len(shape))
            shape[j] = max(0, shape[j] + rng.choice([-1, 1]))
        elif choice == 1:
            shape.insert(rng.randint(0, len(shape)), rng.choice([1, 2]))
        elif shape:
            shape.pop(rng.randrange(len(shape)))
        shape_t = tuple(shape)
        arr = _int_values(rng, shape_t).astype(arr.dtype) if arr.dtype.kind in "iu" else \
            np.asarray(np.random.default_rng(rng.randrange(1 << 30)).standard_normal(shape_t)).astype(arr.dtype)
    else:  # element type
        dtype = rng.choice([np.float64, np.float16, np.float32, np.int64, np.int32, np.bool_])
        arr = arr.astype(dtype)
    m.graph.initializer[k].CopyFrom(numpy_helper.from_array(np.asarray(arr), init.name))
    return f"initializer {init.name}: {arr.dtype} {list(arr.shape)} {arr.reshape(-1)[:8].tolist()}"


def swap_op_type(rng: random.Random, m: onnx.ModelProto) -> str | None:
    """Give a node another operator type, mostly one of the same arity."""
    n = rng.choice(list(m.graph.node))
    pool = UNARY if len(n.input) == 1 else BINARY if len(n.input) == 2 else OTHER
    new = rng.choice(pool if rng.random() < 0.7 else UNARY + BINARY + OTHER)
    old, n.op_type = n.op_type, new
    if rng.random() < 0.5:
        del n.attribute[:]
    return f"node {n.name}: {old} -> {new} (attributes {'kept' if len(n.attribute) else 'none'})"


def mutate_node_inputs(rng: random.Random, m: onnx.ModelProto) -> str | None:
    """Drop, duplicate or swap inputs of a node."""
    n = rng.choice(list(m.graph.node))
    ins = list(n.input)
    how = rng.randrange(3)
    if how == 0 and ins:
        del ins[rng.randrange(len(ins))]
    elif how == 1 and ins:
        ins.insert(rng.randrange(len(ins) + 1), rng.choice(ins))
    elif len(ins) >= 2:
        i, j = rng.sample(range(len(ins)), 2)
        ins[i], ins[j] = ins[j], ins[i]
    else:
        return None
    del n.input[:]
    n.input.extend(ins)
    return f"node {n.name} inputs -> {ins}"


def rename_edge(rng: random.Random, m: onnx.ModelProto) -> str | None:
    """Rename a node's output (its readers lose it) or point an input at another value."""
    n = rng.choice(list(m.graph.node))
    if rng.random() < 0.4 or not n.input:
        k = rng.randrange(len(n.output))
        old = n.output[k]
        n.output[k] = f"{old}_renamed"
        return f"node {n.name} output {old} -> {old}_renamed"
    k = rng.randrange(len(n.input))
    old = n.input[k]
    n.input[k] = rng.choice(_values(m.graph))
    return f"node {n.name} input {old} -> {n.input[k]}"


def change_opset(rng: random.Random, m: onnx.ModelProto) -> str | None:
    version = rng.choice([7, 9, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21])
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = version
    return f"opset {version}"


MUTATIONS: list[Callable[[random.Random, onnx.ModelProto], str | None]] = [
    mutate_attribute, add_attribute, drop_attribute, mutate_input_dims, mutate_initializer, swap_op_type,
    mutate_node_inputs, rename_edge, change_opset]


def mutate_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """The serialized model truncated, or with a few bytes flipped."""
    if rng.random() < 0.5:
        cut = rng.randrange(len(data))
        return data[:cut], f"truncated to {cut} of {len(data)} bytes"
    buf = bytearray(data)
    spots = [rng.randrange(len(buf)) for _ in range(rng.randint(1, 4))]
    for j in spots:
        buf[j] ^= rng.randint(1, 255)
    return bytes(buf), f"bytes flipped at {spots}"


def mutant(seed: int, i: int) -> tuple[str, list[str], bytes]:
    """Mutant ``i`` of fuzzing seed ``seed``: (seed model, the mutations, serialized model)."""
    rng = random.Random(f"{seed}:{i}")
    name = rng.choice(sorted(SEEDS))
    model = SEEDS[name]()
    done: list[str] = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        for _attempt in range(5):
            what = rng.choice(MUTATIONS)(rng, model)
            if what:
                done.append(what)
                break
    if rng.random() < 0.6:
        done.append(relax_outputs(rng, model) or "")
    data = model.SerializeToString()
    if rng.random() < 0.12:
        data, what = mutate_bytes(rng, data)
        done.append(what)
    return name, done, data

# ----------------------------------------------------------------------------- one mutant


def _inputs(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray] | None:
    """Random values for the model's inputs, or None where one has no static shape."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            return None
        shape = tuple(d.dim_value for d in tt.shape.dim)
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dtype.kind == "f":
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[vi.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            feeds[vi.name] = rng.integers(0, 3, shape).astype(dtype)
    return feeds


def _ort(data: bytes, feeds: dict[str, np.ndarray] | None) -> list[np.ndarray] | str:
    """onnxruntime's outputs, or why it refused."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        if feeds is None:
            return "inputs without static shapes"
        return [np.asarray(o) for o in session.run(None, feeds)]
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:200]}"


def _close(got: np.ndarray, want: np.ndarray) -> str | None:
    """Why ``got`` differs from onnxruntime's ``want``, or None."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape} {got.dtype} != onnxruntime's {want.shape} {want.dtype}"
    if want.dtype.kind != "f":
        return None if np.array_equal(got, want) else "values differ"
    rtol = 1e-2 if want.dtype == np.float16 else 1e-3
    finite = want[np.isfinite(want)]
    scale = max(1.0, float(np.abs(finite).max())) if finite.size else 1.0
    if np.allclose(got, want, rtol=rtol, atol=rtol * 0.1 * scale, equal_nan=True):
        return None
    return f"values differ: max |diff| {float(np.nanmax(np.abs(got.astype(np.float64) - want))):.3g}"


def _declared(model: onnx.ModelProto, outs: list[np.ndarray]) -> str | None:
    """Why outputs are not what the model declares (dtype; shape where declared), or None."""
    for vi, o in zip(model.graph.output, outs):
        tt = vi.type.tensor_type
        if tt.elem_type and helper.tensor_dtype_to_np_dtype(tt.elem_type) != o.dtype:
            return f"output {vi.name} is {o.dtype}, declared {helper.tensor_dtype_to_np_dtype(tt.elem_type)}"
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            if len(dims) != o.ndim or any(d is not None and d != s for d, s in zip(dims, o.shape)):
                return f"output {vi.name} has shape {o.shape}, declared {dims}"
    return None


def check_mutant(seed: int, i: int, stage: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The outcome of mutant ``i``: {"i", "seed_model", "mutations", "outcome", "detail"}."""
    from taskloom.errors import TaskloomError
    from taskloom.onnx import from_onnx
    name, mutations, data = mutant(seed, i)
    result: dict[str, Any] = {"i": i, "seed_model": name, "mutations": mutations}

    def done(outcome: str, detail: str = "", **extra: Any) -> dict[str, Any]:
        return {**result, "outcome": outcome, "detail": detail, **extra}
    try:
        model = onnx.load_from_string(data)
        feeds = _inputs(model, i)
    except Exception:
        model, feeds = None, None
    stage("taskloom")
    target = os.environ.get("ONNX_FUZZ_TARGET")  # "cuda:sm_90": the CUDA path, in the SIMT emulator
    try:
        compiled = from_onnx(data, target=target, device="emulator" if target and target.startswith("cuda") else None)
        outs = None
        if feeds is not None:
            got = compiled(*feeds.values())
            outs = [np.asarray(o) for o in (got if isinstance(got, (list, tuple)) else [got])]
    except TaskloomError as e:
        stage("onnxruntime")
        ort_runs = not isinstance(_ort(data, feeds), str)
        return done("taskloom_error", f"{type(e).__name__}: {str(e)[:300]}", refused_ort_runs=ort_runs)
    except Exception as e:
        return done("other_exception", "".join(traceback.format_exception(e))[-3000:])
    stage("onnxruntime")
    want = _ort(data, feeds)
    if outs is None:
        return done("taskloom_error", "compiled, but the inputs have no static shapes to run it on")
    if isinstance(want, str):
        why = _declared(model, outs) if model is not None else "not a model onnx can read"
        reference = _reference(model, feeds) if why is None else why
        if isinstance(reference, str):
            return done("mismatch", f"onnxruntime refuses it ({want}); so does onnx's reference ({reference})")
        why = _differs(outs, reference)
        return done("mismatch" if why else "accepted_ort_refused", why or want)
    why = _differs(outs, want)
    if why and _non_finite(outs + want):  # inf * 0 in padding: onnxruntime skips it, the reference does not
        reference = _reference(model, feeds)
        if not isinstance(reference, str) and _differs(outs, reference) is None:
            return done("match", f"as onnx's reference computes it; onnxruntime differs: {why}")
    return done("mismatch", why) if why else done("match")


def _non_finite(arrays: list[np.ndarray]) -> bool:
    return any(a.dtype.kind == "f" and not np.isfinite(a).all() for a in arrays)


def _differs(outs: list[np.ndarray], want: list[np.ndarray]) -> str | None:
    if len(want) != len(outs):
        return f"{len(outs)} outputs, the reference gives {len(want)}"
    for k, (g, w) in enumerate(zip(outs, want)):
        why = _close(g, w)
        if why:
            return f"output {k}: {why}"
    return None


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | str:
    """The outputs of onnx's reference implementation (numpy), or why it failed."""
    from onnx.reference import ReferenceEvaluator
    try:
        with np.errstate(all="ignore"):
            return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:200]}"

# ----------------------------------------------------------------------------- batches


@dataclass
class Report:
    """The outcomes of a batch: every result, and the counts by outcome."""

    results: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in OUTCOMES}
        for r in self.results:
            out[r["outcome"]] += 1
        out["refused_ort_runs"] = sum(bool(r.get("refused_ort_runs")) for r in self.results)
        return out

    def failures(self) -> list[dict[str, Any]]:
        return [r for r in self.results if r["outcome"] in FAILURES]


def _worker(seed: int, start: int, stop: int) -> None:
    """Run mutants ``start..stop-1``, one JSON line per event on stdout. ``ONNX_FUZZ_FAULTS``
    (``"3:crash,5:hang"``) makes the worker fail on purpose, to test the harness;
    ``ONNX_FUZZ_TARGET`` (``"cuda:sm_90"``) compiles for that target (CUDA ones run in the
    emulator)."""
    import warnings
    warnings.simplefilter("ignore")
    channel = os.fdopen(os.dup(1), "w")  # the events; whatever else writes to stdout goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def say(obj: dict[str, Any]) -> None:
        channel.write(json.dumps(obj) + "\n")
        channel.flush()
    faults = dict(f.split(":") for f in os.environ.get("ONNX_FUZZ_FAULTS", "").split(",") if f)
    for i in range(start, stop):
        say({"event": "start", "i": i})
        if faults.get(str(i)) == "crash":  # (the harness's own test: a worker that dies)
            os.kill(os.getpid(), signal.SIGSEGV)
        if faults.get(str(i)) == "hang":
            time.sleep(3600)
        result = check_mutant(seed, i, lambda s, i=i: say({"event": "stage", "i": i, "stage": s}))
        say({"event": "result", **result})


def run_fuzz(seed: int, count: int, timeout_s: float = 120.0, start: int = 0) -> Report:
    """Mutants ``start..start+count-1`` checked in a worker process; a worker that dies or
    stops answering is recorded as a crash or a hang of the mutant it was on, and a new
    worker goes on with the next one."""
    report = Report()
    i, stop = start, start + count
    while i < stop:
        i = _run_worker(seed, i, stop, timeout_s, report)
    return report


def _run_worker(seed: int, start: int, stop: int, timeout_s: float, report: Report) -> int:
    """One worker from ``start``; returns where the next one starts."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "tests.frontend.onnx_fuzz", str(seed), str(start), str(stop)],
                                cwd=root, stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        current, stage = start, "start"
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    os.killpg(proc.pid, signal.SIGKILL)
                    report.results.append(_lost(seed, current, "hang", f"no answer in {timeout_s:.0f} s "
                                                                      f"(stage {stage})"))
                    return current + 1
                line = proc.stdout.readline()  # type: ignore[union-attr]
                if not line:
                    break
                if not line.startswith(b"{"):
                    continue
                event = json.loads(line)
                current, deadline = event["i"], time.monotonic() + timeout_s
                if event["event"] == "stage":
                    stage = event["stage"]
                elif event["event"] == "result":
                    event.pop("event")
                    report.results.append(event)
                    current = event["i"] + 1
        finally:
            sel.close()
            proc.stdout.close()  # type: ignore[union-attr]
            code = proc.wait()
        if current >= stop:
            return stop
        err.seek(0)
        tail = err.read().decode(errors="replace")[-1500:]
        report.results.append(_lost(seed, current, "crash", f"worker exited with {code} (stage {stage}): {tail}"))
        return current + 1


def _lost(seed: int, i: int, outcome: str, detail: str) -> dict[str, Any]:
    name, mutations, _ = mutant(seed, i)
    return {"i": i, "seed_model": name, "mutations": mutations, "outcome": outcome, "detail": detail}


def describe(report: Report) -> str:
    """The counts and every failure, each with what replays it."""
    lines = [f"outcomes: {report.counts()}"]
    for r in report.failures():
        lines.append(f"- mutant {r['i']} ({r['seed_model']}: {'; '.join(r['mutations'])}): {r['outcome']}: "
                     f"{r['detail']}")
    return "\n".join(lines)


if __name__ == "__main__":
    _worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
