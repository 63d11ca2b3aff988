"""Lesson 08, prefetching: the chapter's figures and its explorer.

Everything here draws what :mod:`helpers.prefetch` computes (``prefetch_schedule``,
``peak_live_bytes``, ``exposed_communication``, ``max_prefetch_depth``,
``blocked_waiting_s``); nothing derives a schedule its own way. Conventions:

* ``gather_s[v]`` / ``compute_s[v]`` are unit ``v``'s all-gather and forward times in
  **seconds**; figures show milliseconds;
* a schedule is ``[(I_v, F_v, S_v, E_v), ...]`` (issue, landed, compute start, compute end),
  all intervals half-open;
* sizes are **bytes** (``unit_bytes[v]``: unit ``v``'s full parameters, ``activation_bytes[v]``
  its activations kept for backward, ``shard_bytes``: every unit's shard together); labels are
  decimal (kB, MB, GB) like :func:`helpers.plots.format_bytes`;
* a measured trace is ``[(event, unit, perf_counter seconds), ...]`` with events
  ``issue_call``, ``issue_return``, ``wait_call``, ``wait_return``, ``compute_start``,
  ``compute_end`` (see :func:`helpers.prefetch.blocked_waiting_s`).

Figures are :class:`matplotlib.figure.Figure` objects built without ``pyplot`` (see
:mod:`helpers.plots`). The explorer returns an ``ipywidgets.VBox`` with an ``update()`` method
that recomputes, redraws and returns the numbers, so it also runs headless.
"""
from __future__ import annotations

import io
from typing import Any, Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from helpers import prefetch
from helpers.plots import _COLORS, format_bytes

__all__ = [
    "synthetic_units",
    "exposed_gaps",
    "live_memory_curve",
    "depth_sweep",
    "trace_rows",
    "plot_prefetch_timeline",
    "plot_live_memory",
    "plot_depth_tradeoff",
    "plot_enqueue_vs_blocked",
    "prefetch_explorer",
]

MS = 1e3
_EXPOSED = "#d62728"
_KIND_COLOR = {"shards": "0.6", "landing": "#fdae6b", "gathered": "#e6550d", "activations": "#6baed6"}
_KIND_LABEL = {
    "shards": "shards of every unit",
    "landing": "landing buffers (issued, not landed)",
    "gathered": "gathered units (landed, not freed)",
    "activations": "activations kept for backward",
}


def _unit_color(v: int) -> str:
    return _COLORS[v % len(_COLORS)]


def _depths(depth: int | Sequence[int]) -> list[int]:
    depths = [int(depth)] if isinstance(depth, (int, float)) else [int(d) for d in depth]
    if not depths or any(d < 0 for d in depths):
        raise ValueError(f"need at least one depth, all >= 0, got {depth!r}")
    return depths


def _check_times(gather_s: Sequence[float], compute_s: Sequence[float]) -> None:
    if not gather_s or len(gather_s) != len(compute_s):
        raise ValueError("need one gather time and one compute time per unit, at least one unit")
    if any(t < 0 for t in [*gather_s, *compute_s]):
        raise ValueError("times must be >= 0")


def _check_sizes(num_units: int, unit_bytes: Sequence[float], activation_bytes: Sequence[float]) -> None:
    if len(unit_bytes) != num_units or len(activation_bytes) != num_units:
        raise ValueError(f"need {num_units} unit sizes and {num_units} activation sizes")


def _bytes_axis(value: float, _: object = None) -> str:
    return format_bytes(value)


# --------------------------------------------------------------------------- numbers behind the figures


