"""The file a compiled graph is saved to, and the checks that come before any of it is used.

    MAGIC (16 bytes, the last one the format) | header length (u64) | header (JSON) |
    body: library, then each constant, back to back | digest (32 bytes)

The digest covers every byte before it: a SHA-256, or with ``key=`` an HMAC-SHA256. The
header is then checked for structure (the constants tile the body exactly, sizes follow from
shapes and dtypes) and against the signature record the build put inside the library
(:mod:`taskloom.runtime.library_file`), all before the library is loaded.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import os
import re
import struct
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from taskloom.errors import ArgumentError, LoadError
from taskloom.runtime.dlpack import DTYPE_NAMES, ITEMSIZE
from taskloom.runtime.library_file import load_private, read_record

FORMAT = 2
MAGIC_PREFIX = b"TASKLOOM-MODEL\x00"
MAGIC = MAGIC_PREFIX + bytes([FORMAT])
DIGEST_BYTES = 32
_LENGTH = struct.Struct("<Q")
_START = len(MAGIC) + _LENGTH.size


def graph_record(meta: Mapping[str, Any], constants: Sequence[tuple[str, Sequence[int]]]) -> dict[str, Any]:
    """What the launcher relies on: inputs, outputs, arena size, kernels, constants (dtype
    and shape of each) and ISA. The build stores it in the library; a load compares."""
    record = {"inputs": meta["inputs"], "outputs": meta["outputs"], "arena_bytes": meta["arena_bytes"],
              "kernels": [k["name"] for k in meta["kernels"]],
              "constants": [{"dtype": d, "shape": [int(n) for n in s]} for d, s in constants]}
    if meta["target"].get("kind", "cpu") == "cpu":
        record["isa"] = meta["target"]["isa"]
    else:  # a CUDA graph: its architecture, the launches and the kernels the emulator runs
        record.update(arch=meta["target"]["arch"], calls=meta["calls"],
                      kernel_ir_sha256=hashlib.sha256(json.dumps(meta["kernel_ir"]).encode()).hexdigest())
    return json.loads(json.dumps(record))


def check_library_record(lib: bytes | memoryview, meta: Mapping[str, Any],
                         constants: Sequence[tuple[str, Sequence[int]]], where: str,
                         hint: str = "the file was changed after it was saved") -> None:
    """:class:`LoadError` unless the record inside ``lib`` matches ``meta`` and ``constants``."""
    found, want = read_record(lib, where), graph_record(meta, constants)
    for field in want:
        if found.get(field) != want[field]:
            raise LoadError(f"{where}: the header's {field} ({_short(want[field])}) differs from the library's "
                            f"own record of it ({_short(found.get(field))}); {hint}")


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _key_bytes(key: str | bytes | None) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, (bytes, bytearray)) or not key:
        raise ArgumentError(f"key= must be a non-empty str or bytes, got {type(key).__name__}"
                            f"{' (empty)' if isinstance(key, (bytes, bytearray)) else ''}")
    return bytes(key)


def _hasher(key: bytes | None) -> Any:
    return hmac.new(key, digestmod="sha256") if key is not None else hashlib.sha256()


# -- writing ------------------------------------------------------------------------------

def save_file(path: str | os.PathLike, meta: Mapping[str, Any], lib: bytes,
              constants: Sequence[np.ndarray], key: str | bytes | None = None) -> None:
    """Writes the saved-model file at ``path`` atomically (see the module's docstring)."""
    secret = _key_bytes(key)
    table, offset = [], len(lib)
    for c in constants:
        table.append({"offset": offset, "nbytes": c.nbytes, "dtype": c.dtype.name, "shape": list(c.shape)})
        offset += c.nbytes
    header = json.dumps({"format": FORMAT, "keyed": secret is not None, "meta": meta,
                         "library_bytes": len(lib), "constants": table}).encode()
    chunks = [MAGIC + _LENGTH.pack(len(header)), header, lib,
              *(np.ascontiguousarray(c).reshape(-1).view(np.uint8) for c in constants)]
    digest = _hasher(secret)
    for chunk in chunks:
        digest.update(chunk)
    write_atomically(Path(path), [*chunks, digest.digest()])


def write_atomically(path: Path, chunks: Iterable[Any]) -> None:
    """Writes ``chunks`` to a fresh temporary file beside ``path``, syncs it, then renames it
    over ``path``: readers and concurrent writers see a whole file, old or new."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            f.flush()
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), 0o666 & ~_umask())  # what open() would have given
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself, on file systems that allow it
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _umask() -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


# -- reading ------------------------------------------------------------------------------

def open_saved(path: str | os.PathLike, key: str | bytes | None = None, load: bool = True
               ) -> tuple[dict[str, Any], list[np.ndarray], Any]:
    """The meta, constants and privately loaded library of the model saved at ``path``,
    after every check; :class:`LoadError` saying what is wrong otherwise. With ``load``
    False, the library's bytes instead (a CUDA graph run in the emulator loads none)."""
    where, secret = str(path), _key_bytes(key)
    signed = _verified(_read(path), secret, where)
    header, body = _parse(signed, where)
    _check_layout(header, len(body), secret is not None, where)
    meta, table = header["meta"], header["constants"]
    _check_meta(meta, table, where)
    lib = body[:header["library_bytes"]]
    check_library_record(lib, meta, [(c["dtype"], c["shape"]) for c in table], where)
    _check_target(meta, where)
    constants = [_constant(body, c, where) for c in table]
    return meta, constants, load_private(bytes(lib), where) if load else bytes(lib)


def _read(path: str | os.PathLike) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise LoadError(f"cannot read a saved model at {path}: {exc.strerror or exc}") from None


def _verified(data: bytes, secret: bytes | None, where: str) -> memoryview:
    """The bytes the digest covers, once it matches them."""
    if not data.startswith(MAGIC_PREFIX):
        raise LoadError(f"{where} is not a saved taskloom model: it does not start with {MAGIC_PREFIX!r}")
    version = data[len(MAGIC_PREFIX)] if len(data) > len(MAGIC_PREFIX) else None
    if version is not None and version < FORMAT:
        raise LoadError(f"{where} is in saved-model format {version}, whose checksum leaves the header "
                        f"unchecked; this taskloom reads format {FORMAT}: compile the model again and save it")
    if version is not None and version > FORMAT:
        raise LoadError(f"{where} is in saved-model format {version}, newer than this taskloom reads "
                        f"({FORMAT}); load it with the taskloom that saved it")
    if len(data) < _START + DIGEST_BYTES:
        raise LoadError(f"{where} is damaged: {len(data)} bytes, too short for a saved model (truncated?)")
    view = memoryview(data)
    signed, digest = view[:-DIGEST_BYTES], view[-DIGEST_BYTES:]
    h = _hasher(secret)
    h.update(signed)
    if not hmac.compare_digest(h.digest(), digest):
        raise _digest_error(signed, secret, where)
    return signed


def _digest_error(signed: memoryview, secret: bytes | None, where: str) -> LoadError:
    try:
        keyed = _parse(signed, where)[0].get("keyed")
    except LoadError:
        keyed = None
    if secret is None and keyed is True:
        return LoadError(f"{where} was saved with a key: load it with the same key, "
                         "taskloom.load(path, key=...)")
    if secret is not None and keyed is False:
        return LoadError(f"{where} was saved without a key, so key= cannot check it; load it without "
                         "key=, or save it again with save(path, key=...)")
    if secret is not None:
        return LoadError(f"{where} does not match the key given: the key is wrong, or the file was "
                         "changed after it was saved")
    return LoadError(f"{where} is damaged: its contents do not match the checksum saved with them "
                     "(a truncated or altered file); save the model again")


def _parse(signed: memoryview, where: str) -> tuple[dict[str, Any], memoryview]:
    """The header and the body of verified (or, for messages, unverified) bytes."""
    (n,) = _LENGTH.unpack_from(signed, len(MAGIC))
    if n > len(signed) - _START:
        raise LoadError(f"{where}: its header length {n} runs past the file's {len(signed)} bytes")
    try:
        header = json.loads(bytes(signed[_START:_START + n]))
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict):
        raise LoadError(f"{where}: its header is not a JSON object")
    return header, signed[_START + n:]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_layout(header: dict[str, Any], body_bytes: int, keyed: bool, where: str) -> None:
    """The format, the keyed flag, and a library and constants that fill the body exactly."""
    if header.get("format") != FORMAT or header.get("keyed") is not keyed:
        raise LoadError(f"{where}: its header says format {header.get('format')!r}, keyed "
                        f"{header.get('keyed')!r}; a file checked {'with' if keyed else 'without'} a key "
                        f"has format {FORMAT}, keyed {keyed}")
    lib = header.get("library_bytes")
    if not _is_int(lib) or not 0 < lib <= body_bytes:
        raise LoadError(f"{where}: library_bytes is {lib!r}; it must be a positive int no larger than "
                        f"the body's {body_bytes} bytes")
    table = header.get("constants")
    if not isinstance(table, list) or not isinstance(header.get("meta"), dict):
        raise LoadError(f"{where}: its header needs 'constants' (a list) and 'meta' (an object)")
    end = lib
    for k, c in enumerate(table):
        end = _check_constant(c, k, end, where)
    if end != body_bytes:
        raise LoadError(f"{where}: the library and constants end at byte {end} of the body, which has "
                        f"{body_bytes}; they must fill it exactly")


