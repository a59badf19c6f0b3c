"""Whole kernels in the emulator against numpy, on sizes that are no multiple of the tiles."""
from __future__ import annotations

import time

import numpy as np
import pytest

from taskloom.runtime.emulator import EmulatorReport, run_kernel
from tests.ir.gpu_kernels import REDUCE
from tests.runtime.emulator.kernels import BLOCK_SUM, SCALE, STAGED_COPY, build, matmul


def test_an_elementwise_kernel_with_a_predicated_edge():
    n = 1001
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    y = np.full(n + 3, -7.0, np.float32)  # past N stays untouched
    report = run_kernel(build(SCALE), [n, x, y[:n]])
    np.testing.assert_array_equal(y[:n], x * np.float32(2) + np.float32(1))
    assert (y[n:] == -7.0).all()
    assert isinstance(report, EmulatorReport) and report.grid == (4, 1, 1) and report.block == (256, 1, 1)
    assert report.instructions["global_store"] == 32  # 4 blocks of 8 warps, the last warps partly active


def test_arguments_by_name_and_launch_extents_from_scalars():
    x = np.arange(300, dtype=np.float32)
    y = np.zeros(300, np.float32)
    report = run_kernel(build(SCALE), {"x": x, "y": y, "N": np.int32(300)})
    np.testing.assert_array_equal(y, 2 * x + 1)
    assert report.grid == (2, 1, 1)


@pytest.mark.parametrize("source", [BLOCK_SUM, REDUCE], ids=["tree", "warps"])
def test_a_block_reduction_over_several_blocks(source):
    n = 1001
    x = np.random.default_rng(1).random(n).astype(np.float32)
    total = np.zeros(1, np.float32)
    report = run_kernel(build(source), [n, x, total])
    np.testing.assert_allclose(total[0], x.astype(np.float64).sum(), rtol=1e-5)
    assert report.instructions["atomic"] == 4 and report.barriers >= 4
    assert report.instructions["shuffle"] > 0


def test_a_tiled_matmul_on_odd_sizes():
    rng = np.random.default_rng(2)
    m, n, k = 70, 45, 37
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    report = run_kernel(matmul(), [m, n, k, a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert report.grid == (1, 2, 1) and report.barriers == 2 * 2 * 5


def test_a_matmul_sized_kernel_runs_in_well_under_a_second():
    fn = matmul(32, 32, 16)  # 64 x 64 x 64: 4 blocks of 256 threads
    a, b = np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)
    c = np.zeros((64, 64), np.float32)
    run_kernel(fn, [64, 64, 64, a, b, c])  # compiles
    start = time.perf_counter()
    run_kernel(fn, [64, 64, 64, a, b, c])
    assert time.perf_counter() - start < 1.0
    assert (c == 64).all()


def test_a_double_buffered_cp_async_copy():
    for n in (2000, 1537, 77):
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        y = np.zeros(n, np.float32)
        report = run_kernel(build(STAGED_COPY), [n, x, y])
        np.testing.assert_array_equal(y, x)
    assert report.instructions["cp_async"] > 0


def test_without_the_wait_the_copy_reads_stale_shared_memory():
    n = 2000
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    run_kernel(build(STAGED_COPY.replace("cp_async_wait(1)", "pass")), [n, x, y])
    assert not np.array_equal(y, x)
    # waiting for the newest group too (wait 0) is slower on the device but as right
    y[:] = 0
    run_kernel(build(STAGED_COPY.replace("cp_async_wait(1)", "cp_async_wait(0)")), [n, x, y])
    np.testing.assert_array_equal(y, x)


def test_waiting_for_too_few_groups_reads_the_tile_before_it_lands():
    n = 2000
    x = np.random.default_rng(4).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    run_kernel(build(STAGED_COPY.replace("cp_async_wait(1)", "cp_async_wait(2)")), [n, x, y])
    assert not np.array_equal(y, x)


def test_large_grids_run_in_batches_of_blocks(monkeypatch):
    from taskloom.runtime.emulator import launch
    monkeypatch.setattr(launch, "MAX_LANES", 512)  # two blocks of 256 threads at a time
    n = 1500
    x = np.random.default_rng(5).random(n).astype(np.float32)
    total = np.zeros(1, np.float32)
    report = run_kernel(build(BLOCK_SUM), [n, x, total])
    np.testing.assert_allclose(total[0], x.astype(np.float64).sum(), rtol=1e-5)
    assert report.barriers == 6 * 4 and report.instructions["atomic"] == 6


ODD_BLOCK = '''
@kernel(kind='cuda_kernel', grid=(2, 1, 1), block=(12, 4, 1))
def reverse(x: f32[96], y: f32[96]):
    s = shared_tensor(f32, [48])
    t = threadIdx.y * 12 + threadIdx.x
    s[t] = x[blockIdx.x * 48 + t]
    barrier()
    y[blockIdx.x * 48 + t] = s[47 - t]
'''


def test_a_block_that_is_no_whole_number_of_warps(capsys):
    x, y = np.arange(96, dtype=np.float32), np.zeros(96, np.float32)
    report = run_kernel(build(ODD_BLOCK), [x, y], verbose=True)
    np.testing.assert_array_equal(y, x.reshape(2, 48)[:, ::-1].reshape(-1))
    assert report.instructions["barrier"] == 4 and report.barriers == 2
    assert "kernel 'reverse': grid (2, 1, 1) x block (12, 4, 1)" in capsys.readouterr().out
