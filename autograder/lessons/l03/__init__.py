"""Lesson 03, gradient buckets: the instructor side, one module per job.

Graded: DDP's bucket assignment, the alpha-beta schedule of the buckets' all-reduces and its
tail, a ``train_step`` on a model DDP wraps, and the design exercise ``GradBuckets`` (the
gradients after each ``wait()``, and the overlap on the modelled clock).

- :mod:`.drivers`: what grading may send into the kernel (``KERNEL_SIDE``): the drivers, the
  stand-in ``CountedWaits`` and the hidden model ``TimedBranches``.
- :mod:`.verdicts`: the references (and PyTorch's own assignment) and the ``check_*`` functions
  the hidden tests call (``from autograder.lessons import l03 as ref``).
- :mod:`.stored`: the producers of the chapter's stored results (``STORED``).
"""
from .drivers import CountedWaits, TimedBranches, train_on_rank
from .stored import STORED, ready_order, stored_explorer, stored_synthetic
from .verdicts import (allreduce_seconds, assign_buckets, check_buckets, check_ddp_buckets, check_overlap,
                       check_schedule, check_synchroniser, check_tail, check_train_step, communication_schedule,
                       communication_tail, torch_bucket_assignment)

__all__ = [
    "STORED",
    "CountedWaits",
    "TimedBranches",
    "allreduce_seconds",
    "assign_buckets",
    "check_buckets",
    "check_ddp_buckets",
    "check_overlap",
    "check_schedule",
    "check_synchroniser",
    "check_tail",
    "check_train_step",
    "communication_schedule",
    "communication_tail",
    "ready_order",
    "stored_explorer",
    "stored_synthetic",
    "torch_bucket_assignment",
    "train_on_rank",
]
