"""Graphs compiled for a CUDA target: one nvcc-built library of kernels and a host launcher,
run in the SIMT emulator on every machine (and on the GPU under ``-m cuda``), checked
against the CPU compiler and against torch on a small transformer exported to ONNX."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.errors import IndexOutOfRange, TaskloomError
from taskloom.graph import Graph, input

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
TARGET = "cuda:sm_90"
rng = np.random.default_rng(0)


def const(*shape):
    return taskloom.asarray(rng.standard_normal(shape).astype(np.float32))


def mlp() -> Graph:
    """Two layers, a softmax, and a second output that is an intermediate of the first."""
    x = input((4, 16), name="x")
    h = ops.relu(ops.matmul(x, const(16, 32)) + const(32))
    return Graph([x], [ops.softmax(ops.matmul(h, const(32, 8)), axis=-1), h])


def test_a_graph_runs_in_the_emulator_as_on_the_cpu():
    graph = mlp()
    model = taskloom.compile(graph, target=TARGET, device="emulator")
    x = rng.standard_normal((4, 16)).astype(np.float32)
    for got, want in zip(model(x), taskloom.compile(graph)(x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    source = model.source_path.read_text()
    assert 'extern "C" int taskloom_graph(' in source and source.count("launch_k") >= 2 * 3
    assert len(model.last_reports) == len(model.meta["kernels"]) == 3


def test_bfloat16_tensors_in_and_out_of_the_emulator():
    torch = pytest.importorskip("torch")
    x = input((3, 8), "bfloat16", name="x")
    model = taskloom.compile(Graph([x], [ops.relu(x) * 2.0]), target=TARGET, device="emulator")
    t = torch.randn(3, 8).to(torch.bfloat16)
    got = model(t)
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, torch.relu(t) * 2)


def test_bad_inputs_and_unsupported_uses_are_clear_errors():
    model = taskloom.compile(mlp(), target=TARGET, device="emulator")
    with pytest.raises(TaskloomError, match="input 'x' must be float32 of shape"):
        model(np.zeros((4, 15), np.float32))
    with pytest.raises(TaskloomError, match="takes 1 inputs"):
        model()
    with pytest.raises(TaskloomError, match="device='gpu' is not a CUDA device"):
        taskloom.compile(mlp(), target=TARGET, device="gpu")
    with pytest.raises(TaskloomError, match="applies to CUDA targets"):
        taskloom.compile(mlp(), device="emulator")


def test_a_bad_index_in_a_cuda_graph_raises_and_the_model_stays_usable():
    ids = input((2, 3), "int64", name="ids")
    table = const(10, 4)
    model = taskloom.compile(Graph([ids], [ops.relu(ops.embedding(ids, table))]), target=TARGET, device="emulator")
    good = np.array([[9, 0, 3], [1, 1, 2]])
    want = np.maximum(table.numpy()[good], 0)
    np.testing.assert_array_equal(model(good), want)
    with pytest.raises(IndexOutOfRange, match=r"embedding\(\).*index 10,"):
        model(np.array([[9, 0, 10], [1, 1, 2]]))
    np.testing.assert_array_equal(model(good), want)


def _encoder_onnx():
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from tests.frontend.test_onnx import Encoder, export
    torch.manual_seed(0)
    module = Encoder().eval()
    x = torch.randn(1, 8, 32)
    return module, x, export(module, x, "torchscript")


def test_a_transformer_layer_from_onnx_matches_torch_in_the_emulator():
    torch = pytest.importorskip("torch")
    module, x, model = _encoder_onnx()
    compiled = taskloom.compile(model, target=TARGET, device="emulator")
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(compiled(x.numpy()), want, rtol=1e-4, atol=1e-5)


@pytest.mark.cuda
def test_on_the_gpu_a_graph_matches_the_emulator_and_loads_from_a_file(tmp_path):
    torch = pytest.importorskip("torch")
    graph = mlp()
    x = rng.standard_normal((4, 16)).astype(np.float32)
    on_gpu = taskloom.compile(graph, target="cuda", device="cuda")
    in_emulator = taskloom.compile(graph, target="cuda", device="emulator")
    for got, want in zip(on_gpu(torch.from_numpy(x).cuda()), in_emulator(x)):
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-6)
    in_emulator.save(tmp_path / "mlp.tlm")  # saved by the emulator's model, run on the GPU
    for got, want in zip(taskloom.load(tmp_path / "mlp.tlm")(torch.from_numpy(x).cuda()), in_emulator(x)):
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.parametrize("graphs", ["1", "0"])
@pytest.mark.parametrize("pdl", ["0", "1"])  # each kernel launched as the one before's dependent, or not
def test_on_the_gpu_calls_replay_one_captured_cuda_graph(graphs, pdl, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TASKLOOM_CUDA_GRAPHS", graphs)
    monkeypatch.setenv("TASKLOOM_PDL", pdl)
    graph = mlp()
    on_gpu = taskloom.compile(graph, target="cuda", device="cuda")
    in_emulator = taskloom.compile(graph, target="cuda", device="emulator")
    xs = [rng.standard_normal((4, 16)).astype(np.float32) for _ in range(3)]
    with torch.inference_mode():  # the graph's buffers are made here, and written outside it below
        results = [on_gpu(torch.from_numpy(xs[0]).cuda())]
    results += [on_gpu(torch.from_numpy(x).cuda()) for x in xs[1:]]  # each call's outputs stay its own
    assert bool(on_gpu._gpu.replays) == (graphs == "1")
    for x, got in zip(xs, results):
        for g, want in zip(got, in_emulator(x)):
            np.testing.assert_allclose(g.cpu().numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
def test_on_the_gpu_a_replayed_graph_still_checks_its_indices(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("TASKLOOM_CUDA_GRAPHS", "1")  # (one kernel: a replay would not pay by itself)
    ids = input((2, 3), "int64", name="ids")
    table = const(10, 4)
    model = taskloom.compile(Graph([ids], [ops.relu(ops.embedding(ids, table))]), target="cuda", device="cuda")
    good = torch.tensor([[9, 0, 3], [1, 1, 2]], device="cuda")
    want = np.maximum(table.numpy()[good.cpu().numpy()], 0)
    np.testing.assert_array_equal(model(good).cpu().numpy(), want)
    assert model._gpu.replays
    with pytest.raises(IndexOutOfRange, match=r"embedding\(\).*index 10,"):
        model(torch.tensor([[9, 0, 10], [1, 1, 2]], device="cuda"))
    np.testing.assert_array_equal(model(good).cpu().numpy(), want)


def test_a_replay_is_wanted_for_many_launches_and_small_copies():
    from taskloom.runtime.cuda_graph import replay_pays
    spec = lambda shape: {"dtype": "float16", "shape": list(shape)}  # noqa: E731
    model = {"inputs": [spec((1, 128))], "outputs": [spec((1, 128, 768))], "calls": [{}] * 122}
    product = {"inputs": [spec((4096, 4096))] * 2, "outputs": [spec((4096, 4096))], "calls": [{}]}
    dynamic = {"inputs": [{"dtype": "float16", "shape": ["batch", 8]}], "outputs": [], "calls": [{}]}
    assert replay_pays(model) and not replay_pays(product) and replay_pays(dynamic)


def test_a_cuda_graph_saves_here_and_loads_in_the_emulator(tmp_path):
    graph = mlp()
    model = taskloom.compile(graph, target=TARGET, device="emulator")
    x = rng.standard_normal((4, 16)).astype(np.float32)
    model.save(tmp_path / "mlp.tlm")
    loaded = taskloom.load(tmp_path / "mlp.tlm", device="emulator")
    for got, want in zip(loaded(x), model(x)):
        np.testing.assert_array_equal(got, want)
    loaded.save(tmp_path / "again.tlm")  # a loaded model saves as it was
    assert (tmp_path / "again.tlm").read_bytes() == (tmp_path / "mlp.tlm").read_bytes()
    with pytest.raises(TaskloomError, match="needs an NVIDIA GPU"):
        taskloom.load(tmp_path / "mlp.tlm")  # device="cuda", and this machine has no GPU


def test_a_damaged_or_edited_cuda_file_is_refused(tmp_path):
    import json
    from taskloom.errors import LoadError
    from taskloom.runtime import saved_file
    model = taskloom.compile(mlp(), target=TARGET, device="emulator")
    model.save(tmp_path / "m.tlm")
    data = bytearray((tmp_path / "m.tlm").read_bytes())
    data[len(data) // 2] ^= 1
    (tmp_path / "bad.tlm").write_bytes(bytes(data))
    with pytest.raises(LoadError):
        taskloom.load(tmp_path / "bad.tlm", device="emulator")
    # an edited kernel, with the checksum recomputed: the library's record still refuses it
    meta, constants, lib = saved_file.open_saved(tmp_path / "m.tlm", load=False)
    meta = json.loads(json.dumps(meta))
    meta["kernel_ir"][0] = meta["kernel_ir"][0].replace("0.0", "1.0")
    saved_file.save_file(tmp_path / "edited.tlm", meta, lib, constants, None)
    with pytest.raises(LoadError, match="kernel_ir_sha256"):
        taskloom.load(tmp_path / "edited.tlm", device="emulator")


def test_half_precision_math_mixes_with_half_tensors():
    x, y = input((300,), "float16", name="x"), input((300,), "float16", name="y")
    graph = Graph([x, y], [ops.add(ops.tanh(x), y)])  # tanh computes in float, rounds to __half
    a = np.linspace(-3, 3, 300).astype(np.float16)
    got = taskloom.compile(graph, target="cuda:sm_80", device="emulator")(a, a)
    np.testing.assert_allclose(got.astype(np.float32), (np.tanh(a.astype(np.float32)).astype(np.float16)
                                                       + a).astype(np.float32), rtol=2e-3, atol=2e-3)
