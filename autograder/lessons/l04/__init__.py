"""Lesson 04, accumulation: the instructor side, one module per job.

Graded: ``found_inf_global``, ``train_window`` (one update per window of micro-batches, the
objective of the whole window, its communication budget, loss scaling, clipping and skipping
together) and the cost exercise ``window_allreduce_cost``.

- :mod:`.drivers`: what grading may send into the kernel (``KERNEL_SIDE``): nothing of this lesson.
- :mod:`.verdicts`: the float64 reference training, the cost answer, the hidden cases and the
  ``check_*`` functions the hidden tests call (``from autograder.lessons import l04 as ref``).
- :mod:`.stored`: the producers of the stored expected values of the visible tests and of the
  chapter's communication numbers (``STORED``, ``STORED_ROUNDING``).
"""
from .stored import STORED, STORED_ROUNDING, VISIBLE_CASES
from .verdicts import (COMMUNICATION_CASES, OBJECTIVE_CASES, SCALING_CASES, SKIP_CASES, TRAIN_CASES, check_found_inf,
                       check_skipped_together, check_train_window, check_window_cost, check_windows, expected_training,
                       reference_training, window_allreduce_cost)

__all__ = [
    "COMMUNICATION_CASES",
    "OBJECTIVE_CASES",
    "SCALING_CASES",
    "SKIP_CASES",
    "STORED",
    "STORED_ROUNDING",
    "TRAIN_CASES",
    "VISIBLE_CASES",
    "check_found_inf",
    "check_skipped_together",
    "check_train_window",
    "check_window_cost",
    "check_windows",
    "expected_training",
    "reference_training",
    "window_allreduce_cost",
]
