"""Lesson 09, equivalence tests: the chapter's measurements, figures and explorer.

Everything here reads update states as :mod:`helpers.equivalence` defines them (a flat
``dict[str, Tensor]`` per optimizer step: ``loss``, ``clip_coef``, ``mask``, ``grad/<name>``,
``param/<name>``, ``exp_avg/<name>``, ``exp_avg_sq/<name>``, ``step/<name>``) and judges them
with the same rule as the reference checker there: a tensor matches when
``||c - r||_2 <= rtol * ||r||_2 + 1e-12``, ``rtol = ulps * finfo(dtype).eps`` (64 ulps by
default), with ``step/*`` and bool masks compared exactly (``rtol = 0``).

The figures colour a **tolerance ratio**, ``||c - r||_2 / (rtol * ||r||_2 + 1e-12)``: below 1
the tensor passes, above 1 it fails, so one colour scale serves every dtype. A run is passed
around as ``runs = {name: (compute dtype, [state per step])}``, what
:func:`helpers.equivalence.run_zoo` returns.

Figures are :class:`matplotlib.figure.Figure` objects built without ``pyplot`` (see
:mod:`helpers.plots`). The explorer returns an ``ipywidgets.VBox`` with an ``update()``
method that recomputes, redraws and returns the numbers, so it also runs headless.
"""
from __future__ import annotations

import io
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Callable

import torch
from matplotlib.colors import ListedColormap, LogNorm
from matplotlib.figure import Figure

from helpers import equivalence as eq
from helpers.models import TinyMLP
from helpers.plots import _COLORS

__all__ = [
    "FAMILIES",
    "key_family",
    "ordered_keys",
    "dtype_name",
    "relative_error",
    "elementwise_relative_error",
    "tolerance_ratio",
    "state_ratios",
    "family_ratios",
    "failing_keys",
    "summarize_keys",
    "broken_runs",
    "single_process_run",
    "layernorm_cancellation",
    "CHECKERS",
    "checker_verdicts",
    "verdict_table",
    "plot_adam_scale_invariance",
    "plot_cancellation",
    "plot_divergence_heatmap",
    "plot_error_vs_tolerance",
    "plot_checker_verdicts",
    "plot_key_grid",
    "equivalence_explorer",
]

State = dict[str, torch.Tensor]
Runs = Mapping[str, tuple[torch.dtype, Sequence[State]]]

FAMILIES = ("loss", "clip_coef", "mask", "grad", "param", "exp_avg", "exp_avg_sq", "step")
"""Key families of an update state, in the order the figures show them."""

_DTYPE_NAMES = {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16",
                torch.float16: "float16"}
