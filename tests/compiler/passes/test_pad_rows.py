"""Row padding for the GPU's matmul template: factors whose rows do not start on 16 bytes are
read through a padded copy (a constant padded once, a computed factor by a kernel of its own
that fusion keeps), each reader through a slice it fuses as a prologue."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.compiler.passes.pad_rows import MIN_PRODUCT, pad_rows
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.target import CudaTarget
from tests.compiler.passes.helpers import ops_of

rng = np.random.default_rng(0)
GPU, TF32 = CudaTarget.from_arch("sm_90a"), CudaTarget.from_string("cuda:sm_90a -tf32")


def half(*shape):
    return rng.standard_normal(shape).astype(np.float16)


def test_a_computed_factor_is_padded_by_a_kernel_and_a_constant_here():
    a = input((600, 301), "float16", name="a")  # 301 columns: rows 602 bytes apart
    w = taskloom.asarray(half(200, 301))
    g = pad_rows(Graph([a], [ops.linear(a, w), ops.relu(ops.matmul(a, taskloom.asarray(half(301, 128))))]), GPU)
    assert ops_of(g) == ["pad", "slice", "slice", "linear", "slice", "matmul", "relu"]
    pad = g.nodes[0]
    assert pad.materialize and pad.inputs[0] is a and pad.outputs[0].shape == (600, 304)
    linear = next(n for n in g.nodes if n.op == "linear")
    weight = linear.inputs[1].producer[0].inputs[0]  # the slice's input: the padded constant
    assert weight.is_concrete and weight.shape == (200, 304) and not weight.numpy()[:, 301:].any()
    np.testing.assert_array_equal(weight.numpy()[:, :301], w.numpy())
    # one pad, a slice per reader: each fuses into its matmul, the pad into none
    groups = [grp.ops for grp in fuse_graph(g)]
    assert groups == [["pad"], ["slice", "slice", "linear"], ["slice", "matmul", "relu"]]


def test_aligned_rows_small_products_other_types_and_the_cpu_are_left_alone():
    a, b = input((64, 64), "float16", name="a"), input((64, 8), "float16", name="b")
    aligned = Graph([a, b], [ops.matmul(a, b)])
    assert pad_rows(aligned, GPU) is aligned
    x, y = input((20, 30), "float16", name="x"), input((30, 20), "float16", name="y")
    small = Graph([x, y], [ops.matmul(x, y)])  # 12,000 multiply-adds: not worth a copy
    assert 20 * 20 * 30 < MIN_PRODUCT and pad_rows(small, GPU) is small
    # a transposed a of (1, K, M): K = 12 makes 12 x 12 x 3000 multiply-adds, too few to copy for
    t, u = input((1, 12, 3000), "float16", name="t"), input((1, 12, 12), "float16", name="u")
    transposed = Graph([t, u], [ops.batch_matmul(t, u, transpose_a=True)])
    assert pad_rows(transposed, GPU) is transposed
    p, q = input((300, 301)), input((301, 300))  # float32: rows of 300 are 16-byte aligned
    single = Graph([p, q], [ops.matmul(p, q)])
    assert pad_rows(single, GPU) is single  # float32 without tf32: CUDA cores, any row
    assert ops_of(pad_rows(single, TF32)) == ["pad", "slice", "matmul"]
    assert pad_rows(single, taskloom.host_target()) is single


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("dtype, target", [("float16", "cuda:sm_90a"), ("float32", "cuda:sm_80 -tf32")])
def test_odd_products_run_on_cp_async_to_numpys_answer(dtype, target):
    a, b = input((2, 259, 261), dtype, name="a"), input((2, 261, 263), dtype, name="b")
    w = taskloom.asarray(rng.standard_normal((128, 261)).astype(dtype))
    model = taskloom.compile(Graph([a, b], [ops.matmul(a, b), ops.linear(a, w)]), target=target, device="emulator")
    schedules = {k["name"]: k["schedule"] for k in model.meta["kernels"]}
    mms = [s for s in schedules.values() if s.startswith(("matmul_mma", "matmul_wgmma"))]
    assert len(mms) == 2 and all(name.endswith("pad") for name, s in schedules.items() if s not in mms)
    x, y = rng.standard_normal((2, 259, 261)).astype(dtype), rng.standard_normal((2, 261, 263)).astype(dtype)
    product, linear = model(x, y)
    tol = dict(rtol=5e-3, atol=6e-2) if dtype == "float16" else dict(rtol=3e-3, atol=3e-2)
    np.testing.assert_allclose(product.astype(np.float32), x.astype(np.float32) @ y.astype(np.float32), **tol)
    np.testing.assert_allclose(linear.astype(np.float32), x.astype(np.float32) @ w.numpy().astype(np.float32).T, **tol)
    mm_reports = [r for r, k in zip(model.last_reports, model.meta["kernels"]) if k["schedule"] in mms]
    assert all(r.instructions["cp_async"] == r.counters.global_load_requests for r in mm_reports)
