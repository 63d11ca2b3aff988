"""Tests of lesson 09: the runs (helpers.equivalence) and the instructor side (autograder.lessons.l09).

The reference checker's verdicts on the zoo, its hidden checks, and the stored results the
chapter draws from.
"""
from __future__ import annotations

import pytest
import torch

from autograder.lessons import l09 as R
from helpers import equivalence as E
from helpers.stored import load

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
def reference() -> list[R.State]:
    return R.reference_run()


@pytest.fixture(scope="module")
def zoo() -> dict:
    return R.run_zoo()


def _families(keys: list[str]) -> set[str]:
    return {k.split("/")[0] for k in keys}


# --------------------------------------------------------------------------- the runs (student side)


def test_problem_is_deterministic_and_never_masks_a_whole_batch() -> None:
    a, b = E.make_problem(seed=3, steps=20), E.make_problem(seed=3, steps=20)
    assert all(torch.equal(x, y) for (x, *_), (y, *_) in zip(a.batches, b.batches))
    half = E.ROWS // 2
    for step, (_, _, mask) in enumerate(a.batches):
        dropped = step % 7 + 1
        assert mask[:half].sum() == half - dropped and mask[half:].sum() == half - dropped


def test_snapshots_are_pytorchs_own_state_and_copies() -> None:
    steps = E.reference_run()
    assert len(steps) == 3
    first = steps[0]
    assert set(first) == {"loss", "clip_coef", "mask", "params", "grads", "adam"}
    assert list(first["params"]) == [n for n, _ in E.build_model(E.make_problem(), torch.float64).named_parameters()]
    assert sorted(first["adam"]) == list(range(len(first["params"])))
    assert [s["adam"][0]["step"].item() for s in steps] == [1001.0, 1002.0, 1003.0]   # copies, not the live counter
    assert first["params"]["fc1.weight"].dtype == torch.float64 and first["mask"].dtype == torch.bool
    torch.testing.assert_close(E.reference_run(), steps, rtol=0, atol=0)              # bit-identical again


def test_single_process_run_knobs() -> None:
    fresh = E.single_process_run(clipped=False, resume_step=0)
    assert fresh[0]["adam"][0]["step"].item() == 1.0 and fresh[0]["clip_coef"].item() == 1.0
    float32 = E.single_process_run(dtype=torch.float32)
    assert float32[0]["grads"]["fc1.weight"].dtype == torch.float32


def test_zoo_snapshots_and_the_capture_hook() -> None:
    snaps = E.run_zoo(names=["ddp_fp32", "zero1_fp32"])
    assert set(snaps) == {"ddp_fp32", "zero1_fp32"} and snaps["ddp_fp32"][0] is torch.float32
    torch.testing.assert_close(snaps["zero1_fp32"][1], snaps["ddp_fp32"][1], rtol=0, atol=0)  # ZeRO-1 == DDP
    captured = E.run_zoo(names=["zero1_fp32"], capture=R.capture_update_state)["zero1_fp32"][1]
    assert all(torch.equal(c[k], v) for c, s in zip(captured, snaps["zero1_fp32"][1])
               for k, v in R.update_state(s).items())


# --------------------------------------------------------------------------- the reference checker


def test_zoo_runs_are_what_they_claim(reference, zoo) -> None:
    assert set(zoo) == set(E.ZOO)
    for name, (dtype, states) in zoo.items():
        verdict = R.first_divergence(reference, states, dtype)
        if name in BROKEN:
            assert verdict is not None and verdict[0] == 0, name
            assert BROKEN[name] <= _families(verdict[1]), (name, verdict)
        else:
            assert verdict is None, (name, verdict)


def test_bf16_run_is_correct_only_as_a_bf16_run(reference, zoo) -> None:
    states = zoo["ddp_bf16_autocast"][1]
    assert R.first_divergence(reference, states, torch.bfloat16) is None
    step, keys = R.first_divergence(reference, states, torch.float32)
    assert step == 0 and {"grad", "loss"} <= _families(keys)


def test_a_loss_only_check_misses_most_broken_runs(reference, zoo) -> None:
    def loss_differs(name: str, steps: slice) -> bool:
        pairs = list(zip(reference, zoo[name][1]))[steps]
        return any(not R.tensors_match(r["loss"], c["loss"], R.tolerance(torch.float32)) for r, c in pairs)

    assert sorted(n for n in BROKEN if loss_differs(n, slice(0, 1))) == ["loss_denominator_one_percent_off",
                                                                         "mask_counts_padding"]
    # Clipping by a local norm reaches the loss one step later, through the parameters.
    assert sorted(n for n in BROKEN if loss_differs(n, slice(None))) == [
        "clip_local_norm", "loss_denominator_one_percent_off", "mask_counts_padding"]