_SHORT = {torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_ABS_SLACK = 1e-12  # the reference checker's absolute slack, so that zero tensors compare equal
_RATIO_MIN, _RATIO_MAX = 1e-4, 1e4
_FAIL = _WRONG = "#d62728"
_RUN_COLORS = [_COLORS[0], _COLORS[3], _COLORS[4], _COLORS[2], _COLORS[5], _COLORS[6]]


def key_family(key: str) -> str:
    """``'grad/fc1.weight' -> 'grad'``; keys without a slash are their own family."""
    return key.split("/", 1)[0]


def ordered_keys(keys: Collection[str]) -> list[str]:
    """Keys grouped by family in :data:`FAMILIES` order (unknown families last), then by name."""
    rank = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(keys, key=lambda k: (rank.get(key_family(k), len(FAMILIES)), k))


def dtype_name(dtype: torch.dtype, short: bool = False) -> str:
    """``torch.bfloat16 -> 'bfloat16'`` (``'bf16'`` when ``short``)."""
    names = _SHORT if short else _DTYPE_NAMES
    return names.get(dtype, str(dtype).replace("torch.", ""))


# --------------------------------------------------------------------------- measuring differences


def relative_error(reference: torch.Tensor, candidate: torch.Tensor) -> float:
    """``||c - r||_2 / ||r||_2`` in float64 (bools count as 0/1); ``inf`` for a shape mismatch.

    A zero reference gives 0 when the candidate is zero too, else ``inf``.
    """
    if candidate is None or reference.shape != candidate.shape:
        return math.inf
    r, c = reference.double(), candidate.double()
    diff, scale = (c - r).norm().item(), r.norm().item()
    if scale == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / scale


def elementwise_relative_error(reference: torch.Tensor, candidate: torch.Tensor) -> torch.Tensor:
    """``|c_i - r_i| / |r_i|`` per element, float64 (``inf`` where ``r_i = 0 != c_i``, 0 where both are 0)."""
    r, c = reference.double(), candidate.double()
    diff = (c - r).abs()
    out = diff / r.abs()
    return torch.where(diff == 0, torch.zeros_like(out), out)


def _exact(key: str, reference: torch.Tensor) -> bool:
    return key.startswith("step/") or reference.dtype == torch.bool


def tolerance_ratio(reference: torch.Tensor, candidate: torch.Tensor | None, rtol: float) -> float:
    """``||c - r||_2 / (rtol * ||r||_2 + 1e-12)``: at most 1 exactly when the reference checker accepts.

    ``rtol = 0`` compares against the checker's absolute slack of ``1e-12`` alone (a step
    counter off by one gives ``1e12``); bool tensors give 0 when equal, else ``inf``, and so do
    a missing candidate or a shape mismatch (``inf``).
    """
    if candidate is None or reference.shape != candidate.shape:
        return math.inf
    if reference.dtype == torch.bool or candidate.dtype == torch.bool:
        return 0.0 if torch.equal(reference.bool(), candidate.bool()) else math.inf
    r, c = reference.double(), candidate.double()
    return (c - r).norm().item() / (rtol * r.norm().item() + _ABS_SLACK)


def state_ratios(reference: State, candidate: State, dtype: torch.dtype,
                 ulps: float = eq.TOLERANCE_ULPS) -> dict[str, float]:
    """Tolerance ratio of every key of ``reference`` (``rtol = ulps * eps(dtype)``, exact for steps and masks)."""
    rtol = ulps * torch.finfo(dtype).eps
    return {key: tolerance_ratio(ref, candidate.get(key), 0.0 if _exact(key, ref) else rtol)
            for key, ref in reference.items()}


def family_ratios(reference: State, candidate: State, dtype: torch.dtype,
                  ulps: float = eq.TOLERANCE_ULPS) -> dict[str, float]:
    """Worst tolerance ratio per key family (families absent from ``reference`` are left out)."""
    worst: dict[str, float] = {}
    for key, ratio in state_ratios(reference, candidate, dtype, ulps).items():
        fam = key_family(key)
        worst[fam] = max(worst.get(fam, 0.0), ratio)
    return worst


def failing_keys(reference: State, candidate: State, dtype: torch.dtype, ulps: float = eq.TOLERANCE_ULPS,
                 keys: Callable[[str], bool] | None = None) -> list[str]:
    """Sorted keys whose tolerance ratio exceeds 1 (only those ``keys`` selects, when given).

    At the default 64 ulps this is :func:`helpers.equivalence.compare_update_states`.
    """
    return sorted(k for k, v in state_ratios(reference, candidate, dtype, ulps).items()
                  if v > 1.0 and (keys is None or keys(k)))


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


def broken_runs(names: Collection[str]) -> set[str]:
    """Names that :data:`helpers.equivalence.ZOO` describes as broken (a description, not ``None``)."""
    return {n for n in names if n in eq.ZOO and eq.ZOO[n][1] is not None}


def _runs(runs: Runs | Mapping[str, Sequence[State]] | Sequence[State], default_dtype: torch.dtype
          ) -> dict[str, tuple[torch.dtype, Sequence[State]]]:
    """Normalise a list of states, ``{name: states}`` or ``{name: (dtype, states)}``."""
    if isinstance(runs, Mapping):
        out = {}
        for name, value in runs.items():
            if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], torch.dtype):
                out[name] = (value[0], value[1])
            else:
                out[name] = (default_dtype, value)
        return out
    return {"run": (default_dtype, runs)}


def _check_runs(reference_steps: Sequence[State], runs: Mapping[str, tuple[torch.dtype, Sequence[State]]]) -> None:
    if not reference_steps:
        raise ValueError("no reference steps")
    if not runs:
        raise ValueError("no runs")
    for name, (_, states) in runs.items():
        if not states:
            raise ValueError(f"run {name!r} has no states")


# --------------------------------------------------------------------------- single-process experiments


