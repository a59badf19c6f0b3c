"""Values as the device computes them: C's integer division, int32 wrapping, float32 and
bfloat16 rounding, saturating conversions; masked control flow; warp shuffles."""
from __future__ import annotations

import numpy as np
import pytest

from taskloom.runtime.emulator import DivergenceError, run_kernel
from taskloom.runtime.emulator.values import bf16_from_bits, bf16_to_bits
from tests.runtime.emulator.kernels import build

INTEGERS = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(64, 1, 1))
def integers(a: i32[64], b: i32[64], q: i32[64], r: i32[64], q7: i32[64], r7: i32[64], p: i32[64], u: u8[64]):
    t = threadIdx.x
    q[t] = a[t] // b[t]
    r[t] = a[t] % b[t]
    q7[t] = a[t] // 7
    r7[t] = a[t] % 7
    p[t] = a[t] * b[t] + 2147483647
    u[t] = u8(a[t])
'''


def _wrap32(x: np.ndarray) -> np.ndarray:
    return ((x.astype(np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


def test_integer_division_truncates_and_int32_wraps():
    rng = np.random.default_rng(0)
    a = rng.integers(-10 ** 6, 10 ** 6, 64).astype(np.int32)
    b = rng.integers(1, 1000, 64).astype(np.int32) * rng.choice([-1, 1], 64).astype(np.int32)
    out = [np.zeros(64, np.int32) for _ in range(5)] + [np.zeros(64, np.uint8)]
    run_kernel(build(INTEGERS), [a, b, *out])
    q, r, q7, r7, p, u = out
    want_q = np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(r, a - want_q * b)
    np.testing.assert_array_equal(q7, np.sign(a) * (np.abs(a) // 7))
    np.testing.assert_array_equal(r7, a - np.sign(a) * (np.abs(a) // 7) * 7)
    np.testing.assert_array_equal(p, _wrap32(a.astype(np.int64) * b + 2147483647))
    np.testing.assert_array_equal(u, (a.astype(np.int64) & 255).astype(np.uint8))


FLOATS = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(32, 1, 1))
def floats(f: f32[32], g: f32[32], s: f32[32], d: f32[32], e: f32[32], c: i32[32]):
    t = threadIdx.x
    s[t] = f[t] + g[t] * 3.0
    d[t] = f[t] / g[t]
    e[t] = sigmoid(f[t]) + rsqrt(abs(g[t]) + 1.0)
    c[t] = i32(f[t])
'''


def test_float32_rounds_as_float32_and_conversions_saturate():
    rng = np.random.default_rng(1)
    f = (rng.standard_normal(32) * 1e3).astype(np.float32)
    f[:4] = [3e9, -3e9, np.nan, -2.75]
    g = rng.standard_normal(32).astype(np.float32)
    s, d, e = (np.zeros(32, np.float32) for _ in range(3))
    c = np.zeros(32, np.int32)
    run_kernel(build(FLOATS), [f, g, s, d, e, c])
    np.testing.assert_array_equal(s, f + g * np.float32(3))
    np.testing.assert_array_equal(d, f / g)
    assert s.dtype == np.float32
    f64, g64 = f[4:].astype(np.float64), g[4:].astype(np.float64)
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(e[4:], 1 / (1 + np.exp(-f64)) + 1 / np.sqrt(np.abs(g64) + 1), rtol=1e-6)
    assert list(c[:4]) == [2147483647, -2147483648, 0, -2]
    np.testing.assert_array_equal(c[4:], np.trunc(f[4:]).astype(np.int32))


BF16 = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(32, 1, 1))
def add_bf16(x: bf16[4], y: bf16[4], z: bf16[4]):
    if threadIdx.x < 4:
        z[threadIdx.x] = x[threadIdx.x] + y[threadIdx.x]
'''


def test_bfloat16_rounds_each_result_to_nearest_even():
    x = bf16_to_bits(np.array([1.0, 1.0, 256.0, -3.0], np.float32))
    y = bf16_to_bits(np.array([2.0 ** -8, 3 * 2.0 ** -9, 1.0, 0.5], np.float32))
    z = np.zeros(4, np.uint16)
    run_kernel(build(BF16), [x, y, z])
    np.testing.assert_array_equal(bf16_from_bits(z), [1.0, 1.0078125, 256.0, -2.5])


def test_bfloat16_arrays_of_ml_dtypes_are_written_in_place():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([1.5, 2.0, -1.0, 0.25], ml_dtypes.bfloat16)
    z = np.zeros(4, ml_dtypes.bfloat16)
    run_kernel(build(BF16), [x, x, z])
    np.testing.assert_array_equal(z.astype(np.float32), [3.0, 4.0, -2.0, 0.5])


CONTROL = '''
@kernel(kind='cuda_kernel', grid=('(N + 63) // 64', 1, 1), block=(64, 1, 1))
def control(N: i32, x: f32[N], y: f32[N], n: i32[N]):
    i = blockIdx.x * 64 + threadIdx.x
    pos = i < N and x[i] > 0.0
    y_: f32 = x[i] if i < N else -1.0
    count: i32 = 0
    for k in range(threadIdx.x % 5):
        count = count + k + 1
    if pos:
        y_ = y_ * 2.0
    else:
        if i < N:
            y_ = 0.0
    if i < N:
        y[i] = y_
        n[i] = count