def synthetic_units(num_units: int = 6, compute_ms: float = 1.0, comm_compute_ratio: float = 1.0,
                    slow_unit: int | None = None, slow_factor: float = 4.0) -> tuple[list[float], list[float]]:
    """``(gather_s, compute_s)`` of ``num_units`` equal units, optionally one slow all-gather.

    Every unit computes for ``compute_ms`` milliseconds and all-gathers for
    ``comm_compute_ratio * compute_ms``; unit ``slow_unit`` (if not ``None``) all-gathers
    ``slow_factor`` times longer (a larger unit, a congested link).
    """
    if num_units < 1 or compute_ms < 0 or comm_compute_ratio < 0 or slow_factor < 0:
        raise ValueError("need num_units >= 1 and non-negative times")
    compute_s = [compute_ms * 1e-3] * num_units
    gather_s = [comm_compute_ratio * compute_ms * 1e-3] * num_units
    if slow_unit is not None:
        if not 0 <= slow_unit < num_units:
            raise ValueError(f"slow_unit must be in [0, {num_units}), got {slow_unit}")
        gather_s[slow_unit] *= slow_factor
    return gather_s, compute_s


def exposed_gaps(schedule: prefetch.Schedule) -> list[tuple[float, float]]:
    """The intervals ``[E_{v-1}, S_v)`` (``E_{-1} = 0``) in which no unit computes.

    Their lengths add up to :func:`helpers.prefetch.exposed_communication`.
    """
    gaps, previous_end = [], 0.0
    for _, _, start, end in schedule:
        if start > previous_end:
            gaps.append((previous_end, start))
        previous_end = end
    return gaps


def live_memory_curve(schedule: prefetch.Schedule, unit_bytes: Sequence[float], activation_bytes: Sequence[float],
                      shard_bytes: float) -> dict[str, list[float]]:
    """Live bytes on one rank as a step function of time, split by kind.

    Returns ``times`` (every instant where something is allocated or freed, sorted, from 0
    to the end of forward) and, for each kind, the bytes live on ``[times[k], times[k+1])``:
    ``shards``; ``landing``: unit ``v``'s buffer on ``[I_v, F_v)``; ``gathered``: on
    ``[F_v, E_v)``; ``activations``: unit ``v``'s from ``S_v`` on. ``total`` is their sum; its
    maximum equals :func:`helpers.prefetch.peak_live_bytes` (checked).
    """
    _check_sizes(len(schedule), unit_bytes, activation_bytes)
    times = sorted({0.0, *(t for row in schedule for t in row)})
    curve: dict[str, list[float]] = {"times": times, "shards": [], "landing": [], "gathered": [],
                                     "activations": [], "total": []}
    for t in times:
        landing = sum(b for (i, f, _, _), b in zip(schedule, unit_bytes) if i <= t < f)
        gathered = sum(b for (_, f, _, e), b in zip(schedule, unit_bytes) if f <= t < e)
        acts = sum(b for (_, _, s, _), b in zip(schedule, activation_bytes) if s <= t)
        curve["shards"].append(float(shard_bytes))
        curve["landing"].append(float(landing))
        curve["gathered"].append(float(gathered))
        curve["activations"].append(float(acts))
        curve["total"].append(float(shard_bytes + landing + gathered + acts))
    peak = prefetch.peak_live_bytes(schedule, unit_bytes, activation_bytes, shard_bytes)
    if abs(max(curve["total"]) - peak) > 1e-6 * max(1.0, peak):
        raise AssertionError(f"live-memory curve peaks at {max(curve['total'])}, peak_live_bytes says {peak}")
    return curve


def depth_sweep(gather_s: Sequence[float], compute_s: Sequence[float], unit_bytes: Sequence[float],
                activation_bytes: Sequence[float], shard_bytes: float) -> list[dict[str, float]]:
    """For every depth ``0..U-1``: forward time, exposed communication (s) and peak live bytes."""
    _check_times(gather_s, compute_s)
    _check_sizes(len(gather_s), unit_bytes, activation_bytes)
    rows = []
    for depth in range(len(gather_s)):
        sched = prefetch.prefetch_schedule(gather_s, compute_s, depth)
        rows.append({"depth": depth, "forward_s": sched[-1][3],
                     "exposed_s": prefetch.exposed_communication(sched, compute_s),
                     "peak_bytes": prefetch.peak_live_bytes(sched, unit_bytes, activation_bytes, shard_bytes)})
    return rows


