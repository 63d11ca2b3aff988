"""Lesson 08, prefetching: references and hidden checks, never sent to the kernel.

FULL_SHARD forward over units ``0..U-1`` with prefetch depth ``d``, in the program order of
:func:`reference_forward` (before unit ``k`` computes, the all-gathers of units ``k..k+d`` are
issued; after it computes, unit ``k`` is freed):

* the all-gather of unit ``v`` is **issued** (its landing buffer allocated and the collective
  enqueued) at ``I_v = E_{v-d-1}``, the moment unit ``v-d-1`` has finished computing and been
  freed (``E_k = 0`` for ``k < 0``: units ``0..d`` are issued at the start), so at most ``d + 1``
  units are materialised;
* the all-gathers share one channel and run one at a time, in unit order: unit ``v``'s transfer
  starts at ``max(I_v, F_{v-1})`` (it may wait in the queue) and **lands** (its wait can
  complete) at ``F_v = max(I_v, F_{v-1}) + gather_s[v]``, with ``F_{-1} = 0``;
* unit ``v`` computes from ``S_v = max(E_{v-1}, F_v)`` to ``E_v = S_v + compute_s[v]`` and
  is freed at ``E_v``.

Memory on one rank: the shards of every unit always, unit ``v``'s full parameters from
``I_v`` to ``E_v`` (the landing buffer exists from the moment its all-gather is issued, also
while it waits for the channel), and unit ``v``'s activations from ``S_v`` to the end of
forward (backward needs them). Times are seconds, sizes bytes. The gloo driver and the
student-side check of the prefetching forward live in :mod:`helpers.l08_prefetching`; the checks here
pass a student's values through :mod:`autograder.plain` first.
"""
from __future__ import annotations

import random
import sys
from typing import Any, Callable, Sequence

import cloudpickle
import torch

from autograder.plain import number, plain
from helpers import l08_prefetching as prefetch
from helpers.runtime.cluster import run
from helpers.shared.checks import rounded

from .drivers import plan_on_rank

# Ship this module by value too: the measured forward (:func:`measured_forward_on_rank`) runs on the
# grader's own ranks, which run no notebook code and never import the autograder package.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

Schedule = list[tuple[float, float, float, float]]  # (issue, landed, compute start, compute end) per unit


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


def measured_forward_on_rank(widths: Sequence[int], x: torch.Tensor, depth: int, gather_s: Sequence[float],
                             compute_s: Sequence[float]) -> dict[str, Any]:
    """On one of the grader's gloo ranks: :func:`reference_forward` at ``depth``, measured by
    :func:`helpers.l08_prefetching.forward_on_rank` under ``SlowNetwork`` with a modelled clock. Returns the
    measured peak (bytes, shards included) and the clock's trace (seconds)."""
    record = prefetch.forward_on_rank(reference_forward, widths, x, depth, True, (gather_s, compute_s))
    return {"peak_bytes": record["shard_bytes"] + record["peak_bytes"], "trace": record["trace"]}


# --------------------------------------------------------------------------- references


def prefetch_schedule(gather_s: Sequence[float], compute_s: Sequence[float], depth: int) -> Schedule:
    """``(I_v, F_v, S_v, E_v)`` for every unit; see the module docstring."""
    out: Schedule = []
    for v in range(len(gather_s)):
        issue = out[v - depth - 1][3] if v - depth - 1 >= 0 else 0.0
        landed = max(issue, out[v - 1][1] if v > 0 else 0.0) + gather_s[v]
        start = max(out[v - 1][3] if v > 0 else 0.0, landed)
        out.append((issue, landed, start, start + compute_s[v]))
    return out


def transfer_starts(schedule: Schedule) -> list[float]:
    """When each all-gather starts moving bytes: ``max(I_v, F_{v-1})``, once the channel is free."""
    return [max(issue, schedule[v - 1][1] if v > 0 else 0.0) for v, (issue, _, _, _) in enumerate(schedule)]


