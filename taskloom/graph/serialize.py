"""Graphs to files and back: ``save_graph(graph, path)`` and ``load_graph(path)``.

    save_graph(graph, "model.tlg")      # the nodes' compute definitions as JSON, constants as arrays
    graph = load_graph("model.tlg")     # an equal graph: same nodes, same tasks, same constants
    taskloom.compile(graph)

The file is a numpy ``.npz`` archive: ``graph.json`` (inputs, nodes with their op and task,
outputs; every IR node written once and referred to by number) and one array per constant.
It holds no code and no pickles, so loading one is safe whatever its source.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
from typing import Any

import numpy as np

from taskloom.errors import ArgumentError, LoadError
from taskloom.graph.graph import Graph, Node, record_outputs
from taskloom.graph.tensor import Tensor
from taskloom.ir import compute as C
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E

FORMAT, VERSION = "taskloom-graph", 1
#: The IR classes a task may hold, by name: what the decoder is allowed to build.
_CLASSES: dict[str, type] = {
    **{c.__name__: c for c in vars(E).values() if isinstance(c, type) and issubclass(c, E.Expr)},
    **{c.__name__: c for c in (C.TensorInput, C.GridCompute, C.ReduceCompute)},
    **{c.__name__: c for c in (T.VectorType, T.PointerType, T.TensorType)},
}


class _Encoder:
    """IR values to JSON values; each IR node once, in ``table``, referred to as ``{"n": k}``."""

    def __init__(self) -> None:
        self.table: list[Any] = []
        self.index: dict[int, int] = {}
        self.keep: list[Any] = []  # the encoded objects stay alive, so their ids stay unique

    def __call__(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (int, np.integer)):
            return int(v)
        if isinstance(v, (float, np.floating)):
            return {"f": repr(float(v))}  # repr keeps inf, nan and every bit of the value
        if isinstance(v, (tuple, list)):
            return {"t": [self(x) for x in v]}
        if isinstance(v, T.DataType):
            return {"dtype": v.name}
        if isinstance(v, C.Task):
            return {"task": [self(v.name), self(v.inputs), self(v.outputs), self(v.attrs)]}
        if type(v).__name__ in _CLASSES and dataclasses.is_dataclass(v):
            k = self.index.get(id(v))
            if k is None:
                fields = {f.name: self(getattr(v, f.name)) for f in dataclasses.fields(v) if f.init}
                k = self.index[id(v)] = len(self.table)
                self.table.append({"k": type(v).__name__, "f": fields})
                self.keep.append(v)
            return {"n": k}
        raise TypeError(f"cannot serialize {type(v).__name__} {v!r}")


class _Decoder:
    def __init__(self, table: list[Any]):
        self.table = table
        self.built: dict[int, Any] = {}

    def __call__(self, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        if "f" in v and len(v) == 1:
            return float(v["f"])
        if "t" in v:
            return tuple(self(x) for x in v["t"])
        if "dtype" in v:
            return T.dtype(v["dtype"])
        if "task" in v:
            name, inputs, outputs, attrs = (self(x) for x in v["task"])
            return C.Task(name, inputs, outputs, attrs)
        if "n" in v:
            k = v["n"]
            if k not in self.built:
                entry = self.table[k]
                cls = _CLASSES.get(entry["k"])
                if cls is None:
                    raise LoadError(f"graph file: unknown IR node kind {entry['k']!r}")
                self.built[k] = cls(**{name: self(x) for name, x in entry["f"].items()})
            return self.built[k]
        raise LoadError(f"graph file: unreadable value {v!r}")


def save_graph(graph: Graph, path: str | os.PathLike) -> None:
    """Writes ``graph`` (inputs, nodes, outputs, constants) to ``path`` (see the module doc)."""
    enc = _Encoder()
    ids: dict[int, int] = {}

    def tensor_ref(t: Tensor) -> int:
        return ids[id(t)]

    doc: dict[str, Any] = {"format": FORMAT, "version": VERSION, "inputs": [], "constants": [], "nodes": []}
    for t in graph.inputs:
        ids[id(t)] = len(ids)
        doc["inputs"].append({"name": t.name, "dtype": t.dtype.name, "shape": enc(t.shape)})
    for t in graph.constants:
        ids[id(t)] = len(ids)
        doc["constants"].append({"name": t.name, "dtype": t.dtype.name})
    for n in graph.nodes:
        entry = {"op": n.op, "task": enc(n.task), "inputs": [tensor_ref(t) for t in n.inputs], "outputs": []}
        for o in n.outputs:
            ids[id(o)] = len(ids)
            entry["outputs"].append(ids[id(o)])
        doc["nodes"].append(entry)
    doc["outputs"] = [tensor_ref(t) for t in graph.outputs]
    doc["ir"] = enc.table
    for c in graph.constants:
        if c.dtype.numpy is None:
            raise ArgumentError(f"save_graph(): constant '{c.name}' is {c.dtype.name}, which has no numpy "
                                "array to store it in; convert it to float32 first")
    arrays = {f"constant{k}": np.ascontiguousarray(c.numpy()) for k, c in enumerate(graph.constants)}
    buf = io.BytesIO()
    np.savez(buf, graph_json=np.frombuffer(json.dumps(doc).encode(), np.uint8), **arrays)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def load_graph(path: str | os.PathLike) -> Graph:
    """The graph saved at ``path`` by :func:`save_graph`; a :class:`LoadError` names what is wrong
    with a file that is not one."""
    try:
        with np.load(path, allow_pickle=False) as z:
            doc = json.loads(bytes(z["graph_json"]).decode())
            arrays = {k: z[k] for k in z.files if k != "graph_json"}
    except (OSError, ValueError, KeyError) as e:
        raise LoadError(f"{path} is not a taskloom graph file: {e}") from None
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise LoadError(f"{path}: format {doc.get('format')!r} version {doc.get('version')!r}; this taskloom "
                        f"reads {FORMAT!r} version {VERSION}")
    dec = _Decoder(doc["ir"])
    tensors: list[Tensor] = []
    inputs = []
    for spec in doc["inputs"]:
        t = Tensor(dec(spec["shape"]), T.dtype(spec["dtype"]), name=spec["name"])
        tensors.append(t)
        inputs.append(t)
    for k, spec in enumerate(doc["constants"]):
        data = arrays[f"constant{k}"]
        tensors.append(Tensor(data.shape, T.dtype(spec["dtype"]), data=data, name=spec["name"]))
    by_index = dict(enumerate(tensors))
    for entry in doc["nodes"]:
        task = dec(entry["task"])
        node = Node(entry["op"], task, [by_index[i] for i in entry["inputs"]])
        for i, t in zip(entry["outputs"], record_outputs(node)):
            by_index[i] = t
    return Graph(inputs, [by_index[i] for i in doc["outputs"]])
