"""The CUDA rule-based scheduler: every operator's fused task becomes a CUDA kernel that nvcc
builds and the SIMT emulator runs to numpy's answer, on odd shapes."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.errors import IndexOutOfRange
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.ir import gpu
from taskloom.schedule.cuda import schedule_task_cuda
from taskloom.target import CudaTarget

A100 = CudaTarget.from_arch("sm_80")
rng = np.random.default_rng(0)


def graphs():
    """(name, graph, inputs, numpy reference) for a spread of operators."""
    x = input((3, 37), name="x")
    b = input((37,), name="b")
    yield "bias_gelu", Graph([x, b], [ops.gelu(x + b)]), lambda xs: _gelu(xs[0] + xs[1])
    yield "softmax", Graph([x], [ops.softmax(x, axis=-1)]), lambda xs: _softmax(xs[0])
    yield "sum_axis0", Graph([x], [ops.sum(x, axis=0)]), lambda xs: xs[0].sum(axis=0)
    w = input((37, 5), name="w")
    yield "matmul_relu", Graph([x, w], [ops.relu(ops.matmul(x, w))]), lambda xs: np.maximum(xs[0] @ xs[1], 0)
    t = input((2, 3, 5), name="t")
    yield "transpose", Graph([t], [ops.transpose(t, 0, 2) * 2.0]), lambda xs: xs[0].transpose(2, 1, 0) * 2
    long = input((3, 2, 1500), name="long")
    yield "layer_norm_block_rows", Graph([long], [ops.layer_norm(long, (1500,))]), \
        lambda xs: (xs[0] - xs[0].mean(-1, keepdims=True)) / np.sqrt(xs[0].var(-1, keepdims=True) + 1e-5)
    yield "max_last_axis", Graph([x], [ops.max(x, axis=-1)]), lambda xs: xs[0].max(axis=-1)
    image = input((2, 3, 9, 11), name="image")
    yield "avg_pool_3x3", Graph([image], [ops.avg_pool2d(image, 3, stride=1, padding=1)]), \
        lambda xs: _avg_pool_3x3(xs[0])
    table = input((7, 5), name="table")
    yield "embedding", Graph([table], [ops.embedding(taskloom.asarray(IDS), table, wrap=True)]), \
        lambda xs: xs[0][IDS]
    yield "scatter_add", Graph([table], [ops.scatter(table, 0, taskloom.asarray(IDS[:, None].repeat(5, 1)),
                                                     taskloom.asarray(np.ones((4, 5), np.float32)), "add", wrap=True)]), \
        lambda xs: _scatter_add(xs[0], IDS)


IDS = np.array([6, 0, -1, 3])


def _scatter_add(table, ids):
    out = table.copy()
    np.add.at(out, ids, 1.0)
    return out


def _avg_pool_3x3(v):
    """3x3 average, stride 1, zero padding 1 counted (torch's default count_include_pad)."""
    p = np.pad(v, ((0, 0), (0, 0), (1, 1), (1, 1)))
    return sum(p[:, :, i:i + v.shape[2], j:j + v.shape[3]] for i in range(3) for j in range(3)) / 9


def _gelu(v):
    from math import erf
    return 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2)))


def _softmax(v):
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


CASES = list(graphs())