def _check_constant(c: Any, k: int, start: int, where: str) -> int:
    """Where constant ``k``, which must start at ``start``, ends."""
    what = f"{where}: constant {k}"
    if not isinstance(c, dict) or c.get("dtype") not in DTYPE_NAMES:
        raise LoadError(f"{what} has dtype {c.get('dtype') if isinstance(c, dict) else c!r}; "
                        f"a constant has one of {', '.join(DTYPE_NAMES)}")
    _check_shape(c.get("shape"), what)
    nbytes = math.prod(c["shape"]) * ITEMSIZE[c["dtype"]]
    if c.get("nbytes") != nbytes or not _is_int(c.get("nbytes")):
        raise LoadError(f"{what} has nbytes {c.get('nbytes')!r}; a {c['dtype']} array of shape "
                        f"{c['shape']} has {nbytes}")
    if c.get("offset") != start or not _is_int(c.get("offset")):
        after = "the library" if k == 0 else f"constant {k - 1}"
        raise LoadError(f"{what} starts at byte {c.get('offset')!r} of the body; it must start at "
                        f"{start}, where {after} ends")
    return start + nbytes


def _check_shape(shape: Any, what: str, symbolic: bool = False) -> None:
    """A list of at most 64 sizes: non-negative ints, or in a dynamic graph (``symbolic``) also
    short strings, which :class:`~taskloom.runtime.shape_binding.ShapeBinder` parses."""
    def ok(d: Any) -> bool:
        return (_is_int(d) and d >= 0) or (symbolic and isinstance(d, str) and 0 < len(d) <= 200)
    if not isinstance(shape, list) or len(shape) > 64 or not all(ok(d) for d in shape):
        kinds = "non-negative ints or symbolic sizes" if symbolic else "non-negative ints"
        raise LoadError(f"{what} has shape {_short(shape)}; a shape is a list of at most 64 {kinds}")


