"""Lesson 08's drivers: what grading may send into the student's kernel, and nothing else.

:func:`plan_on_rank` runs the notebook's planner on a gloo rank. The forward at the depth it picks
runs on the grader's own ranks (:func:`.verdicts.measured_forward_on_rank`): the prefetching forward
is exercise 4's answer, so it never enters the kernel. References and verdicts are in :mod:`.verdicts`.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import cloudpickle
import torch.distributed as dist

from helpers import l08_prefetching as prefetch

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE = frozenset({
    "plan_on_rank",   # the measured check's driver: the notebook's planner on this group's unit sizes
})
# Ship this module's rank-side drivers by value: a rank then never imports the autograder package.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def plan_on_rank(plan_fn: Callable[..., Any], widths: Sequence[int], gather_s: Sequence[float],
                 compute_s: Sequence[float], budget_bytes: float) -> Any:
    """On a gloo rank: ``plan_fn`` on this group's :func:`helpers.l08_prefetching.unit_sizes` (no activations)."""
    unit_bytes, shard_bytes = prefetch.unit_sizes(widths, dist.get_world_size())
    return plan_fn(list(gather_s), list(compute_s), unit_bytes, [0.0] * len(unit_bytes), shard_bytes, budget_bytes)
