"""Tests of helpers.equivalence (lesson 09): the zoo's verdicts, the reference checker, the checks."""
from __future__ import annotations

import pytest
import torch

from helpers import equivalence as E

# The key families that differ at the first diverging step (always step 0) of each broken run:
# what each bug is documented to disturb. Runs not listed are correct.
BROKEN = {
    "grad_sum_not_mean": {"clip_coef"},
    "resume_step_off_by_one": {"step"},
    "moments_resumed_in_bf16": {"exp_avg", "exp_avg_sq"},
    "clip_local_norm": {"clip_coef", "grad", "exp_avg", "exp_avg_sq", "param"},
    "mask_counts_padding": {"loss", "mask", "clip_coef", "grad", "exp_avg", "exp_avg_sq"},
    "loss_denominator_one_percent_off": {"loss", "clip_coef"},
}


@pytest.fixture(scope="module")
def reference() -> list[E.State]:
    return E.reference_run(E.make_problem())


@pytest.fixture(scope="module")
def zoo() -> dict:
    return E.run_zoo()


def _families(keys: list[str]) -> set[str]:
    return {k.split("/")[0] for k in keys}


def test_zoo_runs_are_what_they_claim(reference, zoo) -> None:
    assert set(zoo) == set(E.ZOO)
    for name, (dtype, states) in zoo.items():
        verdict = E.first_divergence(reference, states, dtype)
        if name in BROKEN:
            assert verdict is not None and verdict[0] == 0, name
            assert BROKEN[name] <= _families(verdict[1]), (name, verdict)
        else:
            assert verdict is None, (name, verdict)


def test_bf16_run_is_correct_only_as_a_bf16_run(reference, zoo) -> None:
    states = zoo["ddp_bf16_autocast"][1]
    assert E.first_divergence(reference, states, torch.bfloat16) is None
    step, keys = E.first_divergence(reference, states, torch.float32)
    assert step == 0 and {"grad", "loss"} <= _families(keys)


def test_a_loss_only_check_misses_most_broken_runs(reference, zoo) -> None:
    def loss_differs(name: str, steps: slice) -> bool:
        pairs = list(zip(reference, zoo[name][1]))[steps]
        return any(not E.tensors_match(r["loss"], c["loss"], E.tolerance(torch.float32)) for r, c in pairs)

    assert sorted(n for n in BROKEN if loss_differs(n, slice(0, 1))) == ["loss_denominator_one_percent_off",
                                                                         "mask_counts_padding"]
    # Clipping by a local norm reaches the loss one step later, through the parameters.
    assert sorted(n for n in BROKEN if loss_differs(n, slice(None))) == [
        "clip_local_norm", "loss_denominator_one_percent_off", "mask_counts_padding"]


def test_tolerance_and_norm_wise_matching() -> None:
    assert E.tolerance(torch.float32) == 64 * 2**-23
    assert E.tolerance(torch.bfloat16) == 64 * 2**-7
    r = torch.tensor([1.0, -1.0, 1e-6])
    c = r.clone()
    c[2] = 2e-6                                      # the tiny element doubles; the tensor barely moves
    assert E.tensors_match(r, c, 1e-5)
    assert not torch.allclose(c, r, rtol=1e-5, atol=0)
    assert not E.tensors_match(r, r[:2], 1.0)
    assert E.tensors_match(torch.tensor([True, False]), torch.tensor([True, False]), 0.0)


def test_checks_accept_the_references() -> None:
    E.assert_capture(E.reference_capture)
    E.assert_tolerance(E.tolerance)
    E.assert_compare(E.compare_update_states, E.synthetic_cases())
    E.assert_first_divergence(E.first_divergence)


def _aliasing_capture(model, optimizer, loss, clip_coef, mask):
    state = E.reference_capture(model, optimizer, loss, clip_coef, mask)
    for name, p in model.named_parameters():
        state[f"exp_avg/{name}"] = optimizer.state[p]["exp_avg"]  # live tensor, float32
    return state


def test_checks_name_the_mistakes() -> None:
    with pytest.raises(AssertionError, match="float64"):
        E.assert_capture(_aliasing_capture)
    with pytest.raises(AssertionError, match="One tolerance for every dtype"):
        E.assert_tolerance(lambda dtype: 1e-5)
    loss_only = lambda r, c, d: [] if E.tensors_match(r["loss"], c["loss"], E.tolerance(d)) else ["loss"]  # noqa: E731
    with pytest.raises(AssertionError, match="were not flagged"):
        E.assert_compare(loss_only, E.synthetic_cases())


def test_zoo_check_explains_the_bug(reference, zoo) -> None:
    never = lambda reference_steps, candidate_steps, dtype: None  # noqa: E731
    with pytest.raises(AssertionError, match="summed over ranks"):
        E.assert_zoo(never, {"grad_sum_not_mean": zoo["grad_sum_not_mean"]}, reference)
