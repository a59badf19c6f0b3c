"""The CUDA attention template: one kernel per attention, read through the fused head split,
run in the emulator to torch's answer (masks, causal, ragged lengths, head sizes 16-128),
with no bank conflicts and the mma count of its tiles, built by nvcc without spills."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.graph import Graph, input
from taskloom.graph.fusion import fuse_graph
from taskloom.schedule.attention import match_attention
from taskloom.schedule.cuda.attention import BLOCK_K, BLOCK_Q, attention_candidate, attention_kernel
from taskloom.target import CudaTarget

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
rng = np.random.default_rng(0)
SM80 = CudaTarget.from_arch("sm_80")


def heads(t):
    return ops.permute(t, (0, 2, 1, 3))  # (B, L, H, D) -> (B, H, L, D), fused as a prologue


def run(B, L, S, H, D, mask=False, causal=False, dtype="float16", arch="sm_80"):
    """An attention over (B, L, H, D) inputs, its kernel in the emulator: (out, want, report, module)."""
    names = ("q", "k", "v")
    ins = [input((B, n, H, D), dtype, name=x) for x, n in zip(names, (L, S, S))]
    m = input((B, 1, 1, S), "float32", name="mask")
    out = ops.attention(*(heads(t) for t in ins), mask=m if mask else None, causal=causal)
    graph = Graph([*ins, m] if mask else ins, [out])
    [group] = [g for g in fuse_graph(graph) if "attention" in g.ops]
    target = CudaTarget.from_arch(arch)
    module = taskloom.build(attention_kernel(match_attention(group.task), "att"), target=target, device="emulator")
    tdtype = getattr(torch, dtype)
    data = {x: torch.randn(B, n, H, D, dtype=tdtype) for x, n in zip(names, (L, S, S))}
    data["mask"] = torch.where(torch.rand(B, 1, 1, S) < 0.2, -1e4, 0.0)
    got = torch.zeros(B, H, L, D, dtype=tdtype)
    report = module["att"](*[data[t.name] for t in group.inputs], got)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(data[x].float().permute(0, 2, 1, 3) for x in names), attn_mask=data["mask"] if mask else None,
        is_causal=causal)
    return got.float(), want, report, module


@pytest.mark.parametrize("B, L, S, H, D, mask, causal", [
    (1, 64, 64, 1, 64, False, False),
    (2, 37, 45, 3, 64, True, False),    # ragged query and key blocks, a padding mask
    (1, 70, 130, 2, 32, False, True),   # causal over three key blocks
    (1, 50, 90, 2, 128, True, True),    # head size 128: one key block in shared memory
    (2, 16, 8, 4, 16, False, False),
])
def test_matches_torch(B, L, S, H, D, mask, causal):
    got, want, report, _ = run(B, L, S, H, D, mask, causal)
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
    assert report.counters.bank_conflicts == 0
    steps = -(-S // BLOCK_K)
    # a causal block stops at the key block of its last query
    key_blocks = sum(min(steps, qb + 1) if causal else steps for qb in range(-(-L // BLOCK_Q)))
    per_block = BLOCK_K // 8 * D // 16 + D // 8 * BLOCK_K // 16  # q kᵀ, then P V, per warp
    assert report.instructions["mma"] == B * H * key_blocks * 4 * per_block


def test_bfloat16():
    got, want, _, _ = run(1, 40, 72, 2, 64, mask=True, dtype="bfloat16")
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("D", [64, 128])
def test_builds_without_spills(arch, D):
    _, _, _, module = run(1, 64, 64, 1, D, mask=True, arch=arch)
    used = module.built.resources["att"]
    assert not used.spills and used.shared_bytes <= 48 * 1024, used


def test_serves_16_bit_attention_with_head_sizes_to_128():
    for dtype, D, served in (("float16", 64, True), ("float32", 64, False), ("float16", 24, False),
                             ("float16", 256, False)):
        q = input((1, 8, D), dtype, name="q")
        [group] = fuse_graph(Graph([q], [ops.attention(q, q, q)]))
        assert (attention_candidate(group.task, SM80) is not None) == served, (dtype, D)
