"""Lesson 07, parameter sharding: the chapter's figures and its explorer.

Everything here draws what :mod:`helpers.param_sharding` and :mod:`helpers.costs` compute;
nothing derives a schedule or a traffic formula its own way. Conventions:

* a step is the event list of :func:`helpers.param_sharding.full_shard_schedule`
  (``("all_gather" | "free" | "reduce_scatter", unit)``), without prefetching;
* :func:`step_timeline` inserts the computation into it: ``("forward", u)`` right after the
  all-gather that first materialises unit ``u``, ``("backward", u)`` right before its
  reduce-scatter. Computations are the *slots* of every figure's time axis (slot ``k`` spans
  ``[k, k+1)``); communication and frees happen at the slot boundaries;
* sizes are elements unless a name says bytes; byte labels are decimal (kB, MB, GB), like
  :func:`helpers.plots.format_bytes`.

Figures are :class:`matplotlib.figure.Figure` objects built without ``pyplot`` (see
:mod:`helpers.plots`). The explorer returns an ``ipywidgets.VBox`` with an ``update()`` method
that recomputes, redraws and returns the numbers, so it also runs headless.
"""
from __future__ import annotations

import io
import math
from typing import Any, Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter

from helpers.costs import adam_memory_bytes, ring_allreduce_bytes
from helpers.param_sharding import fsdp_traffic_bytes, full_shard_schedule
from helpers.plots import format_bytes

__all__ = [
    "mode_name",
    "step_timeline",
    "availability",
    "split_params",
    "live_parameter_bytes",
    "plot_availability",
    "plot_live_parameter_memory",
    "plot_traffic_vs_memory",
    "param_sharding_explorer",
]

Event = tuple[str, int]

_COMPUTE_COLOR = {"forward": "#1f77b4", "backward": "#ff7f0e"}
_HELD_COLOR = {"forward": "#c6dbef", "backward": "#fdd0a2"}
_EVENT_STYLE = {  # marker, colour, legend label
    "all_gather": ("v", "#2ca02c", "all-gather (materialise the full parameters)"),
    "reduce_scatter": ("s", "#9467bd", "reduce-scatter of the unit's gradient"),
    "free": ("x", "#d62728", "free (storage resized to 0 bytes)"),
}
_MODE_COLOR = {True: "#d62728", False: "#1f77b4", None: "#7f7f7f"}


def mode_name(reshard_after_forward: bool | None) -> str:
    """``"FULL_SHARD"`` (True), ``"SHARD_GRAD_OP"`` (False) or ``"replicated"`` (None)."""
    return {True: "FULL_SHARD", False: "SHARD_GRAD_OP", None: "replicated"}[reshard_after_forward]


def _bytes_axis(value: float, _: object = None) -> str:
    return format_bytes(value)


# --------------------------------------------------------------------------- the step, with compute


def step_timeline(num_units: int, reshard_after_forward: bool = True,
                  events: Sequence[Event] | None = None) -> list[Event]:
    """The schedule's events with the computation inserted (see the module docstring).

    ``events`` defaults to ``full_shard_schedule(num_units, reshard_after_forward)``; passing
    another event list draws that one instead. Raises ``ValueError`` if a unit would compute
    without its parameters gathered, or is never computed in one of the passes.
    """
    if num_units < 0:
        raise ValueError(f"num_units must be >= 0, got {num_units}")
    events = full_shard_schedule(num_units, reshard_after_forward) if events is None else list(events)
    out: list[Event] = []
    forwarded: set[int] = set()
    gathered: set[int] = set()
    for kind, unit in events:
        if kind not in _EVENT_STYLE or not 0 <= unit < num_units:
            raise ValueError(f"unknown event {(kind, unit)!r} for {num_units} units")
        if kind == "reduce_scatter":
            if unit not in gathered:
                raise ValueError(f"unit {unit} would run backward with its parameters freed")
            out.append(("backward", unit))
        out.append((kind, unit))
        if kind == "all_gather":
            gathered.add(unit)
            if unit not in forwarded:
                forwarded.add(unit)
                out.append(("forward", unit))
        elif kind == "free":
            gathered.discard(unit)
    computed = [(k, u) for k, u in out if k in _COMPUTE_COLOR]
    expected = [("forward", u) for u in range(num_units)] + [("backward", u) for u in reversed(range(num_units))]
    if computed != expected:
        raise ValueError(f"the events compute {computed}, expected forward 0..{num_units - 1} then backward back")
    return out


