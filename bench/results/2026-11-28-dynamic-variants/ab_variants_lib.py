"""What ab_variants.py and ab_cnn.py share: the variant rule before 4e3e785, and the patches
that make a compile (and the recompiles its calls may trigger) follow a named rule."""
import contextlib
import math
from unittest import mock

from taskloom.compiler import drivers
from taskloom.compiler import dynamic as dy


def old_choose(configs, cost=None, gain=None):
    """choose_variants as it was: the least total slowdown first, then another config while
    any point stays 5% behind (``gain``, which callers now pass, is ignored)."""
    distinct = list(dict.fromkeys(configs))
    if cost is None:
        return dy._most_chosen(configs, distinct)
    times = {c: [cost(k, c) for k in range(len(configs))] for c in distinct}
    own = [times[c][k] for k, c in enumerate(configs)]

    def slowdown(kept):
        return [min(times[c][k] for c in kept) / own[k] for k in range(len(configs))]
    kept = []
    while len(kept) < dy.MAX_VARIANTS and (not kept or max(slowdown(kept)) > 1 + 0.05):
        kept.append(min((c for c in distinct if c not in kept),
                        key=lambda c: sum(math.log(r) for r in slowdown([*kept, c]))))
    kept.sort(key=distinct.index)
    table = [min(range(len(kept)), key=lambda v: (times[kept[v]][k], v)) for k in range(len(configs))]
    return kept, table


def patched(rule):
    """The patches of ``rule``: ``old`` (the rule above), ``one`` (one variant), ``att1`` (one
    variant of an attention, the block shape most points take), ``gainNN`` (the CPU bound at
    NN%), anything else (``new``) the code as it is."""
    stack = contextlib.ExitStack()
    if rule == "old":
        stack.enter_context(mock.patch.object(dy, "choose_variants", old_choose))
    if rule == "one":
        stack.enter_context(mock.patch.object(dy, "MAX_VARIANTS", 1))
    if rule == "att1":  # the attention's variants are the only ones chosen without a cost
        most = dy._most_chosen

        def one(configs, distinct):
            with mock.patch.object(dy, "MAX_VARIANTS", 1):
                return most(configs, distinct)
        stack.enter_context(mock.patch.object(dy, "_most_chosen", one))
    if rule.startswith("gain"):
        stack.enter_context(mock.patch.object(drivers, "CPU_VARIANT_GAIN", int(rule[4:]) / 100))
    return stack
