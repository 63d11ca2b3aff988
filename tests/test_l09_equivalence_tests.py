"""Tests of lesson 09: the runs (helpers.l09_equivalence_tests) and the instructor side (autograder.lessons.l09).

The reference checker's verdicts on the zoo, its hidden checks, and the stored results the
chapter draws from.
"""
from __future__ import annotations

import pytest
import torch

from autograder.lessons import l09 as R
from helpers import l09_equivalence_tests as E
from helpers.shared.stored import load

# The key families that differ at the first diverging step (always step 0) of each broken run,
# judged with the tolerances of its own precision: what each bug is documented to disturb.
# Runs not listed are correct.
BROKEN = {
    "grad_sum_not_mean": {"clip_coef"},
    "resume_step_off_by_one": {"step"},
    "moments_resumed_in_bf16": {"exp_avg", "exp_avg_sq"},
    "clip_local_norm": {"clip_coef", "grad", "exp_avg", "exp_avg_sq", "param"},
    "mask_counts_padding": {"loss", "mask", "clip_coef", "grad", "exp_avg", "exp_avg_sq"},
    "loss_denominator_one_percent_off": {"loss", "clip_coef"},
    "bf16_moments_resumed_in_bf16": {"exp_avg_sq"},
    "bf16_clip_local_norm": {"clip_coef", "grad", "exp_avg", "exp_avg_sq", "param"},
    "bf16_denominator_one_percent_off": {"loss"},
    "bf16_denominator_twenty_percent_off": {"loss", "clip_coef"},
}
BF16_BUGS = {name for name in BROKEN if name.startswith("bf16_")}


@pytest.fixture(scope="module")
def reference() -> list[R.State]:
    return R.reference_run()


@pytest.fixture(scope="module")
def tolerances(reference) -> dict:
    return R.precision_tolerances(reference=reference)


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


def test_zoo_runs_are_what_they_claim(reference, tolerances, zoo) -> None:
    assert set(zoo) == set(E.ZOO) and {n for n, m in E.ZOO.items() if m.bug} == set(BROKEN)
    for name, (dtype, states) in zoo.items():
        verdict = R.first_divergence(reference, states, tolerances[dtype])
        if name in BROKEN:
            assert verdict is not None and verdict[0] == 0, name
            assert BROKEN[name] <= _families(verdict[1]), (name, verdict)
        else:
            assert verdict is None, (name, verdict)


def test_bf16_run_is_correct_only_as_a_bf16_run(reference, tolerances, zoo) -> None:
    for name in ("ddp_bf16_autocast", "zero1_bf16_autocast"):
        states = zoo[name][1]
        assert R.first_divergence(reference, states, tolerances[torch.bfloat16]) is None
        step, keys = R.first_divergence(reference, states, tolerances[torch.float32])
        assert step == 0 and {"grad", "loss"} <= _families(keys)


def test_bf16_bugs_pass_the_old_budget_and_fail_the_calibrated_one(reference, tolerances, zoo) -> None:
    """Issue 12 item 2: 64 eps of bfloat16 (0.5) passes every bf16 bug; the calibrated tolerances catch each."""
    for name in BF16_BUGS | {"ddp_bf16_autocast"}:
        states = zoo[name][1]
        old = R.first_divergence(reference, states, R._ulps(reference[0], torch.bfloat16))
        assert old is None, (name, old)
        assert (R.first_divergence(reference, states, tolerances[torch.bfloat16]) is None) == (name not in BROKEN)


def test_safety_factor_has_margin_on_both_sides(reference, tolerances, zoo) -> None:
    """Correct runs use at most 1 / MARGIN of the tolerance; every bug but the step counter exceeds it MARGIN-fold."""
    def worst(name: str) -> float:
        dtype, states = zoo[name]
        return max(R.tolerance_ratio(k, r[k], c[k], tolerances[dtype]) for r, c in zip(reference, states)
                   for k in tolerances[dtype])

    assert max(worst(n) for n in E.ZOO if n not in BROKEN) < 1 / R.MARGIN
    assert min(worst(n) for n in BROKEN if n != "resume_step_off_by_one") > R.MARGIN


