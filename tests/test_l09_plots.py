"""Fast unit tests for helpers.l09_equivalence_tests.plots (lesson 09 figures and explorer; Agg backend, no gloo).

The figures draw the results stored with the course (``helpers/stored/09_*.json``); the
tests read those files, plus small hand-made data where a figure must react to an input.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import contextlib
import io

import pytest
import torch

from figure_checks import labelled, renders
from helpers.l09_equivalence_tests import plots as ep
from helpers.shared.stored import load

BROKEN = {"grad_sum_not_mean", "resume_step_off_by_one", "moments_resumed_in_bf16", "clip_local_norm",
          "mask_counts_padding", "loss_denominator_one_percent_off", "bf16_moments_resumed_in_bf16",
          "bf16_clip_local_norm", "bf16_denominator_one_percent_off", "bf16_denominator_twenty_percent_off"}


@pytest.fixture(scope="module")
def zoo():
    return load("09_zoo")


# --------------------------------------------------------------------------- names and tables


def test_keys_families_and_summaries(zoo) -> None:
    assert ep.key_family("grad/fc1.weight") == "grad" and ep.key_family("loss") == "loss"
    keys = ep.ordered_keys(zoo["keys"])
    assert keys == zoo["keys"] and keys[:3] == ["loss", "clip_coef", "mask"] and keys[-1].startswith("step/")
    assert [ep.key_family(k) for k in keys] == sorted((ep.key_family(k) for k in keys), key=ep.FAMILIES.index)
    assert ep.summarize_keys(["clip_coef", "grad/a", "grad/b", "step/a"]) == "clip_coef, grad/* (2), step/* (1)"
    assert ep.summarize_keys([]) == "-"
    assert ep.dtype_name(torch.bfloat16) == "bfloat16" and ep.dtype_name("bfloat16", short=True) == "bf16"


def test_verdict_table() -> None:
    verdicts = load("09_zoo_verdicts")
    lines = ep.verdict_table(verdicts).splitlines()
    assert len(lines) == 2 + len(verdicts["names"])
    assert [line.split()[0] for line in lines[2:]] == verdicts["names"]
    assert any(line.startswith("resume_step_off_by_one") and "FAIL" in line and "step/* (6)" in line for line in lines)
    assert any(line.startswith("ddp_bf16_autocast") and "bf16" in line and "pass" in line for line in lines)
    near = next(line for line in lines if line.startswith("bf16_clip_local_norm"))
    assert "(~ near: clip_coef" in near                              # 1.4 times its tolerance


def test_layernorm_cancellation_is_elementwise_not_normwise() -> None:
    result = ep.layernorm_cancellation(rows=64, width=16, dtype=torch.bfloat16, seed=0)
    eps = torch.finfo(torch.bfloat16).eps
    assert result["kappa"].shape == result["elementwise"].shape == (64 * 16,)
    assert result["kappa"].min() >= 1.0 - 1e-12
    assert result["norm_error"] < 64 * eps / 10                     # the tensor is fine in 2-norm ...
    assert result["elementwise"].max() > 64 * eps                   # ... a few elements are not
    assert bool((result["elementwise"] <= 4 * eps * result["kappa"]).all())  # error ~ eps * cancellation


# --------------------------------------------------------------------------- figures


def test_divergence_heatmap(zoo) -> None:
    fig = ep.plot_divergence_heatmap(zoo)
    heat, side = fig.axes[0], fig.axes[1]
    labelled(heat)
    assert [t.get_text() for t in heat.get_xticklabels()] == list(ep.FAMILIES)
    labels = [t.get_text() for t in heat.get_yticklabels()]
    assert labels[0] == "ddp_fp32 [fp32]" and labels[2] == "ddp_bf16_autocast [bf16]"
    assert heat.images[0].norm.vmin < 1 < heat.images[0].norm.vmax
    assert "flags 4 of 10 broken runs" in fig._suptitle.get_text() and "10 of 10" in fig._suptitle.get_text()
    texts = [t.get_text() for t in heat.texts]
    assert len(texts) == len(zoo["names"]) * len(ep.FAMILIES)
    row = zoo["names"].index("resume_step_off_by_one")
    assert texts[ep.FAMILIES.index("step") + row * len(ep.FAMILIES)] == "≠"
    assert fig.last_ratios["grad_sum_not_mean"]["clip_coef"] > 1 > fig.last_ratios["grad_sum_not_mean"]["grad"]
    side_texts = [t.get_text() for t in side.texts]
    assert side_texts.count("FAIL") == 4 + 10                       # loss only: 4; update state: 10
    renders(fig)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = FigureCanvasAgg(fig).get_renderer()                  # the headings do not overlap
    fig.draw(renderer)
    boxes = [t.get_window_extent(renderer) for t in (fig._suptitle, heat.title, side.title) if t.get_text()]
    assert len(boxes) == 2 and not boxes[0].overlaps(boxes[1])
    later = ep.plot_divergence_heatmap(zoo, step=2, title="custom")
    assert later._suptitle.get_text() == "custom"
    renders(later)
    with pytest.raises(ValueError):
        ep.plot_divergence_heatmap(zoo, step=3)


def test_error_vs_tolerance(zoo) -> None:
    pick = ["ddp_fp32", "ddp_bf16_autocast", "loss_denominator_one_percent_off"]
    fig = ep.plot_error_vs_tolerance(zoo, pick)
    ax = fig.axes[0]
    labelled(ax)
    assert ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == list(ep.FAMILIES)
    old = sorted(line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == ":")
    assert old == pytest.approx(sorted([64 * 2**-23, 64 * 2**-7]))
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:3] == pick and any("calibrated at bfloat16" in t for t in legend)
    calibrated = len(zoo["tolerances"]["float32"])
    assert calibrated == len(zoo["keys"]) - 7                       # no tolerance for the mask and 6 step counters
    assert sum(len(c.get_offsets()) for c in ax.collections) == 3 * len(zoo["keys"]) + 2 * calibrated
    renders(fig)
    renders(ep.plot_error_vs_tolerance(zoo, ["ddp_fp32"], dtypes=("float32",), step=0))
    with pytest.raises(ValueError):
        ep.plot_error_vs_tolerance(zoo, [])


def test_adam_scale_invariance_figure() -> None:
    data = load("09_adam_scale_invariance")
    fig = ep.plot_adam_scale_invariance(data)
    left, right = fig.axes[:2]
    for ax in (left, right):
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log" and ax.get_title() and ax.get_xlabel()
    assert left.get_ylabel()
    curves = {line.get_label(): list(line.get_ydata()) for line in right.get_lines()
              if not line.get_label().startswith("_")}
    assert set(curves) == set(data["families"])
    assert curves["clip_coef"] == data["setups"][1]["difference"]["clip_coef"]
    renders(fig)
    with pytest.raises(ValueError):
        ep.plot_adam_scale_invariance({**data, "scales": []})


def test_cancellation_figure() -> None:
    fig = ep.plot_cancellation(ep.layernorm_cancellation(rows=16, width=16))
    ax = fig.axes[0]
    labelled(ax)
    assert ax.get_xscale() == ax.get_yscale() == "log"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("relative 2-norm error") for t in legend) and "elementwise bound 64 ulps" in legend
    renders(fig)


def test_checker_verdicts_figure() -> None:
    data = load("09_checker_verdicts")
    fig = ep.plot_checker_verdicts(data)
    ax = fig.axes[0]
    labelled(ax)
    assert fig.wrong_counts["update state (reference)"] == 0
    assert fig.wrong_counts["loss only"] == 5 and fig.wrong_counts["fixed fp32 tolerance"] == 2
    assert fig.wrong_counts["64 eps of the run's dtype"] == 4         # the four bfloat16 bugs pass
    assert fig.wrong_counts["elementwise rtol"] == 4                  # fails every correct run
    assert [t.get_text() for t in ax.get_xticklabels()] == data["names"]
    assert len(ax.texts) == len(data["names"]) * len(data["checkers"])
    assert "FAIL@1" in [t.get_text() for t in ax.texts]             # loss only sees local clipping at step 1
    renders(fig)
    # Kernels that disagree on a correct run: an amber cell with both verdicts, counted as wrong.
    this, portable = data["kernels"]
    split = {**data, "kernels": [{**this, "verdicts": {**this["verdicts"], "no safety factor": {
        **this["verdicts"]["no safety factor"], "ddp_fp32": 1}}},
        {**portable, "verdicts": {**portable["verdicts"], "no safety factor": {
            **portable["verdicts"]["no safety factor"], "ddp_fp32": None}}}]}
    fig = ep.plot_checker_verdicts(split)
    cell = fig.axes[0].texts[[c for c, _ in data["checkers"]].index("no safety factor") * len(data["names"])]
    assert cell.get_text() == "FAIL@1 | pass" and fig.wrong_counts["no safety factor"] >= 1
    same = {**data, "kernels": [this, this]}
    assert "|" not in "".join(t.get_text() for t in ep.plot_checker_verdicts(same).axes[0].texts)
    with pytest.raises(ValueError):
        ep.plot_checker_verdicts({**data, "checkers": []})


def test_key_grid(zoo) -> None:
    fig = ep.plot_key_grid(zoo, "moments_resumed_in_bf16", "float32")
    ax = fig.axes[0]
    labelled(ax)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["step 0", "step 1", "step 2"]
    crosses = [t for t in ax.texts if t.get_text() == "✗"]
    failing = zoo["runs"]["moments_resumed_in_bf16"]["failing"]
    assert len(crosses) == sum(len(keys) for keys in failing)
    assert f"{len(crosses)} of 99 key-steps fail" in ax.get_title()
    assert all(k.startswith("exp_avg") for k in failing[0])
    renders(fig)
    def crosses_at(factor: float) -> int:
        return sum(t.get_text() == "✗"
                   for t in ep.plot_key_grid(zoo, "ddp_bf16_autocast", "float32", factor).axes[0].texts)

    assert crosses_at(1024.0) < crosses_at(4.0)              # a wider tolerance passes more keys
    with pytest.raises(ValueError):
        ep.plot_key_grid(zoo, "ddp_fp32", "float32", 3.0)


def test_explorer_update_changes_the_output(zoo) -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # Output widgets print outside a kernel
        box = ep.equivalence_explorer(zoo, run="ddp_bf16_autocast")
        first = dict(box.last_result)
        assert first["dtype"] == "bfloat16" and first["factor"] == 4.0 and first["first_divergence"] is None
        assert first["course_verdict"] is None and not first["loss_only_fails"] and not first["broken"]
        summary = box.summary.value
        assert "passes" in summary and "right verdict" in summary

        box.controls["dtype"].value = "float32"                  # bf16 drift judged as fp32
        result = box.last_result
        assert result["first_divergence"][0] == 0 and "loss" in result["failing"][0]
        assert box.summary.value != summary and "wrong verdict" in box.summary.value

        box.controls["factor"].value = 1024
        assert box.last_result["factor"] == 1024
        assert len(box.last_result["failing"][0]) <= len(result["failing"][0])

        box.controls["run"].value = "bf16_denominator_one_percent_off"
        box.controls["dtype"].value = "bfloat16"
        box.controls["factor"].value = 4
        assert box.last_result["failing"][0] == ["loss"] and box.last_result["broken"]

        box.controls["run"].value = "resume_step_off_by_one"
        steps = [k for k in zoo["keys"] if k.startswith("step/")]
        assert box.last_result["failing"][0] == steps and box.last_result["course_verdict"] == 0

        box.controls["factor"].value = 0.25
        box.controls["dtype"].value = "float32"
        box.controls["run"].value = "ddp_fp32"
        assert box.last_result["first_divergence"] is not None   # below the calibrated error, rounding fails
        returned = box.update()
    assert returned is box.last_result
    with pytest.raises(ValueError):
        ep.equivalence_explorer(zoo, run="nope")
