"""The iterative post-order walk."""
from __future__ import annotations

from taskloom.graph.walk import postorder


def test_each_item_once_after_its_dependencies():
    deps = {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": [], "e": ["a"]}
    order = postorder(["e", "c"], lambda k: deps[k])
    assert sorted(order) == ["a", "b", "c", "d", "e"]
    for k, ds in deps.items():
        assert all(order.index(d) < order.index(k) for d in ds)


def test_deep_chains_need_no_recursion():
    n = 100_000
    order = postorder([n], lambda k: [k - 1] if k > 0 else [])
    assert order == list(range(n + 1))