def single_process_run(problem: eq.Problem | None = None, *, dtype: torch.dtype = torch.float64,
                       grad_scale: float = 1.0, clip: bool = True, resume_step: int = eq.RESUME_STEP,
                       lr: float = eq.LR) -> list[State]:
    """One process, full batch, like :func:`helpers.equivalence.reference_run`, with knobs.

    ``grad_scale`` multiplies every gradient after backward (``N`` = summing over ``N`` ranks
    instead of averaging); ``clip=False`` skips global-norm clipping (``clip_coef`` 1);
    ``resume_step=0`` starts Adam fresh instead of from the checkpointed moments; ``dtype``
    is the dtype of the model and the data. With the defaults it reproduces the reference.
    """
    problem = problem or eq.make_problem()
    model = TinyMLP(eq.IN_FEATURES, 16, eq.OUT_FEATURES).to(dtype)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(problem.init[n])
    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=eq.BETAS, eps=eq.EPS)
    if resume_step:
        for n, p in model.named_parameters():
            opt.state[p] = {"step": torch.tensor(float(resume_step)),
                            "exp_avg": problem.exp_avg[n].to(dtype).clone(),
                            "exp_avg_sq": problem.exp_avg_sq[n].to(dtype).clone()}
    states = []
    for x, y, mask in problem.batches:
        opt.zero_grad(set_to_none=True)
        loss = eq.masked_mse(model(x.to(dtype)), y.to(dtype), mask, mask.sum().item() * eq.OUT_FEATURES)
        loss.backward()
        for p in model.parameters():
            p.grad.mul_(grad_scale)
        coef = torch.tensor(1.0, dtype=torch.float64)
        if clip:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), eq.MAX_NORM)
            coef = torch.clamp(eq.MAX_NORM / (norm + 1e-6), max=1.0).to(torch.float64)
        opt.step()
        states.append(eq.reference_capture(model, opt, loss, coef, mask))
    return states


def layernorm_cancellation(rows: int = 64, width: int = 16, dtype: torch.dtype = torch.bfloat16,
                           seed: int = 0) -> dict[str, Any]:
    """Measure how cancellation in LayerNorm's backward magnifies rounding of its inputs.

    The input ``x`` and the upstream gradient ``dy`` (``rows x width``, standard normal) are
    rounded to ``dtype``, as bf16 autocast leaves them, and the input gradient is computed in
    float32 (autocast runs LayerNorm in float32) and in float64 from the unrounded inputs.
    With ``x_hat`` the normalised input and ``sigma`` its standard deviation,

        dx = (a - mean(a) - x_hat * mean(a * x_hat)) / sigma,   a = dy * gamma (gamma = 1),

    and the **cancellation factor** of an element is ``(|a| + |mean(a)| + |x_hat mean(a x_hat)|) / |a - ...|``.
    Returns ``kappa`` and ``elementwise`` (relative errors) as flat float64 tensors, ``norm_error``
    (relative 2-norm error of the whole tensor) and ``eps`` (of ``dtype``).
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g, dtype=torch.float64)
    dy = torch.randn(rows, width, generator=g, dtype=torch.float64)

    def input_grad(xin: torch.Tensor, dyin: torch.Tensor) -> torch.Tensor:
        leaf = xin.detach().clone().requires_grad_(True)
        torch.nn.functional.layer_norm(leaf, (width,)).backward(dyin)
        return leaf.grad.double()

    reference = input_grad(x, dy)
    candidate = input_grad(x.to(dtype).float(), dy.to(dtype).float())
    sigma = (x.var(dim=1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    x_hat = (x - x.mean(dim=1, keepdim=True)) / sigma
    mean_a = dy.mean(dim=1, keepdim=True).expand_as(dy)
    proj = x_hat * (dy * x_hat).mean(dim=1, keepdim=True)
    kappa = (dy.abs() + mean_a.abs() + proj.abs()) / (dy - mean_a - proj).abs()
    return {"kappa": kappa.flatten(), "elementwise": elementwise_relative_error(reference, candidate).flatten(),
            "norm_error": relative_error(reference, candidate), "eps": torch.finfo(dtype).eps, "dtype": dtype,
            "rows": rows, "width": width}


# --------------------------------------------------------------------------- checkers to compare


def _loss_only(key: str) -> bool:
    return key == "loss"


def _no_moments_no_step(key: str) -> bool:
    return key_family(key) not in ("exp_avg", "exp_avg_sq", "step")


def _elementwise_fails(reference: State, candidate: State, dtype: torch.dtype) -> list[str]:
    """Keys failing an elementwise ``|c_i - r_i| <= rtol |r_i| + 1e-12`` at the run's tolerance."""
    rtol = eq.tolerance(dtype)
    bad = []
    for key, ref in reference.items():
        cand = candidate.get(key)
        if cand is None or cand.shape != ref.shape:
            bad.append(key)
            continue
        r, c = ref.double(), cand.double()
        tol = 0.0 if _exact(key, ref) else rtol
        if bool(((c - r).abs() > tol * r.abs() + _ABS_SLACK).any()):
            bad.append(key)
    return sorted(bad)


