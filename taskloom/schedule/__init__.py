"""Schedules: templates for anchor operators with post-scheduling fusion, and rule-based
schedulers for everything else, registered per target kind (:mod:`taskloom.schedule.registry`);
:func:`~taskloom.schedule.select.schedule_kernel` picks one per task."""
from taskloom.schedule import cpu as _cpu  # noqa: F401  (registers the CPU's schedulers)
from taskloom.schedule import cuda as _cuda  # noqa: F401  (registers the CUDA schedulers)
from taskloom.schedule.rule_based_cpu import schedule_task
from taskloom.schedule.select import schedule, schedule_kernel

__all__ = ["schedule", "schedule_kernel", "schedule_task"]
