"""Figures for the chapters.

Every function takes data the notebook measured (usually on a gloo group) or loaded
from the results stored with the course (:mod:`helpers.stored`), and returns a
:class:`matplotlib.figure.Figure`; none computes an exercise's answer. Figures are built with
the object-oriented API, not ``pyplot``, so that

* a notebook shows each figure exactly once (when it is the value of a cell or
  passed to ``display``), never a second time through pyplot's global state;
* tests can build them on any backend and nothing leaks between calls.
"""
from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

__all__ = [
    "format_bytes",
    "format_count",
    "plot_sample_weights",
    "plot_replica_drift",
    "plot_ring_schedule",
    "plot_allreduce_bytes",
    "plot_allreduce_time",
    "alpha_beta_allreduce_time",
]

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]


def format_bytes(num_bytes: float) -> str:
    """Human-readable decimal byte count: ``format_bytes(1.5e9) == '1.5 GB'``."""
    value = float(num_bytes)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.3g} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def format_count(n: float) -> str:
    """Short count with a decimal suffix: ``format_count(1.3e9) == '1.3B'``, ``format_count(500) == '500'``."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.0f}"


def plot_sample_weights(
    weights: Mapping[str, Sequence[float]],
    shard_sizes: Sequence[int],
    *,
    title: str = "Weight each sample's gradient receives",
) -> Figure:
    """Per-sample weight in the combined gradient, one bar group per rule.

    ``weights[label][i]`` is the factor multiplying sample ``i``'s loss gradient
    (``1/B`` for the full-batch mean). ``shard_sizes`` are the samples held by
    each rank, in order; the shards are shaded so that a rule that weights one
    shard differently stands out.
    """
    if not weights:
        raise ValueError("weights is empty")
    n = len(next(iter(weights.values())))
    if any(len(w) != n for w in weights.values()):
        raise ValueError("every rule needs one weight per sample")
    if sum(shard_sizes) != n:
        raise ValueError(f"shard sizes sum to {sum(shard_sizes)}, expected {n} samples")
    fig = Figure(figsize=(7.5, 3.4), layout="constrained")
    ax = fig.add_subplot()
    start = 0
    for rank, size in enumerate(shard_sizes):
        ax.axvspan(start - 0.5, start + size - 0.5, color="0.93" if rank % 2 == 0 else "0.86", zorder=0)
        ax.text(start + size / 2 - 0.5, 1.0, f"rank {rank}\n({size} samples)", ha="center", va="top",
                transform=ax.get_xaxis_transform(), fontsize=8)
        start += size
    width = 0.8 / len(weights)
    for k, (label, w) in enumerate(weights.items()):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(n)]
        ax.bar(xs, w, width=width, label=label, color=COLORS[k % len(COLORS)], zorder=2)
    ax.set_xlabel("sample index in the global batch")
    ax.set_ylabel("weight of the sample's gradient")
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(0, max(max(w) for w in weights.values()) * 1.35)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(0.0, 0.84), fontsize=8)
    return fig


def plot_replica_drift(
    steps: Sequence[int],
    drifts: Mapping[str, Sequence[float]],
    *,
    title: str = "Replica drift: max |θ_rank − θ_rank0| over all parameters",
    linthresh: float = 1e-7,
) -> Figure:
    """Maximum parameter difference across ranks against the training step.

    ``drifts[label][t]`` is the largest absolute difference between any rank's
    parameters and rank 0's after step ``steps[t]``. The y axis is symmetric-log
    so that exactly zero (bit-identical replicas) is visible next to drifts of
    1e-6 and 1.
    """
    if not drifts:
        raise ValueError("drifts is empty")
    for label, d in drifts.items():
        if len(d) != len(steps):
            raise ValueError(f"{label!r}: {len(d)} values for {len(steps)} steps")
    fig = Figure(figsize=(7.5, 4.0), layout="constrained")
    ax = fig.add_subplot()
    markers = "os^vDP*"
    for k, (label, d) in enumerate(drifts.items()):
        ax.plot(steps, d, marker=markers[k % len(markers)], markersize=3.5, lw=1.6,
                color=COLORS[k % len(COLORS)], label=label)
    ax.set_yscale("symlog", linthresh=linthresh)
    ax.axhspan(0, linthresh, color="0.92", zorder=0)
    ax.text(steps[-1], linthresh * 0.5, "0 = bit-identical replicas ", ha="right", va="center", fontsize=8,
            color="0.35")
    top = max(max(d) for d in drifts.values())
    ax.set_ylim(0, max(top * 3, linthresh * 10))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("max |parameter difference| (symlog)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="center right")
    return fig


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
            ax.add_patch(_rect(rank, step, chunk_colors[chunk % len(chunk_colors)]))
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


def _rect(x: float, y: float, color: str):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.48, y - 0.45), 0.96, 0.9, facecolor=color, edgecolor="0.5", lw=0.6)


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


def show_figures(out: Any, figures: Sequence[Figure], dpi: int = 90, caption: str = "") -> None:
    """Replace what the ipywidgets ``Output`` ``out`` shows by ``caption`` and ``figures`` as PNG images.

    Explorers redraw through this: a PNG needs no matplotlib backend in the kernel, so an
    explorer draws the same in JupyterLab and headless (the book build, tests).
    """
    from IPython.display import Image, display

    images = []
    for fig in figures:
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=dpi)
        images.append(png.getvalue())
    with out:
        out.clear_output(wait=True)
        if caption:
            print(caption)
        for data in images:
            display(Image(data=data, format="png"))