def channel_free_schedule(schedule: Schedule) -> Schedule:
    """``schedule`` with each buffer allocated only when its transfer starts: the mistaken planner's view."""
    return [(t, f, s, e) for t, (_, f, s, e) in zip(transfer_starts(schedule), schedule)]


def _live_peak(intervals: Sequence[tuple[float, float, float]], shard_bytes: float) -> float:
    """Shards plus the largest total of ``(begin, end, bytes)`` half-open intervals live at one instant."""
    peak = 0.0
    for t, _, _ in intervals:  # the live total only rises when something is allocated
        peak = max(peak, sum(b for start, end, b in intervals if start <= t < end))
    return shard_bytes + peak


def peak_live_bytes(schedule: Schedule, unit_bytes: Sequence[float], activation_bytes: Sequence[float],
                    shard_bytes: float) -> float:
    """Peak bytes on one rank: shards, gathered units on ``[I_v, E_v)``, activations from ``S_v`` on."""
    return _live_peak([(i, e, b) for (i, _, _, e), b in zip(schedule, unit_bytes)]
                      + [(s, float("inf"), b) for (_, _, s, _), b in zip(schedule, activation_bytes)], shard_bytes)


def exposed_communication(schedule: Schedule, compute_s: Sequence[float]) -> float:
    """Seconds of forward not spent computing: the end of the last unit minus the total compute."""
    return schedule[-1][3] - sum(compute_s) if schedule else 0.0


def max_prefetch_depth(gather_s: Sequence[float], compute_s: Sequence[float], unit_bytes: Sequence[float],
                       activation_bytes: Sequence[float], shard_bytes: float, budget_bytes: float) -> int | None:
    """The largest depth in ``0..U-1`` whose peak fits the budget, ``None`` if none does: an upper bound only."""
    best = None
    for depth in range(len(gather_s)):
        peak = peak_live_bytes(prefetch_schedule(gather_s, compute_s, depth), unit_bytes, activation_bytes,
                               shard_bytes)
        if peak <= budget_bytes:
            best = depth
    return best


EXPOSED_TIE_S = 1e-9  # exposed communication (seconds) closer than this counts as equal (design exercise 3)


def best_prefetch_depth(gather_s: Sequence[float], compute_s: Sequence[float], unit_bytes: Sequence[float],
                        activation_bytes: Sequence[float], shard_bytes: float, budget_bytes: float) -> int | None:
    """The depth to run (design exercise 3): among the depths in ``0..U-1`` whose peak fits the budget, the smallest one
    whose exposed communication is within :data:`EXPOSED_TIE_S` seconds of the lowest; ``None`` if none fits."""
    exposed = {}
    for depth in range(len(gather_s)):
        sched = prefetch_schedule(gather_s, compute_s, depth)
        if peak_live_bytes(sched, unit_bytes, activation_bytes, shard_bytes) <= budget_bytes:
            exposed[depth] = exposed_communication(sched, compute_s)
    if not exposed:
        return None
    lowest = min(exposed.values())
    return min(d for d, e in exposed.items() if e - lowest < EXPOSED_TIE_S)


def blocked_waiting_s(trace: Sequence[tuple[str, int, float]]) -> float:
    """Exposed communication measured from a trace: seconds the CPU spent inside ``wait()``.

    ``trace`` holds ``(event, unit, perf_counter seconds)`` with events ``issue_call``,
    ``issue_return``, ``wait_call``, ``wait_return``, ``compute_start``, ``compute_end``.
    The time an ``async_op=True`` call takes to return is enqueueing, not communication.
    One forward pass per trace: each unit has one ``wait_call`` and one ``wait_return``.
    """
    calls = {(u, "wait_call"): t for e, u, t in trace if e == "wait_call"}
    return sum(t - calls[(u, "wait_call")] for e, u, t in trace if e == "wait_return")


# --------------------------------------------------------------------------- hidden checks


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def _matches(got: Any, schedule: Schedule, columns: int = 4) -> bool:
    """Whether ``got`` (a plain copy of a student's value) has ``schedule``'s first ``columns`` columns."""
    try:
        return len(got) == len(schedule) and all(
            len(g) == 4 and all(_close(number(a), b) for a, b in zip(g[:columns], row[:columns]))
            for g, row in zip(got, schedule))
    except (TypeError, AssertionError):
        return False


