"""The CPU layout pass: convolutions run in NHWC where that pays, and the layout flows
through the operators between them so that conversions happen only at the region's edges.

Why NHWC: a convolution is an implicit GEMM. In NCHW its window runs along a row of
pixels, which wraps from one image row to the next inside a vector, so the window is packed
element by element; in NHWC it runs along a pixel's channels, which are contiguous, so it
packs by vectors (with the channels a multiple of the vector), the weight becomes a
constant ``(KH, KW, C, O)`` matrix read by rows, and the result is stored by rows of
output channels. Pooling and depthwise convolutions vectorize over the channels.

Which convolutions: ``groups == 1`` with a 1x1 kernel or input channels a multiple of the
target's vector of channels (``Target.nhwc_channel_multiple``: 16 float32 on x86, 8 16-bit
elements on a GPU, whose tensor-core templates then copy a window by 16-byte runs), depthwise
convolutions, and on the CPU a CNN's stem (3 channels, :func:`is_stem`) that feeds them -- in
regions (:func:`_regions`) where the conversions are worth it. The pass:

- rewrites such a ``conv2d`` as ``conv2d(x', w', layout="NHWC")``, where ``x'`` is the NHWC
  form of its input: the NHWC tensor it came from when there is one, else a ``permute``; on
  the CPU (``Target.nhwc_pads_windows``) a window convolution or a stem with padding reads
  ``x'`` padded ahead, a kernel of its own, so that no element of its window is tested for
  the border and the matmul template reads the window in place;
- rewrites pooling, elementwise operators (any operator whose every input is read at the
  output's index, broadcast), concatenation along the channels and global average pooling
  whose input has an NHWC form into their NHWC forms;
- gives every rewritten node's NCHW result as ``permute(y', (0, 3, 1, 2))``, for the
  operators that need NCHW (a flatten before the classifier, a graph output). The ones no
  operator reads are dead, and a conversion that meets its inverse cancels
  (:mod:`~taskloom.compiler.passes.simplify`); the rest fuse into their neighbours as
  prologues or epilogues.
"""
from __future__ import annotations

import numpy as np

from taskloom import ops
from taskloom.graph.graph import Graph, Node, record
from taskloom.compiler.passes.rewrite import Rewrite, rewrite
from taskloom.graph.tensor import Tensor, asarray
from taskloom.ir import expr as E
from taskloom.ir.compute import GridCompute, Task, TensorInput, tensor_input
from taskloom.ir.dtypes import float32
from taskloom.ir.functor import Rewriter, collect
from taskloom.ops.base import broadcast_index
from taskloom.target.base import Target

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)

def conv_pays(node: Node, channel_multiple: int, dtypes: tuple[str, ...] = ("float32",)) -> bool:
    """Whether ``node`` (a 4-d NCHW conv2d of one of ``dtypes``) runs faster in NHWC on a
    target whose windows pack by vectors of ``channel_multiple`` channels (see the module
    docstring)."""
    a = node.task.attr
    if node.op != "conv2d" or a("layout", "NCHW") != "NCHW":
        return False
    x, w = node.inputs[0], node.inputs[1]
    if x.ndim != 4 or x.dtype.name not in dtypes:
        return False
    c, o = x.shape[1], w.shape[0]
    if a("groups") == 1:
        return w.shape[2:] == (1, 1) or c % channel_multiple == 0
    return a("groups") == c == o  # depthwise: vectorized over the channels


def is_stem(node: Node, channel_multiple: int, dtypes: tuple[str, ...] = ("float32",)) -> bool:
    """Whether ``node`` is a CNN's stem: an NCHW window convolution of fewer input channels
    than a vector (an RGB image). Its window packs by element in either layout; in NHWC its
    result needs no conversion before the NHWC layers it feeds, and with its input padded
    ahead (a few hundred KiB) a window row of ``KW * C`` channels is one contiguous run."""
    a = node.task.attr
    if node.op != "conv2d" or a("layout", "NCHW") != "NCHW" or a("groups") != 1:
        return False
    x, w = node.inputs[0], node.inputs[1]
    return x.ndim == 4 and x.dtype.name in dtypes and x.shape[1] < channel_multiple and w.shape[2:] != (1, 1)


