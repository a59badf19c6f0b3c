"""The memory checker: each planted error raises, naming kernel, buffer, index, thread and block."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from taskloom.errors import ArgumentError, TaskloomError
from taskloom.ir import stmt as S
from taskloom.ir.gpu import cuda_kernel
from taskloom.runtime.emulator import DivergenceError, EmulatorError, OutOfBoundsError, RaceError, run_kernel
from taskloom.script import parse_source
from tests.runtime.emulator.kernels import SCALE, WIDE_SCALE, build

UNGUARDED = '''
@kernel(kind='cuda_kernel', grid=('(N + 255) // 256', 1, 1), block=(256, 1, 1))
def scale(N: i32, x: f32[N], y: f32[N]):
    i = blockIdx.x * 256 + threadIdx.x
    v: f32 = 0.0
    if i < N:
        v = x[i]
    y[i] = v * 2.0
'''


def test_an_out_of_bounds_global_write():
    with pytest.raises(OutOfBoundsError) as e:
        run_kernel(build(UNGUARDED), [1000, np.zeros(1000, np.float32), np.zeros(1000, np.float32)])
    err = e.value
    assert isinstance(err, EmulatorError) and isinstance(err, TaskloomError)
    assert (err.kernel, err.buffer, err.index, err.thread, err.block) == ("scale", "y", 1000, (232, 0, 0), (3, 0, 0))
    assert str(err) == ("kernel 'scale': thread (232, 0, 0) of block (3, 0, 0) stores to global buffer 'y' at "
                        "index 1000, outside its 1000 elements")


def test_a_wide_copy_off_its_grid_is_caught():
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    report = run_kernel(build(WIDE_SCALE), [64, x, y, 0])
    np.testing.assert_array_equal(y, 2 * x)
    c = report.counters  # 16 threads, one warp: one request each way, 256 bytes = 8 sectors
    assert (c.global_load_requests, c.global_load_sectors, c.global_store_requests) == (1, 8, 1)
    with pytest.raises(OutOfBoundsError, match=r"thread \(0, 0, 0\) of block \(0, 0, 0\) copies 16 bytes at "
                       r"once from global buffer 'x' at index 1, an address not aligned to 16 bytes"):
        run_kernel(build(WIDE_SCALE), [64, x, y, 1])


def test_a_guarded_kernel_reads_nothing_out_of_bounds():
    run_kernel(build(SCALE), [1000, np.zeros(1000, np.float32), np.zeros(1000, np.float32)])


SHARED_READ = '''
@kernel(kind='cuda_kernel', grid=(2, 1, 1), block=(32, 2, 1))
def shift(x: f32[128], y: f32[128]):
    s = shared_tensor(f32, [64])
    t = threadIdx.y * 32 + threadIdx.x
    s[t] = x[blockIdx.x * 64 + t]
    barrier()
    y[blockIdx.x * 64 + t] = s[t + 1]
'''


def test_an_out_of_bounds_shared_read():
    with pytest.raises(OutOfBoundsError, match=r"kernel 'shift': thread \(31, 1, 0\) of block \(0, 0, 0\) loads "
                                               r"from shared buffer 's' at index 64, outside its 64 elements"):
        run_kernel(build(SHARED_READ), [np.zeros(128, np.float32), np.zeros(128, np.float32)])


DIVERGENT = '''
@kernel(kind='cuda_kernel', grid=(2, 1, 1), block=(64, 1, 1))
def divergent(x: f32[128]):
    s = shared_tensor(f32, [64])
    s[threadIdx.x] = x[blockIdx.x * 64 + threadIdx.x]
    if threadIdx.x < 16:
        barrier()
    x[blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x]
'''


def test_a_barrier_under_divergence():
    with pytest.raises(DivergenceError, match=r"kernel 'divergent': barrier\(\) reached by thread \(0, 0, 0\) "
                                              r"of block \(0, 0, 0\) while thread \(16, 0, 0\)"):
        run_kernel(build(DIVERGENT), [np.zeros(128, np.float32)])


def test_a_barrier_a_whole_block_skips_is_no_error():
    src = DIVERGENT.replace("if threadIdx.x < 16:", "if blockIdx.x < 1:").replace(
        "s[63 - threadIdx.x]", "s[threadIdx.x]")
    run_kernel(build(src), [np.zeros(128, np.float32)])


RACE = '''
@kernel(kind='cuda_kernel', grid=(3, 1, 1), block=(32, 1, 1))
def race(x: f32[96], y: f32[96]):
    s = shared_tensor(f32, [32])
    s[threadIdx.x // K] = x[blockIdx.x * 32 + threadIdx.x]
    barrier()
    y[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x]
'''


def test_two_threads_writing_one_shared_address():
    with pytest.raises(RaceError) as e:
        run_kernel(build(RACE, K=2), [np.zeros(96, np.float32), np.zeros(96, np.float32)])
    err = e.value
    assert (err.kernel, err.buffer, err.index, err.thread, err.block) == ("race", "s", 0, (1, 0, 0), (0, 0, 0))
    assert "thread (1, 0, 0) of block (0, 0, 0) writes it and thread (0, 0, 0) writes it" in str(err)
    run_kernel(build(RACE, K=1), [np.zeros(96, np.float32), np.zeros(96, np.float32)])


GLOBAL_RACE = '''
@kernel(kind='cuda_kernel', grid=(3, 1, 1), block=(32, 1, 1))
def shift(x: f32[96], y: f32[96]):
    i = blockIdx.x * 32 + threadIdx.x
    y[i] = x[i] * 2.0
    x[(i + S) % 96] = y[i]
'''


def test_two_blocks_meeting_on_a_global_element_is_a_race():
    # blocks are not ordered: block 1 reads x[32..63], which block 0 writes with S = 32
    with pytest.raises(RaceError) as e:
        run_kernel(build(GLOBAL_RACE, S=32), [np.zeros(96, np.float32), np.zeros(96, np.float32)])
    assert (e.value.kernel, e.value.buffer) == ("shift", "x")
    assert "global-memory race on 'x' at index" in str(e.value) and "blocks are not ordered" in str(e.value)
    run_kernel(build(GLOBAL_RACE, S=0), [np.zeros(96, np.float32), np.zeros(96, np.float32)])  # its own elements


def test_a_read_of_another_threads_write_needs_a_barrier_between():
    src = RACE.replace("    barrier()\n", "").replace("s[threadIdx.x]", "s[31 - threadIdx.x]")
    with pytest.raises(RaceError, match=r"race on 's' at index 31: thread \(0, 0, 0\) of block \(0, 0, 0\) reads "
                                        r"it and thread \(31, 0, 0\) wrote it, with no barrier between"):
        run_kernel(build(src, K=1), [np.zeros(96, np.float32), np.zeros(96, np.float32)])
    with pytest.raises(RaceError, match=r"'s' at index 0: thread \(0, 0, 0\) of block \(0, 0, 0\) writes it and "
                                        r"thread \(\d+, 0, 0\) read it"):
        war = RACE.replace("    s[threadIdx.x // K] = x[blockIdx.x * 32 + threadIdx.x]\n    barrier()\n",
                           "    v = s[0]\n    s[threadIdx.x] = v\n")
        run_kernel(build(war, K=1), [np.zeros(96, np.float32), np.zeros(96, np.float32)])


def test_without_checks_the_kernel_runs_on():
    run_kernel(build(RACE, K=2), [np.zeros(96, np.float32), np.zeros(96, np.float32)], check=False)


def test_arguments_are_checked():
    fn = build(SCALE)
    x = np.zeros(10, np.float32)
    with pytest.raises(ArgumentError, match="'x' must be float32, got float64"):
        run_kernel(fn, [10, x.astype(np.float64), x])
    with pytest.raises(ArgumentError, match="'y' must have 10 elements"):
        run_kernel(fn, [10, x, np.zeros(11, np.float32)])
    with pytest.raises(ArgumentError, match="takes 3 arguments"):
        run_kernel(fn, [x, x])
    with pytest.raises(ArgumentError, match="'N' must be a int32"):
        run_kernel(fn, [2 ** 40, x, x])


def test_a_node_the_emulator_does_not_know_is_named():
    @dataclass(frozen=True, eq=False, repr=False)
    class Trap(S.Stmt):
        pass
    fn = build(SCALE)
    odd = cuda_kernel(fn.with_body(S.seq([Trap(), fn.body])), (1, 1, 1), (32, 1, 1))
    with pytest.raises(EmulatorError, match="cannot run Trap nodes"):
        run_kernel(odd, [10, np.zeros(10, np.float32), np.zeros(10, np.float32)])


def test_mappings_must_be_lowered_first():
    fn = parse_source('''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(32, 1, 1))
def f(x: f32[32]):
    for i in spatial(32).on(threadIdx.x):
        x[i] = 1.0
''')
    with pytest.raises(EmulatorError, match="run taskloom.transforms.lower first"):
        run_kernel(fn, [np.zeros(32, np.float32)])


UNWRITTEN = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(64, 1, 1))
def unwritten(y: f32[64], z: i32[64]):
    s = shared_tensor(f32, [64])
    r = register_tensor(f32, [2])
    n: i32
    if threadIdx.x < 32:
        s[threadIdx.x] = 1.0
        r[0] = 1.0
        n = 3
    barrier()
    y[threadIdx.x] = s[threadIdx.x] + r[0]
    z[threadIdx.x] = n
'''


def test_memory_never_written_holds_garbage_not_zeros():
    # a GPU leaves shared memory, registers and uninitialized variables as they were: a kernel
    # that reads what it never wrote must not find zeros here that it may not find there
    y, z = np.zeros(64, np.float32), np.zeros(64, np.int32)
    run_kernel(build(UNWRITTEN), [y, z])
    np.testing.assert_array_equal(y[:32], 2.0)
    assert np.isnan(y[32:]).all()
    np.testing.assert_array_equal(z, [3] * 32 + [-1] * 32)