def check_schedule(fn: Callable[..., Schedule], cases: Sequence[tuple[Sequence[float], Sequence[float], int]]) -> None:
    """``fn`` returns :func:`prefetch_schedule` on every case."""
    for gather_s, compute_s, depth in cases:
        call = f"prefetch_schedule(gather_s={list(gather_s)}, compute_s={list(compute_s)}, depth={depth})"
        exp = prefetch_schedule(gather_s, compute_s, depth)
        got = plain(fn(list(gather_s), list(compute_s), depth), call)
        if not _matches(got, exp):
            hint = ""
            if _matches(got, channel_free_schedule(exp)):
                hint = (" That issues each all-gather only once the channel is free. The forward issues it, and "
                        f"allocates its landing buffer, as soon as unit v-{depth}-1 has been freed (I_v = "
                        f"E_(v-{depth}-1)); it then waits in the queue until the previous all-gather has landed.")
            elif depth < len(gather_s) - 1 and _matches(got, prefetch_schedule(gather_s, compute_s, len(gather_s)),
                                                      columns=1):
                hint = (f" Every all-gather was issued at the start: depth {depth} allows one only once unit "
                        f"v-{depth}-1 has been freed (at most {depth + 1} materialised units).")
            raise AssertionError(f"{call} returned {rounded(got, 6)!r:.300}, expected {rounded(exp, 6)}.{hint}")


def _peak_at_compute_starts(schedule: Schedule, unit_bytes: Sequence[float], activation_bytes: Sequence[float],
                            shard_bytes: float) -> float:
    """The mistaken peak: live bytes sampled only at the compute starts ``S_v``."""
    return shard_bytes + max(
        sum(b for (i, _, _, e), b in zip(schedule, unit_bytes) if i <= t < e)
        + sum(b for (_, _, s, _), b in zip(schedule, activation_bytes) if s <= t) for _, _, t, _ in schedule)


Plan = dict[str, float]  # {"depth": int, "peak_bytes": bytes, "exposed_s": seconds}
Profile = tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float], float]  # g, c, unit, act, shards


def prefetch_plan(gather_s: Sequence[float], compute_s: Sequence[float], unit_bytes: Sequence[float],
                  activation_bytes: Sequence[float], shard_bytes: float, budget_bytes: float) -> Plan | None:
    """The design exercise's answer: :func:`best_prefetch_depth`, its forward's peak (bytes) and exposed time (s)."""
    depth = best_prefetch_depth(gather_s, compute_s, unit_bytes, activation_bytes, shard_bytes, budget_bytes)
    if depth is None:
        return None
    sched = prefetch_schedule(gather_s, compute_s, depth)
    return {"depth": depth, "peak_bytes": peak_live_bytes(sched, unit_bytes, activation_bytes, shard_bytes),
            "exposed_s": exposed_communication(sched, compute_s)}


def depth_table(profile: Profile) -> tuple[list[float], list[float]]:
    """Per depth ``0..U-1``: the forward's peak live bytes and its exposed communication (seconds)."""
    gather_s, compute_s, unit_bytes, act, shards = profile
    scheds = [prefetch_schedule(gather_s, compute_s, d) for d in range(len(gather_s))]
    return ([peak_live_bytes(s, unit_bytes, act, shards) for s in scheds],
            [exposed_communication(s, compute_s) for s in scheds])


def _call(profile: Profile, budget: float) -> str:
    gather_s, compute_s, unit_bytes, act, shards = profile
    return (f"plan_prefetch(gather_s={list(gather_s)}, compute_s={list(compute_s)}, unit_bytes={list(unit_bytes)}, "
            f"activation_bytes={list(act)}, shard_bytes={shards:g}, budget_bytes={budget:g})")


