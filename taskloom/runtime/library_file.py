"""A compiled graph's shared library as bytes: the record of the graph's signature that the
build embeds in it, read back without loading the library, and loading it from a place
only this process can reach.

The record is JSON in the ELF section ``.taskloom_meta``; :func:`record_source` writes the C
that puts it there and :func:`read_record` finds it with the section table alone, so a
saved model's header is checked against its library before any of the library's code runs.
"""
from __future__ import annotations

import ctypes
import itertools
import json
import os
import shutil
import struct
import tempfile
import threading
from typing import Any, Mapping, NamedTuple

from taskloom.errors import LoadError

RECORD_SECTION = ".taskloom_meta"
_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
_SHT_NOBITS = 8
_CHUNK = 96  # characters of the record per line of C


class LoadedLibrary(NamedTuple):
    """A loaded library and the bytes it was loaded from."""

    handle: ctypes.CDLL
    data: bytes


def record_source(record: Mapping[str, Any]) -> str:
    """C that stores ``record`` (JSON-able) in the library's ``.taskloom_meta`` section."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    lines = "\n".join(f'  "{_c_escape(text[i:i + _CHUNK])}"' for i in range(0, len(text), _CHUNK))
    return ("\n// the graph's signature, which taskloom.load compares with a saved model's header\n"
            f'__attribute__((section("{RECORD_SECTION}"), used, aligned(1)))\n'
            f"static const char taskloom_record[] =\n{lines};\n")


def _c_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("?", "\\?")


def read_record(lib: bytes | memoryview, where: str) -> dict[str, Any]:
    """The record in ``lib``'s ``.taskloom_meta`` section; :class:`LoadError` naming ``where``
    when ``lib`` is no 64-bit little-endian ELF file or holds no readable record."""
    sections = _sections(memoryview(lib), where)
    found = [(offset, size) for name, offset, size in sections if name == RECORD_SECTION.encode()]
    if len(found) != 1:
        raise LoadError(f"{where}: the library has {len(found)} '{RECORD_SECTION}' sections, not one; "
                        "a taskloom graph library records its signature there once (compile the model again)")
    offset, size = found[0]
    try:
        record = json.loads(bytes(lib[offset:offset + size]).rstrip(b"\0").decode("ascii"))
    except (ValueError, RecursionError):
        record = None
    if not isinstance(record, dict):
        raise LoadError(f"{where}: the library's '{RECORD_SECTION}' section is not a JSON object")
    return record


def _sections(lib: memoryview, where: str) -> list[tuple[bytes, int, int]]:
    """(name, file offset, size) of each section of an ELF64 little-endian file."""
    def bad(what: str) -> LoadError:
        return LoadError(f"{where}: the library is not a readable 64-bit little-endian ELF file ({what})")
    if len(lib) < _ELF_HEADER.size:
        raise bad(f"{len(lib)} bytes, shorter than an ELF header")
    ident, *_, shoff, _flags, _ehsize, _phentsize, _phnum, shentsize, shnum, shstrndx = \
        _ELF_HEADER.unpack_from(lib, 0)
    if ident[:6] != b"\x7fELF\x02\x01":
        raise bad("its first bytes are not 7f 'ELF' 02 01")
    if shentsize != _SECTION_HEADER.size or shnum == 0 or shstrndx >= shnum \
            or shoff + shnum * shentsize > len(lib):
        raise bad(f"its section table ({shnum} entries of {shentsize} bytes at {shoff}) does not fit "
                  f"its {len(lib)} bytes")
    headers = [_SECTION_HEADER.unpack_from(lib, shoff + k * shentsize) for k in range(shnum)]
    names_at, names_size = _extent(headers[shstrndx], len(lib), bad)
    names = bytes(lib[names_at:names_at + names_size])
    sections = []
    for h in headers:
        start = h[0]
        end = names.find(b"\0", start)
        if start >= len(names) or end < 0:
            raise bad(f"a section name at {start} lies outside its {len(names)}-byte name table")
        if h[1] != _SHT_NOBITS:
            sections.append((names[start:end], *_extent(h, len(lib), bad)))
    return sections


def _extent(header: tuple[int, ...], size: int, bad: Any) -> tuple[int, int]:
    offset, length = header[4], header[5]
    if header[1] != _SHT_NOBITS and offset + length > size:
        raise bad(f"a section of {length} bytes at {offset} runs past its {size} bytes")
    return offset, length


# -- loading from a private place --------------------------------------------------------

_loads = itertools.count()
_loads_lock = threading.Lock()


def load_private(lib: bytes, where: str) -> LoadedLibrary:
    """Loads ``lib`` from an anonymous memory file (Linux) or else from a fresh directory only
    this user can open, removed once loaded; nothing on disk is shared or reused."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        try:
            return LoadedLibrary(_load_memfd(lib, where), lib)
        except OSError:  # memory files refused (a noexec policy): the directory instead
            pass
    return LoadedLibrary(_load_from_private_dir(lib, where), lib)


def _load_memfd(lib: bytes, where: str) -> ctypes.CDLL:
    fd = os.memfd_create("taskloom-model", getattr(os, "MFD_CLOEXEC", 0))
    try:
        view = memoryview(lib)
        while view:
            view = view[os.write(fd, view):]
        _check_read_back(os.pread(fd, len(lib) + 1, 0), lib, where)
        return ctypes.CDLL(_fd_name(fd))
    finally:
        os.close(fd)


def _fd_name(fd: int) -> str:
    """A path of ``fd`` that no earlier load used: the dynamic loader takes a name it has
    loaded before for that library, and descriptor numbers are reused once closed."""
    with _loads_lock:
        k = next(_loads)
    variant = "".join("./" if bit == "1" else "/" for bit in bin(k)[2:]) if k else ""
    return f"/proc/self/{variant}fd/{fd}"


def _load_from_private_dir(lib: bytes, where: str) -> ctypes.CDLL:
    folder = tempfile.mkdtemp(prefix="taskloom-model-")  # mode 0700, this user's own
    try:
        path = os.path.join(folder, "model.so")
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700), "wb") as f:
            f.write(lib)
        with open(path, "rb") as f:
            _check_read_back(f.read(), lib, where)
        try:
            return ctypes.CDLL(path)
        except OSError as exc:
            raise LoadError(f"cannot load the library saved in {where}: {exc}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_read_back(found: bytes, lib: bytes, where: str) -> None:
    if found != lib:
        raise LoadError(f"{where}: the library written out for loading reads back as {len(found)} "
                        f"different bytes, not the {len(lib)} saved; check the temporary directory's file system")