CHECKERS: dict[str, str] = {
    "loss only": "compares the loss, at the run's dtype tolerance",
    "fixed fp32 tolerance": "every key, 64 ulps of float32 for every run",
    "fixed bf16 tolerance": "every key, 64 ulps of bfloat16 for every run",
    "no moments, no step": "every key but exp_avg, exp_avg_sq and step, run's dtype",
    "elementwise rtol": "every key, |c_i - r_i| <= rtol |r_i| per element, run's dtype",
    "update state (reference)": "helpers.equivalence.first_divergence: every key, 2-norm, run's dtype",
}
"""Checkers :func:`checker_verdicts` runs, with what each compares."""


def _first_failing_step(reference_steps: Sequence[State], states: Sequence[State],
                        fails: Callable[[State, State], list[str]]) -> int | None:
    for step, (ref, cand) in enumerate(zip(reference_steps, states)):
        if fails(ref, cand):
            return step
    return None


def checker_verdicts(reference_steps: Sequence[State], runs: Runs) -> dict[str, dict[str, int | None]]:
    """``{checker: {run: first step it rejects, or None when it passes the run}}`` for :data:`CHECKERS`."""
    runs = _runs(runs, torch.float32)
    _check_runs(reference_steps, runs)
    out: dict[str, dict[str, int | None]] = {name: {} for name in CHECKERS}
    for run, (dtype, states) in runs.items():
        choices: dict[str, Callable[[State, State], list[str]]] = {
            "loss only": lambda r, c, d=dtype: failing_keys(r, c, d, keys=_loss_only),
            "fixed fp32 tolerance": lambda r, c: failing_keys(r, c, torch.float32),
            "fixed bf16 tolerance": lambda r, c: failing_keys(r, c, torch.bfloat16),
            "no moments, no step": lambda r, c, d=dtype: failing_keys(r, c, d, keys=_no_moments_no_step),
            "elementwise rtol": lambda r, c, d=dtype: _elementwise_fails(r, c, d),
        }
        for name, fails in choices.items():
            out[name][run] = _first_failing_step(reference_steps, states, fails)
        found = eq.first_divergence(reference_steps, states, dtype)
        out["update state (reference)"][run] = None if found is None else found[0]
    return out


def verdict_table(reference_steps: Sequence[State], runs: Runs, broken: Collection[str] | None = None) -> str:
    """Plain-text table of the reference checker's verdict on every run (first divergence and its keys)."""
    runs = _runs(runs, torch.float32)
    _check_runs(reference_steps, runs)
    broken = broken_runs(runs) if broken is None else set(broken)
    width = max(len(n) for n in runs) + 2
    lines = [f"{'run':<{width}}{'dtype':<7}{'bug?':<6}{'verdict':<9}{'step':<6}keys that differ at that step",
             "-" * (width + 28 + 40)]
    for name, (dtype, states) in runs.items():
        found = eq.first_divergence(reference_steps, states, dtype)
        verdict, step, keys = ("pass", "-", "-") if found is None else ("FAIL", str(found[0]), summarize_keys(found[1]))
        lines.append(f"{name:<{width}}{dtype_name(dtype, True):<7}{'yes' if name in broken else 'no':<6}"
                     f"{verdict:<9}{step:<6}{keys}")
    return "\n".join(lines)


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


# --------------------------------------------------------------------------- figures