def _plan(fn: Callable[..., Any], profile: Profile, budget: float) -> Plan | None:
    """A plain copy of ``fn``'s plan for ``profile`` and ``budget``, checked for shape (``None`` or the dict)."""
    call = _call(profile, budget)
    got = plain(fn(*[list(p) if isinstance(p, (list, tuple)) else p for p in profile], budget), call)
    if got is None:
        return None
    if type(got) is not dict or set(got) != {"depth", "peak_bytes", "exposed_s"}:
        raise AssertionError(f"{call} returned {got!r:.200}; expected None or a dict with exactly the keys "
                             f"'depth', 'peak_bytes' and 'exposed_s'.")
    depth = got["depth"]
    if type(depth) is not int or not 0 <= depth < len(profile[0]):
        raise AssertionError(f"{call} returned depth {depth!r}; expected an int in 0..{len(profile[0]) - 1}.")
    return {"depth": depth, "peak_bytes": number(got["peak_bytes"], f"{call}['peak_bytes']"),
            "exposed_s": number(got["exposed_s"], f"{call}['exposed_s']")}


def _peak_hint(profile: Profile, depth: int, got: float) -> str:
    """Which counting mistake gives the peak ``got`` at ``depth``, if one of the known ones does."""
    gather_s, compute_s, unit_bytes, act, shards = profile
    sched = prefetch_schedule(gather_s, compute_s, depth)
    right = peak_live_bytes(sched, unit_bytes, act, shards)
    mistakes = [
        (peak_live_bytes(channel_free_schedule(sched), unit_bytes, act, shards),
         "That counts a unit's full parameters only from when the channel is free for its all-gather (or later): the "
         "landing buffer is allocated when the all-gather is issued, also while it waits in the queue."),
        (_peak_at_compute_starts(sched, unit_bytes, act, shards),
         "That samples the live bytes only when units start computing: the peak is reached when something is "
         "allocated, also at an issue (a unit with zero compute time is freed at its start)."),
        (peak_live_bytes([(f, f, s, e) for (_, f, s, e) in sched], unit_bytes, act, shards),
         "That counts a unit's full parameters only once its all-gather landed: the landing buffer is allocated when "
         "the all-gather is issued."),
        (_live_peak([(i, e, b) for (i, _, _, e), b in zip(sched, unit_bytes)]
                    + [(s, e, b) for (_, _, s, e), b in zip(sched, act)], shards),
         "That frees each unit's activations with the unit: backward needs them, they stay until the end of forward."),
        (shards + max(unit_bytes),
         "That is the steady state of one gathered unit; prefetched units and activations add to it."),
        (right - shards, "The shards of every unit are live the whole time: add shard_bytes."),
    ]
    return next((" " + text for value, text in mistakes if _close(got, value) and not _close(value, right)), "")


def check_plan_claims(fn: Callable[..., Plan | None], cases: Sequence[tuple[Profile, float]]) -> None:
    """Whatever depth ``fn`` picks, its ``peak_bytes`` and ``exposed_s`` are those of the forward at that depth."""
    for profile, budget in cases:
        got, exp = _plan(fn, profile, budget), prefetch_plan(*profile, budget)
        call = _call(profile, budget)
        peaks, exposed = depth_table(profile)
        if got is None:
            if exp is not None:
                raise AssertionError(f"{call} returned None, but depth 0 fits: its forward peaks at {peaks[0]:g} "
                                     f"bytes.")
            continue
        depth = got["depth"]
        if not _close(got["peak_bytes"], peaks[depth]):
            raise AssertionError(f"{call} returned peak_bytes {got['peak_bytes']!r} for depth {depth}; the forward "
                                 f"at depth {depth} peaks at {peaks[depth]:g} bytes."
                                 f"{_peak_hint(profile, depth, got['peak_bytes'])}")
        if not _close(got["exposed_s"], exposed[depth]):
            sched = prefetch_schedule(profile[0], profile[1], depth)
            hint = ""
            if _close(got["exposed_s"], sum(f - i for i, f, _, _ in sched)) or _close(got["exposed_s"],
                                                                                   sum(profile[0])):
                hint = (" That counts every all-gather as exposed: the part that overlaps computation is hidden; "
                        "exposed is the time of forward in which no unit computes.")
            elif _close(got["exposed_s"], sched[-1][3]):
                hint = " That is the whole forward time; exposed communication is the part not spent computing."
            raise AssertionError(f"{call} returned exposed_s {got['exposed_s']!r} for depth {depth}; the forward at "
                                 f"depth {depth} exposes {exposed[depth]:.9g} s.{hint}")


