"""Tests of helpers.prefetch (lesson 08) and helpers.slow_network's all-gather deferral."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from helpers import prefetch as F
from helpers.cluster import RankError, run
from helpers.slow_network import SlowNetwork

GATHER, COMPUTE = [1.0, 2.0, 1.0, 3.0], [2.0, 1.0, 2.0, 1.0]


def test_schedule_without_prefetch_serialises_everything() -> None:
    sched = F.prefetch_schedule(GATHER, COMPUTE, 0)
    assert sched == [(0, 1, 1, 3), (3, 5, 5, 6), (6, 7, 7, 9), (9, 12, 12, 13)]
    assert F.exposed_communication(sched, COMPUTE) == sum(GATHER)


def test_deeper_prefetch_never_slower_and_never_smaller() -> None:
    gather, compute = [0.5, 0.5, 4.0, 0.5, 0.5, 0.5], [1.0] * 6
    units, acts = [300, 100, 700, 100, 300, 100], [40] * 6
    exposed = [F.exposed_communication(F.prefetch_schedule(gather, compute, d), compute) for d in range(6)]
    peaks = [F.peak_live_bytes(F.prefetch_schedule(gather, compute, d), units, acts, 1000) for d in range(6)]
    assert exposed == sorted(exposed, reverse=True) and exposed[0] > exposed[-1]
    assert peaks == sorted(peaks) and peaks[0] < peaks[-1]
    for d in range(6):  # never more than d + 1 units gathered at once
        sched = F.prefetch_schedule(gather, compute, d)
        for i, _, _, _ in sched:
            assert sum(1 for (iv, _, _, ev) in sched if iv <= i < ev) <= d + 1


def test_max_depth_and_budget_edges() -> None:
    peaks = [F.peak_live_bytes(F.prefetch_schedule(GATHER, COMPUTE, d), [100, 200, 100, 300], [10] * 4, 50)
             for d in range(4)]
    assert F.max_prefetch_depth(GATHER, COMPUTE, [100, 200, 100, 300], [10] * 4, 50, peaks[0]) == 0
    assert F.max_prefetch_depth(GATHER, COMPUTE, [100, 200, 100, 300], [10] * 4, 50, peaks[0] - 1) is None
    assert F.max_prefetch_depth(GATHER, COMPUTE, [100, 200, 100, 300], [10] * 4, 50, 1e9) == 3


def test_blocked_time_ignores_enqueue_time() -> None:
    trace = F.synthetic_trace([0.3, 0.3], [0.0, 0.2], [1.0, 1.0])
    assert F.blocked_waiting_s(trace) == pytest.approx(0.2)


def test_checks_accept_references_and_name_mistakes() -> None:
    F.assert_schedule(F.prefetch_schedule, [(GATHER, COMPUTE, d) for d in range(4)])
    with pytest.raises(AssertionError, match="as soon as the channel was free"):
        F.assert_schedule(lambda g, c, d: F.prefetch_schedule(g, c, len(g)), [(GATHER, COMPUTE, 0)])
    F.assert_peak(F.peak_live_bytes, [(GATHER, COMPUTE, 1, [100, 200, 100, 300], [10] * 4, 50)])

    def from_landing(sched, units, acts, shards):
        return F.peak_live_bytes([(f, f, s, e) for (_, f, s, e) in sched], units, acts, shards)

    with pytest.raises(AssertionError, match="landing buffer"):
        F.assert_peak(from_landing, [([1.0, 1.0, 1.0], [0.5] * 3, 2, [500, 10, 10], [0, 0, 0], 0)])
    trace = F.synthetic_trace([0.3, 0.3], [0.0, 0.2], [1.0, 1.0])
    with pytest.raises(AssertionError, match="enqueueing"):
        F.assert_blocked(lambda t: 0.6, [trace])


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_reference_forward_prefetches_within_depth(depth: int) -> None:
    x = torch.randn(4, 6)
    for slow in (True, False):
        out = run(lambda: F.forward_on_rank(F.reference_forward, (6, 10, 8, 8, 3), x, depth, slow), world_size=2,
                  timeout=30)
        F.assert_prefetching_forward(out, depth, num_units=4)


def _compute_before_wait(units, x, depth):
    for unit in units:
        unit.issue_gather()
        x = unit.module(x)
        unit.free()
    return x


def test_computing_before_the_wait_is_a_readable_error() -> None:
    with pytest.raises(RankError, match="before its all-gather's wait"):
        run(lambda: F.forward_on_rank(_compute_before_wait, (6, 10, 3), torch.randn(2, 6), 0), world_size=2,
            timeout=30)


def _deferred_all_gather() -> dict:
    rank = dist.get_rank()
    out = torch.zeros(4)
    with SlowNetwork():
        handle = dist.all_gather_single(out, torch.full((2,), float(rank + 1)), async_op=True)
        before = out.tolist()
        handle.wait()
    return {"before": before, "after": out.tolist()}


def test_slow_network_defers_all_gathers() -> None:
    for r in run(_deferred_all_gather, world_size=2, timeout=30):
        assert r == {"before": [0.0] * 4, "after": [1.0, 1.0, 2.0, 2.0]}
