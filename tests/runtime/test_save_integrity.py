"""Saved models: damaged, truncated, edited or planted files are refused before any of their
code runs; keyed files; concurrent saves; the library loaded from a private place."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import stat
import struct
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

import taskloom
from taskloom import ops
from taskloom.errors import ArgumentError, LoadError, TaskloomError
from taskloom.graph import Graph, input
from taskloom.runtime import library_file, saved_file
from taskloom.runtime.compiled_graph import CompiledGraph

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

rng = np.random.default_rng(3)
X = rng.standard_normal((4, 8)).astype(np.float32)


def _compile(build, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TASKLOOM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "taskloom-cache"))
        return build()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """relu(x + w) * v and x + w: two constants, two outputs."""
    w, v = (taskloom.asarray(rng.standard_normal(8).astype(np.float32)) for _ in range(2))
    x = input((4, 8), name="x")
    s = ops.add(x, w)
    return _compile(lambda: taskloom.compile(Graph([x], [ops.mul(ops.relu(s), v), s])), tmp_path_factory)


@pytest.fixture(scope="module")
def other(tmp_path_factory):
    """A second model with other kernels: exp(x)."""
    x = input((4, 8), name="x")
    return _compile(lambda: taskloom.compile(Graph([x], [ops.exp(x)])), tmp_path_factory)


@pytest.fixture
def saved(model, tmp_path):
    path = tmp_path / "model.tlm"
    model.save(path)
    return path


@pytest.fixture
def no_loading(monkeypatch):
    """Fails the test if a saved library is ever loaded."""
    def refuse(lib, where):
        raise AssertionError(f"the library of {where} was loaded")
    monkeypatch.setattr(saved_file, "load_private", refuse)


def _split(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack_from("<Q", data, 16)
    return json.loads(data[24:24 + n]), data[24 + n:-32]


def _join(header: dict, body: bytes, magic: bytes = saved_file.MAGIC) -> bytes:
    """A file with ``header`` and ``body`` and a freshly computed plain checksum."""
    head = json.dumps(header).encode()
    signed = magic + struct.pack("<Q", len(head)) + head + body
    return signed + hashlib.sha256(signed).digest()


def _same(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


# -- round trips --------------------------------------------------------------------------

def test_round_trip_and_saving_a_loaded_model_again(model, saved, tmp_path):
    loaded = taskloom.load(saved)
    _same(loaded(X), model(X))
    assert loaded.lib_path == saved
    assert len(loaded.profile(X, repeats=2, warmup=0)) == len(model.meta["kernels"])
    again = tmp_path / "again.tlm"
    loaded.save(again)
    _same(taskloom.load(again)(X), model(X))


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """An empty temporary directory in place of the machine's."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr("tempfile.tempdir", None)
    return folder


def test_nothing_is_written_out_and_models_do_not_mix(model, other, saved, tmp_path, private_tmp, monkeypatch):
    if hasattr(os, "memfd_create"):
        monkeypatch.setattr(library_file, "_load_from_private_dir", lambda *a: pytest.fail("not loaded from memory"))
    second = tmp_path / "other.tlm"
    other.save(second)
    for _ in range(3):  # descriptor numbers repeat from one load to the next
        _same(taskloom.load(saved)(X), model(X))
        np.testing.assert_array_equal(taskloom.load(second)(X), other(X))
    assert os.listdir(private_tmp) == []


def test_without_memory_files_a_private_directory_is_used_and_removed(model, saved, monkeypatch, private_tmp):
    modes, real_mkdtemp = [], tempfile.mkdtemp

    def mkdtemp(**kwargs):
        folder = real_mkdtemp(**kwargs)
        modes.append(stat.S_IMODE(os.stat(folder).st_mode))
        return folder
    monkeypatch.setattr(os, "memfd_create", lambda *a: (_ for _ in ()).throw(OSError("no memory files")))
    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    _same(taskloom.load(saved)(X), model(X))
    assert modes == [0o700] and os.listdir(private_tmp) == []


# -- damage -------------------------------------------------------------------------------

def test_every_flipped_byte_is_refused_before_loading(saved, no_loading):
    data = saved.read_bytes()
    (n,) = struct.unpack_from("<Q", data, 16)
    positions = set(range(24 + n)) | set(np.random.default_rng(0).integers(24 + n, len(data), 200).tolist())
    positions |= set(range(len(data) - 32, len(data)))
    for k in sorted(positions):
        damaged = bytearray(data)
        damaged[k] ^= 1 << (k % 8)
        saved.write_bytes(bytes(damaged))
        with pytest.raises(LoadError, match=str(saved)):
            taskloom.load(saved)