def check_plan_depth(fn: Callable[..., Plan | None], cases: Sequence[tuple[Profile, float]]) -> None:
    """``fn``'s depth is the grader's exhaustive optimum: fits, lowest exposed of those that fit, the smallest."""
    for profile, budget in cases:
        got, exp = _plan(fn, profile, budget), prefetch_plan(*profile, budget)
        depth, want = (None if got is None else got["depth"]), (None if exp is None else exp["depth"])
        if depth == want:
            continue
        peaks, exposed = depth_table(profile)
        fits = [d for d, p in enumerate(peaks) if p <= budget]
        hint = ""
        if want is None:
            hint = " No depth fits: return None."
        elif depth is not None and peaks[depth] > budget:
            hint = f" Depth {depth}'s forward peaks at {peaks[depth]:g} bytes, over the budget."
        elif depth is None:
            hint = (f" Depth {fits[0]} fits: its forward peaks at {peaks[fits[0]]:g} bytes (a peak equal to the "
                    f"budget fits).")
        elif depth == max(fits) and exposed[depth] >= exposed[want] - EXPOSED_TIE_S:
            hint = (f" That is the deepest depth that fits, only an upper bound: depth {want} already reaches the "
                    f"lowest exposed communication of the depths that fit, with less memory.")
        elif exposed[depth] > exposed[want] + EXPOSED_TIE_S:
            hint = (f" Depth {depth} exposes {exposed[depth]:.9g} s; depth {want} fits and exposes "
                    f"{exposed[want]:.9g} s. Every depth 0..{len(peaks) - 1} that fits is a candidate: a depth that "
                    f"gains nothing may be followed by one that does, and one over the budget by one that fits.")
        raise AssertionError(f"{_call(profile, budget)} chose depth {depth!r}, expected {want!r} (per depth: "
                             f"peak {[round(p) for p in peaks]} bytes, exposed {[round(e, 9) for e in exposed]} s)."
                             f"{hint}")


def check_plan_measured(fn: Callable[..., Plan | None],
                         cases: Sequence[tuple[Sequence[int], int, Sequence[float], Sequence[float], float]]) -> None:
    """The plan holds on gloo. For each case the planner runs on ``world_size`` ranks, which then run the forward
    at its depth over ``unit_stack(widths)`` under ``SlowNetwork`` with a storage meter and a modelled clock
    (``gather_s``, ``compute_s``; :func:`plan_on_rank`, then :func:`measured_forward_on_rank` on the grader's
    own ranks): the measured peak (shards included) fits the
    budget and equals the plan's ``peak_bytes``; the time blocked in ``wait()`` equals its ``exposed_s`` and the
    lowest exposed communication of the depths that fit. The planner is given
    :func:`helpers.l08_prefetching.unit_sizes` and no activations (the forward runs under ``no_grad``)."""
    for widths, world_size, gather_s, compute_s, budget in cases:
        unit_bytes, shard_bytes = prefetch.unit_sizes(widths, world_size)
        profile = (gather_s, compute_s, unit_bytes, [0.0] * len(unit_bytes), shard_bytes)
        got, exp = _plan(fn, profile, budget), prefetch_plan(*profile, budget)
        call = _call(profile, budget)
        if got is None or exp is None:
            if got is not exp:
                raise AssertionError(f"{call} returned {got!r}; expected {'None' if exp is None else 'a plan'}.")
            continue
        x = torch.randn(3, widths[0], generator=torch.Generator().manual_seed(world_size))
        plans = plain(run(plan_on_rank, fn, widths, list(gather_s), list(compute_s), budget,
                          world_size=world_size, timeout=60), "the ranks' plans")
        for rank, plan in enumerate(plans):
            if plan != got:
                raise AssertionError(f"{call} returned {plan!r:.200} on rank {rank} but {got!r} when called "
                                     f"alone: a plan depends only on its arguments.")
        ranks = plain(run(measured_forward_on_rank, widths, x, got["depth"], list(gather_s), list(compute_s),
                          world_size=world_size, timeout=60), "the measured forward")
        for rank, r in enumerate(ranks):
            where = f"{call}: on {world_size} gloo ranks, rank {rank}'s forward at depth {got['depth']}"
            peak, blocked = number(r["peak_bytes"]), blocked_waiting_s(r["trace"])
            if peak > budget:
                raise AssertionError(f"{where} allocated {peak:g} bytes at once (shards included, measured from the "
                                     f"storages), over the budget.")
            if not _close(got["peak_bytes"], peak):
                raise AssertionError(f"{where} allocated at most {peak:g} bytes at once (shards included, measured "
                                     f"from the storages), but the plan says {got['peak_bytes']!r}."
                                     f"{_peak_hint(profile, got['depth'], got['peak_bytes'])}")
            if not _close(got["exposed_s"], blocked):
                raise AssertionError(f"{where} spent {blocked:.9g} s (modelled clock) blocked in wait(), but the plan "
                                     f"says {got['exposed_s']!r} s.")
            if not _close(blocked, exp["exposed_s"]):
                raise AssertionError(f"{where} spent {blocked:.9g} s blocked in wait(); depth {exp['depth']} fits the "
                                     f"budget and exposes {exp['exposed_s']:.9g} s.")


