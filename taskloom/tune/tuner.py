"""The tuner: pick a template's config by measuring candidates, and remember the winner.

- level 0 measures nothing: the best record for (workload, target) if an earlier run left
  one, else the analytic model's top choice (:mod:`taskloom.tune.model`);
- level 1 measures what the learned cost model (:mod:`taskloom.tune.cost_model`, trained
  on every record of this target, other tasks included) and the analytic model together
  (their mean rank) rank best among the analytic model's top :data:`POOL`, a batch at a time,
  retraining after each batch, until a batch no longer improves the best and the analytic
  model sees no gain left, or a fifth of the space is measured;
- level 2 measures the whole space (one config per distinct program), most promising first
  by the analytic model.

Both levels then time their three fastest configs again, side by side, and record each
one's median: the fastest of many noisy times is biased low, and on a busy machine a config
can win by one lucky measurement.

Every measurement, failures included, goes to the record database
(:class:`~taskloom.tune.records.Records`) as soon as it is known, so a config is never
measured twice for one workload on one machine, an interrupted run resumes where it
stopped, and a later compile at level 0 reuses the result. A budget (:mod:`taskloom.tune.budget`) bounds the
time of a whole compile: each task gets its share of what is left, and stops with the best
so far when its share is spent.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable, Sequence

from taskloom.errors import TaskloomError
from taskloom.ir.stmt import Function
from taskloom.schedule.templates.matmul_cpu import MatmulConfig, matmul_program
from taskloom.target.base import Target
from taskloom.tune import model as analytic
from taskloom.tune.measure import Measurement, Progress, measure, side_by_side
from taskloom.tune.records import Records, config_key

#: Configs measured together: enough to keep the builder's threads busy, few enough that a
#: budget or the learned model's next ranking comes in often.
BATCH = 8
#: Level 1 measures at most this share of the candidates (rounded down, and at least
#: MIN_MEASURED): a fifth of what level 2 measures.
LEVEL1_SHARE, MIN_MEASURED = 0.2, 4
#: Level 1 ranks the analytic model's best POOL configs with the learned model (featurizing
#: a config lowers its program: the pool keeps that to seconds).
POOL = 48
#: A batch that improves the best by less than this has found no gain.
GAIN = 0.01


def matmul_workload(shape: tuple[int, int, int, int]) -> str:
    """The record key of a matmul of ``shape = (batch, M, N, K)``: ``matmul_cpu/1x128x768x768``."""
    return "matmul_cpu/" + "x".join(str(int(d)) for d in shape)


def recorded_config(shape: tuple[int, int, int, int], target: Target,
                    records: Records | None = None, workload: str | None = None) -> MatmulConfig | None:
    """The fastest recorded config of this matmul (or of the fused ``workload``) on
    ``target``, if it was tuned before."""
    try:
        best = (records or Records.default()).best(workload or matmul_workload(shape), target.key())
    except Exception:  # an unreadable database must not stop a compile
        return None
    return MatmulConfig.from_dict(best) if best else None


def candidates(shape: tuple[int, int, int, int], target: Target,
               pack: tuple[float, float] = analytic.DEFAULT_PACK) -> list[MatmulConfig]:
    """Every config of the space the analytic model does not reject, most promising first."""
    return [c for c, _ in analytic.rank(shape, target, pack=pack)]


def _repeats(predicted_s: float) -> int:
    """Timed calls per candidate: about half a second of them, 3 to 10."""
    return int(min(10, max(3, 0.5 / max(predicted_s, 1e-9))))


def tune_matmul(shape: tuple[int, int, int, int], target: Target, level: int = 1,
                records: Records | None = None, progress: bool = True, timeout_s: float = 10.0,
                kernel: Callable[[MatmulConfig], Function] | None = None,
                args: Sequence[tuple[tuple[int, ...], str]] | Callable[[MatmulConfig], Sequence] | None = None,
                workload: str | None = None, pack: tuple[float, float] = analytic.DEFAULT_PACK,
                deadline: float | None = None,
                measurer: Callable[..., list[Measurement]] | None = None, finalists: int = 3,
                a_stride: int | None = None, b_streams: bool = False) -> MatmulConfig:
    """The fastest config of the matmul template for ``shape = (batch, M, N, K)`` on
    ``target``, measuring what level ``level`` asks for that the records do not hold yet.

    By default the plain template is measured. A fused group passes ``kernel`` (config ->
    its fused kernel), the kernel's ``args`` (or config -> its args, when a weight comes as
    panels shaped by the config), its own ``workload`` key and its operands' ``pack`` costs,
    so what is timed includes its prologue and epilogue, and the distance between the rows
    of A its kernel reads (``a_stride``, for the analytic model, with ``b_streams``: see
    :func:`~taskloom.tune.model.predict`). Measuring stops at
    ``deadline`` (a ``time.monotonic()`` value) with the best so far; ``measurer`` stands in
    for :func:`~taskloom.tune.measure.measure` in tests. The ``finalists`` fastest configs
    are then timed again side by side (:func:`_retime_finalists`).
    """
    if level not in (1, 2):
        raise TaskloomError(f"tune_matmul(): level must be 1 or 2, got {level!r}")
    records = records or Records.default()
    workload, tkey = workload or matmul_workload(shape), target.key()
    if kernel is None:
        Bt, M, N, K = shape
        args = [((Bt, M, K), "float32"), ((Bt, K, N), "float32"), ((Bt, M, N), "float32")]
        kernel = lambda c: matmul_program(shape, c, target, name="matmul")  # noqa: E731
    ranked = analytic.rank(shape, target, pack=pack, a_stride=a_stride, b_streams=b_streams)
    if not ranked:
        raise TaskloomError(f"tuning matmul {shape}: the analytic model rejects every config of the space")
    repeats = _repeats(ranked[0][1].seconds)
    search = _Search(shape, target, records, workload, ranked, level, pack)
    name = f"tuning {workload}" if progress else False
    bar = Progress(search.planned(), name or "", bool(progress))
    try:
        while not search.done():
            if deadline is not None and time.monotonic() >= deadline:
                break
            batch = search.next_batch()
            if not batch:
                break

            def record(index: int, m: Measurement, batch: list[MatmulConfig] = batch) -> None:
                records.add(workload, tkey, batch[index].to_dict(), m.seconds, m.error)
                search.seen(batch[index], m)
                bar.update()
                if search.best_s is not None:
                    bar.postfix(f"best {search.best_s * 1e3:.3f} ms")

            (measurer or measure)([kernel(c) for c in batch], _shared(args), target, timeout_s=timeout_s,
                                  repeats=repeats, progress=False, on_result=record, **_each(args, batch))
            search.batch_done()
    finally:
        bar.close()
    if finalists and search.measured_now and (deadline is None or time.monotonic() < deadline):
        _retime_finalists(records, workload, target, kernel, args or [], finalists, repeats, timeout_s,
                          measurer or measure)
    best = records.best(workload, tkey)
    if best is None:
        if not search.measured:  # the budget ran out before anything was measured
            return ranked[0][0]
        raise TaskloomError(f"tuning matmul {shape}: every candidate measured failed to build or run; see "
                            f"the records in {records.path}")
    return MatmulConfig.from_dict(best)


#: Rounds of timing the finalists side by side.
RETIME_ROUNDS = 2


def _shared(args: Sequence | Callable | None) -> Sequence:
    """The parameters every candidate shares (none when each has its own)."""
    return [] if args is None or callable(args) else args


def _each(args: Sequence | Callable | None, configs: Sequence[MatmulConfig]) -> dict[str, Any]:
    """``measure``'s ``args_each`` for ``configs`` when the parameters follow the config."""
    return {"args_each": [args(c) for c in configs]} if callable(args) else {}