def test_clip_local_norm_clips_by_each_ranks_local_norm() -> None:
    """Rank 0's coefficient is max_norm / its own local gradient's norm (not a global or averaged norm)."""
    problem = E.make_problem()
    state = R.run_zoo(problem, ["clip_local_norm"])["clip_local_norm"][1][0]
    model = E.build_model(problem, torch.float32)
    x, y, mask = problem.batches[0]
    half = E.ROWS // 2
    E.masked_mse(model(x[:half]), y[:half], mask[:half], mask.sum().item() * E.OUT_FEATURES / 2).backward()
    local = torch.stack([p.grad.norm() for p in model.parameters()]).norm()
    assert state["clip_coef"].item() == pytest.approx(min(1.0, E.MAX_NORM / (local.item() + 1e-6)), rel=1e-6)


def test_a_loss_only_check_misses_most_broken_runs(reference, tolerances, zoo) -> None:
    def loss_differs(name: str, steps: slice) -> bool:
        dtype, states = zoo[name]
        pairs = list(zip(reference, states))[steps]
        return any(not R.tensors_match(r["loss"], c["loss"], tolerances[dtype]["loss"]) for r, c in pairs)

    at_step_0 = {"loss_denominator_one_percent_off", "mask_counts_padding", "bf16_denominator_one_percent_off",
                 "bf16_denominator_twenty_percent_off"}
    assert {n for n in BROKEN if loss_differs(n, slice(0, 1))} == at_step_0
    # Clipping by a local norm reaches the float32 loss one step later, through the parameters.
    assert {n for n in BROKEN if loss_differs(n, slice(None))} == at_step_0 | {"clip_local_norm"}


def test_calibration_and_norm_wise_matching() -> None:
    eps32, f64 = torch.finfo(torch.float32).eps, torch.float64
    ref = [{"loss": torch.tensor(2.0, dtype=f64), "mask": torch.tensor([True]), "grad/w": torch.tensor([3.0, 4.0]),
            "step/w": torch.tensor(1.0 + s)} for s in range(2)]
    cal = [{**ref[0], "grad/w": torch.tensor([3.0, 4.05])}, {**ref[1], "grad/w": torch.tensor([3.0, 4.10])}]
    tol = R.calibrate_tolerances(ref, cal)
    assert set(tol) == {"loss", "grad/w"} and tol["loss"] == R.SAFETY * eps32
    assert tol["grad/w"] == pytest.approx(R.SAFETY * 0.02)
    assert R.precision_tolerances()[torch.bfloat16]["loss"] < 0.01 < R.OLD_ULPS * 2**-7
    r = torch.tensor([1.0, -1.0, 1e-6])
    c = r.clone()
    c[2] = 2e-6                                      # the tiny element doubles; the tensor barely moves
    assert R.tensors_match(r, c, 1e-5)
    assert not torch.allclose(c, r, rtol=1e-5, atol=0)
    assert not R.tensors_match(r, r[:2], 1.0)
    assert R.tensors_match(torch.tensor([True, False]), torch.tensor([True, False]), 0.0)
    state = {"step/w": torch.tensor(1000.0, dtype=torch.float64), "grad/w": torch.tensor([3.0, 4.0])}
    assert R.compare_update_states(state, {**state, "step/w": state["step/w"] + 1}, {"grad/w": 0.5}) == ["step/w"]
    assert R.compare_update_states(state, {"step/w": state["step/w"]}, {"grad/w": 0.5}) == ["grad/w"]


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
    R.check_capture(R.capture_update_state)
    R.check_calibrate(R.calibrate_tolerances, R.calibration_cases())
    R.check_compare(R.compare_update_states, R.synthetic_cases())
    R.check_first_divergence(R.first_divergence)


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
        R.check_capture(_aliasing_capture)
    cases = R.calibration_cases()
    with pytest.raises(AssertionError, match="worst relative 2-norm error"):
        R.check_calibrate(lambda r, c: {k: 1e-5 for k in R.calibrate_tolerances(r, c)}, cases)
    with pytest.raises(AssertionError, match="step/ counters and bool tensors"):
        R.check_calibrate(lambda r, c: {**R.calibrate_tolerances(r, c), "mask": 0.0}, cases)
    stored = load("09_zoo")["tolerances"]["bfloat16"]
    with pytest.raises(AssertionError, match="float32 calibration run"):
        R.check_calibrate(lambda r, c: {k: float(v) for k, v in stored.items()}, cases)
    loss_only = lambda r, c, t: [] if R.tensors_match(r["loss"], c["loss"], t["loss"]) else ["loss"]  # noqa: E731
    with pytest.raises(AssertionError, match="were not flagged"):
        R.check_compare(loss_only, R.synthetic_cases())
    loosest = lambda r, c, t: R.compare_update_states(r, c, {k: max(t.values()) for k in t})  # noqa: E731
    with pytest.raises(AssertionError, match="moments rounded to bfloat16, bfloat16 run"):
        R.check_compare(loosest, R.synthetic_cases())