def _total(trace: Sequence[tuple[str, int, float]], first: str, second: str) -> float:
    """Sum over units of the ``second`` event's time minus the ``first`` one's (one of each per unit)."""
    return sum(t for e, _, t in trace if e == second) - sum(t for e, _, t in trace if e == first)


def _in_time_order(trace: Sequence[tuple[str, int, float]]) -> bool:
    return all(a[2] <= b[2] for a, b in zip(trace, trace[1:]))


def check_blocked(fn: Callable[..., float], traces: Sequence[list[tuple[str, int, float]]]) -> None:
    """``fn(trace)`` equals :func:`blocked_waiting_s`."""
    for trace in traces:
        order = "" if _in_time_order(trace) else " (its events are not in time order)"
        try:
            got = number(fn(list(trace)), "blocked_waiting_s(trace)")
        except AssertionError:
            raise  # number()'s message already says what is wrong
        except Exception as exc:
            raise AssertionError(f"blocked_waiting_s raised {type(exc).__name__}: {exc} on a trace{order}. Events "
                                 f"need not be in time order: pair each wait_return with the wait_call of the same "
                                 f"unit.") from None
        exp = blocked_waiting_s(trace)
        if not _close(got, exp):
            if _close(got, _total(trace, "issue_call", "issue_return")):
                hint = " That is the time the async calls took to return: enqueueing, not communication."
            elif _close(got, _total(trace, "wait_call", "compute_start")):
                hint = (" That times each wait up to the unit's compute_start; the wait ended at its wait_return "
                        "(other work may come in between).")
            elif order:
                hint = " Events need not be in time order: pair each wait_return with the wait_call of the same unit."
            else:
                hint = ""
            raise AssertionError(f"blocked_waiting_s returned {got!r} on a trace{order}, expected {exp:g} s.{hint}")


def shuffled(trace: Sequence[tuple[str, int, float]], seed: int) -> list[tuple[str, int, float]]:
    """The events of ``trace`` in a deterministic random order (a trace need not be in time order)."""
    out = list(trace)
    random.Random(seed).shuffle(out)
    return out


def check_prefetching_forward(results: Sequence[dict[str, Any]], depth: int, num_units: int,
                               ledger: Any = None) -> None:
    """:func:`helpers.l08_prefetching.assert_prefetching_forward` on a plain copy of the ranks' results."""
    prefetch.assert_prefetching_forward(plain(results, "the ranks' results"), depth, num_units, ledger)
