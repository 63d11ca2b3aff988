"""Lesson 08, prefetching: the grader's side, one module per job.

The hidden tests of ``source/08_prefetching`` (``from autograder.lessons import l08 as ref``) grade
the prefetch schedule (issue, landing, compute per unit at a depth), the exposed communication
measured from a trace, a prefetch planner (its claimed peak and exposed time, its choice of depth,
and both measured on gloo at the depth it picks), and a prefetching forward pass on gloo. The
student copy of the course does not contain this package.

- :mod:`.drivers`: what grading may send into the student's kernel (its ``KERNEL_SIDE``): the
  prefetching forward program and the driver that runs it at a student's planned depth.
- :mod:`.verdicts`: the references (schedule, peak live bytes, exposed time, best depth) and the
  ``check_*`` verdicts; they stay in the grader.
- :mod:`.stored`: producers of the chapter's stored results (``STORED``).
"""
from .verdicts import reference_forward
from .stored import STORED, chapter_results, explorer_results, exposed_gaps, live_memory_curve, synthetic_units
from .verdicts import (EXPOSED_TIE_S, best_prefetch_depth, blocked_waiting_s, channel_free_schedule, check_blocked,
                       check_plan_claims, check_plan_depth, check_plan_measured, check_prefetching_forward,
                       check_schedule, depth_table, exposed_communication, max_prefetch_depth, peak_live_bytes,
                       prefetch_plan, prefetch_schedule, shuffled, transfer_starts)

__all__ = [
    "reference_forward",
    "STORED", "chapter_results", "explorer_results", "exposed_gaps", "live_memory_curve", "synthetic_units",
    "EXPOSED_TIE_S", "best_prefetch_depth", "blocked_waiting_s", "channel_free_schedule", "check_blocked",
    "check_plan_claims", "check_plan_depth", "check_plan_measured", "check_prefetching_forward", "check_schedule",
    "depth_table", "exposed_communication", "max_prefetch_depth", "peak_live_bytes", "prefetch_plan",
    "prefetch_schedule", "shuffled", "transfer_starts",
]
