"""The CPU layout pass: convolutions in NHWC where that pays, the layout carried through the
operators between them, conversions only at the region's edges."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.compiler.passes import optimize
from taskloom.compiler.passes.layout import choose_layout
from taskloom.target import CpuTarget, get_target
from tests.compiler.passes.helpers import const, ops_of, random_inputs

HOST = CpuTarget.host()
#: the comment at the head of the matmul template's micro-kernel over a window read in place
WINDOW_IN_PLACE = "A read in place from the window"


def relaid(g: Graph) -> Graph:
    return optimize(choose_layout(optimize(g), HOST))


def layouts(g: Graph, op: str) -> list[str]:
    return [n.task.attr("layout", "NCHW") for n in g.nodes if n.op == op]


def assert_matches_nchw(g: Graph, rtol: float = 1e-4) -> taskloom.runtime.CompiledGraph:
    """The graph compiled with the layout pass gives what it gives in its own layout."""
    arrays = random_inputs(g)
    want = taskloom.compile(g, layout="NCHW")(*arrays)
    compiled = taskloom.compile(g)
    got = compiled(*arrays)
    want, got = (w if isinstance(w, tuple) else (w,) for w in (want, got))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * float(np.abs(b).max()))
    return compiled


def resnet_block() -> Graph:
    x = input((1, 32, 10, 10), name="x")
    y = ops.relu(ops.conv2d(x, const(32, 32, 1, 1), const(32)))
    y = ops.relu(ops.conv2d(y, const(32, 32, 3, 3), const(32), padding=1))
    y = ops.conv2d(y, const(32, 32, 1, 1), const(32))
    return Graph([x], [ops.relu(ops.add(y, x))])


def test_convolutions_between_conversions_keep_nhwc():
    g = relaid(resnet_block())
    assert layouts(g, "conv2d") == ["NHWC"] * 3
    # one conversion in (the graph input) and one out (the graph output): the ones between
    # the convolutions met their inverses and cancelled
    assert ops_of(g).count("permute") == 2
    assert_matches_nchw(resnet_block())


def test_window_convolutions_read_their_input_padded_ahead(monkeypatch):
    """On the CPU a 3x3 convolution's padding is a kernel of its own, so that the matmul
    template reads the window in place; a target that does not pad ahead keeps the border
    tests in the convolution."""
    g = relaid(resnet_block())
    window = next(n for n in g.nodes if n.op == "conv2d" and n.inputs[1].shape[:2] == (3, 3))
    pad = window.inputs[0].producer[0]
    assert window.task.attr("padding") == (0, 0, 0, 0) and pad.op == "pad" and pad.materialize
    compiled = assert_matches_nchw(resnet_block())
    assert ["pad"] in [k["ops"] for k in compiled.meta["kernels"]]
    assert WINDOW_IN_PLACE in open(compiled.meta["source"]).read()
    # a B panel past L2 packs the window, so no pad is made for it
    small_l2 = dataclasses.replace(HOST, l2_bytes=32 * 9 * 4 * HOST.vector_lanes(taskloom.ir.f32) * 4 - 4)
    assert "pad" not in ops_of(optimize(choose_layout(optimize(resnet_block()), small_l2)))
    monkeypatch.setattr(CpuTarget, "nhwc_pads_windows", lambda self: False)
    g = relaid(resnet_block())
    window = next(n for n in g.nodes if n.op == "conv2d" and n.inputs[1].shape[:2] == (3, 3))
    assert window.task.attr("padding") == (1, 1, 1, 1) and "pad" not in ops_of(g)


def stem_net(channels: int = 3, kernel: int = 3, stride: int = 2, padding: int = 1, size: int = 12) -> Graph:
    x = input((1, channels, size, size), name="x")
    stem = ops.relu(ops.conv2d(x, const(16, channels, kernel, kernel), const(16), stride=stride, padding=padding))
    y = ops.conv2d(stem, const(16, 1, 3, 3), padding=1, groups=16)  # depthwise, as MobileNet-V2
    return Graph([x], [ops.conv2d(ops.relu(y), const(16, 16, 1, 1))])


def test_stem_joins_the_nhwc_layers_it_feeds_with_its_input_padded_ahead():
    g = relaid(stem_net())
    assert layouts(g, "conv2d") == ["NHWC"] * 3
    stem = next(n for n in g.nodes if n.op == "conv2d")
    assert stem.task.attr("padding") == (0, 0, 0, 0) and stem.inputs[0].producer[0].op == "pad"
    # the conversion and the padding are one kernel before the stem (a prologue would bring
    # back a bounds check per element), and the stem reads its window in place
    compiled = assert_matches_nchw(stem_net())
    kernels = compiled.meta["kernels"]
    assert kernels[0]["ops"] == ["permute", "pad"] and kernels[1]["ops"][0] == "conv2d"


@pytest.mark.parametrize("channels, kernel, stride, padding, size",
                         [(3, 7, 2, 3, 23), (3, 3, 1, 0, 11), (1, 5, 1, 2, 9), (4, 3, 2, 1, 13)])
def test_stems_of_every_shape_match_nchw(channels, kernel, stride, padding, size):
    assert layouts(relaid(stem_net(channels, kernel, stride, padding, size)), "conv2d")[0] == "NHWC"
    compiled = assert_matches_nchw(stem_net(channels, kernel, stride, padding, size))
    assert WINDOW_IN_PLACE in open(compiled.meta["source"]).read()


def test_a_stem_on_avx2():
    g = stem_net(3, 7, 2, 3, 23)
    arrays = random_inputs(g)
    want = taskloom.compile(g, layout="NCHW")(*arrays)
    compiled = taskloom.compile(g, target="cpu -isa=avx2")
    np.testing.assert_allclose(compiled(*arrays), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert WINDOW_IN_PLACE in open(compiled.meta["source"]).read()


def test_a_stem_with_a_symbolic_batch():
    from taskloom.graph.tensor import Tensor, symbol
    x = Tensor((symbol("batch"), 3, 15, 15), taskloom.ir.f32, name="x")
    stem = ops.relu(ops.conv2d(x, const(16, 3, 7, 7), const(16), stride=2, padding=3))
    y = ops.conv2d(ops.max_pool2d(stem, 3, 2, 1), const(16, 16, 3, 3), padding=1)
    dynamic, static = taskloom.compile(Graph([x], [y])), taskloom.compile(Graph([x], [y]), layout="NCHW")
    for batch in (1, 3):
        arr = np.random.default_rng(batch).standard_normal((batch, 3, 15, 15)).astype(np.float32)
        want = static(arr)
        np.testing.assert_allclose(dynamic(arr), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_a_stem_alone_stays_nchw():
    x = input((1, 3, 12, 12), name="x")
    y = ops.relu(ops.conv2d(x, const(16, 3, 7, 7), stride=2, padding=3))
    g = relaid(Graph([x], [ops.max_pool2d(y, 3, 2, 1)]))
    assert layouts(g, "conv2d") == ["NCHW"] and "permute" not in ops_of(g)


def test_targets_without_nhwc_stems_keep_the_stem_nchw(monkeypatch):
    monkeypatch.setattr(CpuTarget, "nhwc_stems", lambda self: False)
    g = relaid(stem_net())
    assert layouts(g, "conv2d") == ["NCHW", "NHWC", "NHWC"]
    # the conversion between the stem and the depthwise window is its own kernel: folded into
    # the window, it would be gathered element by element, several times per element
    compiled = assert_matches_nchw(stem_net())
    assert ["permute"] in [k["ops"] for k in compiled.meta["kernels"]]


def test_pooling_depthwise_concat_and_global_pool_follow():
    x = input((2, 16, 9, 9), name="x")
    a = ops.relu(ops.conv2d(x, const(16, 16, 3, 3), padding=1))
    b = ops.conv2d(a, const(16, 1, 3, 3), padding=1, groups=16)  # depthwise
    c = ops.concat([ops.max_pool2d(a, 3, 2, 1), ops.avg_pool2d(b, 3, 2, 1)], axis=1)
    c = ops.mul(c, const(32, 1, 1))  # a per-channel scale broadcast from (C, 1, 1)
    y = ops.linear(ops.flatten(ops.global_avg_pool2d(c), 1), const(5, 32))
    g = Graph([x], [y])
    new = relaid(g)
    assert layouts(new, "conv2d") == ["NHWC", "NHWC"]
    assert layouts(new, "max_pool2d") == layouts(new, "avg_pool2d") == ["NHWC"]
    assert "global_avg_pool2d" not in ops_of(new) and ops_of(new).count("permute") == 1
    assert_matches_nchw(g)


@pytest.mark.parametrize("groups", [1, 16])
def test_lone_pointwise_or_depthwise_convolution_stays_nchw(groups):
    """Converting its input and result would cost more than NHWC saves."""
    x = input((1, 16, 12, 12), name="x")
    k = 1 if groups == 1 else 3
    y = ops.relu(ops.conv2d(x, const(16, 16 // groups, k, k), padding=k // 2, groups=groups))
    g = Graph([x], [ops.max_pool2d(y, 2)])
    assert choose_layout(g, HOST) is g
    # a window convolution pays alone: in NHWC, with the pooling after it
    w = Graph([x], [ops.max_pool2d(ops.relu(ops.conv2d(x, const(16, 16, 3, 3), padding=1)), 2)])
    assert layouts(relaid(w), "conv2d") == ["NHWC"] and layouts(relaid(w), "max_pool2d") == ["NHWC"]


def test_grouped_convolutions_and_float64_stay():
    x = input((1, 16, 6, 6), name="x")
    y = ops.conv2d(x, const(16, 4, 3, 3), groups=4)  # grouped, not depthwise
    assert layouts(relaid(Graph([x], [y])), "conv2d") == ["NCHW"]
    x64 = input((1, 16, 6, 6), "float64", name="x")
    y64 = ops.conv2d(x64, const(16, 16, 1, 1, dtype="float64"))
    assert layouts(relaid(Graph([x64], [y64])), "conv2d") == ["NCHW"]


def test_graph_without_convolutions_is_unchanged():
    x = input((4, 8), name="x")
    g = Graph([x], [ops.relu(ops.linear(x, const(3, 8)))])
    assert choose_layout(g, HOST) is g


def test_nchw_keeps_the_graph_layout_and_bad_choice_is_an_error():
    compiled = taskloom.compile(resnet_block(), layout="NCHW")
    assert all("NHWC" not in str(k) for k in compiled.meta["kernels"])
    with pytest.raises(taskloom.TaskloomError, match="layout='NHCW'"):
        taskloom.compile(resnet_block(), layout="NHCW")


def test_batch_norm_after_nhwc_conv_is_not_folded_on_the_wrong_axis():
    """batch_norm normalizes axis 1, which is an NHWC result's rows, not its channels."""
    x = input((1, 5, 5, 16), name="x")
    y = ops.conv2d(x, const(3, 3, 16, 16), padding=1, layout="NHWC")
    y = ops.batch_norm(y, const(5), taskloom.asarray(np.full(5, 2.0, np.float32)))
    g = Graph([x], [y])
    assert "batch_norm" in ops_of(optimize(g))
    assert_matches_nchw(g)


