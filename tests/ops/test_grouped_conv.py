"""Grouped and 1-d convolutions against torch on odd shapes: a grouped convolution (more
than one output channel per group) is a batch of matmuls, one a group, so the matmul
template serves it; a depthwise one keeps its own path."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import taskloom


def kernels(compiled) -> list[str]:
    return [k["schedule"].split(":")[0] for k in compiled.meta["kernels"]]


def check_conv1d(groups, per_group, stride, dilation, pad, length, seed):
    torch.manual_seed(seed)
    cin, cout = groups * 3, groups * (per_group + 1)
    conv = torch.nn.Conv1d(cin, cout, 3, stride=stride, padding=pad, dilation=dilation, groups=groups).eval()
    x = torch.randn(2, cin, length)
    compiled = taskloom.compile(conv, (x,))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), conv(x), rtol=1e-4, atol=1e-5)
    return compiled


def test_grouped_conv1d_takes_the_matmul_template():
    compiled = check_conv1d(groups=4, per_group=3, stride=2, dilation=2, pad=2, length=61, seed=0)
    assert "matmul_cpu" in kernels(compiled)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([2, 3, 4]), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2), st.integers(0, 2),
       st.integers(5, 23), st.integers(0, 99))
def test_grouped_conv1d_matches_torch_on_odd_shapes(groups, per_group, stride, dilation, pad, length, seed):
    check_conv1d(groups, per_group, stride, dilation, pad, length, seed)


def test_grouped_conv2d_with_a_fused_epilogue():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(12, 24, 3, padding=1, groups=4), torch.nn.ReLU()).eval()
    x = torch.randn(1, 12, 9, 7)
    compiled = taskloom.compile(model, (x,))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert kernels(compiled).count("matmul_cpu") == 1 and len(compiled.meta["kernels"]) == 1


def test_depthwise_keeps_its_own_path():
    channels = 8
    conv = torch.nn.Conv2d(channels, channels, 3, padding=1, groups=channels).eval()
    x = torch.randn(1, channels, 10, 10)
    compiled = taskloom.compile(conv, (x,))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), conv(x), rtol=1e-4, atol=1e-5)
    assert "matmul_cpu" not in kernels(compiled)


def test_eager_grouped_conv_matches_numpy():
    from taskloom import ops
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 6, 5, 5)).astype(np.float32), rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    got = ops.conv2d(taskloom.asarray(x), taskloom.asarray(w), groups=2).numpy()
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), groups=2).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
