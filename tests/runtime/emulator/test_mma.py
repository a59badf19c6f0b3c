"""ldmatrix and mma.sync m16n8k16 follow the PTX ISA's fragment layouts lane by lane: a
right kernel matches numpy, a wrong lane-to-element mapping does not."""
from __future__ import annotations

import numpy as np
import pytest

from taskloom.runtime.emulator import DivergenceError, OutOfBoundsError, run_kernel
from taskloom.runtime.emulator.values import bf16_from_bits, bf16_to_bits
from tests.runtime.emulator.kernels import A_ADDRESS_SWAPPED, build, mma16


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((16, 16)).astype(np.float16), rng.standard_normal((16, 8)).astype(np.float16),
            rng.standard_normal((16, 8)).astype(np.float32))


def test_ldmatrix_and_mma_compute_a_16x8x16_product_in_fp32():
    a, b, c = _inputs()
    want = a.astype(np.float32) @ b.astype(np.float32) + c
    report = run_kernel(mma16(), [a, b, c])
    np.testing.assert_allclose(c, want, rtol=1e-6, atol=1e-6)
    assert report.instructions["mma"] == 1 and report.instructions["ldmatrix"] == 2
    # A's 16 x 16 tile of halves has rows 32 bytes apart: ldmatrix meets 2-way conflicts
    assert report.shared_load_conflicts == 4


def test_a_wrong_fragment_mapping_gives_a_wrong_product():
    a, b, c = _inputs(1)
    want = a.astype(np.float32) @ b.astype(np.float32) + c
    run_kernel(mma16(address=A_ADDRESS_SWAPPED), [a, b, c])
    assert np.abs(c - want).max() > 0.1


def test_bfloat16_inputs_travel_as_their_bits():
    a16, b16, c = _inputs(2)
    a, b = bf16_to_bits(a16.astype(np.float32)), bf16_to_bits(b16.astype(np.float32))
    want = bf16_from_bits(a) @ bf16_from_bits(b) + c
    run_kernel(mma16("bf16"), [a.reshape(16, 16), b.reshape(16, 8), c])
    np.testing.assert_allclose(c, want, rtol=1e-6, atol=1e-6)


#: mma.sync on fragments loaded straight from global memory by the ISA's formulas, with
#: B stored n-major and read by a plain ldmatrix (no .trans)
DIRECT = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(64, 1, 1))
def direct(a: f16[2, 16, 16], bt: f16[2, 8, 16], c: f32[2, 16, 8]):
    sbt = shared_tensor(f16, [2, 8, 16])
    ra = register_tensor(f16, [8])
    rb = register_tensor(f16, [4])
    acc = register_tensor(f32, [4])
    w = threadIdx.x // 32
    lane = threadIdx.x % 32
    g = lane // 4
    t = lane % 4
    for i in range(8):
        ra[i] = a[w, g + (i // 2) % 2 * 8, t * 2 + i % 2 + i // 4 * 8]
    for k in range(4):
        sbt[w, lane // 4, lane % 4 * 4 + k] = bt[w, lane // 4, lane % 4 * 4 + k]
    for i in range(4):
        acc[i] = 0.0
    barrier()
    ldmatrix(rb[0], sbt[w, lane % 8, lane // 8 % 2 * 8], num=2)
    mma_sync(acc[0], ra[0], rb[0], acc[0])
    for i in range(4):
        c[w, g + i // 2 * 8, t * 2 + i % 2] = acc[i]
'''


def test_two_warps_with_fragments_from_the_isa_formulas():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 16, 16)).astype(np.float16)
    bt = rng.standard_normal((2, 8, 16)).astype(np.float16)
    c = np.zeros((2, 16, 8), np.float32)
    run_kernel(build(DIRECT), [a, bt, c])
    want = a.astype(np.float32) @ bt.astype(np.float32).transpose(0, 2, 1)
    np.testing.assert_allclose(c, want, rtol=1e-6, atol=1e-6)


def test_mma_needs_the_whole_warp():
    src = DIRECT.replace("    mma_sync(acc[0], ra[0], rb[0], acc[0])",
                         "    if lane < 31:\n        mma_sync(acc[0], ra[0], rb[0], acc[0])")
    args = [np.zeros((2, 16, 16), np.float16), np.zeros((2, 8, 16), np.float16), np.zeros((2, 16, 8), np.float32)]
    with pytest.raises(DivergenceError, match=r"mma_sync by thread \(0, 0, 0\).*lane 31.*\(31, 0, 0\)"):
        run_kernel(build(src), args)


def test_a_misaligned_ldmatrix_row_is_an_error():
    src = DIRECT.replace("sbt[w, lane % 8, lane // 8 % 2 * 8]", "sbt[w, lane % 8, lane // 8 % 2 * 4 + 1]")
    args = [np.zeros((2, 16, 16), np.float16), np.zeros((2, 8, 16), np.float16), np.zeros((2, 16, 8), np.float32)]
    with pytest.raises(OutOfBoundsError, match=r"'sbt' at index 1, an address not aligned to 16 bytes"):
        run_kernel(build(src), args)


#: One m16n8k8 tf32 product: A (16 x 8) by ldmatrix.x4 from a [m][k] float32 tile, B by
#: ldmatrix.x2 from its [n][k] tile (a row of 4 floats is a matrix row of 16 bytes).
TF32 = '''
@kernel(kind='cuda_kernel', grid=(1, 1, 1), block=(32, 1, 1))
def mma_tf32(a: f32[16, 8], b: f32[8, 8], c: f32[16, 8]):
    sa = shared_tensor(f32, [16, 8])
    sbt = shared_tensor(f32, [8, 8])
    ra = register_tensor(f32, [4])
    rb = register_tensor(f32, [2])
    acc = register_tensor(f32, [4])
    lane = threadIdx.x
    for i in range(4):
        sa[lane // 2, lane % 2 * 4 + i] = a[lane // 2, lane % 2 * 4 + i]
    for i in range(2):
        sbt[lane // 4, lane % 4 * 2 + i] = b[lane % 4 * 2 + i, lane // 4]
    for i in range(4):
        acc[i] = c[lane // 4 + i // 2 * 8, lane % 4 * 2 + i % 2]
    barrier()
    ldmatrix(ra[0], sa[lane % 16, lane // 16 * 4])
    ldmatrix(rb[0], sbt[lane % 8, lane // 8 % 2 * 4], num=2)
    mma_sync(acc[0], ra[0], rb[0], acc[0], 'm16n8k8')
    for i in range(4):
        c[lane // 4 + i // 2 * 8, lane % 4 * 2 + i % 2] = acc[i]
'''


def test_tf32_multiplies_ten_bits_of_mantissa():
    from taskloom.runtime.emulator.mma import tf32
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    c = rng.standard_normal((16, 8)).astype(np.float32)
    want = tf32(a).astype(np.float64) @ tf32(b) + c
    exact = a.astype(np.float64) @ b + c
    out = c.copy()
    report = run_kernel(build(TF32), [a, b, out])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    assert np.abs(out - exact).max() > 1e-5  # the low bits are gone: not a float32 product
    assert report.instructions["mma"] == 1 and report.instructions["ldmatrix"] == 2
    # rows 32 bytes apart, unswizzled: each of the 6 matrices' 8 rows take two wavefronts
    assert report.shared_load_conflicts == 6


def test_ldmatrix_cannot_transpose_float32():
    from taskloom.errors import ScriptError
    with pytest.raises(ScriptError, match=r"\.trans moves 16-bit elements"):
        build(TF32.replace("num=2)", "num=2, trans=True)"))
