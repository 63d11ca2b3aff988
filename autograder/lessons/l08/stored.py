"""Lesson 08's stored chapter data (``python -m autograder store``): chapter 08's examples (with the reference
forward measured on gloo) and every setting of its explorer."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from helpers import l08_prefetching as prefetch
from helpers.runtime.cluster import run

from .verdicts import reference_forward
from .verdicts import (Schedule, best_prefetch_depth, blocked_waiting_s, channel_free_schedule, exposed_communication,
                       max_prefetch_depth, peak_live_bytes, prefetch_schedule, transfer_starts)


# --------------------------------------------------------------------------- the chapter's numbers

_DIGITS = 12  # significant digits of a stored float (machine-independent, far below what a figure shows)


def _r(value: float) -> float:
    return float(f"{value:.{_DIGITS}g}")


def synthetic_units(num_units: int, compute_ms: float = 1.0, comm_compute_ratio: float = 1.0,
                    slow_unit: int | None = None, slow_factor: float = 4.0) -> tuple[list[float], list[float]]:
    """``(gather_s, compute_s)`` (seconds) of equal units; unit ``slow_unit`` all-gathers ``slow_factor`` x longer."""
    compute_s = [compute_ms * 1e-3] * num_units
    gather_s = [comm_compute_ratio * compute_ms * 1e-3] * num_units
    if slow_unit is not None:
        gather_s[slow_unit] *= slow_factor
    return gather_s, compute_s


def exposed_gaps(schedule: Schedule) -> list[list[float]]:
    """The intervals ``[E_{v-1}, S_v)`` (``E_{-1} = 0``) in which no unit computes; they add up to the exposed time."""
    gaps, previous_end = [], 0.0
    for _, _, start, end in schedule:
        if start > previous_end:
            gaps.append([previous_end, start])
        previous_end = end
    return gaps


def live_memory_curve(schedule: Schedule, unit_bytes: Sequence[float], activation_bytes: Sequence[float],
                      shard_bytes: float) -> dict[str, list[float]]:
    """Live bytes on one rank as a step function of time, split by kind.

    ``times``: every instant where something is allocated or freed, from 0 to the end of
    forward; per kind, the bytes live on ``[times[k], times[k+1])``: ``shards``; ``landing``
    (unit ``v``'s buffer on ``[I_v, F_v)``); ``gathered`` (on ``[F_v, E_v)``); ``activations``
    (unit ``v``'s from ``S_v`` on); ``total``, whose maximum is :func:`peak_live_bytes`.
    """
    times = sorted({0.0, *(t for row in schedule for t in row)})
    curve: dict[str, list[float]] = {"times": times, "shards": [], "landing": [], "gathered": [],
                                     "activations": [], "total": []}
    for t in times:
        landing = sum(b for (i, f, _, _), b in zip(schedule, unit_bytes) if i <= t < f)
        gathered = sum(b for (_, f, _, e), b in zip(schedule, unit_bytes) if f <= t < e)
        acts = sum(b for (_, _, s, _), b in zip(schedule, activation_bytes) if s <= t)
        for kind, value in (("shards", shard_bytes), ("landing", landing), ("gathered", gathered),
                            ("activations", acts), ("total", shard_bytes + landing + gathered + acts)):
            curve[kind].append(float(value))
    return curve


def depth_rows(gather_s: Sequence[float], compute_s: Sequence[float], unit_bytes: Sequence[float],
               activation_bytes: Sequence[float], shard_bytes: float, curves: bool) -> list[dict[str, Any]]:
    """For every depth ``0..U-1``: the schedule, transfer starts, gaps, forward and exposed seconds, peak bytes (and the
    curve)."""
    rows = []
    for depth in range(len(gather_s)):
        sched = prefetch_schedule(gather_s, compute_s, depth)
        row = {"depth": depth, "schedule": [[_r(t) for t in r] for r in sched],
               "transfers": [_r(t) for t in transfer_starts(sched)],
               "gaps": [[_r(a), _r(b)] for a, b in exposed_gaps(sched)], "forward_s": _r(sched[-1][3]),
               "exposed_s": _r(exposed_communication(sched, compute_s)),
               "peak_bytes": _r(peak_live_bytes(sched, unit_bytes, activation_bytes, shard_bytes))}
        if curves:
            row["curve"] = {k: [_r(v) for v in vs] for k, vs in
                            live_memory_curve(sched, unit_bytes, activation_bytes, shard_bytes).items()}
        rows.append(row)
    return rows


def scenario(gather_s: Sequence[float], compute_s: Sequence[float], unit_bytes: Sequence[float],
             activation_bytes: Sequence[float], shard_bytes: float, budgets: Sequence[float]) -> dict[str, Any]:
    """One chapter example: its inputs, :func:`depth_rows` with curves, and per budget the deepest depth that fits
    and the depth to run."""
    sizes = (unit_bytes, activation_bytes, shard_bytes)
    return {"gather_s": [_r(g) for g in gather_s], "compute_s": [_r(c) for c in compute_s],
            "unit_bytes": list(unit_bytes), "activation_bytes": list(activation_bytes), "shard_bytes": shard_bytes,
            "depths": depth_rows(gather_s, compute_s, unit_bytes, activation_bytes, shard_bytes, curves=True),
            "max_depth": {str(int(b)): max_prefetch_depth(gather_s, compute_s, *sizes, b) for b in budgets},
            "best_depth": {str(int(b)): best_prefetch_depth(gather_s, compute_s, *sizes, b) for b in budgets}}


CHAPTER_UNIT_BYTES, CHAPTER_ACT_BYTES, CHAPTER_SHARD_BYTES = [100e6] * 6, [20e6] * 6, 75e6
CHAPTER_BUDGETS = (250e6, 300e6, 400e6, 500e6)
MEASURED_WIDTHS, MEASURED_WORLD_SIZE = (256,) * 7, 2


def _measure_depths(gather_s: Sequence[float], compute_s: Sequence[float]) -> list[dict[str, Any]]:
    """On gloo ranks: :func:`reference_forward` over :data:`MEASURED_WIDTHS` at every depth, with a storage meter and
    a modelled clock (``gather_s``, ``compute_s``); rank 0's record."""
    x = torch.randn(4, MEASURED_WIDTHS[0], generator=torch.Generator().manual_seed(0))
    return [run(prefetch.forward_on_rank, reference_forward, MEASURED_WIDTHS, x, depth, True, (gather_s, compute_s),
                world_size=MEASURED_WORLD_SIZE, timeout=60)[0] for depth in range(len(MEASURED_WIDTHS) - 1)]


def measured_forward(gather_s: Sequence[float], compute_s: Sequence[float]) -> dict[str, Any]:
    """The reference forward's allocations measured at every depth, against the planner on the same unit sizes.

    Per depth: ``measured_bytes`` (shards + the peak of full-parameter bytes the meter read from the
    storages), ``planned_bytes`` (:func:`peak_live_bytes` with the measured unit and shard bytes, no
    activations: the forward runs under ``no_grad``), ``channel_free_bytes`` (the same with buffers
    counted from when the channel is free), ``materialised`` (units live while each unit computed),
    and from the modelled clock ``issue_s`` (per unit) and ``blocked_s`` (time inside ``wait()``).
    """
    rows = []
    for depth, r in enumerate(_measure_depths(gather_s, compute_s)):
        sched, zeros = prefetch_schedule(gather_s, compute_s, depth), [0.0] * len(gather_s)
        issue = {u: t for e, u, t in r["trace"] if e == "issue_call"}
        rows.append({"depth": depth, "measured_bytes": r["shard_bytes"] + r["peak_bytes"],
                     "planned_bytes": _r(peak_live_bytes(sched, r["unit_bytes"], zeros, r["shard_bytes"])),
                     "channel_free_bytes": _r(peak_live_bytes(channel_free_schedule(sched), r["unit_bytes"], zeros,
                                                              r["shard_bytes"])),
                     "materialised": r["materialised"], "issue_s": [_r(issue[u]) for u in sorted(issue)],
                     "blocked_s": _r(blocked_waiting_s(r["trace"])), "forward_s": _r(r["trace"][-1][2])})
    return {"widths": list(MEASURED_WIDTHS), "world_size": MEASURED_WORLD_SIZE, "unit_bytes": r["unit_bytes"],
            "shard_bytes": r["shard_bytes"], "depths": rows}


def chapter_results() -> dict[str, Any]:
    """Chapter 08's examples: even units, unit 2's all-gather 5x slower (with the old planner's peaks and the
    measured forward), all-gathers 1.5x the compute."""
    sizes = (CHAPTER_UNIT_BYTES, CHAPTER_ACT_BYTES, CHAPTER_SHARD_BYTES, CHAPTER_BUDGETS)
    long = synthetic_units(6, 1.0, 1.5)
    sched = prefetch_schedule(*long, 1)
    from_landing = peak_live_bytes([(f, f, s, e) for _, f, s, e in sched], *sizes[:3])
    slow = synthetic_units(6, 1.0, 0.6, slow_unit=2, slow_factor=5)
    channel_free = [_r(peak_live_bytes(channel_free_schedule(prefetch_schedule(*slow, d)), *sizes[:3]))
                    for d in range(len(slow[0]))]
    return {"even": scenario(*synthetic_units(6, 1.0, 0.6), *sizes),
            "slow": scenario(*slow, *sizes) | {"channel_free_peak_bytes": channel_free},
            "long": scenario(*long, *sizes) | {"depth_1_peak_from_landing": _r(from_landing)},
            "measured": measured_forward(*slow)}


EXPLORER_UNITS = (4, 6, 8)
EXPLORER_RATIOS = (0.25, 0.6, 1.0, 1.5, 3.0)
EXPLORER_ACTIVATION_MB = (0, 20, 50, 100)
EXPLORER_BUDGET_MB = (250, 300, 350, 400, 450, 500, 600, 800, 1000)
EXPLORER_UNIT_MB, EXPLORER_WORLD_SIZE, EXPLORER_SLOW_FACTOR = 100, 8, 5.0


def explorer_config(num_units: int, ratio: float, slow_unit: int) -> dict[str, Any]:
    """One timing setting of the explorer: per depth the schedule and, per activation size, the peak and, per budget,
    the deepest depth that fits and the depth to run."""
    gather_s, compute_s = synthetic_units(num_units, 1.0, ratio, None if slow_unit < 0 else slow_unit,
                                          EXPLORER_SLOW_FACTOR)
    unit_bytes = [EXPLORER_UNIT_MB * 1e6] * num_units
    shard_bytes = num_units * EXPLORER_UNIT_MB * 1e6 / EXPLORER_WORLD_SIZE
    rows = depth_rows(gather_s, compute_s, unit_bytes, [0.0] * num_units, shard_bytes, curves=False)
    peaks: dict[str, list[float]] = {}
    deepest: dict[str, dict[str, int | None]] = {}
    best: dict[str, dict[str, int | None]] = {}
    for act in EXPLORER_ACTIVATION_MB:
        acts = [act * 1e6] * num_units
        peaks[str(act)] = [_r(peak_live_bytes(prefetch_schedule(gather_s, compute_s, d), unit_bytes, acts,
                                              shard_bytes)) for d in range(num_units)]
        deepest[str(act)] = {str(b): max_prefetch_depth(gather_s, compute_s, unit_bytes, acts, shard_bytes, b * 1e6)
                             for b in EXPLORER_BUDGET_MB}
        best[str(act)] = {str(b): best_prefetch_depth(gather_s, compute_s, unit_bytes, acts, shard_bytes, b * 1e6)
                          for b in EXPLORER_BUDGET_MB}
    for row in rows:
        del row["peak_bytes"]
    return {"gather_s": [_r(g) for g in gather_s], "compute_s": [_r(c) for c in compute_s], "shard_bytes": shard_bytes,
            "depths": rows, "peak_bytes": peaks, "max_depth": deepest, "best_depth": best}


def explorer_slow_units(num_units: int) -> list[int]:
    """The slow-unit choices of the explorer: none (-1), the first two, the middle and the last unit."""
    return sorted({-1, 0, 1, num_units // 2, num_units - 1})


def explorer_results() -> dict[str, Any]:
    """Every slider setting of :func:`helpers.l08_prefetching.plots.prefetch_explorer`."""
    return {"num_units": list(EXPLORER_UNITS), "ratios": list(EXPLORER_RATIOS),
            "slow_units": {str(u): explorer_slow_units(u) for u in EXPLORER_UNITS},
            "activation_mb": list(EXPLORER_ACTIVATION_MB), "budget_mb": list(EXPLORER_BUDGET_MB),
            "unit_mb": EXPLORER_UNIT_MB, "world_size": EXPLORER_WORLD_SIZE, "slow_factor": EXPLORER_SLOW_FACTOR,
            "configs": {f"{u}/{ratio}/{slow}": explorer_config(u, ratio, slow)
                        for u in EXPLORER_UNITS for ratio in EXPLORER_RATIOS for slow in explorer_slow_units(u)}}


STORED = {"08_chapter": chapter_results, "08_explorer": explorer_results}