def _check_meta(meta: dict[str, Any], table: list[dict[str, Any]], where: str) -> None:
    """Inputs, outputs (and what each copies), arena size, kernels and target, by structure."""
    ins, outs = meta.get("inputs"), meta.get("outputs")
    for kind, specs in (("input", ins), ("output", outs)):
        if not isinstance(specs, list):
            raise LoadError(f"{where}: meta['{kind}s'] is {type(specs).__name__}, not a list")
        for k, s in enumerate(specs):
            if not isinstance(s, dict) or not isinstance(s.get("name"), str) or s.get("dtype") not in DTYPE_NAMES:
                raise LoadError(f"{where}: {kind} {k} is {_short(s)}; it must have a name (str) and a "
                                f"dtype among {', '.join(DTYPE_NAMES)}")
            _check_shape(s.get("shape"), f"{where}: {kind} {k}", "dynamic" in meta)
    for j, o in enumerate(outs):
        _check_copy(o, j, {"in": ins, "w": table, "out": outs[:j]}, where)
    if not _is_int(meta.get("arena_bytes")) or meta["arena_bytes"] < 0:
        raise LoadError(f"{where}: arena_bytes is {meta.get('arena_bytes')!r}; it must be a non-negative int")
    if "dynamic" in meta:
        _check_dynamic(meta, where)
    kernels = meta.get("kernels")
    if not isinstance(kernels, list) or not all(_kernel_ok(k) for k in kernels):
        raise LoadError(f"{where}: meta['kernels'] is {_short(kernels)}; it must list objects with a name "
                        "(str) and ops (a non-empty list of str)")
    target = meta.get("target")
    if isinstance(target, dict) and target.get("kind") == "cuda":
        _check_cuda_meta(meta, table, where)
    elif not isinstance(target, dict) or not isinstance(target.get("isa"), list):
        raise LoadError(f"{where}: meta['target'] is {_short(target)}; it must describe a CPU or CUDA target")


