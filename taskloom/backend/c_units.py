"""A generated C library built as several translation units, one compiler process a core.

gcc spends nearly all of a large library's build generating code for its functions, one
after another on one core; a graph of tens of kernels builds sooner split into units that
compile side by side and link into one library. The units are views of the one
``source.c`` the cache keeps: ``#line`` directives point the compiler's messages at its
lines, and the scratch blocks' state is defined in the first unit only."""

from __future__ import annotations

import os
import re
from typing import Sequence

from taskloom.backend.c_prelude import SCRATCH_STATE, SCRATCH_STATE_DECLARED

#: How the pieces of a library's source are joined into its one ``source.c``.
PIECE_SEPARATOR = "\n\n"

#: The least generated code (characters of functions) worth a unit of its own: every unit
#: parses the prelude again, about a sixth of a second of gcc, and a unit should take longer.
MIN_UNIT_CHARS = 12_000

# a function defined at the top level: its declaration is the text before the brace
_DEFINITION = re.compile(r"^(?!static\b)([A-Za-z_][\w ]*[\w*] ?\*?\w+\([^;{}\n]*\)) \{", re.MULTILINE)


def join_pieces(pieces: Sequence[str]) -> str:
    """The one translation unit of a library's top-level ``pieces`` (the prelude first)."""
    return PIECE_SEPARATOR.join(pieces) + "\n"


def build_cores() -> int:
    """The cores this process may run compilers on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _cost(piece: str) -> int:
    """A piece's share of the build, in characters of loop code: straight-line code without
    loops (a graph's launcher, calls one after another) builds about six times faster."""
    return len(piece) if "for (" in piece else len(piece) // 6


def unit_count(pieces: Sequence[str], cores: int) -> int:
    """How many translation units to build ``pieces`` as: one a core, each with at least
    :data:`MIN_UNIT_CHARS` of functions, at most one a piece after the prelude."""
    body = sum(_cost(p) for p in pieces[1:])
    return max(1, min(cores, body // MIN_UNIT_CHARS, len(pieces) - 1))


def split_units(pieces: Sequence[str], count: int, source_name: str = "source.c") -> list[str]:
    """``count`` translation units that together define what :func:`join_pieces` does: each
    the prelude (``pieces[0]``; the scratch state defined in the first unit and declared in
    the others), the declarations of every function the library defines, then its share of
    the other pieces, balanced by their cost to build. Each piece keeps the line numbers it has in
    ``source_name``, so that a compiler message names the line a reader finds there."""
    prelude, rest = pieces[0], list(pieces[1:])
    if prelude.count(SCRATCH_STATE) != 1:
        raise ValueError("the prelude does not define the scratch state once; cannot split the library")
    gap = PIECE_SEPARATOR.count("\n")
    first_line, line = [], prelude.count("\n") + 1 + gap  # each piece's first line in the joined source
    for p in rest:
        first_line.append(line)
        line += p.count("\n") + gap
    costs = [_cost(p) for p in rest]
    shares: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for k in sorted(range(len(rest)), key=lambda k: -costs[k]):  # largest first, onto the lightest
        u = loads.index(min(loads))
        shares[u].append(k)
        loads[u] += costs[k]
    declarations = "\n".join(f"{d};" for p in rest for d in _DEFINITION.findall(p))
    units = []
    for u, share in enumerate(sorted(shares)):
        head = prelude if u == 0 else prelude.replace(SCRATCH_STATE, SCRATCH_STATE_DECLARED)
        body = [f'#line {first_line[k]} "{source_name}"\n{rest[k]}' for k in share]
        units.append(join_pieces([head, "/* every function of the library */\n" + declarations, *body]))
    return units