@pytest.mark.parametrize("name, graph, reference", CASES, ids=[c[0] for c in CASES])
def test_every_group_becomes_a_cuda_kernel(name, graph, reference):
    for group in fuse_graph(graph):
        fn = schedule_task_cuda(group.task, A100)
        grid, block, _ = gpu.launch_dims(fn)
        assert fn.kind == "cuda_kernel" and int(block[0].value) == 256
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("name, graph, reference", CASES, ids=[c[0] for c in CASES])
def test_the_emulator_runs_each_kernel_to_numpys_answer(name, graph, reference):
    inputs = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in graph.inputs]
    [group] = fuse_graph(graph)  # each graph here is one fused group
    task = group.task
    fn = schedule_task_cuda(task, A100)
    kernel = taskloom.build(fn, target=A100, device="emulator")[fn.name]
    out = np.zeros(tuple(int(d) for d in graph.outputs[0].shape), np.float32)
    by_input = {id(t): a for t, a in zip(graph.inputs, inputs)}
    args = [by_input[id(t)] if id(t) in by_input else t.numpy() for t in group.inputs] + [out]  # constants too
    kernel(*args)
    np.testing.assert_allclose(out, reference(inputs), rtol=2e-5, atol=2e-5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_bad_index_in_the_emulator_is_reported_as_on_the_device():
    ids, table = input((4,), "int64", name="ids"), input((7, 5), name="table")
    [group] = fuse_graph(Graph([ids, table], [ops.relu(ops.embedding(ids, table))]))
    fn = schedule_task_cuda(group.task, A100)
    module = taskloom.build(fn, target=A100, device="emulator")
    assert "tl_index(" in module.source_path.read_text() and "taskloom_checks[]" in module.source_path.read_text()
    kernel = module[fn.name]
    weights, out = rng.standard_normal((7, 5)).astype(np.float32), np.zeros((4, 5), np.float32)
    kernel(np.array([6, 0, 2, 3]), weights, out)
    np.testing.assert_array_equal(out, np.maximum(weights[[6, 0, 2, 3]], 0))
    with pytest.raises(IndexOutOfRange, match=r"embedding\(\): 'indices'.* index 7,.*valid indices: 0..6"):
        kernel(np.array([6, 0, 7, -1]), weights, out)


ROWS = {"softmax": "a warp a row", "layer_norm_block_rows": "a block a row", "max_last_axis": "a warp a row",
        "matmul_relu": "a thread an element", "bias_gelu": "a thread an element",
        "avg_pool_3x3": "a thread an element"}  # a window of 9: too short for a warp to share


@pytest.mark.parametrize("name", sorted(ROWS))
def test_row_reductions_take_a_warp_or_a_block_a_row(name):
    graph = next(g for n, g, _ in CASES if n == name)
    [group] = fuse_graph(graph)
    assert ROWS[name] in schedule_task_cuda(group.task, A100).attr("doc")


def test_a_row_kernel_s_text_is_the_same_every_compile():
    # the kernel's text is its build's cache key: a BERT embedding layer norm (three inputs
    # held in registers) must print the same in every process, whatever its string hashes
    import subprocess
    import sys
    script = ("from taskloom import ops; from taskloom.graph import Graph, input; "
              "from taskloom.graph.fusion import fuse_graph; from taskloom.ir.printer import function_text; "
              "from taskloom.schedule.cuda import schedule_task_cuda; from taskloom.target import CudaTarget; "
              "x, y, z = (input((16, 768), name=n) for n in 'xyz'); "
              "[g] = fuse_graph(Graph([x, y, z], [ops.layer_norm(ops.add(ops.add(x, y), z), (768,))])); "
              "print(function_text(schedule_task_cuda(g.task, CudaTarget.from_arch('sm_80'))))")
    texts = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(4)}
    assert len(texts) == 1


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_a_row_per_warp_reads_each_element_once_and_coalesced():
    x = input((64, 256), name="x")
    [group] = fuse_graph(Graph([x], [ops.softmax(x, axis=-1)]))
    fn = schedule_task_cuda(group.task, A100)
    out = np.zeros((64, 256), np.float32)
    report = taskloom.build(fn, target=A100, device="emulator")[fn.name](rng.standard_normal((64, 256)).astype(np.float32), out)
    c = report.counters
    # each row loaded once into registers (the max, the sum and the elements read them there):
    # 8 warp requests a row, 4 sectors each
    assert "the row held in registers" in fn.attr("doc")
    assert c.global_load_requests == 64 * 8 and c.global_load_sectors == 4 * c.global_load_requests
    np.testing.assert_allclose(out.sum(axis=-1), 1.0, rtol=1e-5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_every_kernel_builds_for_hopper_without_spills():
    hopper = CudaTarget.from_arch("sm_90a")
    fns = [schedule_task_cuda(group.task, hopper, f"{name}_{k}")
           for name, graph, _ in CASES for k, group in enumerate(fuse_graph(graph))]
    module = taskloom.build(fns, target=hopper, device="emulator")
    assert all(not r.spills for r in module.built.resources.values()), module.built.resources


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("op", ["layer_norm", "mean"])
def test_half_precision_rows_reduce_in_float32(op):
    x = input((4, 1500), "float16", name="x")  # a block a row: partials meet in shared memory too
    y = ops.layer_norm(x, (1500,)) if op == "layer_norm" else ops.mean(x, axis=-1)
    [group] = fuse_graph(Graph([x], [y]))
    fn = schedule_task_cuda(group.task, A100)
    assert "a block a row" in fn.attr("doc")
    data = (rng.standard_normal((4, 1500)) + 3).astype(np.float16)
    out = np.zeros(tuple(int(d) for d in y.shape), np.float16)
    taskloom.build(fn, target=A100, device="emulator")[fn.name](data, out)
    v = data.astype(np.float32)
    want = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5) if op == "layer_norm" \
        else v.mean(-1)
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=2e-3, atol=5e-3)


def test_a_reduction_inside_one_that_it_reads_the_axes_of_is_computed_in_its_loop():
    """float32 attention goes to the rules: a key's score (a sum over the head) inside the
    softmax's max and sum over keys, the max computed once before the sum."""
    torch = pytest.importorskip("torch")
    ins = [input((2, 5, 3, 24), name=x) for x in "qkv"]  # float32, head size 24: not the template's
    out = ops.attention(*(ops.permute(t, (0, 2, 1, 3)) for t in ins), causal=True)
    [group] = [g for g in fuse_graph(Graph(ins, [out])) if "attention" in g.ops]
    fn = schedule_task_cuda(group.task, A100, "att")
    module = taskloom.build(fn, target=A100, device="emulator")
    data = [torch.randn(2, 5, 3, 24) for _ in ins]
    got = torch.zeros(2, 3, 5, 24)
    module["att"](*[data["qkv".index(t.name)] for t in group.inputs], got)
    want = torch.nn.functional.scaled_dot_product_attention(*(d.permute(0, 2, 1, 3) for d in data), is_causal=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    source = module.built.source_path.read_text()
    loops = [line.strip() for line in source.splitlines() if line.strip().startswith("for (int32_t")]
    assert len(loops) == 2 * 4  # max then sum, each over keys, each key's score over the head; twice
