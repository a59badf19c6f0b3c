"""Small helpers for what the commands print."""
from __future__ import annotations


def format_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    size, unit = float(n), 0
    while size >= 1024 and unit < len(units) - 1:
        size, unit = size / 1024, unit + 1
    return f"{n} B" if unit == 0 else f"{size:.1f} {units[unit]}"