def test_checks_see_through_fake_values() -> None:
    with pytest.raises(AssertionError, match="expected plain data"):
        R.check_calibrate(lambda r, c: {k: _Always(v) for k, v in R.calibrate_tolerances(r, c).items()},
                           R.calibration_cases()[:1])
    with pytest.raises(AssertionError, match="Python float"):
        R.check_calibrate(lambda r, c: {k: torch.tensor(v) for k, v in R.calibrate_tolerances(r, c).items()},
                           R.calibration_cases()[:1])
    with pytest.raises(AssertionError, match="expected plain data"):
        R.check_compare(lambda r, c, d: _Fake(), R.synthetic_cases()[:1])
    with pytest.raises(AssertionError, match="first_divergence"):
        R.check_first_divergence(lambda r, c, d: (0, _Fake()))


def test_checks_hand_out_copies(reference, tolerances, zoo) -> None:
    def vandal(reference_steps, candidate_steps, dtype):
        """Right on a correct run, and overwrites the run so that the next verdict is 'equivalent' too."""
        for ref, cand in zip(reference_steps, candidate_steps):
            cand.update(ref)
        return None

    with pytest.raises(AssertionError, match="checked with float32 tolerances"):
        R.check_zoo(vandal, {"ddp_bf16_autocast": zoo["ddp_bf16_autocast"]}, reference, tolerances,
                     also_as=torch.float32)


def test_zoo_check_explains_the_bug(reference, tolerances, zoo) -> None:
    never = lambda reference_steps, candidate_steps, tol: None  # noqa: E731
    with pytest.raises(AssertionError, match="summed over ranks"):
        R.check_zoo(never, {"grad_sum_not_mean": zoo["grad_sum_not_mean"]}, reference, tolerances)
    with pytest.raises(AssertionError, match="1% too"):
        R.check_zoo(never, {"bf16_denominator_one_percent_off": zoo["bf16_denominator_one_percent_off"]}, reference,
                     tolerances)
    R.check_zoo(R.first_divergence, zoo, reference, tolerances, also_as=torch.float32)


# --------------------------------------------------------------------------- stored results


def test_stored_results_agree_with_the_reference_checker(reference, tolerances, zoo) -> None:
    """The stored results agree with the checker run here, on this CPU, as far as they are facts: every
    verdict's step, and its keys but those stored as near their tolerance (they may change sides)."""
    stored, verdicts, shortcuts = load("09_zoo"), load("09_zoo_verdicts"), load("09_checker_verdicts")
    assert stored["names"] == verdicts["names"] == shortcuts["names"] == list(E.ZOO)
    assert stored["factors"] == [2.0 ** k for k in range(-2, 11)] and len(stored["keys"]) == 33
    own = stored["factors"].index(R.SAFETY)
    for name, (dtype, states) in zoo.items():
        run = stored["runs"][name]
        for step in range(len(reference)):                          # the stored file is consistent in itself
            from_grid = [k for k, p in zip(stored["keys"], run["passes_from"][run["dtype"]][step])
                         if p is None or p > own]
            ratios = dict(zip(stored["keys"], run["ratios"][step]))
            assert (sorted(from_grid) == run["failing"][step]
                    == sorted(k for k, v in ratios.items() if v is None or v > 1))
        for as_dtype, tol in tolerances.items():
            found = verdicts["runs"][name]["as"][E.dtype_name(as_dtype)]
            here = R.first_divergence(reference, states, tol)
            assert (found is None) == (here is None), (name, as_dtype)
            if here is not None:
                sure = set(found["keys"]) - set(found["near"])
                assert here[0] == found["step"] and sure <= set(here[1]) <= set(found["keys"]) | set(found["near"])
    for kernels in shortcuts["kernels"]:
        assert kernels["verdicts"]["update state (reference)"] == {n: 0 if n in BROKEN else None for n in E.ZOO}
    assert set(shortcuts["broken"]) == set(BROKEN)