def availability(num_units: int, reshard_after_forward: bool = True,
                 events: Sequence[Event] | None = None) -> list[dict[str, Any]]:
    """One entry per compute slot: what runs and which units' full parameters exist meanwhile.

    Each entry has ``phase`` (``"forward"``/``"backward"``), ``unit`` (the unit computing),
    ``gathered`` (sorted units materialised during the slot) and ``before`` (the events at the
    boundary just before the slot, in order). The last entry also has ``after``: the events
    after the last computation.
    """
    slots: list[dict[str, Any]] = []
    pending: list[Event] = []
    gathered: set[int] = set()
    for kind, unit in step_timeline(num_units, reshard_after_forward, events):
        if kind in _COMPUTE_COLOR:
            slots.append({"phase": kind, "unit": unit, "gathered": sorted(gathered), "before": pending})
            pending = []
            continue
        pending.append((kind, unit))
        if kind == "all_gather":
            gathered.add(unit)
        elif kind == "free":
            gathered.discard(unit)
    if slots:
        slots[-1]["after"] = pending
    return slots


def split_params(num_params: int, num_units: int) -> list[int]:
    """``num_params`` elements in ``num_units`` units as equal as integers allow (larger first)."""
    if num_units < 1 or num_params < 0:
        raise ValueError("need num_units >= 1 and num_params >= 0")
    q, r = divmod(int(num_params), num_units)
    return [q + (1 if u < r else 0) for u in range(num_units)]


def live_parameter_bytes(unit_numels: Sequence[int], world_size: int, reshard_after_forward: bool | None = True,
                         bytes_per_param: int = 2) -> dict[str, Any]:
    """Parameter bytes allocated on one rank during every compute slot of a step.

    Every rank always stores its shards, ``S_u = ceil(n_u / N)`` elements per unit; a gathered
    unit adds its full padded buffer of ``N * S_u`` elements (the unsharded copy is a separate
    allocation, as in FSDP and the lesson's unit). ``reshard_after_forward=None`` is replicated
    training: every rank keeps all ``sum(n_u)`` elements, nothing is gathered. Gradients,
    activations and prefetch buffers are not counted (lesson 08 counts them).

    Returns ``slots`` (list of ``(phase, unit, bytes)``), ``between_steps`` (bytes while no unit is
    gathered: the persistent parameter memory), ``peak`` and ``peak_slot`` (index of the first
    slot reaching the peak).
    """
    if world_size < 1 or bytes_per_param <= 0 or not unit_numels or min(unit_numels) < 0:
        raise ValueError("need world_size >= 1, bytes_per_param > 0 and at least one unit of >= 0 elements")
    units = len(unit_numels)
    if reshard_after_forward is None:
        total = sum(unit_numels) * bytes_per_param
        slots = [(phase, u, float(total)) for phase, u in
                 [("forward", u) for u in range(units)] + [("backward", u) for u in reversed(range(units))]]
        return {"slots": slots, "between_steps": float(total), "peak": float(total), "peak_slot": 0}
    shard = [math.ceil(n / world_size) for n in unit_numels]
    persistent = sum(shard) * bytes_per_param
    slots = []
    for slot in availability(units, reshard_after_forward):
        gathered = sum(world_size * shard[u] for u in slot["gathered"]) * bytes_per_param
        slots.append((slot["phase"], slot["unit"], float(persistent + gathered)))
    peak = max(b for _, _, b in slots)
    return {"slots": slots, "between_steps": float(persistent), "peak": peak,
            "peak_slot": next(k for k, (_, _, b) in enumerate(slots) if b == peak)}


