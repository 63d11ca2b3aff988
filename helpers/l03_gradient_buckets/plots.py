"""Lesson 03, gradient buckets: the chapter's figures and its explorer.

Everything here draws numbers it is given: buckets measured on a real DDP, or schedules and
tails stored with the course (``helpers/stored/03_*.json``, written by the instructor side),
never a schedule computed here. Conventions:

* ``param_bytes[i]`` is the gradient size in **bytes** of parameter ``i`` (registration order);
* a bucket is a list of parameter indices, buckets are listed in launch order, and the
  concatenation of the buckets is the ready order the assignment walked;
* a schedule is one ``(ready, start, finish)`` triple per bucket, in **seconds**, like every
  other time argument (``grad_ready_s``); figures show milliseconds;
* caps are bytes; labels use binary units (KiB, MiB) because DDP's ``bucket_cap_mb`` counts MiB.

Figures are :class:`matplotlib.figure.Figure` objects built without ``pyplot`` (see
:mod:`helpers.shared.plots`). The explorer returns an ``ipywidgets.VBox`` with an ``update()`` method
that looks up the stored numbers, redraws and returns them, so it also runs headless.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MultipleLocator

from helpers.l03_gradient_buckets import Buckets
from helpers.shared.plots import COLORS
from helpers.shared.stored import load

__all__ = [
    "format_binary_bytes",
    "synthetic_layers",
    "best_caps",
    "plot_bucket_assignment",
    "plot_bucket_timeline",
    "plot_bucket_timelines",
    "plot_tail_vs_cap",
    "network_title",
    "plot_enqueue_vs_completion",
    "bucket_explorer",
]

MIB = 2**20
Schedule = Sequence[Sequence[float]]


def format_binary_bytes(num_bytes: float) -> str:
    """Bytes in binary units: ``format_binary_bytes(25 * 2**20) == '25 MiB'``."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _binary_yticks(ax: Axes, top: float) -> None:
    """Y ticks at multiples of a power of two bytes (about 4-8 up to ``top``), in KiB/MiB."""
    step = 2.0 ** math.ceil(math.log2(max(top, 1.0) / 6))
    ax.yaxis.set_major_locator(MultipleLocator(max(step, 1.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_binary_bytes(v)))


def _bucket_color(k: int) -> str:
    return COLORS[k % len(COLORS)]


def _check_buckets(buckets: Buckets, num_params: int) -> list[int]:
    """The ready order (concatenated buckets); every index valid and used at most once."""
    if not buckets or any(not b for b in buckets):
        raise ValueError("need at least one bucket and no empty bucket")
    order = [i for b in buckets for i in b]
    if len(set(order)) != len(order) or not all(0 <= i < num_params for i in order):
        raise ValueError(f"buckets {buckets} must hold distinct indices in [0, {num_params})")
    return order


# --------------------------------------------------------------------------- synthetic model


def synthetic_layers(num_layers: int = 24, weight_bytes: int = 8 * MIB, bias_bytes: int = 8 * 1024,
                     layer_backward_s: float = 3e-3) -> tuple[list[int], list[float]]:
    """``(param_bytes, grad_ready_s)`` of a stack of ``num_layers`` identical linear layers.

    Parameters are registered layer by layer, weight then bias (``weight_bytes`` and
    ``bias_bytes`` bytes of gradient). Backward starts at 0 s and spends
    ``layer_backward_s`` seconds on each layer, last layer first; both gradients of a layer are
    ready when its backward finishes, so layer ``l`` is ready at ``(num_layers - l) *
    layer_backward_s`` seconds and the ready order is the reverse registration order.
    """
    if num_layers < 1 or weight_bytes < 0 or bias_bytes < 0 or layer_backward_s < 0:
        raise ValueError("need num_layers >= 1 and non-negative sizes and times")
    param_bytes = [b for _ in range(num_layers) for b in (weight_bytes, bias_bytes)]
    grad_ready_s = [(num_layers - i // 2) * layer_backward_s for i in range(2 * num_layers)]
    return param_bytes, grad_ready_s


def best_caps(rows: Sequence[tuple[int, float, int]], rel_tol: float = 1e-3) -> tuple[int, int, float]:
    """``(smallest cap, largest cap, tail_s)`` of the first run of caps reaching the minimum tail.

    ``rows`` are ``(cap_bytes, tail_s, num_buckets)`` rows sorted by cap. The tail is usually flat over a range of
    caps (the buckets do not change), so the best cap is a range, not a number.
    """
    if not rows:
        raise ValueError("no rows")
    best = min(t for _, t, _ in rows)
    good = [t <= best + rel_tol * abs(best) + 1e-12 for _, t, _ in rows]
    first = good.index(True)
    last = first
    while last + 1 < len(rows) and good[last + 1]:
        last += 1
    return rows[first][0], rows[last][0], best


# --------------------------------------------------------------------------- assignment


def plot_bucket_assignment(
    param_bytes: Sequence[int],
    buckets: Buckets,
    names: Sequence[str] | None = None,
    *,
    bucket_cap_bytes: int | None = None,
    first_bucket_cap_bytes: int | None = None,
    title: str = "Bucket assignment: parameters in ready order, filling buckets up to the cap",
) -> Figure:
    """Bars: each parameter's gradient bytes, in the ready order the assignment walked.

    Bars are coloured by bucket; the step line is the bytes in the open bucket after adding
    each parameter, and a bucket closes at the parameter where that line reaches its cap
    (``>=``, marked with a dot). ``bucket_cap_bytes`` / ``first_bucket_cap_bytes`` draw the
    caps (the first bucket's over the first bucket only). Tick labels are ``names[i]`` or the
    registration index ``i``. Sizes in bytes.
    """
    order = _check_buckets(buckets, len(param_bytes))
    fig = Figure(figsize=(max(7.0, min(13.0, 2.5 + 0.32 * len(order))), 4.2), layout="constrained")
    ax = fig.add_subplot()
    position, fill_y, closes, spans = 0, [], [], []
    for k, bucket in enumerate(buckets):
        start, size = position, 0
        for i in bucket:
            size += param_bytes[i]
            ax.bar(position, param_bytes[i], width=0.8, color=_bucket_color(k), edgecolor="0.3", lw=0.4, zorder=2)
            fill_y.append(size)
            position += 1
        closes.append((position - 1, size))
        spans.append((start, position - 1, size))
    top = max(fill_y)
    drawn_caps = []
    if first_bucket_cap_bytes is not None and bucket_cap_bytes is not None:
        first_end = spans[0][1] + 0.5
        drawn_caps += [(first_bucket_cap_bytes, -0.5, first_end, ":", "first-bucket cap"),
                       (bucket_cap_bytes, first_end, len(order) - 0.5, "--", "bucket cap")]
    elif bucket_cap_bytes is not None:
        drawn_caps.append((bucket_cap_bytes, -0.5, len(order) - 0.5, "--", "bucket cap"))
    elif first_bucket_cap_bytes is not None:
        drawn_caps.append((first_bucket_cap_bytes, -0.5, spans[0][1] + 0.5, ":", "first-bucket cap"))
    off_chart = []
    for cap, x0, x1, style, label in drawn_caps:
        if cap > 3 * top:
            off_chart.append(f"{label} {format_binary_bytes(cap)} (off the chart)")
            continue
        if x1 > x0:
            ax.hlines(cap, x0, x1, colors="k", linestyles=style, lw=1.4,
                      label=f"{label} = {format_binary_bytes(cap)}")
        top = max(top, cap)
    # bytes in the open bucket: one step line per bucket, so it drops to 0 between buckets
    for k, (start, stop, _) in enumerate(spans):
        ax.step([start - 0.5, *range(start, stop + 1)], [0, *fill_y[start:stop + 1]], where="post", color="0.15",
                lw=1.4, label="bytes in the open bucket" if k == 0 else None, zorder=3)
    ax.plot([x for x, _ in closes], [y for _, y in closes], "o", color="0.15", ms=5, zorder=4,
            label="bucket closes here")
    for k, (start, stop, size) in enumerate(spans):
        ax.axvspan(start - 0.5, stop + 0.5, color="0.95" if k % 2 == 0 else "0.88", zorder=0)
        ax.text((start + stop) / 2, 1.0, f"bucket {k}\n{format_binary_bytes(size)}", ha="center", va="top",
                transform=ax.get_xaxis_transform(), fontsize=7, color=_bucket_color(k))
    labels = [names[i] if names is not None else str(i) for i in order]
    ax.set_xticks(range(len(order)), labels, rotation=90 if names is not None or len(order) > 16 else 0,
                  fontsize=7 if len(order) > 16 else 8)
    ax.set_xlim(-0.5, len(order) - 0.5)
    ax.set_ylim(0, top * 1.4)
    _binary_yticks(ax, top * 1.4)
    ax.set_xlabel("parameters in ready order (label: " + ("name" if names is not None else "registration index")
                  + ")")
    ax.set_ylabel("gradient bytes")
    ax.set_title(title + ("\n" + "; ".join(off_chart) if off_chart else ""), fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.86))
    ax.grid(True, axis="y", alpha=0.3)
    return fig


# --------------------------------------------------------------------------- timelines


def _draw_timeline(
    ax: Axes,
    grad_ready_s: Sequence[float],
    buckets: Buckets,
    schedule: Schedule,
    backward_end_s: float | None,
) -> dict[str, float]:
    """Draw one backward/communication Gantt chart on ``ax`` (ms); return its numbers (s)."""
    _check_buckets(buckets, len(grad_ready_s))
    if len(schedule) != len(buckets):
        raise ValueError(f"need one (ready, start, finish) per bucket: {len(schedule)} for {len(buckets)} buckets")
    end = max(grad_ready_s) if backward_end_s is None else backward_end_s
    start0 = min(0.0, min(grad_ready_s))
    last_finish = schedule[-1][2]
    tail = max(0.0, last_finish - end)
    ms = 1e3
    ax.broken_barh([(start0 * ms, (end - start0) * ms)], (0.7, 0.6), facecolors="0.9", edgecolors="0.6", zorder=1)
    for k, bucket in enumerate(buckets):
        ax.vlines([grad_ready_s[i] * ms for i in bucket], 0.72, 1.28, colors=_bucket_color(k), lw=1.2, zorder=2)
    for k, (ready, start, finish) in enumerate(schedule):
        color = _bucket_color(k)
        ax.broken_barh([(start * ms, (finish - start) * ms)], (-0.3, 0.6), facecolors=color, edgecolors="0.2",
                       lw=0.5, alpha=0.85, zorder=2)
        ax.plot([ready * ms], [-0.38], marker="^", color=color, ms=5, zorder=3, clip_on=False)
        if start > ready:
            ax.plot([ready * ms, start * ms], [-0.38, -0.38], ls=":", color=color, lw=1)
    if len(schedule) <= 12:
        width = max(last_finish, end) - start0
        for k, (_, start, finish) in enumerate(schedule):
            if finish - start > 0.04 * width:
                ax.text((start + finish) / 2 * ms, 0, f"b{k}", ha="center", va="center", fontsize=7, color="w",
                        zorder=4)
    if tail > 0:
        ax.axvspan(end * ms, last_finish * ms, facecolor="#d62728", alpha=0.12, lw=0, zorder=0)
        ax.annotate("", xy=(last_finish * ms, -0.6), xytext=(end * ms, -0.6),
                    arrowprops={"arrowstyle": "<->", "color": "#d62728", "lw": 1.2})
        ax.text((end + last_finish) / 2 * ms, -0.68, f"exposed tail {tail * ms:.3g} ms", ha="center", va="top",
                fontsize=8, color="#d62728")
    ax.axvline(end * ms, color="0.3", ls="--", lw=1)
    right = max(last_finish, end)
    ax.set_xlim(left=(start0 - 0.03 * (right - start0)) * ms, right=(right + 0.1 * (right - start0)) * ms)
    ax.set_yticks([0, 1], ["communication", "backward"])
    ax.set_ylim(-1.15, 1.45)
    ax.grid(True, axis="x", alpha=0.3)
    busy = sum(f - s for _, s, f in schedule)
    return {"tail_s": tail, "backward_end_s": end, "last_finish_s": last_finish, "communication_s": busy,
            "num_buckets": float(len(buckets))}


def _timeline_title(result: Mapping[str, float]) -> str:
    return (f"{int(result['num_buckets'])} bucket(s), all-reduces busy {result['communication_s'] * 1e3:.3g} ms, "
            f"tail after backward {result['tail_s'] * 1e3:.3g} ms")


def plot_bucket_timeline(
    grad_ready_s: Sequence[float],
    buckets: Buckets,
    schedule: Schedule,
    backward_end_s: float | None = None,
    *,
    title: str | None = None,
) -> Figure:
    """Gantt chart of backward and the bucketed all-reduces of a given schedule.

    Row "backward": the backward pass (grey) from 0 s to ``backward_end_s`` (default: the last
    gradient's ready time) with a tick at each gradient's ready time, coloured by its bucket.
    Row "communication": one box per bucket from its start to its finish, as ``schedule``
    gives them (``(ready, start, finish)`` seconds per bucket); a triangle marks when the
    bucket became ready, a dotted line how long it waited for the channel. The red span is the
    exposed tail: from the end of backward to the last finish. Inputs in seconds, axis in ms.
    """
    fig = Figure(figsize=(9.0, 2.9), layout="constrained")
    ax = fig.add_subplot()
    result = _draw_timeline(ax, grad_ready_s, buckets, schedule, backward_end_s)
    ax.set_xlabel("time since backward started (ms)")
    ax.set_title(title or _timeline_title(result), fontsize=10)
    return fig


def plot_bucket_timelines(
    grad_ready_s: Sequence[float],
    cases: Mapping[str, tuple[Buckets, Schedule]],
    backward_end_s: float | None = None,
    *,
    title: str | None = None,
) -> Figure:
    """Several :func:`plot_bucket_timeline` panels on one time axis.

    ``cases`` maps a panel label (e.g. ``"cap 25 MiB"``) to ``(buckets, schedule)`` of the
    same parameters; every panel uses the same ready times (seconds).
    """
    if not cases:
        raise ValueError("cases is empty")
    n = len(cases)
    fig = Figure(figsize=(9.0, 0.6 + 2.2 * n), layout="constrained")
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0]
    for ax, (label, (buckets, schedule)) in zip(axes, cases.items()):
        result = _draw_timeline(ax, grad_ready_s, buckets, schedule, backward_end_s)
        ax.set_title(f"{label}: {_timeline_title(result)}", fontsize=9, loc="left")
    axes[-1].set_xlabel("time since backward started (ms)")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


# --------------------------------------------------------------------------- tail against cap


def plot_tail_vs_cap(
    rows: Sequence[Sequence[float]],
    per_tensor_tail_s: float,
    one_bucket_tail_s: float,
    *,
    marked_cap: int | None = None,
    title: str,
) -> Figure:
    """Communication tail (ms) against the bucket cap (bytes, log axis), from given rows.

    ``rows`` are ``(cap_bytes, tail_s, num_buckets)`` sorted by cap (DDP's assignment at each
    cap). Small caps make many buckets, each paying ``2(N-1)·alpha``; a cap of the whole
    gradient makes one bucket that cannot start before backward ends. The dashed lines are
    the tails of those two extremes (seconds), the green band and star the best caps of the
    rows (:func:`best_caps`), the grey line (right axis) the number of buckets.
    ``marked_cap`` (one of the rows' caps) draws a vertical line there (e.g. a slider's value).
    """
    xs = [int(c) for c, _, _ in rows]
    tails = [t * 1e3 for _, t, _ in rows]
    fig = Figure(figsize=(7.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    count_ax = ax.twinx()
    count_ax.step(xs, [k for _, _, k in rows], where="post", color="0.7", lw=1)
    count_ax.set_ylim(0, max(k for _, _, k in rows) * 1.15)
    count_ax.set_ylabel("number of buckets (grey)", color="0.45")
    count_ax.tick_params(axis="y", colors="0.45")
    ax.set_zorder(count_ax.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.step(xs, tails, where="post", color=COLORS[0], lw=2, label="tail with DDP's assignment")
    for label, value, color in (("every tensor in its own bucket", per_tensor_tail_s, COLORS[1]),
                                ("everything in one bucket", one_bucket_tail_s, COLORS[3])):
        ax.axhline(value * 1e3, color=color, ls="--", lw=1.2, label=f"{label}: {value * 1e3:.3g} ms")
    lo, hi, best = best_caps(rows)
    ax.axvspan(lo, hi, color=COLORS[2], alpha=0.15, lw=0)
    span = (f"{format_binary_bytes(lo)} – {format_binary_bytes(hi)}" if hi > lo else format_binary_bytes(lo))
    ax.plot([math.sqrt(lo * hi)], [best * 1e3], marker="*", ms=15, color=COLORS[2], ls="none", zorder=5,
            label=f"best caps {span}: {best * 1e3:.3g} ms")
    if marked_cap is not None:
        if int(marked_cap) not in xs:
            raise ValueError(f"marked_cap {marked_cap} is not one of the rows' caps")
        k = xs.index(int(marked_cap))
        ax.axvline(marked_cap, color="k", lw=1, ls=":")
        ax.plot([marked_cap], [tails[k]], "o", color="k", ms=6, zorder=5,
                label=f"cap {format_binary_bytes(marked_cap)}: {tails[k]:.3g} ms, {rows[k][2]} buckets")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_binary_bytes(v)))
    ax.set_ylim(0, max(tails + [per_tensor_tail_s * 1e3, one_bucket_tail_s * 1e3]) * 1.15)
    ax.set_xlabel("bucket cap (log scale)")
    ax.set_ylabel("communication tail after backward (ms)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(0.08, 0.58))
    return fig


def network_title(world_size: int, alpha_s: float, beta_s_per_byte: float, first_bucket_cap_bytes: int | None) -> str:
    """``N = 8, α = 100 µs, 1/β = 10 GB/s, first bucket 1 MiB``: a figure title for a network."""
    first = "" if first_bucket_cap_bytes is None else f", first bucket {format_binary_bytes(first_bucket_cap_bytes)}"
    return f"N = {world_size}, α = {alpha_s * 1e6:.4g} µs, 1/β = {1e-9 / beta_s_per_byte:.4g} GB/s{first}"


# --------------------------------------------------------------------------- measured events


def _launches(events: Sequence[tuple[str, int, float]]) -> list[tuple[int, float, float, float]]:
    """``(bucket, launch, enqueued, done)`` perf_counter seconds for each launch, in launch order."""
    rows: list[tuple[int, float, float, float]] = []
    used: set[int] = set()
    for k, (kind, bucket, t) in enumerate(events):
        if kind != "launch":
            continue
        found: dict[str, float] = {}
        for j in range(k + 1, len(events)):
            other_kind, other_bucket, other_t = events[j]
            if other_bucket == bucket and other_kind in ("enqueued", "done") and other_kind not in found \
                    and j not in used:
                found[other_kind] = other_t
                used.add(j)
            if len(found) == 2:
                break
        if len(found) != 2:
            raise ValueError(f"launch of bucket {bucket} has no matching 'enqueued' and 'done' events")
        rows.append((bucket, t, found["enqueued"], found["done"]))
    if not rows:
        raise ValueError("no 'launch' events")
    return rows


def plot_enqueue_vs_completion(
    events: Sequence[tuple[str, int, float]],
    *,
    marks: Mapping[str, float] | None = None,
    title: str = "Measured on gloo: returning from all_reduce(async_op=True) is not completing it",
) -> Figure:
    """Per bucket: launch → ``all_reduce(async_op=True)`` returned, versus launch → the all-reduce completed.

    ``events`` are ``(kind, bucket, perf_counter seconds)`` with kinds ``"launch"`` (just
    before the call), ``"enqueued"`` (the call returned) and ``"done"`` (the all-reduce
    completed) from one rank, e.g. recorded by a DDP communication hook (several iterations
    are paired launch by launch). Left: a timeline in ms since the first
    launch, dark for the call, light while the all-reduce is in flight; ``marks`` adds labelled
    vertical lines at other ``perf_counter`` instants (e.g. when backward returned). Right: the
    two durations per launch in ms, log scale.
    """
    rows = _launches(events)
    t0 = min(t for _, t, _, _ in rows)
    ms = 1e3
    fig = Figure(figsize=(11.0, 1.8 + max(2.4, 0.45 * len(rows))), layout="constrained")
    ax_t, ax_b = fig.subplots(1, 2, width_ratios=[1.5, 1])
    repeated = len({b for b, *_ in rows}) < len(rows)
    labels = []
    seen: dict[int, int] = {}
    for b, *_ in rows:
        seen[b] = seen.get(b, 0) + 1
        labels.append(f"bucket {b}" + (f" (#{seen[b]})" if repeated else ""))
    for y, (b, launch, enq, done) in enumerate(rows):
        color = _bucket_color(b)
        ax_t.barh(y, (done - enq) * ms, left=(enq - t0) * ms, height=0.5, color=color, alpha=0.3,
                  label="in flight: until the all-reduce completed" if y == 0 else None)
        ax_t.barh(y, max((enq - launch) * ms, 1e-3), left=(launch - t0) * ms, height=0.5, color=color,
                  edgecolor="k", lw=0.5, label="all_reduce(async_op=True) call" if y == 0 else None)
        ax_t.plot([(done - t0) * ms], [y], "|", color="k", ms=12, mew=2,
                  label="all-reduce completed" if y == 0 else None)
    for k, (label, t) in enumerate((marks or {}).items()):
        ax_t.axvline((t - t0) * ms, color=COLORS[(k + 1) % len(COLORS)], ls="--", lw=1.2, label=label)
    ax_t.set_yticks(range(len(rows)), labels)
    ax_t.set_ylim(len(rows) - 0.4, -0.9)
    ax_t.set_xlabel("time since the first launch (ms)")
    ax_t.set_ylabel("launch (in launch order)")
    ax_t.set_title("Timeline of one rank", fontsize=10)
    ax_t.grid(True, axis="x", alpha=0.3)
    ax_t.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)

    enqueue = [(enq - launch) * ms for _, launch, enq, _ in rows]
    complete = [(done - launch) * ms for _, launch, _, done in rows]
    ys = range(len(rows))
    ax_b.barh([y - 0.2 for y in ys], enqueue, height=0.38, color="0.25", label="launch → call returned (enqueued)")
    ax_b.barh([y + 0.2 for y in ys], complete, height=0.38, color=COLORS[0], alpha=0.7,
              label="launch → all-reduce completed (done)")
    for y, (e, c) in enumerate(zip(enqueue, complete)):
        ax_b.text(c, y + 0.2, f" {c / e:.0f}×" if e > 0 else "", va="center", fontsize=7)
    ax_b.set_xscale("log")
    ax_b.set_xlim(min(v for v in enqueue + complete if v > 0) / 3, max(complete) * 4)
    ax_b.set_yticks(list(ys), labels)
    ax_b.set_ylim(len(rows) - 0.4, -0.9)
    ax_b.set_xlabel("milliseconds after the launch (log scale)")
    ax_b.set_ylabel("launch")
    ax_b.set_title("What a timer around the call measures", fontsize=10)
    ax_b.grid(True, axis="x", which="major", alpha=0.3)
    ax_b.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
    fig.suptitle(title, fontsize=11)
    return fig


# --------------------------------------------------------------------------- explorer


def _choice(name: str, value: float, options: Sequence[float]) -> float:
    """``value`` if it is one of the stored grid's ``options`` (else ``ValueError``)."""
    for option in options:
        if math.isclose(value, option, rel_tol=1e-9):
            return option
    raise ValueError(f"{name}={value!r} is not on the stored grid; choose one of {list(options)}")


def _network(grid: Mapping[str, Any], world_size: int, alpha_s: float, bandwidth_gb_s: float) -> Mapping[str, Any]:
    for net in grid["networks"]:
        if (net["world_size"], net["alpha_s"], net["bandwidth_gb_s"]) == (world_size, alpha_s, bandwidth_gb_s):
            return net
    raise KeyError(f"no stored network N={world_size}, alpha={alpha_s}, {bandwidth_gb_s} GB/s")


def bucket_explorer(
    bucket_cap_bytes: int = 25 * MIB,
    first_bucket_cap_bytes: int = MIB,
    world_size: int = 8,
    alpha_us: float = 100.0,
    bandwidth_gb_s: float = 10.0,
):
    """Sliders for DDP's bucket caps and the network, over the stored synthetic model.

    The model and the grid of results are stored with the course (``03_explorer``): a stack
    of identical layers (see :func:`synthetic_layers`), and for every combination of bucket
    cap, first-bucket cap (bytes), world size N, latency alpha (µs) and link bandwidth 1/beta
    (GB/s, 1 GB = 1e9 B) on the grid, the number of buckets, the tail and the start of the
    first all-reduce (seconds). The arguments must be grid values. Shows the tail against the
    cap with the current cap marked. Returns an ``ipywidgets.VBox`` with ``update()``, which
    looks up the numbers, redraws and returns them (seconds and bytes), ``controls`` (the
    sliders by name) and ``summary`` (the HTML line).
    """
    import ipywidgets as W
    from helpers.shared.plots import show_figures

    grid = load("03_explorer")
    model = grid["model"]
    caps, firsts = grid["caps_bytes"], grid["first_caps_bytes"]
    style, layout = {"description_width": "170px"}, W.Layout(width="540px")
    common = {"style": style, "layout": layout, "continuous_update": False}

    def slider(description: str, options: Sequence[float], value: float, label) -> Any:
        return W.SelectionSlider(options=[(label(v), v) for v in options], value=_choice(description, value, options),
                                 description=description, **common)

    controls = {
        "bucket_cap": slider("bucket cap", caps, bucket_cap_bytes, format_binary_bytes),
        "first_bucket_cap": slider("first-bucket cap", firsts, first_bucket_cap_bytes, format_binary_bytes),
        "world_size": slider("world size N", grid["world_sizes"], world_size, str),
        "alpha_us": slider("latency α (µs)", [a * 1e6 for a in grid["alphas_s"]], alpha_us, lambda v: f"{v:g}"),
        "bandwidth_gb_s": slider("bandwidth 1/β (GB/s)", grid["bandwidths_gb_s"], bandwidth_gb_s,
                                 lambda v: f"{v:g}"),
    }
    summary, out = W.HTML(), W.Output()
    backward = model["num_layers"] * model["layer_backward_s"]

    def update(*_: Any) -> dict[str, Any]:
        cap, first = controls["bucket_cap"].value, controls["first_bucket_cap"].value
        n, bw = controls["world_size"].value, controls["bandwidth_gb_s"].value
        alpha = grid["alphas_s"][[a * 1e6 for a in grid["alphas_s"]].index(controls["alpha_us"].value)]
        net = _network(grid, n, alpha, bw)
        f = firsts.index(first)
        rows = [(c, t, k) for c, t, k in zip(caps, net["tail_s"][f], grid["num_buckets"][f])]
        c = caps.index(cap)
        best_lo, best_hi, best_tail = best_caps(rows)
        result = {
            "bucket_cap_bytes": cap, "first_bucket_cap_bytes": first, "world_size": n, "alpha_s": alpha,
            "beta_s_per_byte": 1.0 / (bw * 1e9), "num_buckets": rows[c][2], "backward_s": backward,
            "tail_s": rows[c][1], "first_start_s": net["first_start_s"][f][c],
            "one_bucket_s": net["one_bucket_tail_s"], "best_caps_bytes": (best_lo, best_hi), "best_tail_s": best_tail,
        }
        summary.value = (
            f"<b>{result['num_buckets']} buckets</b> · backward {backward * 1e3:.3g} ms · first all-reduce starts at "
            f"{result['first_start_s'] * 1e3:.3g} ms · <b>tail after backward {result['tail_s'] * 1e3:.3g} ms</b><br>"
            f"one bucket (no overlap) would leave {result['one_bucket_s'] * 1e3:.3g} ms · best caps with this "
            f"first bucket: {format_binary_bytes(best_lo)} – {format_binary_bytes(best_hi)}, tail "
            f"{best_tail * 1e3:.3g} ms")
        fig = plot_tail_vs_cap(rows, net["per_tensor_tail_s"], net["one_bucket_tail_s"], marked_cap=cap,
                               title=f"{model['num_layers']} layers × "
                                     f"{format_binary_bytes(model['weight_bytes'] + model['bias_bytes'])}, "
                                     f"{model['layer_backward_s'] * 1e3:g} ms each; "
                                     + network_title(n, alpha, result["beta_s_per_byte"], first))
        show_figures(out, [fig], dpi=80)
        box.last_result = result
        return result

    for w in controls.values():
        w.observe(update, names="value")
    box = W.VBox([*controls.values(), summary, out])
    box.controls = controls
    box.summary = summary
    box.update = update
    update()
    return box
