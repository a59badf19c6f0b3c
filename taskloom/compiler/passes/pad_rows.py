"""Row padding for the GPU's matmul template: a factor whose rows do not start on 16 bytes is
read through a copy whose rows do.

The tensor-core template fills its shared tiles by ``cp.async`` in 16-byte pieces, which
needs every row of a factor to start 16-byte aligned: a row length that is a multiple of 8
float16 (4 float32) elements. A factor with any other row length (2039 columns, a
vocabulary of 50257) would be read element by element, in 2-byte synchronous loads, at a
fraction of the speed (see ``bench/results/2026-11-27-h100-first-run.md``). This pass rewrites
such a factor ``x`` of a ``matmul``, ``batch_matmul`` or ``linear`` as

    slice(pad(x, last axis to a multiple of 16 bytes), last axis, 0, n)

The pad is a kernel of its own (marked ``materialize``, so fusion never folds it back into
its reader) -- or, for a constant, done here once -- and the slice fuses into the matmul as a
prologue, which then reads rows that start aligned and copies the piece across each row's
end in part (the padding is never read).

Only where the copy pays: a constant always (no cost at run time), a computed factor when
the product has at least ``MIN_PRODUCT`` multiply-adds, since the copy is one more launch
and one more pass over the factor.
"""
from __future__ import annotations

import numpy as np

from taskloom import ops
from taskloom.compiler.passes.rewrite import Rewrite, reapply, rewrite
from taskloom.graph.graph import Graph, Node, record
from taskloom.graph.tensor import Tensor, input
from taskloom.target.base import Target

#: the factors each contraction reads, by input position (a linear's bias is no factor)
FACTORS = {"matmul": (0, 1), "batch_matmul": (0, 1), "linear": (0, 1)}
#: multiply-adds from which a computed factor is worth a copy (a 256³ product)
MIN_PRODUCT = 1 << 24


def pad_rows(graph: Graph, target: Target) -> Graph:
    """``graph`` with the misaligned factors of its contractions read through aligned copies,
    on a CUDA target (any other: ``graph`` itself)."""
    if getattr(target, "kind", None) != "cuda":
        return graph
    wide: dict[int, Tensor] = {}  # one aligned copy of each tensor, however many read it

    def rule(node: Node, inputs: list[Tensor], ctx: Rewrite) -> list[Tensor] | None:
        at = FACTORS.get(node.op)
        if at is None or not _static(node) or not on_tensor_cores(node, target):
            return None
        worth = _macs(node) >= MIN_PRODUCT
        new = list(inputs)
        for k in at:
            t = inputs[k]
            if _misaligned(t) and (t.is_concrete or worth):
                if id(t) not in wide:
                    wide[id(t)] = _padded(t)
                new[k] = _first_columns(wide[id(t)], t.shape[-1])  # a slice each, to fuse into each reader
        return None if all(a is b for a, b in zip(new, inputs)) else reapply(node, new)
    return rewrite(graph, rule)


def _elements_per_row_start(t: Tensor) -> int:
    """Elements in 16 bytes: a row length that is a multiple of it keeps rows aligned."""
    return 16 // t.dtype.nbytes


def _misaligned(t: Tensor) -> bool:
    return t.ndim >= 2 and t.shape[-1] % _elements_per_row_start(t) != 0


def _static(node: Node) -> bool:
    return all(isinstance(d, int) for t in (*node.inputs, *node.outputs) for d in t.shape)


def on_tensor_cores(node: Node, target: Target) -> bool:
    """Whether the tensor-core template would take ``node``'s product on ``target``: 16-bit
    float factors, or float32 ones where the target allows tf32."""
    name = node.inputs[0].dtype.name
    return name in ("float16", "bfloat16") or (bool(getattr(target, "tf32", False)) and name == "float32")


def _macs(node: Node) -> int:
    """The product's multiply-adds: its outputs times K (a transposed ``a``'s rows)."""
    a = node.inputs[0]
    k = a.shape[-2] if node.op == "batch_matmul" and node.task.attr("transpose_a") else a.shape[-1]
    return int(np.prod(node.outputs[0].shape)) * int(k)


def _padded(t: Tensor) -> Tensor:
    """``t`` with its rows padded to 16 bytes."""
    n = t.shape[-1]
    extra = -n % _elements_per_row_start(t)
    if t.is_concrete:  # padded now; zero bits are 0.0 in every float type
        return Tensor((*t.shape[:-1], n + extra), t.dtype,
                      np.pad(t.numpy(), [(0, 0)] * (t.ndim - 1) + [(0, extra)]), name=t.name)
    out = ops.pad(t, (0, extra))
    out.producer[0].materialize = True
    return out


def _first_columns(wide: Tensor, n: int) -> Tensor:
    """The first ``n`` columns of ``wide``, recorded as a node: a slice of a constant applied
    directly would run at once (eager mode) and give back the unaligned constant."""
    view = ops.slice(input(wide.shape, wide.dtype), -1, 0, n)
    return record(view.producer[0].task, [wide])[0]


__all__ = ["pad_rows", "on_tensor_cores", "MIN_PRODUCT"]