def trace_rows(trace: Sequence[tuple[str, int, float]]) -> list[dict[str, float]]:
    """One row per (unit, occurrence) of a measured trace, in order of the unit's ``wait_call``.

    Each row holds ``unit``, the six instants (``issue_call`` ... ``compute_end``) and the two
    durations ``enqueue_s = issue_return - issue_call`` and ``blocked_s = wait_return -
    wait_call``. Raises ``ValueError`` if a unit lacks one of the six events.
    """
    kinds = ("issue_call", "issue_return", "wait_call", "wait_return", "compute_start", "compute_end")
    per: dict[tuple[int, str], list[float]] = {}
    for event, unit, t in trace:
        if event not in kinds:
            raise ValueError(f"unknown trace event {event!r}")
        per.setdefault((int(unit), event), []).append(float(t))
    units = sorted({u for u, _ in per})
    if not units:
        raise ValueError("empty trace")
    rows = []
    for u in units:
        counts = {k: len(per.get((u, k), [])) for k in kinds}
        if len(set(counts.values())) != 1:
            raise ValueError(f"unit {u}: events do not pair up: {counts}")
        for n in range(counts["issue_call"]):
            row: dict[str, float] = {"unit": u, "occurrence": n}
            for k in kinds:
                row[k] = sorted(per[(u, k)])[n]
            row["enqueue_s"] = row["issue_return"] - row["issue_call"]
            row["blocked_s"] = row["wait_return"] - row["wait_call"]
            rows.append(row)
    rows.sort(key=lambda r: r["wait_call"])
    return rows


# --------------------------------------------------------------------------- timelines


def _draw_timeline(ax: Axes, gather_s: Sequence[float], compute_s: Sequence[float], depth: int) -> dict[str, float]:
    sched = prefetch.prefetch_schedule(gather_s, compute_s, depth)
    exposed = prefetch.exposed_communication(sched, compute_s)
    small = len(sched) <= 16
    for v, (i, f, s, e) in enumerate(sched):
        color = _unit_color(v)
        ax.broken_barh([(i * MS, (f - i) * MS)], (-0.3, 0.6), facecolors=color, edgecolors="0.2", lw=0.5,
                       alpha=0.85, zorder=2)
        ax.broken_barh([(s * MS, (e - s) * MS)], (0.7, 0.6), facecolors=color, edgecolors="0.2", lw=0.5,
                       alpha=0.85, zorder=2)
        if f < s:  # landed, waiting for the previous unit: the buffer is held but idle
            ax.plot([f * MS, s * MS], [0.0, 0.0], ls=":", color=color, lw=1.2, zorder=1)
        if small:
            end = sched[-1][3]
            if (f - i) > 0.03 * end:
                ax.text((i + f) / 2 * MS, 0, f"g{v}", ha="center", va="center", fontsize=7, color="w", zorder=3)
            if (e - s) > 0.03 * end:
                ax.text((s + e) / 2 * MS, 1, f"c{v}", ha="center", va="center", fontsize=7, color="w", zorder=3)
    for a, b in exposed_gaps(sched):
        ax.broken_barh([(a * MS, (b - a) * MS)], (0.7, 0.6), facecolors=_EXPOSED, alpha=0.25, hatch="///",
                       edgecolors=_EXPOSED, lw=0.0, zorder=1)
    ax.axvline(sched[-1][3] * MS, color="0.3", ls="--", lw=1)
    ax.set_yticks([0, 1], ["all-gather", "compute"])
    ax.set_ylim(-0.6, 1.6)
    ax.grid(True, axis="x", alpha=0.3)
    return {"depth": depth, "forward_s": sched[-1][3], "exposed_s": exposed, "compute_s": sum(compute_s),
            "gather_s": sum(gather_s)}