def test_a_gpu_target_keeps_the_graphs_layout():
    x = input((1, 32, 8, 8), name="x")
    w = const(32, 32, 3, 3)
    g = Graph([x], [ops.relu(ops.conv2d(x, w, padding=1))])
    assert choose_layout(g, HOST) is not g
    assert choose_layout(g, get_target("cuda:sm_80")) is g


def test_a_gpu_runs_16_bit_convolutions_in_nhwc():
    x = input((1, 32, 8, 8), "float16", name="x")
    w = taskloom.asarray(np.ones((32, 32, 3, 3), np.float16))
    g = Graph([x], [ops.relu(ops.conv2d(x, w, padding=1))])
    assert layouts(optimize(choose_layout(g, get_target("cuda:sm_90a"))), "conv2d") == ["NHWC"]
    assert choose_layout(g, HOST) is g  # (the CPU's NHWC windows pack float32)


def test_the_target_names_the_channel_multiple_a_window_needs():
    class WideVectors(CpuTarget):  # a CPU whose windows would need 64 channels to pack
        def nhwc_channel_multiple(self) -> int:
            return 64
    x = input((1, 32, 8, 8), name="x")
    g = Graph([x], [ops.relu(ops.conv2d(x, const(32, 32, 3, 3), padding=1))])
    wide = WideVectors(**{f: getattr(HOST, f) for f in HOST.__dataclass_fields__})
    assert layouts(relaid(g), "conv2d") == ["NHWC"]
    assert choose_layout(g, wide) is g
