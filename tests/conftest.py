"""Shared fixtures: every test builds into its own cache directory, never the user's."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # one cache per test session and worker keeps repeated builds of the same kernel cheap
    root = tmp_path_factory.getbasetemp() / "taskloom-cache"
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(root))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` run only where an NVIDIA GPU and its driver are found."""
    marked = [item for item in items if "cuda" in item.keywords]
    if not marked:
        return
    from taskloom.target.cuda import _read_device
    if _read_device(0) is None:
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none found on this machine)")
        for item in marked:
            item.add_marker(skip)