@pytest.mark.slow
def test_every_byte_of_the_file_flipped_is_refused(saved, no_loading):
    data = saved.read_bytes()
    for k in range(len(data)):
        damaged = bytearray(data)
        damaged[k] ^= 0x80
        saved.write_bytes(bytes(damaged))
        with pytest.raises(LoadError):
            taskloom.load(saved)


def test_truncated_and_extended_files_are_refused(saved, no_loading):
    data = saved.read_bytes()
    for size in [0, 10, 16, 17, 24, 40, *range(100, len(data), 397), len(data) - 1]:
        saved.write_bytes(data[:size])
        with pytest.raises(LoadError, match="damaged|not a saved taskloom model"):
            taskloom.load(saved)
    saved.write_bytes(data + b"\0")
    with pytest.raises(LoadError, match="damaged"):
        taskloom.load(saved)


def test_an_old_format_file_is_refused_with_what_to_do(saved):
    header, body = _split(saved.read_bytes())
    saved.write_bytes(_join(header, body, magic=b"TASKLOOM-MODEL\x00\x01"))
    with pytest.raises(LoadError, match="format 1.*compile the model again and save it"):
        taskloom.load(saved)
    saved.write_bytes(_join(header, body, magic=b"TASKLOOM-MODEL\x00\x09"))
    with pytest.raises(LoadError, match="format 9, newer"):
        taskloom.load(saved)


# -- edited headers with a recomputed checksum -----------------------------------------

def _edit_constant_offset(h):
    h["constants"][1]["offset"] += 4


def _edit_arena(h):
    h["meta"]["arena_bytes"] += 1 << 20


def _edit_output_shape(h):
    h["meta"]["outputs"][0]["shape"] = [8, 8]


def _edit_constant_shape(h):
    h["constants"][0]["shape"] = [2, 4]


def _edit_drop_constant(h):
    h["constants"].pop()


def _edit_input_dtype(h):
    h["meta"]["inputs"][0]["dtype"] = "int32"


def _edit_kernels(h):
    h["meta"]["kernels"].append(dict(h["meta"]["kernels"][0], name="extra"))


def _edit_isa(h):
    h["meta"]["target"]["isa"] = ["sse4_2"]


def _edit_copy(h):
    h["meta"]["outputs"][1]["copy_of"] = ["w", 5]


def _edit_library_bytes(h):
    h["library_bytes"] -= 8


EDITS = {
    _edit_constant_offset: "constant 1 starts at byte",
    _edit_arena: "arena_bytes .* differs from the library's own record",
    _edit_output_shape: "outputs .* differs from the library's own record",
    _edit_constant_shape: "constants .* differs from the library's own record",
    _edit_drop_constant: "must fill it exactly",
    _edit_input_dtype: "inputs .* differs from the library's own record",
    _edit_kernels: "kernels .* differs from the library's own record",
    _edit_isa: "isa .* differs from the library's own record",
    _edit_copy: "output 1 copies",
    _edit_library_bytes: "constant 0 starts at byte",
}


@pytest.mark.parametrize("edit", list(EDITS), ids=lambda e: e.__name__[len("_edit_"):])
def test_an_edited_header_with_a_recomputed_checksum_is_refused(saved, edit, no_loading):
    header, body = _split(saved.read_bytes())
    edit(header)
    saved.write_bytes(_join(header, body))
    with pytest.raises(LoadError, match=EDITS[edit]):
        taskloom.load(saved)


# -- planted libraries -------------------------------------------------------------------

PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void plant(void) {
  FILE* f = fopen("%s", "w");
  if (f) { fputs("ran", f); fclose(f); }
}
void taskloom_graph(void* const* w, void* const* in, void* const* out, char* arena) {}
"""


def _planted(tmp_path: Path, marker: Path, record: dict | None = None) -> bytes:
    """A library whose constructor writes ``marker``, with ``record`` in its section if given."""
    source = tmp_path / "planted.c"
    source.write_text(PLANTED % marker + (library_file.record_source(record) if record else ""))
    lib = tmp_path / "planted.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    return lib.read_bytes()


def _with_library(data: bytes, lib: bytes, keyed: bool = False) -> tuple[dict, bytes]:
    header, body = _split(data)
    shift = len(lib) - header["library_bytes"]
    body = lib + body[header["library_bytes"]:]
    header["library_bytes"], header["keyed"] = len(lib), keyed
    for c in header["constants"]:
        c["offset"] += shift
    return header, body


def test_a_planted_library_never_runs(saved, tmp_path):
    marker = tmp_path / "ran"
    header, body = _with_library(saved.read_bytes(), _planted(tmp_path, marker))
    saved.write_bytes(_join(header, body))
    with pytest.raises(LoadError, match="0 '.taskloom_meta' sections"):
        taskloom.load(saved)
    assert not marker.exists()


def test_a_planted_library_with_a_forged_record_is_refused_with_a_key(model, saved, tmp_path):
    marker = tmp_path / "ran"
    record = saved_file.graph_record(model.meta, [(c.dtype.name, c.shape) for c in model.constants])
    header, body = _with_library(saved.read_bytes(), _planted(tmp_path, marker, record), keyed=True)
    saved.write_bytes(_join(header, body))  # keyed in its header, but anyone can compute a SHA-256
    for key in ("secret", None):
        with pytest.raises(LoadError, match="does not match the key|header says"):
            taskloom.load(saved, key=key)
    assert not marker.exists()


def test_saving_refuses_a_library_without_a_record(model, tmp_path):
    lib = tmp_path / "planted.so"
    lib.write_bytes(_planted(tmp_path, tmp_path / "ran"))
    graph = CompiledGraph(lib, model.meta, model.constants)
    with pytest.raises(TaskloomError, match="cannot save .*compile the model again"):
        graph.save(tmp_path / "out.tlm")
    assert not (tmp_path / "out.tlm").exists()


# -- keys ---------------------------------------------------------------------------------

def test_keyed_round_trip_wrong_key_and_missing_key(model, tmp_path):
    path = tmp_path / "keyed.tlm"
    model.save(path, key="correct horse")
    _same(taskloom.load(path, key="correct horse")(X), model(X))
    _same(taskloom.load(path, key=b"correct horse")(X), model(X))
    with pytest.raises(LoadError, match="does not match the key given"):
        taskloom.load(path, key="wrong horse")
    with pytest.raises(LoadError, match="saved with a key"):
        taskloom.load(path)
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(LoadError, match="does not match the key given"):
        taskloom.load(path, key="correct horse")


def test_a_key_for_a_plain_file_and_bad_keys(saved):
    with pytest.raises(LoadError, match="saved without a key"):
        taskloom.load(saved, key="k")
    for bad in (b"", "", 3):
        with pytest.raises(ArgumentError, match="key="):
            taskloom.load(saved, key=bad)


# -- concurrent saves ----------------------------------------------------------------------

def _save_many(model, path, n, errors):
    try:
        for _ in range(n):
            model.save(path)
    except BaseException as e:  # noqa: BLE001  (reported by the test)
        errors.append(repr(e))


def test_threads_saving_to_one_path(model, tmp_path):
    path, errors = tmp_path / "shared.tlm", []
    threads = [threading.Thread(target=_save_many, args=(model, path, 20, errors)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert os.listdir(tmp_path) == ["shared.tlm"]
    _same(taskloom.load(path)(X), model(X))


def _process_saves(src: str, dst: str, queue) -> None:
    errors: list[str] = []
    _save_many(CompiledGraph.load(src), dst, 20, errors)
    queue.put(errors)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_processes_saving_to_one_path(model, saved, tmp_path):
    path = tmp_path / "shared.tlm"
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_process_saves, args=(str(saved), str(path), queue)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * 4 and results == [[]] * 4
    assert sorted(os.listdir(tmp_path)) == ["model.tlm", "shared.tlm"]
    _same(taskloom.load(path)(X), model(X))


def test_a_failed_save_leaves_the_old_file(model, saved, monkeypatch):
    before = saved.read_bytes()
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        model.save(saved, key="k")
    assert saved.read_bytes() == before and os.listdir(saved.parent) == [saved.name]


def test_the_record_reader_refuses_what_is_not_a_well_formed_elf_file(model):
    lib = model._lib_bytes
    assert library_file.read_record(lib, "lib") == saved_file.graph_record(
        model.meta, [(c.dtype.name, c.shape) for c in model.constants])
    shoff = struct.unpack_from("<Q", lib, 0x28)[0]
    for k in [*range(64), *range(shoff, len(lib))]:  # the ELF header and the section table
        damaged = bytearray(lib)
        damaged[k] ^= 0xFF
        try:
            library_file.read_record(bytes(damaged), "lib")
        except LoadError:
            pass
    for junk in (b"", b"\x7fELF", b"\x7fELF\x02\x01" + b"\xff" * 200, bytes(4096)):
        with pytest.raises(LoadError, match="lib: the library is not a readable"):
            library_file.read_record(junk, "lib")
