import hashlib
import json
import os
import threading

import pytest

from taskloom.backend.cache import BuildCache
from taskloom.errors import TaskloomError

KEY_A, KEY_B, KEY_C = ("a" * 64), ("b" * 64), ("c" * 64)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TASKLOOM_CACHE_MAX_BYTES", raising=False)
    return BuildCache.default()


def _age(entry, seconds_ago):
    stamp = os.stat(entry.path).st_mtime - seconds_ago
    os.utime(entry.path, (stamp, stamp))


def test_default_reads_environment_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "one"))
    monkeypatch.setenv("TASKLOOM_CACHE_MAX_BYTES", "1234")
    cache = BuildCache.default()
    assert cache.root == tmp_path / "one" and cache.max_bytes == 1234
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "two"))
    assert BuildCache.default().root == tmp_path / "two"


def test_store_and_lookup(cache, tmp_path):
    assert cache.lookup(KEY_A) is None
    lib = tmp_path / "built.so"
    lib.write_bytes(b"\x7fELF fake")
    entry = cache.store(KEY_A, {"source.c": "int x;", "lib.so": lib}, {"kernels": ["add"]})
    assert entry.path == cache.root / "build" / "aa" / KEY_A
    assert entry.lib_path.read_bytes() == b"\x7fELF fake"
    assert entry.source_path.read_text() == "int x;"
    found = cache.lookup(KEY_A)
    assert found == entry and found.meta == {"kernels": ["add"]}
    assert os.listdir(cache.root / "tmp") == []  # nothing left half-written


def test_losing_a_race_keeps_the_first_entry(cache):
    first = cache.store(KEY_A, {"lib.so": b"first"}, {"who": 1})
    second = cache.store(KEY_A, {"lib.so": b"second"}, {"who": 2})
    assert second.meta == {"who": 1} and second.lib_path.read_bytes() == b"first"


def test_concurrent_stores_agree(cache):
    results = []
    threads = [threading.Thread(target=lambda i=i: results.append(cache.store(KEY_B, {"lib.so": b"x"}, {"i": i})))
               for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({r.path for r in results}) == 1
    assert cache.info()["entries"] == 1


def test_lru_eviction_under_a_tiny_bound(tmp_path):
    cache = BuildCache(tmp_path / "cache", max_bytes=2500)
    payload = {"lib.so": b"x" * 1000}
    a = cache.store(KEY_A, payload)
    b = cache.store(KEY_B, payload)
    _age(a, 100)
    _age(b, 50)
    cache.lookup(KEY_A)  # A is now the most recently used
    cache.store(KEY_C, payload)
    assert cache.lookup(KEY_B) is None
    assert cache.lookup(KEY_A) is not None and cache.lookup(KEY_C) is not None
    assert cache.info()["total_bytes"] <= 2500


def test_the_entry_just_stored_is_never_evicted(tmp_path):
    cache = BuildCache(tmp_path / "cache", max_bytes=10)
    cache.store(KEY_A, {"lib.so": b"x" * 100})
    cache.store(KEY_B, {"lib.so": b"x" * 100})
    assert cache.lookup(KEY_A) is None and cache.lookup(KEY_B) is not None


@pytest.mark.parametrize("damage", ["no_lib", "bad_meta"])
def test_corrupt_entry_is_a_miss_and_removed(cache, damage):
    entry = cache.store(KEY_A, {"lib.so": b"x"}, {"ok": True})
    if damage == "no_lib":
        entry.lib_path.unlink()
    else:
        (entry.path / "meta.json").write_text("{not json")
    assert cache.lookup(KEY_A) is None
    assert not entry.path.exists()
    assert cache.store(KEY_A, {"lib.so": b"y"}).lib_path.read_bytes() == b"y"


def test_failed_sources_are_kept(cache):
    path = cache.save_failed(KEY_A, "my kernel", "int main( {", "error: expected")
    assert path.read_text() == "int main( {" and KEY_A in path.name
    assert path.with_suffix(".log").read_text() == "error: expected"
    assert cache.info()["failed_sources"] == 1


def test_info_and_clear(cache):
    cache.store(KEY_A, {"lib.so": b"x" * 100, "source.c": "int x;"}, {"n": 1})
    cache.store(KEY_B, {"lib.so": b"x" * 100})
    info = cache.info()
    assert info["root"] == str(cache.root) and info["entries"] == 2
    assert info["total_bytes"] >= 200 and info["max_bytes"] == 2 * 1024 ** 3
    freed = cache.clear()
    assert freed == info["total_bytes"]
    assert cache.info()["entries"] == 0 and cache.lookup(KEY_A) is None
    assert cache.clear() == 0


def test_bad_keys_and_files_are_rejected(cache):
    with pytest.raises(TaskloomError, match="hex"):
        cache.lookup("../../etc")
    with pytest.raises(TaskloomError, match="lib.so"):
        cache.store(KEY_A, {"source.c": "x"})
    with pytest.raises(TaskloomError, match="file name"):
        cache.store(KEY_A, {"lib.so": b"x", "../evil": b"x"})
    assert cache.lookup(KEY_A) is None


def test_meta_is_json(cache):
    entry = cache.store(KEY_A, {"lib.so": b"x"}, {"flags": ["-O3"], "n": 2})
    assert json.loads((entry.path / "meta.json").read_text()) == {
        "flags": ["-O3"], "n": 2, "lib.so": {"bytes": 1, "sha256": hashlib.sha256(b"x").hexdigest()}}
    assert entry.meta == {"flags": ["-O3"], "n": 2}