def plot_adam_scale_invariance(problem: eq.Problem | None = None,
                               scales: Sequence[float] = (0.5, 2, 4, 8, 16, 64)) -> Figure:
    """Relative difference to the unscaled run after a gradient scale ``s``, two set-ups.

    Left: a fresh Adam (no checkpoint) without clipping: the moments scale by ``s`` and
    ``s**2`` but the parameters barely move (Adam divides the scale out; only ``eps`` sees
    it). Right: the course's resumed Adam with global-norm clipping: clipping normalises the
    scaled gradient, so only the clip coefficient (``~1/s``) shows the scale. Runs
    :func:`single_process_run` in float64 (3 steps); ``s = 1`` is the baseline and is not drawn.
    A horizontal line marks the float32 tolerance (64 ulps): differences below it are
    invisible to any float32 run.
    """
    scales = [float(s) for s in scales if s != 1]
    if not scales or any(s <= 0 for s in scales):
        raise ValueError("scales must be positive and not all 1")
    problem = problem or eq.make_problem()
    floor = 1e-17
    setups = [("fresh Adam, no clipping", dict(clip=False, resume_step=0)),
              ("resumed Adam (step 1000), global-norm clipping", dict(clip=True))]
    fig = Figure(figsize=(10.5, 3.9), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    families = ("grad", "exp_avg", "exp_avg_sq", "param", "clip_coef", "loss")
    markers = dict(grad="s", exp_avg="o", exp_avg_sq="^", param="D", clip_coef="v", loss="x")
    fp32_tol = eq.tolerance(torch.float32)
    for ax, (title, kw) in zip(axes, setups):
        base = single_process_run(problem, **kw)[-1]
        curves: dict[str, list[float]] = {f: [] for f in families}
        for s in scales:
            state = single_process_run(problem, grad_scale=s, **kw)[-1]
            for fam in families:
                keys = [k for k in base if key_family(k) == fam]
                curves[fam].append(max(max(relative_error(base[k], state[k]) for k in keys), floor))
        for k, fam in enumerate(families):
            ax.plot(scales, curves[fam], marker=markers[fam], color=_COLORS[k % len(_COLORS)], label=fam,
                    linestyle="-" if fam in ("param", "clip_coef") else "--",
                    linewidth=2.2 if fam in ("param", "clip_coef") else 1.2, markersize=7 if fam == "grad" else 5)
        ax.axhline(fp32_tol, color="black", linewidth=1, linestyle=":")
        ax.text(scales[0], fp32_tol * 2.5, f"float32 tolerance {fp32_tol:.1g}", fontsize=7)
        ax.axhline(floor, color="0.6", linewidth=0.8)
        ax.text(scales[0], floor * 3, "identical (difference 0)", fontsize=7, color="0.35")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("gradient scale s")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("relative 2-norm difference to s = 1\n(worst tensor, after 3 steps)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right center", fontsize=8)
    fig.suptitle("Gradients scaled by s (s = N: summed over N ranks instead of averaged): Adam divides the "
                 "scale out, clipping normalises it", fontsize=10.5)
    return fig


def plot_cancellation(result: Mapping[str, Any], ulps: float = eq.TOLERANCE_ULPS) -> Figure:
    """Elementwise relative error (in ulps of the dtype) against the cancellation factor.

    ``result`` is :func:`layernorm_cancellation`'s dict. Lines: ``error = kappa`` ulps (the
    rounding of the inputs times the cancellation), the tolerance, and the relative 2-norm
    error of the whole tensor.
    """
    kappa, err, eps = result["kappa"], result["elementwise"] / result["eps"], result["eps"]
    if kappa.numel() != err.numel() or kappa.numel() == 0:
        raise ValueError("kappa and elementwise must be non-empty and of equal size")
    floor = 1e-3
    shown = err.clamp(min=floor)
    fig = Figure(figsize=(7.2, 4.0), layout="constrained")
    ax = fig.add_subplot()
    over = err > ulps
    ax.scatter(kappa[~over], shown[~over], s=9, color=_COLORS[0], alpha=0.6, label="element within tolerance")
    ax.scatter(kappa[over], shown[over], s=16, color=_COLORS[1], label=f"element beyond {ulps:g} ulps "
                                                                      f"({int(over.sum())} of {err.numel()})")
    xs = [1.0, float(kappa.max()) * 1.5]
    ax.plot(xs, xs, color="0.3", linestyle=":", label="error = κ ulps (input rounding × cancellation)")
    ax.axhline(ulps, color="black", linewidth=1.2, label=f"tolerance {ulps:g} ulps")
    norm_ulps = max(result["norm_error"] / eps, floor)
    ax.axhline(norm_ulps, color=_COLORS[2], linestyle="--", linewidth=1.5,
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


def plot_divergence_heatmap(reference_steps: Sequence[State], runs: Runs, *, step: int = 0,
                            broken: Collection[str] | None = None, ulps: float = eq.TOLERANCE_ULPS,
                            title: str | None = None) -> Figure:
    """Rows: runs; columns: key families; colour: worst tolerance ratio at ``step`` (log, 1 = tolerance).

    Each run is judged at its own dtype's tolerance (``ulps`` machine epsilons; exact for steps
    and masks, shown as ``=`` / ``≠``). The right panel gives two verdicts at that step: a
    checker that compares only the loss, and one that compares the whole update state; a
    verdict is drawn red when it is wrong (a broken run passed or a correct run failed).
    ``broken`` defaults to the runs :data:`helpers.equivalence.ZOO` describes as broken;
    ``title`` replaces the figure's headline (which counts the broken runs each checker flags).
    The figure's ``last_ratios`` holds the plotted ratios, ``{run: {family: ratio}}``.
    """
    runs = _runs(runs, torch.float32)
    _check_runs(reference_steps, runs)
    if not 0 <= step < len(reference_steps) or any(len(s) <= step for _, s in runs.values()):
        raise ValueError(f"step {step} is not in every run")
    broken = broken_runs(runs) if broken is None else set(broken)
    ref = reference_steps[step]
    families = [f for f in FAMILIES if any(key_family(k) == f for k in ref)]
    names = list(runs)
    ratios = [[family_ratios(ref, runs[n][1][step], runs[n][0], ulps).get(f, 0.0) for f in families] for n in names]
    exact_fams = {f for f in families if all(_exact(k, ref[k]) for k in ref if key_family(k) == f)}

    fig = Figure(figsize=(10.5, 0.45 * len(names) + 2.0), layout="constrained")
    grid = fig.add_gridspec(1, 2, width_ratios=[len(families), 2.4])
    ax, side = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    image = ax.imshow([[_shown(v) for v in row] for row in ratios], cmap=_ratio_cmap(), norm=_ratio_norm(),
                      aspect="auto")
    for i, row in enumerate(ratios):
        for j, value in enumerate(row):
            text = ("≠" if value > 1 else "=") if families[j] in exact_fams else _fmt_ratio(value)
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color=_text_color(value),
                    fontweight="bold" if value > 1 else "normal")
    ax.set_xticks(range(len(families)), families, rotation=30, ha="right")
    labels = [f"{n} [{dtype_name(runs[n][0], True)}]" for n in names]
    ax.set_yticks(range(len(names)), labels)
    for tick, name in zip(ax.get_yticklabels(), names):
        tick.set_color(_WRONG if name in broken else "black")
    ax.set_xlabel("key family (worst tensor in the family)")
    ax.set_ylabel("run (red: has a bug)")
    ax.set_xticks([x + 0.5 for x in range(len(families) - 1)], minor=True)
    ax.set_yticks([y + 0.5 for y in range(len(names) - 1)], minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    _ratio_colorbar(fig, image, [ax, side], "‖c − r‖ / (tolerance · ‖r‖)")

    loss_col = families.index("loss") if "loss" in families else None
    caught_loss = caught_full = 0
    for i, name in enumerate(names):
        verdicts = [loss_col is not None and ratios[i][loss_col] > 1, any(v > 1 for v in ratios[i])]
        caught_loss += name in broken and verdicts[0]
        caught_full += name in broken and verdicts[1]
        for j, failed in enumerate(verdicts):
            right = failed == (name in broken)
            side.add_patch(_rect(j - 0.45, i - 0.4, 0.9, 0.8, "#fbe3e3" if not right else "#e6f4e6"))
            side.text(j, i, "FAIL" if failed else "pass", ha="center", va="center", fontsize=8,
                      color=_FAIL if not right else "black", fontweight="bold" if not right else "normal")
    side.set_xlim(-0.5, 1.5)
    side.set_ylim(len(names) - 0.5, -0.5)
    side.set_xticks([0, 1], ["loss only", "update state"], rotation=30, ha="right")
    side.set_yticks([])
    side.set_xlabel("verdict (red: wrong)")
    side.set_title(f"checkers at step {step}", fontsize=9)
    for spine in side.spines.values():
        spine.set_visible(False)
    nb = len(broken & set(names))
    ax.set_title(f"worst tolerance ratio per key family at step {step} ({ulps:g} ulps of the run's dtype)",
                 fontsize=9)
    fig.suptitle(title or (f"A loss-only checker flags {caught_loss} of {nb} broken runs at step {step}; "
                           f"the update state flags {caught_full} of {nb}"), fontsize=11)
    fig.last_ratios = {n: dict(zip(families, r)) for n, r in zip(names, ratios)}
    return fig


def _rect(x: float, y: float, w: float, h: float, color: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x, y), w, h, facecolor=color, edgecolor="none")


def plot_error_vs_tolerance(reference_steps: Sequence[State], states: Runs | Mapping[str, Sequence[State]] |
                            Sequence[State], dtypes: Sequence[torch.dtype] = (torch.float32, torch.bfloat16), *,
                            step: int | None = None, ulps: float = eq.TOLERANCE_ULPS,
                            title: str | None = None) -> Figure:
    """Measured relative 2-norm error of every key, by family, against the tolerance of each dtype.

    ``states``: one run (a list of states) or several (``{label: states}`` or
    ``{label: (dtype, states)}``). ``step=None`` takes each key's worst error over the steps.
    One dot per key and run; bit-identical keys sit on the floor line. Horizontal lines are
    ``ulps * eps`` of each of ``dtypes``.
    """
    runs = _runs(states, torch.float32)
    _check_runs(reference_steps, runs)
    floor = 1e-12
    families = [f for f in FAMILIES if any(key_family(k) == f for k in reference_steps[0])]
    steps = range(len(reference_steps)) if step is None else [step]
    fig = Figure(figsize=(9.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    width = 0.7 / len(runs)
    top = floor
    for r, (label, (_, run_states)) in enumerate(runs.items()):
        xs, ys = [], []
        for j, fam in enumerate(families):
            keys = [k for k in reference_steps[0] if key_family(k) == fam]
            for q, key in enumerate(keys):
                err = max(relative_error(reference_steps[s][key], run_states[s].get(key)) for s in steps
                          if s < len(run_states))
                xs.append(j - 0.35 + width * (r + 0.5) + (q - (len(keys) - 1) / 2) * width * 0.6 / max(len(keys), 1))
                ys.append(min(max(err, floor), 1e3))
        top = max(top, max(ys))
        ax.scatter(xs, ys, s=22, color=_RUN_COLORS[r % len(_RUN_COLORS)], alpha=0.85,
                   label=label, zorder=3, marker="osD^v"[r % 5])
    styles = ["-", "--", "-.", ":"]
    for k, dtype in enumerate(dtypes):
        tol = ulps * torch.finfo(dtype).eps
        ax.axhline(tol, color="black", linestyle=styles[k % len(styles)], linewidth=1.3,
                   label=f"tolerance for {dtype_name(dtype)}: {ulps:g}·eps = {tol:.2g}")
        top = max(top, tol)
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
    ax.set_title(title or "Measured error against the tolerance of each dtype: no single line separates "
                          "correct runs from broken ones", fontsize=10)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize=8, ncol=3)
    return fig


def plot_checker_verdicts(verdicts: Mapping[str, Mapping[str, int | None]], broken: Collection[str],
                          title: str | None = None) -> Figure:
    """Rows: checkers; columns: runs; each cell the checker's verdict, red when it is wrong.

    ``verdicts`` is :func:`checker_verdicts`' dict. A cell reads ``FAIL@k`` (rejected at step
    ``k``) or ``pass``; green when it agrees with ``broken``, red when it does not.
    """
    checkers = list(verdicts)
    if not checkers:
        raise ValueError("no checkers")
    runs = list(next(iter(verdicts.values())))
    broken = set(broken)
    fig = Figure(figsize=(1.05 * len(runs) + 3.2, 0.42 * len(checkers) + 2.4), layout="constrained")
    ax = fig.add_subplot()
    wrong_counts = []
    for i, checker in enumerate(checkers):
        wrong = 0
        for j, run in enumerate(runs):
            step = verdicts[checker][run]
            right = (step is not None) == (run in broken)
            wrong += not right
            ax.add_patch(_rect(j - 0.47, i - 0.42, 0.94, 0.84, "#e6f4e6" if right else "#f4b6b6"))
            ax.text(j, i, "pass" if step is None else f"FAIL@{step}", ha="center", va="center", fontsize=8,
                    fontweight="normal" if right else "bold", color="black" if right else "#8b0000")
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
    ax.set_title(title or "Verdicts over all steps (FAIL@k: rejected at step k); red cells are wrong verdicts",
                 fontsize=10)
    fig.wrong_counts = dict(zip(checkers, wrong_counts))
    return fig


def plot_key_grid(reference_steps: Sequence[State], candidate_steps: Sequence[State], dtype: torch.dtype,
                  ulps: float = eq.TOLERANCE_ULPS, title: str | None = None) -> Figure:
    """Rows: steps; columns: every key; colour: tolerance ratio, ``✗`` on the keys that fail."""
    if not reference_steps or not candidate_steps:
        raise ValueError("no steps")
    steps = min(len(reference_steps), len(candidate_steps))
    keys = ordered_keys(reference_steps[0])
    ratios = [[state_ratios(reference_steps[s], candidate_steps[s], dtype, ulps)[k] for k in keys]
              for s in range(steps)]
    fig = Figure(figsize=(max(6.0, 0.26 * len(keys) + 2.5), 1.0 + 0.42 * steps + 1.6), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow([[_shown(v) for v in row] for row in ratios], cmap=_ratio_cmap(), norm=_ratio_norm(),
                      aspect="auto")
    for s, row in enumerate(ratios):
        for j, value in enumerate(row):
            if value > 1:
                ax.text(j, s, "✗", ha="center", va="center", fontsize=8, color="white", fontweight="bold")
    ax.set_xticks(range(len(keys)), [k.split("/", 1)[-1] for k in keys], rotation=90, fontsize=7)
    ax.set_yticks(range(steps), [f"step {s}" for s in range(steps)])
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
    failing = sum(v > 1 for row in ratios for v in row)
    ax.set_title(title or f"{ulps:g} ulps of {dtype_name(dtype)} (rtol {ulps * torch.finfo(dtype).eps:.2g}): "
                          f"{failing} of {len(keys) * steps} key-steps fail", fontsize=10)
    _ratio_colorbar(fig, image, ax, "tolerance ratio")
    return fig


# --------------------------------------------------------------------------- explorer

_EXPLORER_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def equivalence_explorer(reference_steps: Sequence[State], runs: Runs, run: str | None = None,
                         ulps: float = eq.TOLERANCE_ULPS, dtype: torch.dtype | None = None):
    """Pick a run, a tolerance (ulps, log slider 1..4096) and a dtype; see which keys fail per step.

    ``dtype=None`` starts at the chosen run's own dtype. Returns an ``ipywidgets.VBox`` with
    ``update()`` (recomputes, redraws, returns the numbers), ``controls`` (``run``, ``ulps``,
    ``dtype``), ``summary`` (the HTML lines) and ``last_result``.
    """
    import ipywidgets as W
    from IPython.display import Image, display

    runs = _runs(runs, torch.float32)
    _check_runs(reference_steps, runs)
    names = list(runs)
    run = run or names[0]
    if run not in runs:
        raise ValueError(f"unknown run {run!r}; runs: {names}")
    broken = broken_runs(runs)
    style, layout = {"description_width": "150px"}, W.Layout(width="520px")
    common = {"style": style, "layout": layout}
    run_box = W.Dropdown(options=names, value=run, description="run", **common)
    ulps_slider = W.FloatLogSlider(value=ulps, base=2, min=0, max=12, step=1, description="tolerance (ulps)",
                                   readout_format=".0f", continuous_update=False, **common)
    dtype_box = W.Dropdown(options=[(dtype_name(d), d) for d in _EXPLORER_DTYPES],
                           value=runs[run][0] if dtype is None else dtype, description="tolerance dtype",
                           **common)
    summary, out = W.HTML(), W.Output()

    def update(*_: Any) -> dict[str, Any]:
        name, u, d = run_box.value, float(ulps_slider.value), dtype_box.value
        run_dtype, states = runs[name]
        steps = min(len(reference_steps), len(states))
        failing = [failing_keys(reference_steps[s], states[s], d, u) for s in range(steps)]
        first = next(((s, keys) for s, keys in enumerate(failing) if keys), None)
        loss_fails = any("loss" in keys for keys in failing)
        reference_verdict = eq.first_divergence(reference_steps, states, run_dtype)
        result = {"run": name, "run_dtype": run_dtype, "dtype": d, "ulps": u, "rtol": u * torch.finfo(d).eps,
                  "failing": failing, "first_divergence": first, "loss_only_fails": loss_fails,
                  "reference_verdict": reference_verdict, "broken": name in broken}
        story = eq.ZOO[name][1] if name in eq.ZOO and eq.ZOO[name][1] else (
            "a correct run" if name in eq.ZOO else "")
        verdict = ("<b style='color:#2ca02c'>passes</b>" if first is None else
                   f"<b style='color:#d62728'>fails</b> first at step {first[0]}: {summarize_keys(first[1])}")
        right = (first is not None) == (name in broken) if name in eq.ZOO else None
        summary.value = (
            f"<b>{name}</b> (computes in {dtype_name(run_dtype)}){': ' + story if story else ''}<br>"
            f"with {u:g} ulps of {dtype_name(d)} (rtol {result['rtol']:.3g}) the update-state check {verdict}"
            + ("" if right is None else (" ✓ right verdict" if right else " ✗ <b>wrong verdict</b>")) + "<br>"
            f"a loss-only check at this tolerance would {'fail' if loss_fails else 'pass'} it · the reference "
            f"checker (64 ulps of {dtype_name(run_dtype)}) "
            + ("passes it" if reference_verdict is None else f"fails it at step {reference_verdict[0]}"))
        fig = plot_key_grid(reference_steps, states, d, u,
                            title=f"{name}: {u:g} ulps of {dtype_name(d)} (rtol {result['rtol']:.2g})")
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=80)  # a PNG needs no matplotlib backend in the kernel
        with out:
            out.clear_output(wait=True)
            display(Image(data=png.getvalue(), format="png"))
        box.last_result = result
        return result

    controls = {"run": run_box, "ulps": ulps_slider, "dtype": dtype_box}
    for w in controls.values():
        w.observe(update, names="value")
    box = W.VBox([run_box, ulps_slider, dtype_box, summary, out])
    box.controls = controls
    box.summary = summary
    box.update = update
    update()
    return box
