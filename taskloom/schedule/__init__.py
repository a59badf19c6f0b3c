"""Schedules: templates for anchor operators with post-scheduling fusion, and the
rule-based scheduler for everything else; :func:`schedule` picks one per task."""
from taskloom.schedule.rule_based import schedule_task
from taskloom.schedule.select import schedule

__all__ = ["schedule", "schedule_task"]
