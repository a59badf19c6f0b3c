"""Compiled graphs: numbers against torch, one library, planned memory, save and load."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import taskloom
from taskloom import ops
from taskloom.errors import ArgumentError, LoadError
from taskloom.graph import Graph, input

rng = np.random.default_rng(1)


def arr(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.fixture(scope="module")
def cnn():
    """conv-bn-relu-pool-linear, its weights, and the compiled graph."""
    w = {"conv": arr(8, 3, 3, 3, scale=0.3), "bias": arr(8), "mean": arr(8), "var": np.abs(arr(8)) + 0.5,
         "gamma": arr(8), "beta": arr(8), "fc": arr(5, 8 * 5 * 5, scale=0.1), "fcb": arr(5)}
    c = {k: taskloom.asarray(v) for k, v in w.items()}
    x = input((2, 3, 9, 9), name="image")
    y = ops.conv2d(x, c["conv"], c["bias"], padding=1)
    y = ops.relu(ops.batch_norm(y, c["mean"], c["var"], c["gamma"], c["beta"]))
    y = ops.max_pool2d(y, 2, ceil_mode=True)
    y = ops.linear(ops.flatten(y, 1), c["fc"], c["fcb"])
    return w, taskloom.compile(Graph([x], [ops.softmax(y, axis=-1)]))


def torch_cnn(w, x):
    t = {k: torch.from_numpy(v) for k, v in w.items()}
    y = torch.nn.functional.conv2d(torch.from_numpy(x), t["conv"], t["bias"], padding=1)
    y = torch.relu(torch.nn.functional.batch_norm(y, t["mean"], t["var"], t["gamma"], t["beta"]))
    y = torch.nn.functional.max_pool2d(y, 2, ceil_mode=True)
    y = torch.nn.functional.linear(y.flatten(1), t["fc"], t["fcb"])
    return torch.softmax(y, -1).numpy()


def test_cnn_matches_torch_and_fuses_conv_bn_relu(cnn):
    w, compiled = cnn
    x = arr(2, 3, 9, 9)
    np.testing.assert_allclose(compiled(x), torch_cnn(w, x), rtol=1e-4, atol=1e-6)
    kernels = [k["ops"] for k in compiled.meta["kernels"]]
    assert ["conv2d", "relu"] in kernels  # the batch norm is folded into the convolution's weights
    src = open(compiled.meta["source"]).read()
    assert src.count("void taskloom_graph(") == 1  # every kernel and the launcher: one library


def test_torch_tensors_in_and_out(cnn):
    w, compiled = cnn
    x = torch.from_numpy(arr(2, 3, 9, 9))
    y = compiled(x)
    assert isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), torch_cnn(w, x.numpy()), rtol=1e-4, atol=1e-6)


def test_wrong_inputs_name_the_input(cnn):
    _, compiled = cnn
    with pytest.raises(ArgumentError, match="'image' must have shape"):
        compiled(arr(1, 3, 9, 9))
    with pytest.raises(ArgumentError, match="'image' must be float32"):
        compiled(arr(2, 3, 9, 9).astype(np.float64))
    with pytest.raises(ArgumentError, match=r"takes 1 input\(s\) \(image\)"):
        compiled()
    with pytest.raises(ArgumentError, match="'image' is not C-contiguous"):
        compiled(np.asfortranarray(arr(2, 3, 9, 9)))
    with pytest.raises(ArgumentError, match="'image'.*non-native byte order"):
        compiled(arr(2, 3, 9, 9).astype(">f4"))
    assert compiled(arr(2, 3, 9, 9)).shape == (2, 5)  # still usable


def test_inputs_off_the_common_path_give_the_same_result(cnn):
    """A plain float32 array takes the call's quick checks; a subclass, a read-only view and
    a torch tensor take the general ones: all four give the same numbers."""
    _, compiled = cnn
    x = arr(2, 3, 9, 9)
    want = compiled(x)
    ro = x.copy()
    ro.flags.writeable = False
    class Sub(np.ndarray):
        pass

    for other in (x.view(Sub), ro, torch.from_numpy(x)):
        got = compiled(other)
        np.testing.assert_array_equal(np.asarray(got), want)


def test_torch_inputs_are_checked_like_numpy_ones(cnn):
    """Torch tensors take their own quick checks (a data pointer instead of a DLPack capsule):
    a parameter passes them, anything wrong falls to the general checks, which name it."""
    w, compiled = cnn
    x = arr(2, 3, 9, 9)
    want = torch_cnn(w, x)
    got = compiled(torch.nn.Parameter(torch.from_numpy(x), requires_grad=False))
    assert isinstance(got, torch.Tensor) and got.data_ptr() % 64 == 0  # fresh, cache-line aligned
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-6)
    with pytest.raises(ArgumentError, match="'image' must have shape"):
        compiled(torch.zeros(1, 3, 9, 9))
    with pytest.raises(ArgumentError, match="'image' must be float32"):
        compiled(torch.zeros(2, 3, 9, 9, dtype=torch.float64))
    with pytest.raises(ArgumentError, match="'image' is not C-contiguous"):
        compiled(torch.zeros(2, 3, 9, 9).transpose(2, 3))
    with pytest.raises(ArgumentError, match="'image'"):
        compiled(torch.zeros(2, 3, 9, 9, requires_grad=True))
    np.testing.assert_allclose(compiled(torch.from_numpy(x)).numpy(), want, rtol=1e-4, atol=1e-6)


def test_save_and_load_round_trip(cnn, tmp_path):
    w, compiled = cnn
    path = tmp_path / "cnn.tlm"
    compiled.save(path)
    loaded = taskloom.load(path)
    x = arr(2, 3, 9, 9)
    np.testing.assert_array_equal(loaded(x), compiled(x))


def test_a_damaged_file_is_refused(cnn, tmp_path):
    _, compiled = cnn
    path = tmp_path / "cnn.tlm"
    compiled.save(path)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(LoadError, match="damaged"):
        taskloom.load(path)
    path.write_bytes(b"not a model")
    with pytest.raises(LoadError, match="not a saved taskloom model"):
        taskloom.load(path)


def test_a_file_for_another_cpu_is_refused(cnn, tmp_path, monkeypatch):
    _, compiled = cnn
    path = tmp_path / "cnn.tlm"
    compiled.save(path)
    from taskloom.target.cpu import CpuTarget
    older = CpuTarget.host().with_isa("sse4_2")   # pretend this machine lacks AVX2 and AVX-512
    monkeypatch.setattr(CpuTarget, "host", staticmethod(lambda: older))
    with pytest.raises(LoadError, match="cannot run"):
        taskloom.load(path)


def test_memory_is_reused_along_a_chain():
    x = input((64, 64), name="x")
    y = x
    for _ in range(6):
        y = ops.softmax(ops.matmul(y, taskloom.asarray(arr(64, 64, scale=0.1))), axis=-1)
    compiled = taskloom.compile(Graph([x], [y]))
    per_tensor = 64 * 64 * 4
    assert compiled.arena_bytes <= 2 * per_tensor  # 11 intermediates, two alive at a time
    assert np.isfinite(compiled(arr(64, 64))).all()


def test_a_layer_repeated_builds_its_kernels_once():
    x = input((32, 48), name="x")
    y, weights = x, [arr(48, 48, scale=0.2) for _ in range(4)]
    for w in weights:  # four layers: the same code, different weights (softmax then a matmul
        y = ops.mul(ops.softmax(ops.matmul(y, taskloom.asarray(w)), axis=-1), 2.0)  # is not attention here)
    compiled = taskloom.compile(Graph([x], [y]))
    src = open(compiled.meta["source"]).read()
    assert len(compiled.meta["kernels"]) == 8
    assert len(re.findall(r"^void k\d+_\w+\(", src, re.M)) == 2
    xv = arr(32, 48)
    want = xv
    for w in weights:
        want = torch.softmax(torch.from_numpy(want @ w), -1).numpy() * 2
    np.testing.assert_allclose(compiled(xv), want, rtol=1e-4, atol=1e-6)


def test_outputs_that_alias_inputs_or_each_other_are_copies():
    x = input((3,), name="x")
    h = ops.relu(x)
    compiled = taskloom.compile(Graph([x], [h, x, h]))
    xv = np.array([-1.0, 0.5, 2.0], np.float32)
    a, b, c = compiled(xv)
    np.testing.assert_array_equal(a, np.maximum(xv, 0))
    np.testing.assert_array_equal(b, xv)
    np.testing.assert_array_equal(c, a)
    assert b is not xv


def test_profile_times_every_kernel_and_keeps_the_numbers(cnn):
    w, compiled = cnn
    x = arr(2, 3, 9, 9)
    with compiled.profiling() as kernels:
        assert kernels == []  # filled on leaving
        for _ in range(4):
            np.testing.assert_allclose(compiled(x), torch_cnn(w, x), rtol=1e-4, atol=1e-5)
    names = [k["name"] for k in compiled.meta["kernels"]]
    assert [k["name"] for k in kernels] == names
    assert all(k["calls"] == 4 and k["median_ms"] >= 0 for k in kernels)
    assert compiled._profile is None  # calls after the block are not timed
    again = compiled.profile(x, repeats=3, warmup=0)
    assert [k["calls"] for k in again] == [3] * len(names)
    with pytest.raises(ArgumentError, match="repeats"):
        compiled.profile(x, repeats=0)


def test_compile_reports_the_time_of_each_phase(cnn):
    _, compiled = cnn
    timings = compiled.meta["timings"]
    assert set(timings) == {"passes", "fusion", "schedule", "codegen", "cc"}
    assert all(t >= 0 for t in timings.values())