def _is_elementwise(node: Node) -> bool:
    """Whether ``node`` computes a 4-d output element from its inputs' elements at that
    index (numpy broadcasting), and nothing else: such a node is the same in any layout."""
    task = node.task
    if len(task.outputs) != 1 or len(node.outputs[0].shape) != 4:
        return False
    out = task.outputs[0]
    if collect(out.value, GridCompute) or any(t.ndim > 4 for t in node.inputs):
        return False
    for e in collect(out.value, E.TensorElement):
        p = e.tensor
        if not isinstance(p, TensorInput):
            return False
        # where an elementwise operator (ops.elementwise) reads each of its inputs
        if tuple(e.indices) != tuple(E.as_expr(i) for i in broadcast_index(p.shape, 4, out.axes)):
            return False
    return True


class _Relayout(Rewriter):
    """Reads ``p[i...]`` of an NCHW placeholder become reads of its NHWC stand-in."""

    def __init__(self, inputs: dict[TensorInput, TensorInput]):
        self.inputs = inputs

    def visit_TensorElement(self, e: E.TensorElement) -> E.Expr:
        if e.tensor in self.inputs:
            idx = [E.as_expr(0)] * (4 - len(e.indices)) + list(e.indices)
            return E.TensorElement(self.inputs[e.tensor], tuple(idx[d] for d in TO_NHWC))
        return self.generic_visit(e)


def _elementwise_nhwc(node: Node, inputs: list[Tensor]) -> Tensor:
    """``node`` (elementwise, see :func:`_is_elementwise`) on NHWC ``inputs`` (each 4-d)."""
    task, out = node.task, node.task.outputs[0]
    new = {p: tensor_input(p.name, p.dtype, t.shape) for p, t in zip(task.inputs, inputs)}
    value = _Relayout(new).visit(out.value)
    grid = GridCompute(out.name, tuple(out.shape[d] for d in TO_NHWC), tuple(out.axes[d] for d in TO_NHWC), value)
    return record(Task(task.name, list(new.values()), [grid], task.attrs), inputs)[0]


def _permuted(t: Tensor, dims: tuple[int, ...]) -> Tensor:
    """``t`` permuted: a constant now (so no conversion is left to fold), else a permute."""
    if t.is_concrete:
        return asarray(np.ascontiguousarray(t.numpy().transpose(dims)))
    return ops.permute(t, dims)


class _Layouts:
    """The NHWC form of the tensors of the new graph that have one."""

    def __init__(self) -> None:
        self.nhwc: dict[int, Tensor] = {}

    def to_nhwc(self, t: Tensor) -> Tensor:
        """``t`` (at most 4-d, broadcast to 4-d by leading ones) in NHWC."""
        if id(t) in self.nhwc:
            return self.nhwc[id(t)]
        if t.ndim != 4:
            shape = (1,) * (4 - t.ndim) + tuple(t.shape)
            t = asarray(t.numpy().reshape(shape)) if t.is_concrete else ops.reshape(t, shape)
        return _permuted(t, TO_NHWC)

    def give(self, y: Tensor) -> Tensor:
        """The NCHW form of the NHWC ``y``, remembered as having ``y`` for its NHWC form."""
        back = ops.permute(y, TO_NCHW)
        self.nhwc[id(back)] = y
        return back

    def has(self, t: Tensor) -> bool:
        return id(t) in self.nhwc


def _rule(layouts: _Layouts, chosen: set[Node], padded: set[Node]):
    def rule(node: Node, inputs: list[Tensor], ctx: Rewrite) -> list[Tensor] | None:  # noqa: ARG001
        a = node.task.attr
        if node in chosen:
            w = _permuted(inputs[1], (2, 3, 1, 0))  # OIHW -> HWIO
            x, padding = layouts.to_nhwc(inputs[0]), a("padding")
            if node in padded and any(padding):
                top, bottom, left, right = padding
                x, padding = ops.pad(x, (0, 0, left, right, top, bottom)), 0
                x.producer[0].materialize = True  # a prologue would bring back the bounds checks
            y = ops.conv2d(x, w, inputs[2] if len(inputs) > 2 else None, stride=a("stride"), padding=padding,
                           dilation=a("dilation"), groups=a("groups"), layout="NHWC")
            return [layouts.give(y)]
        if not any(layouts.has(t) for t in inputs) or not _carries(node):
            return None
        if node.op in ("max_pool2d", "avg_pool2d"):
            kwargs = {k: v for k, v in node.task.attrs}
            kwargs["layout"] = "NHWC"
            kwargs.pop("kernel_size")
            pool = ops.max_pool2d if node.op == "max_pool2d" else ops.avg_pool2d
            return [layouts.give(pool(layouts.to_nhwc(inputs[0]), a("kernel_size"), **kwargs))]
        if node.op == "global_avg_pool2d":
            n, c = node.outputs[0].shape[:2]
            mean = ops.mean(layouts.to_nhwc(inputs[0]), (1, 2), keepdim=True)
            return [ops.reshape(mean, (n, c, 1, 1))]  # (N, 1, 1, C) and (N, C, 1, 1) share an order
        if node.op == "concat":
            return [layouts.give(ops.concat([layouts.to_nhwc(t) for t in inputs], axis=3))]
        return [layouts.give(_elementwise_nhwc(node, [layouts.to_nhwc(t) for t in inputs]))]
    return rule