def _check_dynamic(meta: dict[str, Any], where: str) -> None:
    """A dynamic graph's symbols and slots, by structure; the binder parses their sizes."""
    dyn = meta["dynamic"]
    symbols = dyn.get("symbols") if isinstance(dyn, dict) else None
    slots = dyn.get("slots") if isinstance(dyn, dict) else None
    if not isinstance(symbols, list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) and _is_int(s.get("min")) and _is_int(s.get("max"))
            and 0 <= s["min"] <= s["max"] for s in symbols):
        raise LoadError(f"{where}: meta['dynamic']['symbols'] is {_short(symbols)}; it must list objects with a "
                        "name (str) and a range (min <= max, ints >= 0)")
    if not isinstance(slots, list) or not all(
            isinstance(s, dict) and isinstance(s.get("elements"), (int, str)) and _is_int(s.get("itemsize"))
            and _is_int(s.get("first")) and _is_int(s.get("last")) for s in slots):
        raise LoadError(f"{where}: meta['dynamic']['slots'] is {_short(slots)}; it must list objects with "
                        "elements, itemsize, first and last")
    ladders = [s.get("ladder") for s in symbols]
    if not all(isinstance(r, list) and 0 < len(r) <= 64 and all(_is_int(v) and v >= 0 for v in r) for r in ladders):
        raise LoadError(f"{where}: a symbol's ladder is not a list of sizes: {_short(ladders)}")
    tables = dyn.get("variants")
    if not isinstance(tables, list) or not all(isinstance(t, list) and all(_is_int(v) and 0 <= v < 16 for v in t)
                                               for t in tables):
        raise LoadError(f"{where}: meta['dynamic']['variants'] is {_short(tables)}; it must list tables of "
                        "variant numbers")


#: Where a CUDA graph's kernel arguments live (the launcher's tables and its arena; a dynamic
#: graph's symbols and per-call slots).
_ARG_KINDS = ("w", "in", "out", "arena", "sym", "slot")


