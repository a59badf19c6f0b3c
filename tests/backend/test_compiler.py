import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from taskloom.backend import compiler
from taskloom.backend.cache import BuildCache
from taskloom.backend.compiler import build_flags, build_key, compile_shared_library, compiler_version
from taskloom.errors import CompileError
from taskloom.target import CpuTarget

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

HOST = CpuTarget.host()
ADD = "int add(int a, int b) { return a + b; }\n"
HAS_AVX512 = """
int has_avx512(void) {
#ifdef __AVX512F__
    return 1;
#else
    return 0;
#endif
}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CC", raising=False)
    return BuildCache.default()


def _call(lib_path: Path, fn: str, *args: int) -> int:
    function = getattr(ctypes.CDLL(str(lib_path)), fn)
    function.restype = ctypes.c_int
    return function(*args)


def test_compile_load_and_call(cache):
    lib = compile_shared_library(ADD, HOST, name="add", meta={"kernels": ["add"]})
    assert lib.is_file() and lib.is_relative_to(cache.root)
    assert _call(lib, "add", 2, 40) == 42
    entry = cache.lookup(build_key(ADD, build_flags(HOST), HOST))
    assert entry.meta["kernels"] == ["add"] and entry.meta["target"] == HOST.key()
    assert entry.meta["compiler"] == compiler_version()
    assert entry.source_path.read_text() == ADD


def test_second_compile_is_a_cache_hit(cache, monkeypatch):
    first = compile_shared_library(ADD, HOST)

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"compiler ran on a cache hit: {args}")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    assert compile_shared_library(ADD, HOST) == first


def test_syntax_error_raises_with_compiler_text_and_kept_source(cache):
    broken = "int add(int a, int b) { return a + ; }\n"
    with pytest.raises(CompileError) as info:
        compile_shared_library(broken, HOST, name="broken add")
    error = info.value
    kept = Path(error.source_path)
    assert kept.is_file() and kept.read_text() == broken
    assert kept.parent == cache.root / "failed" and build_key(broken, build_flags(HOST), HOST) in kept.name
    assert "error" in error.compiler_output and "expected expression" in str(error)
    assert str(kept) in str(error)
    assert str(kept) + ":1:" in error.compiler_output  # file:line points at the kept copy
    assert cache.info()["entries"] == 0


def test_timeout_raises_compile_error(cache, monkeypatch):
    compiler_version()

    class Slow(subprocess.Popen):
        def communicate(self, timeout=None):
            raise subprocess.TimeoutExpired(self.args, timeout)

    monkeypatch.setattr(subprocess, "Popen", Slow)
    with pytest.raises(CompileError, match="timed out after 5 s"):
        compile_shared_library(ADD, HOST, timeout=5)


def test_missing_compiler(cache, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc --weird")
    assert compiler.compiler_command() == ["/nonexistent/cc", "--weird"]
    with pytest.raises(CompileError, match="set CC"):
        compile_shared_library(ADD, HOST)


def test_keys_depend_on_flags_and_target():
    other = HOST.with_isa("sse4_2")  # a target other than the host on any x86-64 machine
    keys = {
        build_key(ADD, build_flags(HOST), HOST),
        build_key(ADD, build_flags(HOST, ["-DX=1"]), HOST),
        build_key(ADD, build_flags(other), other),
        build_key(ADD + " ", build_flags(HOST), HOST),
    }
    assert len(keys) == 4
    assert build_key(ADD, build_flags(HOST), HOST) == build_key(ADD, build_flags(HOST), HOST)


def test_avx2_build_has_no_avx512(cache):
    avx2 = HOST.with_isa("avx2")
    assert _call(compile_shared_library(HAS_AVX512, avx2, name="probe"), "has_avx512") == 0
    if HOST.has("avx512f"):
        assert _call(compile_shared_library(HAS_AVX512, HOST, name="probe"), "has_avx512") == 1


def test_cross_build_for_an_isa_the_host_lacks(cache, monkeypatch):
    from taskloom.target import cpu

    old = CpuTarget("old box", 1, {"sse4_2"})
    monkeypatch.setattr(cpu, "_read_host", lambda: old)
    target = CpuTarget.from_string("cpu -isa=avx512")
    assert not target.runs_on_host()
    flags = build_flags(target)
    assert "-mavx512f" in flags and "-march=native" not in flags
    lib = compile_shared_library(HAS_AVX512, target, name="cross")
    if HOST.has("avx512f"):
        assert _call(lib, "has_avx512") == 1
