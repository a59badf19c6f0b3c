"""The GPU session's stages run their logic on the host first (a dry run, float32 on the
CPU), so that a lent GPU's minutes are not lost to a mistake in the script."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import gpu_session  # noqa: E402


@pytest.mark.parametrize("variable, settings", [("TASKLOOM_MERGE_PRODUCTS", ("0", "1")),
                                                ("TASKLOOM_SPLIT_K", ("0", "auto"))])
def test_a_model_compiled_two_ways_is_timed_and_compared(variable, settings, monkeypatch):
    monkeypatch.delenv(variable, raising=False)
    record = gpu_session.model_ab("mlp", variable, settings, repeats=2, rounds=1, device="cpu")
    assert record["model"] == "mlp" and record["max_rel_diff"] < 1e-5
    assert set(record["median_ms"]) == {f"{variable}={s}" for s in settings}
    assert all(ms is not None and ms > 0 for ms in record["median_ms"].values())
    assert variable not in os.environ  # the setting does not leak into what runs next
