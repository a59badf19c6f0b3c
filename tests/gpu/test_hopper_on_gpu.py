"""On an sm_90a GPU (``-m cuda``): Hopper's instructions one at a time, as the emulator's own
tests run them, so that a difference between the emulator and the device shows where it
lies (a descriptor's layout, the swizzle, the accumulators, a TMA box, the mbarriers) before
the templates built on them are blamed. Each case runs through ``device``, ``"emulator"``
too, so the harness is checked without a GPU."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import taskloom
from taskloom.target import CudaTarget
from tests.runtime.emulator.test_tma import ROLES, _swizzled, box_kernel
from tests.runtime.emulator.test_wgmma import LAYOUTS, wgmma_kernel

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")]


def hopper(device: str) -> tuple[CudaTarget, str]:
    """This GPU (skipped unless it is sm_90a), or an H100's preset emulated."""
    if device == "emulator":
        return CudaTarget.from_arch("sm_90a"), "cpu"
    target = CudaTarget.device()
    if not target.has_wgmma():
        pytest.skip(f"wgmma and TMA are Hopper's (sm_90a); this GPU is {target.arch}")
    return target, "cuda"


def run(fn, args: list, device: str) -> list:
    """Runs lowered ``fn`` (flat tensors) on torch tensors made from ``args``; the arrays
    after the call, in their shapes, on the CPU."""
    target, where = hopper(device)
    tensors = [torch.from_numpy(np.ascontiguousarray(a).ravel()).to(where) for a in args]
    taskloom.build(fn, target=target, device=device)[fn.name](*tensors)
    if device == "cuda":
        torch.cuda.synchronize()
    return [t.cpu().numpy().reshape(np.shape(a)) for t, a in zip(tensors, args)]


@pytest.mark.parametrize("n, a_major, b_major", [(8, "k", "k")] + [(n, a, b) for n in (64, 192) for a, b in LAYOUTS])
def test_one_wgmma_in_each_operand_layout(n, a_major, b_major, device="cuda"):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((64, n)).astype(np.float16)
    args = [a if a_major == "k" else a.T, b.T if b_major == "k" else b, np.zeros((64, n), np.float32)]
    c = run(wgmma_kernel(n, a_major, b_major), args, device)[2]
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("c0, r0", [(0, 0), (8, 36), (64, 90)])
def test_one_tma_box_lands_swizzled_with_zeros_past_the_tensor(c0, r0, device="cuda"):
    x = np.random.default_rng(0).standard_normal((100, 72)).astype(np.float16)
    y = run(box_kernel(c0, r0), [x, np.zeros(4096, np.float16)], device)[1]
    padded = np.zeros((164, 136), np.float16)
    padded[:100, :72] = x
    np.testing.assert_array_equal(y, _swizzled(padded[r0:r0 + 64, c0:c0 + 64]))


def test_a_producer_and_consumers_meet_at_mbarriers(device="cuda"):
    from tests.runtime.emulator.kernels import build
    x = np.random.default_rng(1).standard_normal((100, 72)).astype(np.float16)
    y = run(build(ROLES.replace("FREE", "mbarrier_arrive(free[0])")), [x, np.zeros((3, 4096), np.float16)], device)[1]
    for k in range(3):
        np.testing.assert_array_equal(y[k], _swizzled(x[8 * k:8 * k + 64, :64]))
