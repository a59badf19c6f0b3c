"""Build-cache entries whose library is damaged, or that record no hash, are built again;
a library that will not load is dropped and built again once, then a clear error."""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.backend import build as build_module
from taskloom.backend import cache as cache_module
from taskloom.backend.cache import BuildCache
from taskloom.backend.compiler import compile_shared_library
from taskloom.errors import LoadError
from taskloom.graph import Graph, input
from taskloom.target import CpuTarget

KEY = "d" * 64
LIB = bytes(range(256)) * 64
ADD = "int add(int a, int b) { return a + b; }\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TASKLOOM_CACHE_MAX_BYTES", raising=False)
    return BuildCache.default()


def _rewrite(path: Path, data: bytes) -> None:
    """Replaces ``path``'s contents by way of a new file (a library this process has loaded
    stays mapped as it was)."""
    tmp = path.with_name("replacement")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _damage(lib: Path, how: str) -> None:
    data = lib.read_bytes()
    if how == "truncated":
        _rewrite(lib, data[:len(data) // 2])
    else:
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x10
        _rewrite(lib, bytes(flipped))


# -- the cache itself ----------------------------------------------------------------------

@pytest.mark.parametrize("how", ["truncated", "flipped"])
def test_a_damaged_library_is_a_miss_and_removed(cache, how):
    entry = cache.store(KEY, {"lib.so": LIB}, {"n": 1})
    assert cache.lookup(KEY) == entry
    _damage(entry.lib_path, how)
    assert cache.lookup(KEY) is None and not entry.path.exists()
    assert cache.store(KEY, {"lib.so": LIB}).lib_path.read_bytes() == LIB


def test_damage_in_place_is_found_once_the_file_changes(cache):
    entry = cache.store(KEY, {"lib.so": LIB})
    with open(entry.lib_path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    st = os.stat(entry.lib_path)
    os.utime(entry.lib_path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert cache.lookup(KEY) is None


def test_an_entry_without_a_recorded_hash_is_a_miss(cache):
    entry = cache.store(KEY, {"lib.so": LIB}, {"n": 1})
    meta = json.loads((entry.path / "meta.json").read_text())
    del meta["lib.so"]
    (entry.path / "meta.json").write_text(json.dumps(meta))
    assert cache.lookup(KEY) is None and not entry.path.exists()


def test_a_hot_lookup_does_not_hash_again(cache, monkeypatch):
    entry = cache.store(KEY, {"lib.so": LIB})
    hashed = []
    real = cache_module._sha256_file
    monkeypatch.setattr(cache_module, "_sha256_file", lambda p: hashed.append(p) or real(p))
    for _ in range(3):
        assert cache.lookup(KEY) == entry
    assert hashed == []
    cache_module._verified.clear()  # as in a new process
    assert cache.lookup(KEY) == entry and cache.lookup(KEY) == entry
    assert hashed == [entry.lib_path]


def test_a_symlinked_library_is_a_miss(cache, tmp_path):
    entry = cache.store(KEY, {"lib.so": LIB})
    elsewhere = tmp_path / "elsewhere.so"
    elsewhere.write_bytes(LIB)
    entry.lib_path.unlink()
    entry.lib_path.symlink_to(elsewhere)
    cache_module._verified.clear()
    assert cache.lookup(KEY) is None


# -- compiling again ---------------------------------------------------------------------

def test_a_compile_after_damage_builds_again(cache):
    host = CpuTarget.host()
    lib = compile_shared_library(ADD, host, name="add")
    _damage(lib, "flipped")
    again = compile_shared_library(ADD, host, name="add")
    assert again == lib and json.loads((lib.parent / "meta.json").read_text())["lib.so"]["bytes"] == \
        lib.stat().st_size
    add = ctypes.CDLL(str(again)).add
    assert add(2, 40) == 42


GRAPH = """
import numpy as np, taskloom
from taskloom import ops
from taskloom.graph import Graph, input
x = input((4, 8), name="x")
w = taskloom.asarray(np.arange(8, dtype=np.float32))
got = taskloom.compile(Graph([x], [ops.relu(ops.add(x, w))]))(np.ones((4, 8), np.float32))
assert np.array_equal(got, np.maximum(np.ones((4, 8), np.float32) + np.arange(8, dtype=np.float32), 0)), got
"""


@pytest.mark.parametrize("how", ["truncated", "flipped", "no hash"])
def test_a_graph_compiles_and_runs_after_its_cached_library_is_damaged(cache, how):
    """The first compile fills the cache; after the damage, a fresh process compiles again
    (a crash there would show as its exit status) and gets the right numbers."""
    exec(compile(GRAPH, "graph", "exec"), {})
    libs = list(cache.root.glob("build/*/*/lib.so"))
    assert libs
    for lib in libs:
        if how == "no hash":
            meta = json.loads((lib.parent / "meta.json").read_text())
            del meta["lib.so"]
            (lib.parent / "meta.json").write_text(json.dumps(meta))
        else:
            _damage(lib, how)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(GRAPH)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "TASKLOOM_CACHE_DIR": str(cache.root)})
    assert done.returncode == 0, done.stderr
    for lib in libs:  # built again: whole, and as its entry records
        recorded = json.loads((lib.parent / "meta.json").read_text())["lib.so"]
        assert recorded["sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()


class _FailingCDLL:
    """ctypes.CDLL that fails its first ``n`` loads."""

    def __init__(self, n: int):
        self.left, self.calls = n, 0

    def CDLL(self, path):  # noqa: N802  (ctypes' name)
        self.calls += 1
        if self.left > 0:
            self.left -= 1
            raise OSError(f"{path}: invalid ELF header")
        return ctypes.CDLL(path)


def _graph():
    x = input((2, 3), name="x")
    return Graph([x], [ops.neg(x)])


def test_a_library_that_will_not_load_is_built_again_once(cache, monkeypatch):
    taskloom.compile(_graph())
    stub, runs = _FailingCDLL(1), []
    monkeypatch.setattr(build_module, "ctypes", stub)

    class Counted(subprocess.Popen):
        def __init__(self, *a, **k):
            runs.append(a)
            super().__init__(*a, **k)
    monkeypatch.setattr(subprocess, "Popen", Counted)
    compiled = taskloom.compile(_graph())
    assert stub.calls == 2 and len(runs) == 1  # the cached library failed; one build replaced it
    np.testing.assert_array_equal(compiled(np.ones((2, 3), np.float32)), -np.ones((2, 3), np.float32))


def test_a_library_that_never_loads_is_a_clear_error(cache, monkeypatch):
    monkeypatch.setattr(build_module, "ctypes", _FailingCDLL(2))
    with pytest.raises(LoadError, match="cannot be loaded even after building it again: .*invalid ELF header"):
        taskloom.compile(_graph())
    assert list(cache.root.glob("build/*/*/lib.so")) == []
