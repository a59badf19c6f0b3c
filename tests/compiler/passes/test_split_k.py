"""Split-K for the GPU: a linear split along K into float32 partial products (one batched
product, its reshapes a prologue) and their sum (the bias and what follows its epilogue)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.compiler.passes.split_k import _best_split, split_k
from taskloom.errors import TaskloomError
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.target import CudaTarget
from tests.compiler.passes.helpers import ops_of

rng = np.random.default_rng(0)
GPU = CudaTarget.from_arch("sm_90a")


def layer(dtype: str = "float16", k: int = 512, traced: bool = False):
    """gelu(linear(x, w, b)), or as a traced model gives it, gelu(matmul(x, w.T) + b)."""
    x = input((1, 40, k), dtype, name="x")
    w = rng.standard_normal((72, k)).astype(dtype)
    b = taskloom.asarray(rng.standard_normal(72).astype(dtype))
    y = ops.matmul(x, taskloom.asarray(np.ascontiguousarray(w.T))) + b if traced else ops.linear(x, taskloom.asarray(w), b)
    return Graph([x], [ops.gelu(y)])


def test_a_split_linear_is_a_batched_product_and_a_sum_with_the_epilogue():
    g = split_k(layer(), GPU, parts=4)
    assert ops_of(g) == ["reshape", "permute", "split_k_partials", "sum", "add", "cast", "reshape", "gelu"]
    partials = g.nodes[2]
    assert partials.outputs[0].shape == (4, 40, 72) and partials.outputs[0].dtype.name == "float32"
    weight = partials.inputs[1]  # the constant weight, laid out by part at compile time
    assert weight.is_concrete and weight.shape == (4, 72, 128)
    assert [grp.ops for grp in fuse_graph(g)] == [["reshape", "permute", "split_k_partials"],
                                                 ["sum", "add", "cast", "reshape", "gelu"]]


def test_off_by_default_on_the_cpu_and_where_k_does_not_split(monkeypatch):
    g = layer()
    monkeypatch.delenv("TASKLOOM_SPLIT_K", raising=False)
    assert split_k(g, GPU) is g and split_k(g, taskloom.host_target(), parts=4) is g
    short = layer(k=96)  # parts of 48: not whole steps of 32
    assert split_k(short, GPU, parts=2) is short
    monkeypatch.setenv("TASKLOOM_SPLIT_K", "4")
    assert "split_k_partials" in ops_of(split_k(g, GPU))
    monkeypatch.setenv("TASKLOOM_SPLIT_K", "3")
    with pytest.raises(TaskloomError, match="not a way to split"):
        split_k(g, GPU)


def test_the_model_splits_where_few_long_tiles_would_leave_the_gpu_idle():
    assert _best_split(128, 768, 3072, 2, GPU) == 8        # BERT's second feed-forward linear
    assert _best_split(4096, 4096, 4096, 2, GPU) is None   # waves of blocks already
    assert _best_split(128, 768, 100, 2, GPU) is None      # K too short to split


def test_a_matmul_by_a_2d_factor_splits_its_rows():
    g = split_k(layer(traced=True), GPU, parts=4)
    assert ops_of(g) == ["reshape", "permute", "split_k_partials", "sum", "cast", "reshape", "add", "gelu"]
    factor = g.nodes[2].inputs[1]
    assert factor.is_concrete and factor.shape == (4, 128, 72)  # (K, N) cut into 4 blocks of rows
    assert [grp.ops for grp in fuse_graph(g)][1] == ["sum", "cast", "reshape", "add", "gelu"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("dtype, target, traced", [("float16", "cuda:sm_90a", False), ("float16", "cuda:sm_90a", True),
                                                   ("float32", "cuda:sm_80 -tf32", False)])
def test_a_split_layer_computes_what_the_whole_one_does(dtype, target, traced):
    g = layer(dtype, traced=traced)
    split = taskloom.compile(split_k(g, CudaTarget.from_string(target), parts=4), target=target, device="emulator")
    assert split.meta["kernels"][0]["schedule"].startswith(("matmul_mma", "matmul_wgmma"))
    whole = taskloom.compile(g, target=target, device="emulator")
    x = rng.standard_normal((1, 40, 512)).astype(dtype)
    np.testing.assert_allclose(split(x).astype(np.float32), whole(x).astype(np.float32), rtol=2e-3, atol=2e-3)


def conv_layer(channels: int = 128, size: int = 7, layout: str = "NHWC"):
    """relu(conv2d(x, w, b)), 3x3 with padding 1, float16, as the layout pass leaves it."""
    x = input((1, size, size, channels) if layout == "NHWC" else (1, channels, size, size), "float16", name="x")
    shape = (3, 3, channels, 64) if layout == "NHWC" else (64, channels, 3, 3)
    w = taskloom.asarray((rng.standard_normal(shape) * 0.05).astype(np.float16))
    b = taskloom.asarray(rng.standard_normal(64).astype(np.float16))
    return Graph([x], [ops.relu(ops.conv2d(x, w, b, padding=1, layout=layout))])


def test_an_nhwc_convolution_splits_along_its_input_channels():
    g = split_k(conv_layer(), GPU, parts=4)
    assert ops_of(g) == ["split_k_conv_partials", "sum", "add", "cast", "relu"]
    assert g.nodes[0].outputs[0].shape == (4, 1, 7, 7, 64) and g.nodes[0].outputs[0].dtype.name == "float32"
    assert [grp.ops for grp in fuse_graph(g)] == [["split_k_conv_partials"], ["sum", "add", "cast", "relu"]]
    for unsplit in (conv_layer(layout="NCHW"), conv_layer(channels=24)):  # not NHWC; parts of 6 channels
        assert split_k(unsplit, GPU, parts=4) is unsplit


def test_the_model_splits_resnet_s_late_convolutions():
    # ResNet-50's 3x3 convolutions at 7x7 (512 channels) and 14x14 (256): 8 and 16 blocks whole
    assert "split_k_conv_partials" in ops_of(split_k(conv_layer(512, 7), GPU, parts="auto"))
    assert "split_k_conv_partials" in ops_of(split_k(conv_layer(256, 14), GPU, parts="auto"))
    early = conv_layer(64, 56)  # 3136 rows of output: 49 blocks a column of tiles already
    assert split_k(early, GPU, parts="auto") is early


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_split_convolution_computes_what_the_whole_one_does():
    g = conv_layer(64, 5)
    split = taskloom.compile(split_k(g, GPU, parts=2), target="cuda:sm_90a", device="emulator")
    assert split.meta["kernels"][0]["schedule"].startswith(("matmul_mma", "matmul_wgmma"))
    whole = taskloom.compile(g, target="cuda:sm_90a", device="emulator")
    x = rng.standard_normal((1, 5, 5, 64)).astype(np.float16)
    np.testing.assert_allclose(split(x).astype(np.float32), whole(x).astype(np.float32), rtol=2e-3, atol=2e-3)
