"""Tuning: measure candidate kernels and remember which configuration was fastest.

- :mod:`taskloom.tune.model` predicts a config's time from the config and the machine's
  probed rates (:mod:`taskloom.tune.probe_cpu`); ``tune=0`` builds its top choice.
- :mod:`taskloom.tune.cost_model` ranks configs with a LightGBM model trained on the records
  (features read off the lowered program).
- :mod:`taskloom.tune.tuner` picks a template's config for a workload: level 0 takes a
  record or the analytic model's pick, level 1 measures what the learned model ranks best
  (a fifth of the space at most), level 2 the whole schedule space; a budget bounds it.
- :func:`measure` builds candidate kernels (one ``Function`` each, sharing one parameter
  list) into their own libraries in parallel, then times them in an isolated worker
  process (:mod:`taskloom.tune._worker`): a candidate that fails to build, crashes or
  hangs gets a :class:`Measurement` with an error, and the others are still measured.
- :class:`Records` keeps results in an sqlite file beside the build cache
  (``<cache root>/tune.sqlite``), keyed by workload, target and configuration
  (:func:`config_key`), safe to share between processes; :meth:`Records.best` gives the
  fastest configuration measured so far and :meth:`Records.results` what is already known.
"""
from taskloom.tune.measure import Measurement, measure
from taskloom.tune.records import RecordWarning, Records, config_key, config_problem

__all__ = ["Measurement", "RecordWarning", "Records", "config_key", "config_problem", "measure"]
