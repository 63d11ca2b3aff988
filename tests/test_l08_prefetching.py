"""Tests of lesson 08: the references and hidden checks (autograder.lessons.l08), the student-side
PrefetchUnit, driver and check (helpers.l08_prefetching), and helpers.runtime.slow_network's all-gather deferral."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from autograder.lessons import l08
from autograder.lessons.l08.verdicts import _peak_at_compute_starts, _total
from helpers import l08_prefetching as F
from helpers.runtime.cluster import RankError, run
from helpers.runtime.slow_network import SlowNetwork

GATHER, COMPUTE = [1.0, 2.0, 1.0, 3.0], [2.0, 1.0, 2.0, 1.0]


def test_schedule_without_prefetch_serialises_everything() -> None:
    sched = l08.prefetch_schedule(GATHER, COMPUTE, 0)
    assert sched == [(0, 1, 1, 3), (3, 5, 5, 6), (6, 7, 7, 9), (9, 12, 12, 13)]
    assert l08.exposed_communication(sched, COMPUTE) == sum(GATHER)


def test_issue_is_program_order_and_the_channel_queues() -> None:
    """Issue 12 item 1: units 0..d are issued at the start; a queued all-gather lands after the previous one."""
    assert l08.prefetch_schedule(GATHER, COMPUTE, 1) == [(0, 1, 1, 3), (0, 3, 3, 4), (3, 4, 4, 6), (4, 7, 7, 8)]
    assert [r[0] for r in l08.prefetch_schedule(GATHER, COMPUTE, 3)] == [0, 0, 0, 0]
    assert l08.transfer_starts(l08.prefetch_schedule(GATHER, COMPUTE, 3)) == [0, 1, 3, 4]
    slow_g, slow_c = l08.synthetic_units(6, 1.0, 0.6, slow_unit=2, slow_factor=5)
    units, acts = [100e6] * 6, [20e6] * 6
    scheds = [l08.prefetch_schedule(slow_g, slow_c, d) for d in range(6)]
    assert [l08.peak_live_bytes(s, units, acts, 75e6) for s in scheds][3:] == [535e6, 615e6, 695e6]
    assert [l08.peak_live_bytes(l08.channel_free_schedule(s), units, acts, 75e6) for s in scheds][3:] == [455e6] * 3
    assert l08.max_prefetch_depth(slow_g, slow_c, units, acts, 75e6, 500e6) == 2


def test_deeper_prefetch_never_slower_and_never_smaller() -> None:
    gather, compute = [0.5, 0.5, 4.0, 0.5, 0.5, 0.5], [1.0] * 6
    units, acts = [300, 100, 700, 100, 300, 100], [40] * 6
    scheds = [l08.prefetch_schedule(gather, compute, d) for d in range(6)]
    exposed = [l08.exposed_communication(s, compute) for s in scheds]
    peaks = [l08.peak_live_bytes(s, units, acts, 1000) for s in scheds]
    assert exposed == sorted(exposed, reverse=True) and exposed[0] > exposed[-1]
    assert peaks == sorted(peaks) and peaks[0] < peaks[-1]
    for d, sched in enumerate(scheds):  # never more than d + 1 units gathered at once
        for i, _, _, _ in sched:
            assert sum(1 for (iv, _, _, ev) in sched if iv <= i < ev) <= d + 1


def test_depth_and_budget_edges() -> None:
    peaks = [l08.peak_live_bytes(l08.prefetch_schedule(GATHER, COMPUTE, d), [100, 200, 100, 300], [10] * 4, 50)
             for d in range(4)]
    for choose in (l08.max_prefetch_depth, l08.best_prefetch_depth):
        assert choose(GATHER, COMPUTE, [100, 200, 100, 300], [10] * 4, 50, peaks[0]) == 0
        assert choose(GATHER, COMPUTE, [100, 200, 100, 300], [10] * 4, 50, peaks[0] - 1) is None
    assert l08.max_prefetch_depth(GATHER, COMPUTE, [100, 200, 100, 300], [10] * 4, 50, 1e9) == 3


def test_best_depth_is_the_smallest_reaching_the_lowest_exposed_time_that_fits() -> None:
    """Issue 24: the largest depth that fits is an upper bound; the depth to run is the smallest that hides as much."""
    g, c, units, acts = [0.5, 0.5, 0.5, 0.5, 4.0, 0.5], [1.0] * 6, [100] * 6, [20] * 6   # exposed 6.5 .. 2, 2, 2
    assert [l08.best_prefetch_depth(g, c, units, acts, 75, b) for b in (440, 520, 600, 1e9)] == [1, 2, 3, 3]
    assert [l08.max_prefetch_depth(g, c, units, acts, 75, b) for b in (440, 520, 600, 1e9)] == [1, 2, 3, 5]
    assert l08.best_prefetch_depth([1.0] * 3, [0.0] * 3, [100] * 3, [0] * 3, 0, 1e9) == 0   # nothing to hide behind


def test_peak_is_reached_at_an_issue_when_a_unit_computes_for_no_time() -> None:
    """Issue 24: unit 0 computes for 0 s, so it is freed at its compute start; sampling only there misses it."""
    sched = l08.prefetch_schedule([0.5, 1.0], [0.0, 1.0], 0)
    assert sched == [(0.0, 0.5, 0.5, 0.5), (0.5, 1.5, 1.5, 2.5)]
    assert l08.peak_live_bytes(sched, [100, 10], [0, 0], 0) == 100
    assert _peak_at_compute_starts(sched, [100, 10], [0, 0], 0) == 10


def test_blocked_time_ignores_enqueue_time() -> None:
    trace = F.synthetic_trace([0.3, 0.3], [0.0, 0.2], [1.0, 1.0])
    assert l08.blocked_waiting_s(trace) == pytest.approx(0.2)


def test_checks_accept_references_and_name_mistakes() -> None:
    l08.check_schedule(l08.prefetch_schedule, [(GATHER, COMPUTE, d) for d in range(4)])
    with pytest.raises(AssertionError, match="issued at the start"):
        l08.check_schedule(lambda g, c, d: l08.prefetch_schedule(g, c, len(g)), [(GATHER, COMPUTE, 0)])
    with pytest.raises(AssertionError, match="only once the channel is free"):
        l08.check_schedule(lambda g, c, d: l08.channel_free_schedule(l08.prefetch_schedule(g, c, d)),
                            [(GATHER, COMPUTE, 2)])
    trace = F.synthetic_trace([0.3, 0.3], [0.0, 0.2], [1.0, 1.0])
    l08.check_blocked(l08.blocked_waiting_s, [trace])
    with pytest.raises(AssertionError, match="enqueueing"):
        l08.check_blocked(lambda t: 0.6, [trace])


SIZES4 = (GATHER, COMPUTE, [100, 200, 100, 300], [10] * 4, 50)
SLOW = ([0.5, 0.5, 0.5, 0.5, 4.0, 0.5], [1.0] * 6, [100] * 6, [20] * 6, 75)
QUEUED = ([0.6, 0.6, 3.0, 0.6, 0.6, 0.6], [1.0] * 6, [100] * 6, [20] * 6, 75)
PLATEAU = ([2.0, 1.0, 0.5, 0.0, 4.0, 0.25, 0.0], [1.0, 2.0, 0.0, 0.25, 2.0, 2.0, 1.0],
           [300, 100, 100, 200, 400, 100, 100], [20] * 7, 100)
DIP = ([0.25, 0.0, 0.5, 0.5, 3.0], [1.0, 0.0, 0.0, 2.0, 2.0], [300, 100, 700, 700, 300], [200, 0, 40, 40, 40], 50)


def _planner(choose, count=l08.peak_live_bytes):
    """A plan_prefetch built from a depth chooser over (peaks, exposed, budget) and a peak count."""
    def plan(g, c, units, acts, shards, budget):
        scheds = [l08.prefetch_schedule(g, c, d) for d in range(len(g))]
        peaks = [count(s, units, acts, shards) for s in scheds]
        exposed = [l08.exposed_communication(s, c) for s in scheds]
        depth = choose(peaks, exposed, budget)
        return None if depth is None else {"depth": depth, "peak_bytes": peaks[depth], "exposed_s": exposed[depth]}
    return plan


def _deepest(peaks, exposed, budget):
    return max((d for d, p in enumerate(peaks) if p <= budget), default=None)


def _stop_over_budget(peaks, exposed, budget):
    fits = []
    for d, p in enumerate(peaks):
        if p > budget:
            break
        fits.append(d)
    return min(fits, key=lambda d: (exposed[d], d)) if fits else None


def _greedy(peaks, exposed, budget):
    best = None
    for d, p in enumerate(peaks):
        if p <= budget:
            if best is not None and exposed[d] >= exposed[best] - l08.EXPOSED_TIE_S:
                break
            best = d
    return best


def test_the_hidden_profiles_defeat_the_shortcuts_the_text_names() -> None:
    """The deepest depth that fits, stopping at the first depth over the budget (a peak need not grow with depth when
    units compute for no time) and stopping at the first depth that gains nothing are each wrong on a hidden
    profile, and the exposed times of the profiles are never within the tie of each other without being equal."""
    assert l08.prefetch_plan(*PLATEAU, 9e9)["depth"] == 3
    assert _deepest(*l08.depth_table(PLATEAU), 9e9) == 6 and _greedy(*l08.depth_table(PLATEAU), 9e9) == 1
    peaks, exposed = l08.depth_table(DIP)
    assert peaks[1] > 1400 >= peaks[2] and l08.prefetch_plan(*DIP, 1400)["depth"] == 2
    assert _stop_over_budget(peaks, exposed, 1400) == 0
    for profile in (SIZES4, SLOW, QUEUED, PLATEAU, DIP):
        times = l08.depth_table(profile)[1]
        assert all(a == pytest.approx(b, abs=1e-12) or abs(a - b) > 1e-3 for a in times for b in times)


def test_plan_checks_accept_the_reference_and_name_mistakes() -> None:
    l08.check_plan_claims(l08.prefetch_plan, [(SIZES4, b) for b in (389, 479, 760)] + [(PLATEAU, 9e9), (DIP, 1400)])
    l08.check_plan_depth(l08.prefetch_plan, [(SIZES4, b) for b in (389, 479, 760)] + [(PLATEAU, 9e9), (DIP, 1400)])
    l08.check_plan_claims(_planner(_deepest), [(PLATEAU, 9e9)])   # right claims for the depth it picked
    with pytest.raises(AssertionError, match="deepest depth that fits, only an upper bound"):
        l08.check_plan_depth(_planner(_deepest), [(PLATEAU, 9e9)])
    with pytest.raises(AssertionError, match="gains nothing may be followed by one that does"):
        l08.check_plan_depth(_planner(_greedy), [(PLATEAU, 9e9)])
    with pytest.raises(AssertionError, match="one over the budget by one that fits"):
        l08.check_plan_depth(_planner(_stop_over_budget), [(DIP, 1400)])
    with pytest.raises(AssertionError, match="return None"):
        l08.check_plan_depth(_planner(lambda peaks, exposed, budget: 0), [(SIZES4, 389)])

    def from_channel_free(sched, units, acts, shards):
        return l08.peak_live_bytes(l08.channel_free_schedule(sched), units, acts, shards)

    def from_landing(sched, units, acts, shards):
        return l08.peak_live_bytes([(f, f, s, e) for (_, f, s, e) in sched], units, acts, shards)

    with pytest.raises(AssertionError, match="only from when the channel is free"):
        l08.check_plan_claims(_planner(_deepest, from_channel_free), [(QUEUED, 9e9)])
    with pytest.raises(AssertionError, match="only once its all-gather landed"):
        l08.check_plan_claims(_planner(_deepest, from_landing), [(([1.0, 1.0, 1.0], [0.5] * 3, [500, 10, 10],
                                                                    [0, 0, 0], 0), 9e9)])
    with pytest.raises(AssertionError, match="only when units start computing"):
        l08.check_plan_claims(_planner(lambda *a: 0, _peak_at_compute_starts),
                               [(([0.5, 1.0], [0.0, 1.0], [100, 10], [0, 0], 0), 9e9)])
    with pytest.raises(AssertionError, match="exactly the keys"):
        l08.check_plan_claims(lambda *a: {"depth": 0}, [(SIZES4, 760)])
    with pytest.raises(AssertionError, match="returned None, but depth 0 fits"):
        l08.check_plan_claims(lambda *a: None, [(SIZES4, 760)])


def test_unit_sizes_are_the_bytes_the_forward_allocates() -> None:
    widths = (5, 7, 7, 7, 7, 2)
    r = run(F.forward_on_rank, l08.reference_forward, widths, torch.randn(2, 5), 0, world_size=3, timeout=30)[0]
    assert F.unit_sizes(widths, 3) == (r["unit_bytes"], r["shard_bytes"])


def test_measured_check_runs_the_plan_on_gloo() -> None:
    case = ((6, 10, 8, 8, 3), 2, [1.0, 1.0, 3.0, 1.0], [2.0, 2.0, 1.0, 1.0], 1812)
    l08.check_plan_measured(l08.prefetch_plan, [case])

    def understated(*args):
        plan = l08.prefetch_plan(*args)
        return plan | {"peak_bytes": plan["peak_bytes"] - 1}

    with pytest.raises(AssertionError, match="measured from the storages"):
        l08.check_plan_measured(understated, [case])


def test_checks_take_only_plain_values() -> None:
    class Number(float):
        def __eq__(self, other: object) -> bool:
            return True

    with pytest.raises(AssertionError, match="plain data"):
        l08.check_plan_claims(lambda *a: {"depth": 1, "peak_bytes": Number(0.0), "exposed_s": 2.0}, [(SIZES4, 760)])
    with pytest.raises(AssertionError, match="plain data"):
        l08.check_schedule(lambda g, c, d: [(Number(0), 0, 0, 0)], [(GATHER, COMPUTE, 0)])


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_reference_forward_prefetches_within_depth(depth: int) -> None:
    x = torch.randn(4, 6)
    for slow in (True, False):
        out = run(F.forward_on_rank, l08.reference_forward, (6, 10, 8, 8, 3), x, depth, slow, world_size=2,
                  timeout=30)
        F.assert_prefetching_forward(out, depth, num_units=4)
        l08.check_prefetching_forward(out, depth, num_units=4)


UNEQUAL = (16, 40, 24, 56, 8, 32, 4)   # 6 units of different sizes


@pytest.mark.parametrize("ratio,slow_factor", [(0.6, 5.0), (1.5, 1.0), (0.25, 1.0)])
def test_planner_counts_the_bytes_the_forward_allocates(ratio: float, slow_factor: float) -> None:
    """Issue 12 item 1: at every depth the planner's peak is the measured peak of allocated storage.

    The reference forward runs on gloo with a storage meter (bytes read from the landing buffers' and
    parameters' storages at every allocation) and a modelled clock; no activations (``no_grad``).
    Counting buffers only from when the channel is free (the old planner) falls short.
    """
    g, c = l08.synthetic_units(6, 1.0, ratio, slow_unit=2, slow_factor=slow_factor)
    x = torch.randn(3, UNEQUAL[0])
    short = 0
    for depth in range(6):
        r = run(F.forward_on_rank, l08.reference_forward, UNEQUAL, x, depth, True, (g, c), world_size=2,
                timeout=30)[0]
        assert len(set(r["unit_bytes"])) == 6 and r["leftover"] == 0
        sched = l08.prefetch_schedule(g, c, depth)
        measured = r["shard_bytes"] + r["peak_bytes"]
        assert l08.peak_live_bytes(sched, r["unit_bytes"], [0] * 6, r["shard_bytes"]) == measured
        old = l08.peak_live_bytes(l08.channel_free_schedule(sched), r["unit_bytes"], [0] * 6, r["shard_bytes"])
        short += old < measured
        # the modelled clock replays the schedule: issue, landing (wait return), compute start and end
        events = {(e, u): t for e, u, t in r["trace"]}
        for v, (i, f, s, e) in enumerate(sched):
            assert events["issue_call", v] == pytest.approx(i) and events["compute_end", v] == pytest.approx(e)
            assert events["compute_start", v] == pytest.approx(s)
            assert events["wait_return", v] == pytest.approx(max(f, sched[v - 1][3] if v else 0.0))
        assert l08.blocked_waiting_s(r["trace"]) == pytest.approx(l08.exposed_communication(sched, c))
    assert short > 0


def _issue_before_free(units, x, depth):
    handles = {v: units[v].issue_gather() for v in range(min(depth + 1, len(units)))}
    for k, unit in enumerate(units):
        handles.pop(k).wait()
        x = unit.module(x)
        if k + depth + 1 < len(units):
            handles[k + depth + 1] = units[k + depth + 1].issue_gather()
        unit.free()
    return x


def test_forward_check_measures_a_transient_extra_unit() -> None:
    out = run(F.forward_on_rank, _issue_before_free, (6, 10, 8, 8, 3), torch.randn(2, 6), 1, world_size=2,
              timeout=30)
    assert out[0]["materialised"] == [[0, 1], [1, 2], [2, 3], [3]]   # right at every computation ...
    with pytest.raises(AssertionError, match="free unit k before issuing unit k\\+2"):
        F.assert_prefetching_forward(out, 1, num_units=4)         # ... but 3 units allocated at once


def test_modelled_clock_charges_waits_not_issues() -> None:
    clock = F.ModelledClock([2.0, 1.0], [1.0, 1.0])
    clock.issued(0)
    clock.issued(1)            # queued behind unit 0: lands at 3
    clock.spend(0.5)
    clock.waited(0)
    assert clock.now == 2.0
    clock.spend(2.0)
    clock.waited(1)            # landed at 3, long before: no blocking
    assert clock.now == 4.0
    assert l08.blocked_waiting_s(clock.trace) == pytest.approx(1.5)
    assert [e for e, _, _ in clock.trace[:2]] == ["issue_call", "issue_return"] and clock.trace[1][2] == 0.0


def test_prefetch_unit_pads_rows_on_three_ranks() -> None:
    out = run(F.forward_on_rank, l08.reference_forward, (5, 7, 7, 7, 7, 2), torch.randn(6, 5), 2, world_size=3,
              timeout=30)
    l08.check_prefetching_forward(out, 2, num_units=5)


def _no_prefetch(units, x, depth):
    for unit in units:
        unit.issue_gather().wait()
        x = unit.module(x)
        unit.free()
    return x


def test_forward_check_names_a_missing_prefetch() -> None:
    out = run(F.forward_on_rank, _no_prefetch, (6, 10, 8, 3), torch.randn(2, 6), 1, world_size=2, timeout=30)
    with pytest.raises(AssertionError, match="next 1 prefetched"):
        F.assert_prefetching_forward(out, 1, num_units=3)


def _compute_before_wait(units, x, depth):
    for unit in units:
        unit.issue_gather()
        x = unit.module(x)
        unit.free()
    return x


def test_computing_before_the_wait_is_a_readable_error() -> None:
    with pytest.raises(RankError, match="before its all-gather's wait"):
        run(F.forward_on_rank, _compute_before_wait, (6, 10, 3), torch.randn(2, 6), 0, world_size=2, timeout=30)


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


def test_blocked_time_ends_at_the_wait_return_in_any_event_order() -> None:
    trace = F.synthetic_trace([0.01, 0.02], [0.2, 0.3], [1.0, 1.0], gap_s=[0.5, 0.25])
    assert l08.blocked_waiting_s(trace) == pytest.approx(0.5)
    assert l08.blocked_waiting_s(l08.shuffled(trace, seed=1)) == pytest.approx(0.5)
    with pytest.raises(AssertionError, match="compute_start"):
        l08.check_blocked(lambda t: _total(t, "wait_call", "compute_start"), [trace])
    with pytest.raises(AssertionError, match="need not be in time order"):
        l08.check_blocked(lambda t: [0.0][len(t)], [list(reversed(trace))])


def _wait_for_everything(units, x, depth):
    handles = {}
    for k, unit in enumerate(units):
        for v in range(k, min(k + depth, len(units) - 1) + 1):
            if v not in handles:
                handles[v] = units[v].issue_gather()
        for handle in handles.values():
            handle.wait()
        x = unit.module(x)
        unit.free()
    return x


def test_forward_check_names_waiting_for_the_prefetched_units_and_counts_gathers() -> None:
    out, ledger = run(F.forward_on_rank, l08.reference_forward, (6, 10, 8, 3), torch.randn(2, 6), 1, world_size=2,
                      timeout=30, ledger=True)
    assert out[0]["in_flight"] == [[1], [2], []]
    F.assert_prefetching_forward(out, 1, num_units=3, ledger=ledger)
    out = run(F.forward_on_rank, _wait_for_everything, (6, 10, 8, 3), torch.randn(2, 6), 1, world_size=2, timeout=30)
    with pytest.raises(AssertionError, match="still in flight"):
        F.assert_prefetching_forward(out, 1, num_units=3)
