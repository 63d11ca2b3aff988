"""The figure style every lesson shares: colours, number formats, and showing figures.

:data:`COLORS`, :func:`format_bytes`, :func:`format_count`, :func:`show_figures` (figures into an
ipywidgets ``Output``), :func:`rect`, and two figures several chapters draw
(:func:`plot_sample_weights`, :func:`plot_replica_drift`). A lesson's own figures live in its
package's ``plots`` module. Figures are built with the object-oriented API, not ``pyplot``, so that

* a notebook shows each figure exactly once (when it is the value of a cell or
  passed to ``display``), never a second time through pyplot's global state;
* tests can build them on any backend and nothing leaks between calls.
"""
from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

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


def rect(x: float, y: float, color: str):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.48, y - 0.45), 0.96, 0.9, facecolor=color, edgecolor="0.5", lw=0.6)


def show_figures(out: Any, figures: Sequence[Figure], dpi: int = 90, caption: str = "") -> None:
    """Replace what the ipywidgets ``Output`` ``out`` shows by ``caption`` and ``figures`` as PNG images.

    Explorers redraw through this: a PNG needs no matplotlib backend in the kernel, so an
    explorer draws the same in JupyterLab and headless (nbval, the book, tests).
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