# --------------------------------------------------------------------------- availability


def _slot_labels(slots: Sequence[dict[str, Any]] | Sequence[tuple[str, int, float]]) -> list[str]:
    labels = []
    for s in slots:
        phase, unit = (s["phase"], s["unit"]) if isinstance(s, dict) else (s[0], s[1])
        labels.append(f"{'F' if phase == 'forward' else 'B'}{unit}")
    return labels


def _draw_availability(ax: Axes, num_units: int, reshard_after_forward: bool) -> dict[str, int]:
    slots = availability(num_units, reshard_after_forward)
    counts = {"all_gather": 0, "reduce_scatter": 0, "free": 0}
    for k, slot in enumerate(slots):
        for u in slot["gathered"]:
            computing = u == slot["unit"]
            color = _COMPUTE_COLOR[slot["phase"]] if computing else _HELD_COLOR[slot["phase"]]
            ax.add_patch(Rectangle((k + 0.04, u - 0.4), 0.92, 0.8, facecolor=color, edgecolor="0.35", lw=0.5,
                                   gid="computing" if computing else "held", zorder=1))
    size = 8 if num_units <= 8 else 5
    boundaries = [(k, s["before"]) for k, s in enumerate(slots)]
    if slots:
        boundaries.append((len(slots), slots[-1].get("after", [])))
    for x, events in boundaries:
        by_unit: dict[int, list[str]] = {}
        for kind, u in events:
            by_unit.setdefault(u, []).append(kind)
            counts[kind] += 1
        for u, kinds in by_unit.items():
            width = 0.3 * (len(kinds) - 1)
            for j, kind in enumerate(kinds):
                marker, color, _ = _EVENT_STYLE[kind]
                dx = -width / 2 + 0.3 * j
                ax.plot([x + dx], [u], marker=marker, color=color, ms=size if marker != "x" else size + 1,
                        mew=2.2 if marker == "x" else 0.8, mec="k" if marker != "x" else color, ls="none",
                        zorder=3, gid=kind)
    held = max((len(s["gathered"]) for s in slots), default=0)
    ax.axvline(num_units, color="0.3", ls="--", lw=1)
    ax.text(num_units / 2, -0.75, "forward →", ha="center", va="bottom", fontsize=8, color="0.3")
    ax.text(1.5 * num_units, -0.75, "← backward", ha="center", va="bottom", fontsize=8, color="0.3")
    ax.set_xlim(-0.4, 2 * num_units + 0.4)
    ax.set_ylim(num_units - 0.45, -1.0)
    ax.set_yticks(range(num_units), [f"unit {u}" for u in range(num_units)], fontsize=8)
    many = len(slots) > 24
    ax.set_xticks([k + 0.5 for k in range(len(slots))], _slot_labels(slots), fontsize=6 if many else 8,
                  rotation=90 if many else 0)
    ax.tick_params(length=0)
    for k in range(len(slots) + 1):
        ax.axvline(k, color="0.9", lw=0.5, zorder=0)
    ax.set_title(f"{mode_name(reshard_after_forward)} (reshard_after_forward={reshard_after_forward}): "
                 f"{counts['all_gather']} all-gathers, {counts['reduce_scatter']} reduce-scatters, "
                 f"at most {held} of {num_units} unit(s) materialised at once", fontsize=9, loc="left")
    return counts | {"max_gathered": held}


