"""Dynamic graphs on a CUDA target: one compile serves every size in range, the
tensor-core template in variants the model chose per sample point, the arena planned per
call; in the emulator here, and on the GPU (with a captured call per size) under ``-m cuda``."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.errors import ArgumentError
from taskloom.graph import Graph
from taskloom.graph.tensor import Tensor, symbol
from taskloom.ir import dtypes as T

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
rng = np.random.default_rng(3)
W1 = (rng.standard_normal((96, 64)) * 0.2).astype(np.float16)
W2 = (rng.standard_normal((256, 128)) * 0.2).astype(np.float16)


def block() -> Graph:
    """A linear on tensor cores (symbolic rows), relu, softmax, and a row mean."""
    x = Tensor((symbol("batch"), symbol("seq"), 64), T.float16, name="x")
    y = ops.softmax(ops.relu(ops.linear(x, taskloom.asarray(W1))), -1)
    return Graph([x], [y, ops.mean(y, -1)])


def reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.maximum(x.astype(np.float32) @ W1.T.astype(np.float32), 0).astype(np.float16).astype(np.float32)
    e = np.exp(h - h.max(-1, keepdims=True))
    y = e / e.sum(-1, keepdims=True)
    return y, y.mean(-1)


@pytest.fixture(scope="module", params=["sm_80", "sm_90a"])
def model(request):
    return taskloom.compile(block(), target=f"cuda:{request.param}", device="emulator",
                            dynamic={"batch": (1, 8), "seq": (1, 512)})


def test_one_compile_serves_every_size_and_the_arena_grows(model):
    assert model.meta["kernels"][0]["schedule"].startswith(("matmul_mma", "matmul_wgmma"))
    for batch, seq in ((1, 1), (3, 45), (2, 7), (8, 130), (1, 2)):  # larger, then smaller, sizes
        x = rng.standard_normal((batch, seq, 64)).astype(np.float16)
        y, mean = model(x)
        want_y, want_mean = reference(x)
        assert y.shape == (batch, seq, 96) and mean.shape == (batch, seq)
        np.testing.assert_allclose(y.astype(np.float32), want_y, rtol=2e-2, atol=2e-3)
        np.testing.assert_allclose(mean, want_mean, rtol=1e-3, atol=1e-5)


def test_a_size_out_of_range_or_a_wrong_static_size_is_named(model):
    with pytest.raises(ArgumentError, match=r"seq=513; the model was compiled for seq from 1 to 512"):
        model(np.zeros((1, 513, 64), np.float16))
    with pytest.raises(ArgumentError, match=r"input 'x' dimension 2 must be 64"):
        model(np.zeros((1, 4, 63), np.float16))
    with pytest.raises(ArgumentError, match=r"input 'x' must be float16"):
        model(np.zeros((1, 4, 64), np.float32))


def test_a_saved_dynamic_model_loads_and_serves_other_sizes(model, tmp_path):
    model.save(tmp_path / "dynamic.tlm")
    again = taskloom.load(tmp_path / "dynamic.tlm", device="emulator")
    x = rng.standard_normal((2, 33, 64)).astype(np.float16)
    for got, want in zip(again(x), model(x)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_template_runs_the_variant_chosen_for_the_calls_rows(arch):
    x = Tensor((symbol("rows"), 128), T.float16, name="x")
    model = taskloom.compile(Graph([x], [ops.linear(x, taskloom.asarray(W2))]), target=f"cuda:{arch}",
                             device="emulator", dynamic={"rows": (1, 4096)})
    [table] = model.meta["dynamic"]["variants"]
    assert len(set(table)) == 2 and "_v1" in model.source_path.read_text()  # a small tile, then a larger one
    source = model.source_path.read_text()
    launcher = source[source.index('extern "C" int taskloom_graph('):]
    assert "const int64_t* sym, const int64_t* off, const int64_t* var, void* stream" in launcher
    assert "switch (var[0])" in launcher and "case 1: if ((error = launch_k0_linear_v1((int32_t)(sym[0])" in launcher
    if arch == "sm_90a":  # x's symbolic rows come by TMA too: its map's extent is the launch's rows
        assert "x as 128 x rows" in source
    for rows, variant in ((5, 0), (2500, 1)):  # nearest the ladder's rungs 8 and 4096
        x = rng.standard_normal((rows, 128)).astype(np.float16)
        np.testing.assert_allclose(model(x).astype(np.float32), x.astype(np.float32) @ W2.T.astype(np.float32),
                                   rtol=2e-3, atol=2e-2)
        assert model.last_reports[0].kernel.endswith("_v1") == (variant == 1)


@pytest.mark.cuda
def test_on_the_gpu_a_dynamic_graph_matches_the_emulator_at_each_size():
    torch = pytest.importorskip("torch")
    on_gpu = taskloom.compile(block(), target="cuda", device="cuda", dynamic={"batch": (1, 8), "seq": (1, 512)})
    in_emulator = taskloom.compile(block(), target="cuda", device="emulator",
                                   dynamic={"batch": (1, 8), "seq": (1, 512)})
    # the largest first (a grown arena drops the calls captured before); a size again replays
    for batch, seq in ((8, 130), (1, 1), (2, 7), (8, 130)):
        x = rng.standard_normal((batch, seq, 64)).astype(np.float16)
        for got, want in zip(on_gpu(torch.from_numpy(x).cuda()), in_emulator(x)):
            np.testing.assert_allclose(got.cpu().float().numpy(), want.astype(np.float32), rtol=2e-3, atol=1e-3)
    assert len(on_gpu._gpu.replays) == 3


def test_attention_with_symbolic_batch_and_length_runs_on_its_template():
    torch = pytest.importorskip("torch")
    B, L, H, D = symbol("batch"), symbol("seq"), 2, 32
    ins = [Tensor((B, L, H, D), T.float16, name=x) for x in "qkv"]
    mask = Tensor((B, 1, 1, L), T.float32, name="mask")
    out = ops.attention(*(ops.permute(t, (0, 2, 1, 3)) for t in ins), mask=mask)
    model = taskloom.compile(Graph([*ins, mask], [out]), target="cuda:sm_80", device="emulator",
                             dynamic={"batch": (1, 4), "seq": (1, 256)})
    assert model.meta["kernels"][0]["schedule"].startswith("attention_cuda")
    for b, n in ((1, 5), (2, 70)):  # one ragged block of keys; two
        data = {x: torch.randn(b, n, H, D, dtype=torch.float16) for x in "qkv"}
        m = torch.where(torch.rand(b, 1, 1, n) < 0.2, -1e4, 0.0)
        want = torch.nn.functional.scaled_dot_product_attention(
            *(data[x].float().permute(0, 2, 1, 3) for x in "qkv"), attn_mask=m)
        torch.testing.assert_close(model(data["q"], data["k"], data["v"], m).float(), want, rtol=2e-3, atol=2e-3)
    assert model.last_reports[0].counters.bank_conflicts == 0


def test_a_row_start_is_proved_aligned_for_every_symbolic_value():
    from taskloom.ir import expr as E
    from taskloom.schedule.cuda.matmul_mma import multiple_of
    b, s = E.Var("b", T.int32), E.Var("s", T.int32)
    assert multiple_of((b // 2) * s * 64 + (b % 2) * 32, 8)
    assert multiple_of(E.as_expr(4) * (s * 2), 8) and not multiple_of(E.as_expr(4) * s, 8)
    assert not multiple_of(b * 64 + s, 8) and not multiple_of(b // 2, 8)


def test_a_tensor_maps_symbolic_extent_is_a_product_of_sizes():
    from taskloom.errors import IRError
    from taskloom.ir import expr as E
    from taskloom.ir import gpu
    b, s = E.Var("batch", T.int32), E.Var("seq", T.int32)
    assert gpu.product_text(b * s) == "batch*seq" and gpu.product_text(b * 64) == "batch*64"
    assert gpu.product_text(b + s) is None and gpu.product_text(b // 2) is None
    assert gpu.map_extent("batch*seq*2", {"batch": 3, "seq": 7}.__getitem__) == 42
    with pytest.raises(IRError, match="product of size parameters"):
        gpu.TensorMap("m", "x", (64, "batch + 1"), (128,), (64, 64))
