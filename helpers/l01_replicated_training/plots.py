"""Lesson 1's figures and its all-reduce explorer.

Every function takes data the notebook measured (usually on a gloo group) or loaded from the
results stored with the course (:mod:`helpers.shared.stored`), and returns a
:class:`matplotlib.figure.Figure` (the explorer: an ipywidgets box); none computes an exercise's
answer. The figure style every lesson shares is :mod:`helpers.shared.plots`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as W
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from helpers.shared.plots import COLORS, format_bytes, format_count, rect, show_figures
from helpers.shared.stored import load


def plot_ring_schedule(
    sends: Sequence[Sequence[int]],
    *,
    title: str = "Ring all-reduce: which chunk each rank sends at each step",
) -> Figure:
    """Grid of the chunk index each rank sent at each step of a ring all-reduce.

    ``sends[step][rank]`` is the chunk rank ``rank`` sent to rank ``rank+1`` at
    ``step``. The first ``N-1`` steps are the reduce-scatter phase (partial sums
    travel), the last ``N-1`` the all-gather phase (finished chunks travel).
    """
    num_steps = len(sends)
    if num_steps == 0 or num_steps % 2:
        raise ValueError("a ring all-reduce has 2(N-1) steps")
    world_size = len(sends[0])
    half = num_steps // 2
    fig = Figure(figsize=(1.3 + 1.25 * world_size, 0.9 + 0.42 * num_steps), layout="constrained")
    ax = fig.add_subplot()
    chunk_colors = ["#c6dbef", "#fdd0a2", "#c7e9c0", "#dadaeb", "#fcbba1", "#d9d9d9", "#fee391"]
    for step, row in enumerate(sends):
        if len(row) != world_size:
            raise ValueError("every step needs one entry per rank")
        for rank, chunk in enumerate(row):
            ax.add_patch(rect(rank, step, chunk_colors[chunk % len(chunk_colors)]))
            verb = "+ c" if step < half else "c"
            ax.text(rank, step, f"{verb}{chunk} → r{(rank + 1) % world_size}", ha="center", va="center",
                    fontsize=8)
    ax.axhline(half - 0.5, color="k", lw=1.5)
    ax.set_xlim(-0.5, world_size - 0.5)
    ax.set_ylim(num_steps - 0.5, -0.5)
    ax.set_xticks(range(world_size), [f"rank {r}" for r in range(world_size)])
    ax.set_yticks(range(num_steps), [f"{'RS' if s < half else 'AG'} {s % half + 1}" for s in range(num_steps)])
    ax.set_ylabel("step")
    ax.set_xlabel("RS = reduce-scatter, AG = all-gather\n'+ c1 → r2': add own part to the received\n"
                  "partial sum of chunk 1, send it to rank 2", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.tick_params(length=0)
    return fig


def plot_allreduce_bytes(
    curves: Mapping[str, Any],
    *,
    measured: Mapping[int, Mapping[int, float]] | None = None,
) -> Figure:
    """Ring all-reduce bytes sent per rank per step against world size.

    ``curves`` is a stored result (``load("01_ring_allreduce")["figure"]``): ``world_sizes``,
    ``bytes_per_element`` and ``bytes_per_rank[str(num_params)]``, one byte count per world
    size for a gradient of ``num_params`` elements. Left: those bytes, with the
    ``2 x gradient`` limit dotted. Right: the same volumes divided by the gradient size (one
    curve for every model); ``measured[num_elements][world_size]`` (e.g. bytes from the
    communication ledger) is overlaid as markers on this panel.
    """
    ws = [int(n) for n in curves["world_sizes"]]
    b = int(curves["bytes_per_element"])
    models = {int(m): [float(v) for v in values] for m, values in curves["bytes_per_rank"].items()}
    if not models or any(len(v) != len(ws) for v in models.values()):
        raise ValueError("need at least one model size, each with one byte count per world size")
    fig = Figure(figsize=(10, 4.0), layout="constrained")
    ax_abs, ax_rel = fig.subplots(1, 2)
    for k, (m, ys) in enumerate(models.items()):
        color = COLORS[k % len(COLORS)]
        message = m * b
        ax_abs.plot(ws, ys, marker="o", markersize=3, color=color,
                    label=f"{format_count(m)} params ({format_bytes(message)} gradient)")
        ax_abs.axhline(2 * message, color=color, ls=":", lw=1)
        ax_rel.plot(ws, [y / message for y in ys], color="k", lw=1.5, label="2(N−1)/N" if k == 0 else None)
    ax_abs.set_xscale("log", base=2)
    ax_abs.set_yscale("log")
    ax_abs.set_ylim(min(v[0] for v in models.values()) / 20, max(2 * m * b for m in models) * 2)
    ax_abs.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v)))
    ax_abs.set_xlabel("world size N (ranks)")
    ax_abs.set_ylabel("bytes sent per rank per step")
    ax_abs.set_title(f"Ring all-reduce of the gradient ({b} B/element)\n"
                     "dotted: the 2 × gradient-size limit", fontsize=10)
    ax_abs.grid(True, which="major", alpha=0.3)

    ax_rel.axhline(2, color="k", ls=":", lw=1)
    for k, (m, by_ws) in enumerate((measured or {}).items()):
        pts = sorted(by_ws.items())
        color = COLORS[(len(models) + k) % len(COLORS)]
        ax_rel.plot([n for n, _ in pts], [v / (m * b) for _, v in pts], "o", ms=9,
                    mfc="none", mew=2, color=color,
                    label=f"ledger (recorded elements, ring model), {m}-element gradient")
    ax_rel.set_xscale("log", base=2)
    ax_rel.set_ylim(0.9, 2.1)
    ax_rel.set_xlabel("world size N (ranks)")
    ax_rel.set_ylabel("bytes per rank ÷ gradient bytes")
    ax_rel.set_title("Normalised: every model size lies on one curve", fontsize=10)
    ax_rel.grid(True, alpha=0.3)
    ax_rel.legend(fontsize=8, loc="lower right")
    ax_abs.legend(fontsize=7, loc="lower right")
    return fig


def alpha_beta_allreduce_time(
    bytes_per_rank: float,
    world_size: int,
    bandwidth_bytes_per_s: float,
    latency_s: float,
) -> tuple[float, float]:
    """``(latency_term, bandwidth_term)`` in seconds of a ring all-reduce.

    Alpha-beta model: ``2(N-1)`` sequential messages each costing ``latency_s`` (alpha),
    plus the ``bytes_per_rank`` each rank sends pushed through one link of
    ``bandwidth_bytes_per_s`` (1/beta). Their sum is the predicted time.
    """
    if bandwidth_bytes_per_s <= 0 or latency_s < 0:
        raise ValueError("bandwidth must be > 0 and latency >= 0")
    return 2 * (world_size - 1) * latency_s, bytes_per_rank / bandwidth_bytes_per_s


def plot_allreduce_time(
    world_sizes: Sequence[int],
    bytes_per_rank: Sequence[float],
    world_size: int,
    bandwidth_bytes_per_s: float,
    latency_s: float,
    *,
    num_params: int,
    bytes_per_element: int,
) -> Figure:
    """Alpha-beta time of one ring all-reduce against world size.

    ``bytes_per_rank[i]`` is what each rank sends at ``world_sizes[i]`` for a gradient of
    ``num_params`` elements of ``bytes_per_element`` bytes (the title's numbers). Shows the
    latency term, the bandwidth term and their sum, and marks ``world_size`` with a dot.
    """
    if len(world_sizes) != len(bytes_per_rank) or world_size not in world_sizes:
        raise ValueError("need one byte count per world size, and world_size among them")
    terms = [alpha_beta_allreduce_time(v, n, bandwidth_bytes_per_s, latency_s)
             for n, v in zip(world_sizes, bytes_per_rank)]
    lat, bw = zip(*terms)
    total = [a + b for a, b in terms]
    fig = Figure(figsize=(7, 3.6), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(world_sizes, [t * 1e3 for t in total], color="k", lw=2, label="total")
    ax.plot(world_sizes, [t * 1e3 for t in bw], color=COLORS[0], ls="--", label="bandwidth term 2(N−1)/N·M·β")
    ax.plot(world_sizes, [t * 1e3 for t in lat], color=COLORS[1], ls="--", label="latency term 2(N−1)·α")
    here = total[list(world_sizes).index(world_size)]
    ax.plot([world_size], [here * 1e3], "o", color=COLORS[3], ms=9, zorder=5, label=f"N = {world_size}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("world size N (ranks)")
    ax.set_ylabel("time per all-reduce (ms)")
    ax.set_title(f"{format_count(num_params)} elements × {bytes_per_element} B, "
                 f"{bandwidth_bytes_per_s / 1e9:.3g} GB/s links, α = {latency_s * 1e6:.3g} µs", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


_DTYPES = {"float32 (4 B)": 4, "bfloat16 / float16 (2 B)": 2, "float64 (8 B)": 8, "fp8 (1 B)": 1}


def allreduce_explorer(
    world_size: int = 8,
    num_params: float = 1.3e9,
    bytes_per_element: int = 4,
    bandwidth_gb_s: float = 25.0,
    latency_us: float = 10.0,
) -> W.VBox:
    """Sliders for a ring all-reduce of the gradient under an alpha-beta model.

    Controls: world size N (powers of 2 up to 1024), parameter count (a 1-2-5 series),
    bytes per element, link bandwidth (GB/s, 1 GB = 1e9 B) and per-message latency alpha
    (µs). Shows the bytes each rank sends (stored result ``01_allreduce_explorer``), the
    predicted time split into its latency and bandwidth terms, and a plot of time against N.
    ``world_size``, ``num_params`` and ``bytes_per_element`` must be slider positions.
    """
    grid = load("01_allreduce_explorer")
    world_sizes, params = list(grid["world_sizes"]), list(grid["num_params"])
    dtypes = {label: b for label, b in _DTYPES.items() if b in grid["bytes_per_element"]}
    for name, value, options in (("world_size", world_size, world_sizes), ("num_params", num_params, params),
                                 ("bytes_per_element", bytes_per_element, list(dtypes.values()))):
        if value not in options:
            raise ValueError(f"{name} must be one of {options}, got {value!r}")
    style = {"description_width": "150px"}
    layout = W.Layout(width="520px")
    n_slider = W.SelectionSlider(options=world_sizes, value=int(world_size), description="world size N",
                                 style=style, layout=layout, continuous_update=False)
    p_slider = W.SelectionSlider(options=[(format_count(m), m) for m in params], value=int(num_params),
                                 description="parameters", style=style, layout=layout, continuous_update=False)
    dtype = W.Dropdown(options=list(dtypes.items()), value=bytes_per_element, description="gradient dtype",
                       style=style, layout=layout)
    bw_slider = W.FloatLogSlider(value=bandwidth_gb_s, base=10, min=-1, max=3, step=0.05,
                                 description="link bandwidth (GB/s)", style=style, layout=layout,
                                 continuous_update=False, readout_format=".3g")
    lat_slider = W.FloatLogSlider(value=latency_us, base=10, min=0, max=3, step=0.05,
                                  description="latency α (µs)", style=style, layout=layout,
                                  continuous_update=False, readout_format=".3g")
    summary = W.HTML()
    out = W.Output()

    def update(*_: Any) -> dict[str, float]:
        n, m, b = int(n_slider.value), int(p_slider.value), int(dtype.value)
        bw, lat = bw_slider.value * 1e9, lat_slider.value * 1e-6
        per_n = grid["bytes_per_rank"][str(b)][str(m)]
        sent = per_n[world_sizes.index(n)]
        t_lat, t_bw = alpha_beta_allreduce_time(sent, n, bw, lat)
        result = {"world_size": n, "num_params": m, "bytes_per_element": b, "message_bytes": m * b,
                  "bytes_per_rank": sent, "latency_s": t_lat, "bandwidth_s": t_bw, "time_s": t_lat + t_bw}
        summary.value = (
            f"<b>gradient</b> M = {format_bytes(m * b)} &nbsp;·&nbsp; "
            f"<b>sent per rank</b> {sent / (m * b):.4f} × M = {format_bytes(sent)}<br>"
            f"<b>time</b> ≈ {(t_lat + t_bw) * 1e3:.4g} ms = latency {t_lat * 1e3:.3g} ms + "
            f"bandwidth {t_bw * 1e3:.4g} ms ({'latency' if t_lat > t_bw else 'bandwidth'}-bound)"
        )
        fig = plot_allreduce_time(world_sizes, per_n, n, bw, lat, num_params=m, bytes_per_element=b)
        show_figures(out, [fig], dpi=100)
        box.last_result = result
        return result

    for w in (n_slider, p_slider, dtype, bw_slider, lat_slider):
        w.observe(update, names="value")
    box = W.VBox([n_slider, p_slider, dtype, bw_slider, lat_slider, summary, out])
    box.controls = {"world_size": n_slider, "num_params": p_slider, "bytes_per_element": dtype,
                    "bandwidth_gb_s": bw_slider, "latency_us": lat_slider}
    box.summary = summary
    box.update = update
    update()
    return box
