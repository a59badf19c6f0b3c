"""The memory planner: no two live tensors share a byte, and reuse keeps the arena small."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from taskloom.runtime.memory_plan import ALIGN, Buffer, plan_memory


def overlaps(a: Buffer, b: Buffer) -> bool:
    return not (a.last < b.first or b.last < a.first)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 20), st.integers(0, 5)), min_size=1, max_size=30))
def test_live_tensors_never_share_memory(specs):
    bufs = [Buffer(k, n, f, f + d) for k, (n, f, d) in enumerate(specs)]
    plan = plan_memory(bufs)
    for a in bufs:
        assert plan.offsets[a.key] % ALIGN == 0
        assert plan.offsets[a.key] + a.nbytes <= plan.arena_bytes
        for b in bufs:
            if a.key < b.key and overlaps(a, b):
                ra = (plan.offsets[a.key], plan.offsets[a.key] + a.nbytes)
                rb = (plan.offsets[b.key], plan.offsets[b.key] + b.nbytes)
                assert ra[1] <= rb[0] or rb[1] <= ra[0], (a, b, plan.offsets)
    # never worse than no reuse, never better than the largest set alive at one time
    assert plan.arena_bytes <= plan.total_bytes
    peak = max(sum(-(-b.nbytes // ALIGN) * ALIGN for b in bufs if b.first <= t <= b.last)
               for t in range(0, 26))
    assert plan.arena_bytes >= peak


def test_a_chain_reuses_two_slots():
    # a chain of equal tensors, each read only by the next node: two buffers suffice
    bufs = [Buffer(k, 1024, k, k + 1) for k in range(10)]
    plan = plan_memory(bufs)
    assert plan.arena_bytes == 2 * 1024
    assert "saved" in plan.describe()
