"""Split-K for the GPU: a linear layer (or a matmul by a 2-d factor, as traced models give
them), or an NHWC convolution, with too few output tiles to fill the GPU is split along K
into partial products, one batch element each, summed after. A convolution splits along its
input channels, each part keeping whole 16-byte runs of a pixel's channels (ResNet-50's 3x3
convolutions at 7x7 are 8 blocks of 64x64 whole).

At batch 1 a transformer's linears (128 x 768 x 768 in BERT-base at sequence 128) give the
tensor-core template a few dozen blocks for 132 SMs, each looping over all of K; on an H100
such a product ran at 3% achieved occupancy, waiting on its loads
(``bench/results/2026-11-27-h100-first-run.md``). Split into ``s`` parts,

    partials[p] = x[:, p-th part of K] @ weight[:, p-th part of K].T      (float32, s x M x N)
    y = cast(sum over p of partials[p] + bias)

the product has ``s`` times the blocks, as one batched product (the template's batch axis;
the reshapes are its prologue), and the sum is a reduction kernel that takes the bias and
whatever followed the layer as its epilogue. The partials stay in float32, so the result is
rounded once, as the unsplit product's.

``s`` is chosen by the analytic model (:mod:`~taskloom.schedule.cuda.mma_model`): the split
whose product plus summation it prices lowest, where that is at least ``GAIN`` times
faster than the product whole (the model prices the k-steps' latency a split hides, from
one measured kernel; the margin is for what it misses). The split has not been timed on a
GPU yet, so it is off unless asked for: ``TASKLOOM_SPLIT_K=auto`` splits where the model says so, and
``TASKLOOM_SPLIT_K=4`` (2, 4 or 8) splits every linear whose K allows it into that many parts,
for measuring.
"""
from __future__ import annotations

import math
import os

from taskloom import ops
from taskloom.compiler.passes.pad_rows import on_tensor_cores
from taskloom.compiler.passes.rewrite import Rewrite, rewrite
from taskloom.errors import TaskloomError
from taskloom.graph.graph import Graph, Node
from taskloom.graph.tensor import Tensor
from taskloom.ir import dtypes as T
from taskloom.ir import expr as E
from taskloom.ir.compute import compute, reduce
from taskloom.ops.base import apply
from taskloom.ops.nn import window_element
from taskloom.target.base import Target

SPLITS = (2, 4, 8)
#: the least K a part keeps: a few steps of the template's 32 for its pipeline to run
MIN_PART = 128
#: how much faster the model must price the split
GAIN = 1.25
#: a kernel's launch, in cycles, charged to the summation (a replayed CUDA graph's node)
LAUNCH_CYCLES = 2000


def split_k(graph: Graph, target: Target, parts: int | str | None = None) -> Graph:
    """``graph`` with its linears split along K, on a CUDA target: ``parts`` ``"auto"`` where
    the model says it pays, a number of parts where K allows, None (the default) as
    ``TASKLOOM_SPLIT_K`` says (unset: no split)."""
    parts = os.environ.get("TASKLOOM_SPLIT_K", "0") if parts is None else parts
    if getattr(target, "kind", None) != "cuda" or parts in ("0", 0):
        return graph
    if parts != "auto" and str(parts) not in {str(s) for s in SPLITS}:
        raise TaskloomError(f"split_k: {parts!r} is not a way to split; use 'auto' (where the model says it "
                            f"pays), one of {', '.join(map(str, SPLITS))} (that many parts), or 0 (none)")
    forced = None if parts == "auto" else int(parts)

    def rule(node: Node, inputs: list[Tensor], ctx: Rewrite) -> list[Tensor] | None:
        if node.op == "conv2d" and on_tensor_cores(node, target):
            return _conv_rule(node, inputs, target, forced)
        if node.op not in ("linear", "matmul") or not on_tensor_cores(node, target):
            return None
        x, weight = inputs[0], inputs[1]
        if x.ndim < 2 or weight.ndim != 2 or not all(isinstance(d, int) for d in (*x.shape, *weight.shape)):
            return None  # (a matmul's b of more axes is a batched product: its own blocks fill the GPU)
        if node.op == "matmul":  # b is (K, N): the linear of its transpose
            weight = _Transposed(weight)
        m, (n, k) = math.prod(x.shape[:-1]), weight.shape
        if forced is not None:
            s = forced if _divides(k, forced) else None
        else:
            s = _best_split(m, n, k, x.dtype.nbytes, target)
        return None if s is None else [_split(x, weight, inputs[2] if len(inputs) > 2 else None, s)]
    return rewrite(graph, rule)


