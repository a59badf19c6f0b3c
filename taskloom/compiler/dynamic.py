"""Symbolic sizes in a compiled graph: the symbols and their ranges, the sample values a
config is chosen at, and the kernel variants a call picks among.

A graph whose inputs have symbolic dimensions compiles once. Its kernels take the symbols'
values as size arguments, so one kernel serves every size; but the config that is best
for 16 rows is not the one for 4096 (a 1 x 2 grid of cores against 2 x 1, a smaller
tile). So each symbol gets a ladder of sample values in its range (:data:`LADDER`), each
template kernel is scheduled at every point of the ladders' product, and each distinct
config the analytic model chooses may become a variant of the kernel: the fewest, at most
:data:`MAX_VARIANTS`, that the model predicts keep every sample point near its own best
(:func:`choose_variants`). A call's sizes pick a point (the nearest rung of each ladder, in
ratio), and each kernel runs the variant chosen there: a table lookup per new set of
sizes, no recompile.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable, Mapping, Sequence

from taskloom.graph.graph import Graph, GraphError
from taskloom.ir import expr as E
from taskloom.ir import stmt as S
from taskloom.ir.arith import simplify_expr
from taskloom.ir.dtypes import DataType, TensorType
from taskloom.ir.functor import Substituter, substitute
from taskloom.ir.printer import expr_text

#: The range a symbol takes when the compile declares none.
DEFAULT_RANGE = (1, 2 ** 31 - 1)
#: The sample values of a symbol, within its range (plus the range's ends, the top capped
#: at the last rung): spaced by 8x, since a config's best region spans about that.
LADDER = (1, 8, 64, 512, 4096)
#: The most variants of one kernel: each is compiled, so each costs compile time.
MAX_VARIANTS = 3
#: Variants are built until the model predicts every sample point within this much of its
#: own best config (a caller whose model resolves less passes a larger ``gain``).
VARIANT_GAIN = 0.05


def graph_symbols(graph: Graph, ranges: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The symbols of ``graph``'s input shapes, in order, each with its range (``ranges``, else
    :data:`DEFAULT_RANGE`). Each must be a whole dimension of some input, where a call reads
    its value; every other shape in the graph must follow from them."""
    symbols: dict[str, tuple[int, int]] = {}
    whole = {d.name for t in graph.inputs for d in t.shape if isinstance(d, E.Var)}
    for t in graph.inputs:
        for d in t.shape:
            for v in sorted(E.free_vars(d) if isinstance(d, E.Expr) else (), key=lambda v: v.name):
                if v.name not in whole:
                    raise GraphError(f"graph input '{t.name}' has the dimension {expr_text(d)}, and {v.name} is "
                                     "no whole dimension of any input, so a call could not give its value")
                symbols.setdefault(v.name, _range(v.name, ranges))
    unknown = set(ranges) - set(symbols)
    if unknown:
        raise GraphError(f"compile(): ranges are given for {', '.join(sorted(unknown))}, which "
                         f"{'is' if len(unknown) == 1 else 'are'} not a symbol of the inputs"
                         + (f" ({', '.join(symbols)})" if symbols else " (their shapes are static)"))
    for t in [*graph.outputs, *(o for n in graph.nodes for o in n.outputs)]:
        for d in t.shape:
            late = {v.name for v in E.free_vars(d)} - set(symbols) if isinstance(d, E.Expr) else set()
            if late:
                raise GraphError(f"a tensor of shape {shape_entries(t.shape)} in the graph has sizes that "
                                 f"depend on {', '.join(sorted(late))}, which the inputs' shapes do not give")
    return symbols


def _range(name: str, ranges: Mapping[str, tuple[int, int]]) -> tuple[int, int]:
    low, high = ranges.get(name, DEFAULT_RANGE)
    if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high <= DEFAULT_RANGE[1]):
        raise GraphError(f"compile(): the range of {name} is ({low!r}, {high!r}); a range is two ints with "
                         f"0 <= min <= max <= {DEFAULT_RANGE[1]}")
    return int(low), int(high)


def shape_entries(shape: Sequence[Any]) -> list[int | str]:
    """A shape as meta records it: ints, symbol names and expressions over them as text."""
    out: list[int | str] = []
    for d in shape:
        d = simplify_expr(d) if isinstance(d, E.Expr) else d
        out.append(int(d.value) if isinstance(d, E.Constant) else d.name if isinstance(d, E.Var)
                   else expr_text(d) if isinstance(d, E.Expr) else int(d))
    return out


def ladder(low: int, high: int) -> list[int]:
    """The sample values of a symbol in ``[low, high]``: :data:`LADDER`'s rungs in the range and
    its ends, the top capped at the last rung, all at least 1. ``ladder(1, 100) == [1, 8, 64, 100]``."""
    low, top = max(low, 1), max(min(high, LADDER[-1]), 1)  # (a size 0 is sampled as 1: no work either way)
    return sorted({low, top, *(v for v in LADDER if low <= v <= top)})


