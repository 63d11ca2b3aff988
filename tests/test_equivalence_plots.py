"""Fast unit tests for helpers.equivalence_plots (lesson 09 figures and explorer; Agg backend, no gloo).

The runs are made from the float64 reference by perturbing it, so no process group is needed.
"""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import contextlib
import io
import math

import pytest
import torch

from figure_checks import renders
from helpers import equivalence as eq
from helpers import equivalence_plots as ep

F32, BF16 = torch.float32, torch.bfloat16




def _perturbed(states, families, rel, seed):
    """Copies of ``states`` with the float tensors of ``families`` times (1 + rel * noise)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for state in states:
        new = {}
        for key, t in state.items():
            if ep.key_family(key) in families and t.is_floating_point():
                t = t * (1 + rel * torch.randn(t.shape, generator=g, dtype=t.dtype))
            new[key] = t.clone()
        out.append(new)
    return out


@pytest.fixture(scope="module")
def reference():
    return eq.reference_run(eq.make_problem())


@pytest.fixture(scope="module")
def runs(reference):
    floats = ("loss", "clip_coef", "grad", "param", "exp_avg", "exp_avg_sq")
    step_off = [{k: (v + 1 if k.startswith("step/") else v.clone()) for k, v in s.items()} for s in reference]
    loss_off = [{k: (v * 1.01 if k == "loss" else v.clone()) for k, v in s.items()} for s in reference]
    one_element = [{k: v.clone() for k, v in s.items()} for s in reference]
    for s in one_element:  # one tiny element far off (relative), the tensor's 2-norm barely moves
        g = s["grad/fc2.weight"].view(-1)
        i = int(g.abs().argmin())
        g[i] += 1e-7 * s["grad/fc2.weight"].norm()
    return {
        "fp32_ok": (F32, _perturbed(reference, floats, 1e-7, 0)),
        "bf16_ok": (BF16, _perturbed(reference, floats, 2e-3, 1)),
        "one_element_off": (F32, one_element),
        "step_off": (F32, step_off),
        "loss_off": (F32, loss_off),
        "moments_off": (F32, _perturbed(reference, ("exp_avg", "exp_avg_sq"), 1e-3, 2)),
    }


BROKEN = {"step_off", "loss_off", "moments_off"}


# --------------------------------------------------------------------------- measuring


def test_keys_families_and_summaries(reference) -> None:
    assert ep.key_family("grad/fc1.weight") == "grad" and ep.key_family("loss") == "loss"
    keys = ep.ordered_keys(reference[0])
    assert keys[:3] == ["loss", "clip_coef", "mask"] and keys[-1].startswith("step/")
    assert [ep.key_family(k) for k in keys] == sorted((ep.key_family(k) for k in keys), key=ep.FAMILIES.index)
    assert ep.summarize_keys(["clip_coef", "grad/a", "grad/b", "step/a"]) == "clip_coef, grad/* (2), step/* (1)"
    assert ep.summarize_keys([]) == "-"
    assert ep.dtype_name(BF16) == "bfloat16" and ep.dtype_name(BF16, short=True) == "bf16"
    assert ep.broken_runs(["ddp_fp32", "grad_sum_not_mean", "not_in_the_zoo"]) == {"grad_sum_not_mean"}


def test_relative_errors_and_ratios() -> None:
    r = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert ep.relative_error(r, r + torch.tensor([0.0, 0.5])) == pytest.approx(0.1)
    assert ep.relative_error(r, torch.zeros(3)) == math.inf
    assert ep.relative_error(torch.zeros(2), torch.zeros(2)) == 0.0
    assert ep.relative_error(torch.zeros(2), torch.ones(2)) == math.inf
    assert ep.elementwise_relative_error(torch.tensor([2.0, 0.0]), torch.tensor([3.0, 0.0])).tolist() == [0.5, 0.0]
    assert ep.tolerance_ratio(r, r * (1 + 1e-3), 1e-2) == pytest.approx(0.1)
    assert ep.tolerance_ratio(r, None, 1.0) == math.inf
    assert ep.tolerance_ratio(r, r + 1, 0.0) > 1e12          # rtol 0: exact
    assert ep.tolerance_ratio(r, r.clone(), 0.0) == 0.0
    mask = torch.tensor([True, False])
    assert ep.tolerance_ratio(mask, mask.clone(), 0.5) == 0.0
    assert ep.tolerance_ratio(mask, ~mask, 0.5) == math.inf


def test_ratios_agree_with_the_reference_checker(reference, runs) -> None:
    for name, (dtype, states) in runs.items():
        for ref, cand in zip(reference, states):
            assert ep.failing_keys(ref, cand, dtype) == eq.compare_update_states(ref, cand, dtype), name
            ratios = ep.state_ratios(ref, cand, dtype)
            assert set(ratios) == set(ref)
            fams = ep.family_ratios(ref, cand, dtype)
            assert set(fams) == set(ep.FAMILIES)
            assert fams["grad"] == max(v for k, v in ratios.items() if k.startswith("grad/"))
    # a wider tolerance can only pass more; dropping a key fails it
    bf16 = runs["bf16_ok"][1][0]
    assert ep.failing_keys(reference[0], bf16, F32) and not ep.failing_keys(reference[0], bf16, F32, ulps=2**20)
    missing = {k: v for k, v in bf16.items() if k != "clip_coef"}
    assert ep.failing_keys(reference[0], missing, BF16) == ["clip_coef"]
    assert ep.failing_keys(reference[0], runs["step_off"][1][0], F32, keys=lambda k: k == "loss") == []


def test_single_process_run_reproduces_the_reference_and_scale_shows_only_in_clip_coef(reference) -> None:
    again = ep.single_process_run()
    for a, b in zip(again, reference):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    doubled = ep.single_process_run(grad_scale=2.0)
    assert eq.first_divergence(reference, doubled, F32) == (0, ["clip_coef"])
    fresh = ep.single_process_run(clip=False, resume_step=0)
    fresh_doubled = ep.single_process_run(clip=False, resume_step=0, grad_scale=2.0)
    bad = eq.compare_update_states(fresh[-1], fresh_doubled[-1], F32)
    assert bad and all(ep.key_family(k) in ("grad", "exp_avg", "exp_avg_sq") for k in bad)
    assert fresh[0]["step/fc1.weight"].item() == 1.0 and fresh[0]["clip_coef"].item() == 1.0


def test_layernorm_cancellation_is_elementwise_not_normwise() -> None:
    result = ep.layernorm_cancellation(rows=64, width=16, dtype=BF16, seed=0)
    eps = torch.finfo(BF16).eps
    assert result["kappa"].shape == result["elementwise"].shape == (64 * 16,)
    assert result["kappa"].min() >= 1.0 - 1e-12
    assert result["norm_error"] < eq.tolerance(BF16) / 10            # the tensor is fine in 2-norm ...
    assert result["elementwise"].max() > eq.tolerance(BF16)          # ... a few elements are not
    assert bool((result["elementwise"] <= 4 * eps * result["kappa"]).all())  # error ~ eps * cancellation


def test_checker_verdicts_and_table(reference, runs) -> None:
    verdicts = ep.checker_verdicts(reference, runs)
    assert list(verdicts) == list(ep.CHECKERS)
    failed = {c: {r for r, s in v.items() if s is not None} for c, v in verdicts.items()}
    assert failed["update state (reference)"] == BROKEN
    assert failed["loss only"] == {"loss_off"}
    assert failed["fixed fp32 tolerance"] == BROKEN | {"bf16_ok"}
    assert failed["fixed bf16 tolerance"] == {"step_off"}
    assert failed["no moments, no step"] == {"loss_off"}
    assert failed["elementwise rtol"] == BROKEN | {"one_element_off"}
    assert verdicts["update state (reference)"]["step_off"] == 0
    table = ep.verdict_table(reference, runs, broken=BROKEN)
    lines = table.splitlines()
    assert len(lines) == 2 + len(runs)
    assert any(line.startswith("step_off") and "FAIL" in line and "step/* (6)" in line for line in lines)
    assert any(line.startswith("bf16_ok") and "bf16" in line and "pass" in line for line in lines)
    with pytest.raises(ValueError):
        ep.checker_verdicts(reference, {})


# --------------------------------------------------------------------------- figures


def test_divergence_heatmap(reference, runs) -> None:
    fig = ep.plot_divergence_heatmap(reference, runs, broken=BROKEN)
    heat, side = fig.axes[0], fig.axes[1]
    assert [t.get_text() for t in heat.get_xticklabels()] == list(ep.FAMILIES)
    labels = [t.get_text() for t in heat.get_yticklabels()]
    assert labels[0] == "fp32_ok [fp32]" and labels[1] == "bf16_ok [bf16]"
    assert heat.get_xlabel() and heat.get_ylabel() and heat.get_title()
    assert heat.images[0].norm.vmin < 1 < heat.images[0].norm.vmax
    assert "flags 1 of 3 broken runs" in fig._suptitle.get_text() and "3 of 3" in fig._suptitle.get_text()
    texts = [t.get_text() for t in heat.texts]
    assert len(texts) == len(runs) * len(ep.FAMILIES)
    assert texts[ep.FAMILIES.index("step") + 3 * len(ep.FAMILIES)] == "≠"       # step_off, step column
    assert fig.last_ratios["loss_off"]["loss"] == pytest.approx(0.01 / eq.tolerance(F32), rel=1e-3)
    side_texts = [t.get_text() for t in side.texts]
    assert side_texts.count("FAIL") == 1 + 3                        # loss only: loss_off; update state: 3
    renders(fig)
    one = ep.plot_divergence_heatmap(reference, {"x": runs["loss_off"]}, step=2, title="custom")
    assert one._suptitle.get_text() == "custom"
    renders(one)
    with pytest.raises(ValueError):
        ep.plot_divergence_heatmap(reference, runs, step=3)


def test_error_vs_tolerance(reference, runs) -> None:
    pick = {n: runs[n] for n in ("fp32_ok", "bf16_ok", "loss_off")}
    fig = ep.plot_error_vs_tolerance(reference, pick)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == list(ep.FAMILIES)
    tolerances = sorted(line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() in ("-", "--")
                        and line.get_color() == "black")
    assert tolerances == pytest.approx(sorted([eq.tolerance(F32), eq.tolerance(BF16)]))
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:3] == list(pick) and any("bfloat16" in t for t in legend)
    assert sum(len(c.get_offsets()) for c in ax.collections) == 3 * len(reference[0])
    renders(fig)
    single = ep.plot_error_vs_tolerance(reference, runs["bf16_ok"][1], dtypes=(F32,), step=0)
    assert [t.get_text() for t in single.legends[0].get_texts()][0] == "run"
    renders(single)


def test_adam_scale_invariance_figure() -> None:
    fig = ep.plot_adam_scale_invariance(scales=(1, 2, 8))
    left, right = fig.axes[:2]
    for ax in (left, right):
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log" and ax.get_title() and ax.get_xlabel()
    assert left.get_ylabel()
    curves = {line.get_label(): line.get_ydata() for line in right.get_lines() if not line.get_label().startswith("_")}
    assert set(curves) == {"grad", "exp_avg", "exp_avg_sq", "param", "clip_coef", "loss"}
    tol = eq.tolerance(F32)
    assert all(max(v) < tol for k, v in curves.items() if k != "clip_coef")   # clipping hides the scale ...
    assert list(curves["clip_coef"]) == pytest.approx([0.5, 0.875], rel=1e-4)  # ... except here: 1 - 1/s
    fresh = {line.get_label(): line.get_ydata() for line in left.get_lines() if not line.get_label().startswith("_")}
    assert max(fresh["param"]) < tol and min(fresh["exp_avg_sq"]) > 1     # same parameters, other moments
    renders(fig)
    with pytest.raises(ValueError):
        ep.plot_adam_scale_invariance(scales=(1,))


def test_cancellation_figure() -> None:
    result = ep.layernorm_cancellation(rows=16, width=16)
    fig = ep.plot_cancellation(result)
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log" and ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("relative 2-norm error") for t in legend) and "tolerance 64 ulps" in legend
    renders(fig)


def test_checker_verdicts_figure(reference, runs) -> None:
    verdicts = ep.checker_verdicts(reference, runs)
    fig = ep.plot_checker_verdicts(verdicts, BROKEN)
    ax = fig.axes[0]
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert fig.wrong_counts["update state (reference)"] == 0
    assert fig.wrong_counts["loss only"] == 2 and fig.wrong_counts["fixed fp32 tolerance"] == 1
    assert [t.get_text() for t in ax.get_xticklabels()] == list(runs)
    assert len(ax.texts) == len(runs) * len(verdicts)
    assert "FAIL@0" in [t.get_text() for t in ax.texts]
    renders(fig)
    with pytest.raises(ValueError):
        ep.plot_checker_verdicts({}, BROKEN)


def test_key_grid(reference, runs) -> None:
    fig = ep.plot_key_grid(reference, runs["moments_off"][1], F32)
    ax = fig.axes[0]
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["step 0", "step 1", "step 2"]
    crosses = [t for t in ax.texts if t.get_text() == "✗"]
    assert len(crosses) == sum(len(eq.compare_update_states(r, c, F32))
                               for r, c in zip(reference, runs["moments_off"][1]))
    assert "36 of 99 key-steps fail" in ax.get_title()
    renders(fig)


def test_explorer_update_changes_the_output(reference, runs) -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # Output widgets print outside a kernel
        box = ep.equivalence_explorer(reference, runs, run="bf16_ok")
        first = dict(box.last_result)
        assert first["dtype"] is BF16 and first["ulps"] == 64 and first["first_divergence"] is None
        assert first["reference_verdict"] is None and not first["loss_only_fails"]
        summary = box.summary.value
        assert "passes" in summary

        box.controls["dtype"].value = F32                       # bf16 drift judged as fp32
        result = box.last_result
        assert result["first_divergence"][0] == 0 and "loss" in result["failing"][0]
        assert result["rtol"] == pytest.approx(64 * torch.finfo(F32).eps)
        assert box.summary.value != summary and "fails" in box.summary.value

        box.controls["ulps"].value = 4096
        assert box.last_result["rtol"] == pytest.approx(4096 * torch.finfo(F32).eps)
        assert len(box.last_result["failing"][0]) <= len(result["failing"][0])

        box.controls["run"].value = "step_off"
        assert box.last_result["failing"][0] == [k for k in ep.ordered_keys(reference[0]) if k.startswith("step/")]
        assert box.last_result["reference_verdict"][0] == 0

        box.controls["ulps"].value = 1
        box.controls["dtype"].value = torch.float64
        box.controls["run"].value = "fp32_ok"
        assert box.last_result["first_divergence"] is not None   # fp32 rounding is not fp64 exact
        returned = box.update()
    assert returned is box.last_result
    with pytest.raises(ValueError):
        ep.equivalence_explorer(reference, runs, run="nope")