def test_stored_errors_floor_at_float32_epsilon(reference, tolerances, zoo) -> None:
    """Below float32's epsilon an error is stored as epsilon; above, as measured; exact keys as they are."""
    assert R.relative_error(reference[0]["loss"], reference[0]["loss"].float()) < R.FLOOR
    ref, cand = reference[0], zoo["ddp_fp32"][1][0]
    for key in ref:
        error = R.relative_error(ref[key], cand[key])
        if key.startswith("step/") or key == "mask":
            assert R.resolved_error(key, ref[key], cand[key]) == error == 0.0
        else:
            assert R.resolved_error(key, ref[key], cand[key]) == max(error, R.FLOOR)
            ratio = R.resolved_ratio(key, ref[key], cand[key], tolerances[torch.float32])
            raw = R.tolerance_ratio(key, ref[key], cand[key], tolerances[torch.float32])
            assert raw <= ratio and (ratio == raw or ratio <= 1 / R.SAFETY)   # the floor alone passes
    bug = zoo["grad_sum_not_mean"][1][0]
    assert R.resolved_error("clip_coef", ref["clip_coef"], bug["clip_coef"]) == pytest.approx(0.5, rel=1e-3)


def test_near_tolerance_verdicts_are_those_a_factor_margin_changes() -> None:
    """NEAR_TOLERANCE, which store --check does not compare, holds exactly the shortcut verdicts that move when
    every tolerance is scaled by MARGIN or 1 / MARGIN (the spread between CPUs); the other verdicts hold."""
    here = R.checker_verdicts()
    moved = {(checker, run) for scale in (R.MARGIN, 1 / R.MARGIN)
             for checker, row in R.checker_verdicts(scale).items() for run, step in row.items()
             if step != here[checker][run]}
    assert moved == {(checker, run) for checker, runs in R.NEAR_TOLERANCE.items() for run in runs}


def test_stored_shortcut_verdicts_tell_the_chapters_story() -> None:
    data = load("09_checker_verdicts")
    assert [k["env"] for k in data["kernels"]] == [{}, R.PORTABLE_KERNELS]
    near = {(checker, run) for checker, runs in data["near_tolerance"].items() for run in runs}
    correct = set(E.ZOO) - set(BROKEN)
    bf16_correct = {n for n in correct if E.ZOO[n].dtype == torch.bfloat16}
    for kernels in data["kernels"]:
        verdicts = kernels["verdicts"]
        failed = {checker: {run for run, step in row.items() if step is not None and (checker, run) not in near}
                  for checker, row in verdicts.items()}
        assert failed["loss only"] == {"mask_counts_padding", "loss_denominator_one_percent_off",
                                       "bf16_denominator_one_percent_off", "bf16_denominator_twenty_percent_off"}
        assert failed["fixed fp32 tolerance"] == set(BROKEN) | bf16_correct
        assert failed["64 eps of the run's dtype"] == set(BROKEN) - BF16_BUGS      # the former checker
        assert failed["no safety factor"] == set(BROKEN)                 # the correct runs: near their tolerance
        assert failed["no moments, no step"] == set(BROKEN) - {"resume_step_off_by_one", "moments_resumed_in_bf16",
                                                               "bf16_moments_resumed_in_bf16"}
        assert failed["elementwise rtol"] == set(BROKEN) | correct
        assert failed["update state (reference)"] == set(BROKEN)


def test_stored_single_process_measurements() -> None:
    scale = load("09_adam_scale_invariance")
    fresh, clipped = (s["difference"] for s in scale["setups"])
    tol = scale["float32_tolerance"]
    assert max(fresh["param"]) < tol                                           # same parameters, other moments:
    assert fresh["exp_avg_sq"] == pytest.approx([abs(s * s - 1) for s in scale["scales"]], rel=2e-3)
    at_2 = scale["scales"].index(2.0)                                          # the zoo's 2 ranks:
    assert all(v[at_2] < tol for k, v in clipped.items() if k != "clip_coef")  # clipping hides the scale ...
    assert clipped["clip_coef"] == pytest.approx([abs(1 - 1 / s) for s in scale["scales"]], rel=2e-3)  # ... but here
    drift = load("09_lr_drift")
    assert [run["lr"] for run in drift["runs"]] == [1e-5, 1e-1]
    assert all(len(run["worst_eps"]) == drift["steps"] and max(run["worst_eps"]) < 8 for run in drift["runs"])


