"""Tuning records: what each measured configuration of a workload cost on a target.

Records live in one sqlite database, by default ``tune.sqlite`` under the build cache's
root (``TASKLOOM_CACHE_DIR``, default ``~/.cache/taskloom``), so that a compile on this
machine reuses what an earlier tuning run measured. The database is in WAL mode and every
operation opens its own connection with a busy timeout, so several processes (parallel
test workers, concurrent compiles) may read and write it at once.

A configuration is a JSON-able dict; it is stored as its canonical JSON
(:func:`config_key`), which is also how :meth:`Records.results` keys it.
"""
from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator

from taskloom.backend.cache import BuildCache
from taskloom.errors import TaskloomError

FILE_NAME = "tune.sqlite"
BUSY_TIMEOUT_S = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    workload TEXT NOT NULL,
    target TEXT NOT NULL,
    config TEXT NOT NULL,
    seconds REAL,
    error TEXT,
    created REAL NOT NULL,
    UNIQUE (workload, target, config)
)
"""


def config_key(config: dict[str, Any]) -> str:
    """The canonical JSON of ``config``: sorted keys, no spaces (tuples read back as lists)."""
    if not isinstance(config, dict):
        raise TaskloomError(f"a tuning config must be a dict, got {type(config).__name__}")
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TaskloomError(f"a tuning config must be JSON-able (str keys; numbers, strings, "
                            f"bools, lists, dicts), got {config!r}: {exc}") from None


class Records:
    """Tuning results in an sqlite file: (workload, target, config) -> seconds or error.

    Adding a result for a (workload, target, config) already present replaces it.
    """

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path).expanduser() if path is not None else BuildCache.default().root / FILE_NAME
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TaskloomError(f"cannot create the folder of the tuning records {self.path}: {exc}") from None
        with self._connect() as db:
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)

    @classmethod
    def default(cls) -> Records:
        """The records beside the build cache named by the environment as it is now."""
        return cls()

    def __repr__(self) -> str:
        return f"Records(path={str(self.path)!r})"

    def add(self, workload: str, target: str, config: dict[str, Any], seconds: float | None,
            error: str | None = None) -> None:
        """Record that ``config`` ran ``workload`` on ``target`` in ``seconds`` per call, or
        failed (``seconds`` None, ``error`` saying why)."""
        _check_name("workload", workload)
        _check_name("target", target)
        key = config_key(config)
        if seconds is not None:
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
                    or not math.isfinite(seconds) or seconds < 0:
                raise TaskloomError(f"seconds must be a finite non-negative number or None, got {seconds!r}")
            seconds = float(seconds)
        if error is not None and not isinstance(error, str):
            raise TaskloomError(f"error must be a string or None, got {type(error).__name__}")
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO records (workload, target, config, seconds, error, created) "
                       "VALUES (?, ?, ?, ?, ?, ?)", (workload, target, key, seconds, error, time.time()))

    def best(self, workload: str, target: str) -> dict[str, Any] | None:
        """The config of the fastest successful record of ``workload`` on ``target``, or None."""
        with self._connect() as db:
            row = db.execute("SELECT config FROM records WHERE workload = ? AND target = ? "
                             "AND seconds IS NOT NULL AND error IS NULL "
                             "ORDER BY seconds, created LIMIT 1", (workload, target)).fetchone()
        return None if row is None else json.loads(row[0])

    def results(self, workload: str, target: str) -> dict[str, tuple[float | None, str | None]]:
        """Every record of ``workload`` on ``target``: :func:`config_key` -> (seconds, error)."""
        with self._connect() as db:
            rows = db.execute("SELECT config, seconds, error FROM records WHERE workload = ? AND target = ?",
                              (workload, target)).fetchall()
        return {config: (seconds, error) for config, seconds, error in rows}

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection for one transaction: committed when the block ends, then closed."""
        try:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        except sqlite3.Error as exc:
            raise TaskloomError(f"cannot open the tuning records {self.path}: {exc}") from None
        try:
            with db:
                yield db
        except sqlite3.Error as exc:
            raise TaskloomError(f"tuning records {self.path}: {exc}") from None
        finally:
            db.close()


def _check_name(what: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise TaskloomError(f"{what} must be a non-empty string, got {value!r}")