def plot_prefetch_timeline(gather_s: Sequence[float], compute_s: Sequence[float], depth: int | Sequence[int], *,
                           title: str | None = None) -> Figure:
    """Gantt chart of a prefetching forward, one panel per depth on a shared time axis (ms).

    Row "all-gather": unit ``v``'s all-gather from issue ``I_v`` to landing ``F_v`` (box
    ``g v``; a dotted line follows while it has landed but waits for the previous unit). Row
    "compute": unit ``v`` from ``S_v`` to ``E_v`` (box ``c v``, same colour); hatched red: time
    in which nothing computes, the exposed communication. The dashed line is the end of
    forward. Depths accept an int or a list.
    """
    _check_times(gather_s, compute_s)
    depths = _depths(depth)
    fig = Figure(figsize=(10.0, 0.9 + 1.55 * len(depths)), layout="constrained")
    axes = fig.subplots(len(depths), 1, sharex=True, squeeze=False)[:, 0]
    results = []
    for ax, d in zip(axes, depths):
        r = _draw_timeline(ax, gather_s, compute_s, d)
        results.append(r)
        ax.set_title(f"depth {d}: forward {r['forward_s'] * MS:.3g} ms, exposed communication "
                     f"{r['exposed_s'] * MS:.3g} ms", loc="left", fontsize=9)
    right = max(r["forward_s"] for r in results)
    axes[-1].set_xlim(-0.02 * right * MS, right * 1.04 * MS)
    axes[-1].set_xlabel("time since forward started (ms)")
    handles = [Patch(facecolor=_EXPOSED, alpha=0.25, hatch="///", edgecolor=_EXPOSED,
                     label="nothing computes: exposed communication")]
    axes[0].legend(handles=handles, fontsize=7, loc="upper right")
    fig.suptitle(title or (f"{len(gather_s)} units: all-gathers {sum(gather_s) * MS:.3g} ms, compute "
                           f"{sum(compute_s) * MS:.3g} ms in all"), fontsize=11)
    return fig


# --------------------------------------------------------------------------- memory


def _draw_memory(ax: Axes, curve: dict[str, list[float]], budget_bytes: float | None, legend: bool) -> float:
    times = [t * MS for t in curve["times"]]
    lower = [0.0] * len(times)
    for kind in ("shards", "landing", "gathered", "activations"):
        upper = [a + b for a, b in zip(lower, curve[kind])]
        ax.fill_between(times, lower, upper, step="post", color=_KIND_COLOR[kind], lw=0,
                        label=_KIND_LABEL[kind] if legend else None)
        lower = upper
    ax.step(times, curve["total"], where="post", color="0.15", lw=1.2)
    peak = max(curve["total"])
    k = curve["total"].index(peak)
    ax.plot([times[k]], [peak], "v", color="k", ms=7, zorder=5)
    ax.annotate(f"peak {format_bytes(peak)}", (times[k], peak), xytext=(4, 6), textcoords="offset points",
                fontsize=8)
    if budget_bytes is not None:
        ax.axhline(budget_bytes, color=_EXPOSED, ls="--", lw=1.3,
                   label=f"budget {format_bytes(budget_bytes)}" if legend else None)
    ax.yaxis.set_major_formatter(FuncFormatter(_bytes_axis))
    ax.set_ylabel("live bytes")
    ax.grid(True, axis="y", alpha=0.3)
    return peak