def plot_availability(num_units: int, reshard_after_forward: bool | Sequence[bool] = True) -> Figure:
    """Units × time: whose full parameters exist during each computation of one step.

    Rows are units, columns the compute slots of :func:`step_timeline` (``F0`` = forward of unit
    0, ``B0`` = its backward). A filled cell means the unit's full parameters are materialised
    during that slot (dark: the unit computing, light: held for later); an empty cell means the
    rank holds only its ``1/N`` shard. Markers at the slot boundaries are the schedule's events:
    ▼ all-gather, ■ reduce-scatter, ✕ free. ``reshard_after_forward`` may be a sequence, e.g.
    ``(True, False)``, to stack FULL_SHARD over SHARD_GRAD_OP on the same time axis.
    """
    modes = [reshard_after_forward] if isinstance(reshard_after_forward, bool) else list(reshard_after_forward)
    if not modes or num_units < 1:
        raise ValueError("need num_units >= 1 and at least one mode")
    fig = Figure(figsize=(max(9.0, min(13.0, 2.2 + 0.42 * 2 * num_units)),
                          0.6 + len(modes) * (0.9 + 0.32 * num_units) + 0.5), layout="constrained")
    axes = fig.subplots(len(modes), 1, sharex=True, squeeze=False)[:, 0]
    for ax, mode in zip(axes, modes):
        _draw_availability(ax, num_units, bool(mode))
    axes[-1].set_xlabel("time → compute slots (F = forward, B = backward of a unit); "
                        "communication and frees on the boundaries", fontsize=9)
    handles = [Patch(facecolor=_COMPUTE_COLOR["forward"], edgecolor="0.35", label="computing forward"),
               Patch(facecolor=_COMPUTE_COLOR["backward"], edgecolor="0.35", label="computing backward"),
               Patch(facecolor=_HELD_COLOR["forward"], edgecolor="0.35", label="gathered, waiting"),
               Patch(facecolor="w", edgecolor="0.35", label="shard only (1/N)")]
    handles += [Line2D([], [], marker=m, color=c, mec="k" if m != "x" else c, ls="none", ms=7, label=lab)
                for m, c, lab in _EVENT_STYLE.values()]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=7, frameon=False)
    return fig


# --------------------------------------------------------------------------- live memory


