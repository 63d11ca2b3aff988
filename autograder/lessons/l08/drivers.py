"""Lesson 08's drivers: what grading may send into the student's kernel, and nothing else.

:func:`reference_forward` is the prefetching forward program (the exercise's contract), which the
measured check runs at the depth a student's planner picks (:func:`planned_forward_on_rank`); it is a
driver, not an expected value. References and verdicts are in :mod:`.verdicts`.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import cloudpickle
import torch
import torch.distributed as dist

from helpers import l08_prefetching as prefetch

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE = frozenset({
    "planned_forward_on_rank",   # the measured check's driver: the notebook's planner, then its depth's forward
    "reference_forward",         # the forward program that driver measures (a driver, not an expected value)
})
# Ship this module's rank-side drivers by value: a rank then never imports the autograder package.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def reference_forward(units: Sequence[Any], x: torch.Tensor, depth: int) -> torch.Tensor:
    """Prefetching forward: keep units ``k..k+depth`` issued, wait, compute, free (the exercise's contract)."""
    handles: dict[int, Any] = {}
    for k, unit in enumerate(units):
        for v in range(k, min(k + depth, len(units) - 1) + 1):
            if v not in handles:
                handles[v] = units[v].issue_gather()
        handles.pop(k).wait()
        x = unit.module(x)
        unit.free()
    return x


def planned_forward_on_rank(plan_fn: Callable[..., Any], widths: Sequence[int], x: torch.Tensor,
                            gather_s: Sequence[float], compute_s: Sequence[float], budget_bytes: float
                            ) -> dict[str, Any]:
    """On a gloo rank: ``plan_fn`` on this group's :func:`helpers.l08_prefetching.unit_sizes` (no activations), then the
    forward at its depth (:func:`reference_forward`) measured by :func:`helpers.l08_prefetching.forward_on_rank` under
    ``SlowNetwork`` with a modelled clock. Returns the plan, the measured peak (bytes, shards included) and the
    clock's trace (seconds); only the plan if it names no depth of ``0..U-1``."""
    unit_bytes, shard_bytes = prefetch.unit_sizes(widths, dist.get_world_size())
    plan = plan_fn(list(gather_s), list(compute_s), unit_bytes, [0.0] * len(unit_bytes), shard_bytes, budget_bytes)
    depth = plan.get("depth") if type(plan) is dict else None
    if type(depth) is not int or not 0 <= depth < len(unit_bytes):
        return {"plan": plan}
    record = prefetch.forward_on_rank(reference_forward, widths, x, depth, True, (gather_s, compute_s))
    return {"plan": plan, "peak_bytes": record["shard_bytes"] + record["peak_bytes"], "trace": record["trace"]}
