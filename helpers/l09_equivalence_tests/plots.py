"""Lesson 09, equivalence tests: the chapter's figures, tables and explorer, drawn from stored results.

An **update state** is a flat ``dict[str, Tensor]`` per optimizer step with the keys
``loss``, ``clip_coef``, ``mask``, ``grad/<name>``, ``param/<name>``, ``exp_avg/<name>``,
``exp_avg_sq/<name>``, ``step/<name>``. The course's checker judges a run against the float64
reference with a relative 2-norm tolerance per key, calibrated on a known-correct run at the
run's precision (``SAFETY`` times that run's worst error, never below float32's epsilon). Its
verdicts, and the errors it measured, are computed on the instructor side and stored with the
course (:mod:`helpers.shared.stored`); the functions here only draw them:

* ``load("09_zoo")``: per zoo run and step, each key's relative 2-norm error, its
  **tolerance ratio** ``||c - r||_2 / (tolerance * ||r||_2 + 1e-12)`` (below 1 passes),
  the keys the checker rejects, the calibrated tolerances, and the smallest safety factor at
  which each key passes; errors below float32's epsilon (``zoo["floor"]``) are stored as that
  epsilon, since below it their value depends on the CPU;
* ``load("09_zoo_verdicts")``: the checker's first divergence on every zoo run, with the keys
  near their tolerance (within ``margin``), whose verdict may differ on another CPU;
* ``load("09_checker_verdicts")``: the verdicts of plausible but wrong checkers, under this
  CPU's kernels and under portable ones (another CPU, simulated);
* ``load("09_adam_scale_invariance")``: differences a gradient scale leaves in each family.

Figures are :class:`matplotlib.figure.Figure` objects built without ``pyplot`` (see
:mod:`helpers.shared.plots`). The explorer returns an ``ipywidgets.VBox`` with an ``update()``
method that redraws and returns the numbers, so it also runs headless.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from matplotlib.colors import BoundaryNorm, ListedColormap, LogNorm
from matplotlib.figure import Figure

from helpers.l09_equivalence_tests import FAMILIES, dtype_name, key_family, ordered_keys
from helpers.shared.plots import COLORS

__all__ = [
    "FAMILIES",
    "SAFETY",
    "key_family",
    "ordered_keys",
    "dtype_name",
    "summarize_keys",
    "layernorm_cancellation",
    "verdict_table",
    "plot_adam_scale_invariance",
    "plot_cancellation",
    "plot_divergence_heatmap",
    "plot_error_vs_tolerance",
    "plot_checker_verdicts",
    "plot_key_grid",
    "equivalence_explorer",
]

SAFETY = 4.0
"""The course's safety factor: a tolerance is this many times the calibration run's error."""

_RATIO_MIN, _RATIO_MAX = 1e-4, 1e4
_FAIL = _WRONG = "#d62728"
_RUN_COLORS = [COLORS[0], COLORS[3], COLORS[4], COLORS[2], COLORS[5], COLORS[6]]


def summarize_keys(keys: Sequence[str]) -> str:
    """``['clip_coef', 'grad/a', 'grad/b'] -> 'clip_coef, grad/* (2)'`` (families in figure order)."""
    counts: dict[str, int] = {}
    for key in keys:
        counts[key_family(key)] = counts.get(key_family(key), 0) + 1
    parts = []
    for fam in ordered_keys(counts):
        whole = [k for k in keys if key_family(k) == fam]
        parts.append(whole[0] if len(whole) == 1 and "/" not in whole[0] else f"{fam}/* ({counts[fam]})")
    return ", ".join(parts) if parts else "-"


def _broken(zoo: Mapping[str, Any]) -> set[str]:
    return {name for name, run in zoo["runs"].items() if run["bug"]}


def _value(stored: float | None) -> float:
    """A stored error or ratio; ``None`` stands for infinity (JSON has none)."""
    return math.inf if stored is None else stored


# --------------------------------------------------------------------------- a single-process experiment


def layernorm_cancellation(rows: int = 64, width: int = 16, dtype: torch.dtype = torch.bfloat16,
                           seed: int = 0) -> dict[str, Any]:
    """Measure how cancellation in LayerNorm's backward magnifies rounding of its inputs.

    The input ``x`` and the upstream gradient ``dy`` (``rows x width``, standard normal) are
    rounded to ``dtype``, as bf16 autocast leaves them, and the input gradient is computed in
    float32 (autocast runs LayerNorm in float32) and in float64 from the unrounded inputs.
    With ``x_hat`` the normalised input and ``sigma`` its standard deviation,

        dx = (a - mean(a) - x_hat * mean(a * x_hat)) / sigma,   a = dy * gamma (gamma = 1),

    and the **cancellation factor** of an element is ``(|a| + |mean(a)| + |x_hat mean(a x_hat)|) / |a - ...|``.
    Returns ``kappa`` and ``elementwise`` (relative errors ``|c_i - r_i| / |r_i|``) as flat
    float64 tensors, ``norm_error`` (``||c - r||_2 / ||r||_2`` of the whole tensor) and ``eps``.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g, dtype=torch.float64)
    dy = torch.randn(rows, width, generator=g, dtype=torch.float64)

    def input_grad(xin: torch.Tensor, dyin: torch.Tensor) -> torch.Tensor:
        leaf = xin.detach().clone().requires_grad_(True)
        torch.nn.functional.layer_norm(leaf, (width,)).backward(dyin)
        return leaf.grad.double()

    reference = input_grad(x, dy)
    diff = input_grad(x.to(dtype).float(), dy.to(dtype).float()) - reference
    sigma = (x.var(dim=1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    x_hat = (x - x.mean(dim=1, keepdim=True)) / sigma
    mean_a = dy.mean(dim=1, keepdim=True).expand_as(dy)
    proj = x_hat * (dy * x_hat).mean(dim=1, keepdim=True)
    kappa = (dy.abs() + mean_a.abs() + proj.abs()) / (dy - mean_a - proj).abs()
    return {"kappa": kappa.flatten(), "elementwise": (diff.abs() / reference.abs()).flatten(),
            "norm_error": (diff.norm() / reference.norm()).item(), "eps": torch.finfo(dtype).eps, "dtype": dtype,
            "rows": rows, "width": width}


# --------------------------------------------------------------------------- tables


def verdict_table(verdicts: Mapping[str, Any]) -> str:
    """Plain-text table of the course checker's verdict on every run, each at its own dtype.

    ``verdicts`` is ``load("09_zoo_verdicts")``: ``{"names": [...], "runs": {run: {"dtype", "bug",
    "as": {dtype: {"step", "keys", "near"} or None}}}}``. Keys near their tolerance are marked ``~``.
    """
    width = max(len(n) for n in verdicts["names"]) + 2
    lines = [f"{'run':<{width}}{'dtype':<7}{'bug?':<6}{'verdict':<9}{'step':<6}keys that differ at that step",
             "-" * (width + 28 + 40)]
    for name in verdicts["names"]:
        run = verdicts["runs"][name]
        found = run["as"][run["dtype"]]
        verdict, step, keys = ("pass", "-", "-") if found is None else ("FAIL", str(found["step"]), _with_near(found))
        lines.append(f"{name:<{width}}{dtype_name(run['dtype'], True):<7}{'yes' if run['bug'] else 'no':<6}"
                     f"{verdict:<9}{step:<6}{keys}")
    return "\n".join(lines)


def _with_near(found: Mapping[str, Any]) -> str:
    """``summarize_keys`` of a verdict's keys, then ``~`` and the keys near their tolerance, if any."""
    near = [k for k in found["near"] if k in found["keys"]]
    return summarize_keys(found["keys"]) + (f"  (~ near: {summarize_keys(near)})" if near else "")


# --------------------------------------------------------------------------- colours


def _ratio_cmap() -> ListedColormap:
    """Greens below 1 (the tolerance), reds above, with a visible jump at 1."""
    from matplotlib import colormaps

    greens, reds = colormaps["Greens"], colormaps["Reds"]
    low = [greens(0.75 - 0.6 * i / 127) for i in range(128)]    # dark green far below -> pale at 1
    high = [reds(0.35 + 0.6 * i / 127) for i in range(128)]     # orange-red at 1 -> dark red far above
    return ListedColormap(low + high, name="tolerance_ratio")


def _ratio_norm() -> LogNorm:
    return LogNorm(vmin=_RATIO_MIN, vmax=_RATIO_MAX, clip=True)


def _shown(ratio: float) -> float:
    return min(max(ratio, _RATIO_MIN), _RATIO_MAX) if math.isfinite(ratio) else _RATIO_MAX


def _fmt_ratio(ratio: float) -> str:
    if ratio == 0.0:
        return "0"
    if not math.isfinite(ratio):
        return "∞"
    if 0.01 <= ratio < 100:
        return f"{ratio:.2g}"
    mantissa, exponent = f"{ratio:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _text_color(ratio: float) -> str:
    v = _ratio_norm()(_shown(ratio))
    return "white" if v < 0.2 or v > 0.75 else "black"


def _ratio_colorbar(fig: Figure, mappable: Any, ax: Any, label: str) -> None:
    bar = fig.colorbar(mappable, ax=ax, pad=0.01, fraction=0.04, aspect=25, extend="both")
    bar.set_label(label)
    bar.ax.axhline(1.0, color="black", linewidth=2)
    bar.ax.text(-0.25, 1.0, "1 = tolerance", transform=bar.ax.get_yaxis_transform(), ha="right", va="center",
                fontsize=7, rotation=90)


def _rect(x: float, y: float, w: float, h: float, color: str, **style: Any) -> Any:
    """A filled rectangle (data units), no edge unless ``style`` gives one (``edgecolor``, ``linestyle``)."""
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, facecolor=color, **{"edgecolor": "none", **style})


# --------------------------------------------------------------------------- figures


def plot_adam_scale_invariance(data: Mapping[str, Any]) -> Figure:
    """Relative difference to the unscaled run after a gradient scale ``s``, two set-ups.

    ``data`` is ``load("09_adam_scale_invariance")``: for each set-up, the worst relative
    2-norm difference per key family after 3 float64 steps, one value per scale. Left: a
    fresh Adam without clipping (the moments scale by ``s`` and ``s**2``, the parameters
    barely move). Right: the course's resumed Adam with global-norm clipping (only the clip
    coefficient, ``~1/s``, shows the scale). A horizontal line marks the tightest float32
    tolerance a calibration gives (4 float32 epsilons).
    """
    scales, families, setups = data["scales"], data["families"], data["setups"]
    if not scales or not setups:
        raise ValueError("no scales or no set-ups")
    floor = 1e-17
    fig = Figure(figsize=(10.5, 3.9), layout="constrained")
    axes = fig.subplots(1, len(setups), sharey=True, squeeze=False)[0]
    markers = dict(grad="s", exp_avg="o", exp_avg_sq="^", param="D", clip_coef="v", loss="x")
    fp32_tol = data["float32_tolerance"]
    for ax, setup in zip(axes, setups):
        for k, fam in enumerate(families):
            strong = fam in ("param", "clip_coef")
            ax.plot(scales, [max(v, floor) for v in setup["difference"][fam]], marker=markers.get(fam, "o"),
                    color=COLORS[k % len(COLORS)], label=fam, linestyle="-" if strong else "--",
                    linewidth=2.2 if strong else 1.2, markersize=7 if fam == "grad" else 5)
        ax.axhline(fp32_tol, color="black", linewidth=1, linestyle=":")
        ax.text(scales[0], fp32_tol * 2.5, f"tightest float32 tolerance {fp32_tol:.2g}", fontsize=7)
        ax.axhline(floor, color="0.6", linewidth=0.8)
        ax.text(scales[0], floor * 3, "identical (difference 0)", fontsize=7, color="0.35")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("gradient scale s")
        ax.set_title(setup["title"], fontsize=10)
    axes[0].set_ylabel("relative 2-norm difference to s = 1\n(worst tensor, after 3 steps)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right center", fontsize=8)
    fig.suptitle("Gradients scaled by s (s = N: summed over N ranks instead of averaged): Adam divides the "
                 "scale out, clipping normalises it", fontsize=10.5)
    return fig


def plot_cancellation(result: Mapping[str, Any], ulps: float = 64) -> Figure:
    """Elementwise relative error (in ulps of the dtype) against the cancellation factor.

    ``result`` is :func:`layernorm_cancellation`'s dict. Lines: ``error = kappa`` ulps (the
    rounding of the inputs times the cancellation), an elementwise bound of ``ulps``, and the
    relative 2-norm error of the whole tensor.
    """
    kappa, err, eps = result["kappa"], result["elementwise"] / result["eps"], result["eps"]
    if kappa.numel() != err.numel() or kappa.numel() == 0:
        raise ValueError("kappa and elementwise must be non-empty and of equal size")
    floor = 1e-3
    shown = err.clamp(min=floor)
    fig = Figure(figsize=(7.2, 4.0), layout="constrained")
    ax = fig.add_subplot()
    over = err > ulps
    ax.scatter(kappa[~over], shown[~over], s=9, color=COLORS[0], alpha=0.6, label="element within tolerance")
    ax.scatter(kappa[over], shown[over], s=16, color=COLORS[1], label=f"element beyond {ulps:g} ulps "
                                                                      f"({int(over.sum())} of {err.numel()})")
    xs = [1.0, float(kappa.max()) * 1.5]
    ax.plot(xs, xs, color="0.3", linestyle=":", label="error = κ ulps (input rounding × cancellation)")
    ax.axhline(ulps, color="black", linewidth=1.2, label=f"elementwise bound {ulps:g} ulps")
    norm_ulps = max(result["norm_error"] / eps, floor)
    ax.axhline(norm_ulps, color=COLORS[2], linestyle="--", linewidth=1.5,
               label=f"relative 2-norm error of the tensor: {result['norm_error'] / eps:.2g} ulps")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("cancellation factor κ = (|a| + |mean a| + |x̂·mean(a x̂)|) / |dx|")
    ax.set_ylabel(f"relative error of the element (ulps of {dtype_name(result['dtype'])})")
    ax.set_title(f"LayerNorm backward, {result['rows']}×{result['width']}, inputs rounded to "
                 f"{dtype_name(result['dtype'])}: max element {float(err.max()):.3g} ulps, "
                 f"2-norm {result['norm_error'] / eps:.2g} ulps", fontsize=9)
    ax.legend(fontsize=7.5, loc="upper left")
    return fig


def plot_divergence_heatmap(zoo: Mapping[str, Any], *, step: int = 0, title: str | None = None) -> Figure:
    """Rows: zoo runs; columns: key families; colour: worst tolerance ratio at ``step`` (log, 1 = tolerance).

    ``zoo`` is ``load("09_zoo")``: each run judged at the tolerances calibrated at its own precision, exact
    families (steps, mask) shown as ``=`` / ``≠``. The right panel gives two verdicts at that
    step, a checker that compares only the loss and the course's checker of the whole update
    state, drawn red when wrong (a broken run passed or a correct run failed). ``title``
    replaces the headline (which counts the broken runs each checker flags). The figure's
    ``last_ratios`` holds the plotted ratios, ``{run: {family: ratio}}``.
    """
    runs, keys, families, names = zoo["runs"], zoo["keys"], zoo["families"], zoo["names"]
    if not names:
        raise ValueError("no runs")
    if not all(0 <= step < len(run["ratios"]) for run in runs.values()):
        raise ValueError(f"step {step} is not in every run")
    broken = _broken(zoo)
    exact_fams = {"mask", "step"} & set(families)
    ratios = [[max(_value(v) for k, v in zip(keys, runs[n]["ratios"][step]) if key_family(k) == f)
               for f in families] for n in names]
    failed = [{key_family(k) for k in runs[n]["failing"][step]} for n in names]

    fig = Figure(figsize=(10.5, 0.45 * len(names) + 2.0), layout="constrained")
    grid = fig.add_gridspec(1, 2, width_ratios=[len(families), 2.4])
    ax, side = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    image = ax.imshow([[_shown(v) for v in row] for row in ratios], cmap=_ratio_cmap(), norm=_ratio_norm(),
                      aspect="auto")
    for i, row in enumerate(ratios):
        for j, value in enumerate(row):
            fails = families[j] in failed[i]
            text = ("≠" if fails else "=") if families[j] in exact_fams else _fmt_ratio(value)
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color=_text_color(value),
                    fontweight="bold" if fails else "normal")
    ax.set_xticks(range(len(families)), families, rotation=30, ha="right")
    ax.set_yticks(range(len(names)), [f"{n} [{dtype_name(runs[n]['dtype'], True)}]" for n in names])
    for tick, name in zip(ax.get_yticklabels(), names):
        tick.set_color(_WRONG if name in broken else "black")
    ax.set_xlabel("key family (worst tensor in the family)")
    ax.set_ylabel("run (red: has a bug)")
    ax.set_xticks([x + 0.5 for x in range(len(families) - 1)], minor=True)
    ax.set_yticks([y + 0.5 for y in range(len(names) - 1)], minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    _ratio_colorbar(fig, image, [ax, side], "‖c − r‖ / (tolerance · ‖r‖)")

    caught_loss = caught_full = 0
    for i, name in enumerate(names):
        verdicts = ["loss" in failed[i], bool(failed[i])]
        caught_loss += name in broken and verdicts[0]
        caught_full += name in broken and verdicts[1]
        for j, fails in enumerate(verdicts):
            right = fails == (name in broken)
            side.add_patch(_rect(j - 0.45, i - 0.4, 0.9, 0.8, "#e6f4e6" if right else "#fbe3e3"))
            side.text(j, i, "FAIL" if fails else "pass", ha="center", va="center", fontsize=8,
                      color="black" if right else _FAIL, fontweight="normal" if right else "bold")
    side.set_xlim(-0.5, 1.5)
    side.set_ylim(len(names) - 0.5, -0.5)
    side.set_xticks([0, 1], ["loss only", "update state"], rotation=30, ha="right")
    side.set_yticks([])
    side.set_xlabel(f"checker's verdict at step {step}\n(red: wrong)")
    for spine in side.spines.values():
        spine.set_visible(False)
    nb = len(broken)
    ax.set_title(f"worst tolerance ratio per key family at step {step}\n(tolerances calibrated at the run's "
                 f"precision; errors below float32's epsilon shown at it)", fontsize=9)
    fig.suptitle(title or (f"A loss-only checker flags {caught_loss} of {nb} broken runs at step {step}; "
                           f"the update state flags {caught_full} of {nb}"), fontsize=11)
    fig.last_ratios = {n: dict(zip(families, r)) for n, r in zip(names, ratios)}
    return fig


def plot_error_vs_tolerance(zoo: Mapping[str, Any], runs: Sequence[str],
                            dtypes: Sequence[str] = ("float32", "bfloat16"), *, step: int | None = None,
                            title: str | None = None) -> Figure:
    """Measured relative 2-norm error of every key, by family, against each key's calibrated tolerance.

    ``zoo`` is ``load("09_zoo")``, ``runs`` the zoo runs to draw. ``step=None`` takes each
    key's worst error over the steps. One dot per key and run; bit-identical keys sit on the
    floor line. Horizontal dashes are each key's tolerance calibrated at each of ``dtypes``;
    dotted lines the former fixed budget, 64 machine epsilons of that dtype.
    """
    if not runs:
        raise ValueError("no runs")
    keys, families = zoo["keys"], zoo["families"]
    floor = 1e-12
    fig = Figure(figsize=(9.5, 4.4), layout="constrained")
    ax = fig.add_subplot()

    def x_of(j: int, q: int, n: int, r: float, runs_here: int) -> float:
        return j - 0.35 + 0.7 / runs_here * (r + 0.5) + (q - (n - 1) / 2) * 0.7 / runs_here * 0.6 / n

    top = floor
    for r, name in enumerate(runs):
        errors = zoo["runs"][name]["errors"]
        steps = range(len(errors)) if step is None else [step]
        xs, ys = [], []
        for j, fam in enumerate(families):
            columns = [i for i, k in enumerate(keys) if key_family(k) == fam]
            for q, i in enumerate(columns):
                err = max(_value(errors[s][i]) for s in steps)
                xs.append(x_of(j, q, len(columns), r, len(runs)))
                ys.append(min(max(err, floor), 1e3))
        top = max(top, max(ys))
        ax.scatter(xs, ys, s=22, color=_RUN_COLORS[r % len(_RUN_COLORS)], alpha=0.85,
                   label=name, zorder=3, marker="osD^v"[r % 5])
    shades = ["black", "0.55", "0.3", "0.75"]
    for k, dtype in enumerate(dtypes):
        tolerances = zoo["tolerances"][dtype]
        xs, ys = [], []
        for j, fam in enumerate(families):
            columns = [key for key in keys if key_family(key) == fam and key in tolerances]
            for q, key in enumerate(columns):
                xs.append(x_of(j, q, len(columns), 0.5 * (len(runs) - 1), len(runs)))
                ys.append(tolerances[key])
        ax.scatter(xs, ys, marker="_", s=260, linewidths=2.2, color=shades[k % len(shades)], zorder=2,
                   label=f"tolerance calibrated at {dtype} (one dash per key)")
        old = zoo["old_tolerance"][dtype]
        ax.axhline(old, color=shades[k % len(shades)], linestyle=":", linewidth=1.1,
                   label=f"former fixed budget for {dtype}: 64·eps = {old:.2g}")
        top = max(top, max(ys), old)
    ax.axhline(floor, color="0.6", linewidth=0.8)
    ax.text(len(families) - 0.5, floor * 2, "bit-identical", ha="right", fontsize=7, color="0.35")
    ax.set_yscale("log")
    ax.set_ylim(floor / 3, top * 30)
    ax.set_xticks(range(len(families)), families)
    for x in range(len(families) - 1):
        ax.axvline(x + 0.5, color="0.9", linewidth=0.8, zorder=0)
    ax.set_xlabel("key family (one dot per tensor)")
    where = "\n(worst over the steps)" if step is None else f"\n(step {step})"
    ax.set_ylabel("relative error ‖c − r‖₂ / ‖r‖₂" + where)
    ax.set_title(title or "Measured error against each key's calibrated tolerance: a correct run's error depends "
                          "on the precision and on the key", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize=8, ncol=3)
    return fig


def plot_checker_verdicts(data: Mapping[str, Any], title: str | None = None) -> Figure:
    """Rows: checkers; columns: runs; each cell the checker's verdict under each kernel set, red when wrong.

    ``data`` is ``load("09_checker_verdicts")``: verdicts under the native kernels of the CPU that stored them and under
    portable ones (``data["kernels"]``). A cell reads ``FAIL@k`` (rejected at step ``k``) or
    ``pass``; green when it agrees with ``data["broken"]`` under every kernel set, red when it
    is wrong under every one, amber (both verdicts, ``native | portable``) when the kernels
    disagree. A dotted frame marks verdicts decided by a key near its tolerance
    (``data["near_tolerance"]``): another CPU may give the other verdict. The figure's
    ``wrong_counts`` holds ``{checker: verdicts wrong under some kernel set}``.
    """
    kernels, broken, runs = data["kernels"], set(data["broken"]), data["names"]
    checkers = [name for name, _ in data["checkers"]]
    if not checkers:
        raise ValueError("no checkers")
    fig = Figure(figsize=(1.05 * len(runs) + 3.2, 0.42 * len(checkers) + 2.8), layout="constrained")
    ax = fig.add_subplot()
    wrong_counts = []
    for i, checker in enumerate(checkers):
        wrong = 0
        for j, run in enumerate(runs):
            steps = [k["verdicts"][checker][run] for k in kernels]
            rights = [(step is not None) == (run in broken) for step in steps]
            wrong += not all(rights)
            colour = "#e6f4e6" if all(rights) else "#f4b6b6" if not any(rights) else "#fbd98c"
            near = run in data["near_tolerance"].get(checker, ())
            ax.add_patch(_rect(j - 0.47, i - 0.42, 0.94, 0.84, colour, linestyle=":" if near else "-",
                               edgecolor="0.3" if near else "none"))
            text = " | ".join(dict.fromkeys("pass" if step is None else f"FAIL@{step}" for step in steps))
            ax.text(j, i, text, ha="center", va="center", fontsize=7 if "|" in text else 8,
                    fontweight="normal" if all(rights) else "bold", color="black" if all(rights) else "#8b0000")
        wrong_counts.append(wrong)
    ax.set_xlim(-0.5, len(runs) - 0.5)
    ax.set_ylim(len(checkers) - 0.5, -0.5)
    ax.set_xticks(range(len(runs)), runs, rotation=35, ha="right")
    for tick, run in zip(ax.get_xticklabels(), runs):
        tick.set_color(_WRONG if run in broken else "black")
    ax.set_yticks(range(len(checkers)), [f"{c}  ({w} wrong)" for c, w in zip(checkers, wrong_counts)])
    ax.set_xlabel("run (red: has a bug)")
    ax.set_ylabel("checker")
    for spine in ax.spines.values():
        spine.set_visible(False)
    names = " | ".join("portable kernels" if k["env"] else "native kernels" for k in kernels)
    ax.set_title(title or ("Verdicts over all steps (FAIL@k: rejected at step k); red: wrong, amber: the kernels "
                           f"disagree ({names}); dotted: decided near the tolerance"), fontsize=9)
    fig.wrong_counts = dict(zip(checkers, wrong_counts))
    return fig


def _failing(zoo: Mapping[str, Any], run: str, dtype: str, factor: float) -> list[list[str]]:
    """Per step, the keys that fail at ``factor`` times ``dtype``'s calibration: a lookup in the stored grid."""
    notch = zoo["factors"].index(factor)
    keys = zoo["keys"]
    return [[k for k, passes in zip(keys, row) if passes is None or passes > notch]
            for row in zoo["runs"][run]["passes_from"][dtype]]


def plot_key_grid(zoo: Mapping[str, Any], run: str, dtype: str, factor: float = SAFETY,
                  title: str | None = None) -> Figure:
    """Rows: steps; columns: every key; colour: the safety factor the key needs with ``dtype``'s calibration;
    ``✗``: fails at ``factor``.

    ``zoo`` is ``load("09_zoo")``; ``factor`` must be one of ``zoo["factors"]`` (1/4, 1/2, 1, ..., 1024).
    """
    if factor not in zoo["factors"]:
        raise ValueError(f"factor must be one of {zoo['factors']}, got {factor}")
    keys, notches = zoo["keys"], zoo["factors"]
    needed = zoo["runs"][run]["passes_from"][dtype]
    failing = _failing(zoo, run, dtype, factor)
    never = len(notches)
    fig = Figure(figsize=(max(6.0, 0.26 * len(keys) + 2.5), 1.0 + 0.42 * len(needed) + 1.6), layout="constrained")
    ax = fig.add_subplot()
    from matplotlib import colormaps

    colours = [colormaps["viridis"](i / (never - 1)) for i in range(never)] + [_FAIL]
    image = ax.imshow([[never if v is None else v for v in row] for row in needed], aspect="auto",
                      cmap=ListedColormap(colours), norm=BoundaryNorm([i - 0.5 for i in range(never + 2)], never + 1))
    for s, row in enumerate(failing):
        for key in row:
            ax.text(keys.index(key), s, "✗", ha="center", va="center", fontsize=8, color="white", fontweight="bold")
    ax.set_xticks(range(len(keys)), [k.split("/", 1)[-1] for k in keys], rotation=90, fontsize=7)
    ax.set_yticks(range(len(needed)), [f"step {s}" for s in range(len(needed))])
    starts = [0] + [j for j in range(1, len(keys)) if key_family(keys[j]) != key_family(keys[j - 1])]
    for x in starts[1:]:
        ax.axvline(x - 0.5, color="black", linewidth=0.8)
    ends = starts[1:] + [len(keys)]
    top = ax.secondary_xaxis("top")
    groups = [(a, b) for a, b in zip(starts, ends) if b - a > 1]  # a lone key is named at the bottom already
    top.set_xticks([(a + b - 1) / 2 for a, b in groups], [key_family(keys[a]) for a, _ in groups], fontsize=8)
    top.tick_params(length=0)
    ax.set_xlabel("key of the update state")
    ax.set_ylabel("optimizer step")
    total = sum(len(row) for row in failing)
    ax.set_title(title or f"{factor:g} × the {dtype} calibration: {total} of {len(keys) * len(needed)} key-steps fail",
                 fontsize=10)
    bar = fig.colorbar(image, ax=ax, pad=0.01, fraction=0.04, aspect=25, ticks=range(0, never + 1, 2))
    bar.ax.set_yticklabels([f"{notches[i]:g}" if i < never else "never" for i in range(0, never + 1, 2)])
    bar.set_label(f"safety factor the key needs ({dtype} calibration)")
    bar.ax.axhline(notches.index(factor) + 0.5, color="white", linewidth=2)
    return fig


# --------------------------------------------------------------------------- explorer

def equivalence_explorer(zoo: Mapping[str, Any], run: str | None = None, factor: float = SAFETY,
                         dtype: str | None = None):
    """Pick a zoo run, a safety factor (log slider 1/4..1024) and a calibration precision; see which keys fail.

    ``zoo`` is ``load("09_zoo")``: every verdict shown is looked up in it. ``dtype=None``
    starts at the chosen run's own precision. Returns an ``ipywidgets.VBox`` with ``update()``
    (redraws, returns the numbers), ``controls`` (``run``, ``factor``, ``dtype``), ``summary``
    (the HTML lines) and ``last_result``.
    """
    import ipywidgets as W
    from helpers.shared.plots import show_figures

    runs, names, factors = zoo["runs"], zoo["names"], zoo["factors"]
    run = run or names[0]
    if run not in runs:
        raise ValueError(f"unknown run {run!r}; runs: {names}")
    style, layout = {"description_width": "150px"}, W.Layout(width="520px")
    common = {"style": style, "layout": layout}
    run_box = W.Dropdown(options=names, value=run, description="run", **common)
    factor_slider = W.FloatLogSlider(value=factor, base=2, min=math.log2(factors[0]), max=math.log2(factors[-1]),
                                     step=1, description="safety factor", readout_format=".3g",
                                     continuous_update=False, **common)
    dtype_box = W.Dropdown(options=list(zoo["precisions"]), value=dtype or runs[run]["dtype"],
                           description="calibrated at", **common)
    summary, out = W.HTML(), W.Output()

    def update(*_: Any) -> dict[str, Any]:
        name, d = run_box.value, dtype_box.value
        f = min(factors, key=lambda v: abs(math.log2(v) - math.log2(factor_slider.value)))
        stored = runs[name]
        failing = _failing(zoo, name, d, f)
        first = next(((s, keys) for s, keys in enumerate(failing) if keys), None)
        loss_fails = any("loss" in keys for keys in failing)
        course = next((s for s, keys in enumerate(stored["failing"]) if keys), None)
        broken = bool(stored["bug"])
        result = {"run": name, "run_dtype": stored["dtype"], "dtype": d, "factor": f, "failing": failing,
                  "first_divergence": first, "loss_only_fails": loss_fails, "course_verdict": course,
                  "broken": broken}
        verdict = ("<b style='color:#2ca02c'>passes</b>" if first is None else
                   f"<b style='color:#d62728'>fails</b> first at step {first[0]}: {summarize_keys(first[1])}")
        right = (first is not None) == broken
        summary.value = (
            f"<b>{name}</b> (computes in {stored['dtype']}): {stored['bug'] or 'a correct run'}<br>"
            f"at {f:g} × the {d} calibration run's error the update-state check {verdict}"
            + (" ✓ right verdict" if right else " ✗ <b>wrong verdict</b>") + "<br>"
            f"a loss-only check at this tolerance would {'fail' if loss_fails else 'pass'} it · the course's "
            f"checker ({SAFETY:g} × the {stored['dtype']} calibration) "
            + ("passes it" if course is None else f"fails it at step {course}"))
        fig = plot_key_grid(zoo, name, d, f, title=f"{name}: {f:g} × the {d} calibration")
        show_figures(out, [fig], dpi=80)
        box.last_result = result
        return result

    controls = {"run": run_box, "factor": factor_slider, "dtype": dtype_box}
    for w in controls.values():
        w.observe(update, names="value")
    box = W.VBox([run_box, factor_slider, dtype_box, summary, out])
    box.controls = controls
    box.summary = summary
    box.update = update
    update()
    return box