def plot_live_memory(gather_s: Sequence[float], compute_s: Sequence[float], depth: int | Sequence[int],
                     unit_bytes: Sequence[float], activation_bytes: Sequence[float], shard_bytes: float,
                     budget_bytes: float | None = None, *, title: str | None = None) -> Figure:
    """Live bytes on one rank during forward, stacked by kind, one panel per depth (shared axes).

    Kinds (bottom to top): the shards, landing buffers (``[I_v, F_v)``), gathered units
    (``[F_v, E_v)``) and activations (from ``S_v`` on), from :func:`live_memory_curve`. The
    triangle marks the peak (:func:`helpers.prefetch.peak_live_bytes`); the dashed red line is
    ``budget_bytes``. Panels over the budget say so in their title.
    """
    _check_times(gather_s, compute_s)
    _check_sizes(len(gather_s), unit_bytes, activation_bytes)
    depths = _depths(depth)
    fig = Figure(figsize=(10.0, 1.2 + 2.1 * len(depths)), layout="constrained")
    axes = fig.subplots(len(depths), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    top = 0.0
    for n, (ax, d) in enumerate(zip(axes, depths)):
        sched = prefetch.prefetch_schedule(gather_s, compute_s, d)
        curve = live_memory_curve(sched, unit_bytes, activation_bytes, shard_bytes)
        peak = _draw_memory(ax, curve, budget_bytes, legend=n == 0)
        top = max(top, peak, budget_bytes or 0.0)
        ax.axvline(sched[-1][3] * MS, color="0.3", ls="--", lw=1)
        verdict = ""
        if budget_bytes is not None:
            verdict = ", within the budget" if peak <= budget_bytes else ", OVER the budget"
        ax.set_title(f"depth {d}: peak {format_bytes(peak)}{verdict}", loc="left", fontsize=9,
                     color=_EXPOSED if budget_bytes is not None and peak > budget_bytes else "k")
    axes[0].set_ylim(0, top * 1.18)
    axes[-1].set_xlabel("time since forward started (ms); dashed: end of forward")
    axes[0].legend(fontsize=7, loc="upper left", ncol=2)
    fig.suptitle(title or "Live memory on one rank during a prefetching forward", fontsize=11)
    return fig


# --------------------------------------------------------------------------- the trade-off


def plot_depth_tradeoff(gather_s: Sequence[float], compute_s: Sequence[float], unit_bytes: Sequence[float],
                        activation_bytes: Sequence[float], shard_bytes: float, budget_bytes: float | None = None,
                        *, title: str | None = None) -> Figure:
    """Exposed communication (top) and peak live bytes (bottom) for every depth ``0..U-1``.

    With ``budget_bytes``, the bottom panel draws the budget, colours depths over it red and
    both panels mark :func:`helpers.prefetch.max_prefetch_depth` (or say that no depth fits).
    """
    rows = depth_sweep(gather_s, compute_s, unit_bytes, activation_bytes, shard_bytes)
    chosen = None
    if budget_bytes is not None:
        chosen = prefetch.max_prefetch_depth(gather_s, compute_s, unit_bytes, activation_bytes, shard_bytes,
                                             budget_bytes)
    depths = [r["depth"] for r in rows]
    fig = Figure(figsize=(max(6.5, 3.0 + 0.45 * len(rows)), 5.6), layout="constrained")
    ax_e, ax_m = fig.subplots(2, 1, sharex=True)
    over = [budget_bytes is not None and r["peak_bytes"] > budget_bytes for r in rows]
    ax_e.bar(depths, [r["exposed_s"] * MS for r in rows], color=[("0.75" if o else _COLORS[0]) for o in over],
             zorder=2)
    ax_e.axhline(sum(gather_s) * MS, color="0.3", ls=":", lw=1, label=f"all gathers, {sum(gather_s) * MS:.3g} ms")
    ax_e.set_ylabel("exposed communication (ms)")
    ax_e.grid(True, axis="y", alpha=0.3)
    ax_m.bar(depths, [r["peak_bytes"] for r in rows], color=[(_EXPOSED if o else _COLORS[2]) for o in over],
             alpha=0.85, zorder=2)
    ax_m.axhline(shard_bytes + max(unit_bytes), color="0.3", ls=":", lw=1,
                 label=f"shards + one unit (steady state) {format_bytes(shard_bytes + max(unit_bytes))}")
    if budget_bytes is not None:
        ax_m.axhline(budget_bytes, color=_EXPOSED, ls="--", lw=1.3, label=f"budget {format_bytes(budget_bytes)}")
    if chosen is not None:
        for ax, y in ((ax_e, rows[chosen]["exposed_s"] * MS), (ax_m, rows[chosen]["peak_bytes"])):
            ax.plot([chosen], [y], "*", color="k", ms=13, zorder=4,
                    label=f"max_prefetch_depth = {chosen}" if ax is ax_m else None)
    ax_m.yaxis.set_major_formatter(FuncFormatter(_bytes_axis))
    ax_m.set_ylabel("peak live bytes")
    ax_m.set_xlabel("prefetch depth d (units gathered ahead)")
    ax_m.set_xticks(depths)
    ax_m.set_ylim(0, max([r["peak_bytes"] for r in rows] + [budget_bytes or 0.0]) * 1.35)
    ax_m.grid(True, axis="y", alpha=0.3)
    ax_m.legend(fontsize=7, loc="upper left")
    ax_e.legend(fontsize=7, loc="upper right")
    if budget_bytes is None:
        status = ""
    elif chosen is None:
        status = f": no depth fits {format_bytes(budget_bytes)}"
    else:
        status = (f": deepest within {format_bytes(budget_bytes)} is d = {chosen}, exposed "
                  f"{rows[chosen]['exposed_s'] * MS:.3g} ms")
    ax_e.set_title("Deeper prefetch hides communication ...", fontsize=9, loc="left")
    ax_m.set_title("... and holds more memory (grey / red bars: over the budget)", fontsize=9, loc="left")
    fig.suptitle(title or ("Prefetch depth: exposed communication against peak memory"
                           + ("\n" + status[2:] if status else "")), fontsize=10)
    return fig


# --------------------------------------------------------------------------- measured


def plot_enqueue_vs_blocked(trace: Sequence[tuple[str, int, float]], *,
                            title: str = "Measured: how long the async call took vs how long wait() blocked"
                            ) -> Figure:
    """Left: a measured trace as a timeline per unit (call, wait, compute), ms since the first event.

    Right: per unit, the time ``issue_gather()`` (the ``async_op=True`` call) took to return
    and the time spent blocked in ``wait()``, log scale. The title totals both; the blocked
    total is :func:`helpers.prefetch.blocked_waiting_s`, the measured exposed communication.
    """
    rows = trace_rows(trace)
    t0 = min(t for _, _, t in trace)
    repeated = len({r["unit"] for r in rows}) < len(rows)
    labels = [f"unit {int(r['unit'])}" + (f" (#{int(r['occurrence']) + 1})" if repeated else "") for r in rows]
    fig = Figure(figsize=(11.0, 2.2 + max(2.2, 0.45 * len(rows))), layout="constrained")
    ax_t, ax_b = fig.subplots(1, 2, width_ratios=[1.5, 1])
    for y, r in enumerate(rows):
        ax_t.barh(y, max((r["issue_return"] - r["issue_call"]) * MS, 1e-3), left=(r["issue_call"] - t0) * MS,
                  height=0.5, color="0.2", label="issue_gather() call" if y == 0 else None)
        ax_t.barh(y, (r["wait_return"] - r["wait_call"]) * MS, left=(r["wait_call"] - t0) * MS, height=0.5,
                  color=_EXPOSED, alpha=0.6, label="blocked in wait()" if y == 0 else None)
        ax_t.barh(y, (r["compute_end"] - r["compute_start"]) * MS, left=(r["compute_start"] - t0) * MS,
                  height=0.5, color=_COLORS[0], alpha=0.85, label="module(x)" if y == 0 else None)
        ax_t.plot([(r["issue_return"] - t0) * MS, (r["wait_call"] - t0) * MS], [y, y], ls=":", color="0.4", lw=1)
    ax_t.set_yticks(range(len(rows)), labels)
    ax_t.set_ylim(len(rows) - 0.4, -0.9)
    ax_t.set_xlabel("time since the first event (ms)")
    ax_t.set_ylabel("unit (in wait order)")
    ax_t.set_title("Timeline of one rank (dotted: all-gather in flight, unobserved)", fontsize=9)
    ax_t.grid(True, axis="x", alpha=0.3)
    ax_t.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)

    enqueue = [r["enqueue_s"] * MS for r in rows]
    blocked = [r["blocked_s"] * MS for r in rows]
    ys = list(range(len(rows)))
    floor = min([v for v in enqueue + blocked if v > 0] or [1e-3]) / 3
    ax_b.barh([y - 0.2 for y in ys], [max(v, floor) for v in enqueue], height=0.38, color="0.25",
              label="issue_gather() took to return (enqueue)")
    ax_b.barh([y + 0.2 for y in ys], [max(v, floor) for v in blocked], height=0.38, color=_EXPOSED, alpha=0.7,
              label="blocked in wait() (exposed)")
    ax_b.set_xscale("log")
    ax_b.set_xlim(floor / 1.5, max(enqueue + blocked + [floor * 10]) * 3)
    ax_b.set_yticks(ys, labels)
    ax_b.set_ylim(len(rows) - 0.4, -0.9)
    ax_b.set_xlabel("milliseconds (log scale)")
    ax_b.set_ylabel("unit")
    ax_b.set_title("What each timer measures", fontsize=9)
    ax_b.grid(True, axis="x", which="major", alpha=0.3)
    ax_b.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    total_blocked = prefetch.blocked_waiting_s(list(trace))
    fig.suptitle(f"{title}\nsum of enqueue times {sum(enqueue):.3g} ms · blocked_waiting_s "
                 f"{total_blocked * MS:.3g} ms", fontsize=10)
    return fig