def _carries(node: Node) -> bool:
    """Whether ``node`` can run in NHWC when its input does (so the layout flows through):
    NCHW pooling, channel concatenation, global average pooling, an elementwise operator."""
    if node.op in ("max_pool2d", "avg_pool2d"):
        return node.inputs[0].ndim == 4 and node.task.attr("layout", "NCHW") == "NCHW"
    if node.op == "global_avg_pool2d":
        return node.inputs[0].ndim == 4
    if node.op == "concat":
        return node.task.attr("axis") == 1 and all(t.ndim == 4 for t in node.inputs)
    return _is_elementwise(node)


def _regions(graph: Graph, channel_multiple: int, dtypes: tuple[str, ...], stems: bool) -> set[Node]:
    """The convolutions worth running in NHWC: those of a region -- convolutions that pay,
    joined through the operators that carry the layout -- that holds a window convolution
    (NHWC pays for it even with conversions on both sides) or two convolutions or more (the
    conversions between them cancel). A lone 1x1 or depthwise convolution between NCHW
    neighbours stays NCHW: converting its input and result would cost more than it saves.
    With ``stems``, a stem (:func:`is_stem`) joins the region it feeds, but does not make
    one: what it saves is the conversion after it, and the pooling between it and the
    region runs in NHWC, vectorized over the channels instead of gathering strided pixels."""
    parent: dict[Node, Node] = {}

    def find(n: Node) -> Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    def pays(n: Node) -> bool:
        return conv_pays(n, channel_multiple, dtypes) or (stems and is_stem(n, channel_multiple, dtypes))

    for node in graph.nodes:
        if pays(node) or _carries(node):
            parent[node] = node
            for t in node.inputs:
                src = t.producer[0] if t.producer is not None else None
                if src is not None and src in parent:
                    parent[find(src)] = find(node)
    convs: dict[Node, list[Node]] = {}
    for n in parent:
        if pays(n):
            convs.setdefault(find(n), []).append(n)
    chosen: set[Node] = set()
    for members in convs.values():
        paying = [n for n in members if conv_pays(n, channel_multiple, dtypes)]
        window = any(map(_window, paying))
        if window or len(paying) > 1:
            chosen.update(members)
    return chosen


def choose_layout(graph: Graph, target: Target) -> Graph:
    """``graph`` with its convolutions in NHWC where that pays on ``target``, the layout
    carried through pooling and elementwise operators (see the module docstring); run the
    passes of :func:`taskloom.compiler.passes.optimize` after it to cancel and drop the
    conversions. A target that names no channel multiple keeps the graph's layout."""
    multiple = target.nhwc_channel_multiple()
    if multiple is None:
        return graph
    chosen = _regions(graph, multiple, target.nhwc_dtypes(), target.nhwc_stems())
    if not chosen:
        return graph
    dtypes = target.nhwc_dtypes()
    padded = {n for n in chosen if is_stem(n, multiple, dtypes)
              or (target.nhwc_pads_windows() and _window_in_place(n, target) and conv_pays(n, multiple, dtypes))}
    return rewrite(graph, _rule(_Layouts(), chosen, padded))


def _window(node: Node) -> bool:
    """Whether ``node`` convolves a window of pixels: not 1x1, not grouped (depthwise)."""
    return node.task.attr("groups") == 1 and node.inputs[1].shape[2:] != (1, 1)


def _window_in_place(node: Node, target: Target) -> bool:
    """Whether ``node`` convolves a window (:func:`_window`) that the matmul template will read
    in place once its input is padded ahead: all of its K in one block beside a B panel of
    the widest tile (a larger one packs the window, and the pad would be a pass for nothing)."""
    from taskloom.schedule.templates.matmul_cpu import WIDEST_TILE_VECTORS, window_fits
    w = node.inputs[1]  # OIHW
    if not _window(node):
        return False
    return window_fits(w.shape[1] * w.shape[2] * w.shape[3], WIDEST_TILE_VECTORS * target.vector_lanes(float32),
                       target)