def test_tolerance_and_norm_wise_matching() -> None:
    assert R.tolerance(torch.float32) == 64 * 2**-23
    assert R.tolerance(torch.bfloat16) == 64 * 2**-7
    assert R.tolerance(torch.float32, ulps=1) == 2**-23
    r = torch.tensor([1.0, -1.0, 1e-6])
    c = r.clone()
    c[2] = 2e-6                                      # the tiny element doubles; the tensor barely moves
    assert R.tensors_match(r, c, 1e-5)
    assert not torch.allclose(c, r, rtol=1e-5, atol=0)
    assert not R.tensors_match(r, r[:2], 1.0)
    assert R.tensors_match(torch.tensor([True, False]), torch.tensor([True, False]), 0.0)
    state = {"step/w": torch.tensor(1000.0, dtype=torch.float64), "grad/w": torch.tensor([3.0, 4.0])}
    assert R.compare_update_states(state, {**state, "step/w": state["step/w"] + 1}, torch.bfloat16) == ["step/w"]
    assert R.compare_update_states(state, {"step/w": state["step/w"]}, torch.float32) == ["grad/w"]


def test_capture_reference_reads_the_live_model() -> None:
    problem = E.make_problem()
    model = E.build_model(problem, torch.float32)
    optimizer = E.build_adam(model, problem)
    x, y, mask = problem.batches[0]
    loss = E.masked_mse(model(x), y, mask, mask.sum().item() * E.OUT_FEATURES)
    loss.backward()
    coef = E.clip(model)
    optimizer.step()
    state = R.capture_update_state(model, optimizer, loss, coef, mask)
    assert len(state) == 3 + 5 * 6 and all(v.dtype == torch.float64 for k, v in state.items() if k != "mask")
    assert torch.equal(state["exp_avg_sq/fc2.bias"], optimizer.state[model.fc2.bias]["exp_avg_sq"].double())
    assert state["step/fc1.weight"].item() == 1001.0 and state["step/fc1.weight"].shape == ()


# --------------------------------------------------------------------------- hidden checks


def test_checks_accept_the_references() -> None:
    R.assert_capture(R.capture_update_state)
    R.assert_tolerance(R.tolerance)
    R.assert_compare(R.compare_update_states, R.synthetic_cases())
    R.assert_first_divergence(R.first_divergence)


def _aliasing_capture(model, optimizer, loss, clip_coef, mask):
    state = R.capture_update_state(model, optimizer, loss, clip_coef, mask)
    for name, p in model.named_parameters():
        state[f"exp_avg/{name}"] = optimizer.state[p]["exp_avg"]  # live tensor, float32
    return state


class _Always(float):
    """A float that says it equals anything."""

    def __eq__(self, other) -> bool:  # noqa: D105
        return True

    __hash__ = float.__hash__


class _Fake(list):
    def __eq__(self, other) -> bool:  # noqa: D105
        return True


def test_checks_name_the_mistakes() -> None:
    with pytest.raises(AssertionError, match="float64"):
        R.assert_capture(_aliasing_capture)
    with pytest.raises(AssertionError, match="One tolerance for every dtype"):
        R.assert_tolerance(lambda dtype: 1e-5)
    with pytest.raises(AssertionError, match="float8"):
        R.assert_tolerance(lambda dtype: load("09_zoo")["tolerance"].get(str(dtype).removeprefix("torch."), 0.0))
    loss_only = lambda r, c, d: [] if R.tensors_match(r["loss"], c["loss"], R.tolerance(d)) else ["loss"]  # noqa: E731
    with pytest.raises(AssertionError, match="were not flagged"):
        R.assert_compare(loss_only, R.synthetic_cases())


def test_checks_see_through_fake_values() -> None:
    with pytest.raises(AssertionError, match="Python float"):
        R.assert_tolerance(lambda dtype: _Always(0.0))
    with pytest.raises(AssertionError, match="expected plain data"):
        R.assert_compare(lambda r, c, d: _Fake(), R.synthetic_cases()[:1])
    with pytest.raises(AssertionError, match="first_divergence"):
        R.assert_first_divergence(lambda r, c, d: (0, _Fake()))


def test_checks_hand_out_copies(reference, zoo) -> None:
    def vandal(reference_steps, candidate_steps, dtype):
        """Right on a correct run, and overwrites the run so that the next verdict is 'equivalent' too."""
        for ref, cand in zip(reference_steps, candidate_steps):
            cand.update(ref)
        return None

    with pytest.raises(AssertionError, match="checked as torch.float32"):
        R.assert_zoo(vandal, {"ddp_bf16_autocast": zoo["ddp_bf16_autocast"]}, reference, also_as=torch.float32)


def test_zoo_check_explains_the_bug(reference, zoo) -> None:
    never = lambda reference_steps, candidate_steps, dtype: None  # noqa: E731
    with pytest.raises(AssertionError, match="summed over ranks"):
        R.assert_zoo(never, {"grad_sum_not_mean": zoo["grad_sum_not_mean"]}, reference)
    R.assert_zoo(R.first_divergence, zoo, reference, also_as=torch.float32)


# --------------------------------------------------------------------------- stored results