def _check_cuda_meta(meta: dict[str, Any], table: list[dict[str, Any]], where: str) -> None:
    """A CUDA graph's architecture, its kernels' IR (text) and launches, by structure: every
    launch names a kernel of the file (a kernel built in variants, one of them) and
    arguments inside the tables."""
    if not isinstance(meta["target"].get("arch"), str):
        raise LoadError(f"{where}: meta['target'] names no CUDA architecture ('arch')")
    texts, calls = meta.get("kernel_ir"), meta.get("calls")
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts) or not isinstance(calls, list):
        raise LoadError(f"{where}: a CUDA graph lists its kernels' IR (str) in 'kernel_ir' and its launches in 'calls'")
    dynamic = meta.get("dynamic") or {}
    sizes = {"w": len(table), "in": len(meta["inputs"]), "out": len(meta["outputs"]), "arena": meta["arena_bytes"],
             "sym": len(dynamic.get("symbols", [])), "slot": len(dynamic.get("slots", []))}
    names = {k["name"] for k in meta["kernels"]}

    def launch_ok(c: Any) -> bool:
        args = c.get("args") if isinstance(c, dict) else None
        kernel = c.get("kernel") if isinstance(c, dict) else None
        named = kernel in names or (isinstance(kernel, str) and re.sub(r"_v\d+$", "", kernel) in names)
        return isinstance(args, list) and named and all(
            isinstance(a, list) and len(a) == 2 and a[0] in _ARG_KINDS and _is_int(a[1])
            and 0 <= a[1] < max(sizes[a[0]], 1) for a in args)
    for j, c in enumerate(calls):
        if isinstance(c, dict) and "variants" in c:
            ok = _is_int(c.get("choice")) and 0 <= c["choice"] < len(dynamic.get("variants", [])) and \
                isinstance(c["variants"], list) and bool(c["variants"]) and all(map(launch_ok, c["variants"]))
        else:
            ok = launch_ok(c)
        if not ok:
            raise LoadError(f"{where}: launch {j} is {_short(c)}; it must name a kernel of the file and "
                            "arguments inside its tables")


def _kernel_ok(k: Any) -> bool:
    return (isinstance(k, dict) and isinstance(k.get("name"), str) and isinstance(k.get("ops"), list)
            and bool(k["ops"]) and all(isinstance(op, str) for op in k["ops"])
            and all(isinstance(k.get(f, ""), str) for f in ("anchor", "schedule")))


def _check_copy(out: dict[str, Any], j: int, sources: dict[str, list[Any]], where: str) -> None:
    """An output that copies an input, a constant or an earlier output names one of its dtype and shape."""
    copy = out.get("copy_of")
    if copy is None:
        return
    ok = isinstance(copy, list) and len(copy) == 2 and copy[0] in sources and _is_int(copy[1]) \
        and 0 <= copy[1] < len(sources[copy[0]])
    source = sources[copy[0]][copy[1]] if ok else None
    if source is None or (source["dtype"], source["shape"]) != (out["dtype"], out["shape"]):
        raise LoadError(f"{where}: output {j} copies {_short(copy)}, which is not an input, constant or "
                        f"earlier output of its dtype {out['dtype']} and shape {out['shape']}")


def _check_target(meta: dict[str, Any], where: str) -> None:
    from taskloom.errors import TaskloomError
    from taskloom.target import KINDS, host_target
    if meta["target"].get("kind") == "cuda":  # where it may run is the device's to say
        from taskloom.target.cuda import CudaTarget
        try:
            CudaTarget.from_dict(meta["target"])
        except (TaskloomError, TypeError, ValueError, KeyError) as exc:
            raise LoadError(f"{where}: its target is not a valid CUDA target description: {exc}") from None
        return
    try:  # any other kind is refused as no CPU description
        target = KINDS["cpu"].from_dict(meta["target"])
    except (TaskloomError, TypeError, ValueError) as exc:
        raise LoadError(f"{where}: its target is not a valid CPU target description: {exc}") from None
    if not target.runs_on_host():  # type: ignore[attr-defined]
        raise LoadError(f"{where} was built for {target.key()}, which this machine cannot run "
                        f"(it has {host_target().key()}); compile the model here instead")


def _constant(body: memoryview, c: dict[str, Any], where: str) -> np.ndarray:
    dtype = _np_dtype(c["dtype"], where)
    if c["nbytes"] == 0:
        return np.zeros(c["shape"], dtype)
    return np.frombuffer(body, dtype, count=math.prod(c["shape"]), offset=c["offset"]).reshape(c["shape"])


def _np_dtype(name: str, where: str) -> np.dtype:
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise LoadError(f"{where} has bfloat16 constants, which numpy reads only with ml_dtypes; "
                            "pip install ml_dtypes") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(np.bool_ if name == "bool" else name)
