"""The status a library's run-time checks report to (``tl_status`` in the C prelude).

A kernel with run-time checks (an index read from data: a gather's, an embedding's) takes
a status as its last argument, as does a compiled graph's launcher. Each call gets a status
of its own, zeroed, so concurrent calls never see each other's failures; the first failed
check of a call fills it in, and the caller raises :class:`IndexOutOfRange` with the text
the library registered for that check (its ``taskloom_checks`` table).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

from taskloom.errors import IndexOutOfRange, LoadError

CHECKS_SYMBOL = "taskloom_checks"


class Status(ctypes.Structure):
    """``tl_status``: the failed check's number (0: none), the value it refused and the
    valid range ``[low, high]``."""

    _fields_ = [("check", ctypes.c_int64), ("value", ctypes.c_int64),
                ("low", ctypes.c_int64), ("high", ctypes.c_int64)]


_local = threading.local()


def thread_status() -> tuple[Status, int]:
    """This thread's status and its address: a thread makes one call at a time, and a
    status is zero again before :func:`raise_failure` raises."""
    found = getattr(_local, "status", None)
    if found is None:
        st = Status()
        found = _local.status = (st, ctypes.addressof(st))
    return found


def check_text(library: Any, number: int) -> str:
    """What check ``number`` (from 1) of ``library`` guards, from its ``taskloom_checks``."""
    try:
        table = (ctypes.c_char_p * number).in_dll(library, CHECKS_SYMBOL)
    except (ValueError, AttributeError):
        raise LoadError(f"a run-time check (number {number}) failed, but the library has no "
                        f"{CHECKS_SYMBOL} table to say which; build it again") from None
    return (table[number - 1] or b"?").decode()


def out_of_range(what: str, value: int, low: int, high: int, where: str) -> IndexOutOfRange:
    """The error of a failed check ``what``: ``value`` lies outside ``[low, high]``."""
    size = high + 1
    if size <= 0:
        valid = "none: the dimension is empty"
    else:
        valid = f"{low}..{high}" + (", negative ones counting from the end" if low < 0 else "")
    return IndexOutOfRange(f"{what} holds the index {value}, out of range for a dimension of size {size} "
                           f"(valid indices: {valid}); found by {where}")


def raise_failure(status: Status, library: Any, where: str) -> None:
    """Raises the :class:`IndexOutOfRange` that ``status`` holds, after zeroing it."""
    number, value, low, high = status.check, status.value, status.low, status.high
    ctypes.memset(ctypes.addressof(status), 0, ctypes.sizeof(status))
    raise out_of_range(check_text(library, number), value, low, high, where)