def test_stored_results_agree_with_the_reference_checker(reference, zoo) -> None:
    stored, verdicts, shortcuts = load("09_zoo"), load("09_zoo_verdicts"), load("09_checker_verdicts")
    assert stored["names"] == verdicts["names"] == shortcuts["names"] == list(E.ZOO)
    assert stored["ulps"] == [2 ** k for k in range(13)] and len(stored["keys"]) == 33
    own = stored["ulps"].index(64)
    for name, (dtype, states) in zoo.items():
        run = stored["runs"][name]
        dtype_name = str(dtype).removeprefix("torch.")
        for step, (r, c) in enumerate(zip(reference, states)):
            expected = R.compare_update_states(r, c, dtype)
            assert run["failing"][step] == expected, (name, step)
            from_grid = [k for k, p in zip(stored["keys"], run["passes_from"][dtype_name][step]) if p is None or p > own]
            assert sorted(from_grid) == expected, (name, step)
            ratios = dict(zip(stored["keys"], run["ratios"][step]))
            assert sorted(k for k, v in ratios.items() if v is None or v > 1) == expected, (name, step)
        assert verdicts["runs"][name]["as"][dtype_name] == R._as_json(R.first_divergence(reference, states, dtype))
        assert shortcuts["verdicts"]["update state (reference)"][name] == (
            None if name not in BROKEN else 0)
    assert set(shortcuts["broken"]) == set(BROKEN)


def test_stored_shortcut_verdicts_tell_the_chapters_story() -> None:
    verdicts = load("09_checker_verdicts")["verdicts"]
    failed = {checker: {run for run, step in row.items() if step is not None} for checker, row in verdicts.items()}
    correct = set(E.ZOO) - set(BROKEN)
    assert failed["loss only"] == {"clip_local_norm", "mask_counts_padding", "loss_denominator_one_percent_off"}
    assert verdicts["loss only"]["clip_local_norm"] == 2
    assert failed["fixed fp32 tolerance"] == set(BROKEN) | {"ddp_bf16_autocast"}
    assert failed["fixed bf16 tolerance"] == {"resume_step_off_by_one", "mask_counts_padding"}
    assert failed["no moments, no step"] == set(BROKEN) - {"resume_step_off_by_one", "moments_resumed_in_bf16"}
    assert failed["elementwise rtol"] == set(BROKEN) | correct


def test_stored_single_process_measurements() -> None:
    scale = load("09_adam_scale_invariance")
    fresh, clipped = (s["difference"] for s in scale["setups"])
    tol = scale["float32_tolerance"]
    assert max(fresh["param"]) < tol                                           # same parameters, other moments:
    assert fresh["exp_avg_sq"] == pytest.approx([abs(s * s - 1) for s in scale["scales"]], rel=2e-3)
    assert all(max(v) < tol for k, v in clipped.items() if k != "clip_coef")   # clipping hides the scale ...
    assert clipped["clip_coef"] == pytest.approx([abs(1 - 1 / s) for s in scale["scales"]], rel=2e-3)  # ... but here
    drift = load("09_lr_drift")
    assert [run["lr"] for run in drift["runs"]] == [1e-5, 1e-1]
    assert all(len(run["worst_ratio"]) == drift["steps"] and max(run["worst_ratio"]) < 1 for run in drift["runs"])


def test_capture_check_catches_double_without_clone_and_a_kept_mask() -> None:
    R.assert_capture(R.capture_update_state, dtype=torch.float64)

    def no_clone(model, optimizer, loss, clip_coef, mask):
        state = R.capture_update_state(model, optimizer, loss, clip_coef, mask)
        state.update({f"param/{name}": p.detach().double() for name, p in model.named_parameters()})
        return state

    R.assert_capture(no_clone)   # float32: .double() copies
    with pytest.raises(AssertionError, match="returns the tensor itself"):
        R.assert_capture(no_clone, dtype=torch.float64)
    with pytest.raises(AssertionError, match="'mask'"):
        R.assert_capture(lambda m, o, loss, c, mask: {**R.capture_update_state(m, o, loss, c, mask), "mask": mask})


def test_compare_check_names_nan_and_inexact_step_counters() -> None:
    def greater(r, c, d):
        return sorted(k for k in r if k not in c or r[k].shape != c[k].shape or (
            not torch.equal(r[k], c[k].to(r[k].dtype)) if R._exact(k) or r[k].dtype == torch.bool
            else bool((c[k].double() - r[k].double()).norm() > R.tolerance(d) * r[k].double().norm() + 1e-12)))

    with pytest.raises(AssertionError, match="NaN or inf"):
        R.assert_compare(greater, R.synthetic_cases())

    def allclose_steps(r, c, d):
        return [k for k in R.compare_update_states(r, c, d)
                if not (R._exact(k) and torch.allclose(r[k], c[k].double()))]

    with pytest.raises(AssertionError, match="Step counters compare exactly"):
        R.assert_compare(allclose_steps, R.synthetic_cases())
