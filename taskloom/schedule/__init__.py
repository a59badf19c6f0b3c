"""Schedules: the rule-based scheduler (and, later, templates and post-scheduling fusion)."""
from taskloom.schedule.rule_based import schedule_task

__all__ = ["schedule_task"]
