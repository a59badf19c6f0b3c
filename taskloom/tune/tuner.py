"""The tuner: pick a template's config by measuring candidates, and remember the winner.

- level 0 measures nothing: the best record for (workload, target) if an earlier run left
  one, else the template's default for the target;
- level 1 measures a small part of the space: the default and its neighbours (each knob
  moved one step), about two dozen configs;
- level 2 measures the whole space (at most ~200 configs).

Every measurement, failures included, goes to the record database
(:class:`~taskloom.tune.records.Records`), so a config is never measured twice for one
workload on one machine, and a later compile at level 0 reuses the result.
"""
from __future__ import annotations

from typing import Callable, Sequence

from taskloom.errors import TaskloomError
from taskloom.ir.stmt import Function
from taskloom.schedule.templates.matmul_cpu import (MatmulConfig, default_config, matmul_program,
                                                    matmul_space)
from taskloom.target.cpu import CpuTarget
from taskloom.tune.measure import measure
from taskloom.tune.records import Records, config_key


def matmul_workload(shape: tuple[int, int, int, int]) -> str:
    """The record key of a matmul of ``shape = (batch, M, N, K)``: ``matmul_cpu/1x128x768x768``."""
    return "matmul_cpu/" + "x".join(str(int(d)) for d in shape)


def recorded_config(shape: tuple[int, int, int, int], target: CpuTarget,
                    records: Records | None = None, workload: str | None = None) -> MatmulConfig | None:
    """The fastest recorded config of this matmul (or of the fused ``workload``) on
    ``target``, if it was tuned before."""
    try:
        best = (records or Records.default()).best(workload or matmul_workload(shape), target.key())
    except Exception:  # an unreadable database must not stop a compile
        return None
    return MatmulConfig.from_dict(best) if best else None


def neighbours(config: MatmulConfig, space: list[MatmulConfig]) -> list[MatmulConfig]:
    """Configs of ``space`` that differ from ``config`` in one knob, by one step of that
    knob's values in the space (the tile counts as one knob)."""
    def steps(values: list, current) -> list:
        vals = sorted(set(values) | {current})
        k = vals.index(current)
        return [v for v in (vals[k - 1] if k else None, vals[k + 1] if k + 1 < len(vals) else None) if v is not None]

    d = config.to_dict()
    out: list[MatmulConfig] = []
    knobs = {"tile": lambda c: (c.mr, c.nv), "kc": lambda c: c.kc, "mc": lambda c: c.mc,
             "nc": lambda c: c.nc, "grid": lambda c: (c.pm, c.pn)}
    for name, get in knobs.items():
        for v in steps([get(c) for c in space], get(config)):
            if name == "tile":
                cand = {**d, "mr": v[0], "nv": v[1]}
            elif name == "grid":
                cand = {**d, "pm": v[0], "pn": v[1]}
            else:
                cand = {**d, name: v}
            out.append(MatmulConfig.from_dict(cand))
    return out


def candidates(shape: tuple[int, int, int, int], target: CpuTarget, level: int) -> list[MatmulConfig]:
    """The configs level ``level`` measures, the default first."""
    base = default_config(shape, target)
    space = matmul_space(target)
    if level >= 2:
        picked = [base, *space]
    else:
        picked = [base, *neighbours(base, space)]
        # and the space's own tiles at the default blocking, so level 1 sees every tile shape
        picked += [MatmulConfig.from_dict({**base.to_dict(), "mr": c.mr, "nv": c.nv}) for c in space]
    seen, out = set(), []
    for c in picked:
        key = config_key(c.to_dict())
        if key not in seen and c.mr * c.nv + c.nv + 1 <= target.num_vector_registers:
            seen.add(key)
            out.append(c)
    return out


def tune_matmul(shape: tuple[int, int, int, int], target: CpuTarget, level: int = 1,
                records: Records | None = None, progress: bool = True, timeout_s: float = 10.0,
                kernel: Callable[[MatmulConfig], Function] | None = None,
                args: Sequence[tuple[tuple[int, ...], str]] | None = None,
                workload: str | None = None) -> MatmulConfig:
    """The fastest config of the matmul template for ``shape = (batch, M, N, K)`` on
    ``target``, measuring what level ``level`` asks for that the records do not hold yet.

    By default the plain template is measured. A fused group passes ``kernel`` (config ->
    its fused kernel), the kernel's ``args`` and its own ``workload`` key, so what is timed
    includes its prologue (an img2col window costs more to pack than a matrix) and epilogue.
    """
    if level not in (1, 2):
        raise TaskloomError(f"tune_matmul(): level must be 1 or 2, got {level!r}")
    records = records or Records.default()
    workload, tkey = workload or matmul_workload(shape), target.key()
    known = records.results(workload, tkey)
    todo = [c for c in candidates(shape, target, level) if config_key(c.to_dict()) not in known]
    if todo:
        Bt, M, N, K = shape
        if kernel is None:
            args = [((Bt, M, K), "float32"), ((Bt, K, N), "float32"), ((Bt, M, N), "float32")]
            kernel = lambda c: matmul_program(shape, c, target, name="matmul")  # noqa: E731
        fns = [kernel(c) for c in todo]
        results = measure(fns, args or [], target, timeout_s=timeout_s,
                          progress=f"tuning matmul {'x'.join(map(str, shape))}" if progress else False)
        for c, r in zip(todo, results):
            records.add(workload, tkey, c.to_dict(), r.seconds, r.error)
    best = records.best(workload, tkey)
    if best is None:
        raise TaskloomError(f"tuning matmul {shape}: every candidate failed to build or run; see "
                            f"the records in {records.path}")
    return MatmulConfig.from_dict(best)
