"""A library built as several translation units: the same functions, one scratch state, and
compiler messages at source.c's lines."""
import ctypes
import json
import shutil
import subprocess

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.backend import c_units, compiler
from taskloom.backend.c_prelude import PRELUDE, SCRATCH_STATE_DECLARED
from taskloom.backend.c_units import join_pieces, split_units, unit_count
from taskloom.backend.cache import BuildCache
from taskloom.backend.compiler import compile_shared_library
from taskloom.errors import CompileError
from taskloom.graph import Graph, input
from taskloom.target import CpuTarget

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

HOST = CpuTarget.host()
SCALE = ("int scale_{k}(int a) {{\n  int* s = (int*)tl_scratch_take(64);\n  s[0] = a * {k};\n"
         "  int r = s[0];\n  tl_scratch_give(s);\n  return r;\n}}")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKLOOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CC", raising=False)
    return BuildCache.default()


@pytest.fixture
def units(monkeypatch):
    """Every library with two or more functions splits, into up to three units."""
    monkeypatch.setattr(c_units, "MIN_UNIT_CHARS", 1)
    monkeypatch.setattr(compiler, "build_cores", lambda: 3)


def _pieces(count: int) -> list[str]:
    return ["// test\n\n" + PRELUDE, *(SCALE.format(k=k) for k in range(count))]


def test_unit_count_follows_cores_and_size():
    small, large = _pieces(4), ["p", *["for (" + "x" * c_units.MIN_UNIT_CHARS] * 5]
    assert unit_count(small, 16) == 1  # too little code for a second unit
    assert unit_count(large, 2) == 2 and unit_count(large, 16) == 5 and unit_count(large, 1) == 1
    straight = ["p", *["x" * c_units.MIN_UNIT_CHARS] * 5]  # no loops: builds several times faster
    assert unit_count(straight, 16) == 1


def test_units_declare_every_function_and_define_the_state_once():
    pieces = _pieces(5)
    parts = split_units(pieces, 3, "/x/source.c")
    assert len(parts) == 3
    for u, part in enumerate(parts):
        assert all(f"int scale_{k}(int a);" in part for k in range(5))
        assert (SCRATCH_STATE_DECLARED in part) == (u > 0)
    defined = [k for k in range(5) for part in parts if f"int scale_{k}(int a) {{" in part]
    assert sorted(defined) == list(range(5))  # each function in one unit


def test_each_piece_keeps_its_line_in_source_c():
    pieces = _pieces(4)
    joined = join_pieces(pieces).splitlines()
    for part in split_units(pieces, 2, "/x/source.c"):
        lines = part.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("#line"):
                number, name = line.split()[1:]
                assert name == '"/x/source.c"'
                assert joined[int(number) - 1] == lines[i + 1]


def test_split_library_runs_with_one_scratch_state(cache, units):
    lib = compile_shared_library(_pieces(6), HOST, name="scaled")
    entry = cache.lookup(lib.parent.name)
    assert entry.meta["units"] == 3 and (lib.parent / "source.c").read_text() == join_pieces(_pieces(6))
    dll = ctypes.CDLL(str(lib))
    assert [getattr(dll, f"scale_{k}")(7) for k in range(6)] == [7 * k for k in range(6)]
    symbols = subprocess.run(["nm", str(lib)], capture_output=True, text=True).stdout
    assert sum(line.endswith(" tl_scratch_keyed") for line in symbols.splitlines()) == 1


def test_error_in_a_unit_names_the_line_of_source_c(cache, units):
    pieces = _pieces(3) + ["int broken(int a) {\n  return a + ;\n}"]
    with pytest.raises(CompileError) as info:
        compile_shared_library(pieces, HOST, name="broken")
    kept = info.value.source_path
    line = join_pieces(pieces).splitlines().index("  return a + ;") + 1
    assert f"{kept}:{line}:" in info.value.compiler_output


def test_graph_built_in_units_matches_numpy(cache, units):
    x, w = input((5, 33), name="x"), input((33, 17), name="w")
    graph = Graph([x, w], [ops.softmax(ops.relu(ops.matmul(x, w)) * 2.0, axis=-1), ops.tanh(x)])
    compiled = taskloom.compile(graph)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in ((5, 33), (33, 17)))
    y, t = compiled(a, b)
    z = np.maximum(a @ b, 0) * 2
    np.testing.assert_allclose(y, np.exp(z) / np.exp(z).sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t, np.tanh(a), rtol=1e-5, atol=1e-6)
    metas = [json.loads(m.read_text()) for m in cache.root.glob("build/*/*/meta.json")]
    assert max(m.get("units", 1) for m in metas) > 1