def plot_live_parameter_memory(unit_numels: Sequence[int], world_size: int,
                               reshard_after_forward: bool | None = True, bytes_per_param: int = 2) -> Figure:
    """Parameter bytes allocated on one rank through a step: FULL_SHARD, SHARD_GRAD_OP, replicated.

    From :func:`live_parameter_bytes`. The x axis is the step's compute slots (as in
    :func:`plot_availability`) with a slot *between steps* on each side (where the optimizer
    runs and the checkpoint is written: only the shards remain). ``reshard_after_forward``
    selects the highlighted curve (``None``: replicated) whose peak is annotated.
    """
    if len(unit_numels) < 1:
        raise ValueError("need at least one unit")
    results = {mode: live_parameter_bytes(unit_numels, world_size, mode, bytes_per_param)
               for mode in (True, False, None)}
    units = len(unit_numels)
    fig = Figure(figsize=(max(7.0, min(13.0, 3.0 + 0.4 * 2 * units)), 4.0), layout="constrained")
    ax = fig.add_subplot()
    edges = list(range(-1, 2 * units + 2))
    top = 0.0
    for mode in (None, False, True):
        res = results[mode]
        values = [res["between_steps"], *(b for _, _, b in res["slots"]), res["between_steps"]]
        top = max(top, *values)
        chosen = mode == reshard_after_forward
        label = (f"{mode_name(mode)}: peak {format_bytes(res['peak'])}, "
                 f"between steps {format_bytes(res['between_steps'])}")
        ax.stairs(values, edges, color=_MODE_COLOR[mode], lw=2.6 if chosen else 1.3, ls="-" if chosen else "--",
                  baseline=None, label=label, zorder=3 if chosen else 2)
        if chosen:
            ax.stairs(values, edges, color=_MODE_COLOR[mode], alpha=0.12, fill=True, zorder=1)
            k = res["peak_slot"]
            ax.annotate(f"peak {format_bytes(res['peak'])}", xy=(k + 0.5, res["peak"]),
                        xytext=(k + 0.5, res["peak"] + 0.1 * top), ha="center", fontsize=8,
                        arrowprops={"arrowstyle": "->", "color": _MODE_COLOR[mode]}, color=_MODE_COLOR[mode])
    shards = results[True]["between_steps"]
    ax.axhline(shards, color="k", ls=":", lw=1)
    ax.text(edges[-1] - 0.05, shards, f"shards only ≈ Ψ/N = {format_bytes(shards)} ", ha="right", va="top",
            fontsize=7)
    ax.axvline(units, color="0.3", ls="--", lw=1)
    labels = ["before", *_slot_labels(results[True]["slots"]), "optimizer"]
    many = len(labels) > 26
    ax.set_xticks([e + 0.5 for e in edges[:-1]], labels, fontsize=6 if many else 8, rotation=90 if many else 0)
    ax.set_xlim(edges[0], edges[-1])
    ax.set_ylim(0, top * 1.65)
    ax.yaxis.set_major_formatter(FuncFormatter(_bytes_axis))
    ax.set_xlabel("time → compute slots of one step (F = forward, B = backward); no prefetching")
    ax.set_ylabel("parameter bytes allocated on one rank")
    total = sum(unit_numels)
    ax.set_title(f"Live parameters, {units} units, Ψ = {total:,} parameters × {bytes_per_param} B on N = "
                 f"{world_size} ranks\n(gradients and activations not counted)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


# --------------------------------------------------------------------------- traffic and memory


def plot_traffic_vs_memory(num_params: int, world_sizes: Sequence[int], bytes_per_param: int = 2, k: int = 12, *,
                           marked_world_size: int | None = None) -> Figure:
    """Left: ring bytes one rank sends per step; right: persistent model-state bytes per rank.

    Traffic: DDP's gradient all-reduce (``ring_allreduce_bytes``, which ZeRO-1 and ZeRO-2 match),
    SHARD_GRAD_OP and FULL_SHARD (``fsdp_traffic_bytes``), all with ``bytes_per_param``-byte
    parameters and gradients. Memory: mixed-precision Adam with ``k`` bytes of optimizer state
    per parameter, ZeRO stages 0-3 (``adam_memory_bytes``); FSDP (either mode) persists stage 3's
    bytes. World sizes below 2 are skipped (one rank sends nothing).
    """
    ws = sorted({int(n) for n in world_sizes if int(n) >= 2})
    if not ws:
        raise ValueError("need at least one world size >= 2")
    fig = Figure(figsize=(11.0, 4.2), layout="constrained")
    ax_t, ax_m = fig.subplots(1, 2)
    b = bytes_per_param
    curves = [
        ("DDP all-reduce = ZeRO-1/2: 2(N−1)/N·Ψb", [ring_allreduce_bytes(num_params, b, n) for n in ws],
         "#7f7f7f", "-", 4.0),
        ("SHARD_GRAD_OP: 2(N−1)/N·Ψb", [fsdp_traffic_bytes(num_params, b, n, False) for n in ws],
         _MODE_COLOR[False], "--", 2.0),
        ("FULL_SHARD: 3(N−1)/N·Ψb", [fsdp_traffic_bytes(num_params, b, n, True) for n in ws],
         _MODE_COLOR[True], "-", 2.0),
    ]
    for label, ys, color, style, lw in curves:
        ax_t.plot(ws, ys, ls=style, lw=lw, color=color, marker="o", ms=3, label=label, alpha=0.8 if lw > 2 else 1)
    for factor in (2, 3):
        ax_t.axhline(factor * num_params * b, color="k", ls=":", lw=0.8)
        ax_t.text(ws[0], factor * num_params * b, f" {factor}Ψb", va="bottom", fontsize=7)
    ax_t.set_xscale("log", base=2)
    ax_t.set_ylim(0, 4.0 * num_params * b)
    ax_t.yaxis.set_major_formatter(FuncFormatter(_bytes_axis))
    ax_t.set_xlabel("world size N (ranks)")
    ax_t.set_ylabel("bytes one rank sends per step (ring)")
    ax_t.set_title(f"Traffic per step, Ψ = {num_params:.3g} parameters, {b} B each", fontsize=10)
    ax_t.grid(True, alpha=0.3)
    ax_t.legend(fontsize=7, loc="lower right")

    names = {0: "stage 0 (DDP): (2+2+K)Ψ", 1: "stage 1: 4Ψ + KΨ/N", 2: "stage 2: 2Ψ + (2+K)Ψ/N",
             3: "stage 3 (FSDP): (2+2+K)Ψ/N"}
    colors = {0: "#7f7f7f", 1: "#2ca02c", 2: "#1f77b4", 3: "#d62728"}
    for stage, label in names.items():
        ax_m.plot(ws, [adam_memory_bytes(num_params, n, stage, k) for n in ws], marker="o", ms=3,
                  color=colors[stage], lw=2.0 if stage == 3 else 1.3, label=label)
    ax_m.set_xscale("log", base=2)
    ax_m.set_yscale("log")
    lowest = adam_memory_bytes(num_params, ws[-1], 3, k)
    ax_m.set_ylim(lowest / 2, adam_memory_bytes(num_params, 1, 0, k) * 12)
    ax_m.yaxis.set_major_formatter(FuncFormatter(_bytes_axis))
    ax_m.set_xlabel("world size N (ranks)")
    ax_m.set_ylabel("persistent model-state bytes per rank")
    ax_m.set_title(f"Memory per rank, mixed-precision Adam, K = {k} (log scale)", fontsize=10)
    ax_m.grid(True, which="major", alpha=0.3)
    ax_m.legend(fontsize=7, loc="lower left")
    if marked_world_size is not None and marked_world_size >= 2:
        n = int(marked_world_size)
        full = fsdp_traffic_bytes(num_params, b, n, True)
        ddp = ring_allreduce_bytes(num_params, b, n)
        ax_t.axvline(n, color="k", lw=0.8)
        ax_t.plot([n], [full], "o", ms=10, mfc="none", mew=2, color="k")
        ax_t.annotate(f"N = {n}: FULL_SHARD {format_bytes(full)}\nvs DDP {format_bytes(ddp)} (×{full / ddp:.2f})",
                      xy=(n, full), xytext=(0.03, 0.97), textcoords="axes fraction", va="top", fontsize=8)
        s3, s0 = adam_memory_bytes(num_params, n, 3, k), adam_memory_bytes(num_params, n, 0, k)
        ax_m.axvline(n, color="k", lw=0.8)
        ax_m.plot([n], [s3], "o", ms=10, mfc="none", mew=2, color="k")
        ax_m.annotate(f"N = {n}: stage 3 {format_bytes(s3)}\nvs stage 0 {format_bytes(s0)} (÷{s0 / s3:.0f})",
                      xy=(n, s3), xytext=(0.97, 0.97), textcoords="axes fraction", va="top", ha="right", fontsize=8)
    return fig


# --------------------------------------------------------------------------- explorer


def _png(fig: Figure, dpi: int = 80) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)  # a PNG needs no matplotlib backend in the kernel
    return buf.getvalue()


