import math
from taskloom.compiler import dynamic as dy
def old_choose(configs, cost=None):
    distinct = list(dict.fromkeys(configs))
    if cost is None: return dy._most_chosen(configs, distinct)
    times = {c: [cost(k, c) for k in range(len(configs))] for c in distinct}
    own = [times[c][k] for k, c in enumerate(configs)]
    def slowdown(kept): return [min(times[c][k] for c in kept) / own[k] for k in range(len(configs))]
    kept = []
    while len(kept) < dy.MAX_VARIANTS and (not kept or max(slowdown(kept)) > 1 + 0.05):
        kept.append(min((c for c in distinct if c not in kept), key=lambda c: sum(math.log(r) for r in slowdown([*kept, c]))))
    kept.sort(key=distinct.index)
    table = [min(range(len(kept)), key=lambda v: (times[kept[v]][k], v)) for k in range(len(configs))]
    return kept, table

