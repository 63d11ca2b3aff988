"""Lesson 07, parameter sharding: the chapter's figures and its explorer, drawn from stored results.

Nothing here derives a schedule, a traffic formula or a memory count: every number comes from
``helpers/stored/07_explorer.json`` (:func:`helpers.shared.stored.load`), which the course's instructor
side computes for every slider setting of the explorer. Conventions:

* a step's **slots** are its computations: ``F u`` (forward of unit ``u``) for ``u = 0..U-1``,
  then ``B u`` (backward) for ``u = U-1..0``; slot ``k`` spans ``[k, k+1)`` on every figure's
  time axis, and communication and frees happen at the slot boundaries;
* events are ``[kind, unit]`` with kind ``"all_gather"``, ``"reduce_scatter"`` or ``"free"``;
* sizes are bytes; labels are decimal (kB, MB, GB), like :func:`helpers.shared.plots.format_bytes`.

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
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter

from helpers.shared.plots import format_bytes
from helpers.shared.stored import load

__all__ = [
    "mode_name",
    "stored_results",
    "explorer_case",
    "plot_availability",
    "plot_live_parameter_memory",
    "plot_traffic_vs_memory",
    "param_sharding_explorer",
]

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


# --------------------------------------------------------------------------- stored results


@lru_cache(maxsize=1)
def stored_results() -> dict[str, Any]:
    """``helpers/stored/07_explorer.json``: availability, live bytes, traffic and memory per slider setting."""
    return load("07_explorer")


def _available(key: str, value: Any) -> Any:
    choices = stored_results()[key]
    if value not in choices:
        raise ValueError(f"no stored result for {key} = {value!r}; stored: {choices}")
    return value


def explorer_case(num_params: int, world_size: int, num_units: int) -> dict[str, Any]:
    """The stored numbers of one setting: ``live`` (per mode ``"True"``, ``"False"``, ``"None"``), traffic, memory."""
    key = (f"{_available('num_params', int(num_params))}/{_available('world_sizes', int(world_size))}/"
           f"{_available('num_units', int(num_units))}")
    return stored_results()["cases"][key]


def _availability(num_units: int, reshard_after_forward: bool) -> dict[str, Any]:
    by_mode = stored_results()["availability"][str(_available("num_units", int(num_units)))]
    return by_mode[str(bool(reshard_after_forward))]


def _slot_labels(slots: Sequence[dict[str, Any]]) -> list[str]:
    return [f"{'F' if s['phase'] == 'forward' else 'B'}{s['unit']}" for s in slots]


def _slot_names(num_units: int) -> list[str]:
    return [f"F{u}" for u in range(num_units)] + [f"B{u}" for u in reversed(range(num_units))]


# --------------------------------------------------------------------------- availability


def _draw_availability(ax: Axes, num_units: int, reshard_after_forward: bool) -> None:
    step = _availability(num_units, reshard_after_forward)
    slots = step["slots"]
    for k, slot in enumerate(slots):
        for u in slot["gathered"]:
            computing = u == slot["unit"]
            color = _COMPUTE_COLOR[slot["phase"]] if computing else _HELD_COLOR[slot["phase"]]
            ax.add_patch(Rectangle((k + 0.04, u - 0.4), 0.92, 0.8, facecolor=color, edgecolor="0.35", lw=0.5,
                                   gid="computing" if computing else "held", zorder=1))
    size = 8 if num_units <= 8 else 5
    boundaries = [(k, s["before"]) for k, s in enumerate(slots)] + [(len(slots), step["after"])]
    for x, events in boundaries:
        by_unit: dict[int, list[str]] = {}
        for kind, u in events:
            by_unit.setdefault(u, []).append(kind)
        for u, kinds in by_unit.items():
            width = 0.3 * (len(kinds) - 1)
            for j, kind in enumerate(kinds):
                marker, color, _ = _EVENT_STYLE[kind]
                ax.plot([x - width / 2 + 0.3 * j], [u], marker=marker, color=color,
                        ms=size if marker != "x" else size + 1, mew=2.2 if marker == "x" else 0.8,
                        mec="k" if marker != "x" else color, ls="none", zorder=3, gid=kind)
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
                 f"{step['all_gathers']} all-gathers, {step['reduce_scatters']} reduce-scatters, "
                 f"at most {step['max_gathered']} of {num_units} unit(s) materialised at once", fontsize=9, loc="left")


def plot_availability(num_units: int, reshard_after_forward: bool | Sequence[bool] = True) -> Figure:
    """Units × time: whose full parameters exist during each computation of one step (stored schedule).

    Rows are units, columns the compute slots (``F0`` = forward of unit 0, ``B0`` = its
    backward). A filled cell means the unit's full parameters are materialised during that slot
    (dark: the unit computing, light: held for later); an empty cell means the rank holds only its
    ``1/N`` shard. Markers at the slot boundaries are the schedule's events: ▼ all-gather,
    ■ reduce-scatter, ✕ free. ``reshard_after_forward`` may be a sequence, e.g. ``(True, False)``,
    to stack FULL_SHARD over SHARD_GRAD_OP on the same time axis.
    """
    modes = [reshard_after_forward] if isinstance(reshard_after_forward, bool) else list(reshard_after_forward)
    if not modes:
        raise ValueError("need at least one mode")
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


def plot_live_parameter_memory(num_params: int, world_size: int, num_units: int,
                               reshard_after_forward: bool | None = True) -> Figure:
    """Parameter bytes allocated on one rank through a step: FULL_SHARD, SHARD_GRAD_OP, replicated.

    ``num_params`` parameters (2 bytes each) split into ``num_units`` equal units on
    ``world_size`` ranks, from the stored results. The x axis is the step's compute slots (as in
    :func:`plot_availability`) with a slot *between steps* on each side (where the optimizer runs
    and the checkpoint is written: only the shards remain). ``reshard_after_forward`` selects the
    highlighted curve (``None``: replicated) whose peak is annotated.
    """
    live = explorer_case(num_params, world_size, num_units)["live"]
    bytes_per_param = stored_results()["bytes_per_param"]
    fig = Figure(figsize=(max(7.0, min(13.0, 3.0 + 0.4 * 2 * num_units)), 4.0), layout="constrained")
    ax = fig.add_subplot()
    edges = list(range(-1, 2 * num_units + 2))
    top = max(max(res["slots"]) for res in live.values())
    for mode in (None, False, True):
        res = live[str(mode)]
        values = [res["between_steps"], *res["slots"], res["between_steps"]]
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
    shards = live["True"]["between_steps"]
    ax.axhline(shards, color="k", ls=":", lw=1)
    ax.text(edges[-1] - 0.05, shards, f"shards only ≈ Ψ/N = {format_bytes(shards)} ", ha="right", va="top",
            fontsize=7)
    ax.axvline(num_units, color="0.3", ls="--", lw=1)
    labels = ["before", *_slot_names(num_units), "optimizer"]
    many = len(labels) > 26
    ax.set_xticks([e + 0.5 for e in edges[:-1]], labels, fontsize=6 if many else 8, rotation=90 if many else 0)
    ax.set_xlim(edges[0], edges[-1])
    ax.set_ylim(0, top * 1.65)
    ax.yaxis.set_major_formatter(FuncFormatter(_bytes_axis))
    ax.set_xlabel("time → compute slots of one step (F = forward, B = backward); no prefetching")
    ax.set_ylabel("parameter bytes allocated on one rank")
    ax.set_title(f"Live parameters, {num_units} units, Ψ = {int(num_params):,} parameters × {bytes_per_param} B on "
                 f"N = {world_size} ranks\n(gradients and activations not counted)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


# --------------------------------------------------------------------------- traffic and memory


def plot_traffic_vs_memory(num_params: int, *, marked_world_size: int | None = None) -> Figure:
    """Left: ring bytes one rank sends per step; right: persistent model-state bytes per rank (stored).

    Traffic: DDP's gradient all-reduce (which ZeRO-1 and ZeRO-2 match), SHARD_GRAD_OP and
    FULL_SHARD, with 2-byte parameters and gradients, for N = 2 .. 1024. Memory: mixed-precision
    Adam with ``K`` bytes of optimizer state per parameter, ZeRO stages 0-3; FSDP (either mode)
    persists stage 3's bytes. ``marked_world_size`` (a power of two) is circled on both panels.
    """
    results = stored_results()
    curves = results["curves"][str(_available("num_params", int(num_params)))]
    ws, b, k = curves["world_sizes"], results["bytes_per_param"], results["k"]
    fig = Figure(figsize=(11.0, 4.2), layout="constrained")
    ax_t, ax_m = fig.subplots(1, 2)
    lines = [
        ("DDP all-reduce = ZeRO-1/2: 2(N−1)/N·Ψb", curves["ddp"], "#7f7f7f", "-", 4.0),
        ("SHARD_GRAD_OP: 2(N−1)/N·Ψb", curves["shard_grad_op"], _MODE_COLOR[False], "--", 2.0),
        ("FULL_SHARD: 3(N−1)/N·Ψb", curves["full_shard"], _MODE_COLOR[True], "-", 2.0),
    ]
    for label, ys, color, style, lw in lines:
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
        ax_m.plot(ws, curves["stages"][stage], marker="o", ms=3, color=colors[stage], lw=2.0 if stage == 3 else 1.3,
                  label=label)
    ax_m.set_xscale("log", base=2)
    ax_m.set_yscale("log")
    ax_m.set_ylim(curves["stages"][3][-1] / 2, curves["stages"][0][0] * 12)
    ax_m.yaxis.set_major_formatter(FuncFormatter(_bytes_axis))
    ax_m.set_xlabel("world size N (ranks)")
    ax_m.set_ylabel("persistent model-state bytes per rank")
    ax_m.set_title(f"Memory per rank, mixed-precision Adam, K = {k} (log scale)", fontsize=10)
    ax_m.grid(True, which="major", alpha=0.3)
    ax_m.legend(fontsize=7, loc="lower left")
    if marked_world_size is not None:
        n = int(marked_world_size)
        if n not in ws:
            raise ValueError(f"marked_world_size must be one of {ws}, got {n}")
        i = ws.index(n)
        full, ddp = curves["full_shard"][i], curves["ddp"][i]
        ax_t.axvline(n, color="k", lw=0.8)
        ax_t.plot([n], [full], "o", ms=10, mfc="none", mew=2, color="k")
        ax_t.annotate(f"N = {n}: FULL_SHARD {format_bytes(full)}\nvs DDP {format_bytes(ddp)} (×{full / ddp:.2f})",
                      xy=(n, full), xytext=(0.03, 0.97), textcoords="axes fraction", va="top", fontsize=8)
        s3, s0 = curves["stages"][3][i], curves["stages"][0][i]
        ax_m.axvline(n, color="k", lw=0.8)
        ax_m.plot([n], [s3], "o", ms=10, mfc="none", mew=2, color="k")
        ax_m.annotate(f"N = {n}: stage 3 {format_bytes(s3)}\nvs stage 0 {format_bytes(s0)} (÷{s0 / s3:.0f})",
                      xy=(n, s3), xytext=(0.97, 0.97), textcoords="axes fraction", va="top", ha="right", fontsize=8)
    return fig


# --------------------------------------------------------------------------- explorer


def param_sharding_explorer(num_units: int = 6, world_size: int = 8, num_params: int = 7_500_000_000,
                            reshard_after_forward: bool = True):
    """Sliders for the number of units, N and Ψ, and a FULL_SHARD / SHARD_GRAD_OP switch (stored grid).

    The model is ``num_params`` parameters split into ``num_units`` equal units. Shows the selected
    mode's availability grid, the live parameter memory of all three modes, and traffic and
    persistent memory against N. Every slider offers exactly the stored settings. Returns an
    ``ipywidgets.VBox`` with ``update()`` (redraws, returns the numbers: bytes and counts),
    ``controls`` (the widgets by name) and ``summary`` (the HTML line).
    """
    import ipywidgets as W
    from helpers.shared.plots import show_figures

    results = stored_results()
    style, layout = {"description_width": "150px"}, W.Layout(width="520px")
    common = {"style": style, "layout": layout, "continuous_update": False}
    units_slider = W.SelectionSlider(options=results["num_units"], value=_available("num_units", num_units),
                                     description="units U", **common)
    n_slider = W.SelectionSlider(options=results["world_sizes"], value=_available("world_sizes", world_size),
                                 description="world size N", **common)
    p_slider = W.SelectionSlider(options=[(f"{p:.3g}", p) for p in results["num_params"]],
                                 value=_available("num_params", int(num_params)), description="parameters Ψ",
                                 **common)
    mode = W.ToggleButtons(options=[("FULL_SHARD", True), ("SHARD_GRAD_OP", False)], value=reshard_after_forward,
                           description="reshard_after_forward", style=style)
    summary, out = W.HTML(), W.Output()

    def update(*_: Any) -> dict[str, Any]:
        units, n, psi, reshard = units_slider.value, n_slider.value, p_slider.value, mode.value
        case, step = explorer_case(psi, n, units), _availability(units, reshard)
        live, replicated = case["live"][str(reshard)], case["live"]["None"]
        traffic, ddp = case["traffic"][str(reshard)], case["ddp_traffic"]
        result = {
            "num_units": units, "world_size": n, "num_params": psi, "reshard_after_forward": reshard,
            "all_gathers": step["all_gathers"], "reduce_scatters": step["reduce_scatters"],
            "traffic_bytes": traffic, "ddp_traffic_bytes": ddp, "traffic_ratio": traffic / ddp,
            "peak_live_bytes": live["peak"], "between_steps_bytes": live["between_steps"],
            "replicated_bytes": replicated["peak"], "stage3_bytes": case["stage3_bytes"],
            "stage0_bytes": case["stage0_bytes"],
        }
        summary.value = (
            f"<b>{mode_name(reshard)}</b>, {units} units: <b>{result['all_gathers']} all-gathers</b> + "
            f"{result['reduce_scatters']} reduce-scatters per step · traffic <b>{format_bytes(traffic)}</b> per rank "
            f"(DDP {format_bytes(ddp)}, ×{result['traffic_ratio']:.2f})<br>"
            f"live parameters: peak <b>{format_bytes(live['peak'])}</b>, between steps "
            f"{format_bytes(live['between_steps'])} (replicated {format_bytes(replicated['peak'])}) · "
            f"persistent Adam state per rank: stage 3 {format_bytes(result['stage3_bytes'])} vs stage 0 "
            f"{format_bytes(result['stage0_bytes'])}")
        figures = [plot_availability(units, reshard), plot_live_parameter_memory(psi, n, units, reshard),
                   plot_traffic_vs_memory(psi, marked_world_size=n)]
        show_figures(out, figures, dpi=80)
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
