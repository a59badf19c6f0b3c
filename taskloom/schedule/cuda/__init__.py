"""The CUDA target's schedulers, registered for target kind ``"cuda"``: the attention
template (:mod:`taskloom.schedule.cuda.attention`), the tensor-core matmul template for
contractions of 16-bit factors (:mod:`taskloom.schedule.cuda.matmul_mma`), the CUDA-core one for the other contractions (:mod:`taskloom.schedule.cuda.matmul`), and the
rule-based scheduler for every other task (:mod:`taskloom.schedule.cuda.rules`)."""
from taskloom.schedule.cuda.attention import attention_candidate
from taskloom.schedule.cuda.matmul import matmul_candidate
from taskloom.schedule.cuda.matmul_mma import mma_candidate
from taskloom.schedule.cuda.rules import schedule_task_cuda
from taskloom.schedule.registry import register_rules, register_template

register_template("cuda", "attention_cuda", attention_candidate)
register_template("cuda", "matmul_mma", mma_candidate)
register_template("cuda", "matmul_cuda", matmul_candidate)
register_rules("cuda", schedule_task_cuda)

__all__ = ["schedule_task_cuda"]