def _retime_finalists(records: Records, workload: str, target: Target, kernel: Callable, args: Sequence,
                      count: int, repeats: int, timeout_s: float, measurer: Callable) -> None:
    """Time the ``count`` fastest records of ``workload`` again, side by side, and record the
    median of each one's times. A search keeps the fastest of many noisy times, which is
    biased low: on a busy machine a config can win by one lucky measurement."""
    tkey = target.key()
    ok = sorted((s, k) for k, (s, e) in records.results(workload, tkey).items() if s is not None and e is None)
    configs = [MatmulConfig.from_dict(json.loads(k)) for _, k in ok[:count]]
    if len(configs) < 2:
        return
    again = side_by_side([kernel(c) for c in configs], _shared(args), target, RETIME_ROUNDS, measurer=measurer,
                         timeout_s=timeout_s, repeats=repeats, **_each(args, configs))
    for (first, _), c, times in zip(ok, configs, again):
        v = sorted([first, *times])
        records.add(workload, tkey, c.to_dict(), v[len(v) // 2])


class _Search:
    """Which configs to measure next, and when to stop (see the module docstring)."""

    def __init__(self, shape: tuple[int, int, int, int], target: Target, records: Records, workload: str,
                 ranked: list[tuple[MatmulConfig, analytic.Prediction]], level: int, pack: tuple[float, float]):
        self.shape, self.target, self.records, self.workload = shape, target, records, workload
        self.level, self.pack = level, pack
        self.space = [c for c, _ in ranked]  # in analytic order
        self.predicted = {c: p.seconds for c, p in ranked}
        known = records.results(workload, target.key())
        self.measured = {config_key(c.to_dict()): known[config_key(c.to_dict())]
                         for c in self.space if config_key(c.to_dict()) in known}
        ok = [s for s, e in self.measured.values() if s is not None and e is None]
        self.best_s: float | None = min(ok) if ok else None
        self._batch_start_best = self.best_s
        # a level-1 search that measured MIN_MEASURED points already ran to its end (it
        # stops no earlier); fewer is an interrupted one, which goes on
        self.stalled = level == 1 and len(self.measured) >= MIN_MEASURED
        self.measured_now = 0  # by this run
        self.limit = len(self.space) if level >= 2 else max(MIN_MEASURED, int(LEVEL1_SHARE * len(self.space)))
        self._order = self.space if level >= 2 else self.space[:POOL]
        if level == 1 and not self.stalled:
            self._learn()

    def planned(self) -> int:
        return max(0, min(self.limit, len(self._order)) - len(self.measured))

    def todo(self) -> list[MatmulConfig]:
        return [c for c in self._order if config_key(c.to_dict()) not in self.measured]

    def done(self) -> bool:
        return not self.todo() or len(self.measured) >= self.limit or self.stalled

    def next_batch(self) -> list[MatmulConfig]:
        return self.todo()[:min(BATCH, self.limit - len(self.measured))]

    def seen(self, c: MatmulConfig, m: Measurement) -> None:
        self.measured[config_key(c.to_dict())] = (m.seconds, m.error)
        self.measured_now += 1
        if m.ok and (self.best_s is None or m.seconds < self.best_s):  # type: ignore[operator]
            self.best_s = m.seconds

    def batch_done(self) -> None:
        if self.level != 1:
            return
        before, self._batch_start_best = self._batch_start_best, self.best_s
        improved = before is None or (self.best_s is not None and self.best_s < before * (1 - GAIN))
        if not improved and len(self.measured) >= MIN_MEASURED and not self._gain_left():
            self.stalled = True
            return
        self._learn()

    def _gain_left(self) -> bool:
        """Whether the analytic model, scaled to this task's measurements, still sees an
        unmeasured config beating the best by more than GAIN."""
        if self.best_s is None:
            return True
        pairs = [(s, self.predicted[c])
                 for c in self.space if (s := self.measured.get(config_key(c.to_dict()), (None, None))[0])]
        if not pairs:
            return True
        scale = sorted(s / p for s, p in pairs)[len(pairs) // 2]
        todo = self.todo()[:BATCH]
        return any(self.predicted[c] * scale < self.best_s * (1 - GAIN) for c in todo)

    def _learn(self) -> None:
        """Re-rank what is left with the cost model trained on every record of the target
        (records are keyed by ISA, so another machine's imported records of the same ISA
        count; another ISA's configs are not valid here)."""
        from taskloom.tune import cost_model
        todo = self.todo()
        if not todo or cost_model.load_ranker() is None:
            return  # the analytic order stands
        cache = cost_model.FeatureCache(self.records)
        data = cost_model.training_set(self.records, self.target, cache=cache)
        if not data.groups:
            return
        model = cost_model.CostModel().fit(data)
        X = cache.get_many([(self.shape, self.pack, c) for c in todo], self.target)
        scores = model.scores(X)
        where = {c: k for k, c in enumerate(self.space)}
        analytic = [0] * len(todo)  # each config's place among todo in the analytic order
        for r, i in enumerate(sorted(range(len(todo)), key=lambda i: where[todo[i]])):
            analytic[i] = r
        self._order = [todo[i] for i in cost_model.blended_ranks(analytic, scores)]