def param_sharding_explorer(num_units: int = 6, world_size: int = 8, num_params: float = 7.5e9,
                            reshard_after_forward: bool = True, bytes_per_param: int = 2, k: int = 12):
    """Sliders for the number of units, N and Ψ, and a FULL_SHARD / SHARD_GRAD_OP switch.

    The model is ``num_params`` parameters split into ``num_units`` equal units
    (:func:`split_params`). Shows the selected mode's availability grid, the live parameter
    memory of all three modes, and traffic and persistent memory against N. Returns an
    ``ipywidgets.VBox`` with ``update()`` (recomputes, redraws, returns the numbers: bytes and
    counts), ``controls`` (the widgets by name) and ``summary`` (the HTML line).
    """
    import ipywidgets as W
    from IPython.display import Image, display

    style, layout = {"description_width": "150px"}, W.Layout(width="520px")
    common = {"style": style, "layout": layout, "continuous_update": False}
    units_slider = W.IntSlider(value=num_units, min=1, max=16, description="units U", **common)
    n_slider = W.IntSlider(value=world_size, min=2, max=1024, description="world size N", **common)
    p_slider = W.FloatLogSlider(value=num_params, base=10, min=6, max=12, step=0.05, description="parameters Ψ",
                                readout_format=".3g", **common)
    mode = W.ToggleButtons(options=[("FULL_SHARD", True), ("SHARD_GRAD_OP", False)], value=reshard_after_forward,
                           description="reshard_after_forward", style=style)
    summary, out = W.HTML(), W.Output()

    def update(*_: Any) -> dict[str, Any]:
        units, n, psi, reshard = int(units_slider.value), int(n_slider.value), int(round(p_slider.value)), mode.value
        numels = split_params(psi, units)
        events = full_shard_schedule(units, reshard)
        live = live_parameter_bytes(numels, n, reshard, bytes_per_param)
        replicated = live_parameter_bytes(numels, n, None, bytes_per_param)
        traffic = fsdp_traffic_bytes(psi, bytes_per_param, n, reshard)
        ddp = ring_allreduce_bytes(psi, bytes_per_param, n)
        result = {
            "num_units": units, "world_size": n, "num_params": psi, "reshard_after_forward": reshard,
            "all_gathers": sum(e[0] == "all_gather" for e in events),
            "reduce_scatters": sum(e[0] == "reduce_scatter" for e in events),
            "traffic_bytes": traffic, "ddp_traffic_bytes": ddp, "traffic_ratio": traffic / ddp,
            "peak_live_bytes": live["peak"], "between_steps_bytes": live["between_steps"],
            "replicated_bytes": replicated["peak"],
            "stage3_bytes": adam_memory_bytes(psi, n, 3, k), "stage0_bytes": adam_memory_bytes(psi, n, 0, k),
        }
        summary.value = (
            f"<b>{mode_name(reshard)}</b>, {units} units: <b>{result['all_gathers']} all-gathers</b> + "
            f"{result['reduce_scatters']} reduce-scatters per step · traffic <b>{format_bytes(traffic)}</b> per rank "
            f"(DDP {format_bytes(ddp)}, ×{result['traffic_ratio']:.2f})<br>"
            f"live parameters: peak <b>{format_bytes(live['peak'])}</b>, between steps "
            f"{format_bytes(live['between_steps'])} (replicated {format_bytes(replicated['peak'])}) · "
            f"persistent Adam state per rank: stage 3 {format_bytes(result['stage3_bytes'])} vs stage 0 "
            f"{format_bytes(result['stage0_bytes'])}")
        figures = [plot_availability(units, reshard),
                   plot_live_parameter_memory(numels, n, reshard, bytes_per_param),
                   plot_traffic_vs_memory(psi, [2 ** e for e in range(1, 11)], bytes_per_param, k,
                                          marked_world_size=n)]
        with out:
            out.clear_output(wait=True)
            for fig in figures:
                display(Image(data=_png(fig), format="png"))
        box.last_result = result
        return result

    controls = {"num_units": units_slider, "world_size": n_slider, "num_params": p_slider,
                "reshard_after_forward": mode}
    for w in controls.values():
        w.observe(update, names="value")
    box = W.VBox([*controls.values(), summary, out])
    box.controls = controls
    box.summary = summary
    box.update = update
    update()
    return box
