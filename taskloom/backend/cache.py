"""A content-addressed, size-bounded cache of built native modules.

Layout under the root (``TASKLOOM_CACHE_DIR``, default ``~/.cache/taskloom``)::

    build/<hh>/<hash>/   source.c, lib.so, meta.json   one entry per key
    failed/<name>-<hash>.c, .log                        sources that did not compile
    tmp/                                                 entries being written

An entry becomes visible only by renaming a complete directory into place, so readers
never see a half-written one; entries leave the same way (renamed into ``tmp/``, then
deleted), so a reader never sees a half-deleted one either. ``meta.json`` records the size
and SHA-256 of ``lib.so``; a lookup checks both (the hash once per file this process has
not yet checked) and drops an entry that differs, or that records neither, so that it is
built again instead of loaded.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from taskloom.errors import TaskloomError

DEFAULT_MAX_BYTES = 2 * 1024 ** 3
_SOURCE_SUFFIXES = (".c", ".cu")
_KEY = re.compile(r"[0-9a-f]{16,128}")
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_STALE_TMP_SECONDS = 24 * 3600  # temp dirs this old belong to a crashed writer
_LIB_RECORD = "lib.so"  # meta.json's record of the library: {"bytes": size, "sha256": hex digest}
_VERIFIED_MAX = 4096
# libraries whose hash this process has checked: path -> ((size, mtime_ns, inode, device), sha256)
_verified: OrderedDict[str, tuple[tuple[int, int, int, int], str]] = OrderedDict()
_verified_lock = threading.Lock()


@dataclass(frozen=True)
class CacheEntry:
    """One built module in the cache."""

    path: Path
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def lib_path(self) -> Path:
        """The shared library."""
        return self.path / "lib.so"

    @property
    def source_path(self) -> Path:
        """The source it was built from (``source.c``, or ``source.cu`` for CUDA)."""
        cuda = self.path / "source.cu"
        return cuda if cuda.is_file() else self.path / "source.c"


class BuildCache:
    """Built modules keyed by a hex digest of everything that determines them."""

    def __init__(self, root: Path | str | None = None, max_bytes: int | None = None):
        if root is None:
            root = os.environ.get("TASKLOOM_CACHE_DIR") or Path.home() / ".cache" / "taskloom"
        if max_bytes is None:
            max_bytes = _env_max_bytes()
        if max_bytes < 1:
            raise TaskloomError(f"the cache size bound must be positive, got {max_bytes}")
        self.root = Path(root).expanduser()
        self.max_bytes = max_bytes

    @classmethod
    def default(cls) -> BuildCache:
        """The cache named by the environment as it is now."""
        return cls()

    def __repr__(self) -> str:
        return f"BuildCache(root={str(self.root)!r}, max_bytes={self.max_bytes})"

    # -- entries ------------------------------------------------------------------------

    def entry_path(self, key: str) -> Path:
        """Where the entry for ``key`` lives (whether or not it exists)."""
        if not _KEY.fullmatch(key):
            raise TaskloomError(f"cache key must be 16-128 lowercase hex digits, got {key!r}")
        return self.root / "build" / key[:2] / key

    def lookup(self, key: str) -> CacheEntry | None:
        """The entry for ``key``, or None; an entry that is incomplete, damaged (its library's
        size or hash differs from the recorded one) or records no hash is removed and reads
        as a miss."""
        path = self.entry_path(key)
        if not path.is_dir():
            return None
        try:
            meta = json.loads((path / "meta.json").read_text())
            if not isinstance(meta, dict) or not _intact(path / "lib.so", meta.pop(_LIB_RECORD, None)):
                raise ValueError("incomplete or damaged entry")
        except (OSError, ValueError):
            self._discard(path)
            return None
        try:
            os.utime(path)  # the directory's mtime is its last use, for LRU eviction
        except OSError:
            pass
        return CacheEntry(path, meta)

    def store(self, key: str, files: Mapping[str, bytes | str | Path],
              meta: Mapping[str, Any] | None = None) -> CacheEntry:
        """Add an entry holding ``files`` (contents, or paths to copy) and ``meta``.

        ``files`` must include ``lib.so``. If another process stored ``key`` first, its
        entry is kept and returned. Least recently used entries are then evicted until the
        cache is under its size bound.
        """
        final = self.entry_path(key)
        if "lib.so" not in files:
            raise TaskloomError(f"a cache entry needs a 'lib.so'; got files {sorted(files)}")
        if meta and _LIB_RECORD in meta:
            raise TaskloomError(f"meta key {_LIB_RECORD!r} is the cache's own record of the library; "
                                "use another name")
        plain_meta = json.loads(json.dumps(dict(meta or {}), default=str))
        for _attempt in range(3):
            staging = Path(tempfile.mkdtemp(prefix=key[:16] + "-", dir=self._tmp_dir()))
            try:
                for name, content in files.items():
                    _write_file(staging, name, content)
                lib_record = _record_library(staging / "lib.so")
                stamp = _stamp(os.lstat(staging / "lib.so"))
                (staging / "meta.json").write_text(json.dumps({**plain_meta, _LIB_RECORD: lib_record},
                                                              indent=1, sort_keys=True))
                final.parent.mkdir(parents=True, exist_ok=True)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            try:
                os.rename(staging, final)
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)
                # Another writer won the race: use its entry unless it is corrupt.
                entry = self.lookup(key)
                if entry is not None:
                    return entry
                continue
            _remember(final / "lib.so", lib_record["sha256"], stamp)  # a rename keeps the stamp
            self._evict(keep=final)
            return CacheEntry(final, plain_meta)
        raise TaskloomError(f"could not store cache entry {key} under {self.root}: "
                            f"its place kept being taken by corrupt entries")

    def remove(self, key: str) -> None:
        """Drop the entry for ``key``, if there is one (say, a library that would not load)."""
        path = self.entry_path(key)
        if path.is_dir():
            self._discard(path)

    def failed_path(self, key: str, name: str, suffix: str = ".c") -> Path:
        """Where :meth:`save_failed` keeps the source of a failed build of ``key`` (``.c`` or ``.cu``)."""
        self.entry_path(key)  # validates the key
        if suffix not in _SOURCE_SUFFIXES:
            raise TaskloomError(f"a failed source is kept as one of {_SOURCE_SUFFIXES}, not {suffix!r}")
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".") or "module"
        return self.root / "failed" / f"{safe}-{key}{suffix}"

    def save_failed(self, key: str, name: str, source: str, log: str = "", suffix: str = ".c") -> Path:
        """Keep a source that failed to build (and the compiler's output) for the user to open."""
        path = self.failed_path(key, name, suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, source)
        if log:
            _atomic_write(path.with_suffix(".log"), log)
        self._evict(keep=path)
        return path

    def scratch_dir(self) -> tempfile.TemporaryDirectory[str]:
        """A temporary directory on the cache's file system, removed when its ``with`` ends."""
        return tempfile.TemporaryDirectory(prefix="scratch-", dir=self._tmp_dir())

    # -- housekeeping -------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Root, number of entries, bytes used and the size bound."""
        items = self._items()
        failed = self.root / "failed"
        return {
            "root": str(self.root),
            "entries": sum(1 for _, _, path in items if path.parent != failed),
            "failed_sources": sum(1 for _, _, path in items
                                  if path.parent == failed and path.suffix in _SOURCE_SUFFIXES),
            "total_bytes": sum(size for _, size, _ in items),
            "max_bytes": self.max_bytes,
        }

    def clear(self) -> int:
        """Remove every entry, failed source and temporary file; return the bytes freed."""
        freed = 0
        for sub in ("build", "failed", "tmp"):
            path = self.root / sub
            if path.is_dir():
                freed += _tree_size(path)
                shutil.rmtree(path, ignore_errors=True)
        return freed

    def _tmp_dir(self) -> Path:
        path = self.root / "tmp"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _items(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, path) of every entry and failed file."""
        items = []
        for path in self.root.glob("build/??/*"):
            try:
                items.append((path.stat().st_mtime, _tree_size(path), path))
            except OSError:  # removed meanwhile
                pass
        for path in self.root.glob("failed/*"):
            try:
                st = path.stat()
                items.append((st.st_mtime, st.st_size, path))
            except OSError:
                pass
        return items

    def _evict(self, keep: Path) -> None:
        """Drop least recently used items until under the bound, never ``keep``."""
        items = sorted(self._items(), key=lambda item: item[0])
        total = sum(size for _, size, _ in items)
        for _, size, path in items:
            if total <= self.max_bytes:
                break
            if path == keep or any(path.with_suffix(x) == keep for x in _SOURCE_SUFFIXES):  # with its .log
                continue
            self._discard(path)
            total -= size
        now = time.time()
        for path in list((self.root / "tmp").glob("*")):
            try:
                if now - path.stat().st_mtime > _STALE_TMP_SECONDS:
                    self._discard(path)
            except OSError:
                pass

    def _discard(self, path: Path) -> None:
        """Remove ``path`` atomically from readers' view, then delete it."""
        if path.is_file():
            path.unlink(missing_ok=True)
            return
        grave = Path(tempfile.mkdtemp(prefix="discard-", dir=self._tmp_dir())) / "entry"
        try:
            os.rename(path, grave)
        except OSError:  # already gone
            pass
        shutil.rmtree(grave.parent, ignore_errors=True)


def _env_max_bytes() -> int:
    text = os.environ.get("TASKLOOM_CACHE_MAX_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return int(text)
    except ValueError:
        raise TaskloomError(f"TASKLOOM_CACHE_MAX_BYTES must be a number of bytes, got {text!r}") from None


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev


def _record_library(lib: Path) -> dict[str, Any]:
    """What meta.json records of a library about to be stored."""
    return {"bytes": lib.stat().st_size, "sha256": _sha256_file(lib)}


def _remember(lib: Path, sha256: str, stamp: tuple[int, int, int, int]) -> None:
    """Note that ``lib``, while its stat stamp is ``stamp``, has the hash ``sha256``."""
    with _verified_lock:
        _verified[str(lib)] = (stamp, sha256)
        _verified.move_to_end(str(lib))
        while len(_verified) > _VERIFIED_MAX:
            _verified.popitem(last=False)


def _intact(lib: Path, record: Any) -> bool:
    """Whether ``lib`` has the size and hash ``record`` gives; False without a record."""
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
        return False
    st = os.lstat(lib)
    if not stat.S_ISREG(st.st_mode) or st.st_size != record.get("bytes"):
        return False
    with _verified_lock:
        if _verified.get(str(lib)) == (_stamp(st), record["sha256"]):
            return True
    if _sha256_file(lib) != record["sha256"]:
        return False
    _remember(lib, record["sha256"], _stamp(st))
    return True


def _write_file(folder: Path, name: str, content: bytes | str | Path) -> None:
    if not _FILE_NAME.fullmatch(name) or name == "meta.json":
        raise TaskloomError(f"invalid cache entry file name {name!r}")
    target = folder / name
    if isinstance(content, Path):
        shutil.copyfile(content, target)
    elif isinstance(content, str):
        target.write_text(content)
    else:
        target.write_bytes(content)


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".", dir=path.parent)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _tree_size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total