def _conv_rule(node: Node, inputs: list[Tensor], target: Target, forced: int | None) -> list[Tensor] | None:
    """An NHWC convolution's split along its input channels, where it pays (or is forced)."""
    x, w = inputs[0], inputs[1]
    if node.task.attr("layout") != "NHWC" or node.task.attr("groups") != 1 or x.ndim != 4 or \
            not all(isinstance(d, int) for d in (*x.shape, *w.shape)):
        return None
    (n, oh, ow, o), (kh, kw, c, _) = node.outputs[0].shape, w.shape
    m, k = n * oh * ow, kh * kw * c
    fits = [s for s in SPLITS if c % (8 * s) == 0 and k // s >= MIN_PART]  # whole 16-byte runs of channels a part
    if forced is not None:
        s = forced if forced in fits else None
    else:
        s = _best_split(m, o, k, x.dtype.nbytes, target, fits)
    return None if s is None else [_split_conv(node, x, w, inputs[2] if len(inputs) > 2 else None, s)]


def _split_conv(node: Node, x: Tensor, w: Tensor, bias: Tensor | None, s: int) -> Tensor:
    """``conv2d(x, w, bias)`` in NHWC as ``s`` float32 partial convolutions, each over a
    ``1/s`` share of the input channels (the window's runs of channels stay contiguous),
    summed: one batched contraction over the parts, then the sum."""
    (sh, sw), (pt, pb, pl, pr), (dh, dw) = (node.task.attr(a) for a in ("stride", "padding", "dilation"))
    (_, h, wd, c), (kh, kw, _, o) = x.shape, w.shape
    cs, (_, oh, ow, _) = c // s, node.outputs[0].shape

    def build(X, W):
        def fn(p, b, oy, ox, co):
            def term(ky, kx, ci):
                v = window_element(X, lambda iy, ix: (b, iy, ix, p * cs + ci), oy, ox, ky, kx, (h, wd),
                                   (sh, sw), (pt, pb, pl, pr), (dh, dw), T.float32)
                return v * E.cast(W[ky, kx, p * cs + ci, co], T.float32)
            return reduce([kh, kw, cs], term, "sum")
        return compute("split_k_conv_partials", [s, x.shape[0], oh, ow, o], fn)
    parts = apply("split_k_conv_partials", [x, w], ["x", "weight"], build, {"parts": s})[0]
    y = ops.sum(parts, axis=0)
    if bias is not None:
        y = y + ops.cast(bias, T.float32)
    return ops.cast(y, x.dtype)


def _divides(k: int, s: int) -> bool:
    """Whether K splits into ``s`` parts of whole steps of 32, each at least MIN_PART."""
    return k % (32 * s) == 0 and k // s >= MIN_PART


def _best_split(m: int, n: int, k: int, nbytes: int, target: Target, fits: list[int] | None = None) -> int | None:
    """The number of parts (of ``fits``: by default those :func:`_divides` allows) the
    model prices fastest, if GAIN times faster than none."""
    from taskloom.schedule.cuda.mma_model import Product, cycles, hardware, target_space
    configs = target_space(target, nbytes)  # type: ignore[arg-type]

    def product(batch: int, kk: int) -> float:
        return min(cycles(Product(batch, m, n, kk), c, target, nbytes) for c in configs)  # type: ignore[arg-type]
    whole = product(1, k)
    l2_bytes_a_cycle = hardware(target).l2_bytes * target.num_sms  # type: ignore[attr-defined, arg-type]
    priced = {s: product(s, k // s) + LAUNCH_CYCLES + (s * 4 + nbytes) * m * n / l2_bytes_a_cycle
              for s in (fits if fits is not None else [s for s in SPLITS if _divides(k, s)])}
    best = min(priced, key=priced.__getitem__, default=None)
    return best if best is not None and priced[best] * GAIN <= whole else None


class _Transposed:
    """A matmul's ``b`` (K, N), seen as a linear's weight (N, K) without moving it."""

    def __init__(self, b: Tensor):
        self.b, self.shape = b, (b.shape[1], b.shape[0])


def _split(x: Tensor, weight: "Tensor | _Transposed", bias: Tensor | None, s: int) -> Tensor:
    """``linear(x, weight, bias)`` (or ``matmul(x, b)``) as ``s`` float32 partial products summed."""
    (n, k), m = weight.shape, math.prod(x.shape[:-1])
    xs = ops.permute(ops.reshape(x, (m, s, k // s)), (1, 0, 2))             # (s, m, k/s)
    if isinstance(weight, _Transposed):
        parts = _partials(xs, ops.reshape(weight.b, (s, k // s, n)), b_rows_k=True)  # b's rows split along K
    else:
        parts = _partials(xs, ops.permute(ops.reshape(weight, (n, s, k // s)), (1, 0, 2)))  # (s, n, k/s)
    y = ops.sum(parts, axis=0)
    if bias is not None:
        y = y + ops.cast(bias, T.float32)
    return ops.reshape(ops.cast(y, x.dtype), (*x.shape[:-1], n))


def _partials(xs: Tensor, ws: Tensor, b_rows_k: bool = False) -> Tensor:
    """``xs[p] @ ws[p].T`` (``xs[p] @ ws[p]`` where ``ws`` is (s, k/s, n): ``b_rows_k``) for
    each part ``p``, summed and kept in float32."""
    def build(X, W):
        def fn(p, i, j):
            w = (lambda q: W[p, q, j]) if b_rows_k else (lambda q: W[p, j, q])
            return reduce([X.shape[2]], lambda q: E.cast(X[p, i, q], T.float32) * E.cast(w(q), T.float32), "sum")
        return compute("split_k_partials", [X.shape[0], X.shape[1], W.shape[2] if b_rows_k else W.shape[1]], fn)
    return apply("split_k_partials", [xs, ws], ["x", "weight"], build, {"b_rows_k": b_rows_k})[0]


__all__ = ["split_k", "SPLITS", "GAIN"]
