"""Lesson 08, prefetching: the chapter's figures and its explorer, drawn from stored results.

Nothing here evaluates the prefetch model: schedules, gaps, live-memory curves, peaks, the
deepest depth within a budget and the depth to run come from ``helpers/stored/08_chapter.json`` and
``helpers/stored/08_explorer.json`` (:func:`helpers.shared.stored.load`), computed by the course's
instructor side. Measured runs are drawn from what a chapter cell timed. Conventions:

* a **scenario** is a dict with ``gather_s`` / ``compute_s`` (seconds per unit), ``unit_bytes``,
  ``activation_bytes``, ``shard_bytes``, ``depths`` (one row per depth ``0..U-1``: ``schedule``
  ``[[I_v, F_v, S_v, E_v], ...]``, ``transfers`` (when each all-gather starts moving bytes,
  ``max(I_v, F_{v-1})``), ``gaps`` (intervals where nothing computes), ``forward_s``,
  ``exposed_s``, ``peak_bytes`` and, in the chapter's scenarios, ``curve``), ``max_depth`` (the
  deepest depth within a budget, an upper bound) and ``best_depth`` (the depth to run: the
  smallest that reaches the lowest exposed communication of the depths within the budget), both
  keyed by the budget in bytes; figures show milliseconds;
* a **measured row** is one unit's timings on a rank: ``unit``, ``issue_at``, ``enqueue_s``,
  ``wait_at``, ``blocked_s``, ``compute_at``, ``compute_s`` (seconds; ``*_at`` since the start);
* sizes are bytes; labels are decimal (kB, MB, GB) like :func:`helpers.shared.plots.format_bytes`.

Figures are :class:`matplotlib.figure.Figure` objects built without ``pyplot`` (see
:mod:`helpers.shared.plots`). The explorer returns an ``ipywidgets.VBox`` with an ``update()`` method
that redraws and returns the numbers, so it also runs headless.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from helpers.shared.plots import COLORS, format_bytes
from helpers.shared.stored import load

__all__ = [
    "chapter_scenario",
    "explorer_scenario",
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
    "landing": "landing buffers (issued, not landed; queued or in transfer)",
    "gathered": "gathered units (landed, not freed)",
    "activations": "activations kept for backward",
}


def _unit_color(v: int) -> str:
    return COLORS[v % len(COLORS)]


def _bytes_axis(value: float, _: object = None) -> str:
    return format_bytes(value)


def _rows(scenario: dict[str, Any], depth: int | Sequence[int]) -> list[dict[str, Any]]:
    depths = [int(depth)] if isinstance(depth, (int, float)) else [int(d) for d in depth]
    count = len(scenario["depths"])
    if not depths or any(not 0 <= d < count for d in depths):
        raise ValueError(f"need at least one depth, all in 0..{count - 1}, got {depth!r}")
    return [scenario["depths"][d] for d in depths]


# --------------------------------------------------------------------------- stored results


@lru_cache(maxsize=2)
def _stored(name: str) -> dict[str, Any]:
    return load(name)


def chapter_scenario(name: str) -> dict[str, Any]:
    """A stored scenario of chapter 08 (see the module docstring).

    ``"even"``: 6 equal units, all-gathers 0.6 x the compute; ``"slow"``: the same with unit 2's
    all-gather 5 x slower (with ``channel_free_peak_bytes``, the peaks if buffers were counted only
    from when the channel is free); ``"long"``: all-gathers 1.5 x the compute. Every unit has 100 MB
    of parameters and 20 MB of activations, the shards 75 MB (N = 8); budgets 250 to 500 MB.
    ``"measured"`` is not a scenario: the reference forward's allocations measured on gloo at every
    depth against the planner's count, with the slow stack's timings on a modelled clock (keys
    ``widths``, ``world_size``, ``unit_bytes``, ``shard_bytes`` and per depth ``measured_bytes``,
    ``planned_bytes``, ``channel_free_bytes``, ``materialised``, ``issue_s``, ``blocked_s``, ``forward_s``).
    """
    scenarios = _stored("08_chapter")
    if name not in scenarios:
        raise KeyError(f"no stored scenario {name!r}; stored: {sorted(scenarios)}")
    return scenarios[name]


def explorer_scenario(num_units: int, ratio: float, slow_unit: int, activation_mb: float) -> dict[str, Any]:
    """The explorer's stored scenario for one slider setting (``slow_unit = -1``: none).

    ``unit_bytes`` are the stored unit size on every unit, the shards ``U * unit / N``; raises
    ``KeyError`` for a setting the grid does not hold.
    """
    grid = _stored("08_explorer")
    config = grid["configs"].get(f"{int(num_units)}/{ratio}/{int(slow_unit)}")
    act = str(int(activation_mb))
    if config is None or act not in config["peak_bytes"]:
        raise KeyError(f"no stored setting U={num_units}, ratio={ratio}, slow unit={slow_unit}, activations "
                       f"{activation_mb} MB; stored: U in {grid['num_units']}, ratios {grid['ratios']}, activations "
                       f"{grid['activation_mb']} MB")
    peaks = config["peak_bytes"][act]
    return {"gather_s": config["gather_s"], "compute_s": config["compute_s"],
            "unit_bytes": [grid["unit_mb"] * 1e6] * int(num_units),
            "activation_bytes": [float(activation_mb) * 1e6] * int(num_units), "shard_bytes": config["shard_bytes"],
            "depths": [row | {"peak_bytes": peak} for row, peak in zip(config["depths"], peaks)],
            **{key: {str(int(b * 1e6)): config[key][act][str(b)] for b in grid["budget_mb"]}
               for key in ("max_depth", "best_depth")}}


# --------------------------------------------------------------------------- timelines


def _draw_timeline(ax: Axes, row: dict[str, Any]) -> None:
    sched, end = row["schedule"], row["forward_s"]
    small = len(sched) <= 16
    for v, ((i, f, s, e), t) in enumerate(zip(sched, row["transfers"])):
        color = _unit_color(v)
        ax.broken_barh([(t * MS, (f - t) * MS)], (-0.3, 0.6), facecolors=color, edgecolors="0.2", lw=0.5,
                       alpha=0.85, zorder=2)
        ax.plot([i * MS], [0.42 + 0.07 * (v % 3)], "v", color=color, ms=5, zorder=3)  # issued: buffer allocated
        ax.broken_barh([(s * MS, (e - s) * MS)], (0.7, 0.6), facecolors=color, edgecolors="0.2", lw=0.5,
                       alpha=0.85, zorder=2)
        if f < s:  # landed, waiting for the previous unit: the buffer is held but idle
            ax.plot([f * MS, s * MS], [0.0, 0.0], ls=":", color=color, lw=1.2, zorder=1)
        if small and (f - t) > 0.03 * end:
            ax.text((t + f) / 2 * MS, 0, f"g{v}", ha="center", va="center", fontsize=7, color="w", zorder=3)
        if small and (e - s) > 0.03 * end:
            ax.text((s + e) / 2 * MS, 1, f"c{v}", ha="center", va="center", fontsize=7, color="w", zorder=3)
    for a, b in row["gaps"]:
        ax.broken_barh([(a * MS, (b - a) * MS)], (0.7, 0.6), facecolors=_EXPOSED, alpha=0.25, hatch="///",
                       edgecolors=_EXPOSED, lw=0.0, zorder=1)
    ax.axvline(end * MS, color="0.3", ls="--", lw=1)
    ax.set_yticks([0, 1], ["all-gather", "compute"])
    ax.set_ylim(-0.6, 1.6)
    ax.grid(True, axis="x", alpha=0.3)


def plot_prefetch_timeline(scenario: dict[str, Any], depth: int | Sequence[int], *, title: str | None = None) -> Figure:
    """Gantt chart of a prefetching forward, one panel per depth on a shared time axis (ms).

    Row "all-gather": a triangle at unit ``v``'s issue ``I_v`` (its landing buffer is allocated
    from then on), its transfer on the one channel from ``max(I_v, F_{v-1})`` to landing ``F_v``
    (box ``g v``; a dotted line follows while it has landed but waits for the previous unit). Row
    "compute": unit ``v`` from ``S_v`` to ``E_v`` (box ``c v``, same colour); hatched red: time
    in which nothing computes, the exposed communication. The dashed line is the end of
    forward. Depths accept an int or a list.
    """
    rows = _rows(scenario, depth)
    fig = Figure(figsize=(10.0, 0.9 + 1.55 * len(rows)), layout="constrained")
    axes = fig.subplots(len(rows), 1, sharex=True, squeeze=False)[:, 0]
    for ax, row in zip(axes, rows):
        _draw_timeline(ax, row)
        ax.set_title(f"depth {row['depth']}: forward {row['forward_s'] * MS:.3g} ms, exposed communication "
                     f"{row['exposed_s'] * MS:.3g} ms", loc="left", fontsize=9)
    right = max(row["forward_s"] for row in rows)
    axes[-1].set_xlim(-0.02 * right * MS, right * 1.04 * MS)
    axes[-1].set_xlabel("time since forward started (ms)")
    handles = [Patch(facecolor=_EXPOSED, alpha=0.25, hatch="///", edgecolor=_EXPOSED,
                     label="nothing computes: exposed communication"),
               Line2D([], [], marker="v", ls="", color="0.3", label="all-gather issued (buffer allocated)")]
    axes[0].legend(handles=handles, fontsize=7, loc="upper right")
    gather_s, compute_s = scenario["gather_s"], scenario["compute_s"]
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


def plot_live_memory(scenario: dict[str, Any], depth: int | Sequence[int], budget_bytes: float | None = None, *,
                     title: str | None = None) -> Figure:
    """Live bytes on one rank during forward, stacked by kind, one panel per depth (shared axes).

    Kinds (bottom to top): the shards, landing buffers (``[I_v, F_v)``: queued or in transfer), gathered units
    (``[F_v, E_v)``) and activations (from ``S_v`` on), from the scenario's stored curves. The
    triangle marks the peak; the dashed red line is ``budget_bytes``. Panels over the budget say
    so in their title.
    """
    rows = _rows(scenario, depth)
    fig = Figure(figsize=(10.0, 1.2 + 2.1 * len(rows)), layout="constrained")
    axes = fig.subplots(len(rows), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    top = 0.0
    for n, (ax, row) in enumerate(zip(axes, rows)):
        peak = _draw_memory(ax, row["curve"], budget_bytes, legend=n == 0)
        top = max(top, peak, budget_bytes or 0.0)
        ax.axvline(row["forward_s"] * MS, color="0.3", ls="--", lw=1)
        over = budget_bytes is not None and peak > budget_bytes
        verdict = "" if budget_bytes is None else (", OVER the budget" if over else ", within the budget")
        ax.set_title(f"depth {row['depth']}: peak {format_bytes(peak)}{verdict}", loc="left", fontsize=9,
                     color=_EXPOSED if over else "k")
    axes[0].set_ylim(0, top * 1.18)
    axes[-1].set_xlabel("time since forward started (ms); dashed: end of forward")
    axes[0].legend(fontsize=7, loc="upper left", ncol=2)
    fig.suptitle(title or "Live memory on one rank during a prefetching forward", fontsize=11)
    return fig


# --------------------------------------------------------------------------- the trade-off


def plot_depth_tradeoff(scenario: dict[str, Any], budget_bytes: float | None = None, *,
                        title: str | None = None) -> Figure:
    """Exposed communication (top) and peak live bytes (bottom) for every depth ``0..U-1``.

    With ``budget_bytes`` (one of the scenario's stored budgets), the bottom panel draws the
    budget, colours depths over it red and both panels mark the depth to run (a star, the stored
    ``best_depth``) and the deepest depth within the budget (a ring, ``max_depth``, the upper
    bound), or say that no depth fits.
    """
    rows = scenario["depths"]
    chosen = deepest = None
    if budget_bytes is not None:
        key = str(int(budget_bytes))
        if key not in scenario["best_depth"]:
            raise ValueError(f"no stored depth for a budget of {budget_bytes:g} bytes; stored: "
                             f"{sorted(scenario['best_depth'], key=float)}")
        chosen, deepest = scenario["best_depth"][key], scenario["max_depth"][key]
    depths = [r["depth"] for r in rows]
    fig = Figure(figsize=(max(6.5, 3.0 + 0.45 * len(rows)), 5.6), layout="constrained")
    ax_e, ax_m = fig.subplots(2, 1, sharex=True)
    over = [budget_bytes is not None and r["peak_bytes"] > budget_bytes for r in rows]
    ax_e.bar(depths, [r["exposed_s"] * MS for r in rows], color=[("0.75" if o else COLORS[0]) for o in over],
             zorder=2)
    total_gather = sum(scenario["gather_s"])
    ax_e.axhline(total_gather * MS, color="0.3", ls=":", lw=1, label=f"all gathers, {total_gather * MS:.3g} ms")
    ax_e.set_ylabel("exposed communication (ms)")
    ax_e.grid(True, axis="y", alpha=0.3)
    ax_m.bar(depths, [r["peak_bytes"] for r in rows], color=[(_EXPOSED if o else COLORS[2]) for o in over],
             alpha=0.85, zorder=2)
    steady = scenario["shard_bytes"] + max(scenario["unit_bytes"])
    ax_m.axhline(steady, color="0.3", ls=":", lw=1, label=f"shards + one unit (steady state) {format_bytes(steady)}")
    if budget_bytes is not None:
        ax_m.axhline(budget_bytes, color=_EXPOSED, ls="--", lw=1.3, label=f"budget {format_bytes(budget_bytes)}")
    if chosen is not None:
        for ax, key, scale in ((ax_e, "exposed_s", MS), (ax_m, "peak_bytes", 1.0)):
            ax.plot([deepest], [rows[deepest][key] * scale], "o", mfc="none", mec="k", ms=13, mew=1.3, zorder=4,
                    label=f"deepest that fits: d = {deepest} (upper bound)" if ax is ax_m else None)
            ax.plot([chosen], [rows[chosen][key] * scale], "*", color="k", ms=13, zorder=5,
                    label=f"depth to run: d = {chosen}" if ax is ax_m else None)
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
        status = f"no depth fits {format_bytes(budget_bytes)}"
    else:
        status = (f"within {format_bytes(budget_bytes)}: run d = {chosen} "
                  f"(exposed {rows[chosen]['exposed_s'] * MS:.3g} ms), the deepest that fits is d = {deepest}")
    ax_e.set_title("Deeper prefetch hides communication ...", fontsize=9, loc="left")
    ax_m.set_title("... and holds more memory (grey / red bars: over the budget)", fontsize=9, loc="left")
    fig.suptitle(title or ("Prefetch depth: exposed communication against peak memory"
                           + ("\n" + status if status else "")), fontsize=10)
    return fig


# --------------------------------------------------------------------------- measured


def plot_enqueue_vs_blocked(rows: Sequence[dict[str, float]], *,
                            title: str = "Measured: how long the async call took vs how long wait() blocked"
                            ) -> Figure:
    """Left: measured rows as a timeline per unit (call, wait, compute), ms since the start.

    Right: per unit, the time ``issue_gather()`` (the ``async_op=True`` call) took to return and
    the time spent blocked in ``wait()``, on a linear axis from 0, each bar labelled with its value
    (a zero is an empty bar labelled 0). The title gives both totals; the blocked total is the
    measured exposed communication.
    """
    if not rows:
        raise ValueError("no measured rows")
    labels = [f"unit {int(r['unit'])}" for r in rows]
    fig = Figure(figsize=(11.0, 2.2 + max(2.2, 0.45 * len(rows))), layout="constrained")
    ax_t, ax_b = fig.subplots(1, 2, width_ratios=[1.5, 1])
    for y, r in enumerate(rows):
        ax_t.plot([r["issue_at"] * MS], [y], "|", color="0.2", ms=12, mew=1.5,
                  label="issue_gather() called" if y == 0 else None)
        ax_t.barh(y, r["enqueue_s"] * MS, left=r["issue_at"] * MS, height=0.5, color="0.2")
        ax_t.barh(y, r["blocked_s"] * MS, left=r["wait_at"] * MS, height=0.5, color=_EXPOSED, alpha=0.6,
                  label="blocked in wait()" if y == 0 else None)
        ax_t.barh(y, r["compute_s"] * MS, left=r["compute_at"] * MS, height=0.5, color=COLORS[0], alpha=0.85,
                  label="module(x)" if y == 0 else None)
        ax_t.plot([(r["issue_at"] + r["enqueue_s"]) * MS, r["wait_at"] * MS], [y, y], ls=":", color="0.4", lw=1)
    ax_t.set_yticks(range(len(rows)), labels)
    ax_t.set_ylim(len(rows) - 0.4, -0.9)
    ax_t.set_xlabel("time since the first call (ms)")
    ax_t.set_ylabel("unit")
    ax_t.set_title("Timeline of one rank (dotted: all-gather in flight, unobserved)", fontsize=9)
    ax_t.grid(True, axis="x", alpha=0.3)
    ax_t.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)

    enqueue = [r["enqueue_s"] * MS for r in rows]
    blocked = [r["blocked_s"] * MS for r in rows]
    ys = list(range(len(rows)))
    top = max(enqueue + blocked) or 1.0
    for offset, values, color, alpha, label in ((-0.2, enqueue, "0.25", 1.0, "issue_gather() took to return (enqueue)"),
                                               (0.2, blocked, _EXPOSED, 0.7, "blocked in wait() (exposed)")):
        ax_b.barh([y + offset for y in ys], values, height=0.38, color=color, alpha=alpha, label=label)
        for y, value in zip(ys, values):
            ax_b.text(value + 0.02 * top, y + offset, f"{value:.3g}", va="center", fontsize=7)
    ax_b.set_xlim(0, top * 1.3)
    ax_b.set_yticks(ys, labels)
    ax_b.set_ylim(len(rows) - 0.4, -0.9)
    ax_b.set_xlabel("milliseconds (linear from 0; each bar labelled)")
    ax_b.set_ylabel("unit")
    ax_b.set_title("What each timer measures", fontsize=9)
    ax_b.grid(True, axis="x", which="major", alpha=0.3)
    ax_b.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    fig.suptitle(f"{title}\nenqueue times {sum(enqueue):.3g} ms in all · blocked in wait() {sum(blocked):.3g} ms "
                 f"in all", fontsize=10)
    return fig


# --------------------------------------------------------------------------- explorer


def prefetch_explorer(num_units: int = 6, depth: int = 1, budget_mb: int = 400, comm_compute_ratio: float = 0.6,
                      slow_unit: int = -1, activation_mb: int = 20):
    """Sliders over the stored grid of the prefetch model (equal units, optionally one slow all-gather).

    Controls: number of units U, prefetch depth d, budget (MB, 1 MB = 1e6 B), all-gather /
    compute time ratio, which unit has a slow all-gather (-1: none; the stored slow factor) and
    the activations per unit (MB); unit size and world size are the grid's. Every slider offers
    exactly the stored settings. Shows the timelines of depth 0 and d and the trade-off over all
    depths. Returns an ``ipywidgets.VBox`` with ``update()`` (redraws, returns the numbers in
    seconds and bytes), ``controls`` and ``summary``.
    """
    import ipywidgets as W
    from helpers.shared.plots import show_figures

    grid = _stored("08_explorer")
    style, layout = {"description_width": "190px"}, W.Layout(width="540px")
    common = {"style": style, "layout": layout, "continuous_update": False}
    u_slider = W.SelectionSlider(options=grid["num_units"], value=num_units, description="units U", **common)
    d_slider = W.IntSlider(value=depth, min=0, max=num_units - 1, description="prefetch depth d", **common)
    budget_slider = W.SelectionSlider(options=grid["budget_mb"], value=budget_mb, description="budget (MB)", **common)
    ratio_slider = W.SelectionSlider(options=grid["ratios"], value=comm_compute_ratio,
                                     description="all-gather / compute time", **common)
    slow_slider = W.SelectionSlider(options=grid["slow_units"][str(num_units)], value=slow_unit,
                                    description=f"unit with a {grid['slow_factor']:g} x slower all-gather (-1: none)",
                                    **common)
    act_slider = W.SelectionSlider(options=grid["activation_mb"], value=activation_mb,
                                   description="activations / unit (MB)", **common)
    summary, out = W.HTML(), W.Output()
    busy = {"on": False}

    def update(*_: Any) -> dict[str, Any]:
        if busy["on"]:
            return box.last_result
        busy["on"] = True
        try:
            u = u_slider.value
            d_slider.max = u - 1
            slow_choices = grid["slow_units"][str(u)]
            if list(slow_slider.options) != slow_choices:
                previous = slow_slider.value
                slow_slider.options = slow_choices
                slow_slider.value = previous if previous in slow_choices else -1
        finally:
            busy["on"] = False
        d, budget = d_slider.value, budget_slider.value * 1e6
        scenario = explorer_scenario(u, ratio_slider.value, slow_slider.value, act_slider.value)
        row, no_prefetch = scenario["depths"][d], scenario["depths"][0]
        best, deepest = scenario["best_depth"][str(int(budget))], scenario["max_depth"][str(int(budget))]
        result = {
            "num_units": u, "depth": d, "budget_bytes": budget, "gather_s": scenario["gather_s"],
            "compute_s": scenario["compute_s"], "unit_bytes": scenario["unit_bytes"],
            "activation_bytes": scenario["activation_bytes"], "shard_bytes": scenario["shard_bytes"],
            "forward_s": row["forward_s"], "exposed_s": row["exposed_s"], "peak_bytes": row["peak_bytes"],
            "fits": row["peak_bytes"] <= budget, "max_depth": deepest, "best_depth": best,
            "no_prefetch_forward_s": no_prefetch["forward_s"],
        }
        fit = "fits" if result["fits"] else "<span style='color:#d62728'>exceeds</span>"
        summary.value = (
            f"depth {d}: forward {row['forward_s'] * MS:.3g} ms (no prefetch {no_prefetch['forward_s'] * MS:.3g} ms), "
            f"<b>exposed communication {row['exposed_s'] * MS:.3g} ms</b> · <b>peak {format_bytes(row['peak_bytes'])}"
            f"</b>, {fit} the budget {format_bytes(budget)} · "
            + (f"depth to run: {best} (deepest that fits: {deepest})" if best is not None else "no depth fits"))
        figures = [plot_prefetch_timeline(scenario, sorted({0, d})), plot_depth_tradeoff(scenario, budget)]
        show_figures(out, figures, dpi=72, caption=f"depth {d}: exposed communication {row['exposed_s'] * MS:.3g} ms, "
                                                   f"peak {format_bytes(row['peak_bytes'])}")
        box.last_result = result
        return result

    controls = {"num_units": u_slider, "depth": d_slider, "budget_mb": budget_slider,
                "comm_compute_ratio": ratio_slider, "slow_unit": slow_slider, "activation_mb": act_slider}
    box = W.VBox([*controls.values(), summary, out])
    box.controls = controls
    box.summary = summary
    box.update = update
    box.last_result = {}
    update()
    for w in controls.values():
        w.observe(update, names="value")
    return box