'''


def test_masked_control_flow_and_lazy_conditions():
    n = 101
    x = np.random.default_rng(2).standard_normal(n).astype(np.float32)
    y, cnt = np.zeros(n, np.float32), np.zeros(n, np.int32)
    run_kernel(build(CONTROL), [n, x, y, cnt])  # x[i] is read only where i < N
    np.testing.assert_array_equal(y, np.where(x > 0, x * 2, 0))
    m = np.arange(n) % 64 % 5
    np.testing.assert_array_equal(cnt, m * (m + 1) // 2)


SHUFFLE = '''
@kernel(kind='cuda_kernel', grid=(2, 1, 1), block=(64, 1, 1))
def shuffles(x: f32[128], b: i32[128], out: f32[4, 128], red: f32[2, 128], ired: i32[128]):
    t = blockIdx.x * 64 + threadIdx.x
    v = x[t]
    d = b[t]
    out[0, t] = shfl_xor(v, d)
    out[1, t] = shfl_down(v, d)
    out[2, t] = shfl_up(v, d)
    out[3, t] = shfl_idx(v, d)
    red[0, t] = warp_sum(v)
    red[1, t] = warp_max(v)
    ired[t] = warp_sum(d * 100000007)
'''


def _shuffled(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros((4, 128), np.float32)
    for t in range(128):
        lane, base, d = t % 32, t - t % 32, int(b[t]) & 0xFFFFFFFF
        for k, j in enumerate((lane ^ d, lane + d, lane - d, d & 31)):
            out[k, t] = x[base + j] if 0 <= j < 32 else x[t]
    return out


def test_warp_shuffles_and_reductions_follow_cuda():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(128).astype(np.float32)
    b = rng.integers(-3, 40, 128).astype(np.int32)
    out, red, ired = np.zeros((4, 128), np.float32), np.zeros((2, 128), np.float32), np.zeros(128, np.int32)
    run_kernel(build(SHUFFLE), [x, b, out, red, ired])
    np.testing.assert_array_equal(out, _shuffled(x, b))
    warps = x.reshape(4, 32)
    np.testing.assert_allclose(red[0], np.repeat(warps.sum(axis=1), 32), rtol=1e-5)
    np.testing.assert_array_equal(red[1], np.repeat(warps.max(axis=1), 32))
    sums = _wrap32(np.repeat((b.astype(np.int64) * 100000007).reshape(4, 32).sum(axis=1), 32))
    np.testing.assert_array_equal(ired, sums)


def test_a_shuffle_under_divergence_is_an_error():
    src = SHUFFLE.replace("    out[0, t] = shfl_xor(v, d)", "    if threadIdx.x != 37:\n        out[0, t] = shfl_xor(v, d)")
    args = [np.zeros(128, np.float32), np.zeros(128, np.int32), np.zeros((4, 128), np.float32),
            np.zeros((2, 128), np.float32), np.zeros(128, np.int32)]
    with pytest.raises(DivergenceError, match=r"shfl_xor\(\) by thread \(32, 0, 0\) of block \(0, 0, 0\) while "
                                              r"lane 5 of its warp, thread \(37, 0, 0\), is inactive"):
        run_kernel(build(src), args)


VECTORS = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(32, 1, 1))
def vectors(N: i32, x: f32[N], y: f32[N], s: f32[32]):
    i = threadIdx.x * 4
    v = vload(x[i], 4, min(max(N - i, 0), 4))
    vstore(y[i], v * broadcast(2.0, 4), min(max(N - i, 0), 4))
    s[threadIdx.x] = reduce_add(v)
'''


def test_vector_loads_and_stores_with_a_lane_count():
    n = 101
    x = np.arange(n, dtype=np.float32)
    y, s = np.zeros(n, np.float32), np.zeros(32, np.float32)
    report = run_kernel(build(VECTORS), [n, x, y, s])
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(s, np.pad(x, (0, 27)).reshape(32, 4).sum(axis=1))
    assert report.global_load_sectors == 13  # 404 bytes of x from byte 0: 13 sectors


def test_a_warp_sum_in_a_partial_warp_is_an_error():
    src = SHUFFLE.replace("block=(64, 1, 1)", "block=(48, 1, 1)").replace("blockIdx.x * 64", "blockIdx.x * 48")
    args = [np.zeros(128, np.float32), np.zeros(128, np.int32), np.zeros((4, 128), np.float32),
            np.zeros((2, 128), np.float32), np.zeros(128, np.int32)]
    with pytest.raises(DivergenceError, match=r"shfl_xor\(\) by thread \(32, 0, 0\) of block \(0, 0, 0\) while "
                                              r"lane 16 of its warp does not exist"):
        run_kernel(build(src), args)