def sample_points(symbols: Mapping[str, tuple[int, int]]) -> list[dict[str, int]]:
    """Every point of the symbols' ladders, the last symbol varying fastest (the order the
    runtime indexes a kernel's table of variants in)."""
    names = list(symbols)
    ladders = [ladder(*symbols[n]) for n in names]
    return [dict(zip(names, values)) for values in itertools.product(*ladders)]


def evaluate(shape: Sequence[Any], point: Mapping[str, int]) -> tuple[int, ...]:
    """``shape`` (ints and expressions of the symbols) at the symbol values ``point``."""
    out = []
    for d in shape:
        if isinstance(d, E.Expr):
            values = {v: E.as_expr(point[v.name]) for v in E.free_vars(d)}
            d = simplify_expr(substitute(d, values))
            if not isinstance(d, E.Constant):
                raise GraphError(f"a size {d!r} does not follow from the symbols {', '.join(point)}")
            d = d.value
        out.append(int(d))
    return tuple(out)


def bind_sizes(fn: S.Function, point: Mapping[str, int]) -> S.Function:
    """Kernel ``fn`` for symbolic sizes with its size parameters named in ``point`` fixed to
    those values: the same code as a kernel of static shapes, which tuning can time at a
    sample point (every tensor's shape then follows from the values)."""
    bound = {p: E.Constant(point[p.name], p.type) for p in fn.params
             if isinstance(p.type, DataType) and p.name in point}
    fix = _Bind(bound)
    params = tuple(fix.visit(p) for p in fn.params if p not in bound)
    return S.Function(fn.name, params, fix.visit(fn.body), fn.kind, fn.attrs)


class _Bind(Substituter):
    """Sizes given values, the shapes of tensors folded to the constants a static kernel's hold."""

    def visit_type(self, t: Any) -> Any:
        t = super().visit_type(t)
        if isinstance(t, TensorType):
            shape = tuple(simplify_expr(d) for d in t.shape)
            return t if all(a is b for a, b in zip(shape, t.shape)) else TensorType(t.dtype, shape)
        return t


def choose_variants(configs: Sequence[Any], cost: Callable[[int, Any], float] | None = None,
                    gain: float = VARIANT_GAIN) -> tuple[list[Any], list[int]]:
    """The variants to build from the config chosen at each sample point (in point order),
    and each point's variant, listed in the order their configs are first chosen.

    With ``cost(k, config)``, the predicted seconds of a config at point ``k``: the fewest
    configs (at most :data:`MAX_VARIANTS`) that keep every point within ``gain`` (a
    fraction) of its own choice, and of those sets the one whose worst point falls least
    behind (then the least in total); each point runs the kept variant predicted fastest
    there. Where no set of :data:`MAX_VARIANTS` keeps every point that close, the one that
    falls least behind.
    Without ``cost``: the :data:`MAX_VARIANTS` configs chosen most often, a point whose
    config is not among them taking the variant of the nearest point (in order) whose config is."""
    distinct = list(dict.fromkeys(configs))
    if not distinct:
        return [], []
    if cost is None:
        return _most_chosen(configs, distinct)
    times = {c: [cost(k, c) for k in range(len(configs))] for c in distinct}
    own = [times[c][k] for k, c in enumerate(configs)]

    def behind(kept: tuple[Any, ...]) -> tuple[float, float]:
        """The worst point's slowdown with ``kept``, then the total (geometric)."""
        slow = [min(times[c][k] for c in kept) / own[k] for k in range(len(configs))]
        return max(slow), sum(math.log(r) for r in slow)

    for n in range(1, min(MAX_VARIANTS, len(distinct)) + 1):
        best = min(itertools.combinations(distinct, n), key=behind)
        if behind(best)[0] <= 1 + gain:
            break

    def serving(kept: list[Any]) -> list[int]:
        return [min(range(len(kept)), key=lambda v: (times[kept[v]][k], v)) for k in range(len(configs))]
    used = set(serving(list(best)))
    kept = [c for v, c in enumerate(best) if v in used]  # (a fallback set may hold an idle one)
    return kept, serving(kept)


def _most_chosen(configs: Sequence[Any], distinct: list[Any]) -> tuple[list[Any], list[int]]:
    counts = {c: configs.count(c) for c in distinct}
    kept = sorted(distinct, key=lambda c: -counts[c])[:MAX_VARIANTS]
    kept.sort(key=distinct.index)
    table = [kept.index(c) if c in kept else -1 for c in configs]
    for k, v in enumerate(table):
        if v < 0:
            near = min((j for j, w in enumerate(table) if w >= 0), key=lambda j: abs(j - k))
            table[k] = table[near]
    return kept, table