def test_capture_check_catches_double_without_clone_and_a_kept_mask() -> None:
    R.check_capture(R.capture_update_state, dtype=torch.float64)

    def no_clone(model, optimizer, loss, clip_coef, mask):
        state = R.capture_update_state(model, optimizer, loss, clip_coef, mask)
        state.update({f"param/{name}": p.detach().double() for name, p in model.named_parameters()})
        return state

    R.check_capture(no_clone)   # float32: .double() copies
    with pytest.raises(AssertionError, match="returns the tensor itself"):
        R.check_capture(no_clone, dtype=torch.float64)
    with pytest.raises(AssertionError, match="'mask'"):
        R.check_capture(lambda m, o, loss, c, mask: {**R.capture_update_state(m, o, loss, c, mask), "mask": mask})


def _kept_mask(model, optimizer, loss, clip_coef, mask):
    return {**R.capture_update_state(model, optimizer, loss, clip_coef, mask), "mask": mask}


def test_capture_checks_work_from_the_grader(graded) -> None:
    """The model, optimizer and steps live where the capture does: a grader's copies would lose the gradients."""
    from helpers.runtime import remote

    R.check_capture(graded("capture_update_state", R.capture_update_state))
    R.check_capture(graded("capture_update_state", R.capture_update_state), dtype=torch.float64)
    with pytest.raises(AssertionError, match="float64"):
        R.check_capture(graded("capture_update_state", _aliasing_capture))
    with pytest.raises(AssertionError, match="'mask'"):
        R.check_capture(graded("capture_update_state", _kept_mask))
    # The visible test's driver: what was captured (copied at once), PyTorch's state, the captured value later.
    mask = torch.tensor([True, True, False, True])
    captured, live, later = remote.call(E.capture_tiny_step, graded("capture_update_state", R.capture_update_state),
                                        torch.tensor(1.5), torch.tensor(0.25), mask)
    assert torch.equal(captured["param/weight"], live["weight"].double()) and captured["step/bias"].item() == 1.0
    assert torch.equal(captured["exp_avg_sq/weight"], live["exp_avg_sq"].double())
    assert torch.equal(captured["mask"], mask) and all(torch.equal(v, later[k]) for k, v in captured.items())
    captured, live, later = remote.call(E.capture_tiny_step, graded("capture_update_state", _aliasing_capture),
                                        torch.tensor(1.5), torch.tensor(0.25), mask)
    kept = captured["exp_avg/weight"]
    assert kept.dtype == torch.float32 and torch.equal(kept, live["exp_avg"])
    assert not torch.equal(captured["exp_avg/weight"], later["exp_avg/weight"])  # live tensors show the later step
    captured, _, later = remote.call(E.capture_tiny_step, graded("capture_update_state", _kept_mask),
                                     torch.tensor(1.5), torch.tensor(0.25), mask)
    assert torch.equal(captured["mask"], mask) and not torch.equal(later["mask"], mask)
    # In the student's own notebook (no grader) the driver runs right there, on the caller's mask: it is left as it was.
    captured, _, later = remote.call(E.capture_tiny_step, R.capture_update_state, torch.tensor(1.5),
                                     torch.tensor(0.25), mask)
    assert torch.equal(mask, torch.tensor([True, True, False, True])) and torch.equal(captured["mask"], mask)
    assert all(torch.equal(v, later[k]) for k, v in captured.items())


def test_capture_driver_ships_without_the_reference() -> None:
    """The hidden check's driver travels by value (the kernel never imports autograder) and holds no reference."""
    import pickle

    import cloudpickle

    blob = cloudpickle.dumps(R.capture_steps)
    assert b"update_state" not in blob and b"autograder.plain" not in blob
    driver = pickle.loads(blob)
    assert driver(lambda *a: 1, E.make_problem(steps=2), torch.float32) == [1, 1]
    snapshots = driver(E.snapshot, E.make_problem(steps=2), torch.float32)
    assert [s["adam"][0]["step"].item() for s in snapshots] == [1001.0, 1002.0]


