"""Tuning records: what each measured configuration of a workload cost on a target.

Records live in one sqlite database, by default ``tune.sqlite`` under the build cache's
root (``TASKLOOM_CACHE_DIR``, default ``~/.cache/taskloom``), so that a compile on this
machine reuses what an earlier tuning run measured. The database is in WAL mode and every
operation opens its own connection with a busy timeout, so several processes (parallel
test workers, concurrent compiles) may read and write it at once.

A configuration is a JSON-able dict; it is stored as its canonical JSON
(:func:`config_key`), which is also how :meth:`Records.results` keys it.

Records travel between machines and runs as JSON Lines files (:meth:`Records.export`,
:meth:`Records.import_file`; gzip when the name ends in ``.gz``): a header line
``{"format": "taskloom-records", "version": 1, "exported": ..., "count": n}``, then one
object per record with its config as a JSON object. Importing validates the whole file
before it writes anything (each config against its template: :func:`config_problem`),
keeps a record already present unless asked to replace it or the imported one succeeded
where the present one failed, and keeps each record's ``created`` time, so records
measured elsewhere can seed tuning here or train a cost model (:meth:`Records.records`
gives them as :class:`Record` objects).

A record whose config its template cannot build (one written before configs were checked,
or by hand) is never handed out: :meth:`Records.best`, :meth:`Records.results` and
:meth:`Records.records` skip it with a :class:`RecordWarning`, so a compile falls back to
the other records or the analytic model instead of failing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gzip
import json
import math
import os
import sqlite3
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from taskloom.backend.cache import BuildCache
from taskloom.errors import LoadError, TaskloomError

FILE_NAME = "tune.sqlite"
BUSY_TIMEOUT_S = 60.0

# The export file format: its name in the header, the version this code writes and reads,
# and the fields of each record line, in the order they are written.
EXPORT_FORMAT = "taskloom-records"
EXPORT_VERSION = 1
RECORD_FIELDS = ("workload", "target", "config", "seconds", "error", "created")
_GZIP_MAGIC = b"\x1f\x8b"

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


class RecordWarning(UserWarning):
    """A tuning record was skipped: its config is not one its template can build."""


def _matmul_problem(config: dict[str, Any], target: str) -> str | None:
    """Why ``config`` is not a matmul template config (:class:`MatmulConfig`) for ``target``:
    its fields, each a positive integer, and a register tile the target's registers hold
    (the template's own bound)."""
    from taskloom.errors import TargetError
    from taskloom.schedule.templates.matmul_cpu import MatmulConfig
    from taskloom.target.cpu import target_of_key
    fields = list(MatmulConfig.SIZES)
    missing, unknown = [f for f in fields if f not in config], sorted(set(config) - set(fields))
    if missing or unknown:
        return (f"a matmul config has exactly the fields {', '.join(fields)}"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(unknown)}" if unknown else ""))
    bad = [f"{f}={config[f]!r}" for f in fields
           if isinstance(config[f], bool) or not isinstance(config[f], int) or config[f] < 1]
    if bad:
        return f"{', '.join(bad)}: every field of a matmul config must be a positive integer"
    try:
        regs = target_of_key(target).num_vector_registers
    except TargetError:
        return None  # a target this taskloom does not know: its registers are unknown
    mr, nv = config["mr"], config["nv"]
    if mr * nv + nv + 1 > regs:
        return (f"its {mr}x{nv}-vector register tile needs {mr * nv + nv + 1} vector registers; "
                f"target {target} has {regs}")
    return None


#: template (a workload's first component) -> (config, target key) -> why it is not valid.
CONFIG_CHECKS: dict[str, Callable[[dict[str, Any], str], str | None]] = {"matmul_cpu": _matmul_problem}


def config_problem(workload: str, target: str, config: Any) -> str | None:
    """Why ``config`` cannot be a config of ``workload``'s template on ``target`` (a target
    key), or None when it can. Workloads of templates without a check (the first component
    of the workload, ``matmul_cpu/...``, names the template) are not checked."""
    if not isinstance(config, dict):
        return f"a config must be a JSON object, got {type(config).__name__}"
    check = CONFIG_CHECKS.get(workload.partition("/")[0])
    return None if check is None else check(config, target)


def config_key(config: dict[str, Any]) -> str:
    """The canonical JSON of ``config``: sorted keys, no spaces (tuples read back as lists)."""
    if not isinstance(config, dict):
        raise TaskloomError(f"a tuning config must be a dict, got {type(config).__name__}")
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TaskloomError(f"a tuning config must be JSON-able (str keys; numbers, strings, "
                            f"bools, lists, dicts), got {config!r}: {exc}") from None


@dataclasses.dataclass(frozen=True)
class Record:
    """One tuning record as :meth:`Records.records` gives it: ``config`` ran ``workload``
    on ``target`` in ``seconds`` per call, or failed with ``error``; measured at
    ``created`` (seconds since the epoch). This is what a cost model trains from."""

    workload: str
    target: str
    config: dict[str, Any]
    seconds: float | None
    error: str | None
    created: float

    # the config is a dict, so a record cannot be hashed; say so plainly instead of
    # failing inside a generated __hash__
    __hash__ = None  # type: ignore[assignment]

    @property
    def ok(self) -> bool:
        """Whether the config ran: it has a time and no error (what :meth:`Records.best` counts)."""
        return _succeeded(self.seconds, self.error)


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
        failed (``seconds`` None, ``error`` saying why). A config its template cannot build
        (:func:`config_problem`) is refused."""
        _check_name("workload", workload)
        _check_name("target", target)
        key = config_key(config)
        problem = config_problem(workload, target, config)
        if problem is not None:
            raise TaskloomError(f"cannot record config {key} of {workload} on {target}: {problem}")
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
        """The config of the fastest successful record of ``workload`` on ``target``, or None.
        A record its template cannot build is skipped (:class:`RecordWarning`)."""
        found = self._fastest(workload, target)
        return None if found is None else found[0]

    def results(self, workload: str, target: str) -> dict[str, tuple[float | None, str | None]]:
        """Every record of ``workload`` on ``target``: :func:`config_key` -> (seconds, error).
        Records their template cannot build are skipped (:class:`RecordWarning`)."""
        with self._connect() as db:
            rows = db.execute("SELECT config, seconds, error FROM records WHERE workload = ? AND target = ?",
                              (workload, target)).fetchall()
        return {config: (seconds, error) for config, seconds, error in rows
                if self._usable(workload, target, config) is not None}

    def results_of(self, workloads: Sequence[str], target: str) -> dict[str, dict[str, tuple[float | None, str | None]]]:
        """:meth:`results` of each of ``workloads`` (one query for all: a symbolic product asks
        for the records of each of its sample points at every compile)."""
        keys = list(dict.fromkeys(workloads))
        out: dict[str, dict[str, tuple[float | None, str | None]]] = {w: {} for w in keys}
        with self._connect() as db:
            rows = db.execute(f"SELECT workload, config, seconds, error FROM records WHERE target = ? AND workload IN "
                              f"({', '.join('?' * len(keys))})", (target, *keys)).fetchall() if keys else []
        for workload, config, seconds, error in rows:
            if self._usable(workload, target, config) is not None:
                out[workload][config] = (seconds, error)
        return out

    def records(self, workload: str | None = None, target: str | None = None) -> list[Record]:
        """Every record, or those of ``workload`` and/or ``target``, oldest first; records
        their template cannot build are skipped (:class:`RecordWarning`).

        ``workload`` may end in ``*`` to select every workload starting with what precedes
        it (``"matmul_cpu/*"``).
        """
        where, params = _filter(workload, target)
        with self._connect() as db:
            rows = db.execute("SELECT workload, target, config, seconds, error, created FROM records"
                              f"{where} ORDER BY created, rowid", params).fetchall()
        out = []
        for w, t, key, seconds, error, created in rows:
            config = self._usable(w, t, key)
            if config is not None:
                out.append(Record(w, t, config, seconds, error, created))
        return out

    def workloads(self, target: str | None = None) -> list[tuple[str, str, int]]:
        """(workload, target, number of records) for every workload recorded, or only those
        recorded on ``target``; sorted by workload, then target."""
        where, params = _filter(None, target)
        with self._connect() as db:
            return db.execute(f"SELECT workload, target, COUNT(*) FROM records{where} "
                              "GROUP BY workload, target ORDER BY workload, target", params).fetchall()

    def count(self, workload: str | None = None, target: str | None = None) -> int:
        """How many records there are, all or those matching ``workload`` (a ``*`` suffix
        is a prefix match, as in :meth:`records`) and ``target``."""
        where, params = _filter(workload, target)
        with self._connect() as db:
            return db.execute(f"SELECT COUNT(*) FROM records{where}", params).fetchone()[0]

    def best_seconds(self, workload: str, target: str) -> float | None:
        """The time of the fastest successful record of ``workload`` on ``target`` (the one
        :meth:`best` returns the config of), or None when no config ran."""
        found = self._fastest(workload, target)
        return None if found is None else found[1]

    def _fastest(self, workload: str, target: str) -> tuple[dict[str, Any], float] | None:
        """(config, seconds) of the fastest successful record its template can build."""
        with self._connect() as db:
            rows = db.execute("SELECT config, seconds FROM records WHERE workload = ? AND target = ? "
                              "AND seconds IS NOT NULL AND error IS NULL ORDER BY seconds, created",
                              (workload, target))
            for key, seconds in rows:
                config = self._usable(workload, target, key)
                if config is not None:
                    return config, seconds
        return None

    def _usable(self, workload: str, target: str, key: str) -> dict[str, Any] | None:
        """The config a stored record holds, or None (with a :class:`RecordWarning`) when it
        is not one its template can build."""
        try:
            config = json.loads(key)
        except ValueError:
            config, problem = None, "its config is not JSON"
        else:
            problem = config_problem(workload, target, config)
        if problem is None:
            return config
        warnings.warn(f"tuning records {self.path}: skipped the record of {workload} on {target} with config "
                      f"{key}: {problem}", RecordWarning, stacklevel=3)
        return None

    def export(self, path: str | Path, *, workload: str | None = None, target: str | None = None) -> int:
        """Write the records matching ``workload`` (``*`` suffix: a prefix) and ``target``,
        all of them by default, to ``path`` and return how many were written.

        The file is JSON Lines: a header object (format, version, time of export, count),
        then one object per record, oldest first, its config as a JSON object; gzip when
        ``path`` ends in ``.gz``. It is written beside ``path`` and renamed into place, so
        a failed export leaves no partial file for a later import to trip on.
        """
        chosen = self.records(workload, target)
        path = Path(path).expanduser()
        header = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION,
                  "exported": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "count": len(chosen)}
        lines = [header] + [{name: getattr(r, name) for name in RECORD_FIELDS} for r in chosen]
        data = b"".join(json.dumps(line, separators=(",", ":"), allow_nan=False).encode() + b"\n"
                        for line in lines)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            with open(tmp, "xb") as raw:
                if path.name.endswith(".gz"):
                    with gzip.GzipFile(filename=path.name[:-3], mode="wb", fileobj=raw) as zipped:
                        zipped.write(data)
                else:
                    raw.write(data)
            os.replace(tmp, path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if isinstance(exc, OSError):
                raise TaskloomError(f"cannot write the tuning records to {path}: "
                                    f"{exc.strerror or exc}") from None
            raise
        return len(chosen)

    def import_file(self, path: str | Path, *, replace: bool = False) -> tuple[int, int]:
        """Add the records of a file :meth:`export` wrote (gzip or not, told by its content)
        and return (records written, records skipped because they were already present).

        The whole file is validated first and then written in one transaction, so a file
        with a bad line (a :class:`~taskloom.errors.LoadError` naming the file and line)
        changes nothing. A record whose (workload, target, config) is already here is kept,
        unless ``replace`` is true or the imported record succeeded where the present one
        failed: a failure elsewhere (a timeout on a busy machine) should not hide a time
        measured here, but a time should replace a failure. Imported records keep their
        ``created`` time.
        """
        path = Path(path).expanduser()
        rows = _read_export(path)
        added = skipped = 0
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")  # take the write lock now, not halfway through
            for workload, target, key, seconds, error, created in rows:
                present = db.execute("SELECT seconds, error FROM records WHERE workload = ? AND target = ? "
                                     "AND config = ?", (workload, target, key)).fetchone()
                if present is not None and not replace \
                        and not (_succeeded(seconds, error) and not _succeeded(*present)):
                    skipped += 1
                    continue
                db.execute("INSERT OR REPLACE INTO records (workload, target, config, seconds, error, created) "
                           "VALUES (?, ?, ?, ?, ?, ?)", (workload, target, key, seconds, error, created))
                added += 1
        return added, skipped

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


def _succeeded(seconds: float | None, error: str | None) -> bool:
    return seconds is not None and error is None


def _filter(workload: str | None, target: str | None) -> tuple[str, list[Any]]:
    """The WHERE clause (with its leading space, or empty) and parameters selecting
    ``workload`` (a trailing ``*`` makes it a prefix) and ``target``; None selects all."""
    clauses: list[str] = []
    params: list[Any] = []
    if workload is not None:
        _check_name("workload", workload)
        if workload.endswith("*"):
            prefix = workload[:-1]
            # substr, not LIKE: a workload's own '_' and '%' must not be wildcards
            clauses.append("substr(workload, 1, ?) = ?")
            params += [len(prefix), prefix]
        else:
            clauses.append("workload = ?")
            params.append(workload)
    if target is not None:
        _check_name("target", target)
        clauses.append("target = ?")
        params.append(target)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


_HEADER_EXAMPLE = f'{{"format": "{EXPORT_FORMAT}", "version": {EXPORT_VERSION}, "exported": ..., "count": N}}'


def _read_export(path: Path) -> list[tuple[str, str, str, float | None, str | None, float]]:
    """The records of an export file as rows (workload, target, config key, seconds, error,
    created), every line checked; a :class:`LoadError` names the first bad one."""
    zipped = False
    try:
        with open(path, "rb") as f:
            zipped = f.read(2) == _GZIP_MAGIC
            f.seek(0)
            lines = (gzip.GzipFile(fileobj=f) if zipped else f).readlines()
    except FileNotFoundError:
        raise LoadError(f"cannot import tuning records from {path}: no such file") from None
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError; a cut gzip stream an EOFError
        what = "a corrupt or truncated gzip file" if zipped else "unreadable"
        raise LoadError(f"cannot import tuning records from {path}: {what} "
                        f"({getattr(exc, 'strerror', None) or exc}); export it again") from None

    def bad(lineno: int, message: str) -> LoadError:
        return LoadError(f"{path}:{lineno}: {message}; nothing was imported")

    numbered = [(n, raw) for n, raw in enumerate(lines, 1) if raw.strip()]
    if not numbered:
        raise LoadError(f"cannot import tuning records from {path}: the file is empty; a taskloom records "
                        f"export starts with a header line {_HEADER_EXAMPLE}")
    (first, head), body = numbered[0], numbered[1:]
    header = _json_object(head, lambda m: bad(first, m))
    if header.get("format") != EXPORT_FORMAT:
        raise bad(first, f"not a taskloom records export: the first line must be a header "
                         f"{_HEADER_EXAMPLE}, got format {header.get('format')!r}")
    version = header.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise bad(first, f"the header's version must be a positive integer, got {version!r}")
    if version > EXPORT_VERSION:
        raise bad(first, f"written in format version {version} by a newer taskloom; this one reads "
                         f"version {EXPORT_VERSION}: upgrade taskloom, or export with this version")
    if not isinstance(header.get("exported"), str):
        raise bad(first, f"the header's 'exported' must be an ISO time string, got {header.get('exported')!r}")
    count = header.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise bad(first, f"the header's 'count' must be a non-negative integer, got {count!r}")

    rows = [_record_row(_json_object(raw, lambda m, n=n: bad(n, m)), lambda m, n=n: bad(n, m))
            for n, raw in body]
    if len(rows) != count:
        raise LoadError(f"cannot import tuning records from {path}: the header says {count} records but "
                        f"the file holds {len(rows)}; it was cut short or edited -- export it again")
    return rows


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_object(raw: bytes, bad: Any) -> dict[str, Any]:
    """One line parsed as a JSON object (NaN and Infinity refused), or ``bad(message)`` raised."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("not UTF-8 text") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise bad(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:
        raise bad(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise bad(f"expected a JSON object, got {type(value).__name__} {text.strip()[:60]}")
    return value


def _record_row(obj: dict[str, Any], bad: Any) -> tuple[str, str, str, float | None, str | None, float]:
    """A record line's object checked field by field, as a database row."""
    if "format" in obj:
        raise bad("a second header: this is several exports joined together; import each file on its own")
    missing = [name for name in RECORD_FIELDS if name not in obj]
    unknown = sorted(set(obj) - set(RECORD_FIELDS))
    if missing or unknown:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) \
            + ([f"unknown {', '.join(unknown)}"] if unknown else [])
        raise bad(f"{'; '.join(parts)}: a record has exactly the fields {', '.join(RECORD_FIELDS)}")
    for name in ("workload", "target"):
        if not isinstance(obj[name], str) or not obj[name]:
            raise bad(f"'{name}' must be a non-empty string, got {obj[name]!r}")
    if not isinstance(obj["config"], dict):
        raise bad(f"'config' must be a JSON object, got {obj['config']!r}")
    try:
        key = config_key(obj["config"])
    except TaskloomError as exc:
        raise bad(str(exc)) from None
    problem = config_problem(obj["workload"], obj["target"], obj["config"])
    if problem is not None:
        raise bad(f"'config' {key} is not a config of {obj['workload'].partition('/')[0]} that taskloom "
                  f"can build: {problem}")
    seconds = obj["seconds"]
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or not math.isfinite(seconds) or seconds < 0):
        raise bad(f"'seconds' must be a finite non-negative number or null, got {seconds!r}")
    if obj["error"] is not None and not isinstance(obj["error"], str):
        raise bad(f"'error' must be a string or null, got {obj['error']!r}")
    created = obj["created"]
    if isinstance(created, bool) or not isinstance(created, (int, float)) or not math.isfinite(created) \
            or created < 0:
        raise bad(f"'created' must be a time in seconds since the epoch (a non-negative number), got {created!r}")
    return (obj["workload"], obj["target"], key, None if seconds is None else float(seconds), obj["error"],
            float(created))