# --------------------------------------------------------------------------- explorer


def prefetch_explorer(num_units: int = 6, depth: int = 1, budget_mb: float = 600.0, comm_compute_ratio: float = 1.0,
                      slow_unit: int = -1, slow_factor: float = 4.0, unit_mb: float = 100.0,
                      activation_mb: float = 20.0, world_size: int = 8, compute_ms: float = 1.0):
    """Sliders for the prefetch model over :func:`synthetic_units` (equal units, optionally one slow).

    Controls: number of units U, prefetch depth d, budget (MB, 1 MB = 1e6 B), all-gather /
    compute time ratio, which unit has a slow all-gather (-1: none) and how many times slower,
    unit and activation sizes (MB) and the world size N (the shards are ``U * unit / N``).
    Shows the timelines of depth 0 and d, the live memory at depth d and the trade-off over
    all depths. Returns an ``ipywidgets.VBox`` with ``update()`` (recomputes, redraws, returns
    the numbers in seconds and bytes), ``controls`` and ``summary``.
    """
    import ipywidgets as W
    from IPython.display import Image, display

    style, layout = {"description_width": "190px"}, W.Layout(width="540px")
    common = {"style": style, "layout": layout, "continuous_update": False}
    u_slider = W.IntSlider(value=num_units, min=2, max=16, description="units U", **common)
    d_slider = W.IntSlider(value=min(depth, num_units - 1), min=0, max=num_units - 1, description="prefetch depth d",
                           **common)
    budget_slider = W.FloatSlider(value=budget_mb, min=50, max=3000, step=10, description="budget (MB)", **common)
    ratio_slider = W.FloatLogSlider(value=comm_compute_ratio, base=10, min=-1, max=1, step=0.05,
                                    description="all-gather / compute time", readout_format=".3g", **common)
    slow_slider = W.IntSlider(value=slow_unit, min=-1, max=num_units - 1, description="slow unit (-1: none)",
                              **common)
    factor_slider = W.FloatSlider(value=slow_factor, min=1, max=10, step=0.5, description="slow unit: × gather time",
                                  **common)
    unit_slider = W.FloatSlider(value=unit_mb, min=10, max=1000, step=10, description="unit size (MB)", **common)
    act_slider = W.FloatSlider(value=activation_mb, min=0, max=500, step=5, description="activations / unit (MB)",
                               **common)
    n_slider = W.IntSlider(value=world_size, min=2, max=64, description="world size N", **common)
    summary, out = W.HTML(), W.Output()
    busy = {"on": False}

    def update(*_: Any) -> dict[str, Any]:
        if busy["on"]:
            return box.last_result
        busy["on"] = True
        try:
            u = int(u_slider.value)
            d_slider.max = u - 1
            slow_slider.max = u - 1
        finally:
            busy["on"] = False
        d, slow = int(d_slider.value), int(slow_slider.value)
        gather_s, compute_s = synthetic_units(u, compute_ms, ratio_slider.value, None if slow < 0 else slow,
                                              factor_slider.value)
        unit_bytes = [unit_slider.value * 1e6] * u
        act_bytes = [act_slider.value * 1e6] * u
        shard_bytes = u * unit_slider.value * 1e6 / int(n_slider.value)
        budget = budget_slider.value * 1e6
        sched = prefetch.prefetch_schedule(gather_s, compute_s, d)
        exposed = prefetch.exposed_communication(sched, compute_s)
        peak = prefetch.peak_live_bytes(sched, unit_bytes, act_bytes, shard_bytes)
        best = prefetch.max_prefetch_depth(gather_s, compute_s, unit_bytes, act_bytes, shard_bytes, budget)
        no_prefetch = prefetch.prefetch_schedule(gather_s, compute_s, 0)
        result = {
            "num_units": u, "depth": d, "budget_bytes": budget, "gather_s": gather_s, "compute_s": compute_s,
            "unit_bytes": unit_bytes, "activation_bytes": act_bytes, "shard_bytes": shard_bytes,
            "forward_s": sched[-1][3], "exposed_s": exposed, "peak_bytes": peak, "fits": peak <= budget,
            "max_depth": best, "no_prefetch_forward_s": no_prefetch[-1][3],
        }
        fit = "fits" if peak <= budget else "<span style='color:#d62728'>exceeds</span>"
        summary.value = (
            f"depth {d}: forward {sched[-1][3] * MS:.3g} ms (no prefetch {no_prefetch[-1][3] * MS:.3g} ms), "
            f"<b>exposed communication {exposed * MS:.3g} ms</b> · <b>peak {format_bytes(peak)}</b>, {fit} the "
            f"budget {format_bytes(budget)} · max_prefetch_depth: {best if best is not None else 'none fits'}")
        figures = [
            plot_prefetch_timeline(gather_s, compute_s, sorted({0, d})),
            plot_live_memory(gather_s, compute_s, d, unit_bytes, act_bytes, shard_bytes, budget),
            plot_depth_tradeoff(gather_s, compute_s, unit_bytes, act_bytes, shard_bytes, budget),
        ]
        with out:
            out.clear_output(wait=True)
            print(f"depth {d}: exposed communication {exposed * MS:.3g} ms, peak {format_bytes(peak)}")
            for fig in figures:
                png = io.BytesIO()
                fig.savefig(png, format="png", dpi=72)  # a PNG needs no matplotlib backend in the kernel
                display(Image(data=png.getvalue(), format="png"))
        box.last_result = result
        return result

    controls = {"num_units": u_slider, "depth": d_slider, "budget_mb": budget_slider,
                "comm_compute_ratio": ratio_slider, "slow_unit": slow_slider, "slow_factor": factor_slider,
                "unit_mb": unit_slider, "activation_mb": act_slider, "world_size": n_slider}
    box = W.VBox([*controls.values(), summary, out])
    box.controls = controls
    box.summary = summary
    box.update = update
    box.last_result = {}
    update()
    for w in controls.values():
        w.observe(update, names="value")
    return box