def test_compare_check_names_nan_and_inexact_step_counters() -> None:
    def greater(r, c, t):
        return sorted(k for k in r if k not in c or r[k].shape != c[k].shape or (
            not torch.equal(r[k], c[k].to(r[k].dtype)) if R.exact(k, r[k])
            else bool((c[k].double() - r[k].double()).norm() > t[k] * r[k].double().norm() + 1e-12)))

    with pytest.raises(AssertionError, match="NaN or inf"):
        R.check_compare(greater, R.synthetic_cases())

    def allclose_steps(r, c, t):
        return [k for k in R.compare_update_states(r, c, t)
                if not (k.startswith("step/") and torch.allclose(r[k], c[k].double()))]

    with pytest.raises(AssertionError, match="Step counters compare exactly"):
        R.check_compare(allclose_steps, R.synthetic_cases())


# --------------------------------------------------------------------------- design exercise 6: a sharded layout


def test_shard_update_state_is_the_documented_layout(reference) -> None:
    state, world = reference[0], 3
    layout = R._layout(state, [5, 3, 1, 0, 2, 4])
    shards = E.shard_update_state(state, layout, world, padding=7.0)
    size = E.shard_size(layout, world)
    assert size == -(-sum(torch.Size(s).numel() for _, s in layout) // world) and all(
        shard[f].shape == (size,) for shard in shards for f in E.FLAT)
    flat = torch.cat([shard["param"] for shard in shards])
    assert torch.equal(flat[:4], state["param/fc2.bias"]) and bool((flat[244:] == 7.0).all())
    holders = E.holders_of(layout, world)
    assert holders["fc2.bias"] == [0] and sorted({r for ranks in holders.values() for r in ranks}) == [0, 1, 2]
    assert all(torch.equal(shard["loss"], state["loss"]) for shard in shards)


def test_sharded_check_accepts_the_references_and_names_each_break(reference, tolerances, zoo) -> None:
    """The designs' contract on the reference: correct sharded runs pass, each sharded break is named exactly,
    and zoo runs give the replicated checker's keys."""
    for world, order in ((3, [5, 3, 1, 0, 2, 4]), (4, [2, 0, 1, 5, 4, 3])):
        cases = R.sharded_cases(reference[1], zoo["zero1_bf16_autocast"][1][1], tolerances[torch.bfloat16], world,
                                order)
        verdicts = {what.split(" (")[0]: R.compare_sharded(r, s, lay, t) for what, r, s, lay, t in cases}
        assert not any(v for what, v in verdicts.items() if "correct" in what or what.startswith("the reference"))
        assert verdicts["rank 1 reports its own loss, 1% off, not the global one"] == ["loss"]
        assert all(k.startswith("step/") for k in verdicts[f"rank {world - 1}'s step counter one too high"])
        R.check_sharded(R.compare_sharded, cases)
    R.check_sharded(R.compare_sharded, R.sharded_cases(*R.other_model(3), 4, [4, 2, 0, 3, 1]))
    for what, r, shards, layout, t in R.zoo_sharded_cases(reference, tolerances, zoo, 4, [1, 0, 3, 2, 5, 4]):
        name, step = what.split("'")[1], int(what.split("step ")[1].split(" ")[0])
        assert R.compare_sharded(r, shards, layout, t) == R.compare_update_states(r, zoo[name][1][step], t)


def test_sharded_check_catches_a_per_piece_comparison(reference, tolerances) -> None:
    """The outlier case is a false alarm for a checker that judges each rank's piece alone."""
    def per_piece(r, shards, layout, t):
        size, start, bad = E.shard_size(layout, len(shards)), 0, set()
        flat = torch.cat([s["param"] for s in shards])
        for name, shape in layout:
            count, key = torch.Size(shape).numel(), f"param/{name}"
            ref = r[key].flatten()
            for lo in range(start - start % size, start + count, size):
                a, b = max(lo, start), min(lo + size, start + count)
                if not (flat[a:b] - ref[a - start:b - start]).norm() <= t[key] * ref[a - start:b - start].norm():
                    bad.add(key)
            start += count
        return sorted(bad)
    cases = [c for c in R.sharded_cases(reference[0], reference[0], tolerances[torch.float32], 4, [2, 0, 1, 5, 4, 3])
             if c[0].startswith("the reference")]
    with pytest.raises(AssertionError, match="false alarm"):
        R.check_sharded(per_piece, cases)


def test_stored_checker_verdicts_name_no_machine() -> None:
    """What the CPU that ran `store` was (torch's capability name) is not stored: `store` on another CPU would
    rewrite it while `store --check` calls the file in sync."""
    data = load("09_checker_verdicts")
    assert all(set(kernels) == {"env", "verdicts"} for kernels in data["kernels"])
