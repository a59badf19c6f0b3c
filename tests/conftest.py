"""Shared fixtures: every test builds into its own cache directory, never the user's."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    # one cache per test session and worker keeps repeated builds of the same kernel cheap
    root = tmp_path_factory.getbasetemp() / "taskloom-cache"
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(root))
