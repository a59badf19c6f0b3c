"""The CUDA target's schedulers, registered for target kind ``"cuda"``: the rule-based
scheduler for every task (:mod:`taskloom.schedule.cuda.rules`)."""
from taskloom.schedule.cuda.rules import schedule_task_cuda
from taskloom.schedule.registry import register_rules

register_rules("cuda", schedule_task_cuda)

__all__ = ["schedule_task_cuda"]
